/**
 * The epochs service beside its real neighbour, the mempool (which archives what a close takes),
 * each on a real SQLite file of one data directory: a close opens the next epoch first, one of
 * racing closes wins, a retried call answers its own close, and a close a crash left half-done, or
 * an epoch past EPOCH_DURATION_MS, is finished at the next start.
 */
import { createHash } from "node:crypto";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { ServiceBroker, type Context } from "moleculer";
import type { EpochCloseResult } from "../../lib/answers";
import { loadConfig } from "../../lib/config";
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

/** `replica`: as one of several owners of a shared store (MongoDB), which may not take over a close another is finishing. */
async function startEpochs(dataDir: string, env: Record<string, string> = {}, replica = false) {
	const broker = new ServiceBroker({ logger: false });
	const config = loadConfig({ DATA_DIR: dataDir, SWEEP_INTERVAL_MS: "60000", ...env });
	broker.createService(mempoolService(config));
	const epochs = epochsService(config);
	broker.createService(replica ? { ...epochs, settings: { ...epochs.settings!, soleOwner: false } } : epochs);
	await broker.start();
	return {
		broker,
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

/** Runs `body` against epochs started on `dataDir`, and stops them after it, whatever happens. */
async function withEpochs(dataDir: string, env: Record<string, string>, body: (epochs: Awaited<ReturnType<typeof startEpochs>>) => Promise<void>, replica = false) {
	const epochs = await startEpochs(dataDir, env, replica);
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
	const minutesAgo = (minutes: number) => new Date(Date.now() - minutes * 60_000).toISOString();
	const markClosing = async (closedAt: string, renewedAt: string) => {
		const { store, epochs: stored } = await epochsStore(dataDir);
		try {
			const one = (await stored.get("1"))!;
			expect(await stored.update("1", { epoch: 1 }, { ...one, status: "closing", closedAt, renewedAt })).toBe(true);
		} finally {
			await store.close();
		}
	};
	const epochOne = async () => {
		const { store, epochs: stored } = await epochsStore(dataDir);
		try {
			return (await stored.get("1"))!;
		} finally {
			await store.close();
		}
	};
	// Marked half an hour ago, renewed a minute ago: another replica is at it. (A stop waits for the check begun at start.)
	const renewal = minutesAgo(1);
	await markClosing(minutesAgo(30), renewal);
	await withEpochs(dataDir, {}, async epochs => {
		expect((await epochs.current()).epoch).toBe(2);
		await expect(epochs.broker.call("epochs.close", { epoch: 1 })).rejects.toMatchObject({ type: "NOT_READY" });
	}, true);
	expect(await epochOne()).toMatchObject({ status: "closing", renewedAt: renewal, result: null });
	// Not renewed for eleven minutes: abandoned, taken over and finished (marked after the intent was refused, so it archives it).
	await markClosing(new Date().toISOString(), minutesAgo(11));
	await withEpochs(dataDir, {}, async epochs => {
		expect(await waitFor(() => epochs.broker.call<EpochCloseResult, object>("epochs.close", { epoch: 1 }).catch(() => null), 10_000, "epoch 1 closed")).toMatchObject({ epoch: 1, canceled: 1 });
	}, true);
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
