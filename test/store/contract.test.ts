/**
 * The store contract: the same tests against every adapter, so that the embedded (SQLite) and the
 * distributed (MongoDB) mode cannot drift apart. SQLite always runs, on a real file; MongoDB runs
 * against MONGO_URL, else against mongodb-memory-server when it can start one, else it is reported
 * as skipped.
 */
import Database from "better-sqlite3";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { MongoClient } from "mongodb";
import { MongoMemoryReplSet } from "mongodb-memory-server-core";
import { StoreUnavailableError, UniqueConflictError, mongoDatabaseName, openStore, type Collection, type CollectionSpec, type Doc, type Store } from "../../lib/store";
import { MongoStore } from "../../lib/store/mongodb";

interface Item extends Doc {
	status?: string | null;
	rank?: number | null;
	active?: boolean;
	paymentId?: string | null;
	payer?: string | null;
	nonce?: number | null;
	version?: number;
	[extra: string]: unknown;
}

function itemSpec(name: string): CollectionSpec {
	return {
		name,
		fields: { status: "text", rank: "integer", active: "boolean", paymentId: "text", payer: "text", nonce: "integer", version: "integer" },
		unique: [["paymentId"], ["payer", "nonce"]],
		// Every query shape below needs an index that serves it (servingIndex), as in the services.
		indexes: [["status", "rank"], ["rank"], ["status"], ["active", "rank"], ["version"]]
	};
}

const ids = (docs: Doc[]) => docs.map(d => d.id);
const sortedIds = (docs: Doc[]) => ids(docs).sort();

/**
 * Changes a stored document as a version of the adapter that keeps no views did: the document and
 * its declared columns, everything else of the row or stored document handed back as it was.
 */
type LegacyUpdate = (collection: string, id: string, change: Record<string, unknown>) => Promise<void>;

/**
 * `oneConnection`: the adapter's writers share one connection per file (SQLite: a file has one
 * owning process, and its group commit holds the write lock until the end of the event-loop turn),
 * so racing writers race inside it rather than across connections.
 */
/**
 * `dropIndex`: drops a plain index of a collection, as a replica of an earlier version that does not
 * declare it does at its start (MongoDB only: a SQLite file has one owner process).
 */
