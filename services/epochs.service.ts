/**
 * epochs: owns the epoch sequence (SPEC §8). Epochs are numbered from 1. Closing epoch E opens
 * E + 1, has the mempool archive every terminal intent of E or earlier, and records the Merkle
 * root of the executed ones. A close is resumable: it is marked `closing` first, and a close left
 * half-done by a crash is finished at the next start (or minute), by this replica or another.
 *
 * What a close archives is fixed by its mark: the terminal intents of E or earlier that were last
 * changed at or before `closedAt` (the mempool stamps a move just before it stores it). A close
 * sums its archive only EPOCH_CLOSE_SETTLE_MS after the mark, when every such move has landed, so
 * every replica that finishes (or resumes) the same close archives the same set and computes the
 * same result and root; the first to store it wins, and the others answer the stored one.
 */
import type { Context, ServiceBroker, ServiceSchema } from "moleculer";
import type { EpochCloseResult, EpochStatus } from "../lib/answers";
import type { Config } from "../lib/config";
import { ServiceError } from "../lib/errors";
import type { Collection } from "../lib/store";
import { storeMixin } from "../mixins/store.mixin";
import { sweepMetrics } from "./metrics";
import { callKey } from "./replay";
import { sweeperMixin } from "../mixins/sweeper.mixin";
import { internal } from "./internal";

interface EpochDoc {
	/** The epoch number as a string. */
	id: string;
	epoch: number;
	status: "open" | "closing" | "closed";
	startedAt: string;
	closedAt: string | null;
	result: EpochCloseResult | null;
	/** The call that began the close, so that a retry of it answers with this close (services/replay.ts). */
	closeCall?: string | null;
}

const ARCHIVE_BATCH = 500;
/** SPEC §8: the age check runs at start and every minute. */
const CHECK_INTERVAL_MS = 60_000;
/** A close still `closing` this long after it began is taken for abandoned (its process died). */
const RESUME_AFTER_MS = 10 * 60_000;

