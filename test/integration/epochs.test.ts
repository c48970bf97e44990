/**
 * Epochs over HTTP (SPEC §8): status, close with its Merkle root (checked against an independent
 * computation here), archiving, concurrent closes, the age-based close, and a resumed close.
 */
import Database from "better-sqlite3";
import { createHash } from "node:crypto";
import path from "node:path";
import type { GenesisRoute } from "../../lib/registry";
import { MINT, newRoute, newWallet, signedHeartbeat, signedIntent, writeSeedFile } from "../helpers/fixtures";
import { startNode, tempDir, worker, type TestNode } from "../helpers/node";
import { waitFor } from "../../devkit/process";

const SIG = "5".repeat(87);
const sender = newWallet();
const cranker = newWallet();

/** SPEC §8's construction, written independently of lib/merkle.ts. */
function expectedRoot(executed: { id: string; transactionCommitment: string }[]): string {
	const h = (...parts: Buffer[]) => createHash("sha256").update(Buffer.concat(parts)).digest();
	const sorted = [...executed].sort((a, b) => (a.id < b.id ? -1 : 1));
	if (!sorted.length) return "0".repeat(64);
	const reduce = (level: Buffer[]): Buffer =>
		level.length === 1 ? level[0] : reduce(Array.from({ length: Math.ceil(level.length / 2) }, (_, i) => (level[2 * i + 1] ? h(Buffer.from([1]), level[2 * i], level[2 * i + 1]) : level[2 * i])));
	return reduce(sorted.map(x => h(Buffer.from([0]), Buffer.from(x.transactionCommitment, "hex")))).toString("hex");
}

async function settle(node: TestNode, route: GenesisRoute, amount: string) {
	const { body } = await node.http("POST", "/intents", signedIntent(sender, route, { amount }));
	const patch = (status: string, expectedVersion: number) =>
		node.as(cranker)("PATCH", `/intents/${body.id}/status`, { status, crankerPubkey: cranker.address, expectedVersion, transactionSignature: SIG, lastValidBlockHeight: 1_000_000 });
	expect((await patch("CRANKER_LEASED", 3)).status).toBe(200);
	expect((await patch("SUBMITTED", 4)).status).toBe(200);
	expect((await patch("CONFIRMED", 5)).status).toBe(200);
	return body as { id: string; transactionCommitment: string };
}

