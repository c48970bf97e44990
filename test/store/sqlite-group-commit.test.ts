/**
 * The SQLite adapter's group commit: the writes of one window share one commit, and a group of
 * GROUP_COMMIT_WRITES commits at the end of its turn instead of waiting out its window. A write's
 * promise resolves only once it is committed, so when each one resolves tells when its group did.
 */
import path from "node:path";
import { StoreUnavailableError } from "../../lib/store";
import { GROUP_COMMIT_WRITES, SqliteStore } from "../../lib/store/sqlite";
import { tempDir } from "../helpers/node";

const wait = (ms: number) => new Promise(resolve => setTimeout(resolve, ms));

/** Which of `writes` have resolved by now (settled promises run their callbacks first). */
async function resolvedOf(writes: Promise<unknown>[]): Promise<boolean[]> {
	const done = writes.map(() => false);
	writes.forEach((write, i) => void write.then(() => (done[i] = true)));
	await wait(0);
	return done;
}

async function open(windowMs: number) {
	const file = path.join(tempDir(), "group.sqlite");
	const store = new SqliteStore(file, windowMs);
	const items = await store.collection<{ id: string; k: string }>({ name: "items", fields: { k: "text" } });
	return { file, store, items };
}

test(`a group of ${GROUP_COMMIT_WRITES} writes commits at the end of its turn, without waiting out a long window`, async () => {
	const { store, items } = await open(60_000);
	try {
		const writes = Array.from({ length: GROUP_COMMIT_WRITES }, (_, i) => items.insert({ id: `id${i}`, k: "x" }));
		await Promise.all(writes);
		expect((await items.list({})).length).toBe(GROUP_COMMIT_WRITES);
	} finally {
		await store.close();
	}
});

test("a smaller group waits for its window; an early group's window does not cut the next group's short", async () => {
	const { file, store, items } = await open(1000);
	try {
		const few = Array.from({ length: GROUP_COMMIT_WRITES - 1 }, (_, i) => items.insert({ id: `few${i}`, k: "x" }));
		await wait(200);
		expect(await resolvedOf(few)).not.toContain(true);
		await Promise.all(few);

		const full = Array.from({ length: GROUP_COMMIT_WRITES }, (_, i) => items.insert({ id: `full${i}`, k: "x" }));
		await Promise.all(full);
		await wait(500);
		const next = items.insert({ id: "next", k: "x" });
		// The early group's window ends about now: the next write must keep its own whole window.
		await wait(700);
		expect(await resolvedOf([next])).toStrictEqual([false]);
		await next;
	} finally {
		await store.close();
	}
	const reopened = new SqliteStore(file, 0);
	try {
		const items = await reopened.collection<{ id: string; k: string }>({ name: "items", fields: { k: "text" } });
		expect((await items.list({})).length).toBe(2 * GROUP_COMMIT_WRITES);
	} finally {
		await reopened.close();
	}
});

test("closing commits the group waiting out its window: its writes resolve as stored, and a write after the close is refused as unavailable", async () => {
	const { file, store, items } = await open(60_000);
	const waiting = [items.insert({ id: "a", k: "x" }), items.update("a", {}, { id: "a", k: "y" }), items.insert({ id: "b", k: "x" })];
	await store.close();
	expect(await Promise.all(waiting)).toStrictEqual([true, true, true]);
	await expect(items.insert({ id: "c", k: "x" })).rejects.toBeInstanceOf(StoreUnavailableError);
	const reopened = new SqliteStore(file, 0);
	try {
		const again = await reopened.collection<{ id: string; k: string }>({ name: "items", fields: { k: "text" } });
		expect(await again.list({ orderBy: ["id", "asc"] })).toStrictEqual([{ id: "a", k: "y" }, { id: "b", k: "x" }]);
	} finally {
		await reopened.close();
	}
});
