/**
 * mempool: owns payment intents, their leases and consumed nonces. The only place an intent's
 * state changes, and the one owner of the lease rules: every change, the node's (verification,
 * sweeps) and the Cranker's, goes through the transition table of lib/intents.ts as one read plus
 * one compare-and-set on (id, state, stateVersion, lease). Moves out of SUBMITTED are checked
 * against the chain first (SPEC §2.4).
 */
import { randomBytes } from "node:crypto";
import type { Context, ServiceSchema } from "moleculer";
import type { EpochStatus } from "../lib/answers";
import { buildPaymentMessage } from "../lib/canonical";
import { nodeChainReader } from "../lib/chain";
import { readChain, type ChainObservation } from "../lib/chain-evidence";
import type { Config } from "../lib/config";
import { canonicalJson, sha256Hex } from "../lib/encoding";
import { ServiceError } from "../lib/errors";
import { assertSignedBy } from "../lib/http-signature";
import {
	EXPIRABLE_STATES,
	INTENT_STATES,
	TERMINAL_STATES,
	PUBLIC_STATUS,
	applyMove,
	decideStatusUpdate,
	restamped,
	expire,
	isExpired,
	leaseForPayout,
	statesOfStatus,
	toPublicView,
	toWorkerView,
	withChainEvidence,
	withSubmissionHeight,
	type CreateIntentRequest,
	type IntentRecord,
	type IntentState,
	type PendingChainCheck,
	type IntentWorkItem,
	type UpdateStatusRequest
} from "../lib/intents";
import { WORK_PAGE, address, limit, updateStatusParams } from "../lib/schemas";
import { expectedSettlementOf, readSettlement } from "../lib/settlement";
import { SlotObserver } from "../lib/slot-observer";
import type { Collection, CollectionSpec, Where } from "../lib/store";
import { UNRECORDED_REJECTIONS, type VerificationResult } from "../lib/verification";
import { intentTally, totalsFromTally, type TotalsSnapshot } from "../lib/intent-totals";
import { byId, merkleRoot } from "../lib/merkle";
import { storeMixin } from "../mixins/store.mixin";
import { leaseMetrics, sweepMetrics, type LeaseEvent } from "./metrics";
import { callKey, isOwnWrite } from "./replay";
import { sweeperMixin } from "../mixins/sweeper.mixin";

const INTENTS_COLLECTION = {
	name: "intents",
	fields: { paymentId: "text", state: "text", stateVersion: "integer", createdAt: "text", updatedAt: "text", expiresAt: "text", expiresAtSlot: "integer", leaseExpiresAt: "text", epoch: "integer", archivedIn: "integer" },
	unique: [["paymentId"]],
	// Every index costs each of an intent's writes, and each ends in id (the store appends it). The
	// lease and stale-verification sweeps read states that hold few intents (leased, mid-verification),
	// so (state, createdAt) serves them as well as the work list; the public list and the epoch close
	// go by (archivedIn, …).
	indexes: [["state", "createdAt"], ["state", "expiresAt"], ["archivedIn", "createdAt"], ["archivedIn", "state", "createdAt"]],
	tally: intentTally
} satisfies CollectionSpec<IntentRecord>;

/** A consumed nonce, keyed `<senderWallet>:<nonce>`, held by the intent that consumed it. */
interface NonceDoc {
	id: string;
	intentId: string;
}

const SWEEP_BATCH = 500;
const recordRef = { type: "string", max: 64 };
const version = { type: "number", integer: true, min: 1 };
const resultParam = { type: "object", props: { ok: "boolean", reason: { type: "string", optional: true }, detail: { type: "string", optional: true } } };
/** The verifier node that decided: history says which one (operators, and the cluster tests). */
const verifiedByParam = { type: "string", optional: true, max: 200 };
/** A verifier's answer as the receiver passes it on: its result and who decided. */
const verdictParam = { type: "object", props: { ...resultParam.props, verifiedBy: verifiedByParam } };

/** The lease event a Cranker's move is, if any (a lapse is the sweep's: `expired`). */
function leaseEvent(from: IntentState, to: IntentState): LeaseEvent | null {
	if (to === "CRANKER_LEASED") return from === "CRANKER_LEASED" ? "renewed" : "granted";
	return from === "CRANKER_LEASED" && to === "VERIFIED" ? "released" : null;
}

