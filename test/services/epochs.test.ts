/**
 * The epochs service beside its real neighbour, the mempool (which archives what a close takes),
 * each on a real SQLite file of one data directory: a close opens the next epoch first, one of
 * racing closes wins, a retried call answers its own close, and a close a crash left half-done, or
 * an epoch past EPOCH_DURATION_MS, is finished at the next start.
 */
import { createHash } from "node:crypto";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { ServiceBroker, type ActionHandler, type ActionSchema, type Context, type Middleware, type Service } from "moleculer";
import type { EpochCloseResult } from "../../lib/answers";
import { loadConfig } from "../../lib/config";
import { ServiceError } from "../../lib/errors";
import { requestDigest } from "../../lib/digest";
import { decidedRecord } from "../../lib/intake";
import { newId } from "../../lib/ids";
import type { IntentRecord } from "../../lib/intents";
import { byId, merkleRoot } from "../../lib/merkle";
import { openStore } from "../../lib/store";
import { EPOCHS_COLLECTION, epochsService, type EpochDoc } from "../../services/epochs.service";
import { INTENTS_COLLECTION, mempoolService } from "../../services/mempool.service";
import { newRoute, newWallet, signedIntent } from "../helpers/fixtures";
import { sleep, tempDir } from "../helpers/node";
import { waitFor } from "../../devkit/process";

/** Owners of a shared store (MongoDB) are replicas: none may take over a close another is finishing. */
const REPLICA = { soleOwner: false };

interface EpochsOptions {
	/** Over the service's own settings: REPLICA, or shorter renewal times. */
	settings?: object;
	/** Around the calls the epochs make (the mempool's archive and summary pages). */
	middlewares?: Middleware[];
}

/** A broker with the epochs beside the mempool, not started; `warnings` collects what the epochs log as such. */
function epochsOn(dataDir: string, env: Record<string, string> = {}, { settings = {}, middlewares = [] }: EpochsOptions = {}) {
	const broker = new ServiceBroker({ logger: false, middlewares });
	const config = loadConfig({ DATA_DIR: dataDir, SWEEP_INTERVAL_MS: "60000", ...env });
	broker.createService(mempoolService(config));
	const epochs = epochsService(config);
	const service = broker.createService({ ...epochs, settings: { ...epochs.settings!, ...settings } });
	const warnings: string[] = [];
	jest.spyOn(service.logger, "warn").mockImplementation((...args: unknown[]) => void warnings.push(args.join(" ")));
	return {
		broker,
		warnings,
		current: () => broker.call<{ epoch: number; startedAt: string }>("epochs.current"),
		close: (parentCtx?: Context) => broker.call<EpochCloseResult, object>("epochs.close", {}, parentCtx ? { parentCtx } : {}),
		/** An intent stored as its verifier decided: refused ones are REJECTED, a terminal state a close archives. */
		receive: (ok: boolean) => {
			const request = signedIntent(newWallet(), newRoute());
			const verdict = ok ? { ok, verifiedBy: "verifier@test" } : { ok, reason: "UNKNOWN_TIN", verifiedBy: "verifier@test" };
			return broker.call("mempool.receive", { request, epoch: 1, requestDigest: requestDigest(request), verdict });
		}
	};
}

type Epochs = ReturnType<typeof epochsOn>;

/** Runs `body` against epochs started on `dataDir`, and stops them after it (which waits for the check begun at start), whatever happens. */
async function withEpochs(dataDir: string, env: Record<string, string>, body: (epochs: Epochs) => Promise<void>, options: EpochsOptions = {}) {
	const epochs = epochsOn(dataDir, env, options);
	await epochs.broker.start();
	try {
		await body(epochs);
	} finally {
		await epochs.broker.stop();
	}
}

/** The epochs' store as the service keeps it, for a test that leaves a close as a crash would. */
async function epochsStore(dataDir: string) {
	const store = await openStore({ kind: "sqlite", dataDir, mongoUrl: null, allowWeakDurability: false, owner: "epochs", commitWindowMs: 0 });
	const epochs = await store.collection<EpochDoc>(EPOCHS_COLLECTION);
	return { store, epochs };
}

