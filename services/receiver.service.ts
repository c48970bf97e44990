/**
 * receiver: intake of signed intents (SPEC §2.1). Stateless: has a verifier check each submission
 * first, so a body its sender did not sign is refused before it can hold a paymentId or a row;
 * then records it with the mempool together with the verdict. When no verifier answers, the
 * submission is recorded RECEIVED (202) and its sweep verifies it later, as it does what a
 * verifier or receiver that died left NODE_VERIFYING.
 */
import type { Context, ServiceBroker, ServiceSchema } from "moleculer";
import type { WakeResult, WakeStatus } from "../lib/answers";
import type { Config } from "../lib/config";
import { ServiceError, rejectionError, type RejectionReason } from "../lib/errors";
import { rejectedAtVerification, toPublicView, type CreateIntentRequest, type IntentRecord } from "../lib/intents";
import { createIntentParams } from "../lib/schemas";
import { UNRECORDED_REJECTIONS, type VerificationResult } from "../lib/verification";
import { sweeperMixin } from "../mixins/sweeper.mixin";
import { sweepMetrics, verificationMetrics } from "./metrics";

const SWEEP_BATCH = 200;
/** How long a RECEIVED intent belongs to the submission that recorded it before the sweep takes it. */
const SUBMISSION_GRACE_MS = 1000;
/** Moleculer errors meaning "no verifier could answer", as opposed to a verifier's own failure. */
const UNAVAILABLE = new Set(["SERVICE_NOT_FOUND", "SERVICE_NOT_AVAILABLE", "REQUEST_TIMEOUT", "REQUEST_REJECTED", "BROKER_DISCONNECTED"]);

/** A record after the sweep's verification: null once removed (a rejection that leaves no record). */
type Outcome = { record: IntentRecord | null; verifierUnavailable: boolean };
type Verdict = VerificationResult & { verifiedBy?: string };

