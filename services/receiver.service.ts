/**
 * receiver: intake of signed intents (SPEC §2.1). Stateless. Takes the submissions of a gateway in
 * batches (lib/intake.ts) and has a verifier check each first, so a body its sender did not sign
 * is refused before it can hold a paymentId or a row; then hands the requests and the verdicts to
 * the mempool in one call, which stores each in one insert. When no verifier answers, a submission
 * is recorded RECEIVED (202) and this service's sweep verifies it later, as it does what a
 * verifier or receiver that died left NODE_VERIFYING.
 */
import type { Context, Service, ServiceSchema } from "moleculer";
import type { WakeResult, WakeStatus } from "../lib/answers";
import type { Config } from "../lib/config";
import { requestDigest } from "../lib/digest";
import { ServiceError, isUnanswered, rejectionError } from "../lib/errors";
import { INTAKE_BATCH_MAX, refusal, refusalOf, type Refusal, type Submission, type SubmissionAnswer, type Verdict } from "../lib/intake";
import type { CreateIntentRequest, IntentState, PublicMempoolIntent } from "../lib/intents";
import { createIntentParams } from "../lib/schemas";
import { UNRECORDED_REJECTIONS } from "../lib/verification";
import { sweeperMixin } from "../mixins/sweeper.mixin";
import type { IntakeItem, IntakeOutcome, WaitingIntent } from "./mempool.service";
import { callServed, internal, isServed, workersOnly } from "./internal";
import { callKey } from "./replay";
import { sweepMetrics, verificationMetrics } from "./metrics";
import type { VerifierAnswer } from "./verifier.service";

const SWEEP_BATCH = 200;
/** How long a RECEIVED intent belongs to the submission that recorded it before the sweep takes it. */
const SUBMISSION_GRACE_MS = 1000;

interface ReceiverSettings {
	verifyTimeoutMs: number;
}

interface ReceiverVars {
	/** createIntentParams compiled: the full check of a submission from another node. */
	checkRequest: (request: object) => true | object[];
	/** The current epoch number, cached briefly: it changes only when an epoch closes. */
	epochCache: { epoch: number; until: number } | null;
	metrics: ReturnType<typeof verificationMetrics>;
	sweeps: ReturnType<typeof sweepMetrics>;
}

interface ReceiverMethods {
	intake(ctx: Context, submissions: Submission[]): Promise<SubmissionAnswer[]>;
	intakeChecked(ctx: Context, submissions: Submission[]): Promise<SubmissionAnswer[]>;
	answerOf(outcome: IntakeOutcome | Refusal, verdict: VerifierAnswer | null, startedAt: number): SubmissionAnswer;
	store(ctx: Context, epoch: number, items: IntakeItem[]): Promise<(IntakeOutcome | Refusal)[]>;
	verifyHolders(paymentIds: string[]): Promise<boolean>;
	verifyAll(ctx: Context, requests: CreateIntentRequest[]): Promise<(VerifierAnswer | null)[]>;
	verify(ctx: Context | Service["broker"], request: CreateIntentRequest): Promise<VerifierAnswer | null>;
	currentEpoch(ctx: Context): Promise<number>;
	countVerdict(state: IntentState | null, startedAt: number): void;
	verifyWaiting(intent: WaitingIntent): Promise<{ state: IntentState | null; verifierUnavailable: boolean }>;
	sweep(graceMs: number): Promise<WakeStatus>;
}

type ReceiverThis = Service<ReceiverSettings> & ReceiverVars & ReceiverMethods;