const minutesAgo = (minutes: number) => new Date(Date.now() - minutes * 60_000).toISOString();

/** Epoch 1 as a replica's close left it: marked closing at `closedAt`, last renewed at `renewedAt`. */
async function markEpochOneClosing(dataDir: string, closedAt: string, renewedAt: string) {
	const { store, epochs } = await epochsStore(dataDir);
	try {
		const one = (await epochs.get("1"))!;
		expect(await epochs.update("1", { epoch: 1 }, { ...one, status: "closing", closedAt, renewedAt })).toBe(true);
	} finally {
		await store.close();
	}
}

async function epochOneIn(dataDir: string) {
	const { store, epochs } = await epochsStore(dataDir);
	try {
		return (await epochs.get("1"))!;
	} finally {
		await store.close();
	}
}

/** A middleware that runs `before` ahead of each call of the local `action`. */
function beforeCalls(action: string, before: () => Promise<void>): Middleware {
	return {
		localAction: (next: ActionHandler, schema: ActionSchema) =>
			schema.name === action
				? async (ctx: Context) => {
						await before();
						return next.call(ctx.service as Service, ctx);
					}
				: next
	};
}

/**
 * Has the epochs' store write the first write `when` picks (as `landed` makes it: what lands) and
 * then report a failure, as a write concern's timeout does; `failed()` says whether it came.
 */
function writeLandsButFails(epochs: Epochs, when: (expected: object, next: EpochDoc) => boolean, landed = (next: EpochDoc) => next): () => boolean {
	const service = epochs.broker.getLocalService("epochs") as unknown as { epochs: { update(id: string, expected: object, next: EpochDoc): Promise<boolean> } };
	const update = service.epochs.update.bind(service.epochs);
	let failed = false;
	jest.spyOn(service.epochs, "update").mockImplementation(async (id, expected, next) => {
		if (failed || !when(expected, next)) return update(id, expected, next);
		failed = true;
		expect(await update(id, expected, landed(next))).toBe(true);
		throw new ServiceError("NOT_READY", "The write concern timed out");
	});
	return () => failed;
}

test("the first start opens epoch 1, and a restart opens no other", async () => {
	const dataDir = tempDir();
	await withEpochs(dataDir, {}, async epochs => expect((await epochs.current()).epoch).toBe(1));
	await withEpochs(dataDir, {}, async epochs => expect((await epochs.current()).epoch).toBe(1));
});

test("a close archives the epoch's terminal intents and opens the next; of closes racing, one wins and the others are 409", async () => {
	await withEpochs(tempDir(), {}, async epochs => {
		await epochs.receive(false);
		await epochs.receive(false);
		await epochs.receive(true);
		const outcomes = await Promise.allSettled([epochs.close(), epochs.close(), epochs.close()]);
		const won = outcomes.filter(outcome => outcome.status === "fulfilled").map(outcome => (outcome as PromiseFulfilledResult<EpochCloseResult>).value);
		expect(won).toHaveLength(1);
		expect(won[0]).toEqual({ epoch: 1, startedAt: expect.any(String), closedAt: expect.any(String), executed: 0, canceled: 2, archived: 2, volume: {}, root: expect.any(String) });
		expect(outcomes.filter(outcome => outcome.status === "rejected").map(outcome => (outcome as PromiseRejectedResult).reason.type)).toEqual(["INVALID_TRANSITION", "INVALID_TRANSITION"]);
		expect((await epochs.current()).epoch).toBe(2);
	});
});

test("a retry of the same close call answers that close and closes nothing more; a new call closes the next epoch", async () => {
	await withEpochs(tempDir(), {}, async epochs => {
		const call = epochs.broker.ContextFactory.create(epochs.broker, null as never, {}, {}) as Context;
		const first = await epochs.close(call);
		expect(await epochs.close(call)).toEqual(first);
		expect((await epochs.current()).epoch).toBe(2);
		expect((await epochs.close()).epoch).toBe(2);
	});
});

