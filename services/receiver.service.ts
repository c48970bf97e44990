/**
 * receiver: intake of signed intents (SPEC §2.1). Stateless: has a verifier check each submission
 * first, so a body its sender did not sign is refused before it can hold a paymentId or a row;
 * then hands the request and the verdict to the mempool in one call, which stores it in one
 * insert. When no verifier answers, the submission is recorded RECEIVED (202) and this service's
 * sweep verifies it later, as it does what a verifier or receiver that died left NODE_VERIFYING.
 */
import type { Context, Service, ServiceSchema } from "moleculer";
import type { WakeResult, WakeStatus } from "../lib/answers";
import type { Config } from "../lib/config";
import { requestDigest } from "../lib/digest";
import { ServiceError, rejectionError } from "../lib/errors";
import type { Verdict } from "../lib/intake";
import type { CreateIntentRequest, IntentState, PublicMempoolIntent } from "../lib/intents";
import { createIntentParams } from "../lib/schemas";
import { UNRECORDED_REJECTIONS } from "../lib/verification";
import { sweeperMixin } from "../mixins/sweeper.mixin";
import type { IntakeOutcome, WaitingIntent } from "./mempool.service";
import { sweepMetrics, verificationMetrics } from "./metrics";
import type { VerifierAnswer } from "./verifier.service";

const SWEEP_BATCH = 200;
/** How long a RECEIVED intent belongs to the submission that recorded it before the sweep takes it. */
const SUBMISSION_GRACE_MS = 1000;
/** Moleculer errors meaning "no verifier could answer", as opposed to a verifier's own failure. */
const UNAVAILABLE = new Set(["SERVICE_NOT_FOUND", "SERVICE_NOT_AVAILABLE", "REQUEST_TIMEOUT", "REQUEST_REJECTED", "BROKER_DISCONNECTED"]);

interface ReceiverSettings {
	verifyTimeoutMs: number;
}

interface ReceiverVars {
	/** The current epoch number, cached briefly: it changes only when an epoch closes. */
	epochCache: { epoch: number; until: number } | null;
	metrics: ReturnType<typeof verificationMetrics>;
	sweeps: ReturnType<typeof sweepMetrics>;
}

interface ReceiverMethods {
	verify(ctx: Context | Service["broker"], request: CreateIntentRequest): Promise<VerifierAnswer | null>;
	currentEpoch(ctx: Context): Promise<number>;
	countVerdict(state: IntentState | null, startedAt: number): void;
	verifyWaiting(intent: WaitingIntent): Promise<{ state: IntentState | null; verifierUnavailable: boolean }>;
	sweep(graceMs: number): Promise<WakeStatus>;
}

type ReceiverThis = Service<ReceiverSettings> & ReceiverVars & ReceiverMethods;

