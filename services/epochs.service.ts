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
import { setImmediate, setTimeout as sleep } from "node:timers/promises";
import type { Context, Service, ServiceSchema } from "moleculer";
import type { EpochCloseResult, EpochStatus } from "../lib/answers";
import { ACTION_CALL_OPTIONS } from "../lib/bus-groups";
import type { Config } from "../lib/config";
import { EpochSummary, type ArchivedIntent, type EpochFigures } from "../lib/epoch-summary";
import { ServiceError } from "../lib/errors";
import type { Collection, CollectionSpec, Where } from "../lib/store";
import { storeMixin } from "../mixins/store.mixin";
import { sweepMetrics } from "./metrics";
import { callKey } from "./replay";
import { sweeperMixin } from "../mixins/sweeper.mixin";
import { internal, workersOnly } from "./internal";

export interface EpochDoc {
	/** The epoch number as a string. */
	id: string;
	epoch: number;
	status: "open" | "closing" | "closed";
	startedAt: string;
	closedAt: string | null;
	result: EpochCloseResult | null;
	/** The call that began the close, so that a retry of it answers with this close (services/replay.ts). */
	closeCall?: string | null;
	/** While closing: when its finisher last said it was still at work. Another replica takes over a close only once this is old. */
	renewedAt?: string | null;
}

export const EPOCHS_COLLECTION = {
	name: "epochs",
	fields: { epoch: "integer", status: "text", closeCall: "text", renewedAt: "text" },
	unique: [["epoch"], ["closeCall"]],
	// (epoch) for the newest epoch: a unique group serves lookups, not orders.
	indexes: [["status", "epoch"], ["epoch"]]
} satisfies CollectionSpec<EpochDoc>;

const ARCHIVE_BATCH = 500;
/** Archived intents per summary page: each page one bounded call, however large the epoch. */
const SUMMARY_PAGE = 1000;
/** SPEC §8: the age check runs at start and every minute. */
const CHECK_INTERVAL_MS = 60_000;
/** A close whose finisher has not renewed it for this long is taken for abandoned (its process died). */
const ABANDONED_AFTER_MS = 10 * 60_000;

interface EpochsSettings {
	epochDurationMs: number;
	epochCloseSettleMs: number;
	/** A SQLite owner is the only one: at its start every unfinished close is abandoned. */
	soleOwner: boolean;
	/** With replicas: a close whose finisher has not renewed it for this long is taken over by one of the others. */
	abandonedAfterMs: number;
	/** A finisher at work renews its close this often, so that no replica takes over a close that is only long. */
	renewEveryMs: number;
}

interface EpochsVars {
	epochs: Collection<EpochDoc>;
	sweeps: ReturnType<typeof sweepMetrics>;
	/** Closes this process is finishing now: the minute check, or a repeat of the call, joins them. */
	inFlight: Map<number, Promise<EpochCloseResult>>;
	/** The check begun at start, which started() does not wait for: stopped() does. */
	startCheck: Promise<void>;
	/** Set by stopped(): a close at work stops at its next step and lets go of the close. */
	stopping: boolean;
	/** Marks and takeovers under way, each until its close's run ends: stopped() waits for them too. */
	marking: Set<Promise<unknown>>;
}

interface EpochsMethods {
	openEpoch(): Promise<EpochDoc>;
	openEpochNumber(epoch: number, startedAt: string): Promise<void>;
	finishClose(closing: EpochDoc, held?: boolean): Promise<EpochCloseResult>;
	tracked<T>(step: () => Promise<T>): Promise<T>;
	markClose(expected: Where, next: EpochDoc): Promise<boolean>;
	runClose(closing: EpochDoc): Promise<EpochCloseResult>;
	summarize(closing: EpochDoc, renew: () => Promise<void>): Promise<EpochFigures>;
	closeEpoch(open: EpochDoc, closeCall?: string | null): Promise<EpochCloseResult>;
	close(expectedEpoch?: number, closeCall?: string | null): Promise<EpochCloseResult>;
	closeNumbered(epoch: number, closeCall: string | null): Promise<EpochCloseResult>;
	joinClose(doc: EpochDoc): Promise<EpochCloseResult>;
	maintain(): Promise<void>;
	maintainEpochs(): Promise<void>;
	ensureOpenEpoch(): Promise<void>;
	counted(result: "closed" | "resumed"): void;
}

type EpochsThis = Service<EpochsSettings> & EpochsVars & EpochsMethods;

/** A close another caller began first is theirs to finish: the check moves on. */
const ignoreRace = (err: unknown) => {
	if ((err as ServiceError).type !== "INVALID_TRANSITION") throw err;
};

