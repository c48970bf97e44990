/**
 * Intake of a payment intent (SPEC §2.1) as records: what a submission is stored as, and what a
 * verifier's verdict makes of it. A verdict given before the record exists is applied through the
 * same moves a sweep makes (claim, then verdict), so the history reads the same either way. Pure.
 */
import { applyMove, type CreateIntentRequest, type IntentRecord } from "./intents";
import type { VerificationResult } from "./verification";

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