function describeStoreContract(name: string, open: () => Promise<Store>, cleanup: () => Promise<void>, legacyUpdate: LegacyUpdate, run = true, oneConnection = false, dropIndex?: (collection: string, index: string) => Promise<void>): void {
	(run ? describe : describe.skip)(`${name} store contract`, () => {
		let store: Store;
		let collections = 0;
		const fresh = () => store.collection<Item>(itemSpec(`items_${++collections}`));
		/** A fresh collection through this store and through a second writer (another connection where the adapter has one). */
		async function withTwoWriters(race: (items: Collection<Item>, otherItems: Collection<Item>) => Promise<void>): Promise<void> {
			const spec = itemSpec(`items_${++collections}`);
			const other = oneConnection ? store : await open();
			try {
				await race(await store.collection<Item>(spec), await other.collection<Item>(spec));
			} finally {
				if (other !== store) await other.close();
			}
		}

		beforeAll(async () => {
			store = await open();
		});

		afterAll(async () => {
			await store?.close();
			await cleanup();
		});

		test("reports its kind", () => {
			expect(store.kind).toBe(name);
		});

		test("insert writes a document and refuses a taken id", async () => {
			const items = await fresh();
			expect(await items.insert({ id: "a", status: "open", rank: 1 })).toBe(true);
			expect(await items.insert({ id: "a", status: "other", rank: 2 })).toBe(false);
			expect(await items.get("a")).toStrictEqual({ id: "a", status: "open", rank: 1 });
			expect(await items.get("missing")).toBeNull();
			expect(await items.count()).toBe(1);
		});

		(dropIndex ? test : test.skip)("a list whose index a replica of an earlier version dropped makes the indexes again and answers", async () => {
			const spec = itemSpec(`items_${++collections}`);
			const items = await store.collection<Item>(spec);
			for (const [id, rank] of [["a", 2], ["b", 1]] as const) expect(await items.insert({ id, status: "open", rank })).toBe(true);
			await dropIndex!(spec.name, "i_status_rank_id");
			expect(ids(await items.list({ where: { status: "open" }, orderBy: ["rank", "asc"] }))).toEqual(["b", "a"]);
			expect(ids(await items.list({ where: { status: "open" }, orderBy: ["rank", "desc"] }))).toEqual(["a", "b"]);
		});

		test("insert refuses a taken unique group and writes nothing", async () => {
			const items = await fresh();
			expect(await items.insert({ id: "a", paymentId: "p1", payer: "alice", nonce: 1 })).toBe(true);
			expect(await items.insert({ id: "b", paymentId: "p1", payer: "bob", nonce: 1 })).toBe(false);
			expect(await items.insert({ id: "c", paymentId: "p2", payer: "alice", nonce: 1 })).toBe(false);
			expect(await items.insert({ id: "d", paymentId: "p3", payer: "alice", nonce: 2 })).toBe(true);
			expect(await items.get("b")).toBeNull();
			expect(await items.get("c")).toBeNull();
			expect(sortedIds(await items.list())).toEqual(["a", "d"]);
		});

		test("a unique group binds only documents whose fields in it are all non-null", async () => {
			const items = await fresh();
			expect(await items.insert({ id: "a", paymentId: null, payer: "alice", nonce: null })).toBe(true);
			expect(await items.insert({ id: "b", paymentId: null, payer: "alice", nonce: null })).toBe(true);
			expect(await items.insert({ id: "c" })).toBe(true);
			expect(await items.insert({ id: "d" })).toBe(true);
			expect(await items.count()).toBe(4);
		});

		test("findOne returns a matching document or null", async () => {
			const items = await fresh();
			await items.insert({ id: "a", paymentId: "p1", status: "open" });
			await items.insert({ id: "b", paymentId: "p2", status: "done" });
			expect(await items.findOne({ paymentId: "p2" })).toStrictEqual({ id: "b", paymentId: "p2", status: "done" });
			expect(await items.findOne({ paymentId: "p1", status: "done" })).toBeNull();
		});

		test("documents round-trip exactly, nested objects and arrays included", async () => {
			const items = await fresh();
			const doc: Item = {
				id: "r1",
				status: "open",
				rank: 7,
				active: true,
				paymentId: null,
				payload: { nested: { list: [1, "two", null, { three: 3.5 }, [false]], empty: {}, none: [] } },
				big: Number.MAX_SAFE_INTEGER,
				fraction: -0.25,
				text: 'héllo ✓ "quoted"\n',
				tags: ["x", "y"]
			};
			await items.insert(doc);
			expect(await items.get("r1")).toStrictEqual(doc);
			expect(await items.findOne({ status: "open" })).toStrictEqual(doc);
			expect(await items.list()).toStrictEqual([doc]);
		});

		test("undefined properties are left out", async () => {
			const items = await fresh();
			await items.insert({ id: "a", status: undefined, note: undefined });
			expect(await items.get("a")).toStrictEqual({ id: "a" });
		});

		test("a declared field must hold a scalar", async () => {
			const items = await fresh();
			await expect(items.insert({ id: "a", status: { nested: true } as unknown as string })).rejects.toThrow(/must be a scalar/);
			expect(await items.count()).toBe(0);
		});

		describe("conditions", () => {
			test("an undefined condition is refused, not ignored, in a compare-and-set and in a query", async () => {
				const items = await fresh();
				await items.insert({ id: "a", status: "open", version: 2 });
				const stale = { version: undefined } as unknown as { version: number };
				await expect(items.update("a", stale, { id: "a", status: "done", version: 3 })).rejects.toThrow(/undefined/);
				await expect(items.remove("a", stale)).rejects.toThrow(/undefined/);
				await expect(items.list({ where: { status: undefined as unknown as string } })).rejects.toThrow(/undefined/);
				await expect(items.list({ where: { rank: { lt: undefined as unknown as number } } })).rejects.toThrow(/undefined/);
				expect(await items.get("a")).toStrictEqual({ id: "a", status: "open", version: 2 });
			});

			test("a value of the wrong type is refused: a number never matches a text field, nor a string an integer one", async () => {
				const items = await fresh();
				await items.insert({ id: "a", status: "5", rank: 5, active: true, version: 1 });
				await expect(items.list({ where: { rank: "5" } })).rejects.toThrow(/integer/);
				await expect(items.list({ where: { status: 5 } })).rejects.toThrow(/text/);
				await expect(items.list({ where: { active: 1 } })).rejects.toThrow(/boolean/);
				await expect(items.list({ where: { rank: { in: [5, "5"] } } })).rejects.toThrow(/integer/);
				await expect(items.update("a", { version: "1" as unknown as number }, { id: "a", version: 2 })).rejects.toThrow(/integer/);
				expect(ids(await items.list({ where: { status: "5", rank: 5 } }))).toEqual(["a"]);
				expect(ids(await items.list({ where: { active: true } }))).toEqual(["a"]);
				expect(await items.get("a")).toMatchObject({ version: 1 });
			});

			test("a query no index serves is refused", async () => {
				const items = await fresh();
				await expect(items.list({ where: { nonce: 1 } })).rejects.toThrow(/no index serves/);
				await expect(items.list({ orderBy: ["nonce", "asc"] })).rejects.toThrow(/no index serves/);
				await expect(items.list({ where: { status: "open" }, orderBy: ["version", "asc"] })).rejects.toThrow(/no index serves/);
				await expect(items.count({ nonce: { gt: 1 } })).rejects.toThrow(/no index serves/);
			});

			test("a condition of `in` and another operator is refused, not read as the `in` alone (a review)", async () => {
				const items = await fresh();
				expect(await items.insert({ id: "a", status: "open", rank: 5 })).toBe(true);
				await expect(items.list({ where: { rank: { in: [5], lt: 3 } as never } })).rejects.toThrow(/one operator/);
				await expect(items.update("a", { rank: { in: [5], gt: 9 } as never }, { id: "a", status: "open", rank: 6 })).rejects.toThrow(/one operator/);
				expect(await items.get("a")).toMatchObject({ rank: 5 });
			});

			test("racing inserts on a unique group: exactly one wins", async () => {
				await withTwoWriters(async (items, otherItems) => {
					const results = await Promise.all(Array.from({ length: 8 }, (_, i) => (i % 2 ? otherItems : items).insert({ id: `r${i}`, payer: "alice", nonce: 7 })));
					expect(results.filter(Boolean)).toHaveLength(1);
					expect(await items.count()).toBe(1);
				});
			});
		});

		test("a collection reopened by a newer version, with a field and an index declared since, queries its existing documents by it", async () => {
			const name = `items_${++collections}`;
			const older = await store.collection<Item>({ name, fields: { status: "text" }, indexes: [["status"]] });
			await older.insert({ id: "a", status: "open", owner: "alice", flag: true });
			await older.insert({ id: "b", status: "open", owner: { nested: 1 } });
			await older.insert({ id: "c", status: "done" });
			const newer = await store.collection<Item>({ name, fields: { status: "text", owner: "text", flag: "boolean" }, unique: [["owner"]], indexes: [["owner", "status"], ["flag"]] });
			expect(ids(await newer.list({ where: { owner: "alice", status: "open" } }))).toEqual(["a"]);
			expect(ids(await newer.list({ where: { flag: true } }))).toEqual(["a"]);
			expect(await newer.insert({ id: "d", owner: "alice" })).toBe(false);
			expect(await newer.get("b")).toStrictEqual({ id: "b", status: "open", owner: { nested: 1 } });
		});

		test("a sparse index serves a field set to a value, in id order page by page, and holds only the documents that set it", async () => {
			const name = `items_${++collections}`;
			const items = await store.collection<Item>({ ...itemSpec(name), sparseIndexes: [["nonce"]] });
			for (const [id, nonce] of [["d", 7], ["a", 7], ["x", null], ["c", 7], ["b", 8], ["y", null]] as const) await items.insert({ id, nonce });
			const page = (after?: string) => items.list({ where: { nonce: 7 }, orderBy: ["id", "asc"], limit: 2, ...(after ? { after: { value: after, id: after } } : {}) });
			expect(ids(await page())).toEqual(["a", "c"]);
			expect(ids(await page("c"))).toEqual(["d"]);
			// The documents without one are not in it: it serves no query for them.
			await expect(items.list({ where: { nonce: null }, orderBy: ["id", "asc"] })).rejects.toThrow(/no index serves/);
			// Nor an ordered list of several values, which SQLite would walk value by value: refused as a whole, as MongoDB refuses it (a review).
			await expect(items.list({ where: { nonce: { in: [7, 8] } }, orderBy: ["id", "asc"] })).rejects.toThrow(/no index serves/);
			if (store.kind === "sqlite") {
				const db = new Database(path.join(sqliteDir, "contract.sqlite"), { readonly: true });
				try {
					const { sql } = db.prepare("SELECT sql FROM sqlite_master WHERE name = ?").get(`${name}_s_nonce_id`) as { sql: string };
					expect(sql).toMatch(/WHERE "nonce" IS NOT NULL$/);
				} finally {
					db.close();
				}
			}
		});

		describe("tally", () => {
			const tallied = (name: string): CollectionSpec<Item> => ({
				...itemSpec(name),
				tally: item => ({ [`status:${item.status ?? "none"}`]: 1n, ...(item.status === "done" ? { amount: BigInt(String(item.amount ?? 0)) } : {}) })
			});

			test("moves with every insert, update and remove, and only for the writes that happened", async () => {
				const items = await store.collection<Item>(tallied(`items_${++collections}`));
				expect(await items.tally()).toStrictEqual({});
				await items.insert({ id: "a", status: "open", version: 1, amount: "18446744073709551615" });
				await items.insert({ id: "b", status: "open", version: 1, amount: "18446744073709551615" });
				expect(await items.insert({ id: "a", status: "done", version: 1 })).toBe(false);
				expect(await items.tally()).toStrictEqual({ "status:open": 2n });
				expect(await items.update("a", { version: 1 }, { id: "a", status: "done", version: 2, amount: "18446744073709551615" })).toBe(true);
				expect(await items.update("a", { version: 1 }, { id: "a", status: "open", version: 2 })).toBe(false);
				await items.update("b", { version: 1 }, { id: "b", status: "done", version: 2, amount: "18446744073709551615" });
				// Above 2^64: sums are exact, whatever the adapter's integers are.
				expect(await items.tally()).toStrictEqual({ "status:done": 2n, amount: 36893488147419103230n });
				expect(await items.remove("a", { version: 1 })).toBe(false);
				expect(await items.remove("a")).toBe(true);
				expect(await items.removeWhere({ status: "done" }, 10)).toBe(1);
				expect(await items.tally()).toStrictEqual({});
			});

			test("read by prefixes: only the keys that start with one of them", async () => {
				const items = await store.collection<Item>(tallied(`items_${++collections}`));
				await items.insert({ id: "a", status: "open" });
				await items.insert({ id: "b", status: "done", amount: "7" });
				expect(await items.tally(["status:"])).toStrictEqual({ "status:open": 1n, "status:done": 1n });
				expect(await items.tally(["amount", "none:"])).toStrictEqual({ amount: 7n });
				expect(await items.tally(["status:d", "status:o"])).toStrictEqual({ "status:done": 1n, "status:open": 1n });
				expect(await items.tally(["missing:"])).toStrictEqual({});
				expect(await items.tally([""])).toStrictEqual(await items.tally());
			});

			test("a write whose tally fails is undone whole: document and tally stay as they were", async () => {
				const spec = tallied(`items_${++collections}`);
				const items = await store.collection<Item>({ ...spec, tally: item => (item.status === "boom" ? (() => { throw new Error("boom"); })() : spec.tally!(item)) });
				await items.insert({ id: "a", status: "open", version: 1 });
				await expect(items.update("a", { version: 1 }, { id: "a", status: "boom", version: 2 })).rejects.toThrow("boom");
				await expect(items.insert({ id: "b", status: "boom" })).rejects.toThrow("boom");
				expect(await items.get("a")).toStrictEqual({ id: "a", status: "open", version: 1 });
				expect(await items.get("b")).toBeNull();
				expect(await items.tally()).toStrictEqual({ "status:open": 1n });
				expect(await items.update("a", { version: 1 }, { id: "a", status: "done", version: 2, amount: "3" })).toBe(true);
				expect(await items.tally()).toStrictEqual({ "status:done": 1n, amount: 3n });
			});

			test("racing updates count once", async () => {
				await withTwoWriters(async () => undefined);
				const items = await store.collection<Item>(tallied(`items_${++collections}`));
				await items.insert({ id: "a", status: "open", version: 1 });
				const wins = await Promise.all(Array.from({ length: 6 }, (_, i) => items.update("a", { version: 1 }, { id: "a", status: `s${i}`, version: 2 })));
				expect(wins.filter(Boolean)).toHaveLength(1);
				const winner = (await items.get("a"))!.status;
				expect(await items.tally()).toStrictEqual({ [`status:${winner}`]: 1n });
			});

			test("a tally first kept on a collection that has documents starts from them, once", async () => {
				const name = `items_${++collections}`;
				const plain = await store.collection<Item>(itemSpec(name));
				await plain.insert({ id: "a", status: "open" });
				await plain.insert({ id: "b", status: "done", amount: "5" });
				const items = await store.collection<Item>(tallied(name));
				expect(await items.tally()).toStrictEqual({ "status:open": 1n, "status:done": 1n, amount: 5n });
				await items.insert({ id: "c", status: "open" });
				const again = await store.collection<Item>(tallied(name));
				expect(await again.tally()).toStrictEqual({ "status:open": 2n, "status:done": 1n, amount: 5n });
				// Documents stored before the tally move it right when they change or go.
				expect(await again.update("a", {}, { id: "a", status: "done", amount: "7" })).toBe(true);
				expect(await again.remove("b")).toBe(true);
				expect(await again.tally()).toStrictEqual({ "status:open": 1n, "status:done": 1n, amount: 7n });
			});
		});

		describe("outbox", () => {
			const logged = (name: string): CollectionSpec<Item> => ({ ...itemSpec(name), outbox: true });
			const event = (subject: string, state: string, at = "2026-01-01T00:00:00.000Z") => ({ subject, type: "item.changed", at, data: { state } });

			test("writes an event with each write that happened, numbered in order, and none with a write refused", async () => {
				const items = await store.collection<Item>(logged(`items_${++collections}`));
				expect(await items.latestEvent()).toBeNull();
				expect(await items.insert({ id: "a", status: "open", version: 1 }, event("a", "open"))).toBe(true);
				expect(await items.insert({ id: "b", status: "open", version: 1 }, event("b", "open"))).toBe(true);
				expect(await items.insert({ id: "a", status: "open", version: 1 }, event("a", "again"))).toBe(false);
				expect(await items.update("a", { version: 1 }, { id: "a", status: "done", version: 2 }, event("a", "done"))).toBe(true);
				expect(await items.update("a", { version: 1 }, { id: "a", status: "lost", version: 2 }, event("a", "lost"))).toBe(false);
				const { events: all } = await items.events({ after: 0, limit: 10 });
				expect(all.map(e => [e.subject, e.data.state])).toStrictEqual([["a", "open"], ["b", "open"], ["a", "done"]]);
				expect(all.map(e => e.seq)).toStrictEqual([...all.map(e => e.seq)].sort((x, y) => x - y));
				expect(new Set(all.map(e => e.seq)).size).toBe(3);
				expect((await items.events({ after: all[0].seq, limit: 1 })).events.map(e => e.seq)).toStrictEqual([all[1].seq]);
				expect((await items.events({ after: 0, subject: "a", limit: 10 })).events.map(e => e.data.state)).toStrictEqual(["open", "done"]);
				// How far a read saw: the log's end, also past the subject's last event; the last event of a full page.
				expect((await items.events({ after: 0, subject: "b", limit: 10 })).through).toBe(all[2].seq);
				expect((await items.events({ after: 0, subject: "a", limit: 1 })).through).toBe(all[0].seq);
				expect(await items.events({ after: all[2].seq, limit: 10 })).toStrictEqual({ events: [], through: all[2].seq });
				expect((await items.latestEvent("a"))?.data).toStrictEqual({ state: "done" });
				expect((await items.latestEvent("b"))?.seq).toBe(all[1].seq);
				expect((await items.latestEvent())?.seq).toBe(all[2].seq);
				expect(await items.latestEvent("nobody")).toBeNull();
			});

			test("a write that fails writes no event, and an event is refused where no log is kept", async () => {
				const items = await store.collection<Item>(logged(`items_${++collections}`));
				await items.insert({ id: "a", paymentId: "p1", version: 1 }, event("a", "one"));
				await items.insert({ id: "b", paymentId: "p2", version: 1 }, event("b", "one"));
				await expect(items.update("b", { version: 1 }, { id: "b", paymentId: "p1", version: 2 }, event("b", "two"))).rejects.toThrow(UniqueConflictError);
				expect((await items.events({ after: 0, limit: 10 })).events.map(e => e.subject)).toStrictEqual(["a", "b"]);
				const plain = await fresh();
				await expect(plain.insert({ id: "a" }, event("a", "one"))).rejects.toThrow(/event log/);
				expect(await plain.get("a")).toBeNull();
			});

			test("racing updates write one event", async () => {
				const items = await store.collection<Item>(logged(`items_${++collections}`));
				await items.insert({ id: "a", status: "open", version: 1 }, event("a", "open"));
				const wins = await Promise.all(Array.from({ length: 6 }, (_, i) => items.update("a", { version: 1 }, { id: "a", status: `s${i}`, version: 2 }, event("a", `s${i}`))));
				expect(wins.filter(Boolean)).toHaveLength(1);
				const { events } = await items.events({ after: 0, subject: "a", limit: 10 });
				expect(events.map(e => e.data.state)).toStrictEqual(["open", (await items.get("a"))!.status]);
			});

			// MongoDB numbers events with a counter document beside the log (SQLite with the log's own rowid).
			if (name === "mongodb")
				test("a counter restored behind its log (a backup taken while owners wrote) is raised past it: at a write that meets a taken number, and at start", async () => {
					const spec = logged(`items_${++collections}`);
					const items = await store.collection<Item>(spec);
					await items.insert({ id: "a", version: 1 }, event("a", "open"));
					await items.insert({ id: "b", version: 1 }, event("b", "open"));
					const newest = (await items.latestEvent())!.seq;
					await legacyUpdate("__sequences", spec.name, { seq: 0 });
					// Not answered as a taken id (false), nor failed: numbered after the log's newest.
					expect(await items.insert({ id: "c", version: 1 }, event("c", "open"))).toBe(true);
					expect((await items.latestEvent())!.seq).toBe(newest + 1);
					expect(await items.update("a", { version: 1 }, { id: "a", version: 2 }, event("a", "done"))).toBe(true);
					await legacyUpdate("__sequences", spec.name, { seq: 1 });
					const reopened = await open();
					try {
						const again = await reopened.collection<Item>(spec);
						expect(await again.insert({ id: "d", version: 1 }, event("d", "open"))).toBe(true);
						expect((await again.events({ after: 0, limit: 10 })).events.map(e => [e.subject, e.seq])).toStrictEqual([
							["a", newest - 1],
							["b", newest],
							["c", newest + 1],
							["a", newest + 2],
							["d", newest + 3]
						]);
					} finally {
						await reopened.close();
					}
				});

			test("prunes the oldest events from before a time, in bounded batches, never the newest, and never reuses a number", async () => {
				const items = await store.collection<Item>(logged(`items_${++collections}`));
				for (let i = 0; i < 5; i++) await items.insert({ id: `old${i}` }, event(`old${i}`, "open", `2026-01-0${i + 1}T00:00:00.000Z`));
				await items.insert({ id: "new" }, event("new", "open", "2026-02-01T00:00:00.000Z"));
				expect(await items.pruneEvents("2026-01-15T00:00:00.000Z", 2)).toBe(2);
				expect((await items.events({ after: 0, limit: 10 })).events.map(e => e.subject)).toStrictEqual(["old2", "old3", "old4", "new"]);
				expect(await items.pruneEvents("2026-01-15T00:00:00.000Z", 10)).toBe(3);
				expect(await items.pruneEvents("2026-01-15T00:00:00.000Z", 10)).toBe(0);
				// Everything is old now: all but the newest go, which keeps the numbering going.
				await items.insert({ id: "newer" }, event("newer", "open", "2026-03-01T00:00:00.000Z"));
				const newest = (await items.latestEvent())!.seq;
				expect(await items.pruneEvents("2027-01-01T00:00:00.000Z", 10)).toBe(1);
				expect((await items.events({ after: 0, limit: 10 })).events.map(e => e.seq)).toStrictEqual([newest]);
				expect(await items.pruneEvents("2027-01-01T00:00:00.000Z", 10)).toBe(0);
				await items.insert({ id: "next" }, event("next", "open"));
				expect((await items.latestEvent())!.seq).toBe(newest + 1);
			});
		});

		describe("update", () => {
			test("replaces the document while it matches the expectation", async () => {
				const items = await fresh();
				await items.insert({ id: "a", status: "open", version: 1, paymentId: "p1" });
				expect(await items.update("a", { version: 1, status: "open" }, { id: "a", status: "done", version: 2, extra: [1] })).toBe(true);
				// A replacement: fields left out of `next` are gone, from the document and from queries.
				expect(await items.get("a")).toStrictEqual({ id: "a", status: "done", version: 2, extra: [1] });
				expect(await items.findOne({ paymentId: "p1" })).toBeNull();
				expect(await items.insert({ id: "b", paymentId: "p1" })).toBe(true);
			});

			test("refuses when the document no longer matches", async () => {
				const items = await fresh();
				await items.insert({ id: "a", status: "open", version: 2 });
				expect(await items.update("a", { version: 1 }, { id: "a", status: "done", version: 2 })).toBe(false);
				expect(await items.update("a", { version: 2, status: "done" }, { id: "a", status: "done", version: 3 })).toBe(false);
				expect(await items.get("a")).toStrictEqual({ id: "a", status: "open", version: 2 });
			});

			test("refuses a missing id", async () => {
				const items = await fresh();
				await items.insert({ id: "a", version: 1 });
				expect(await items.update("b", { version: 1 }, { id: "b", version: 2 })).toBe(false);
				expect(await items.update("b", {}, { id: "b", version: 2 })).toBe(false);
				expect(await items.get("b")).toBeNull();
				expect(await items.count()).toBe(1);
			});

			test("an expectation on id cannot redirect the update to another document", async () => {
				const items = await fresh();
				await items.insert({ id: "a", version: 1 });
				await items.insert({ id: "b", version: 1 });
				expect(await items.update("c", { id: { in: ["a", "b"] } }, { id: "c", version: 2 })).toBe(false);
				expect(await items.list({ orderBy: ["id", "asc"] })).toStrictEqual([
					{ id: "a", version: 1 },
					{ id: "b", version: 1 }
				]);
			});

			test("lets exactly one of racing updates with the same expectation win", async () => {
				await withTwoWriters(async (items, otherItems) => {
					await items.insert({ id: "a", version: 1 });
					const contenders = Array.from({ length: 8 }, (_, i) => ({ id: "a", version: 2, winner: i }));
					const results = await Promise.all(contenders.map((next, i) => (i % 2 ? otherItems : items).update("a", { version: 1 }, next)));
					expect(results.filter(Boolean)).toHaveLength(1);
					expect(await items.get("a")).toStrictEqual(contenders[results.indexOf(true)]);
				});
			});

			test("throws UniqueConflictError and changes nothing when next takes a unique group; the group's other writes stand", async () => {
				const items = await fresh();
				await items.insert({ id: "a", paymentId: "p1", version: 1 });
				await items.insert({ id: "b", paymentId: "p2", version: 1 });
				// In one group commit on SQLite: the conflicting statement alone is undone.
				const [conflict, other] = await Promise.allSettled([items.update("b", { version: 1 }, { id: "b", paymentId: "p1", version: 2 }), items.update("a", { version: 1 }, { id: "a", paymentId: "p1", version: 2 })]);
				expect(conflict).toMatchObject({ status: "rejected", reason: expect.any(UniqueConflictError) });
				expect(other).toEqual({ status: "fulfilled", value: true });
				expect(await items.get("b")).toStrictEqual({ id: "b", paymentId: "p2", version: 1 });
				expect(await items.get("a")).toStrictEqual({ id: "a", paymentId: "p1", version: 2 });
				// A value released is free again.
				await items.update("a", { version: 2 }, { id: "a", paymentId: null, version: 3 });
				expect(await items.update("b", { version: 1 }, { id: "b", paymentId: "p1", version: 2 })).toBe(true);
			});

			test("cannot change a document's id", async () => {
				const items = await fresh();
				await items.insert({ id: "a", version: 1 });
				await expect(items.update("a", {}, { id: "b", version: 2 })).rejects.toThrow(/cannot change/);
			});
		});

		describe("remove", () => {
			test("deletes the document, from get, findOne, list and count; a second remove answers false", async () => {
				const items = await fresh();
				await items.insert({ id: "a", status: "open", paymentId: "p1" });
				await items.insert({ id: "b", status: "open" });
				expect(await items.remove("a")).toBe(true);
				expect(await items.remove("a")).toBe(false);
				expect(await items.remove("missing")).toBe(false);
				expect(await items.get("a")).toBeNull();
				expect(await items.findOne({ paymentId: "p1" })).toBeNull();
				expect(await items.list()).toStrictEqual([{ id: "b", status: "open" }]);
				expect(await items.count()).toBe(1);
				expect(await items.count({ status: "open" })).toBe(1);
				expect(await items.countBy("status")).toEqual({ open: 1 });
			});

			test("deletes only while the document matches the expectation", async () => {
				const items = await fresh();
				await items.insert({ id: "a", status: "open", version: 1, paymentId: null });
				expect(await items.remove("a", { version: 2 })).toBe(false);
				expect(await items.remove("a", { version: 1, status: "signed" })).toBe(false);
				expect(await items.remove("a", { status: { in: ["signed", "settled"] } })).toBe(false);
				expect(await items.remove("a", { status: null })).toBe(false);
				expect(await items.remove("a", { paymentId: { ne: null } })).toBe(false);
				expect(await items.get("a")).toStrictEqual({ id: "a", status: "open", version: 1, paymentId: null });
				expect(await items.remove("a", { version: 1, status: { in: ["open", "pending"] }, paymentId: null })).toBe(true);
				expect(await items.get("a")).toBeNull();
			});

			test("a null expectation matches a null or missing field", async () => {
				const items = await fresh();
				await items.insert({ id: "a", version: 1 });
				await items.insert({ id: "b", status: null, version: 1 });
				expect(await items.remove("a", { status: null, version: 1 })).toBe(true);
				expect(await items.remove("b", { status: { in: [null, "open"] } })).toBe(true);
				expect(await items.count()).toBe(0);
			});

			test("an expectation on id cannot redirect the remove to another document", async () => {
				const items = await fresh();
				await items.insert({ id: "a", version: 1 });
				await items.insert({ id: "b", version: 1 });
				expect(await items.remove("c", { id: { in: ["a", "b"] } })).toBe(false);
				expect(await items.remove("a", { id: "b" })).toBe(false);
				expect(sortedIds(await items.list())).toEqual(["a", "b"]);
			});

			test("frees the document's unique groups for a new insert", async () => {
				const items = await fresh();
				await items.insert({ id: "a", paymentId: "p1", payer: "alice", nonce: 1 });
				expect(await items.insert({ id: "b", paymentId: "p1", payer: "alice", nonce: 1 })).toBe(false);
				expect(await items.remove("a", { paymentId: "p1" })).toBe(true);
				expect(await items.insert({ id: "b", paymentId: "p1", payer: "alice", nonce: 1 })).toBe(true);
				// The id is free again as well.
				expect(await items.insert({ id: "a", paymentId: "p2" })).toBe(true);
				expect(sortedIds(await items.list())).toEqual(["a", "b"]);
			});

			test("lets exactly one of racing removes win, and a remove racing an update", async () => {
				await withTwoWriters(async (items, otherItems) => {
					await items.insert({ id: "a", version: 1 });
					const removed = await Promise.all(Array.from({ length: 6 }, (_, i) => (i % 2 ? otherItems : items).remove("a", { version: 1 })));
					expect(removed.filter(Boolean)).toHaveLength(1);
					expect(await items.get("a")).toBeNull();

					// The unsigned-intent case: dropping it and advancing it compare-and-set on the same version.
					await items.insert({ id: "b", status: "open", version: 1 });
					const [dropped, advanced] = await Promise.all([
						items.remove("b", { status: "open", version: 1 }),
						otherItems.update("b", { status: "open", version: 1 }, { id: "b", status: "signed", version: 2 })
					]);
					expect(dropped).not.toBe(advanced);
					expect(await items.get("b")).toStrictEqual(dropped ? null : { id: "b", status: "signed", version: 2 });
				});
			});

			test("undeclared fields are refused", async () => {
				const items = await fresh();
				await items.insert({ id: "a", status: "open" });
				await expect(items.remove("a", { colour: "red" })).rejects.toThrow(/not declared/);
				await expect(items.removeWhere({ colour: "red" }, 10)).rejects.toThrow(/not declared/);
				// Even when the batch is empty: a typo must fail loudly.
				await expect(items.removeWhere({ colour: "red" }, 0)).rejects.toThrow(/not declared/);
				expect(await items.count()).toBe(1);
			});
		});

		describe("removeWhere", () => {
			const seed = async () => {
				const items = await fresh();
				for (let i = 0; i < 5; i++) await items.insert({ id: `x${i}`, status: "expired", rank: i });
				await items.insert({ id: "l1", status: "live", rank: 1 });
				await items.insert({ id: "l2", status: "live", rank: 2 });
				return items;
			};

			test("deletes at most limit matching documents, and repeated calls drain the matching set", async () => {
				const items = await seed();
				expect(await items.removeWhere({ status: "expired" }, 2)).toBe(2);
				expect(await items.count({ status: "expired" })).toBe(3);
				expect(await items.removeWhere({ status: "expired" }, 2)).toBe(2);
				expect(await items.removeWhere({ status: "expired" }, 2)).toBe(1);
				expect(await items.removeWhere({ status: "expired" }, 2)).toBe(0);
				expect(await items.count({ status: "expired" })).toBe(0);
				expect(await items.list({ orderBy: ["id", "asc"] })).toStrictEqual([
					{ id: "l1", status: "live", rank: 1 },
					{ id: "l2", status: "live", rank: 2 }
				]);
				for (let i = 0; i < 5; i++) expect(await items.get(`x${i}`)).toBeNull();
				expect(await items.countBy("status")).toEqual({ live: 2 });
			});

			test("answers the number deleted when fewer than limit match", async () => {
				const items = await seed();
				expect(await items.removeWhere({ status: "expired", rank: { lt: 3 } }, 100)).toBe(3);
				expect(sortedIds(await items.list())).toEqual(["l1", "l2", "x3", "x4"]);
				expect(await items.removeWhere({ status: "gone" }, 100)).toBe(0);
				expect(await items.count()).toBe(4);
			});

			test("without a filter it still deletes at most limit", async () => {
				const items = await seed();
				expect(await items.removeWhere({}, 3)).toBe(3);
				expect(await items.count()).toBe(4);
			});

			test("a condition on id cannot lift the limit", async () => {
				const items = await seed();
				expect(await items.removeWhere({ id: { ne: "l1" } }, 2)).toBe(2);
				expect(await items.count()).toBe(5);
				expect(await items.get("l1")).not.toBeNull();
				expect(await items.removeWhere({ id: { in: ["l2", "x0", "x1", "x2", "x3", "x4"] } }, 1)).toBe(1);
				expect(await items.count()).toBe(4);
				expect(await items.removeWhere({ id: "l1" }, 5)).toBe(1);
				expect(await items.get("l1")).toBeNull();
				expect(await items.count()).toBe(3);
			});

			test("null conditions and comparisons follow the query semantics", async () => {
				const items = await fresh();
				await items.insert({ id: "a", status: null, rank: 1 });
				await items.insert({ id: "b", rank: null });
				await items.insert({ id: "c", status: "open", rank: 5 });
				await items.insert({ id: "d", status: "open" });
				// A comparison never matches null or a missing field.
				expect(await items.removeWhere({ rank: { lt: 10 } }, 10)).toBe(2);
				expect(sortedIds(await items.list())).toEqual(["b", "d"]);
				expect(await items.removeWhere({ status: null }, 10)).toBe(1);
				expect(sortedIds(await items.list())).toEqual(["d"]);
				expect(await items.removeWhere({ status: { in: [null, "open"] } }, 10)).toBe(1);
				expect(await items.count()).toBe(0);
			});

			test("a limit of 0 or less deletes nothing; an unbounded one is refused", async () => {
				const items = await seed();
				expect(await items.removeWhere({}, 0)).toBe(0);
				expect(await items.removeWhere({ status: "expired" }, -3)).toBe(0);
				expect(await items.removeWhere({}, 0.5)).toBe(0);
				expect(await items.removeWhere({}, Number.NaN)).toBe(0);
				await expect(items.removeWhere({}, Number.POSITIVE_INFINITY)).rejects.toThrow(RangeError);
				expect(await items.count()).toBe(7);
				expect(await items.removeWhere({ status: "expired" }, 1.9)).toBe(1);
				expect(await items.count()).toBe(6);
			});

			test("frees the deleted documents' unique groups", async () => {
				const items = await fresh();
				await items.insert({ id: "a", paymentId: "p1", status: "expired" });
				await items.insert({ id: "b", paymentId: "p2", status: "live" });
				expect(await items.removeWhere({ status: "expired" }, 10)).toBe(1);
				expect(await items.insert({ id: "c", paymentId: "p1" })).toBe(true);
				expect(await items.insert({ id: "d", paymentId: "p2" })).toBe(false);
			});
		});

		describe("views", () => {
			const freshName = () => `views_${++collections}`;
			/** Items with one view, `summary`: what a list route would answer for each. */
			const viewSpec = (name: string, version: number, build: (doc: Item) => unknown): CollectionSpec<Item> => ({
				...itemSpec(name),
				views: { summary: { version, build } },
				viewStamp: ["status", "rank", "version"]
			});
			const v1 = (doc: Item) => ({ id: doc.id, label: `${doc.status}#${doc.rank}` });
			const v2 = (doc: Item) => ({ key: doc.id, rank: doc.rank });

			test("lists each document's view text as list orders them, with the order's value for paging", async () => {
				const name = freshName();
				const items = await store.collection<Item>(viewSpec(name, 1, v1));
				for (const [id, status, rank] of [["a", "open", 3], ["b", "open", 1], ["c", "done", 2], ["d", "open", 2]] as const) await items.insert({ id, status, rank });
				const query = { where: { status: "open" }, orderBy: ["rank", "asc"] } as const;
				const rows = await items.listViews("summary", query);
				expect(rows.map(row => row.id)).toStrictEqual(ids(await items.list(query)));
				expect(rows).toStrictEqual([
					{ id: "b", order: 1, json: '{"id":"b","label":"open#1"}' },
					{ id: "d", order: 2, json: '{"id":"d","label":"open#2"}' },
					{ id: "a", order: 3, json: '{"id":"a","label":"open#3"}' }
				]);
				// The next page starts after the last row's order and id; `in` lists each value's walk merged.
				expect((await items.listViews("summary", { ...query, limit: 5, after: { value: 2, id: "d" } })).map(row => row.id)).toStrictEqual(["a"]);
				expect((await items.listViews("summary", { where: { status: { in: ["open", "done"] } }, orderBy: ["rank", "desc"], limit: 3 })).map(row => row.id)).toStrictEqual(["a", "d", "c"]);
				expect(await items.listViews("summary", { ...query, limit: 0 })).toStrictEqual([]);
				// The view's text is never part of the document.
				expect(await items.get("a")).toStrictEqual({ id: "a", status: "open", rank: 3 });
				expect(await items.list({ where: { status: "done" } })).toStrictEqual([{ id: "c", status: "done", rank: 2 }]);
			});

			test("an update rewrites the view with the document, and a refused one leaves both", async () => {
				const name = freshName();
				const items = await store.collection<Item>(viewSpec(name, 1, v1));
				await items.insert({ id: "a", status: "open", rank: 1, version: 1 });
				expect(await items.update("a", { version: 1 }, { id: "a", status: "done", rank: 7, version: 2 })).toBe(true);
				expect(await items.update("a", { version: 1 }, { id: "a", status: "lost", rank: 9, version: 2 })).toBe(false);
				expect((await items.listViews("summary", { where: { status: "done" } })).map(row => row.json)).toStrictEqual(['{"id":"a","label":"done#7"}']);
			});

			test("a new version of a view is built from the documents written before it, until their next write", async () => {
				const name = freshName();
				const before = await store.collection<Item>(viewSpec(name, 1, v1));
				await before.insert({ id: "a", status: "open", rank: 1, version: 1 });
				await before.insert({ id: "b", status: "open", rank: 2, version: 1 });
				const after = await store.collection<Item>(viewSpec(name, 2, v2));
				await after.update("b", { version: 1 }, { id: "b", status: "open", rank: 5, version: 2 });
				await after.insert({ id: "c", status: "open", rank: 6, version: 1 });
				const rows = await after.listViews("summary", { where: { status: "open" }, orderBy: ["rank", "asc"] });
				expect(rows.map(row => row.json)).toStrictEqual(['{"key":"a","rank":1}', '{"key":"b","rank":5}', '{"key":"c","rank":6}']);
				expect(await after.get("a")).toStrictEqual({ id: "a", status: "open", rank: 1, version: 1 });
			});

			test("a document written by a version that keeps no views gets its view built, not the text it left", async () => {
				const name = freshName();
				const items = await store.collection<Item>(viewSpec(name, 1, v1));
				await items.insert({ id: "a", status: "open", rank: 1, version: 1 });
				await items.insert({ id: "b", status: "open", rank: 2, version: 1 });
				// An older replica (or the version a rollback went back to) moves "a"; "b" stays as written here.
				await legacyUpdate(name, "a", { status: "done", version: 2 });
				const rows = await items.listViews("summary", { orderBy: ["rank", "asc"] });
				expect(rows.map(row => row.json)).toStrictEqual(['{"id":"a","label":"done#1"}', '{"id":"b","label":"open#2"}']);
				expect(await items.get("a")).toStrictEqual({ id: "a", status: "done", rank: 1, version: 2 });
				// Its next write here keeps the view again.
				await items.update("a", { version: 2 }, { id: "a", status: "done", rank: 3, version: 3 });
				expect((await items.listViews("summary", { where: { status: "done" } })).map(row => row.json)).toStrictEqual(['{"id":"a","label":"done#3"}']);
			});

			test("a list of views this version wrote builds none: it reads the kept texts", async () => {
				let builds = 0;
				const counted = (doc: Item) => (builds++, v1(doc));
				const items = await store.collection<Item>(viewSpec(freshName(), 1, counted));
				await items.insert({ id: "a", status: "open", rank: 1, version: 1 });
				await items.update("a", { version: 1 }, { id: "a", status: "open", rank: 2, version: 2 });
				await items.insert({ id: "b", status: "open", rank: 5 });
				const written = builds;
				expect((await items.listViews("summary", { where: { status: "open" }, orderBy: ["rank", "asc"] })).map(row => row.json)).toStrictEqual(['{"id":"a","label":"open#2"}', '{"id":"b","label":"open#5"}']);
				expect(builds).toBe(written);
			});

			test("views need a stamp of declared text or integer fields", async () => {
				await expect(store.collection<Item>({ ...itemSpec(freshName()), views: { summary: { version: 1, build: v1 } } })).rejects.toThrow(/viewStamp/);
				await expect(store.collection<Item>({ ...viewSpec(freshName(), 1, v1), viewStamp: ["active"] })).rejects.toThrow(/viewStamp/);
			});

			test("an undeclared view is an error, not an empty list", async () => {
				const items = await fresh();
				await items.insert({ id: "a", status: "open", rank: 1 });
				await expect(items.listViews("summary", {})).rejects.toThrow(/view "summary" is not declared/);
			});
		});

		describe("queries", () => {
			const docs: Item[] = [
				{ id: "a", status: "open", rank: 3, active: true },
				{ id: "b", status: "open", rank: 1, active: false },
				{ id: "c", status: "done", rank: 2, active: true },
				{ id: "d", status: null, rank: 2, active: false },
				{ id: "e", rank: null, active: true }
			];
			let items: Collection<Item>;

			beforeAll(async () => {
				items = await fresh();
				for (const doc of docs) expect(await items.insert(doc)).toBe(true);
			});

			test.each([
				["equality", { status: "open" }, ["a", "b"]],
				["equality on a boolean", { active: true }, ["a", "c", "e"]],
				["equality on false", { active: false }, ["b", "d"]],
				["null equality (null or missing)", { status: null }, ["d", "e"]],
				["in", { status: { in: ["open", "done"] } }, ["a", "b", "c"]],
				["in with null", { status: { in: [null, "done"] } }, ["c", "d", "e"]],
				["in nothing", { status: { in: [] } }, []],
				["in on id", { id: { in: ["a", "c", "z"] } }, ["a", "c"]],
				["lt", { rank: { lt: 2 } }, ["b"]],
				["lte", { rank: { lte: 2 } }, ["b", "c", "d"]],
				["gt", { rank: { gt: 2 } }, ["a"]],
				["gte", { rank: { gte: 2 } }, ["a", "c", "d"]],
				["a comparison with null matches nothing", { rank: { lte: null } }, []],
				["ne null", { status: { ne: null } }, ["a", "b", "c"]],
				["ne a value (nulls included)", { status: { ne: "open" } }, ["c", "d", "e"]],
				["every condition must hold", { status: "open", rank: { gt: 1 } }, ["a"]]
			] as const)("where: %s", async (_label, where, expected) => {
				expect(sortedIds(await items.list({ where }))).toEqual(expected);
				expect(await items.count(where)).toBe(expected.length);
			});

			test.each([
				["rank asc: nulls first, ties by id", ["rank", "asc"], ["e", "b", "c", "d", "a"]],
				["rank desc: nulls last, ties by id desc", ["rank", "desc"], ["a", "d", "c", "b", "e"]],
				["status asc: null and missing alike", ["status", "asc"], ["d", "e", "c", "a", "b"]],
				["id desc", ["id", "desc"], ["e", "d", "c", "b", "a"]]
			] as const)("orderBy %s", async (_label, orderBy, expected) => {
				expect(ids(await items.list({ orderBy }))).toEqual(expected);
			});

			test("an ordered list with in: the values' documents merged in order, each once, limit and cursor included", async () => {
				const open_or_done = { status: { in: ["open", "done", "open"] } } as const;
				expect(ids(await items.list({ where: open_or_done, orderBy: ["rank", "desc"] }))).toEqual(["a", "c", "b"]);
				expect(ids(await items.list({ where: open_or_done, orderBy: ["rank", "asc"], limit: 2 }))).toEqual(["b", "c"]);
				expect(ids(await items.list({ where: open_or_done, orderBy: ["rank", "asc"], after: { value: 1, id: "b" } }))).toEqual(["c", "a"]);
				expect(ids(await items.list({ where: { status: { in: [] } }, orderBy: ["rank", "asc"], limit: 5 }))).toEqual([]);
			});

			test("after: keyset pages through ties, in both directions, each document once", async () => {
				const ranked = { rank: { ne: null } } as const;
				const pages = async (direction: "asc" | "desc") => {
					const seen: string[] = [];
					let after: { value: number; id: string } | undefined;
					for (;;) {
						const [next] = await items.list({ where: ranked, orderBy: ["rank", direction], limit: 1, ...(after ? { after } : {}) });
						if (!next) return seen;
						seen.push(next.id);
						after = { value: next.rank as number, id: next.id };
					}
				};
				// c and d share rank 2: a page boundary between them loses and repeats nothing.
				expect(await pages("asc")).toEqual(["b", "c", "d", "a"]);
				expect(await pages("desc")).toEqual(["a", "d", "c", "b"]);
				expect(ids(await items.list({ orderBy: ["rank", "asc"], after: { value: 2, id: "c" } }))).toEqual(["d", "a"]);
				expect(ids(await items.list({ where: { active: true }, orderBy: ["rank", "desc"], after: { value: 2, id: "d" } }))).toEqual(["c"]);
				await expect(items.list({ after: { value: 1, id: "a" } })).rejects.toThrow(/needs an orderBy/);
				await expect(items.list({ orderBy: ["rank", "asc"], after: { value: "2", id: "c" } })).rejects.toThrow(/integer/);
				await expect(items.list({ orderBy: ["rank", "asc"], after: { value: null as unknown as number, id: "c" } })).rejects.toThrow(/null/);
			});

			test("limit", async () => {
				expect(ids(await items.list({ orderBy: ["rank", "asc"], limit: 2 }))).toEqual(["e", "b"]);
				expect(ids(await items.list({ where: { active: true }, orderBy: ["rank", "desc"], limit: 2 }))).toEqual(["a", "c"]);
				expect(await items.list({ limit: 0 })).toEqual([]);
				expect(await items.list({ limit: 10 })).toHaveLength(docs.length);
			});

			test("count and countBy", async () => {
				expect(await items.count()).toBe(5);
				expect(await items.countBy("status")).toEqual({ open: 2, done: 1, null: 2 });
				expect(await items.countBy("rank", { active: true })).toEqual({ "3": 1, "2": 1, null: 1 });
				expect(await items.countBy("status", { status: { in: [] } })).toEqual({});
				// SQLite keeps booleans as 0 and 1 in its columns.
				expect(await items.countBy("active")).toEqual({ "1": 3, "0": 2 });
			});

			test("undeclared fields are refused", async () => {
				await expect(items.list({ where: { colour: "red" } })).rejects.toThrow(/not declared/);
				await expect(items.list({ orderBy: ["colour", "asc"] })).rejects.toThrow(/not declared/);
				await expect(items.count({ colour: "red" })).rejects.toThrow(/not declared/);
				await expect(items.countBy("colour")).rejects.toThrow(/not declared/);
				await expect(items.findOne({ colour: "red" })).rejects.toThrow(/not declared/);
			});
		});

		test("data and unique groups survive closing and reopening the store", async () => {
			const spec = itemSpec(`items_${++collections}`);
			const before = await store.collection<Item>(spec);
			await before.insert({ id: "a", paymentId: "p1", version: 1, payload: { list: [1, 2] } });
			expect(await before.update("a", { version: 1 }, { id: "a", paymentId: "p1", version: 2, payload: { list: [3] } })).toBe(true);
			await before.insert({ id: "z", paymentId: "p9" });
			await before.insert({ id: "y", status: "expired" });
			expect(await before.remove("z")).toBe(true);
			expect(await before.removeWhere({ status: "expired" }, 10)).toBe(1);
			await store.close();

			store = await open();
			const after = await store.collection<Item>(spec);
			expect(await after.get("a")).toStrictEqual({ id: "a", paymentId: "p1", version: 2, payload: { list: [3] } });
			expect(await after.insert({ id: "b", paymentId: "p1" })).toBe(false);
			expect(await after.get("z")).toBeNull();
			expect(await after.count()).toBe(1);
			expect(await after.update("a", { version: 2 }, { id: "a", version: 3 })).toBe(true);
		});

		test("a closed store refuses every call as unavailable (a 503 retry), never as a bug: a stopping process's owner can still be called", async () => {
			const spec: CollectionSpec<Item> = {
				...itemSpec(`items_${++collections}`),
				tally: item => ({ [`status:${item.status ?? "none"}`]: 1n }),
				outbox: true,
				views: { summary: { version: 1, build: (doc: Item) => ({ id: doc.id }) } },
				viewStamp: ["status", "version"]
			};
			const items = await store.collection<Item>(spec);
			await items.insert({ id: "a", status: "open", version: 1 });
			await store.close();
			try {
				const event = { subject: "a", type: "item.changed", at: "2026-01-01T00:00:00.000Z", data: {} };
				const calls: [string, () => Promise<unknown>][] = [
					["insert", () => items.insert({ id: "b", status: "open", version: 1 }, event)],
					["get", () => items.get("a")],
					["findOne", () => items.findOne({ status: "open" })],
					["update", () => items.update("a", { version: 1 }, { id: "a", status: "done", version: 2 }, event)],
					["remove", () => items.remove("a")],
					["removeWhere", () => items.removeWhere({ status: "open" }, 10)],
					["list", () => items.list({ where: { status: "open" }, orderBy: ["rank", "asc"], limit: 5 })],
					["listViews", () => items.listViews("summary", { orderBy: ["rank", "desc"], limit: 5 })],
					["count", () => items.count({ status: "open" })],
					["countBy", () => items.countBy("status")],
					["tally", () => items.tally()],
					["events", () => items.events({ after: 0, limit: 10 })],
					["latestEvent", () => items.latestEvent("a")],
					["pruneEvents", () => items.pruneEvents("2027-01-01T00:00:00.000Z", 10)]
				];
				for (const [name, call] of calls) {
					const refusal = await call().then(
						answer => ({ answered: answer }),
						(err: unknown) => err
					);
					expect([name, refusal]).toStrictEqual([name, expect.any(StoreUnavailableError)]);
				}
			} finally {
				store = await open();
			}
		});
	});
}

