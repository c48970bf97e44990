/**
 * mempool: owns payment intents and consumed nonces. The only place an intent's state changes;
 * every change is one compare-and-set on (id, state, stateVersion) through the state machine of
 * lib/intents.ts.
 */
import { randomBytes } from "node:crypto";
import type { Context, ServiceSchema } from "moleculer";
import { buildPaymentMessage } from "../lib/canonical";
import type { Config } from "../lib/config";
import { canonicalJson, sha256Hex } from "../lib/encoding";
import { ServiceError } from "../lib/errors";
import {
	EXPIRABLE_STATES,
	INTENT_STATES,
	TERMINAL_STATES,
	PUBLIC_STATUS,
	applyMove,
	decideStatusUpdate,
	isExpired,
	statesOfStatus,
	toPublicView,
	toWorkerView,
	type CreateIntentRequest,
	type IntentRecord,
	type IntentState,
	type UpdateStatusRequest
} from "../lib/intents";
import { limit, updateStatusParams } from "../lib/schemas";
import { SlotObserver } from "../lib/slot-observer";
import type { Collection, Where } from "../lib/store";
import type { VerificationResult } from "../lib/verification";
import { IntentTotals } from "../lib/intent-totals";
import { byId, merkleRoot } from "../lib/merkle";
import { storeMixin } from "../mixins/store.mixin";
import { sweeperMixin } from "../mixins/sweeper.mixin";

const INTENTS_COLLECTION = {
	name: "intents",
	fields: { paymentId: "text", state: "text", stateVersion: "integer", createdAt: "text", updatedAt: "text", expiresAt: "text", expiresAtSlot: "integer", leaseExpiresAt: "text", epoch: "integer", archivedIn: "integer" },
	unique: [["paymentId"]],
	// Every index costs each of an intent's three writes. The lease and stale-verification sweeps
	// read states that hold few intents (leased, mid-verification), so (state, createdAt) serves them.
	indexes: [["state", "createdAt"], ["state", "expiresAt"], ["createdAt"], ["archivedIn", "state"]]
} as const;

/** A consumed nonce, keyed `<senderWallet>:<nonce>`, held by the intent that consumed it. */
interface NonceDoc {
	id: string;
	intentId: string;
}

const SWEEP_BATCH = 500;
const recordRef = { type: "string", max: 64 };
const version = { type: "number", integer: true, min: 1 };

