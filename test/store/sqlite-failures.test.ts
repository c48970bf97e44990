/**
 * The SQLite adapter when the disk refuses a write: some failures (SQLITE_FULL, I/O errors) roll
 * back the whole group transaction, not only the failing statement. Every write of that group must
 * then fail, never resolve as stored: an acknowledged intent that is not on disk is a lost record.
 * A real file whose size is capped (max_page_count) stands in for a full disk.
 */
import path from "node:path";
import type Database from "better-sqlite3";
import { SqliteStore } from "../../lib/store/sqlite";
import { tempDir } from "../helpers/node";

test("a full disk: every write answered as stored is on disk and in the tally, and the others fail", async () => {
	const store = new SqliteStore(path.join(tempDir(), "full.sqlite"));
	try {
		const items = await store.collection<{ id: string; k: string }>({ name: "items", fields: { k: "text" }, tally: () => ({ n: 1n }) });
		const db = (store as unknown as { db: Database.Database }).db;
		db.pragma(`max_page_count = ${Number(db.pragma("page_count", { simple: true })) + 3}`);
		const outcomes = await Promise.allSettled(Array.from({ length: 40 }, (_, i) => items.insert({ id: `id${i}`, k: `${"x".repeat(3000)}${i}` })));
		const stored = outcomes.flatMap((outcome, i) => (outcome.status === "fulfilled" && outcome.value ? [`id${i}`] : []));
		expect(outcomes.some(outcome => outcome.status === "rejected")).toBe(true);
		db.pragma("max_page_count = 1073741823");
		expect((await items.list({})).map(item => item.id).sort()).toEqual(stored.sort());
		expect(await items.tally()).toStrictEqual(stored.length ? { n: BigInt(stored.length) } : {});
	} finally {
		await store.close();
	}
});

test("a write of several statements that fails after its first undoes its whole group: no row without its event", async () => {
	const store = new SqliteStore(path.join(tempDir(), "halfway.sqlite"));
	try {
		const items = await store.collection<{ id: string; k: string }>({ name: "items", fields: { k: "text" }, outbox: true, tally: () => ({ n: 1n }) });
		const event = (subject: string, data: Record<string, unknown>) => ({ subject, type: "item.changed", at: "2026-01-01T00:00:00.000Z", data });
		// One commit group: a write before, the failing one (its row is in, its event cannot be
		// serialized), and a write after it.
		const outcomes = await Promise.allSettled([
			items.insert({ id: "before", k: "a" }, event("before", {})),
			items.insert({ id: "halfway", k: "b" }, event("halfway", { amount: 1n })),
			items.insert({ id: "after", k: "c" }, event("after", {}))
		]);
		expect(outcomes.map(outcome => outcome.status)).toStrictEqual(["rejected", "rejected", "fulfilled"]);
		expect((await items.list({})).map(item => item.id)).toStrictEqual(["after"]);
		expect((await items.events({ after: 0, limit: 10 })).events.map(e => e.subject)).toStrictEqual(["after"]);
		expect(await items.tally()).toStrictEqual({ n: 1n });
	} finally {
		await store.close();
	}
});

test("a group SQLite rolled back behind it (an I/O error in a read) fails its writes, also when a new write opens the next transaction", async () => {
	const store = new SqliteStore(path.join(tempDir(), "behind.sqlite"), 50);
	try {
		const items = await store.collection<{ id: string; k: string }>({ name: "items", fields: { k: "text" }, outbox: true, tally: () => ({ n: 1n }) });
		const db = (store as unknown as { db: Database.Database }).db;
		const event = (subject: string) => ({ subject, type: "item.changed", at: "2026-01-01T00:00:00.000Z", data: {} });
		// A ROLLBACK on the connection stands in for the one SQLite makes itself on such an error.
		const lost = items.insert({ id: "lost", k: "a" }, event("lost")).then(
			() => "stored",
			(err: Error) => err.message
		);
		db.prepare("ROLLBACK").run();
		expect(await items.tally()).toStrictEqual({});
		expect(await lost).toMatch("rolled back");

		const alsoLost = items.insert({ id: "alsoLost", k: "b" }, event("alsoLost"));
		db.prepare("ROLLBACK").run();
		const next = items.insert({ id: "next", k: "c" }, event("next"));
		const outcomes = await Promise.allSettled([alsoLost, next]);
		expect(outcomes.map(outcome => outcome.status)).toStrictEqual(["rejected", "fulfilled"]);
		expect((await items.list({})).map(item => item.id)).toStrictEqual(["next"]);
		expect((await items.events({ after: 0, limit: 10 })).events.map(e => e.subject)).toStrictEqual(["next"]);
		expect(await items.tally()).toStrictEqual({ n: 1n });
	} finally {
		await store.close();
	}
});

test("a read while a group is open answers once that group committed, and reads again if it rolled back: no answer rests on a write a crash can lose (a review)", async () => {
	const store = new SqliteStore(path.join(tempDir(), "read.sqlite"), 1000);
	try {
		const items = await store.collection<{ id: string; k: string }>({ name: "items", fields: { k: "text" }, tally: () => ({ n: 1n }) });
		const db = (store as unknown as { db: Database.Database }).db;
		const settled = (read: Promise<unknown>) => Promise.race([read.then(value => ({ value })), new Promise(resolve => setTimeout(() => resolve("waiting"), 50))]);
		// Rolled back behind the group: the reads made while it was open read again, and find nothing.
		const lost = items.insert({ id: "lost", k: "a" }).catch(() => "refused");
		const reads: Promise<unknown>[] = [items.get("lost"), items.list({}), items.count(), items.tally()];
		expect(await settled(reads[0])).toBe("waiting");
		db.prepare("ROLLBACK").run();
		// The next call on the store finds the group gone (as with an I/O error SQLite rolled back on).
		expect(await items.get("lost")).toBeNull();
		expect(await lost).toBe("refused");
		expect(await Promise.all(reads)).toStrictEqual([null, [], 0, {}]);
		// Committed: they answer what the group wrote, once it did.
		const kept = items.insert({ id: "kept", k: "b" });
		const read = items.get("kept");
		expect(await settled(read)).toBe("waiting");
		await store.close();
		expect(await kept).toBe(true);
		expect(await read).toStrictEqual({ id: "kept", k: "b" });
	} finally {
		await store.close();
	}
});