test("with replicas, a retry of a close call that another replica is finishing is 503, and starts no second finisher", async () => {
	const dataDir = tempDir();
	await withEpochs(dataDir, {}, async epochs => void (await epochs.receive(false)));
	let archives = 0;
	await withEpochs(dataDir, {}, async epochs => {
		const call = epochs.broker.ContextFactory.create(epochs.broker, null as never, {}, {}) as Context;
		// Begun by that call on another replica, which renewed it a moment ago.
		const { store, epochs: stored } = await epochsStore(dataDir);
		try {
			const one = (await stored.get("1"))!;
			const now = new Date().toISOString();
			expect(await stored.update("1", { status: "open" }, { ...one, status: "closing", closedAt: now, renewedAt: now, closeCall: `${call.id}/epochs.close` })).toBe(true);
		} finally {
			await store.close();
		}
		await expect(epochs.close(call)).rejects.toMatchObject({ type: "NOT_READY", data: { epoch: 1 } });
	}, { settings: REPLICA, middlewares: [beforeCalls("mempool.archiveTerminal", async () => void archives++)] });
	expect(archives).toBe(0);
	expect(await epochOneIn(dataDir)).toMatchObject({ status: "closing", result: null });
});

test("a close a crash left marked closing is finished at the next start, with the next epoch open", async () => {
	const dataDir = tempDir();
	await withEpochs(dataDir, {}, async epochs => void (await epochs.receive(false)));
	// Stopped after the mark, before the archive: epoch 1 closing, and (as when the successor's insert was lost) no epoch 2.
	const { store, epochs: stored } = await epochsStore(dataDir);
	try {
		const one = (await stored.get("1"))!;
		expect(await stored.update("1", { status: "open" }, { ...one, status: "closing", closedAt: new Date().toISOString() })).toBe(true);
	} finally {
		await store.close();
	}

	await withEpochs(dataDir, {}, async epochs => {
		expect((await epochs.current()).epoch).toBe(2);
		// Finished right after the start (which does not wait for it): then another close finds epoch 2 open.
		expect(await waitFor(() => epochs.close().catch(() => null), 10_000, "epoch 1 closed")).toMatchObject({ epoch: 2, archived: 0 });
	});
	const reopened = await epochsStore(dataDir);
	try {
		expect(await reopened.epochs.get("1")).toMatchObject({ status: "closed", result: { epoch: 1, canceled: 1, archived: 1 } });
	} finally {
		await reopened.store.close();
	}
});

test("a replica takes over a close only once its finisher stopped renewing it, however old its mark", async () => {
	const dataDir = tempDir();
	await withEpochs(dataDir, {}, async epochs => void (await epochs.receive(false)));
	const markClosing = (closedAt: string, renewedAt: string) => markEpochOneClosing(dataDir, closedAt, renewedAt);
	const epochOne = () => epochOneIn(dataDir);
	// Marked half an hour ago, renewed a minute ago: another replica is at it. (A stop waits for the check begun at start.)
	const renewal = minutesAgo(1);
	await markClosing(minutesAgo(30), renewal);
	await withEpochs(dataDir, {}, async epochs => {
		expect((await epochs.current()).epoch).toBe(2);
		await expect(epochs.broker.call("epochs.close", { epoch: 1 })).rejects.toMatchObject({ type: "NOT_READY" });
	}, { settings: REPLICA });
	expect(await epochOne()).toMatchObject({ status: "closing", renewedAt: renewal, result: null });
	// Not renewed for eleven minutes: abandoned, taken over and finished (marked after the intent was refused, so it archives it).
	await markClosing(new Date().toISOString(), minutesAgo(11));
	await withEpochs(dataDir, {}, async epochs => {
		expect(await waitFor(() => epochs.broker.call<EpochCloseResult, object>("epochs.close", { epoch: 1 }).catch(() => null), 10_000, "epoch 1 closed")).toMatchObject({ epoch: 1, canceled: 1 });
	}, { settings: REPLICA });
});

