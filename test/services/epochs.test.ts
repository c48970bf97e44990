/**
 * The epochs service beside its real neighbour, the mempool (which archives what a close takes),
 * each on a real SQLite file of one data directory: a close opens the next epoch first, one of
 * racing closes wins, a retried call answers its own close, and a close a crash left half-done, or
 * an epoch past EPOCH_DURATION_MS, is finished at the next start.
 */
import { ServiceBroker, type Context } from "moleculer";
import type { EpochCloseResult } from "../../lib/answers";
import { loadConfig } from "../../lib/config";
import { requestDigest } from "../../lib/digest";
import { openStore } from "../../lib/store";
import { EPOCHS_COLLECTION, epochsService, type EpochDoc } from "../../services/epochs.service";
import { mempoolService } from "../../services/mempool.service";
import { newRoute, newWallet, signedIntent } from "../helpers/fixtures";
import { sleep, tempDir } from "../helpers/node";

async function startEpochs(dataDir: string, env: Record<string, string> = {}) {
	const broker = new ServiceBroker({ logger: false });
	const config = loadConfig({ DATA_DIR: dataDir, SWEEP_INTERVAL_MS: "60000", ...env });
	broker.createService(mempoolService(config));
	broker.createService(epochsService(config));
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
async function withEpochs(dataDir: string, env: Record<string, string>, body: (epochs: Awaited<ReturnType<typeof startEpochs>>) => Promise<void>) {
	const epochs = await startEpochs(dataDir, env);
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
		// Already closed: a retry of the call or another close finds epoch 2 open.
		expect(await epochs.close()).toMatchObject({ epoch: 2, archived: 0 });
	});
	const reopened = await epochsStore(dataDir);
	try {
		expect(await reopened.epochs.get("1")).toMatchObject({ status: "closed", result: { epoch: 1, canceled: 1, archived: 1 } });
	} finally {
		await reopened.store.close();
	}
});

test("an epoch older than EPOCH_DURATION_MS is closed at start", async () => {
	const dataDir = tempDir();
	await withEpochs(dataDir, { EPOCH_DURATION_MS: "300" }, async epochs => expect((await epochs.current()).epoch).toBe(1));
	await sleep(350);
	await withEpochs(dataDir, { EPOCH_DURATION_MS: "300" }, async epochs => expect((await epochs.current()).epoch).toBe(2));
});