// SQLite: a real file in a fresh directory, opened the way the services open it.
const sqliteDir = fs.mkdtempSync(path.join(os.tmpdir(), "scs-store-"));
describeStoreContract(
	"sqlite",
	() => openStore({ kind: "sqlite", dataDir: sqliteDir, mongoUrl: null, owner: "contract" }),
	async () => fs.rmSync(sqliteDir, { recursive: true, force: true }),
	async (collection, id, change) => {
		// A second connection, as a process of the older version would open the file.
		const db = new Database(path.join(sqliteDir, "contract.sqlite"));
		try {
			db.pragma("busy_timeout = 5000");
			const { doc } = db.prepare(`SELECT doc FROM "${collection}" WHERE id = ?`).get(id) as { doc: string };
			const columns = Object.keys(change);
			db.prepare(`UPDATE "${collection}" SET doc = ?, ${columns.map(c => `"${c}" = ?`).join(", ")} WHERE id = ?`).run(JSON.stringify({ ...JSON.parse(doc), ...change }), ...Object.values(change) as (string | number)[], id);
		} finally {
			db.close();
		}
	},
	true,
	true
);

function mongoDropIndex(url: () => Promise<string>, dbName: string) {
	return async (collection: string, index: string) => {
		const client = await MongoClient.connect(await url());
		try {
			await client.db(dbName).collection(collection).dropIndex(index);
		} finally {
			await client.close();
		}
	};
}