/** Whether another replica took a close over from this one (runClose's renewal). */
const isTakenOver = (err: unknown) => ((err as ServiceError | undefined)?.data as { takenOver?: unknown } | undefined)?.takenOver === true;

/** A close another replica took over is theirs to finish; any other failure stands. */
const takenOver = (err: unknown) => {
	if (!isTakenOver(err)) throw err;
};

/** The renewal of a close its finisher let go of: abandoned from the start, so the next check takes it over. */
const LET_GO = new Date(0).toISOString();
/** How long a stop waits for the closes at work to reach their next step and let go. */
const STOP_WAIT_MS = 15_000;

const stoppingRefusal = (epoch: number) => new ServiceError("NOT_READY", `This process is stopping; epoch ${epoch} is closed by the next check, here or on another replica`, { epoch, stopping: true });
const isStoppingRefusal = (err: unknown) => ((err as ServiceError | undefined)?.data as { stopping?: unknown } | undefined)?.stopping === true;

export function epochsService(config: Config): ServiceSchema<EpochsSettings, EpochsMethods, EpochsVars, EpochsThis> {
	return {
		name: "epochs",
		dependencies: ["mempool"],
		settings: { epochDurationMs: config.epochDurationMs, epochCloseSettleMs: config.epochCloseSettleMs, soleOwner: config.store === "sqlite", abandonedAfterMs: ABANDONED_AFTER_MS, renewEveryMs: ABANDONED_AFTER_MS / 5 },
		mixins: [
			sweeperMixin<EpochsThis>("epoch", CHECK_INTERVAL_MS, function (this: EpochsThis) {
				return this.maintain();
			}),
			// The store last: Moleculer starts a service's last mixin first and stops it last (store.mixin.ts).
			storeMixin<EpochsThis>(config, "epochs", async function (this: EpochsThis, store) {
				this.epochs = await store.collection<EpochDoc>(EPOCHS_COLLECTION);
				// The first start opens epoch 1; insert() is a no-op on every later start.
				await this.openEpochNumber(1, new Date().toISOString());
			})
		],

		actions: {
			/** Internal: the open epoch. */
			current: internal({
				params: {},
				async handler(this: EpochsThis): Promise<{ epoch: number; startedAt: string }> {
					const { epoch, startedAt } = await this.openEpoch();
					return { epoch, startedAt };
				}
			}),

			/** GET /epoch/status: EpochStatus over the intents the next close will archive. */
			status: {
				params: { $$strict: true },
				async handler(this: EpochsThis, ctx: Context): Promise<EpochStatus> {
					const { epoch, startedAt } = await this.openEpoch();
					const totals = await ctx.call<Pick<EpochStatus, "intents" | "volume">>("mempool.epochTotals");
					return { epoch, startedAt, ...totals };
				}
			},

			/**
			 * POST /epoch/close, optionally `{ epoch }`: then it closes that epoch only, and answers the
			 * result of one closed already, so that an operator's retry never closes the next epoch.
			 */
			close: workersOnly({
				params: { $$strict: true, epoch: { type: "number", integer: true, min: 1, optional: true } },
				// (Moleculer reads an action's `timeout`; its types leave it out.)
				...(ACTION_CALL_OPTIONS["epochs.close"] as object),
				handler(this: EpochsThis, ctx: Context<{ epoch?: number }>) {
					// A null epoch never gets here: the body reader drops null members (null is no value).
					return ctx.params.epoch === undefined ? this.close(undefined, callKey(ctx)) : this.closeNumbered(ctx.params.epoch, callKey(ctx));
				}
			})
		},

		methods: {
			async openEpoch(this: EpochsThis) {
				const [open] = await this.epochs.list({ where: { status: "open" }, orderBy: ["epoch", "desc"], limit: 1 });
				if (!open) throw new ServiceError("NOT_READY", "No epoch is open");
				return open;
			},

			/** Opens epoch `epoch` unless it exists already (insert is a no-op then), and tells the receivers. */
			async openEpochNumber(this: EpochsThis, epoch, startedAt) {
				if (await this.epochs.insert({ id: String(epoch), epoch, status: "open", startedAt, closedAt: null, result: null })) this.broker.broadcast("epochs.opened", { epoch });
			},

			/**
			 * Steps after the `closing` mark; each is idempotent, so a resumed close repeats them safely.
			 * Once the stop has begun, only a close this call `held` (marked or took over) runs, to let go.
			 */
			finishClose(this: EpochsThis, closing, held = false) {
				let running = this.inFlight.get(closing.epoch);
				if (!running) {
					if (this.stopping && !held) return Promise.reject(stoppingRefusal(closing.epoch));
					running = this.runClose(closing).finally(() => this.inFlight.delete(closing.epoch));
					this.inFlight.set(closing.epoch, running);
				}
				return running;
			},

			async runClose(this: EpochsThis, closing) {
				const cutoff = { epoch: closing.epoch, changedBefore: closing.closedAt!, limit: ARCHIVE_BATCH };
				/** The result another replica stored meanwhile: from then on nobody may archive into this epoch. */
				const storedResult = async () => (await this.epochs.get(closing.id))?.result ?? null;
				let renewedAt = Date.now();
				/** The renewal this finisher holds the close by: a replica that took the close over has replaced it. */
				let held = closing.renewedAt ?? null;
				/** The renewal last written, which may have landed though its write failed (a write concern's timeout). */
				let attempted = held;
				/** Once the stop has begun, this close ends at its next step, and lets go of the close (the catch below). */
				const stopHere = () => {
					if (this.stopping) throw stoppingRefusal(closing.epoch);
				};
				/** Every renewEveryMs, says that this close is still at work; stops it if another replica took it over meanwhile. */
				const renew = async () => {
					stopHere();
					if (Date.now() - renewedAt < this.settings.renewEveryMs) return;
					renewedAt = Date.now();
					const current = await this.epochs.get(closing.id);
					// Closed by another finisher: the next look at the stored result ends this one.
					if (current?.status !== "closing") return;
					const renewal = new Date(renewedAt).toISOString();
					attempted = renewal;
					if (!(await this.epochs.update(closing.id, { status: "closing", renewedAt: held }, { ...current, renewedAt: renewal }))) {
						// Closed between the read and the write: as above, not a close taken over.
						if ((await this.epochs.get(closing.id))?.status !== "closing") return;
						throw new ServiceError("NOT_READY", `Epoch ${closing.epoch} is being closed by another replica; retry later for its result`, { epoch: closing.epoch, takenOver: true });
					}
					held = renewal;
				};
				const archiveAll = async (): Promise<EpochCloseResult | null> => {
					for (;;) {
						const stored = await storedResult();
						if (stored) return stored;
						if ((await this.broker.call<number, object>("mempool.archiveTerminal", cutoff)) === 0) return null;
						await renew();
					}
				};
				/**
				 * A finisher that fails (a store error, a call that timed out, any other) lets go of its
				 * close, so that the next check, this replica's or another's, tries it again within a
				 * minute, not abandonedAfterMs later, as a sole SQLite owner's check resumes any close it
				 * is not running. Only a finisher that holds the close runs here (joinClose).
				 */
				const letGo = async () => {
					if (this.settings.soleOwner) return;
					const current = await this.epochs.get(closing.id).catch(() => null);
					const renewal = current?.renewedAt ?? null;
					if (current?.status === "closing" && (renewal === held || renewal === attempted))
						await this.epochs.update(closing.id, { status: "closing", renewedAt: renewal }, { ...current, renewedAt: LET_GO }).catch(() => false);
				};
				try {
					stopHere();
					const early = await archiveAll();
					if (early) return early;
					// Moves stamped before the mark that were still being stored: once they have landed, every
					// replica finishing this close has archived the same set, and sums the same figures.
					const settled = Date.parse(closing.closedAt!) + this.settings.epochCloseSettleMs;
					if (Date.now() < settled) {
						// In steps, so that a stop meanwhile lets go at once (the wait is 10 s on MongoDB).
						while (Date.now() < settled) {
							stopHere();
							await sleep(Math.min(250, settled - Date.now()));
						}
						const late = await archiveAll();
						if (late) return late;
					}
					const summary = await this.summarize(closing, renew);
					const closedAt = closing.closedAt ?? new Date().toISOString();
					const result: EpochCloseResult = { epoch: closing.epoch, startedAt: closing.startedAt, closedAt, ...summary, archived: summary.executed + summary.canceled };
					await this.epochs.update(closing.id, { status: "closing" }, { ...closing, status: "closed", closedAt, result });
					return (await storedResult()) ?? result;
				} catch (err) {
					if (!isTakenOver(err)) await letGo();
					throw err;
				}
			},

			/**
			 * What the close archived, read in pages of SUMMARY_PAGE in id order: each call bounded,
			 * nothing held but the sums, and the event loop free between pages (a SQLite read answers
			 * at once, so without the pause one close would hold the loop for the whole epoch).
			 */
			async summarize(this: EpochsThis, closing, renew) {
				const summary = new EpochSummary();
				for (let after: string | undefined; ; ) {
					const page = await this.broker.call<ArchivedIntent[], object>("mempool.archivedPage", { epoch: closing.epoch, limit: SUMMARY_PAGE, ...(after ? { after } : {}) });
					for (const intent of page) summary.add(intent);
					if (page.length < SUMMARY_PAGE) return summary.figures();
					after = page[page.length - 1].id;
					await renew();
					await setImmediate();
				}
			},

			/** Marks epoch `open` closing (one compare-and-set: one racing caller wins) and finishes the close. */
			async closeEpoch(this: EpochsThis, open, closeCall = null) {
				// Not marked by a process that cannot finish it: its mark would be held, unrenewed, until abandoned.
				if (this.stopping) throw new ServiceError("NOT_READY", "This process is stopping; retry on another replica", { epoch: open.epoch, stopping: true });
				return this.tracked(async () => {
					const closedAt = new Date().toISOString();
					// E + 1 opens first, so new intents and the status routes always find an open epoch.
					await this.openEpochNumber(open.epoch + 1, closedAt);
					const closing: EpochDoc = { ...open, status: "closing", closedAt, closeCall };
					if (!(await this.markClose({ status: "open" }, closing))) throw new ServiceError("INVALID_TRANSITION", `Epoch ${open.epoch} is already being closed`, { epoch: open.epoch });
					// Marked, though the stop may have begun meanwhile: it runs, to let go of the mark.
					return this.finishClose(closing, true);
				});
			},

			/**
			 * The compare-and-set of a mark or a takeover. Its write may land though it reports a failure
			 * (a write concern's timeout): the close is then read back, and held when it bears this mark
			 * (else its mark, unrenewed, would wait out abandonedAfterMs). Another replica's mark of the
			 * same millisecond passes only with the same call (none, or the same retry): then both
			 * finishers end alike, and the first to store the result wins.
			 */
			async markClose(this: EpochsThis, expected, next) {
				try {
					return await this.epochs.update(next.id, expected, next);
				} catch (err) {
					const stored = await this.epochs.get(next.id).catch(() => null);
					const same = (field: "closedAt" | "renewedAt" | "closeCall") => (stored?.[field] ?? null) === (next[field] ?? null);
					if (stored?.status === "closing" && same("closedAt") && same("renewedAt") && same("closeCall")) return true;
					throw err;
				}
			},

			/** Runs a mark or a takeover until its close's run ends, so that stopped() can wait for it. */
			tracked(this: EpochsThis, step) {
				const running = step();
				const settled = running.then(
					() => {},
					() => {}
				);
				this.marking.add(settled);
				void settled.then(() => this.marking.delete(settled));
				return running;
			},

			/**
			 * Closes the newest open epoch E. Every earlier epoch must be closed already: a caller that
			 * comes while E − 1 is still closing gets 409 instead of closing the epoch that close opened.
			 */
			async close(this: EpochsThis, expectedEpoch, closeCall = null) {
				if (closeCall) {
					// A retry of a close that began answers with that close, instead of closing the next epoch.
					const began = await this.epochs.findOne({ closeCall });
					if (began) return this.joinClose(began);
				}
				const open = await this.openEpoch();
				if (expectedEpoch !== undefined && open.epoch !== expectedEpoch) throw new ServiceError("INVALID_TRANSITION", `Epoch ${expectedEpoch} is not open`);
				const unfinished = await this.epochs.findOne({ status: { in: ["open", "closing"] }, epoch: { lt: open.epoch } });
				if (unfinished) throw new ServiceError("INVALID_TRANSITION", `Epoch ${unfinished.epoch} is still being closed`, { epoch: unfinished.epoch });
				return this.closeEpoch(open, closeCall);
			},

			/**
			 * Closes epoch `epoch` if it is the open one; answers its result once it is closed; joins its
			 * close while this process runs it (a close that outlasted its answer goes on); 409 otherwise.
			 */
			async closeNumbered(this: EpochsThis, epoch, closeCall) {
				const doc = await this.epochs.get(String(epoch));
				if (doc && doc.status !== "open") return this.joinClose(doc);
				return this.close(epoch, closeCall);
			},

			/**
			 * A close begun already: its result once stored; its run in this process, joined. A sole
			 * SQLite owner is the only finisher there can be, so one that stopped (a store error) is
			 * resumed; with replicas only the one holding the close finishes it (or one that takes it
			 * over once abandoned, at its check): a retry, not a refusal.
			 */
			async joinClose(this: EpochsThis, doc) {
				if (doc.result) return doc.result;
				const running = this.inFlight.get(doc.epoch);
				if (running) return running;
				if (this.settings.soleOwner) return this.finishClose(doc);
				throw new ServiceError("NOT_READY", `Epoch ${doc.epoch} is still being closed; retry later for its result`, { epoch: doc.epoch });
			},

			/**
			 * At start and every minute: finish closes a crash interrupted, then close an epoch older than
			 * EPOCH_DURATION_MS. A SQLite owner is the only one, so a close it is not running is abandoned;
			 * with replicas, another may be finishing it now (a rolling deploy), so only a close whose
			 * finisher has not renewed it for abandonedAfterMs is taken over, by one of the replicas.
			 */
			async maintain(this: EpochsThis) {
				if (this.stopping) return;
				try {
					await this.maintainEpochs();
				} catch (err) {
					// A close the stop ended: the next check, here or on another replica, goes on with it.
					if (!isStoppingRefusal(err)) throw err;
				}
			},

			async maintainEpochs(this: EpochsThis) {
				const closed = () => this.counted("closed");
				await this.ensureOpenEpoch();
				const newest = await this.openEpoch();
				for (const stale of await this.epochs.list({ where: { status: "open", epoch: { lt: newest.epoch } } })) await this.closeEpoch(stale).then(closed, ignoreRace);
				for (const closing of await this.epochs.list({ where: { status: "closing" } })) {
					if (this.inFlight.has(closing.epoch)) continue;
					// Abandoned: a sole SQLite owner's that it does not run now; another replica's once not renewed for abandonedAfterMs.
					if (this.stopping) return;
					if (!this.settings.soleOwner && Date.parse(closing.renewedAt ?? closing.closedAt ?? "") + this.settings.abandonedAfterMs >= Date.now()) continue;
					const resume = this.tracked(async () => {
						let resumed = closing;
						if (!this.settings.soleOwner) {
							// One compare-and-set on the renewal found stale: of replicas that found it together, one takes it over.
							resumed = { ...closing, renewedAt: new Date().toISOString() };
							if (!(await this.markClose({ status: "closing", renewedAt: closing.renewedAt ?? null }, resumed))) return false;
						}
						await this.finishClose(resumed, !this.settings.soleOwner);
						return true;
					});
					// Taken over in turn (its renewal replaced): the check goes on to the open epoch's age.
					await resume.then(resumed => resumed && this.counted("resumed"), takenOver);
				}
				const open = await this.openEpoch();
				if (Date.parse(open.startedAt) + this.settings.epochDurationMs <= Date.now()) await this.close(open.epoch).then(closed, ignoreRace);
			},

			/** A close always opens its successor before it marks itself; a store that lacks one still gets one. */
			async ensureOpenEpoch(this: EpochsThis) {
				const [last] = await this.epochs.list({ orderBy: ["epoch", "desc"], limit: 1 });
				if (last.status !== "open") await this.openEpochNumber(last.epoch + 1, new Date().toISOString());
			},

			counted(this: EpochsThis, result) {
				this.sweeps.inc({ sweep: "epoch", result });
			}
		} satisfies EpochsMethods & ThisType<EpochsThis>,

		created(this: EpochsThis) {
			this.sweeps = sweepMetrics(this.broker);
			this.inFlight = new Map();
			this.marking = new Set();
		},

		async started(this: EpochsThis) {
			this.stopping = false;
			// Intake and the status routes need an open epoch from the first request on.
			await this.ensureOpenEpoch();
			// The closes are not waited for: a close of a large epoch takes what it takes, and one that
			// fails (a store error) is tried again at the next check; neither may keep this process from serving.
			this.startCheck = this.maintain().catch(err => this.logger.warn(`The epoch check at start failed; the check every minute tries again: ${(err as Error).message}`));
		},

		/**
		 * A close at work stops at its next step (an archive batch or a summary page), and lets go of
		 * the close while the store is still open (it stops after this): the next check takes it
		 * over at once, where a rolling restart left it held until abandonedAfterMs.
		 */
		async stopped(this: EpochsThis) {
			this.stopping = true;
			// The check begun at start, the marks and closes at work, and those begun meanwhile; a close
			// stuck on an unanswered call is left to the abandonment rule.
			const deadline = Date.now() + STOP_WAIT_MS;
			while (Date.now() < deadline) {
				const busy = [this.startCheck, ...this.marking, ...this.inFlight.values()];
				if (!(await Promise.race([Promise.allSettled(busy).then(() => true), sleep(deadline - Date.now(), false, { ref: false })]))) return;
				if (!this.marking.size && !this.inFlight.size) return;
			}
		}
	};
}
