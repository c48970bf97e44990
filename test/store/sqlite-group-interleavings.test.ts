/**
 * The SQLite group commit under writes that come from anywhere in the event loop (bursts in one
 * turn, timers, immediates, microtasks) while the disk fills up and frees again (max_page_count),
 * for windows of 0 to 3 ms with the early commit at GROUP_COMMIT_WRITES. A seeded generator picks
 * the same writes in each run. Every write that resolves is visible to a second connection when
 * it resolves (committed); every one that rejects is absent in the end; none hangs; every stored
 * row has its event and its share of the tally.
 */
import path from "node:path";
import Database from "better-sqlite3";
import { SqliteStore } from "../../lib/store/sqlite";
import { tempDir } from "../helpers/node";

const wait = (ms: number) => new Promise(resolve => setTimeout(resolve, ms));

for (const windowMs of [0, 1, 2, 3]) {
	test(`window ${windowMs}: resolved means committed, rejected means absent, nothing hangs`, async () => {
		const file = path.join(tempDir(), "stress.sqlite");
		const store = new SqliteStore(file, windowMs);
		const items = await store.collection<{ id: string; k: string }>({ name: "items", fields: { k: "text" }, outbox: true, tally: () => ({ n: 1n }) });
		const db = (store as unknown as { db: Database.Database }).db;
		const reader = new Database(file, { readonly: true });
		const seen = reader.prepare("SELECT 1 FROM items WHERE id = ?");
		let n = 0;
		const outcomes: Promise<void>[] = [];
		const bad: string[] = [];
		const resolved = new Set<string>();
		const rejected = new Set<string>();
		let seed = 12345 + windowMs;
		const rnd = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
		const writeOne = () => {
			const id = `id${n++}`;
			const big = rnd() < 0.3;
			const p = items.insert({ id, k: big ? "x".repeat(3000) : "y" }, { subject: id, type: "t", at: "2026-01-01T00:00:00.000Z", data: {} });
			outcomes.push(
				p.then(
					() => {
						if (!seen.get(id)) bad.push(`${id} resolved before commit`);
						resolved.add(id);
					},
					() => void rejected.add(id)
				)
			);
		};
		const burst = () => {
			const k = Math.floor(rnd() * 12);
			for (let i = 0; i < k; i++) writeOne();
		};
		let pageCap = false;
		for (let round = 0; round < 150; round++) {
			const r = rnd();
			if (r < 0.1) {
				pageCap = !pageCap;
				db.pragma(`max_page_count = ${pageCap ? Number(db.pragma("page_count", { simple: true })) + 2 : 1073741823}`);
			}
			burst();
			setTimeout(burst, Math.floor(rnd() * 4));
			setImmediate(burst);
			void Promise.resolve().then(burst);
			if (rnd() < 0.5) await wait(Math.floor(rnd() * 3));
			else await new Promise(resolve => setImmediate(resolve));
		}
		await wait(20);
		db.pragma("max_page_count = 1073741823");
		let timer: NodeJS.Timeout | undefined;
		const all = await Promise.race([Promise.all(outcomes).then(() => "done"), new Promise(resolve => (timer = setTimeout(() => resolve("hung"), 5000)))]);
		clearTimeout(timer);
		expect(all).toBe("done");
		await store.close();
		expect(bad).toStrictEqual([]);
		const ids = new Set((reader.prepare("SELECT id FROM items").all() as { id: string }[]).map(r => r.id));
		for (const id of rejected) if (ids.has(id)) bad.push(`${id} rejected but stored`);
		for (const id of resolved) if (!ids.has(id)) bad.push(`${id} resolved but not stored`);
		const events = (reader.prepare("SELECT subject FROM items__events").all() as { subject: string }[]).map(r => r.subject);
		expect(events.length).toBe(ids.size);
		const tally = reader.prepare("SELECT value FROM items__tally WHERE key = 'n'").get() as { value: string } | undefined;
		expect(BigInt(tally?.value ?? "0")).toBe(BigInt(ids.size));
		reader.close();
		expect(bad).toStrictEqual([]);
		expect(resolved.size + rejected.size).toBe(n);
		// Both outcomes happened: the run tested the failures as well as the commits.
		expect(resolved.size).toBeGreaterThan(0);
		expect(rejected.size).toBeGreaterThan(0);
	});
}