test("a finisher whose renewal another replica replaced stops quietly and leaves the close to it; a store outage still fails the check, and lets go of the close for the next check", async () => {
	const dataDir = tempDir();
	await withEpochs(dataDir, {}, async epochs => void (await epochs.receive(false)));
	await markEpochOneClosing(dataDir, new Date().toISOString(), minutesAgo(11));
	// Taken over at start, then, before its first renewal (at every step here), taken over in turn by another replica.
	const theirs = new Date(Date.now() + 60_000).toISOString();
	let archives = 0;
	const takeOverInTurn = beforeCalls("mempool.archiveTerminal", async () => {
		if (archives++ > 0) return;
		const { store, epochs } = await epochsStore(dataDir);
		try {
			const one = (await epochs.get("1"))!;
			expect(await epochs.update("1", { status: "closing" }, { ...one, renewedAt: theirs })).toBe(true);
		} finally {
			await store.close();
		}
	});
	let warnings: string[] = [];
	await withEpochs(dataDir, {}, async epochs => void (warnings = epochs.warnings), { settings: { ...REPLICA, renewEveryMs: 0 }, middlewares: [takeOverInTurn] });
	expect(archives).toBe(1);
	expect(warnings).toEqual([]);
	expect(await epochOneIn(dataDir)).toMatchObject({ status: "closing", renewedAt: theirs, result: null });

	// The same close, not renewed for eleven minutes again, and the mempool failing its first archive call as a store outage does (also NOT_READY).
	await markEpochOneClosing(dataDir, new Date().toISOString(), minutesAgo(11));
	let failed = false;
	const storeOutage = beforeCalls("mempool.archiveTerminal", async () => {
		if (failed) return;
		failed = true;
		throw new ServiceError("NOT_READY", "The store is unavailable");
	});
	await withEpochs(dataDir, {}, async epochs => void (warnings = epochs.warnings), { settings: REPLICA, middlewares: [storeOutage] });
	expect(warnings).toEqual([expect.stringMatching(/^The epoch check at start failed.*: The store is unavailable$/)]);
	// The failed finisher let go of the close: the next check takes it over at once, not ten minutes later.
	expect(await epochOneIn(dataDir)).toMatchObject({ status: "closing", renewedAt: new Date(0).toISOString(), result: null });
	await withEpochs(dataDir, {}, async epochs => {
		expect(await waitFor(() => epochs.broker.call<EpochCloseResult, object>("epochs.close", { epoch: 1 }).catch(() => null), 10_000, "epoch 1 closed")).toMatchObject({ epoch: 1, canceled: 1 });
	}, { settings: REPLICA });
});

test("a finisher whose renewal landed though its write failed (a write concern's timeout) still lets go of the close", async () => {
	const dataDir = tempDir();
	let armed = false;
	await withEpochs(dataDir, {}, async epochs => {
		await epochs.receive(false);
		writeLandsButFails(epochs, (expected, next) => armed && "renewedAt" in expected && next.renewedAt !== new Date(0).toISOString());
		await expect(epochs.broker.call("epochs.close", { epoch: 1 })).rejects.toMatchObject({ message: "The write concern timed out" });
	}, { settings: { ...REPLICA, renewEveryMs: 0 }, middlewares: [beforeCalls("mempool.archiveTerminal", async () => void (armed = true))] });
	expect(await epochOneIn(dataDir)).toMatchObject({ status: "closing", renewedAt: new Date(0).toISOString(), result: null });
});

