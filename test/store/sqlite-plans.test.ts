/**
 * Every ordered list walks an index (SQLite adapter): the mempool's list shapes on 3,000 intents
 * answer exactly what a full filter-and-sort of every document answers, an `in` list is one index
 * walk per value merged, and the plan check that refuses, at a list shape's first use, a plan that
 * would sort every match tells such plans from index walks.
 */
import Database from "better-sqlite3";
import { LIVE_COUNTS, LIVE_FIGURES } from "../../lib/intent-totals";
import type { IntentRecord, IntentState } from "../../lib/intents";
import { openStore, type Collection, type ListQuery, type Store } from "../../lib/store";
import { sortsOrScans } from "../../lib/store/sqlite";
import { INTENTS_COLLECTION, intentsCollection } from "../../services/mempool.service";
import { tempDir } from "../helpers/node";

const STATES: IntentState[] = ["RECEIVED", "VERIFIED", "CRANKER_LEASED", "CONFIRMED", "REJECTED"];
let store: Store;
let intents: Collection<IntentRecord>;
const all: IntentRecord[] = [];
const dataDir = tempDir();

/** A deterministic spread of states, times (with ties) and archive flags. */
function record(i: number): IntentRecord {
	const at = (minutes: number) => new Date(Date.UTC(2026, 10, 23, 0, minutes)).toISOString();
	return {
		id: `int_${String((i * 7919) % 10007).padStart(6, "0")}_${i}`,
		paymentId: `pay_${i}`,
		state: STATES[(i * 31) % STATES.length],
		stateVersion: 1,
		senderWallet: "w",
		requestDigest: "d",
		transactionCommitment: "c",
		epoch: 1,
		createdAt: at(Math.floor(i / 3)),
		updatedAt: at(i),
		expiresAt: at((i * 13) % 2000),
		expiresAtSlot: i,
		leaseExpiresAt: null,
		nonceKey: null,
		...(i % 4 === 0 ? { archivedIn: 1 } : {}),
		request: { tokenMintAddress: "mint", amount: "1" } as IntentRecord["request"],
		lease: null,
		submission: null,
		history: []
	};
}

beforeAll(async () => {
	store = await openStore({ kind: "sqlite", dataDir, mongoUrl: null, owner: "mempool" });
	// As a deployment with a chain keeps them: the slot sweep's index too.
	intents = await store.collection(intentsCollection(true));
	for (let i = 0; i < 3000; i++) {
		all.push(record(i));
		await intents.insert(all[i]);
	}
});
afterAll(() => store.close());

/** The reference answer: every document filtered and sorted in memory. */
function reference(filter: (r: IntentRecord) => boolean, field: "createdAt", direction: "asc" | "desc", limit: number, after?: { value: string; id: string }): string[] {
	const sign = direction === "asc" ? 1 : -1;
	const key = (r: IntentRecord) => [r[field], r.id] as const;
	return all
		.filter(filter)
		.filter(r => !after || sign * (key(r)[0] === after.value ? (r.id < after.id ? -1 : r.id > after.id ? 1 : 0) : key(r)[0] < after.value ? -1 : 1) > 0)
		.sort((a, b) => sign * (a[field] === b[field] ? (a.id < b.id ? -1 : 1) : a[field] < b[field] ? -1 : 1))
		.slice(0, limit)
		.map(r => r.id);
}

const ids = async (query: ListQuery) => (await intents.list(query)).map(r => r.id);

test("the work list (the live intents of a state, by createdAt) walks its index past a range on expiresAt, pages by cursor included", async () => {
	const now = new Date(Date.UTC(2026, 10, 23, 0, 600)).toISOString();
	const live = (r: IntentRecord) => r.state === "VERIFIED" && r.archivedIn === undefined && r.expiresAt > now;
	const first = await ids({ where: { state: "VERIFIED", archivedIn: null, expiresAt: { gt: now } }, orderBy: ["createdAt", "asc"], limit: 100 });
	expect(first).toEqual(reference(live, "createdAt", "asc", 100));
	const last = all.find(r => r.id === first[99])!;
	const after = { value: last.createdAt, id: last.id };
	expect(await ids({ where: { state: "VERIFIED", archivedIn: null, expiresAt: { gt: now } }, orderBy: ["createdAt", "asc"], limit: 100, after })).toEqual(reference(live, "createdAt", "asc", 100, after));
});

test("a list over several states is one index walk per state, merged in order (newest first, cursor included)", async () => {
	const pending = (r: IntentRecord) => r.archivedIn === undefined && ["RECEIVED", "VERIFIED", "CRANKER_LEASED"].includes(r.state);
	const where = { archivedIn: null, state: { in: ["RECEIVED", "VERIFIED", "CRANKER_LEASED"] } };
	const page = await ids({ where, orderBy: ["createdAt", "desc"], limit: 50 });
	expect(page).toEqual(reference(pending, "createdAt", "desc", 50));
	const last = all.find(r => r.id === page[49])!;
	const after = { value: last.createdAt, id: last.id };
	expect(await ids({ where, orderBy: ["createdAt", "desc"], limit: 500, after })).toEqual(reference(pending, "createdAt", "desc", 500, after));
	expect(await ids({ where: { archivedIn: null }, orderBy: ["createdAt", "desc"], limit: 500 })).toEqual(reference(r => r.archivedIn === undefined, "createdAt", "desc", 500));
});