/** An older MongoDB adapter read the whole stored document (view texts too) and replaced it with its change. */
function mongoLegacyUpdate(url: () => Promise<string>, dbName: string): LegacyUpdate {
	return async (collection, id, change) => {
		const client = await MongoClient.connect(await url());
		try {
			const stored = client.db(dbName).collection<{ _id: string }>(collection);
			const { _id, ...rest } = (await stored.findOne({ _id: id }))!;
			await stored.replaceOne({ _id }, { ...rest, ...change });
		} finally {
			await client.close();
		}
	};
}

test("openStore keeps one SQLite file per owner", async () => {
	const dir = fs.mkdtempSync(path.join(os.tmpdir(), "scs-store-"));
	try {
		const store = await openStore({ kind: "sqlite", dataDir: path.join(dir, "nested"), mongoUrl: null, owner: "mempool" });
		await store.close();
		expect(fs.existsSync(path.join(dir, "nested", "mempool.sqlite"))).toBe(true);
	} finally {
		fs.rmSync(dir, { recursive: true, force: true });
	}
});

test("openStore needs a URL for MongoDB", async () => {
	await expect(openStore({ kind: "mongodb", dataDir: os.tmpdir(), mongoUrl: null, owner: "mempool" })).rejects.toThrow(/MONGO_URL/);
});