describe("epochs", () => {
	let node: TestNode;
	let route: GenesisRoute;

	beforeAll(async () => {
		route = newRoute();
		const dataDir = tempDir();
		node = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]) }, dataDir);
		expect((await node.as(cranker)("POST", "/crankers/heartbeat", signedHeartbeat(cranker))).status).toBe(200);
	});
	afterAll(() => node.stop());

	it("reports, closes with the Merkle root of the executed intents, archives the terminal ones and opens the next epoch", async () => {
		const initial = await node.http("GET", "/epoch/status");
		expect(initial.status).toBe(200);
		expect(initial.body).toEqual({ epoch: 1, startedAt: expect.any(String), intents: { received: 0, executed: 0, canceled: 0 }, volume: {} });

		const executed = [await settle(node, route, "100"), await settle(node, route, "250"), await settle(node, route, "7")];
		// Signed for a route version that is not active: refused at verification, kept as REJECTED.
		const canceled = (await node.http("POST", "/intents", signedIntent(sender, { ...route, routeVersion: 2 }))).body.data.id;
		const pendingRequest = signedIntent(sender, route);
		const pending = (await node.http("POST", "/intents", pendingRequest)).body;

		const status = await node.http("GET", "/epoch/status");
		expect(status.body).toMatchObject({ epoch: 1, intents: { received: 5, executed: 3, canceled: 1 }, volume: { [MINT]: "357" } });

		const closed = await node.http("POST", "/epoch/close", undefined, worker);
		expect(closed.status).toBe(200);
		expect(closed.body).toEqual({
			epoch: 1,
			startedAt: initial.body.startedAt,
			closedAt: expect.any(String),
			executed: 3,
			canceled: 1,
			volume: { [MINT]: "357" },
			root: expectedRoot(executed),
			archived: 4
		});

		// Archived intents are readable, but leave the live lists and counts.
		expect((await node.http("GET", `/intents/${executed[0].id}`)).body).toMatchObject({ status: "executed", epoch: 1 });
		expect((await node.http("GET", `/intents/${canceled}`)).body).toMatchObject({ status: "canceled" });
		const listed = (await node.http("GET", "/intents?limit=500", undefined, worker)).body.map((i: { id: string }) => i.id);
		expect(listed).toEqual([pending.id]);
		expect((await node.http("POST", "/", { include: ["counts"] })).body.counts).toMatchObject({ CONFIRMED: 0, REJECTED: 0, VERIFIED: 1 });

		// The active intent stays live and counts toward the new epoch's close.
		const next = await node.http("GET", "/epoch/status");
		expect(next.body).toMatchObject({ epoch: 2, startedAt: closed.body.closedAt, intents: { received: 1, executed: 0, canceled: 0 }, volume: {} });
		const fresh = await node.http("POST", "/intents", signedIntent(sender, route));
		expect(fresh.body.epoch).toBe(2);
		// Idempotency outlives archiving: the same body answers the archived record, not a new one.
		const replayExecuted = await node.http("POST", "/intents", pendingRequest);
		expect(replayExecuted.body.id).toBe(pending.id);
	});

	it("closes an epoch once when closes race; an empty epoch has the zero root", async () => {
		// Calls that overlap inside the service: exactly one closes the open epoch.
		let before = (await node.http("GET", "/epoch/status")).body.epoch;
		const overlapping = await Promise.allSettled([0, 1, 2, 3].map(() => node.broker.call("epochs.close")));
		expect(overlapping.filter(r => r.status === "fulfilled")).toHaveLength(1);
		expect(overlapping.filter(r => r.status === "rejected").every(r => (r as PromiseRejectedResult).reason.type === "INVALID_TRANSITION")).toBe(true);
		expect((await node.http("GET", "/epoch/status")).body.epoch).toBe(before + 1);

		// Over HTTP, requests may or may not overlap; either way no epoch is ever closed twice.
		before += 1;
		const answers = await Promise.all([0, 1, 2, 3, 4].map(() => node.http("POST", "/epoch/close", undefined, worker)));
		const closedEpochs = answers.filter(a => a.status === 200).map(a => a.body.epoch).sort((a, b) => a - b);
		expect(closedEpochs).toEqual(Array.from({ length: closedEpochs.length }, (_, i) => before + i));
		expect(answers.filter(a => a.status !== 200).every(a => a.status === 409 && a.body.type === "INVALID_TRANSITION")).toBe(true);
		expect((await node.http("GET", "/epoch/status")).body.epoch).toBe(before + closedEpochs.length);
		before += closedEpochs.length;

		const empty = await node.http("POST", "/epoch/close", undefined, worker);
		expect(empty.body).toMatchObject({ epoch: before, executed: 0, canceled: 0, archived: 0, root: "0".repeat(64), volume: {} });
	});

	it("needs the worker key to close", async () => {
		expect((await node.http("POST", "/epoch/close")).status).toBe(401);
	});

	it("answers a caller without the worker key 401 (a wrong key 403) even while the epochs' owner is down, not the 503 that tells who is (a review)", async () => {
		const alone = await startNode();
		try {
			await alone.broker.destroyService(alone.broker.getLocalService("epochs")!);
			expect((await alone.http("POST", "/epoch/close")).body).toMatchObject({ code: 401, type: "UNAUTHORIZED" });
			expect((await alone.http("POST", "/epoch/close", undefined, { "x-api-key": "not-the-key" })).body).toMatchObject({ code: 403, type: "FORBIDDEN" });
			expect((await alone.http("POST", "/epoch/close", undefined, worker)).status).toBe(503);
		} finally {
			await alone.stop();
		}
	});
});