test("the expiry sweeps walk their index only as far as the intents due, by time and by slot", async () => {
	const expirable = ["RECEIVED", "VERIFIED", "CRANKER_LEASED"];
	const now = new Date(Date.UTC(2026, 10, 23, 0, 40)).toISOString();
	const dueByTime = (r: IntentRecord) => expirable.includes(r.state) && r.expiresAt <= now;
	const byTime = await intents.list({ where: { state: { in: expirable }, expiresAt: { lte: now } }, orderBy: ["expiresAt", "asc"], limit: 500 });
	expect(byTime.map(r => r.id).sort()).toEqual(all.filter(dueByTime).map(r => r.id).sort());
	const dueBySlot = (r: IntentRecord) => expirable.includes(r.state) && r.expiresAtSlot <= 100;
	const bySlot = await intents.list({ where: { state: { in: expirable }, expiresAtSlot: { lte: 100 } }, orderBy: ["expiresAtSlot", "asc"], limit: 500 });
	expect(bySlot.map(r => r.id)).toEqual(all.filter(dueBySlot).map(r => r.id));
	// The statements the store made of those lists: each state's walk starts in the index (state, field) and stops past the bound.
	const lists = [...(intents as unknown as { lists: Map<string, Database.Statement> }).lists.values()].map(statement => statement.source);
	const db = new Database(`${dataDir}/mempool.sqlite`, { readonly: true });
	try {
		const plan = (field: string) => {
			const sql = lists.find(source => source.includes(`${field}" <=`) || source.includes(`${field} <=`));
			expect(sql).toBeDefined();
			const statement = db.prepare(`EXPLAIN QUERY PLAN ${sql}`);
			return (statement.all(...Array.from({ length: (sql!.match(/\?/g) ?? []).length }, () => null)) as { detail: string }[]).map(row => row.detail).join(";");
		};
		expect(plan("expiresAt")).toMatch(/INDEX \S*state_expiresAt_id \(state=\? AND expiresAt<\?\)/);
		expect(plan("expiresAtSlot")).toMatch(/INDEX \S*state_expiresAtSlot_id \(state=\? AND expiresAtSlot<\?\)/);
	} finally {
		db.close();
	}
});

test("the plan check tells SQLite's sorting and scanning plans from index walks", () => {
	const db = new Database(":memory:");
	db.exec(`CREATE TABLE t (id TEXT PRIMARY KEY, state TEXT, createdAt TEXT, doc TEXT); CREATE INDEX t_i_state_createdAt_id ON t (state, createdAt, id)`);
	const plan = (sql: string) => (db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all("VERIFIED", 50) as { detail: string }[]).map(row => row.detail);
	const walk = plan(`SELECT doc FROM t INDEXED BY t_i_state_createdAt_id WHERE state = ? ORDER BY createdAt ASC, id ASC LIMIT ?`);
	const sorted = plan(`SELECT doc FROM t WHERE state = ? ORDER BY doc ASC LIMIT ?`);
	const scanned = plan(`SELECT doc FROM t WHERE doc = ? ORDER BY createdAt LIMIT ?`);
	db.close();
	expect(sortsOrScans(walk, "t", true)).toBe(false);
	expect(sortsOrScans(sorted, "t", true)).toBe(true);
	expect(scanned.join(";")).toMatch(/SCAN t|TEMP B-TREE/);
	expect(sortsOrScans(scanned, "t", true)).toBe(true);
	// An unordered bounded read of a small collection may scan it.
	expect(sortsOrScans(["SCAN t"], "t", false)).toBe(false);
});

test("the live figures' tally read answers their own keys, none of the mints ever settled; a sum back at zero leaves no row", async () => {
	const settled = Array.from({ length: 20 }, (_, i): IntentRecord => ({ ...record(5000 + i), id: `int_mint_${i}`, paymentId: `pay_mint_${i}`, state: "CONFIRMED", request: { tokenMintAddress: `settled${i}`, amount: "5" } as IntentRecord["request"] }));
	for (const intent of settled) await intents.insert({ ...intent, archivedIn: undefined });
	const live = await intents.tally(LIVE_FIGURES);
	expect(Object.keys(live).filter(key => !key.startsWith("live:") && !key.startsWith("liveVolume:"))).toEqual([]);
	expect(live["liveVolume:settled7"]).toBe(5n);
	expect(Object.keys(await intents.tally(LIVE_COUNTS)).every(key => key.startsWith("live:"))).toBe(true);
	expect((await intents.tally())["settledVolume:settled7"]).toBe(5n);

	// Archived, their mints' live volume is zero: the rows go, the settled volume stays.
	for (const intent of settled) expect(await intents.update(intent.id, { state: "CONFIRMED" }, { ...intent, archivedIn: 2 })).toBe(true);
	const file = new Database(`${dataDir}/mempool.sqlite`, { readonly: true });
	const rows = (pattern: string) => (file.prepare(`SELECT count(*) AS n FROM "${INTENTS_COLLECTION.name}__tally" WHERE key LIKE ?`).get(pattern) as { n: number }).n;
	try {
		expect(rows("liveVolume:settled%")).toBe(0);
		expect(rows("settledVolume:settled%")).toBe(20);
	} finally {
		file.close();
	}
	expect((await intents.tally(LIVE_FIGURES))["liveVolume:settled7"]).toBeUndefined();
});
