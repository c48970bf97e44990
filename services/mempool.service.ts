/**
 * mempool: owns payment intents and their leases; an intent's hold on its sender's nonce is a
 * field of the intent (nonceKey) under a unique index. The only place an intent's state changes,
 * and the one owner of the lease rules: every change, the node's (verification, sweeps) and the
 * Cranker's, goes through the transition table of lib/intents.ts as one read plus one
 * compare-and-set on (id, state, stateVersion, lease). A submission verified at intake is stored
 * once, in its verdict's state. Moves out of SUBMITTED are checked against the chain first
 * (SPEC §2.4).
 */
import { setTimeout as sleep } from "node:timers/promises";
import type { Context, Service, ServiceSchema } from "moleculer";
import type { EpochStatus } from "../lib/answers";
import { buildPaymentMessage } from "../lib/canonical";
import type { NodeChain } from "../lib/chain";
import { readChain, type ChainObservation } from "../lib/chain-evidence";
import type { Config } from "../lib/config";
import { sha256HexNative } from "../lib/digest";
import { ServiceError, type RejectionReason } from "../lib/errors";
import { newId } from "../lib/ids";
import { INTAKE_BATCH_MAX, NONCE_REUSED, decidedRecord, receivedRecord, refusalOf, withVerdict, type Intake, type Refusal, type Verdict } from "../lib/intake";
import { intentTally, LIVE_COUNTS, LIVE_FIGURES, totalsFromTally, type TotalsSnapshot } from "../lib/intent-totals";
import {
	EXPIRABLE_STATES,
	INTENT_STATES,
	PUBLIC_STATUS,
	TERMINAL_STATES,
	UNVERIFIED_STATES,
	applyMove,
	decideStatusUpdate,
	expire,
	expiredUnverified,
	intentEvent,
	isExpired,
	fittingCount,
	leaseForPayout,
	maySettle,
	rejectReplacedRoute,
	rejectedAtVerification,
	restamped,
	statesOfStatus,
	toPublicView,
	toWorkerView,
	withChainEvidence,
	withSubmissionReading,
	type CreateIntentRequest,
	type IntentRecord,
	type IntentState,
	type IntentWorkItem,
	type MempoolIntent,
	type WorkPage,
	type PendingChainCheck,
	type PublicMempoolIntent,
	type UpdateStatusRequest
} from "../lib/intents";
import type { ArchivedIntent } from "../lib/epoch-summary";
import { answersJsonTexts, forCaller, type TakesJsonTexts } from "../lib/json-text";
import { LIST_LIMIT_MAX, WORK_PAGE, WORK_PAGE_BYTES, address, limit, updateStatusParams } from "../lib/schemas";
import { expectedSettlementOf, readSettlement } from "../lib/settlement";
import { SharedReads } from "../lib/shared-reads";
import { agreedSlot, type SlotObserver } from "../lib/slot-observer";
import { UniqueConflictError, listInPages, type Collection, type CollectionSpec, type Where } from "../lib/store";
import { UNRECORDED_REJECTIONS, isSignedBody } from "../lib/verification";
import { eventNotifier, outboxMixin } from "../mixins/outbox.mixin";
import { storeFailure, storeMixin } from "../mixins/store.mixin";
import { crankerSignedMixin } from "../mixins/cranker-signed.mixin";
import { sweeperMixin } from "../mixins/sweeper.mixin";
import { leaseMetrics, sweepMetrics, type LeaseEvent } from "./metrics";
import { callKey } from "./replay";
import { internal, keyHoldersOnly, workersOnly } from "./internal";
import { isSignedRoute, type ActiveRoute } from "../lib/registry";
import { processChain } from "./process-chain";

export const INTENTS_COLLECTION = {
	name: "intents",
	fields: {
		paymentId: "text",
		nonceKey: "text",
		state: "text",
		stateVersion: "integer",
		createdAt: "text",
		updatedAt: "text",
		expiresAt: "text",
		expiresAtSlot: "integer",
		leaseExpiresAt: "text",
		epoch: "integer",
		archivedIn: "integer"
	},
	// paymentId: idempotency. nonceKey: SPEC §1's nonce rule (null, and so unbound, unless the intent holds the nonce).
	unique: [["paymentId"], ["nonceKey"]],
	// Every index costs each of an intent's writes, and each ends in id (the store appends it).
	// (state, archivedIn, createdAt) serves the work list and the sweeps (the live intents of a state,
	// oldest first: only terminal ones are ever archived), the public list by status and the epoch
	// close (the live intents of some states, newest first); (archivedIn, createdAt) the public list
	// without a status; (state, expiresAt) the expiry sweep, walking only the intents due (anyone may
	// keep intents VERIFIED for a day: a sweep reading all of them every second would cost the event
	// loop in proportion). With a chain, the slot sweep's index too (intentsCollection).
	indexes: [["state", "archivedIn", "createdAt"], ["state", "expiresAt"], ["archivedIn", "createdAt"]],
	// An epoch's archive in id order, its Merkle leaves' (epoch close): only archived intents are in
	// it, so intake and the moves of live intents never write to it.
	sparseIndexes: [["archivedIn"]],
	tally: intentTally,
	// Each state change writes its event in the same write (intentEvent): SSE streams and webhooks read them.
	outbox: true,
	// What GET /intents and GET /intent-work answer for each intent, kept as text by every write.
	views: { public: { version: 1, build: toPublicView }, worker: { version: 1, build: toWorkerView } },
	// Every move bumps stateVersion but a lease renewal, which moves the lease's expiry (updatedAt is
	// the commit's time, and may equal the previous write's when a renewal follows within a millisecond).
	viewStamp: ["stateVersion", "updatedAt", "leaseExpiresAt"]
} satisfies CollectionSpec<IntentRecord>;