test("a replica stopped while it finishes a close stops at the next step and lets go of the close, for the next check to take over", async () => {
	const dataDir = tempDir();
	await withEpochs(dataDir, {}, async epochs => void (await epochs.receive(false)));
	let stopping: Promise<void> | null = null;
	const epochs = epochsOn(dataDir, {}, {
		settings: REPLICA,
		// The stop begins while the close archives its first batch, which goes on once the services are stopping.
		middlewares: [
			beforeCalls("mempool.archiveTerminal", async () => {
				stopping ??= epochs.broker.stop();
				await sleep(200);
			})
		]
	});
	await epochs.broker.start();
	const closing = epochs.broker.call("epochs.close", { epoch: 1 }).catch(err => err);
	await waitFor(() => stopping, 10_000, "the stop");
	await stopping;
	// Stopped at its next step (or failed by the mempool's stop): either way not closed, and let go of.
	expect(await closing).toBeInstanceOf(Error);
	expect(await epochOneIn(dataDir)).toMatchObject({ status: "closing", renewedAt: new Date(0).toISOString(), result: null });
	await withEpochs(dataDir, {}, async next => {
		expect(await waitFor(() => next.broker.call<EpochCloseResult, object>("epochs.close", { epoch: 1 }).catch(() => null), 10_000, "epoch 1 closed")).toMatchObject({ epoch: 1, canceled: 1 });
	}, { settings: REPLICA });
});

test("a close whose mark was under way as the stop began is let go of, not left marked for 10 minutes (a review)", async () => {
	const dataDir = tempDir();
	await withEpochs(dataDir, {}, async epochs => void (await epochs.receive(false)));
	const epochs = epochsOn(dataDir, {}, { settings: REPLICA });
	await epochs.broker.start();
	const service = epochs.broker.getLocalService("epochs") as unknown as { stopping: boolean; epochs: { insert(doc: EpochDoc): Promise<boolean> } };
	const insert = service.epochs.insert.bind(service.epochs);
	let stopping: Promise<void> | null = null;
	// The close opens epoch 2 (before its mark), and the stop begins then.
	jest.spyOn(service.epochs, "insert").mockImplementation(async doc => {
		stopping ??= epochs.broker.stop();
		await waitFor(() => service.stopping, 10_000, "the epochs stopping");
		return insert(doc);
	});
	const closing = epochs.broker.call("epochs.close", { epoch: 1 }).catch(err => err);
	await waitFor(() => stopping, 10_000, "the stop");
	await stopping;
	expect(await closing).toMatchObject({ type: "NOT_READY", message: expect.stringMatching(/stopping/) });
	expect(await epochOneIn(dataDir)).toMatchObject({ status: "closing", renewedAt: new Date(0).toISOString(), result: null });
});

test("once its stop has begun, a replica marks no close and takes none over: it could not finish them, and its mark would be held for 10 minutes (a review)", async () => {
	const dataDir = tempDir();
	await withEpochs(dataDir, {}, async epochs => void (await epochs.receive(false)));
	await markEpochOneClosing(dataDir, new Date().toISOString(), minutesAgo(11));
	await withEpochs(dataDir, {}, async epochs => {
		// As stopped() leaves it while the broker's stop goes on (its tracker waits for calls in flight).
		const service = epochs.broker.getLocalService("epochs") as unknown as { stopping: boolean; maintain(): Promise<void> };
		// The start's check took epoch 1 over and finished it; epoch 2 is open.
		await waitFor(async () => (await epochOneIn(dataDir)).status === "closed", 10_000, "epoch 1 closed");
		service.stopping = true;
		await expect(epochs.broker.call("epochs.close", {})).rejects.toMatchObject({ type: "NOT_READY", message: expect.stringMatching(/stopping/) });
		await expect(epochs.broker.call("epochs.close", { epoch: 2 })).rejects.toMatchObject({ type: "NOT_READY" });
		const { store, epochs: stored } = await epochsStore(dataDir);
		try {
			expect(await stored.get("2")).toMatchObject({ status: "open", closedAt: null });
			// Another replica's close of epoch 2, abandoned: not taken over by this one.
			const stale = minutesAgo(11);
			expect(await stored.update("2", { status: "open" }, { ...(await stored.get("2"))!, status: "closing", closedAt: stale, renewedAt: stale })).toBe(true);
			await service.maintain();
			expect(await stored.get("2")).toMatchObject({ status: "closing", renewedAt: stale });
		} finally {
			await store.close();
		}
		expect(epochs.warnings).toEqual([]);
	}, { settings: REPLICA });
});