export function receiverService(config: Config): ServiceSchema<ReceiverSettings, ReceiverMethods, ReceiverVars, ReceiverThis> {
	return {
		name: "receiver",
		dependencies: ["mempool", "epochs"],
		settings: { verifyTimeoutMs: config.verifyTimeoutMs },
		mixins: [
			// The periodic sweep leaves fresh RECEIVED intents to the submission verifying them right now.
			sweeperMixin<ReceiverThis>("verification", config.sweepIntervalMs, function (this: ReceiverThis) {
				return this.sweep(SUBMISSION_GRACE_MS);
			})
		],

		actions: {
			/** POST /intents */
			submit: {
				params: createIntentParams,
				async handler(this: ReceiverThis, ctx: Context<CreateIntentRequest, { $statusCode?: number; $location?: string }>): Promise<PublicMempoolIntent> {
					const request = ctx.params;
					const startedAt = performance.now();
					const verdict = await this.verify(ctx, request);
					// SPEC §2.1: only a signer holds a paymentId. Refused before idempotency, so a forgery
					// under someone else's paymentId learns nothing of it and stores nothing.
					if (verdict && !verdict.ok && UNRECORDED_REJECTIONS.has(verdict.reason)) {
						this.metrics.outcomes.inc({ outcome: "unrecorded" });
						throw rejectionError(verdict.reason, { paymentId: request.paymentId }, verdict.detail);
					}
					const outcome = await ctx.call<IntakeOutcome, object>("mempool.receive", {
						request,
						epoch: await this.currentEpoch(ctx),
						requestDigest: requestDigest(request),
						...(verdict ? { verdict } : {})
					});
					if (outcome.created && verdict) this.countVerdict(outcome.view.receiverStatus, startedAt);
					if (outcome.rejection) {
						const { reason, detail, id, paymentId } = outcome.rejection;
						throw rejectionError(reason, { id, paymentId }, detail);
					}
					ctx.meta.$statusCode = !outcome.created ? 200 : outcome.view.receiverStatus === "VERIFIED" ? 201 : 202;
					if (ctx.meta.$statusCode === 201) ctx.meta.$location = `/intents/${outcome.view.id}`;
					return outcome.view;
				}
			},

			/** POST /internal/wake: runs the verification sweep now. */
			wake: {
				params: {},
				async handler(this: ReceiverThis): Promise<WakeResult> {
					const status = await this.sweep(0);
					if (status.verifierUnavailable) throw new ServiceError("VERIFIER_UNAVAILABLE", "No verifier is available", status);
					return { ok: true, status };
				}
			}
		},

		events: {
			/** A close opened the next epoch: new intents belong to it from now on. */
			"epochs.opened": {
				params: { epoch: { type: "number", integer: true, min: 1 } },
				handler(this: ReceiverThis) {
					this.epochCache = null;
				}
			}
		},

		methods: {
			/** The verifier's verdict on a request; null when no verifier could answer in time. */
			async verify(this: ReceiverThis, caller, request) {
				try {
					return await caller.call<VerifierAnswer, object>("verifier.verify", { request }, { timeout: this.settings.verifyTimeoutMs, retries: 0 });
				} catch (err) {
					if (UNAVAILABLE.has((err as { type?: string }).type ?? "")) return null;
					throw err;
				}
			},

			async currentEpoch(this: ReceiverThis, ctx) {
				if (!this.epochCache || this.epochCache.until < Date.now()) this.epochCache = { epoch: (await ctx.call<{ epoch: number }>("epochs.current")).epoch, until: Date.now() + 1000 };
				return this.epochCache.epoch;
			},

			/** This receiver's verdicts (the store counts every replica's: mempool.totals); null: removed, unsigned. */
			countVerdict(this: ReceiverThis, state, startedAt) {
				if (state === null) this.metrics.outcomes.inc({ outcome: "unrecorded" });
				else if (state === "VERIFIED" || state === "REJECTED") {
					this.metrics.outcomes.inc({ outcome: state === "VERIFIED" ? "verified" : "rejected" });
					this.metrics.duration.observe((performance.now() - startedAt) / 1000);
				}
			},

			/** The sweep's verification of a waiting intent: claim, verify, complete. Never throws for an unavailable verifier. */
			async verifyWaiting(this: ReceiverThis, intent) {
				let claimed: WaitingIntent | null = intent;
				if (intent.state === "RECEIVED") {
					claimed = await this.broker.call<WaitingIntent | null, object>("mempool.claimForVerification", { id: intent.id, expectedVersion: intent.stateVersion });
					// Another verification took it first: it is that one's to finish.
					if (!claimed) return { state: "NODE_VERIFYING", verifierUnavailable: false };
				}
				const startedAt = performance.now();
				const answer = await this.verify(this.broker, claimed.request);
				if (!answer) {
					const state = await this.broker.call<IntentState, object>("mempool.returnToReceived", { id: claimed.id, expectedVersion: claimed.stateVersion });
					return { state, verifierUnavailable: true };
				}
				const { transactionCommitment, ...verdict } = answer;
				const state = await this.broker.call<IntentState | null, object>("mempool.completeVerification", { id: claimed.id, expectedVersion: claimed.stateVersion, verdict: verdict satisfies Verdict });
				this.countVerdict(state, startedAt);
				return { state, verifierUnavailable: false };
			},

			/** Verifies what is waiting: shared by the periodic sweep and POST /internal/wake (which takes everything now). */
			async sweep(this: ReceiverThis, graceMs) {
				const status = { picked: 0, verified: 0, rejected: 0, pending: 0, verifierUnavailable: false };
				if (!this.broker.registry.getActionEndpoints("verifier.verify")?.hasAvailable()) return { ...status, verifierUnavailable: true };
				const now = Date.now();
				const receivedBefore = new Date(now - graceMs).toISOString();
				const staleBefore = new Date(now - 2 * this.settings.verifyTimeoutMs).toISOString();
				const waiting = await this.broker.call<WaitingIntent[], object>("mempool.pendingVerification", { receivedBefore, staleBefore, limit: SWEEP_BATCH });
				for (const intent of waiting) {
					status.picked++;
					const outcome = await this.verifyWaiting(intent);
					if (outcome.verifierUnavailable) {
						status.verifierUnavailable = true;
						status.pending++;
						break;
					}
					if (outcome.state === null || outcome.state === "REJECTED") status.rejected++;
					else if (outcome.state === "RECEIVED" || outcome.state === "NODE_VERIFYING") status.pending++;
					else status.verified++;
				}
				for (const result of ["verified", "rejected", "pending"] as const) this.sweeps.inc({ sweep: "verification", result }, status[result]);
				return status;
			}
		} satisfies ReceiverMethods & ThisType<ReceiverThis>,

		created(this: ReceiverThis) {
			this.epochCache = null;
			this.metrics = verificationMetrics(this.broker);
			this.sweeps = sweepMetrics(this.broker);
		}
	};
}