describe("epoch closes that happen by themselves", () => {
	it("closes an epoch older than EPOCH_DURATION_MS at start, empty or not", async () => {
		const dataDir = tempDir();
		const env = { EPOCH_DURATION_MS: "1000" };
		const young = await startNode(env, dataDir);
		try {
			expect((await young.http("GET", "/epoch/status")).body.epoch).toBe(1);
		} finally {
			await young.stop();
		}
		await new Promise(resolve => setTimeout(resolve, 1100));
		const restarted = await startNode(env, dataDir);
		try {
			// Closed right after the start, which does not wait for it.
			await waitFor(async () => (await restarted.http("GET", "/epoch/status")).body.epoch === 2, 10_000, "epoch 1 closed");
		} finally {
			await restarted.stop();
		}
	});

	it("finishes at the next start a close that a crash interrupted, over the set its mark fixed, with figures that match the store", async () => {
		const dataDir = tempDir();
		const route = newRoute();
		const env = { REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]) };
		let first = await startNode(env, dataDir);
		let executed;
		let late;
		let mark;
		try {
			await first.as(cranker)("POST", "/crankers/heartbeat", signedHeartbeat(cranker));
			executed = [await settle(first, route, "40"), await settle(first, route, "2")];
			await new Promise(resolve => setTimeout(resolve, 5));
			mark = new Date().toISOString();
			await new Promise(resolve => setTimeout(resolve, 5));
			// Settled after the mark: whoever finishes the close leaves it to the next one.
			late = await settle(first, route, "1000");
		} finally {
			await first.stop();
		}
		// What a crash right after the `closing` mark leaves behind: epoch 1 closing, nothing archived, no epoch 2.
		const db = new Database(path.join(dataDir, "epochs.sqlite"));
		const row = db.prepare("SELECT doc FROM epochs WHERE id = '1'").get() as { doc: string };
		const doc = { ...JSON.parse(row.doc), status: "closing", closedAt: mark };
		db.prepare("UPDATE epochs SET status = 'closing', doc = ? WHERE id = '1'").run(JSON.stringify(doc));
		db.close();

		// Another process resumes it, right after its start.
		first = await startNode(env, dataDir);
		try {
			const closedOne = () => {
				const reader = new Database(path.join(dataDir, "epochs.sqlite"), { readonly: true });
				try {
					return JSON.parse((reader.prepare("SELECT doc FROM epochs WHERE id = '1'").get() as { doc: string }).doc).status === "closed";
				} finally {
					reader.close();
				}
			};
			await waitFor(closedOne, 10_000, "epoch 1 closed");
			const status = await first.http("GET", "/epoch/status");
			expect(status.body).toMatchObject({ epoch: 2, intents: { received: 1, executed: 1, canceled: 0 }, volume: { [MINT]: "1000" } });
			expect((await first.http("GET", `/intents/${executed[0].id}`)).body.status).toBe("executed");
			expect((await first.http("GET", "/intents?status=executed", undefined, worker)).body.map((i: { id: string }) => i.id)).toEqual([late.id]);
			// The interrupted epoch is recorded closed, with the root of what its mark fixed.
			const reader = new Database(path.join(dataDir, "epochs.sqlite"), { readonly: true });
			const epoch1 = JSON.parse((reader.prepare("SELECT doc FROM epochs WHERE id = '1'").get() as { doc: string }).doc);
			reader.close();
			expect(epoch1).toMatchObject({ status: "closed", result: { epoch: 1, executed: 2, archived: 2, volume: { [MINT]: "42" }, root: expectedRoot(executed!) } });
			// The figures are the store's: counted here straight from the mempool's file.
			const mempool = new Database(path.join(dataDir, "mempool.sqlite"), { readonly: true });
			const live = Object.fromEntries((mempool.prepare("SELECT state, COUNT(*) AS n FROM intents WHERE archivedIn IS NULL GROUP BY state").all() as { state: string; n: number }[]).map(r => [r.state, r.n]));
			const settledCount = (mempool.prepare("SELECT COUNT(*) AS n FROM intents WHERE state = 'CONFIRMED'").get() as { n: number }).n;
			mempool.close();
			const metrics = (await first.http("GET", "/metrics")).body;
			expect(Object.fromEntries(Object.entries(metrics.intents).filter(([, n]) => n !== 0))).toEqual(live);
			expect(metrics.settled).toEqual({ count: settledCount, volume: { [MINT]: "1042" } });
			expect((await first.http("POST", "/epoch/close", undefined, worker)).body).toMatchObject({ epoch: 2, executed: 1, root: expectedRoot([late]) });
			expect((await first.http("GET", "/metrics")).body.intents.CONFIRMED).toBe(0);
		} finally {
			await first.stop();
		}
	});
});

describe("the close of a large epoch", () => {
	it("archives 1,400 terminal intents within its answer's time, where one commit per intent outlasted it (503), and a retry naming the epoch answers its result", async () => {
		const route = newRoute();
		const dataDir = tempDir();
		// A wide commit window, so that 1,400 intents take what tens of thousands take with the default one.
		const node = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]), STORE_COMMIT_WINDOW_MS: "25" }, dataDir);
		try {
			for (let i = 0; i < 1400; i += 100)
				for (const { status } of await Promise.all(Array.from({ length: 100 }, () => node.http("POST", "/intents", signedIntent(sender, { ...route, routeVersion: 2 }))))) expect(status).toBe(422);
			const closed = await node.http("POST", "/epoch/close", { epoch: 1 }, worker);
			expect(closed.status).toBe(200);
			expect(closed.body).toMatchObject({ epoch: 1, canceled: 1400, archived: 1400 });
			// An operator's retry that names the epoch gets its result again, and never closes the next one.
			expect(await node.http("POST", "/epoch/close", { epoch: 1 }, worker)).toMatchObject({ status: 200, body: closed.body });
			expect((await node.http("GET", "/epoch/status")).body).toMatchObject({ epoch: 2 });
			expect((await node.http("POST", "/epoch/close", { epoch: 3 }, worker)).body).toMatchObject({ code: 409, type: "INVALID_TRANSITION", message: "Epoch 3 is not open" });
			expect((await node.http("POST", "/epoch/close", { epoch: 0 }, worker)).status).toBe(422);
			expect(await node.http("POST", "/epoch/close", { epoch: 2 }, worker)).toMatchObject({ status: 200, body: { epoch: 2, archived: 0 } });
			// A close this process began and no longer runs (its store failed midway, say): the sole SQLite
			// owner resumes it for the retry, where it answered 409 "still being closed" for ten minutes.
			const db = new Database(path.join(dataDir, "epochs.sqlite"));
			const row = db.prepare("SELECT doc FROM epochs WHERE id = '3'").get() as { doc: string };
			db.prepare("UPDATE epochs SET status = 'closing', doc = ? WHERE id = '3'").run(JSON.stringify({ ...JSON.parse(row.doc), status: "closing", closedAt: new Date().toISOString() }));
			db.close();
			expect(await node.http("POST", "/epoch/close", { epoch: 3 }, worker)).toMatchObject({ status: 200, body: { epoch: 3, archived: 0 } });
		} finally {
			await node.stop();
		}
	}, 120_000);
});