/**
 * The intents' collection as this deployment needs it: with a chain (SOLANA_RPC_URL), expiry by slot
 * too, whose sweep walks a (state, expiresAtSlot) index as far as the intents due. Without one no
 * slot is ever compared, and the index would cost every intake for nothing (8–9 % of the rate at
 * full load here, in alternating runs: docs/performance.md).
 */
export function intentsCollection(withChain: boolean): CollectionSpec<IntentRecord> {
	return withChain ? { ...INTENTS_COLLECTION, indexes: [...INTENTS_COLLECTION.indexes, ["state", "expiresAtSlot"]] } : INTENTS_COLLECTION;
}

/** A one-time migration done: its name, and when. */
interface MigrationDoc {
	id: string;
	at: string;
}

/** Before nonces were a field of the intent: `<senderWallet>:<nonce>` → the intent holding it. Read once, to migrate. */
interface LegacyNonceDoc {
	id: string;
	intentId: string;
}

const SWEEP_BATCH = 500;
/** The most archived intents one archivedPage answers: about 2 KB each to read and parse. */
const ARCHIVED_PAGE_MAX = 1000;
/** Archive writes in flight together: a commit group's worth on SQLite, a few per tally shard on MongoDB. */
const ARCHIVE_WRITES_AT_ONCE = 64;
/** Tries of a legacy nonce's move whose compare-and-set keeps losing, and the pause between two. */
const LEGACY_NONCE_TRIES = 10;
const LEGACY_NONCE_PAUSE_MS = 50;
const recordRef = { type: "string", max: 64 };
const version = { type: "number", integer: true, min: 1 };
/**
 * Internal calls come from our own services, which validated what they pass on (the receiver
 * checked the request against createIntentParams): their params are checked for shape only,
 * never a second time in full.
 */
const verdictParam = { type: "object", props: { ok: "boolean", reason: { type: "string", optional: true }, detail: { type: "string", optional: true }, verifiedBy: { type: "string", optional: true, max: 200 } } };

/** What the receiver hands over of a submission: the request, its digest, the verifier's verdict unless none answered, and the key of its call (services/replay.ts). */
export interface IntakeItem {
	request: CreateIntentRequest;
	requestDigest: string;
	verdict?: Verdict & { transactionCommitment?: string };
	call: string;
}

const intakeParams = {
	request: "object",
	requestDigest: { type: "string", length: 64 },
	verdict: { ...verdictParam, props: { ...verdictParam.props, transactionCommitment: { type: "string", length: 64, optional: true } }, optional: true }
};

/** What the receiver needs of a stored intake: the answer, and why it was refused if it was. */
export interface IntakeOutcome {
	created: boolean;
	view: PublicMempoolIntent;
	/** Set when verification refused it (recorded as REJECTED): the receiver answers this error. */
	rejection?: { reason: RejectionReason; detail?: string; id: string; paymentId: string };
}

/** What the verification sweep needs of a waiting intent. */
export interface WaitingIntent {
	id: string;
	state: IntentState;
	stateVersion: number;
	request: CreateIntentRequest;
}

interface MempoolSettings {
	leaseTtlMs: number;
	blockhashLifetimeBlocks: number;
	settlementProgramId: Config["settlementProgramId"];
}

interface MempoolVars {
	intents: Collection<IntentRecord>;
	legacyNonces: Collection<LegacyNonceDoc>;
	/** The one-time migrations done (removeUnsignedExpired). */
	migrations: Collection<MigrationDoc>;
	slots: SlotObserver;
	/** The Node's own view of the chain; without SOLANA_RPC_URL no move out of SUBMITTED can be proven. */
	chain: NodeChain | null;
	/**
	 * The chain's answers about a submission, shared by the reports in flight that ask the same: a
	 * Cranker sending one report many times at once has every endpoint read once, not each time.
	 */
	chainAnswers: SharedReads<ChainObservation[]>;
	leases: ReturnType<typeof leaseMetrics>;
	sweeps: ReturnType<typeof sweepMetrics>;
	/** Tells the gateways that new intent events are committed (coalesced: see eventNotifier). */
	notifyEvents: () => void;
}

type MempoolThis = Service<MempoolSettings> & MempoolVars & MempoolMethods;

interface MempoolMethods {
	receive(input: { request: CreateIntentRequest; epoch: number; requestDigest: string; verdict?: Verdict & { transactionCommitment?: string } }, intakeCall: string | null): Promise<IntakeOutcome>;
	answerFor(record: IntentRecord, created: boolean): IntakeOutcome;
	commit(current: IntentRecord, next: IntentRecord): Promise<IntentRecord | null>;
	applyVerdict(record: IntentRecord, verdict: Verdict): Promise<IntentRecord | null>;
	mustGet(id: string): Promise<IntentRecord>;
	totals(prefixes?: readonly string[]): Promise<TotalsSnapshot>;
	expireDue(): Promise<number>;
	releaseLapsedLeases(): Promise<number>;
	observeChain(record: IntentRecord, check: PendingChainCheck): Promise<ChainObservation[] | null>;
	migrateLegacyNonces(): Promise<number>;
	moveLegacyNonce(id: string, intentId: string): Promise<boolean>;
	removeUnsignedExpired(): Promise<number>;
}

