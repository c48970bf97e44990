/**
 * The intents' view stamp must change whenever a view does: a write by a version that keeps no
 * views leaves the texts as they were, and only a changed stamp tells listViews to build them.
 */
import Database from "better-sqlite3";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { decideStatusUpdate, restamped, type IntentRecord } from "../../lib/intents";
import { openStore, type Store } from "../../lib/store";
import { INTENTS_COLLECTION } from "../../services/mempool.service";
import { CRANKER_A, NOW, record } from "../unit/records";

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "scs-stamp-"));
let store: Store;
beforeAll(async () => (store = await openStore({ kind: "sqlite", dataDir: dir, mongoUrl: null, owner: "stamp" })));
afterAll(async () => {
	await store?.close();
	fs.rmSync(dir, { recursive: true, force: true });
});

/** What a version that keeps no views writes: the document and its declared columns, the view columns left as they were. */
function legacyWrite(doc: IntentRecord): void {
	const db = new Database(path.join(dir, "stamp.sqlite"));
	try {
		db.pragma("busy_timeout = 5000");
		const columns = Object.keys(INTENTS_COLLECTION.fields);
		const values = columns.map(c => (doc as unknown as Record<string, string | number | null | undefined>)[c] ?? null);
		db.prepare(`UPDATE "intents" SET doc = ?, ${columns.map(c => `"${c}" = ?`).join(", ")} WHERE id = ?`).run(JSON.stringify(doc), ...values, doc.id);
	} finally {
		db.close();
	}
}

test("a lease renewal in the millisecond of the record's updatedAt, by a version that keeps no views, is listed with its new expiry", async () => {
	const intents = await store.collection<IntentRecord>(INTENTS_COLLECTION);
	const ttl = 30_000;
	const t0 = NOW.getTime();
	// The lease as this version stores it: decided at t0, restamped 1 ms later by commit().
	const verified = record("VERIFIED", { updatedAt: new Date(t0 - 5_000).toISOString() });
	const leaseDecision = decideStatusUpdate(verified, { status: "CRANKER_LEASED", crankerPubkey: CRANKER_A, expectedVersion: verified.stateVersion }, { now: new Date(t0), leaseTtlMs: ttl, crankerAllowed: true, latestSlot: null });
	if (leaseDecision.kind !== "move") throw new Error("expected a move");
	const leased = restamped(verified, leaseDecision.next, new Date(t0 + 1).toISOString());
	expect(await intents.insert(leased)).toBe(true);

	// An older replica renews in the millisecond the lease was stored (what commit() would store too).
	const renewDecision = decideStatusUpdate(leased, { status: "CRANKER_LEASED", crankerPubkey: CRANKER_A, expectedVersion: leased.stateVersion }, { now: new Date(t0 + 1), leaseTtlMs: ttl, crankerAllowed: true, latestSlot: null });
	if (renewDecision.kind !== "move") throw new Error("expected a move");
	const renewed = restamped(leased, renewDecision.next, new Date(t0 + 1).toISOString());
	expect([renewed.stateVersion, renewed.updatedAt]).toStrictEqual([leased.stateVersion, leased.updatedAt]); // same stamp
	expect(renewed.lease!.expiresAt).not.toBe(leased.lease!.expiresAt); // another view
	legacyWrite(renewed);

	const [row] = await intents.listViews("worker", { where: { state: "CRANKER_LEASED", archivedIn: null }, orderBy: ["createdAt", "asc"] });
	expect((JSON.parse(row.json) as { lease: { expiresAt: string } }).lease.expiresAt).toBe(renewed.lease!.expiresAt);
});
