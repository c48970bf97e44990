import { Batcher } from "../../lib/batcher";

const turn = () => new Promise(resolve => setImmediate(resolve));
const wait = (ms: number) => new Promise(resolve => setTimeout(resolve, ms));
const turnOnly = { items: 10, weight: Infinity, windowMs: 0 };

test("items added in one turn are handled as one batch, in order, each answered with its own result", async () => {
	const batches: number[][] = [];
	const batcher = new Batcher<number, string>(async items => (batches.push(items), items.map(i => `#${i}`)), turnOnly);
	const first = await Promise.all([batcher.add(1), batcher.add(2), batcher.add(3)]);
	const second = await Promise.all([batcher.add(4)]);
	expect([first, second]).toStrictEqual([["#1", "#2", "#3"], ["#4"]]);
	expect(batches).toStrictEqual([[1, 2, 3], [4]]);
});

test("with a window, items of several turns make one batch, handed over when the window ends", async () => {
	const batches: number[][] = [];
	// Long enough that two turns surely fit in it, on a busy machine too.
	const batcher = new Batcher<number, number>(async items => (batches.push(items), items), { items: 10, weight: Infinity, windowMs: 300 });
	const answers = [batcher.add(1)];
	await turn();
	answers.push(batcher.add(2));
	await turn();
	expect(batches).toStrictEqual([]);
	await Promise.all(answers);
	expect(batches).toStrictEqual([[1, 2]]);
});

test("a full batch is handed over at once; the next one keeps a whole window of its own", async () => {
	const batches: number[][] = [];
	const batcher = new Batcher<number, number>(async items => (batches.push(items), items), { items: 2, weight: Infinity, windowMs: 300 });
	const first = [batcher.add(1)];
	await wait(150);
	first.push(batcher.add(2));
	const next = batcher.add(3);
	await Promise.all(first);
	expect(batches).toStrictEqual([[1, 2]]);
	// The first batch's window ended 300 ms after 1 came: it must not cut the next one's short.
	await wait(225);
	expect(batches).toStrictEqual([[1, 2]]);
	await next;
	expect(batches).toStrictEqual([[1, 2], [3]]);
});

test("a batch weighs at most its limit together; an item heavier than the limit goes alone", async () => {
	const batches: number[][] = [];
	const batcher = new Batcher<number, number>(async items => (batches.push(items), items), { items: 100, weight: 10, windowMs: 0 });
	await Promise.all([4, 4, 4, 15, 1, 9, 1].map(w => batcher.add(w, w)));
	expect(batches).toStrictEqual([[4, 4], [4], [15], [1, 9], [1]]);
});

test("a batch that fails, or throws, fails each of its items and no other", async () => {
	let calls = 0;
	const batcher = new Batcher<number, number>(items => {
		calls++;
		if (calls === 1) throw new Error("thrown");
		if (calls === 2) return Promise.reject(new Error("rejected"));
		return Promise.resolve(items.length === 2 ? [items[0]] : items);
	}, turnOnly);
	await expect(Promise.all([batcher.add(1), batcher.add(2)])).rejects.toThrow("thrown");
	await turn();
	await expect(batcher.add(3)).rejects.toThrow("rejected");
	const short = await Promise.allSettled([batcher.add(4), batcher.add(5)]);
	expect(short.map(outcome => outcome.status)).toStrictEqual(["fulfilled", "rejected"]);
	expect(await batcher.add(6)).toBe(6);
});

test("a batch that reaches `enough` items leaves at the end of that turn, with every item of the turn, without waiting out its window", async () => {
	const batches: number[][] = [];
	const batcher = new Batcher<number, number>(async items => (batches.push(items), items), { items: 10, weight: Infinity, windowMs: 60_000, enough: 3 });
	const answers = [1, 2, 3, 4].map(i => batcher.add(i));
	await turn();
	expect(batches).toStrictEqual([[1, 2, 3, 4]]);
	expect(await Promise.all(answers)).toStrictEqual([1, 2, 3, 4]);
});

test("a batch short of `enough` waits for its window, and an early batch's window does not cut the next one short", async () => {
	const batches: number[][] = [];
	const batcher = new Batcher<number, number>(async items => (batches.push(items), items), { items: 10, weight: Infinity, windowMs: 300, enough: 2 });
	const early = [batcher.add(1), batcher.add(2)];
	await turn();
	expect(batches).toStrictEqual([[1, 2]]);
	await Promise.all(early);
	await wait(150);
	const late = batcher.add(3);
	await turn();
	expect(batches).toStrictEqual([[1, 2]]);
	// The first batch's window ended 300 ms after 1 came: the next one keeps its own whole window.
	await wait(200);
	expect(batches).toStrictEqual([[1, 2]]);
	await late;
	expect(batches).toStrictEqual([[1, 2], [3]]);
});
