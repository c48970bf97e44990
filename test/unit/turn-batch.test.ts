import { TurnBatch } from "../../lib/turn-batch";

const turn = () => new Promise(resolve => setImmediate(resolve));

test("items added in one turn are handled as one batch, in order, each answered with its own result", async () => {
	const batches: number[][] = [];
	const batch = new TurnBatch<number, string>(async items => (batches.push(items), items.map(i => `#${i}`)), { items: 10, weight: Infinity });
	const first = await Promise.all([batch.add(1), batch.add(2), batch.add(3)]);
	const second = await Promise.all([batch.add(4)]);
	expect([first, second]).toStrictEqual([["#1", "#2", "#3"], ["#4"]]);
	expect(batches).toStrictEqual([[1, 2, 3], [4]]);
});

test("a full batch is handed over at once; the rest of the turn makes the next one", async () => {
	const batches: number[][] = [];
	const batch = new TurnBatch<number, number>(async items => (batches.push(items), items), { items: 2, weight: Infinity });
	await Promise.all([1, 2, 3, 4, 5].map(i => batch.add(i)));
	expect(batches).toStrictEqual([[1, 2], [3, 4], [5]]);
});

test("a batch weighs at most its limit together; an item heavier than the limit goes alone", async () => {
	const batches: number[][] = [];
	const batch = new TurnBatch<number, number>(async items => (batches.push(items), items), { items: 100, weight: 10 });
	await Promise.all([4, 4, 4, 15, 1, 9, 1].map(w => batch.add(w, w)));
	expect(batches).toStrictEqual([[4, 4], [4], [15], [1, 9], [1]]);
});

test("a batch that fails, or throws, fails each of its items and no other", async () => {
	let calls = 0;
	const batch = new TurnBatch<number, number>(items => {
		calls++;
		if (calls === 1) throw new Error("thrown");
		if (calls === 2) return Promise.reject(new Error("rejected"));
		return Promise.resolve(items.length === 2 ? [items[0]] : items);
	}, { items: 10, weight: Infinity });
	await expect(Promise.all([batch.add(1), batch.add(2)])).rejects.toThrow("thrown");
	await turn();
	await expect(batch.add(3)).rejects.toThrow("rejected");
	const short = await Promise.allSettled([batch.add(4), batch.add(5)]);
	expect(short.map(outcome => outcome.status)).toStrictEqual(["fulfilled", "rejected"]);
	expect(await batch.add(6)).toBe(6);
});
