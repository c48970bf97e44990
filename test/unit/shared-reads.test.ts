import { SharedReads } from "../../lib/shared-reads";

describe("SharedReads", () => {
	it("shares a read in flight per key, and reads again once it is answered (nothing kept)", async () => {
		const reads = new SharedReads<string>();
		let made = 0;
		const read = () => new Promise<string>(resolve => setTimeout(() => resolve(`answer ${++made}`), 10));
		expect(await Promise.all([reads.get("a", read), reads.get("a", read), reads.get("b", read)])).toEqual(["answer 1", "answer 1", "answer 2"]);
		expect(await reads.get("a", read)).toBe("answer 3");
	});

	it("keeps what `keep` takes for keepMs, never a failure", async () => {
		const reads = new SharedReads<string | null>(60_000, answer => answer !== null);
		let made = 0;
		expect(await reads.get("shown", async () => `shown ${++made}`)).toBe("shown 1");
		expect(await reads.get("shown", async () => `shown ${++made}`)).toBe("shown 1");
		expect(await reads.get("none yet", async () => (made++, null))).toBeNull();
		expect(await reads.get("none yet", async () => `landed ${++made}`)).toBe("landed 3");
		await expect(reads.get("down", () => Promise.reject(new Error("down")))).rejects.toThrow("down");
		expect(await reads.get("down", async () => "back")).toBe("back");
	});

	it("an answer `keep` cannot judge is answered, not kept, and throws nowhere (a review: the throw was unhandled, and ended the process)", async () => {
		const unhandled: unknown[] = [];
		const onUnhandled = (reason: unknown) => unhandled.push(reason);
		process.on("unhandledRejection", onUnhandled);
		try {
			const reads = new SharedReads<{ contents: { notShown?: true } } | null>(60_000, answer => answer !== null && !answer.contents.notShown);
			let made = 0;
			const lying = async () => (made++, 0 as unknown as null);
			expect(await reads.get("sig", lying)).toBe(0);
			expect(await reads.get("sig", lying)).toBe(0);
			expect(made).toBe(2);
			await new Promise(resolve => setImmediate(resolve));
			expect(unhandled).toEqual([]);
		} finally {
			process.off("unhandledRejection", onUnhandled);
		}
	});

	it("keeps at most maxKeys answers: the lapsed go first, then all", async () => {
		const reads = new SharedReads<number>(60_000, () => true, 2);
		let made = 0;
		const read = async () => ++made;
		await reads.get("a", read);
		await reads.get("b", read);
		await reads.get("c", read);
		// Full with none lapsed: all went, and "a" is read afresh.
		expect(await reads.get("a", read)).toBe(4);
		expect(await reads.get("c", read)).toBe(3);
	});
});