test("a mark whose write landed though it reported a failure (a write concern's timeout) is read back and its close finished, not left marked for 10 minutes (a review)", async () => {
	const dataDir = tempDir();
	await withEpochs(dataDir, {}, async epochs => {
		await epochs.receive(false);
		const failed = writeLandsButFails(epochs, expected => (expected as { status?: string }).status === "open");
		expect(await epochs.broker.call("epochs.close", { epoch: 1 })).toMatchObject({ epoch: 1, canceled: 1 });
		expect(failed()).toBe(true);
	}, { settings: REPLICA });
});

test("a mark whose write failed is not taken for one that landed when the close bears another call's mark of the same millisecond: that call's retry must find it (a review)", async () => {
	const dataDir = tempDir();
	await withEpochs(dataDir, {}, async epochs => {
		await epochs.receive(false);
		// Another replica's close, begun by an operator's call, marked in the same millisecond; this one's write fails.
		writeLandsButFails(epochs, () => true, next => ({ ...next, closeCall: "another-call/epochs.close" }));
		await expect(epochs.broker.call("epochs.close", { epoch: 1 })).rejects.toMatchObject({ message: "The write concern timed out" });
		expect(await epochOneIn(dataDir)).toMatchObject({ status: "closing", closeCall: "another-call/epochs.close" });
	}, { settings: REPLICA });
});

test("a finisher whose renewal fails because another replica closed the epoch meanwhile answers that close, not 503", async () => {
	const dataDir = tempDir();
	let armed = false;
	await withEpochs(dataDir, {}, async epochs => {
		await epochs.receive(false);
		// Between this finisher's read of its close (to renew it) and its compare-and-set, another replica stores the result.
		const service = epochs.broker.getLocalService("epochs") as unknown as { epochs: { get(id: string): Promise<EpochDoc | null> } };
		const get = service.epochs.get.bind(service.epochs);
		let theirs: EpochCloseResult | null = null;
		jest.spyOn(service.epochs, "get").mockImplementation(async id => {
			const found = await get(id);
			if (armed && found?.status === "closing") {
				armed = false;
				const { store, epochs: other } = await epochsStore(dataDir);
				try {
					theirs = { epoch: 1, startedAt: found.startedAt, closedAt: found.closedAt!, archived: 1, canceled: 1 } as unknown as EpochCloseResult;
					expect(await other.update("1", { status: "closing" }, { ...found, status: "closed", result: theirs })).toBe(true);
				} finally {
					await store.close();
				}
			}
			return found;
		});
		expect(await epochs.broker.call("epochs.close", { epoch: 1 })).toEqual(theirs);
		expect(theirs).not.toBeNull();
		expect(epochs.warnings).toEqual([]);
	}, { settings: { ...REPLICA, renewEveryMs: 0 }, middlewares: [beforeCalls("mempool.archiveTerminal", async () => void (armed = true))] });
});

test("of replicas that find an abandoned close together, the first to take it over finishes it: the others' compare-and-set fails", async () => {
	const dataDir = tempDir();
	let summed = 0;
	await withEpochs(dataDir, {}, async epochs => {
		await epochs.receive(false);
		await markEpochOneClosing(dataDir, new Date().toISOString(), minutesAgo(11));
		// Another replica takes the close over between this one's read of it and its own compare-and-set.
		const service = epochs.broker.getLocalService("epochs") as unknown as { epochs: { list(query: { where: { status?: string } }): Promise<EpochDoc[]> }; maintain(): Promise<void> };
		const theirs = new Date().toISOString();
		const list = service.epochs.list.bind(service.epochs);
		jest.spyOn(service.epochs, "list").mockImplementation(async query => {
			const found = await list(query);
			if (query.where?.status === "closing" && found.length) await markEpochOneClosing(dataDir, found[0].closedAt!, theirs);
			return found;
		});
		await service.maintain();
		expect(await epochOneIn(dataDir)).toMatchObject({ status: "closing", renewedAt: theirs, result: null });
		expect(epochs.warnings).toEqual([]);
	}, { settings: REPLICA, middlewares: [beforeCalls("mempool.archivedPage", async () => void summed++)] });
	// Only a finisher sums the close's archive.
	expect(summed).toBe(0);
});