export function mempoolService(config: Config): ServiceSchema {
	let leases: ReturnType<typeof leaseMetrics>;
	let sweeps: ReturnType<typeof sweepMetrics>;
	let intents: Collection<IntentRecord>;
	let nonces: Collection<NonceDoc>;
	let slots: SlotObserver;
	// The Node's own view of the chain; without SOLANA_RPC_URL no move out of SUBMITTED can be proven.
	const chain = nodeChainReader(config.solanaRpcUrl);
	/** The figures of every intent, from the store's tally: the same for every replica. */
	const totals = async (): Promise<TotalsSnapshot> => totalsFromTally(await intents.tally());

	async function mustGet(id: string): Promise<IntentRecord> {
		const record = await intents.get(id);
		if (!record) throw new ServiceError("NOT_FOUND", `Intent ${id} not found`);
		return record;
	}

	/**
	 * Compare-and-set on the record's current state, version and lease; null when someone moved it
	 * first, else the record as written. The lease is part of the condition because a renewal keeps
	 * stateVersion (SPEC §2.4): without it, a writer holding the record from before a renewal could
	 * overwrite the new lease. The move's time is taken again just before the write (a chain read
	 * may have come between): an epoch close fixes its set by `updatedAt`, so a move must not be
	 * stored long after the time it carries.
	 */
	async function commit(current: IntentRecord, next: IntentRecord): Promise<IntentRecord | null> {
		const written = restamped(current, next, new Date().toISOString());
		const done = await intents.update(current.id, { state: current.state, stateVersion: current.stateVersion, leaseExpiresAt: current.leaseExpiresAt }, written);
		return done ? written : null;
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
		const rejected = applyMove(record, "verdict", "REJECTED", at, { reason, rejectionReason: reason, rejectionDetail: detail, ...(by ? { by } : {}) });
		return (await commit(record, { ...rejected, verdict: "REJECTED" })) !== null;
	}

	/**
	 * NODE_VERIFYING → VERIFIED or REJECTED on a verifier's result. The nonce, the last check of
	 * SPEC §1, is consumed here, where nonces are owned. A body refused for a reason that leaves no
	 * record (a forgery, say) is removed instead. Returns the current record, or null once removed.
	 */
	async function applyVerdict(record: IntentRecord, result: VerificationResult, by?: string): Promise<IntentRecord | null> {
		const at = new Date().toISOString();
		if (!result.ok && UNRECORDED_REJECTIONS.has(result.reason)) {
			if (await removeUnrecorded(record)) return null;
		} else if (!result.ok) await reject(record, result.reason, result.detail, at, by);
		else if (!(await consumeNonce(record))) await reject(record, "NONCE_REUSED", "this sender already used the nonce", at, by);
		else await commit(record, { ...applyMove(record, "verdict", "VERIFIED", at, by ? { by } : {}), verdict: "VERIFIED" });
		return intents.get(record.id);
	}

	/** Removes a record refused for a reason that leaves none (SPEC §2.1): its paymentId is free again. */
	async function removeUnrecorded(record: IntentRecord): Promise<boolean> {
		return intents.remove(record.id, { state: record.state, stateVersion: record.stateVersion });
	}

	async function expireDue(): Promise<number> {
		const now = new Date();
		const at = now.toISOString();
		const latestSlot = slots.latest();
		const due = await intents.list({ where: { state: { in: EXPIRABLE_STATES }, expiresAt: { lte: at } }, limit: SWEEP_BATCH });
		if (latestSlot !== null)
			due.push(...(await intents.list({ where: { state: { in: EXPIRABLE_STATES }, expiresAtSlot: { lte: latestSlot } }, limit: SWEEP_BATCH })));
		let expired = 0;
		for (const record of due) if (isExpired(record, now.getTime(), latestSlot) && (await commit(record, expire(record, at)))) expired++;
		sweeps.inc({ sweep: "intent-expiry", result: "expired" }, expired);
		return expired;
	}

	/** Returns CRANKER_LEASED intents whose lease has lapsed to VERIFIED. */
	async function releaseLapsedLeases(): Promise<number> {
		const at = new Date().toISOString();
		const lapsed = await intents.list({ where: { state: "CRANKER_LEASED", leaseExpiresAt: { lte: at } }, limit: SWEEP_BATCH });
		let released = 0;
		for (const record of lapsed) {
			const returned = applyMove(record, "lease-lapse", "VERIFIED", at, { lease: null, reason: "LEASE_EXPIRED" });
			if (await commit(record, { ...returned, lapsedLeases: (record.lapsedLeases ?? 0) + 1 })) released++;
		}
		leases.inc({ event: "expired" }, released);
		sweeps.inc({ sweep: "lease-expiry", result: "returned" }, released);
		return released;
	}

	/** What the chain shows of the submission a move out of SUBMITTED is about; null without a chain. */
	async function observeChain(record: IntentRecord, check: PendingChainCheck): Promise<ChainObservation | null> {
		if (!chain) return null;
		const expected = expectedSettlementOf({ ...record.request, transactionCommitment: record.transactionCommitment }, config.settlementProgramId);
		return readChain(() => chain.observe(check.submission.transactionSignature, contents => readSettlement(contents, expected)));
	}

	return {
		name: "mempool",
		mixins: [
			storeMixin(config, "mempool", async store => {
				intents = await store.collection<IntentRecord>(INTENTS_COLLECTION);
				nonces = await store.collection<NonceDoc>({ name: "consumed_nonces", fields: { intentId: "text" } });
			}),
			sweeperMixin("intent expiry", config.sweepIntervalMs, expireDue),
			sweeperMixin("lease expiry", config.sweepIntervalMs, releaseLapsedLeases)
		],

		actions: {
			/**
			 * Records a submitted request as RECEIVED, with the verifier's verdict when there was one
			 * (applied at once), or finds the record of an identical earlier submission (idempotency on
			 * paymentId). A different body under the same paymentId is 409.
			 */
			receive: {
				// The receiver validated the request against createIntentParams at intake; checking it a
				// second (and, in the verifier, third) time would cost more than the signature check.
				params: { request: "object", epoch: { type: "number", integer: true, min: 1 }, verdict: { ...verdictParam, optional: true } },
				async handler(ctx: Context<{ request: CreateIntentRequest; epoch: number; verdict?: VerificationResult & { verifiedBy?: string } }>): Promise<{ record: IntentRecord; created: boolean }> {
					const { request, epoch, verdict } = ctx.params;
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
						history: [{ state: "RECEIVED", at }],
						intakeCall: callKey(ctx)
					};
					if (await intents.insert(record)) {
						if (!verdict) return { record, created: true };
						// Verified before it was recorded: the verdict is applied through the same two moves as a sweep's.
						const { verifiedBy, ...result } = verdict;
						const claimed = applyMove(record, "claim", "NODE_VERIFYING", at);
						const stored = await commit(record, claimed);
						const done = stored ? await applyVerdict(stored, result, verifiedBy) : await intents.get(record.id);
						return { record: done ?? record, created: true };
					}
					const existing = await intents.findOne({ paymentId: request.paymentId });
					if (!existing) throw new ServiceError("INTERNAL_ERROR", "paymentId collision without a record");
					if (existing.requestDigest !== requestDigest)
						// No record id here: whoever guessed a paymentId must not learn another sender's intent.
						throw new ServiceError("IDEMPOTENCY_CONFLICT", "paymentId was already used with a different request body", { paymentId: existing.paymentId });
					// A retry of the call that recorded it answers as that call did: created.
					return { record: existing, created: isOwnWrite(ctx, existing.intakeCall) };
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

			/**
			 * Internal, for GET /intent-work: one page of VERIFIED intents that have not expired,
			 * oldest first, after the intent `after` (the last of the previous page). Pages stay far
			 * below NATS's 1 MB message limit; the gateway joins them (api.intentWork).
			 */
			workPage: {
				params: {
					limit: { type: "number", integer: true, min: 1, max: WORK_PAGE },
					after: { type: "object", optional: true, props: { createdAt: { type: "string", max: 40 }, id: recordRef } }
				},
				async handler(ctx: Context<{ limit: number; after?: { createdAt: string; id: string } }>): Promise<IntentWorkItem[]> {
					const now = new Date();
					const latestSlot = slots.latest();
					const { limit: size, after } = ctx.params;
					const where: Where = {
						state: "VERIFIED",
						expiresAt: { gt: now.toISOString() },
						...(latestSlot !== null ? { expiresAtSlot: { gt: latestSlot } } : {})
					};
					const records = await intents.list({ where, orderBy: ["createdAt", "asc"], limit: size, ...(after ? { after: { value: after.createdAt, id: after.id } } : {}) });
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
					const stale = await intents.list({ where: { state: "NODE_VERIFYING", updatedAt: { lt: ctx.params.staleBefore } }, orderBy: ["createdAt", "asc"], limit: ctx.params.limit });
					return [...received, ...stale];
				}
			},

			/** Internal: RECEIVED → NODE_VERIFYING. Null when another verifier claimed it first. */
			claimForVerification: {
				params: { id: recordRef, expectedVersion: version },
				async handler(ctx: Context<{ id: string; expectedVersion: number }>): Promise<IntentRecord | null> {
					const record = await intents.get(ctx.params.id);
					if (!record || record.state !== "RECEIVED" || record.stateVersion !== ctx.params.expectedVersion) return null;
					const next = applyMove(record, "claim", "NODE_VERIFYING", new Date().toISOString());
					return commit(record, next);
				}
			},

			/** Internal: a sweep's verdict on a record it claimed (see applyVerdict); null once removed as unsigned. */
			completeVerification: {
				params: {
					id: recordRef,
					expectedVersion: version,
					result: resultParam,
					/** The verifier node that decided: history says which one (operators, and the cluster tests). */
					verifiedBy: verifiedByParam
				},
				async handler(ctx: Context<{ id: string; expectedVersion: number; result: VerificationResult; verifiedBy?: string }>): Promise<IntentRecord | null> {
					const record = await intents.get(ctx.params.id);
					if (!record || record.state !== "NODE_VERIFYING" || record.stateVersion !== ctx.params.expectedVersion) return record;
					return applyVerdict(record, ctx.params.result, ctx.params.verifiedBy);
				}
			},

			/** Internal: NODE_VERIFYING → RECEIVED when no verifier answered; a sweep retries it. */
			returnToReceived: {
				params: { id: recordRef, expectedVersion: version },
				async handler(ctx: Context<{ id: string; expectedVersion: number }>): Promise<IntentRecord> {
					const record = await mustGet(ctx.params.id);
					if (record.state !== "NODE_VERIFYING" || record.stateVersion !== ctx.params.expectedVersion) return record;
					const next = applyMove(record, "verifier-timeout", "RECEIVED", new Date().toISOString(), { reason: "VERIFIER_UNAVAILABLE" });
					return (await commit(record, next)) ?? mustGet(record.id);
				}
			},

			/**
			 * PATCH /intents/{id}/status (a signed Cranker request): the lease rules of SPEC §2.4 on one
			 * read of the record, the chain's word on moves out of SUBMITTED, then one compare-and-set.
			 */
			updateStatus: {
				params: updateStatusParams,
				async handler(ctx: Context<UpdateStatusRequest & { id: string }, { crankerPubkey?: string }>) {
					const { id, ...request } = ctx.params;
					assertSignedBy(ctx.meta, request.crankerPubkey);
					const [record, standing] = await Promise.all([
						mustGet(id),
						ctx.call<{ online: boolean; roles: string[] }, object>("crankers.standing", { crankerPubkey: request.crankerPubkey })
					]);
					const now = new Date();
					const decision = decideStatusUpdate(record, request, {
						now,
						leaseTtlMs: config.leaseTtlMs,
						crankerAllowed: standing.online && standing.roles.includes("settlement"),
						latestSlot: slots.latest()
					});
					if (decision.kind === "replay") return toWorkerView(record);
					if (decision.kind === "expire") {
						await commit(record, decision.next);
						throw new ServiceError("INVALID_TRANSITION", "The intent expired before it was submitted: it is REJECTED", { state: "REJECTED", rejectionReason: "EXPIRED" });
					}
					let { next } = decision;
					if (decision.chainCheck) next = withChainEvidence({ next, chainCheck: decision.chainCheck }, await observeChain(record, decision.chainCheck), config.blockhashLifetimeBlocks);
					else if (chain && record.state === "CRANKER_LEASED" && next.state === "SUBMITTED") next = withSubmissionHeight(next, Number(await readChain(() => chain.blockHeight())), config.blockhashLifetimeBlocks);
					const written = await commit(record, next);
					if (written) {
						const event = leaseEvent(record.state, written.state);
						if (event) leases.inc({ event });
						return toWorkerView(written);
					}
					const current = await mustGet(id);
					throw new ServiceError("VERSION_CONFLICT", "The intent changed while the update was applied", { stateVersion: current.stateVersion, state: current.state });
				}
			},

			/**
			 * Internal, for a payout authorization (SPEC §2.5): the record, when `crankerPubkey` holds
			 * its live lease and the intent has not expired; the lease rules' refusal otherwise.
			 */
			leaseForPayout: {
				params: { id: recordRef, crankerPubkey: address() },
				async handler(ctx: Context<{ id: string; crankerPubkey: string }>): Promise<IntentRecord> {
					const record = await mustGet(ctx.params.id);
					leaseForPayout(record, ctx.params.crankerPubkey, Date.now(), slots.latest());
					return record;
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
				async handler(): Promise<Pick<EpochStatus, "intents" | "volume">> {
					const { live, liveVolume } = await totals();
					return {
						intents: { received: Object.values(live).reduce((sum, n) => sum + n, 0), executed: live.CONFIRMED, canceled: live.REJECTED },
						volume: liveVolume
					};
				}
			},

			/**
			 * Internal: flags up to `limit` live terminal intents of epoch `epoch` or earlier, last
			 * changed at or before `changedBefore` (the close's mark), as archived in it (one
			 * compare-and-set each); returns how many it found, so that a caller whose batch another
			 * replica flagged first still comes back until none is left. The mark fixes the set, so replicas
			 * finishing the same close archive the same intents. Archived intents stay in this
			 * store, so paymentId idempotency and nonce ownership outlive the epoch.
			 */
			archiveTerminal: {
				params: { epoch: { type: "number", integer: true, min: 1 }, changedBefore: { type: "string", max: 40 }, limit: { type: "number", integer: true, min: 1, max: SWEEP_BATCH } },
				async handler(ctx: Context<{ epoch: number; changedBefore: string; limit: number }>): Promise<number> {
					const { epoch, changedBefore, limit } = ctx.params;
					const due = await intents.list({ where: { archivedIn: null, state: { in: TERMINAL_STATES }, epoch: { lte: epoch }, updatedAt: { lte: changedBefore } }, limit });
					for (const record of due) await intents.update(record.id, { archivedIn: null, stateVersion: record.stateVersion }, { ...record, archivedIn: epoch });
					return due.length;
				}
			},

			/** Internal: what epoch `epoch` archived: counts, volume and the Merkle root of its executed intents. */
			archiveSummary: {
				params: { epoch: { type: "number", integer: true, min: 1 } },
				async handler(ctx: Context<{ epoch: number }>) {
					const byState = await intents.countBy("state", { archivedIn: ctx.params.epoch });
					const executed = (await intents.list({ where: { archivedIn: ctx.params.epoch, state: "CONFIRMED" } })).sort(byId);
					const volume = new Map<string, bigint>();
					for (const { request } of executed) volume.set(request.tokenMintAddress, (volume.get(request.tokenMintAddress) ?? 0n) + BigInt(request.amount));
					return {
						executed: byState.CONFIRMED ?? 0,
						canceled: byState.REJECTED ?? 0,
						volume: Object.fromEntries([...volume].map(([mint, sum]) => [mint, sum.toString()])),
						root: merkleRoot(executed.map(record => record.transactionCommitment))
					};
				}
			},

			/**
			 * Internal: every figure of the intents (lib/intent-totals.ts), from the store. A lease
			 * that lapsed counts as active until the sweep returns it, within SWEEP_INTERVAL_MS.
			 */
			totals: {
				params: {},
				handler: totals
			},

			/** Internal: number of live intents per state (every state present, zero included). */
			counts: {
				params: {},
				handler: async (): Promise<Record<IntentState, number>> => (await totals()).live
			}
		},

		created() {
			leases = leaseMetrics(this.broker);
			sweeps = sweepMetrics(this.broker);
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