test.each([
	["mongodb://localhost:27017", "scs"],
	["mongodb://localhost:27017/", "scs"],
	["mongodb://localhost/?w=majority", "scs"],
	["mongodb://localhost:27017/settlement", "settlement"],
	["mongodb://user:p%40ss@a:27017,b:27017/settlement?replicaSet=rs0", "settlement"],
	["mongodb+srv://cluster0.example.net/prod%2Dscs?retryWrites=true", "prod-scs"]
])("mongoDatabaseName(%s) is %s", (url, name) => {
	expect(mongoDatabaseName(url)).toBe(name);
});

/**
 * Whether mongodb-memory-server can start a server here: null if it can, else why not. Jest
 * registers tests synchronously, so this runs in a child process, which also keeps a stalled
 * binary download from outliving the 15 s budget or holding the test process open.
 */
function memoryServerUnavailable(): string | null {
	const probe = `
		const { MongoBinary, MongoMemoryServer } = require("mongodb-memory-server-core");
		(async () => {
			await MongoBinary.getPath(); // first, so that a failed download leaves no instance directory behind
			await (await MongoMemoryServer.create()).stop();
		})().then(
			() => process.exit(0),
			error => { process.stderr.write("\\nPROBE-ERROR " + String(error && error.message).replace(/\\s+/g, " ") + "\\n"); process.exit(1); }
		);`;
	const result = spawnSync(process.execPath, ["-e", probe], { cwd: path.resolve(__dirname, "../.."), encoding: "utf8", timeout: 15_000 });
	if (result.error) return (result.error as NodeJS.ErrnoException).code === "ETIMEDOUT" ? "timed out after 15 s" : result.error.message;
	if (result.status === 0) return null;
	return /PROBE-ERROR (.*)/.exec(result.stderr)?.[1].trim() ?? `probe exited with ${result.status ?? result.signal}`;
}