export function receiverService(config: Config): ServiceSchema {
	/** The verifier's verdict on a request; null when no verifier could answer in time. */
	async function verify(ctx: Context | { call: Context["call"] }, request: CreateIntentRequest): Promise<Verdict | null> {
		try {
			return await ctx.call<Verdict, object>("verifier.verify", { request }, { timeout: config.verifyTimeoutMs, retries: 0 });
		} catch (err) {
			if (UNAVAILABLE.has((err as { type?: string }).type ?? "")) return null;
			throw err;
		}
	}

	/** This receiver's verdicts (the store counts every replica's: mempool.totals). */
	function count(record: IntentRecord | null, startedAt: number): void {
		if (!record) metrics.outcomes.inc({ outcome: "unrecorded" });
		else if (record.state === "VERIFIED" || record.state === "REJECTED") {
			metrics.outcomes.inc({ outcome: record.state === "VERIFIED" ? "verified" : "rejected" });
			metrics.duration.observe((performance.now() - startedAt) / 1000);
		}
	}

	/** The sweep's verification of a waiting record: claim, verify, complete. Never throws for an unavailable verifier. */
	async function verifyRecord(ctx: Context | { call: Context["call"] }, record: IntentRecord): Promise<Outcome> {
		let claimed: IntentRecord | null = record;
		if (record.state === "RECEIVED") {
			claimed = await ctx.call<IntentRecord | null, object>("mempool.claimForVerification", { id: record.id, expectedVersion: record.stateVersion });
			if (!claimed) return { record: await ctx.call<IntentRecord | null, object>("mempool.get", { id: record.id }), verifierUnavailable: false };
		}
		const startedAt = performance.now();
		const verdict = await verify(ctx, claimed.request);
		if (!verdict) {
			const back = await ctx.call<IntentRecord, object>("mempool.returnToReceived", { id: claimed.id, expectedVersion: claimed.stateVersion });
			return { record: back, verifierUnavailable: true };
		}
		const { verifiedBy, ...result } = verdict;
		const done = await ctx.call<IntentRecord | null, object>("mempool.completeVerification", { id: claimed.id, expectedVersion: claimed.stateVersion, result, verifiedBy });
		count(done, startedAt);
		return { record: done, verifierUnavailable: false };
	}

	function rejection(record: IntentRecord): ServiceError {
		return rejectionError(record.rejectionReason as RejectionReason, { id: record.id, paymentId: record.paymentId }, record.rejectionDetail);
	}

	let broker: ServiceBroker;
	let metrics: ReturnType<typeof verificationMetrics>;
	let sweeps: ReturnType<typeof sweepMetrics>;

	/** Current epoch number, cached briefly: it changes only when an epoch closes. */
	let epochCache: { epoch: number; until: number } | null = null;
	async function currentEpoch(ctx: Context): Promise<number> {
		if (!epochCache || epochCache.until < Date.now()) epochCache = { epoch: (await ctx.call<{ epoch: number }>("epochs.current")).epoch, until: Date.now() + 1000 };
		return epochCache.epoch;
	}

	return {
		name: "receiver",
		dependencies: ["mempool", "epochs"],
		mixins: [
			// The periodic sweep leaves fresh RECEIVED intents to the submission verifying them right now.
			sweeperMixin("verification", config.sweepIntervalMs, () => sweep(SUBMISSION_GRACE_MS))
		],

		actions: {
			/** POST /intents */
			submit: {
				params: createIntentParams,
				async handler(ctx: Context<CreateIntentRequest, { $statusCode?: number; $location?: string }>) {
					const request = ctx.params;
					const startedAt = performance.now();
					const verdict = await verify(ctx, request);
					// SPEC §2.1: only a signer holds a paymentId. Refused before idempotency, so a forgery
					// under someone else's paymentId learns nothing of it and stores nothing.
					if (verdict && !verdict.ok && UNRECORDED_REJECTIONS.has(verdict.reason)) {
						metrics.outcomes.inc({ outcome: "unrecorded" });
						throw rejectionError(verdict.reason, { paymentId: request.paymentId }, verdict.detail);
					}
					const { record, created } = await ctx.call<{ record: IntentRecord; created: boolean }, object>("mempool.receive", {
						request,
						epoch: await currentEpoch(ctx),
						...(verdict ? { verdict } : {})
					});
					if (created && verdict) count(record, startedAt);
					if (rejectedAtVerification(record)) throw rejection(record);
					ctx.meta.$statusCode = !created ? 200 : record.state === "VERIFIED" ? 201 : 202;
					if (ctx.meta.$statusCode === 201) ctx.meta.$location = `/intents/${record.id}`;
					return toPublicView(record);
				}
			},

			/** POST /internal/wake: runs the verification sweep now. */
			wake: {
				params: {},
				async handler(): Promise<WakeResult> {
					const status = await sweep(0);
					if (status.verifierUnavailable) throw new ServiceError("VERIFIER_UNAVAILABLE", "No verifier is available", status);
					return { ok: true, status };
				}
			}
		},

		events: {
			/** A close opened the next epoch: new intents belong to it from now on. */
			"epochs.opened": {
				params: { epoch: { type: "number", integer: true, min: 1 } },
				handler() {
					epochCache = null;
				}
			}
		},

		created() {
			broker = this.broker;
			metrics = verificationMetrics(broker);
			sweeps = sweepMetrics(broker);
		}
	};

	/** Verifies what is waiting: shared by the periodic sweep and POST /internal/wake (which takes everything now). */
	async function sweep(graceMs: number): Promise<WakeStatus> {
		const status = { picked: 0, verified: 0, rejected: 0, pending: 0, verifierUnavailable: false };
		if (!broker.registry.getActionEndpoints("verifier.verify")?.hasAvailable()) return { ...status, verifierUnavailable: true };
		const now = Date.now();
		const receivedBefore = new Date(now - graceMs).toISOString();
		const staleBefore = new Date(now - 2 * config.verifyTimeoutMs).toISOString();
		const waiting = await broker.call<IntentRecord[], object>("mempool.pendingVerification", { receivedBefore, staleBefore, limit: SWEEP_BATCH });
		for (const record of waiting) {
			status.picked++;
			const outcome = await verifyRecord(broker, record);
			if (outcome.verifierUnavailable) {
				status.verifierUnavailable = true;
				status.pending++;
				break;
			}
			if (!outcome.record || outcome.record.state === "REJECTED") status.rejected++;
			else if (outcome.record.state === "RECEIVED" || outcome.record.state === "NODE_VERIFYING") status.pending++;
			else status.verified++;
		}
		for (const result of ["verified", "rejected", "pending"] as const) sweeps.inc({ sweep: "verification", result }, status[result]);
		return status;
	}
}