/** The lease event a Cranker's move is, if any (a lapse is the sweep's: `expired`). */
function leaseEvent(from: IntentState, to: IntentState): LeaseEvent | null {
	if (to === "CRANKER_LEASED") return from === "CRANKER_LEASED" ? "renewed" : "granted";
	return from === "CRANKER_LEASED" && to === "VERIFIED" ? "released" : null;
}

const waitingIntent = ({ id, state, stateVersion, request }: IntentRecord): WaitingIntent => ({ id, state, stateVersion, request });

export function mempoolService(config: Config): ServiceSchema<MempoolSettings, MempoolMethods, MempoolVars, MempoolThis> {
	return {
		name: "mempool",
		settings: { leaseTtlMs: config.leaseTtlMs, blockhashLifetimeBlocks: config.blockhashLifetimeBlocks, settlementProgramId: config.settlementProgramId },
		mixins: [
			crankerSignedMixin(config.publicBaseUrl, ["updateStatus"]),
			sweeperMixin<MempoolThis>("intent expiry", config.sweepIntervalMs, function (this: MempoolThis) {
				return this.expireDue();
			}),
			sweeperMixin<MempoolThis>("lease expiry", config.sweepIntervalMs, function (this: MempoolThis) {
				return this.releaseLapsedLeases();
			}),
			outboxMixin<MempoolThis>("intents", config, service => service.intents),
			// The store last: Moleculer starts a service's last mixin first and stops it last (store.mixin.ts).
			storeMixin<MempoolThis>(config, "mempool", async function (this: MempoolThis, store) {
				this.intents = await store.collection<IntentRecord>(intentsCollection(config.solanaRpcUrls.length > 0));
				this.legacyNonces = await store.collection<LegacyNonceDoc>({ name: "consumed_nonces", fields: { intentId: "text" } });
				const migrated = await this.migrateLegacyNonces();
				if (migrated) this.logger.info(`Moved ${migrated} consumed nonces onto their intents.`);
				this.migrations = await store.collection<MigrationDoc>({ name: "mempool_migrations", fields: {} });
				const removed = await this.removeUnsignedExpired();
				if (removed) this.logger.warn(`Removed ${removed} unsigned intent(s) an earlier version expired before their verification: their paymentIds are free again.`);
			})
		],

		actions: {
			/**
			 * Internal, from the receiver: stores a submission, in its verdict's state when a verifier
			 * answered, else RECEIVED (a sweep verifies it); or answers the record of an identical
			 * earlier submission (idempotency on paymentId). A different body under the same paymentId
			 * is 409, or 503 while the body holding it is not verified yet.
			 */
			receive: keyHoldersOnly({
				params: { ...intakeParams, epoch: { type: "number", integer: true, min: 1 } },
				handler(this: MempoolThis, ctx: Context<Parameters<MempoolMethods["receive"]>[0]>) {
					return this.receive(ctx.params, callKey(ctx));
				}
			}),

			/**
			 * Internal, from the receiver: a batch of submissions of one epoch, each stored or answered
			 * as `receive` does it. Whatever fails for one (IDEMPOTENCY_CONFLICT, or a write of its own
			 * commit group) is its answer, not the batch's: the others may be stored already, and a
			 * client answered 500 for a stored intent might pay again under a new paymentId.
			 */
			receiveMany: keyHoldersOnly({
				params: {
					epoch: { type: "number", integer: true, min: 1 },
					items: { type: "array", min: 1, max: INTAKE_BATCH_MAX, items: { type: "object", props: { ...intakeParams, call: { type: "string", max: 200 } } } }
				},
				handler(this: MempoolThis, ctx: Context<{ epoch: number; items: IntakeItem[] }>): Promise<(IntakeOutcome | Refusal)[]> {
					const { epoch, items } = ctx.params;
					return Promise.all(
						items.map(item =>
							this.receive({ ...item, epoch }, item.call).catch(err => refusalOf(storeFailure(this.logger, "mempool.receiveMany", err)))
						)
					);
				}
			}),

			/** GET /intents/{id}: the public view, or the worker view for a caller with a worker key. */
			view: {
				params: { $$strict: true, id: recordRef },
				async handler(this: MempoolThis, ctx: Context<{ id: string }, { worker?: boolean }>) {
					const record = await this.mustGet(ctx.params.id);
					return ctx.meta.worker ? toWorkerView(record) : toPublicView(record);
				}
			},

			/** GET /intents?status=&limit=: newest first, the kept public views' JSON texts. */
			list: workersOnly(answersJsonTexts({
				params: {
					$$strict: true,
					status: { type: "enum", values: [...INTENT_STATES, ...new Set(Object.values(PUBLIC_STATUS))], optional: true },
					limit: limit()
				},
				async handler(this: MempoolThis, ctx: Context<{ status?: string; limit: number }, TakesJsonTexts>) {
					const where: Where = { archivedIn: null, ...(ctx.params.status ? { state: { in: statesOfStatus(ctx.params.status) } } : {}) };
					return forCaller((await this.intents.listViews("public", { where, orderBy: ["createdAt", "desc"], limit: ctx.params.limit })).map(row => row.json), ctx.meta);
				}
			})),

			/**
			 * Internal, for GET /intent-work: one page of VERIFIED intents that have not expired,
			 * oldest first, after the intent `after` (the last of the previous page), as the JSON
			 * texts of their worker views. A caller in another process asks for WORK_PAGE at a time,
			 * far below NATS's 1 MB message limit; the gateway joins the pages (api.intentWork).
			 */
			workPage: workersOnly(internal({
				params: {
					limit: { type: "number", integer: true, min: 1, max: LIST_LIMIT_MAX },
					after: { type: "object", optional: true, props: { createdAt: { type: "string", max: 40 }, id: recordRef } }
				},
				async handler(this: MempoolThis, ctx: Context<{ limit: number; after?: { createdAt: string; id: string } }, TakesJsonTexts>): Promise<WorkPage | IntentWorkItem[]> {
					const { limit: size, after } = ctx.params;
					// Only a caller in this process takes a page larger than the bus carries.
					const acrossTheBus = ctx.nodeID !== this.broker.nodeID;
					if (size > WORK_PAGE && acrossTheBus)
						throw new ServiceError("VALIDATION_ERROR", `A page for another node holds at most ${WORK_PAGE} intents`, [{ type: "numberMax", field: "limit", message: `limit must be at most ${WORK_PAGE} for a caller on another node` }]);
					const latestSlot = this.slots.latest();
					const where: Where = { state: "VERIFIED", archivedIn: null, expiresAt: { gt: new Date().toISOString() }, ...(latestSlot !== null ? { expiresAtSlot: { gt: latestSlot } } : {}) };
					let rows = await this.intents.listViews("worker", { where, orderBy: ["createdAt", "asc"], limit: size, ...(after ? { after: { value: after.createdAt, id: after.id } } : {}) });
					// A gateway of an earlier version takes the items whole.
					if (!ctx.meta.jsonTexts) return rows.map(row => ({ intent: JSON.parse(row.json) as MempoolIntent, leaseTtlMs: this.settings.leaseTtlMs }));
					const fitting = acrossTheBus ? fittingCount(rows.map(row => Buffer.byteLength(row.json)), WORK_PAGE_BYTES) : rows.length;
					const cut = fitting < rows.length;
					if (cut) rows = rows.slice(0, fitting);
					const last = rows[rows.length - 1];
					return { intents: rows.map(row => row.json), leaseTtlMs: this.settings.leaseTtlMs, last: last ? { createdAt: String(last.order), id: last.id } : null, ...(cut ? { cut: true as const } : {}) };
				}
			})),

			/**
			 * Internal: intents waiting for verification: RECEIVED since before `receivedBefore`, or
			 * NODE_VERIFYING since before `staleBefore` (whoever was verifying them is gone).
			 */
			pendingVerification: internal({
				params: { receivedBefore: { type: "string" }, staleBefore: { type: "string" }, limit: { type: "number", integer: true, min: 1, max: SWEEP_BATCH } },
				async handler(this: MempoolThis, ctx: Context<{ receivedBefore: string; staleBefore: string; limit: number }>): Promise<WaitingIntent[]> {
					const { receivedBefore, staleBefore, limit: size } = ctx.params;
					const [received, stale] = await Promise.all([
						this.intents.list({ where: { state: "RECEIVED", archivedIn: null, updatedAt: { lt: receivedBefore } }, orderBy: ["createdAt", "asc"], limit: size }),
						this.intents.list({ where: { state: "NODE_VERIFYING", archivedIn: null, updatedAt: { lt: staleBefore } }, orderBy: ["createdAt", "asc"], limit: size })
					]);
					return [...received, ...stale].map(waitingIntent);
				}
			}),

			/**
			 * Internal: the RECEIVED intent holding `paymentId`, which a signed body of another content met
			 * (NOT_READY): the receiver verifies it at once, so that a forgery holds the paymentId no longer.
			 */
			receivedHolder: internal({
				params: { paymentId: { type: "string", max: 200 } },
				async handler(this: MempoolThis, ctx: Context<{ paymentId: string }>): Promise<WaitingIntent | null> {
					const holder = await this.intents.findOne({ paymentId: ctx.params.paymentId });
					return holder?.state === "RECEIVED" ? waitingIntent(holder) : null;
				}
			}),

			/** Internal: RECEIVED → NODE_VERIFYING. Null when another verifier claimed it first. */
			claimForVerification: keyHoldersOnly({
				params: { id: recordRef, expectedVersion: version },
				async handler(this: MempoolThis, ctx: Context<{ id: string; expectedVersion: number }>): Promise<WaitingIntent | null> {
					const record = await this.intents.get(ctx.params.id);
					if (!record || record.state !== "RECEIVED" || record.stateVersion !== ctx.params.expectedVersion) return null;
					const claimed = await this.commit(record, applyMove(record, "claim", "NODE_VERIFYING", new Date().toISOString()));
					return claimed && waitingIntent(claimed);
				}
			}),

			/** Internal: a sweep's verdict on an intent it claimed; the state it ends in, or null once removed as unsigned. */
			completeVerification: keyHoldersOnly({
				params: { id: recordRef, expectedVersion: version, verdict: verdictParam },
				async handler(this: MempoolThis, ctx: Context<{ id: string; expectedVersion: number; verdict: Verdict }>): Promise<IntentState | null> {
					const record = await this.intents.get(ctx.params.id);
					if (!record || record.state !== "NODE_VERIFYING" || record.stateVersion !== ctx.params.expectedVersion) return record?.state ?? null;
					return (await this.applyVerdict(record, ctx.params.verdict))?.state ?? null;
				}
			}),

			/** Internal: NODE_VERIFYING → RECEIVED when no verifier answered; a sweep retries it. */
			returnToReceived: keyHoldersOnly({
				params: { id: recordRef, expectedVersion: version },
				async handler(this: MempoolThis, ctx: Context<{ id: string; expectedVersion: number }>): Promise<IntentState> {
					const record = await this.mustGet(ctx.params.id);
					if (record.state !== "NODE_VERIFYING" || record.stateVersion !== ctx.params.expectedVersion) return record.state;
					const back = await this.commit(record, applyMove(record, "verifier-timeout", "RECEIVED", new Date().toISOString(), { reason: "VERIFIER_UNAVAILABLE" }));
					return (back ?? (await this.mustGet(record.id))).state;
				}
			}),

			/**
			 * PATCH /intents/{id}/status (a signed Cranker request): the lease rules of SPEC §2.4 on one
			 * read of the record, the chain's word on moves out of SUBMITTED, then one compare-and-set.
			 */
			updateStatus: workersOnly({
				params: updateStatusParams,
				async handler(this: MempoolThis, ctx: Context<UpdateStatusRequest & { id: string }>) {
					const { id, ...request } = ctx.params;
					const [record, standing] = await Promise.all([
						this.mustGet(id),
						ctx.call<{ online: boolean; roles: string[] }, object>("crankers.standing", { crankerPubkey: request.crankerPubkey })
					]);
					/** `readSlot`: a slot the endpoints agreed on just now, which the one polled (every SLOT_POLL_INTERVAL_MS) may be behind. */
					const decide = (readSlot: number | null = null) => {
						const polled = this.slots.latest();
						const latestSlot = readSlot === null ? polled : Math.max(readSlot, polled ?? readSlot);
						return decideStatusUpdate(record, request, { now: new Date(), leaseTtlMs: this.settings.leaseTtlMs, crankerAllowed: maySettle(standing), latestSlot });
					};
					const decision = decide();
					if (decision.kind === "replay") return toWorkerView(record);
					const expired = () => new ServiceError("INVALID_TRANSITION", "The intent expired before it was submitted: it is REJECTED", { state: "REJECTED", rejectionReason: "EXPIRED" });
					const changedMeanwhile = async () => {
						const current = await this.mustGet(id);
						// The Node's own expiry records no Cranker (one's refusal may give "EXPIRED" as its reason too).
						if (current.state === "REJECTED" && current.rejectionReason === "EXPIRED" && !current.history.at(-1)?.by) return expired();
						return new ServiceError("VERSION_CONFLICT", "The intent changed while the update was applied", { stateVersion: current.stateVersion, state: current.state });
					};
					// Not REJECTED when another move (a SUBMITTED report read before the expiry) came first;
					// the sweep's own expiry, first, is told as this one would have been.
					const expire = async (next: IntentRecord) => {
						throw (await this.commit(record, next)) ? expired() : await changedMeanwhile();
					};
					if (decision.kind === "expire") return expire(decision.next);
					const { blockhashLifetimeBlocks } = this.settings;
					let { next } = decision;
					if (decision.chainCheck) next = withChainEvidence({ next, chainCheck: decision.chainCheck }, await this.observeChain(record, decision.chainCheck), blockhashLifetimeBlocks);
					else if (record.state === "CRANKER_LEASED" && next.state === "SUBMITTED") {
						// The Cranker reports before it sends: a route replaced since its authorization (up to
						// 90 s old), or one it never asked for, gets no payment.
						const route = await ctx.call<ActiveRoute | null, object>("tin.resolve", { tin: record.request.recipientTin });
						if (!isSignedRoute(route, record.request))
							throw new ServiceError("EVIDENCE_INCONSISTENT", "The recipient route is no longer active: release or reject the intent, and send nothing", { reason: "ROUTE_MISMATCH" });
						const chain = this.chain;
						let readSlot: number | null = null;
						if (chain) {
							const [heights, slots] = await readChain(() => Promise.all([chain.blockHeights(), chain.slots()]));
							next = withSubmissionReading(next, { heights, slots }, blockhashLifetimeBlocks);
							readSlot = agreedSlot(slots);
						}
						// Those reads take up to seconds: the lease and the intent must still be live as it is
						// written (SPEC §2.4), and no sweep may have run yet to say otherwise.
						let late: ReturnType<typeof decide>;
						try {
							late = decide(readSlot);
						} catch (err) {
							// A lease renewed meanwhile is this record's no more: the write would have lost anyway.
							const current = await this.mustGet(id);
							if (current.stateVersion !== record.stateVersion || current.leaseExpiresAt !== record.leaseExpiresAt) throw await changedMeanwhile();
							throw err;
						}
						if (late.kind === "expire") return expire(late.next);
					}
					const written = await this.commit(record, next);
					if (written) {
						const event = leaseEvent(record.state, written.state);
						if (event) this.leases.inc({ event });
						return toWorkerView(written);
					}
					throw await changedMeanwhile();
				}
			}),

			/**
			 * Internal, for a payout authorization (SPEC §2.5): the record, when `crankerPubkey` holds
			 * its live lease and the intent has not expired; the lease rules' refusal otherwise.
			 */
			leaseForPayout: keyHoldersOnly({
				params: { id: recordRef, crankerPubkey: address() },
				async handler(this: MempoolThis, ctx: Context<{ id: string; crankerPubkey: string }>): Promise<IntentRecord & { settlementProgramId: string }> {
					const record = await this.mustGet(ctx.params.id);
					leaseForPayout(record, ctx.params.crankerPubkey, Date.now(), this.slots.latest());
					// The program this mempool will check the settlement against: payouts names it to the Cranker.
					return { ...record, settlementProgramId: this.settings.settlementProgramId };
				}
			}),

			/**
			 * Internal, from payouts, which found the TIN's live route at `liveRouteVersion`, newer than
			 * the one the sender signed: the leased intent is REJECTED (ROUTE_MISMATCH), compare-and-set
			 * on the version payouts read. Whether it was.
			 */
			rejectReplacedRoute: keyHoldersOnly({
				params: { id: recordRef, stateVersion: version, liveRouteVersion: version },
				async handler(this: MempoolThis, ctx: Context<{ id: string; stateVersion: number; liveRouteVersion: number }>): Promise<boolean> {
					const record = await this.mustGet(ctx.params.id);
					const next = record.stateVersion === ctx.params.stateVersion ? rejectReplacedRoute(record, ctx.params.liveRouteVersion, new Date().toISOString()) : null;
					return next !== null && (await this.commit(record, next)) !== null;
				}
			}),

			/**
			 * Internal: the figures of EpochStatus (SPEC §8). Every live intent belongs to the open
			 * epoch or an earlier one, so they are the live totals.
			 */
			epochTotals: internal({
				params: {},
				async handler(this: MempoolThis): Promise<Pick<EpochStatus, "intents" | "volume">> {
					const { live, liveVolume } = await this.totals(LIVE_FIGURES);
					return { intents: { received: Object.values(live).reduce((sum, n) => sum + n, 0), executed: live.CONFIRMED, canceled: live.REJECTED }, volume: liveVolume };
				}
			}),

			/**
			 * Internal: flags up to `limit` live terminal intents of epoch `epoch` or earlier, last
			 * changed at or before `changedBefore` (the close's mark), as archived in it (one
			 * compare-and-set each); returns how many it found, so that a caller whose batch another
			 * replica flagged first still comes back until none is left. The mark fixes the set, so replicas
			 * finishing the same close archive the same intents. Archived intents stay in this
			 * store, so paymentId idempotency and nonce ownership outlive the epoch.
			 */
			archiveTerminal: keyHoldersOnly({
				params: { epoch: { type: "number", integer: true, min: 1 }, changedBefore: { type: "string", max: 40 }, limit: { type: "number", integer: true, min: 1, max: SWEEP_BATCH } },
				async handler(this: MempoolThis, ctx: Context<{ epoch: number; changedBefore: string; limit: number }>): Promise<number> {
					const { epoch, changedBefore, limit: size } = ctx.params;
					const due = await this.intents.list({ where: { archivedIn: null, state: { in: TERMINAL_STATES }, epoch: { lte: epoch }, updatedAt: { lte: changedBefore } }, limit: size });
					// Many at once, so that they share commit groups: one at a time, each waited for its own
					// commit (about 5 ms), and a close of a few thousand intents outlasted its HTTP answer. Not
					// all 500: on MongoDB each is a transaction on the tally's shards, which intake writes too.
					for (let i = 0; i < due.length; i += ARCHIVE_WRITES_AT_ONCE)
						// nonceKey too: a legacy nonce moved onto the record meanwhile (migrateLegacyNonces) is not written away.
						await Promise.all(due.slice(i, i + ARCHIVE_WRITES_AT_ONCE).map(record => this.intents.update(record.id, { archivedIn: null, state: record.state, stateVersion: record.stateVersion, nonceKey: record.nonceKey ?? null }, { ...record, archivedIn: epoch })));
					return due.length;
				}
			}),

			/**
			 * Internal: a page of what epoch `epoch` archived, in id order (its Merkle leaves' order), after
			 * `after`: the epochs service sums an epoch of any size page by page (lib/epoch-summary.ts).
			 */
			archivedPage: internal({
				params: { epoch: { type: "number", integer: true, min: 1 }, after: { ...recordRef, optional: true }, limit: { type: "number", integer: true, min: 1, max: ARCHIVED_PAGE_MAX } },
				async handler(this: MempoolThis, ctx: Context<{ epoch: number; after?: string; limit: number }>): Promise<ArchivedIntent[]> {
					const { epoch, after, limit: size } = ctx.params;
					const page = await this.intents.list({ where: { archivedIn: epoch }, orderBy: ["id", "asc"], limit: size, ...(after ? { after: { value: after, id: after } } : {}) });
					return page.map(({ id, state, transactionCommitment, request }) => ({ id, state, transactionCommitment, tokenMintAddress: request.tokenMintAddress, amount: request.amount }));
				}
			}),

			/**
			 * Internal: every figure of the intents (lib/intent-totals.ts), from the store. A lease
			 * that lapsed counts as active until the sweep returns it, within SWEEP_INTERVAL_MS.
			 */
			totals: internal({
				params: {},
				handler(this: MempoolThis) {
					return this.totals();
				}
			}),

			/** Internal: number of live intents per state (every state present, zero included). */
			counts: internal({
				params: {},
				async handler(this: MempoolThis): Promise<Record<IntentState, number>> {
					return (await this.totals(LIVE_COUNTS)).live;
				}
			})
		},

		methods: {
			/**
			 * One insert: the record in its verdict's state (holding the nonce when VERIFIED), or
			 * RECEIVED without a verdict. A taken paymentId is a repeat or a conflict; a taken nonce
			 * (only a VERIFIED record holds one) makes it REJECTED NONCE_REUSED instead.
			 */
			async receive(this: MempoolThis, { request, epoch, requestDigest, verdict }, intakeCall) {
				const intake: Intake = {
					id: newId("int"),
					request,
					requestDigest,
					transactionCommitment: verdict?.transactionCommitment ?? buildPaymentMessage(request, sha256HexNative).transactionCommitment,
					epoch,
					at: new Date().toISOString(),
					intakeCall
				};
				// A refusal that leaves no record is the receiver's to answer; one reaching here is a bug, not data.
				if (verdict && !verdict.ok && UNRECORDED_REJECTIONS.has(verdict.reason)) throw new ServiceError("INTERNAL_ERROR", "an unrecorded refusal was handed to the mempool");
				let record = verdict ? decidedRecord(intake, verdict) : receivedRecord(intake);
				let existing: IntentRecord | null = null;
				// A few rounds: the record holding the paymentId may be removed in between (an unsigned
				// RECEIVED one the sweep found), and then this one may take it.
				for (let round = 0; round < 3 && !existing; round++) {
					if (await this.intents.insert(record, intentEvent(null, record))) {
						this.notifyEvents();
						return this.answerFor(record, true);
					}
					existing = await this.intents.findOne({ paymentId: request.paymentId });
					// Not the paymentId: the nonce, which only a VERIFIED record holds, if one still does
					// (else the paymentId's holder went in between, and the same record is tried again).
					if (!existing && record.nonceKey && (await this.intents.findOne({ nonceKey: record.nonceKey })))
						record = decidedRecord(intake, { ...NONCE_REUSED, verifiedBy: verdict?.verifiedBy });
				}
				// MongoDB can refuse the duplicate before a majority read shows its holder: ask again, not a 500.
				if (!existing) throw new ServiceError("NOT_READY", "Another body under this paymentId is being stored; retry later", { paymentId: request.paymentId });
				if (existing.requestDigest !== requestDigest) {
					// No record id here: whoever guessed a paymentId must not learn another sender's intent.
					const data = { paymentId: existing.paymentId };
					// Only a signer holds a paymentId: a holder not verified yet (taken while no verifier
					// answered) may be a forgery, which its verification removes. Not a conflict until then.
					if (UNVERIFIED_STATES.has(existing.state))
						throw new ServiceError("NOT_READY", "Another body under this paymentId is waiting for its verification; retry later", data);
					throw new ServiceError("IDEMPOTENCY_CONFLICT", "paymentId was already used with a different request body", data);
				}
				// A retry of the call that recorded it answers as that call did: created (services/replay.ts).
				return this.answerFor(existing, intakeCall !== null && existing.intakeCall === intakeCall);
			},

			answerFor(record, created) {
				const outcome: IntakeOutcome = { created, view: toPublicView(record) };
				if (rejectedAtVerification(record))
					outcome.rejection = { reason: record.rejectionReason as RejectionReason, detail: record.rejectionDetail, id: record.id, paymentId: record.paymentId };
				return outcome;
			},

			/**
			 * Compare-and-set on the record's current state, version and lease; null when someone moved it
			 * first, else the record as written. The lease is part of the condition because a renewal keeps
			 * stateVersion (SPEC §2.4): without it, a writer holding the record from before a renewal could
			 * overwrite the new lease. The move's time is taken again just before the write (a chain read
			 * may have come between): an epoch close fixes its set by `updatedAt`, so a move must not be
			 * stored long after the time it carries.
			 */
			async commit(this: MempoolThis, current, next) {
				const written = restamped(current, next, new Date().toISOString());
				const event = intentEvent(current, written);
				const done = await this.intents.update(current.id, { state: current.state, stateVersion: current.stateVersion, leaseExpiresAt: current.leaseExpiresAt }, written, event);
				if (done && event) this.notifyEvents();
				return done ? written : null;
			},

			/**
			 * A sweep's verdict on a NODE_VERIFYING intent: VERIFIED while its nonce is free (the unique
			 * index decides), else REJECTED; a body refused for a reason that leaves no record (a
			 * forgery, say) is removed. Returns the current record, or null once removed.
			 */
			async applyVerdict(this: MempoolThis, record, verdict) {
				const at = new Date().toISOString();
				if (!verdict.ok && UNRECORDED_REJECTIONS.has(verdict.reason)) {
					if (await this.intents.remove(record.id, { state: record.state, stateVersion: record.stateVersion })) return null;
				} else {
					try {
						await this.commit(record, withVerdict(record, verdict, at));
					} catch (err) {
						if (!(err instanceof UniqueConflictError)) throw err;
						await this.commit(record, withVerdict(record, { ...NONCE_REUSED, verifiedBy: verdict.verifiedBy }, at));
					}
				}
				return this.intents.get(record.id);
			},

			async mustGet(this: MempoolThis, id) {
				const record = await this.intents.get(id);
				if (!record) throw new ServiceError("NOT_FOUND", `Intent ${id} not found`);
				return record;
			},

			/** The figures of every intent, from the store's tally: the same for every replica. */
			async totals(this: MempoolThis, prefixes) {
				return totalsFromTally(await this.intents.tally(prefixes));
			},

			async expireDue(this: MempoolThis) {
				const now = new Date();
				const at = now.toISOString();
				const latestSlot = this.slots.latest();
				// Ordered by the field due, so each walks its index (state, field) only as far as the intents due.
				const due = await this.intents.list({ where: { state: { in: EXPIRABLE_STATES }, expiresAt: { lte: at } }, orderBy: ["expiresAt", "asc"], limit: SWEEP_BATCH });
				if (latestSlot !== null) due.push(...(await this.intents.list({ where: { state: { in: EXPIRABLE_STATES }, expiresAtSlot: { lte: latestSlot } }, orderBy: ["expiresAtSlot", "asc"], limit: SWEEP_BATCH })));
				let expired = 0;
				for (const record of due) if (isExpired(record, now.getTime(), latestSlot) && (await this.commit(record, expire(record, at)))) expired++;
				this.sweeps.inc({ sweep: "intent-expiry", result: "expired" }, expired);
				return expired;
			},

			/** Returns CRANKER_LEASED intents whose lease has lapsed to VERIFIED. */
			async releaseLapsedLeases(this: MempoolThis) {
				const at = new Date().toISOString();
				const lapsed = await this.intents.list({ where: { state: "CRANKER_LEASED", leaseExpiresAt: { lte: at } }, limit: SWEEP_BATCH });
				let released = 0;
				for (const record of lapsed) {
					const returned = applyMove(record, "lease-lapse", "VERIFIED", at, { lease: null, reason: "LEASE_EXPIRED" });
					try {
						if (await this.commit(record, { ...returned, lapsedLeases: (record.lapsedLeases ?? 0) + 1 })) released++;
					} catch (err) {
						// Its nonce went to another intent (only after an older replica ran beside this version):
						// that one record stays leased and is logged; the batch goes on.
						if (!(err instanceof UniqueConflictError)) throw err;
						this.logger.error(`Intent ${record.id} cannot return to VERIFIED: another intent holds its nonce.`);
					}
				}
				this.leases.inc({ event: "expired" }, released);
				this.sweeps.inc({ sweep: "lease-expiry", result: "returned" }, released);
				return released;
			},

			/** What the chain shows of the submission a move out of SUBMITTED is about; null without a chain. */
			async observeChain(this: MempoolThis, record, check) {
				const { chain } = this;
				if (!chain) return null;
				const expected = expectedSettlementOf({ ...record.request, transactionCommitment: record.transactionCommitment }, this.settings.settlementProgramId);
				const { transactionSignature } = check.submission;
				// Letting a submission go on a signature the chain does not know needs its history too.
				return this.chainAnswers.get(`${record.id} ${transactionSignature} ${check.need}`, () =>
					readChain(() => chain.observe(transactionSignature, contents => readSettlement(contents, expected), check.need !== "landed"))
				);
			},

			/**
			 * Moves the nonces consumed before they were a field of the intent onto their holders, in
			 * bounded batches, then drops each moved entry; safe to run by several replicas at once.
			 * A holder since rejected has freed its nonce and gets none.
			 */
			async migrateLegacyNonces(this: MempoolThis) {
				let moved = 0;
				for (let batch = await this.legacyNonces.list({ limit: SWEEP_BATCH }); batch.length; batch = await this.legacyNonces.list({ limit: SWEEP_BATCH })) {
					for (const { id, intentId } of batch) {
						if (await this.moveLegacyNonce(id, intentId)) moved++;
						await this.legacyNonces.remove(id);
					}
				}
				return moved;
			},

			/**
			 * One legacy nonce onto its holder; true once moved. A compare-and-set lost to a write
			 * meanwhile (an older replica's move or archive, while the first upgrade rolls) reads the
			 * holder again: its entry is dropped only once the holder has the nonce, or no longer needs
			 * it. A few tries, then the start fails and is tried again (a lagging read, say).
			 */
			async moveLegacyNonce(this: MempoolThis, id, intentId) {
				for (let attempt = 1; ; attempt++) {
					if (attempt > LEGACY_NONCE_TRIES) throw new Error(`The nonce of intent ${intentId} could not be moved onto it in ${LEGACY_NONCE_TRIES} tries`);
					if (attempt > 1) await sleep(LEGACY_NONCE_PAUSE_MS);
					const holder = await this.intents.get(intentId);
					if (!holder || holder.state === "REJECTED" || holder.nonceKey === id) return false;
					try {
						// The whole compare-and-set of a move (commit): a renewal keeps stateVersion, an archive sets archivedIn.
						const expected = { state: holder.state, stateVersion: holder.stateVersion, leaseExpiresAt: holder.leaseExpiresAt, archivedIn: holder.archivedIn ?? null };
						if (await this.intents.update(holder.id, expected, { ...holder, nonceKey: id })) return true;
					} catch (err) {
						// Taken meanwhile by an intent this version verified: only while an older replica still ran (k8s/README.md, first upgrade).
						if (!(err instanceof UniqueConflictError)) throw err;
						this.logger.warn(`The nonce of intent ${holder.id} was taken by another intent before it moved.`);
						return false;
					}
				}
			},

			/**
			 * Once: earlier versions expired bodies taken without a verifier (the 202) before any
			 * verdict, and a forgery among them held its paymentId for good. Each such record whose
			 * body is not its sender's (lib/verification.ts isSignedBody) is removed, freeing the
			 * paymentId; a signed one stays REJECTED EXPIRED, as its verification would have left it.
			 */
			async removeUnsignedExpired(this: MempoolThis) {
				const name = "remove-unsigned-expired";
				if (await this.migrations.get(name)) return 0;
				let removed = 0;
				// By (state, expiresAt): every REJECTED record, archived or not, once, in pages.
				for await (const record of listInPages(this.intents, { where: { state: "REJECTED" }, orderBy: ["expiresAt", "asc"] }, SWEEP_BATCH))
					if (expiredUnverified(record) && !isSignedBody(record.request, Date.parse(record.createdAt)) && (await this.intents.remove(record.id, { state: "REJECTED", stateVersion: record.stateVersion })))
						removed++;
				await this.migrations.insert({ id: name, at: new Date().toISOString() });
				return removed;
			}
		} satisfies MempoolMethods & ThisType<MempoolThis>,

		created(this: MempoolThis) {
			const { reads, slots } = processChain(this.broker, config);
			this.chain = reads;
			this.chainAnswers = new SharedReads();
			this.slots = slots;
			this.leases = leaseMetrics(this.broker);
			this.sweeps = sweepMetrics(this.broker);
			this.notifyEvents = eventNotifier(this.broker, "intents");
		},

		async started(this: MempoolThis) {
			await processChain(this.broker, config).start(this);
		},

		stopped(this: MempoolThis) {
			processChain(this.broker, config).stop(this);
		}
	};
}

