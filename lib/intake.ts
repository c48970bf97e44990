/**
 * Intake of a payment intent (SPEC §2.1) as records: what a submission is stored as, and what a
 * verifier's verdict makes of it. A verdict given before the record exists is applied through the
 * same moves a sweep makes (claim, then verdict), so the history reads the same either way. Pure.
 */
import { ERROR_STATUS, isUnanswered, type ErrorType } from "./errors";
import { applyMove, type CreateIntentRequest, type IntentRecord, type PublicMempoolIntent } from "./intents";
import type { VerificationResult } from "./verification";

/**
 * The intake works in batches: the gateway hands the receiver the submissions of one window
 * (INTAKE_WINDOW_MS) in one call, the receiver has them verified in one call per verifier and
 * stored in one call, so the hops between processes cost per batch, not per intent. A batch holds
 * at most INTAKE_BATCH_MAX submissions of INTAKE_BATCH_BYTES of bodies as sent (a body's JSON never
 * grows when the bus serializes it again), far below NATS's 1 MB message limit. One that holds
 * INTAKE_BATCH_ENOUGH leaves at the end of that event-loop turn without waiting out its window,
 * as a store's commit group does (GROUP_COMMIT_WRITES); a batch carries its hops' fixed costs, so
 * it leaves later than a group commits (8 cost about 5 % more CPU per intent at full load).
 */
export const INTAKE_BATCH_MAX = 64;
export const INTAKE_BATCH_BYTES = 256 * 1024;
export const INTAKE_BATCH_ENOUGH = 16;

/** A submission, as the gateway hands it over: validated (createIntentParams) where it entered. */
export interface Submission {
	request: CreateIntentRequest;
	/** The key of the HTTP request it came in (services/replay.ts): a repeat of it is recognised. */
	call: string;
}

/** A refusal, as it crosses the bus inside a batch's answer: a SPEC §7 error of one submission. */
export interface Refusal {
	refused: { type: ErrorType; message: string; data?: unknown };
}

/** The answer to one submission: its record's public view and the status it was answered with, or a refusal. */
export type SubmissionAnswer = { status: 200 | 201 | 202; view: PublicMempoolIntent } | Refusal;

export function refusal(err: { type: ErrorType; message: string; data?: unknown }): Refusal {
	return { refused: { type: err.type, message: err.message, ...(err.data !== undefined ? { data: err.data } : {}) } };
}

/**
 * Any failure of one submission's call as that submission's answer, never its batch's: an error
 * of the SPEC §7 catalogue as itself, a call the bus did not answer as NOT_READY (a retry of the
 * same body is safe: the paymentId makes it idempotent), anything else as a bare INTERNAL_ERROR
 * (its cause goes to `unexpected`, to be logged, and is never sent).
 */
export function refusalOf(err: unknown, unexpected: (err: unknown) => void = () => {}): Refusal {
	const { type, message, data } = (err ?? {}) as { type?: unknown; message?: string; data?: unknown };
	if (typeof type === "string" && Object.hasOwn(ERROR_STATUS, type)) return refusal({ type: type as ErrorType, message: message ?? "", data });
	if (isUnanswered(err)) return refusal({ type: "NOT_READY", message: "The service is not ready to answer this request" });
	unexpected(err);
	return refusal({ type: "INTERNAL_ERROR", message: "Internal error" });
}

/** A verifier's answer, and which verifier gave it (history shows it). */
export type Verdict = VerificationResult & { verifiedBy?: string };

/** SPEC §1's last check, the one the mempool makes: another intent holds the sender's nonce. */
export const NONCE_REUSED: VerificationResult = { ok: false, reason: "NONCE_REUSED", detail: "this sender already used the nonce" };

export interface Intake {
	id: string;
	request: CreateIntentRequest;
	/** requestDigest (lib/digest.ts): idempotency compares bodies by it. */
	requestDigest: string;
	transactionCommitment: string;
	epoch: number;
	at: string;
	/** The broker call that records it (services/replay.ts). */
	intakeCall: string | null;
}

/** The record as received, before any verdict: the 202 path, when no verifier answered in time. */
export function receivedRecord(intake: Intake): IntentRecord {
	const { id, request, requestDigest, transactionCommitment, epoch, at, intakeCall } = intake;
	return {
		id,
		paymentId: request.paymentId,
		state: "RECEIVED",
		stateVersion: 1,
		senderWallet: request.senderWallet,
		requestDigest,
		transactionCommitment,
		epoch,
		createdAt: at,
		updatedAt: at,
		expiresAt: request.senderAuthorizationExpiresAt,
		expiresAtSlot: request.expiresAtSlot,
		leaseExpiresAt: null,
		nonceKey: null,
		request,
		lease: null,
		submission: null,
		history: [{ state: "RECEIVED", at }],
		intakeCall
	};
}

/** NODE_VERIFYING → VERIFIED (holding the nonce: nonceKey) or REJECTED, on a verdict that leaves a record. */
export function withVerdict(record: IntentRecord, verdict: Verdict, at: string): IntentRecord {
	const by = verdict.verifiedBy ? { by: verdict.verifiedBy } : {};
	if (verdict.ok) return { ...applyMove(record, "verdict", "VERIFIED", at, by), verdict: "VERIFIED" };
	const { reason, detail } = verdict;
	return { ...applyMove(record, "verdict", "REJECTED", at, { reason, rejectionReason: reason, rejectionDetail: detail, ...by }), verdict: "REJECTED" };
}

/** The record of a submission verified before it was stored: one insert, already in its verdict's state. */
export function decidedRecord(intake: Intake, verdict: Verdict): IntentRecord {
	return withVerdict(applyMove(receivedRecord(intake), "claim", "NODE_VERIFYING", intake.at), verdict, intake.at);
}