test("an epoch older than EPOCH_DURATION_MS is closed at start", async () => {
	const dataDir = tempDir();
	await withEpochs(dataDir, { EPOCH_DURATION_MS: "300" }, async epochs => expect((await epochs.current()).epoch).toBe(1));
	await sleep(350);
	await withEpochs(dataDir, { EPOCH_DURATION_MS: "300" }, async epochs => void (await waitFor(async () => (await epochs.current()).epoch === 2, 10_000, "epoch 1 closed")));
});

test("the close of an epoch of 60,000 intents never holds the event loop for long: its summary goes in bounded pages, and the start does not wait for it", async () => {
	const dataDir = tempDir();
	await withEpochs(dataDir, {}, async epochs => expect((await epochs.current()).epoch).toBe(1));
	// An epoch archived whole, then stopped before its summary (a crash): one in seven canceled.
	const mempoolStore = await openStore({ kind: "sqlite", dataDir, mongoUrl: null, owner: "mempool" });
	const intents = await mempoolStore.collection<IntentRecord>(INTENTS_COLLECTION);
	const request = signedIntent(newWallet(), newRoute());
	const at = new Date(Date.now() - 60_000).toISOString();
	const executed: IntentRecord[] = [];
	let canceled = 0;
	for (let i = 0; i < 60_000; i += 1000)
		await Promise.all(
			Array.from({ length: 1000 }, async (_, j) => {
				// One signature for all: what is summed is read, never verified.
				const own = { ...request, paymentId: `p${i + j}`, amount: String(1 + ((i + j) % 97)), transactionCommitment: createHash("sha256").update(String(i + j)).digest("hex") };
				const decided = decidedRecord({ id: newId("int"), request: own, requestDigest: requestDigest(own), transactionCommitment: own.transactionCommitment, epoch: 1, at, intakeCall: null }, { ok: true, verifiedBy: "verifier@test" });
				const record: IntentRecord = { ...decided, state: (i + j) % 7 === 0 ? "REJECTED" : "CONFIRMED", nonceKey: null, stateVersion: 6, archivedIn: 1 };
				expect(await intents.insert(record)).toBe(true);
				if (record.state === "CONFIRMED") executed.push(record);
				else canceled++;
			})
		);
	await mempoolStore.close();
	const { store, epochs: stored } = await epochsStore(dataDir);
	try {
		const one = (await stored.get("1"))!;
		expect(await stored.update("1", { status: "open" }, { ...one, status: "closing", closedAt: at })).toBe(true);
	} finally {
		await store.close();
	}

	// SQLite answers a read at once: summed in one call, the whole epoch held the loop (about 0.7 s here, 12 s for a million).
	const delay = monitorEventLoopDelay({ resolution: 5 });
	delay.enable();
	await withEpochs(dataDir, {}, async epochs => {
		expect((await epochs.current()).epoch).toBe(2);
		const result = await waitFor(() => epochs.broker.call<EpochCloseResult, object>("epochs.close", { epoch: 1 }).catch(() => null), 60_000, "epoch 1 closed");
		delay.disable();
		const volume = executed.reduce((sum, record) => sum + BigInt(record.request.amount), 0n).toString();
		expect(result).toMatchObject({ epoch: 1, executed: executed.length, canceled, archived: 60_000, volume: { [request.tokenMintAddress]: volume }, root: merkleRoot([...executed].sort(byId).map(record => record.transactionCommitment)) });
	});
	expect(delay.max / 1e6).toBeLessThan(200);
}, 120_000);