export function mempoolService(config: Config): ServiceSchema {
	let intents: Collection<IntentRecord>;
	let nonces: Collection<NonceDoc>;
	let slots: SlotObserver;
	let lapsedLeases = 0;
	// One mempool owns a SQLite store, so its totals are exact. Several replicas on MongoDB each
	// count their own changes: aggregating those is the distributed deployment's to solve.
	const totals = new IntentTotals();

	async function mustGet(id: string): Promise<IntentRecord> {
		const record = await intents.get(id);
		if (!record) throw new ServiceError("NOT_FOUND", `Intent ${id} not found`);
		return record;
	}

	/**
	 * Compare-and-set on the record's current state, version and lease; false when someone moved it
	 * first. The lease is part of the condition because a renewal keeps stateVersion (SPEC §2.4):
	 * without it, a writer holding the record from before a renewal could overwrite the new lease.
	 */
	async function commit(current: IntentRecord, next: IntentRecord): Promise<boolean> {
		const done = await intents.update(current.id, { state: current.state, stateVersion: current.stateVersion, leaseExpiresAt: current.leaseExpiresAt }, next);
		if (done) totals.apply(current, next);
		return done;
	}

	/** Seeds the running totals from the store, a page at a time, in (createdAt, id) order. */
	async function seedTotals(): Promise<void> {
		const page = 1000;
		let after: { createdAt: string; ids: Set<string> } = { createdAt: "", ids: new Set() };
		for (;;) {
			const batch = await intents.list({ where: { createdAt: { gte: after.createdAt } }, orderBy: ["createdAt", "asc"], limit: page + after.ids.size });
			const fresh = batch.filter(record => !after.ids.has(record.id));
			for (const record of fresh) totals.apply(null, record);
			if (batch.length < page + after.ids.size) return;
			const last = batch[batch.length - 1].createdAt;
			// Records sharing the boundary timestamp come again on the next page: skip those already counted.
			after = { createdAt: last, ids: new Set(batch.filter(record => record.createdAt === last).map(record => record.id)) };
		}
	}

	/** Consumes the sender's nonce for this intent; false when a non-rejected intent holds it. */
	async function consumeNonce(record: IntentRecord): Promise<boolean> {
		const id = `${record.senderWallet}:${record.request.senderAuthorizationNonce}`;
		if (await nonces.insert({ id, intentId: record.id })) return true;
		const held = await nonces.get(id);
		if (!held || held.intentId === record.id) return true; // a retried verification of the same intent
		const holder = await intents.get(held.intentId);
		// Free again only once its holder is rejected (a holder that is gone, archived, keeps it);
		// the condition on the holder settles racing claimants.
		if (!holder || holder.state !== "REJECTED") return false;
		return nonces.update(id, { intentId: held.intentId }, { id, intentId: record.id });
	}

	async function reject(record: IntentRecord, reason: string, detail: string, at: string, by?: string): Promise<boolean> {
		return commit(record, applyMove(record, "REJECTED", at, { reason, rejectionReason: reason, rejectionDetail: detail, ...(by ? { by } : {}) }));
	}

	const expire = (record: IntentRecord, at: string) => reject(record, "EXPIRED", "the authorization expired before submission", at);

	async function expireDue(): Promise<number> {
		const now = new Date();
		const at = now.toISOString();
		const latestSlot = slots.latest();
		const due = await intents.list({ where: { state: { in: EXPIRABLE_STATES }, expiresAt: { lte: at } }, limit: SWEEP_BATCH });
		if (latestSlot !== null)
			due.push(...(await intents.list({ where: { state: { in: EXPIRABLE_STATES }, expiresAtSlot: { lte: latestSlot } }, limit: SWEEP_BATCH })));
		let expired = 0;
		for (const record of due) if (isExpired(record, now.getTime(), latestSlot) && (await expire(record, at))) expired++;
		return expired;
	}

	return {
		name: "mempool",
		mixins: [
			storeMixin(config, "mempool", async store => {
				intents = await store.collection<IntentRecord>(INTENTS_COLLECTION);
				nonces = await store.collection<NonceDoc>({ name: "consumed_nonces", fields: { intentId: "text" } });
				await seedTotals();
			}),
			sweeperMixin("intent expiry", config.sweepIntervalMs, expireDue)
		],

		actions: {
			/**
			 * Records a submitted request as RECEIVED, or finds the record of an identical earlier
			 * submission (idempotency on paymentId). A different body under the same paymentId is 409.
			 */
			receive: {
				// The receiver validated the request against createIntentParams at intake; checking it a
				// second (and, in the verifier, third) time would cost more than the signature check.
				params: { request: "object", epoch: { type: "number", integer: true, min: 1 } },
				async handler(ctx: Context<{ request: CreateIntentRequest; epoch: number }>): Promise<{ record: IntentRecord; created: boolean }> {
					const { request, epoch } = ctx.params;
					const requestDigest = sha256Hex(canonicalJson(request));
					const at = new Date().toISOString();
					const record: IntentRecord = {
						id: `int_${randomBytes(16).toString("hex")}`,
						paymentId: request.paymentId,
						state: "RECEIVED",
						stateVersion: 1,
						senderWallet: request.senderWallet,
						requestDigest,
						transactionCommitment: buildPaymentMessage(request).transactionCommitment,
						epoch,
						createdAt: at,
						updatedAt: at,
						expiresAt: request.senderAuthorizationExpiresAt,
						expiresAtSlot: request.expiresAtSlot,
						leaseExpiresAt: null,
						request,
						lease: null,
						submission: null,
						history: [{ state: "RECEIVED", at }]
					};
					if (await intents.insert(record)) {
						totals.apply(null, record);
						return { record, created: true };
					}
					const existing = await intents.findOne({ paymentId: request.paymentId });
					if (!existing) throw new ServiceError("INTERNAL_ERROR", "paymentId collision without a record");
					if (existing.requestDigest !== requestDigest)
						// No record id here: whoever guessed a paymentId must not learn another sender's intent.
						throw new ServiceError("IDEMPOTENCY_CONFLICT", "paymentId was already used with a different request body", { paymentId: existing.paymentId });
					return { record: existing, created: false };
				}
			},

			/** Internal: the stored record, or null. */
			get: {
				params: { id: recordRef },
				handler: (ctx: Context<{ id: string }>) => intents.get(ctx.params.id)
			},

			/** GET /intents/{id}: the public view, or the worker view for a caller with a worker key. */
			view: {
				params: { $$strict: true, id: recordRef },
				async handler(ctx: Context<{ id: string }, { worker?: boolean }>) {
					const record = await mustGet(ctx.params.id);
					return ctx.meta.worker ? toWorkerView(record) : toPublicView(record);
				}
			},

			/** GET /intents?status=&limit=: newest first. */
			list: {
				params: {
					$$strict: true,
					status: { type: "enum", values: [...INTENT_STATES, ...new Set(Object.values(PUBLIC_STATUS))], optional: true },
					limit: limit()
				},
				async handler(ctx: Context<{ status?: string; limit: number }>) {
					const where: Where = { archivedIn: null, ...(ctx.params.status ? { state: { in: statesOfStatus(ctx.params.status) } } : {}) };
					const records = await intents.list({ where, orderBy: ["createdAt", "desc"], limit: ctx.params.limit });
					return records.map(toPublicView);
				}
			},

			/** GET /intent-work: VERIFIED intents that have not expired, oldest first. */
			work: {
				params: { $$strict: true, limit: limit() },
				async handler(ctx: Context<{ limit: number }>) {
					const now = new Date();
					const latestSlot = slots.latest();
					const where: Where = {
						state: "VERIFIED",
						expiresAt: { gt: now.toISOString() },
						...(latestSlot !== null ? { expiresAtSlot: { gt: latestSlot } } : {})
					};
					const records = await intents.list({ where, orderBy: ["createdAt", "asc"], limit: ctx.params.limit });
					return records.map(record => ({ intent: toWorkerView(record), leaseTtlMs: config.leaseTtlMs }));
				}
			},

			/**
			 * Internal: intents waiting for verification: RECEIVED since before `receivedBefore`, or
			 * NODE_VERIFYING since before `staleBefore` (whoever was verifying them is gone).
			 */
			pendingVerification: {
				params: { receivedBefore: { type: "string" }, staleBefore: { type: "string" }, limit: { type: "number", integer: true, min: 1, max: SWEEP_BATCH } },
				async handler(ctx: Context<{ receivedBefore: string; staleBefore: string; limit: number }>): Promise<IntentRecord[]> {
					const received = await intents.list({ where: { state: "RECEIVED", updatedAt: { lt: ctx.params.receivedBefore } }, orderBy: ["createdAt", "asc"], limit: ctx.params.limit });
					const stale = await intents.list({ where: { state: "NODE_VERIFYING", updatedAt: { lt: ctx.params.staleBefore } }, orderBy: ["updatedAt", "asc"], limit: ctx.params.limit });
					return [...received, ...stale];
				}
			},

			/** Internal: RECEIVED → NODE_VERIFYING. Null when another verifier claimed it first. */
			claimForVerification: {
				params: { id: recordRef, expectedVersion: version },
				async handler(ctx: Context<{ id: string; expectedVersion: number }>): Promise<IntentRecord | null> {
					const record = await intents.get(ctx.params.id);
					if (!record || record.state !== "RECEIVED" || record.stateVersion !== ctx.params.expectedVersion) return null;
					const next = applyMove(record, "NODE_VERIFYING", new Date().toISOString());
					return (await commit(record, next)) ? next : null;
				}
			},

			/**
			 * Internal: NODE_VERIFYING → VERIFIED or REJECTED from a verifier's result. The nonce, the
			 * last check of SPEC §1, is consumed here, where nonces are owned. Returns the current record.
			 */
			completeVerification: {
				params: {
					id: recordRef,
					expectedVersion: version,
					result: { type: "object", props: { ok: "boolean", reason: { type: "string", optional: true }, detail: { type: "string", optional: true } } },
					/** The verifier node that decided: history says which one (operators, and the cluster tests). */
					verifiedBy: { type: "string", optional: true, max: 200 }
				},
				async handler(ctx: Context<{ id: string; expectedVersion: number; result: VerificationResult; verifiedBy?: string }>): Promise<IntentRecord> {
					const record = await mustGet(ctx.params.id);
					if (record.state !== "NODE_VERIFYING" || record.stateVersion !== ctx.params.expectedVersion) return record;
					const at = new Date().toISOString();
					const { result, verifiedBy: by } = ctx.params;
					if (!result.ok) await reject(record, result.reason, result.detail, at, by);
					else if (!(await consumeNonce(record))) await reject(record, "NONCE_REUSED", "this sender already used the nonce", at, by);
					else await commit(record, applyMove(record, "VERIFIED", at, by ? { by } : {}));
					return mustGet(record.id);
				}
			},

			/** Internal: NODE_VERIFYING → RECEIVED when no verifier answered; a sweep retries it. */
			returnToReceived: {
				params: { id: recordRef, expectedVersion: version },
				async handler(ctx: Context<{ id: string; expectedVersion: number }>): Promise<IntentRecord> {
					const record = await mustGet(ctx.params.id);
					if (record.state !== "NODE_VERIFYING" || record.stateVersion !== ctx.params.expectedVersion) return record;
					const next = applyMove(record, "RECEIVED", new Date().toISOString(), { reason: "VERIFIER_UNAVAILABLE" });
					return (await commit(record, next)) ? next : mustGet(record.id);
				}
			},

			/** PATCH /intents/{id}/status, after `leases` has checked the Cranker's standing. */
			updateStatus: {
				params: { ...updateStatusParams, $$strict: false, crankerAllowed: "boolean" },
				async handler(ctx: Context<UpdateStatusRequest & { id: string; crankerAllowed: boolean }>) {
					const { id, crankerAllowed, ...request } = ctx.params;
					const record = await mustGet(id);
					const decision = decideStatusUpdate(record, request, { now: new Date(), leaseTtlMs: config.leaseTtlMs, crankerAllowed });
					if (decision.kind === "replay") return toWorkerView(record);
					if (await commit(record, decision.next)) return toWorkerView(decision.next);
					const current = await mustGet(id);
					throw new ServiceError("VERSION_CONFLICT", "The intent changed while the update was applied", { stateVersion: current.stateVersion, state: current.state });
				}
			},

			/** Internal: moves an intent to REJECTED/EXPIRED now if it has expired; true when it is (now) expired. */
			expireIfDue: {
				params: { id: recordRef },
				async handler(ctx: Context<{ id: string }>): Promise<boolean> {
					const record = await mustGet(ctx.params.id);
					if (!EXPIRABLE_STATES.includes(record.state) || !isExpired(record, Date.now(), slots.latest())) return false;
					await expire(record, new Date().toISOString());
					return true;
				}
			},

			/** Internal: returns CRANKER_LEASED intents whose lease has lapsed to VERIFIED. */
			releaseExpiredLeases: {
				params: {},
				async handler(): Promise<number> {
					const at = new Date().toISOString();
					const lapsed = await intents.list({ where: { state: "CRANKER_LEASED", leaseExpiresAt: { lte: at } }, limit: SWEEP_BATCH });
					let released = 0;
					for (const record of lapsed) if (await commit(record, applyMove(record, "VERIFIED", at, { lease: null, reason: "LEASE_EXPIRED" }))) released++;
					lapsedLeases += released;
					return released;
				}
			},

			/** Internal: the latest slot observed, for the other owners' expiry checks. */
			latestSlot: {
				params: {},
				handler: () => slots.latest()
			},

			/**
			 * Internal: the figures of EpochStatus (SPEC §8). Every live intent belongs to the open
			 * epoch or an earlier one, so they are the live totals.
			 */
			epochTotals: {
				params: {},
				handler() {
					const { live, liveVolume } = totals.snapshot();
					return {
						intents: { received: Object.values(live).reduce((sum, n) => sum + n, 0), executed: live.CONFIRMED, canceled: live.REJECTED },
						volume: liveVolume
					};
				}
			},

			/**
			 * Internal: flags up to `limit` live terminal intents of epoch `epoch` or earlier as archived
			 * in it (one compare-and-set each); returns how many it flagged. Archived intents stay in
			 * this store, so paymentId idempotency and nonce ownership outlive the epoch.
			 */
			archiveTerminal: {
				params: { epoch: { type: "number", integer: true, min: 1 }, limit: { type: "number", integer: true, min: 1, max: SWEEP_BATCH } },
				async handler(ctx: Context<{ epoch: number; limit: number }>): Promise<number> {
					const { epoch, limit } = ctx.params;
					const due = await intents.list({ where: { archivedIn: null, state: { in: TERMINAL_STATES }, epoch: { lte: epoch } }, limit });
					let archived = 0;
					for (const record of due) {
						const next = { ...record, archivedIn: epoch };
						if (!(await intents.update(record.id, { archivedIn: null, stateVersion: record.stateVersion }, next))) continue;
						totals.apply(record, next);
						archived++;
					}
					return archived;
				}
			},

			/** Internal: what epoch `epoch` archived: counts, volume and the Merkle root of its executed intents. */
			archiveSummary: {
				params: { epoch: { type: "number", integer: true, min: 1 } },
				async handler(ctx: Context<{ epoch: number }>) {
					const byState = await intents.countBy("state", { archivedIn: ctx.params.epoch });
					const executed = (await intents.list({ where: { archivedIn: ctx.params.epoch, state: "CONFIRMED" } })).sort(byId);
					const archived = new IntentTotals();
					for (const record of executed) archived.apply(null, record);
					return {
						executed: byState.CONFIRMED ?? 0,
						canceled: byState.REJECTED ?? 0,
						volume: archived.snapshot().settled.volume,
						root: merkleRoot(executed.map(record => record.transactionCommitment))
					};
				}
			},

			/** Internal: settled intents (archived ones included) and their volume per mint. */
			settled: {
				params: {},
				handler: () => totals.snapshot().settled
			},

			/** Internal: leases held now, and leases returned by the expiry sweep since this process started. */
			leaseCounts: {
				params: {},
				async handler() {
					return { active: await intents.count({ state: "CRANKER_LEASED", leaseExpiresAt: { gt: new Date().toISOString() } }), expired: lapsedLeases };
				}
			},

			/** Internal: number of intents per state (every state present, zero included). */
			counts: {
				params: {},
				handler: (): Record<IntentState, number> => totals.snapshot().live
			}
		},

		created() {
			slots = new SlotObserver(config.solanaRpcUrl, config.slotPollIntervalMs, message => this.logger.warn(message));
		},

		async started() {
			await slots.start();
		},

		stopped() {
			slots.stop();
		}
	};
}