export function epochsService(config: Config): ServiceSchema {
	let epochs: Collection<EpochDoc>;
	let broker: ServiceBroker;
	let sweeps: ReturnType<typeof sweepMetrics>;
	const closed = () => sweeps.inc({ sweep: "epoch", result: "closed" });
	/** Closes this process is finishing now: the minute check, or a repeat of the call, joins them. */
	const inFlight = new Map<number, Promise<EpochCloseResult>>();
	const ignoreRace = (err: unknown) => {
		if ((err as ServiceError).type !== "INVALID_TRANSITION") throw err;
	};

	async function openEpoch(): Promise<EpochDoc> {
		const [open] = await epochs.list({ where: { status: "open" }, orderBy: ["epoch", "desc"], limit: 1 });
		if (!open) throw new ServiceError("NOT_READY", "No epoch is open");
		return open;
	}

	/** Opens epoch `epoch` unless it exists already (insert is a no-op then), and tells the receivers. */
	async function openEpochNumber(epoch: number, startedAt: string): Promise<void> {
		if (await epochs.insert({ id: String(epoch), epoch, status: "open", startedAt, closedAt: null, result: null })) broker.broadcast("epochs.opened", { epoch });
	}

	/** Steps after the `closing` mark; each is idempotent, so a resumed close repeats them safely. */
	function finishClose(closing: EpochDoc): Promise<EpochCloseResult> {
		let running = inFlight.get(closing.epoch);
		if (!running) {
			running = runClose(closing).finally(() => inFlight.delete(closing.epoch));
			inFlight.set(closing.epoch, running);
		}
		return running;
	}

	async function runClose(closing: EpochDoc): Promise<EpochCloseResult> {
		const cutoff = { epoch: closing.epoch, changedBefore: closing.closedAt!, limit: ARCHIVE_BATCH };
		/** The result another replica stored meanwhile: from then on nobody may archive into this epoch. */
		const storedResult = async () => (await epochs.get(closing.id))?.result ?? null;
		const archiveAll = async (): Promise<EpochCloseResult | null> => {
			for (;;) {
				const stored = await storedResult();
				if (stored) return stored;
				if ((await broker.call<number, object>("mempool.archiveTerminal", cutoff)) === 0) return null;
			}
		};
		const early = await archiveAll();
		if (early) return early;
		// Moves stamped before the mark that were still being stored: once they have landed, every
		// replica finishing this close has archived the same set, and sums the same figures.
		const settled = Date.parse(closing.closedAt!) + config.epochCloseSettleMs;
		if (Date.now() < settled) {
			await new Promise(resolve => setTimeout(resolve, settled - Date.now()));
			const late = await archiveAll();
			if (late) return late;
		}
		const summary = await broker.call<Pick<EpochCloseResult, "executed" | "canceled" | "volume" | "root">, object>("mempool.archiveSummary", { epoch: closing.epoch });
		const closedAt = closing.closedAt ?? new Date().toISOString();
		const result: EpochCloseResult = { epoch: closing.epoch, startedAt: closing.startedAt, closedAt, ...summary, archived: summary.executed + summary.canceled };
		await epochs.update(closing.id, { status: "closing" }, { ...closing, status: "closed", closedAt, result });
		return (await storedResult()) ?? result;
	}

	/** Marks epoch `open` closing (one compare-and-set: one racing caller wins) and finishes the close. */
	async function closeEpoch(open: EpochDoc, closeCall: string | null = null): Promise<EpochCloseResult> {
		const closedAt = new Date().toISOString();
		// E + 1 opens first, so new intents and the status routes always find an open epoch.
		await openEpochNumber(open.epoch + 1, closedAt);
		const closing: EpochDoc = { ...open, status: "closing", closedAt, closeCall };
		if (!(await epochs.update(open.id, { status: "open" }, closing))) throw new ServiceError("INVALID_TRANSITION", `Epoch ${open.epoch} is already being closed`, { epoch: open.epoch });
		return finishClose(closing);
	}

	/**
	 * Closes the newest open epoch E. Every earlier epoch must be closed already: a caller that
	 * comes while E − 1 is still closing gets 409 instead of closing the epoch that close opened.
	 */
	async function close(expectedEpoch?: number, closeCall: string | null = null): Promise<EpochCloseResult> {
		if (closeCall) {
			// A retry of a close that began answers with that close, instead of closing the next epoch.
			const began = await epochs.findOne({ closeCall });
			if (began) return began.result ?? finishClose(began);
		}
		const open = await openEpoch();
		if (expectedEpoch !== undefined && open.epoch !== expectedEpoch) throw new ServiceError("INVALID_TRANSITION", `Epoch ${expectedEpoch} is not open`);
		const unfinished = await epochs.findOne({ status: { in: ["open", "closing"] }, epoch: { lt: open.epoch } });
		if (unfinished) throw new ServiceError("INVALID_TRANSITION", `Epoch ${unfinished.epoch} is still being closed`, { epoch: unfinished.epoch });
		return closeEpoch(open, closeCall);
	}

	/**
	 * At start and every minute: finish closes a crash interrupted, then close an epoch older than
	 * EPOCH_DURATION_MS. A SQLite owner is the only one, so at its start every unfinished close is
	 * abandoned; with replicas, another may be finishing it now (a rolling deploy), so only a close
	 * nobody has finished for RESUME_AFTER_MS is taken over: two finishers are a race to avoid.
	 */
	async function maintain(atStart: boolean): Promise<void> {
		// A close always opens its successor before it marks itself; a store that lacks one still gets one.
		const [last] = await epochs.list({ orderBy: ["epoch", "desc"], limit: 1 });
		if (last.status !== "open") await openEpochNumber(last.epoch + 1, new Date().toISOString());
		const newest = await openEpoch();
		for (const stale of await epochs.list({ where: { status: "open", epoch: { lt: newest.epoch } } })) await closeEpoch(stale).then(closed, ignoreRace);
		for (const closing of await epochs.list({ where: { status: "closing" } })) {
			const abandoned = (atStart && config.store === "sqlite") || Date.parse(closing.closedAt ?? "") + RESUME_AFTER_MS < Date.now();
			if (!inFlight.has(closing.epoch) && abandoned) {
				await finishClose(closing);
				sweeps.inc({ sweep: "epoch", result: "resumed" });
			}
		}
		const open = await openEpoch();
		if (Date.parse(open.startedAt) + config.epochDurationMs <= Date.now()) await close(open.epoch).then(closed, ignoreRace);
	}

	return {
		name: "epochs",
		dependencies: ["mempool"],
		mixins: [
			storeMixin(config, "epochs", async store => {
				epochs = await store.collection<EpochDoc>({
					name: "epochs",
					fields: { epoch: "integer", status: "text", closeCall: "text" },
					unique: [["epoch"], ["closeCall"]],
					// (epoch) for the newest epoch: a unique group serves lookups, not orders.
					indexes: [["status", "epoch"], ["epoch"]]
				});
				// The first start opens epoch 1; insert() is a no-op on every later start.
				await openEpochNumber(1, new Date().toISOString());
			}),
			sweeperMixin("epoch", CHECK_INTERVAL_MS, () => maintain(false))
		],

		actions: {
			/** Internal: the open epoch. */
			current: internal({
				params: {},
				async handler(): Promise<{ epoch: number; startedAt: string }> {
					const { epoch, startedAt } = await openEpoch();
					return { epoch, startedAt };
				}
			}),

			/** GET /epoch/status: EpochStatus over the intents the next close will archive. */
			status: {
				params: { $$strict: true },
				async handler(ctx: Context): Promise<EpochStatus> {
					const { epoch, startedAt } = await openEpoch();
					const totals = await ctx.call<Pick<EpochStatus, "intents" | "volume">>("mempool.epochTotals");
					return { epoch, startedAt, ...totals };
				}
			},

			/** POST /epoch/close */
			close: {
				params: { $$strict: true },
				// Longer than the broker's default: a close waits EPOCH_CLOSE_SETTLE_MS and archives in
				// batches. (Moleculer reads an action's `timeout`; its types leave it out.)
				...({ timeout: 28_000 } as object),
				handler: (ctx: Context) => close(undefined, callKey(ctx))
			}
		},

		created() {
			broker = this.broker;
			sweeps = sweepMetrics(broker);
		},

		async started() {
			await maintain(true);
		}
	};
}