/** The mempool's answer that a body not verified yet holds `paymentId` (mempool.receive). */
function heldUnverified(outcome: IntakeOutcome | Refusal, paymentId: string): boolean {
	return "refused" in outcome && outcome.refused.type === "NOT_READY" && (outcome.refused.data as { paymentId?: string } | undefined)?.paymentId === paymentId;
}

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
			/**
			 * Internal, from the gateway (POST /intents): a batch of submissions, validated where they
			 * entered; each answered on its own, in order. From another node each is checked in full
			 * again: any group may call this on the bus, and what it hands on is stored with the
			 * intake's proof.
			 */
			submitMany: internal({
				params: {
					submissions: { type: "array", min: 1, max: INTAKE_BATCH_MAX, items: { type: "object", props: { request: "object", call: { type: "string", max: 200 } } } }
				},
				handler(this: ReceiverThis, ctx: Context<{ submissions: Submission[] }>): Promise<SubmissionAnswer[]> {
					return ctx.nodeID === this.broker.nodeID ? this.intake(ctx, ctx.params.submissions) : this.intakeChecked(ctx, ctx.params.submissions);
				}
			}),

			/**
			 * POST /intents spelled otherwise than the front door takes it (/intents/), and from a
			 * gateway of the previous version: one submission, validated here.
			 */
			submit: {
				params: createIntentParams,
				async handler(this: ReceiverThis, ctx: Context<CreateIntentRequest, { $statusCode?: number; $location?: string }>): Promise<PublicMempoolIntent> {
					const [answer] = await this.intake(ctx, [{ request: ctx.params, call: callKey(ctx) ?? ctx.id }]);
					if ("refused" in answer) throw new ServiceError(answer.refused.type, answer.refused.message, answer.refused.data);
					ctx.meta.$statusCode = answer.status;
					if (answer.status === 201) ctx.meta.$location = `/intents/${answer.view.id}`;
					return answer.view;
				}
			},

			/** POST /internal/wake: runs the verification sweep now. */
			wake: workersOnly({
				params: {},
				async handler(this: ReceiverThis): Promise<WakeResult> {
					const status = await this.sweep(0);
					if (status.verifierUnavailable) throw new ServiceError("VERIFIER_UNAVAILABLE", "No verifier is available", status);
					return { ok: true, status };
				}
			})
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
			/**
			 * Verifies the submissions, then stores those a signer holds (SPEC §2.1: a forgery under
			 * someone else's paymentId is refused before idempotency, learns nothing of it and stores
			 * nothing).
			 */
			async intake(this: ReceiverThis, ctx, submissions) {
				const startedAt = performance.now();
				const verdicts = await this.verifyAll(ctx, submissions.map(submission => submission.request));
				const answers: SubmissionAnswer[] = new Array(submissions.length);
				const items: IntakeItem[] = [];
				const positions: number[] = [];
				submissions.forEach(({ request, call }, i) => {
					const verdict = verdicts[i];
					if (verdict && !verdict.ok && UNRECORDED_REJECTIONS.has(verdict.reason)) {
						this.metrics.outcomes.inc({ outcome: "unrecorded" });
						answers[i] = refusal(rejectionError(verdict.reason, { paymentId: request.paymentId }, verdict.detail));
						return;
					}
					items.push({ request, requestDigest: requestDigest(request), ...(verdict ? { verdict } : {}), call });
					positions.push(i);
				});
				if (items.length) {
					const epoch = await this.currentEpoch(ctx);
					const outcomes = await this.store(ctx, epoch, items);
					// A signed body whose paymentId a body taken unverified holds (a forgery, maybe): that one is
					// verified now, as a verifier answers, and this one stored again, once.
					const held = items.flatMap((item, k) => (item.verdict && heldUnverified(outcomes[k], item.request.paymentId) ? [k] : []));
					try {
						if (held.length && (await this.verifyHolders(held.map(k => items[k].request.paymentId)))) {
							const again = await this.store(ctx, epoch, held.map(k => items[k]));
							held.forEach((k, j) => (outcomes[k] = again[j]));
						}
					} catch (err) {
						// Those keep their NOT_READY (a retry); the others of the batch were stored, and are answered so.
						this.logger.warn(`Storing again the submissions whose paymentId's holder was verified failed: ${(err as Error).message}`);
					}
					outcomes.forEach((outcome, k) => (answers[positions[k]] = this.answerOf(outcome, verdicts[positions[k]], startedAt)));
				}
				return answers;
			},

			/** Those of `submissions` that pass createIntentParams go in; the others are refused as the gateway refuses them. */
			async intakeChecked(this: ReceiverThis, ctx, submissions) {
				const checks = submissions.map(({ request }) => this.checkRequest(request));
				const valid = submissions.filter((_, i) => checks[i] === true);
				const answers = valid.length ? await this.intake(ctx, valid) : [];
				let next = 0;
				return checks.map(check => (check === true ? answers[next++] : refusal(new ServiceError("VALIDATION_ERROR", "Parameters validation error!", check))));
			},

			async store(this: ReceiverThis, ctx, epoch, items) {
				if (isServed(this.broker, "mempool.receiveMany")) return ctx.call<(IntakeOutcome | Refusal)[], object>("mempool.receiveMany", { epoch, items });
				// An owner of the previous version (a rolling update) takes one at a time. Each its own call:
				// it keys a submission by its caller's context, which one batch's would share.
				return Promise.all(items.map(({ call: _call, ...item }) => this.broker.call<IntakeOutcome, object>("mempool.receive", { ...item, epoch }).catch(err => refusalOf(err, cause => this.logger.error("mempool.receive failed:", cause)))));
			},

			/** Verifies the RECEIVED holders of `paymentIds`; whether any was. */
			async verifyHolders(this: ReceiverThis, paymentIds) {
				if (!isServed(this.broker, "mempool.receivedHolder")) return false;
				const verified = await Promise.all(
					[...new Set(paymentIds)].map(async paymentId => {
						try {
							const holder = await this.broker.call<WaitingIntent | null, object>("mempool.receivedHolder", { paymentId });
							return !!holder && !(await this.verifyWaiting(holder)).verifierUnavailable;
						} catch (err) {
							// The submission keeps its NOT_READY (a retry); the sweep verifies the holder later.
							this.logger.warn(`Verifying the holder of a paymentId failed: ${(err as Error).message}`);
							return false;
						}
					})
				);
				return verified.includes(true);
			},

			answerOf(this: ReceiverThis, outcome, verdict, startedAt) {
				if ("refused" in outcome) return outcome;
				if (outcome.created && verdict) this.countVerdict(outcome.view.receiverStatus, startedAt);
				if (outcome.rejection) {
					const { reason, detail, id, paymentId } = outcome.rejection;
					return refusal(rejectionError(reason, { id, paymentId }, detail));
				}
				return { status: !outcome.created ? 200 : outcome.view.receiverStatus === "VERIFIED" ? 201 : 202, view: outcome.view };
			},

			/**
			 * Each request's verdict, null where no verifier could answer in time or the one that
			 * answered could not decide it now (verifier.verifyMany): one call per
			 * verifier, with the requests the Shard strategy sends it (by sender), so that each sender
			 * still meets one verifier and its key cache.
			 */
			async verifyAll(this: ReceiverThis, ctx, requests) {
				const verdicts: (VerifierAnswer | null)[] = requests.map(() => null);
				const byNode = new Map<string, number[]>();
				const oneByOne: number[] = [];
				requests.forEach((request, i) => {
					const endpoint = this.broker.findNextActionEndpoint("verifier.verifyMany", undefined, { params: { requests: [request] }, meta: {} } as unknown as Context);
					// Only verifiers of the previous version (a rolling update), or none (null: recorded RECEIVED for the sweep).
					if (endpoint instanceof Error) return void oneByOne.push(i);
					const indexes = byNode.get(endpoint.id);
					if (indexes) indexes.push(i);
					else byNode.set(endpoint.id, [i]);
				});
				await Promise.all([
					...[...byNode].map(async ([nodeID, indexes]) => {
						try {
							const answers = await ctx.call<(VerifierAnswer | null)[], object>("verifier.verifyMany", { requests: indexes.map(i => requests[i]) }, { nodeID, timeout: this.settings.verifyTimeoutMs, retries: 0 });
							indexes.forEach((i, k) => (verdicts[i] = answers[k]));
						} catch (err) {
							if (!isUnanswered(err)) throw err;
						}
					}),
					...oneByOne.map(async i => (verdicts[i] = await this.verify(ctx, requests[i])))
				]);
				return verdicts;
			},

			/** The verifier's verdict on a request; null when no verifier could answer in time. */
			async verify(this: ReceiverThis, caller, request) {
				try {
					return await caller.call<VerifierAnswer, object>("verifier.verify", { request }, { timeout: this.settings.verifyTimeoutMs, retries: 0 });
				} catch (err) {
					if (isUnanswered(err)) return null;
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
				if (!isServed(this.broker, "verifier.verify")) return { ...status, verifierUnavailable: true };
				const now = Date.now();
				const receivedBefore = new Date(now - graceMs).toISOString();
				const staleBefore = new Date(now - 2 * this.settings.verifyTimeoutMs).toISOString();
				const waiting = await callServed<WaitingIntent[]>(this.broker, "mempool.pendingVerification", { receivedBefore, staleBefore, limit: SWEEP_BATCH });
				// One intent whose verification fails (its record unreadable, say) must not hold up the
				// others behind it, sweep after sweep: the run goes on, then fails with the first error.
				// An owner that cannot answer now would fail the rest alike, each after its timeout: the run
				// stops, and fails with that (a retry later may work).
				let failure: { failed: unknown } | null = null;
				for (const intent of waiting) {
					status.picked++;
					const outcome = await this.verifyWaiting(intent).catch((failed: unknown) => ({ failed }));
					if ("failed" in outcome) {
						status.pending++;
						if (isUnanswered(outcome.failed) || (outcome.failed as { type?: unknown } | null)?.type === "NOT_READY") {
							failure = outcome;
							break;
						}
						failure ??= outcome;
						continue;
					}
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
				if (failure) throw failure.failed;
				return status;
			}
		} satisfies ReceiverMethods & ThisType<ReceiverThis>,

		created(this: ReceiverThis) {
			this.checkRequest = this.broker.validator!.compile(createIntentParams) as unknown as ReceiverVars["checkRequest"];
			this.epochCache = null;
			this.metrics = verificationMetrics(this.broker);
			this.sweeps = sweepMetrics(this.broker);
		}
	};
}
