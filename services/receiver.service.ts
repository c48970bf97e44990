/**
 * receiver: intake of signed intents (SPEC §2.1). Stateless: records each submission with the
 * mempool before anything else, then has a verifier check it. Its sweep verifies what was left
 * RECEIVED (no verifier answered) or NODE_VERIFYING (a verifier or receiver died mid-way).
 */
import type { Context, ServiceBroker, ServiceSchema } from "moleculer";
import type { Config } from "../lib/config";
import { ServiceError, rejectionError, type RejectionReason } from "../lib/errors";
import { rejectedAtVerification, toPublicView, type CreateIntentRequest, type IntentRecord } from "../lib/intents";
import { createIntentParams } from "../lib/schemas";
import type { VerificationResult } from "../lib/verification";
import { sweeperMixin } from "../mixins/sweeper.mixin";

const SWEEP_BATCH = 200;
/** How long a RECEIVED intent belongs to the submission that recorded it before the sweep takes it. */
const SUBMISSION_GRACE_MS = 1000;
/** Moleculer errors meaning "no verifier could answer", as opposed to a verifier's own failure. */
const UNAVAILABLE = new Set(["SERVICE_NOT_FOUND", "SERVICE_NOT_AVAILABLE", "REQUEST_TIMEOUT", "REQUEST_REJECTED", "BROKER_DISCONNECTED"]);

type Outcome = { record: IntentRecord; verifierUnavailable: boolean };

/** Verification outcomes and latencies (claim to verdict) of this receiver since it started. */
class VerificationStats {
	verified = 0;
	rejected = 0;
	/** The latest latencies, a ring: percentiles describe recent behaviour, in bounded memory. */
	private readonly window = new Float64Array(10_000);
	private size = 0;
	private next = 0;

	record(verified: boolean, ms: number): void {
		if (verified) this.verified++;
		else this.rejected++;
		this.window[this.next] = ms;
		this.next = (this.next + 1) % this.window.length;
		this.size = Math.min(this.size + 1, this.window.length);
	}

	snapshot(): { verified: number; rejected: number; p50Ms: number; p99Ms: number } {
		const sorted = this.window.slice(0, this.size).sort();
		const at = (q: number) => (sorted.length ? Math.round(sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] * 100) / 100 : 0);
		return { verified: this.verified, rejected: this.rejected, p50Ms: at(0.5), p99Ms: at(0.99) };
	}
}

export function receiverService(config: Config): ServiceSchema {
	/** Runs one record through verification: claim, verify, complete. Never throws for an unavailable verifier. */
	async function verifyRecord(ctx: Context | { call: Context["call"] }, record: IntentRecord): Promise<Outcome> {
		let claimed: IntentRecord | null = record;
		if (record.state === "RECEIVED") {
			claimed = await ctx.call<IntentRecord | null, object>("mempool.claimForVerification", { id: record.id, expectedVersion: record.stateVersion });
			if (!claimed) return { record: (await ctx.call<IntentRecord, object>("mempool.get", { id: record.id })) ?? record, verifierUnavailable: false };
		}
		const startedAt = performance.now();
		let result: VerificationResult & { verifiedBy?: string };
		try {
			result = await ctx.call<VerificationResult & { verifiedBy?: string }, object>("verifier.verify", { request: claimed.request }, { timeout: config.verifyTimeoutMs, retries: 0 });
		} catch (err) {
			if (!UNAVAILABLE.has((err as { type?: string }).type ?? "")) throw err;
			const back = await ctx.call<IntentRecord, object>("mempool.returnToReceived", { id: claimed.id, expectedVersion: claimed.stateVersion });
			return { record: back, verifierUnavailable: true };
		}
		const { verifiedBy, ...verdict } = result;
		const done = await ctx.call<IntentRecord, object>("mempool.completeVerification", { id: claimed.id, expectedVersion: claimed.stateVersion, result: verdict, verifiedBy });
		if (done.state === "VERIFIED" || done.state === "REJECTED") stats.record(done.state === "VERIFIED", performance.now() - startedAt);
		return { record: done, verifierUnavailable: false };
	}

	function rejection(record: IntentRecord): ServiceError {
		return rejectionError(record.rejectionReason as RejectionReason, { id: record.id, paymentId: record.paymentId }, record.rejectionDetail);
	}

	let broker: ServiceBroker;
	const stats = new VerificationStats();

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
					const { record, created } = await ctx.call<{ record: IntentRecord; created: boolean }, object>("mempool.receive", {
						request: ctx.params,
						epoch: await currentEpoch(ctx)
					});
					let current = record;
					if (created) current = (await verifyRecord(ctx, record)).record;
					if (rejectedAtVerification(current)) throw rejection(current);
					ctx.meta.$statusCode = !created ? 200 : current.state === "VERIFIED" ? 201 : 202;
					if (ctx.meta.$statusCode === 201) ctx.meta.$location = `/intents/${current.id}`;
					return toPublicView(current);
				}
			},

			/** Internal: verification figures of this receiver for GET /metrics. */
			stats: {
				params: {},
				handler: () => stats.snapshot()
			},

			/** POST /internal/wake: runs the verification sweep now. */
			wake: {
				params: {},
				async handler() {
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
		}
	};

	/** Verifies what is waiting: shared by the periodic sweep and POST /internal/wake (which takes everything now). */
	async function sweep(graceMs: number): Promise<{ picked: number; verified: number; rejected: number; pending: number; verifierUnavailable: boolean }> {
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
			if (outcome.record.state === "REJECTED") status.rejected++;
			else if (outcome.record.state === "RECEIVED" || outcome.record.state === "NODE_VERIFYING") status.pending++;
			else status.verified++;
		}
		return status;
	}
}