const mongoUrl = process.env.MONGO_URL?.trim();
if (mongoUrl) {
	// A database of its own, so that the suite never touches the one MONGO_URL names.
	const dbName = `scs_contract_${process.pid}_${Date.now()}`;
	describeStoreContract(
		"mongodb",
		() => MongoStore.connect(mongoUrl, dbName),
		async () => {
			const client = await MongoClient.connect(mongoUrl);
			try {
				await client.db(dbName).dropDatabase();
			} finally {
				await client.close();
			}
		},
		mongoLegacyUpdate(async () => mongoUrl, dbName),
		true,
		false,
		mongoDropIndex(async () => mongoUrl, dbName)
	);
} else {
	const unavailable = memoryServerUnavailable();
	if (unavailable) console.warn(`MongoDB store contract NOT RUN: no MONGO_URL and mongodb-memory-server could not start a server (${unavailable})`);
	// A one-member replica set: the adapter keeps tallies in transactions, which need one.
	let server: Promise<MongoMemoryReplSet> | undefined;
	describeStoreContract(
		"mongodb",
		async () => {
			server ??= MongoMemoryReplSet.create({ replSet: { count: 1 } });
			return openStore({ kind: "mongodb", dataDir: os.tmpdir(), mongoUrl: (await server).getUri("scs_contract"), owner: "contract" });
		},
		async () => {
			await (await server)?.stop();
		},
		mongoLegacyUpdate(async () => (await server!).getUri(), "scs_contract"),
		!unavailable,
		false,
		mongoDropIndex(async () => (await server!).getUri(), "scs_contract")
	);
}
