/**
 * Payment intents: the record the mempool keeps, its two views (SPEC §2.2, §2.3) and the state
 * machine of SPEC §2.4/§3 as one table. Pure: callers pass the time and what they looked up.
 */
import { ServiceError, type RejectionReason } from "./errors";
import type { PaymentAuthorizationFields } from "./canonical";

export const INTENT_STATES = ["RECEIVED", "NODE_VERIFYING", "VERIFIED", "CRANKER_LEASED", "SUBMITTED", "CONFIRMED", "REJECTED"] as const;
export type IntentState = (typeof INTENT_STATES)[number];
export type PublicStatus = "pending" | "canceled" | "executed";

export const PUBLIC_STATUS: Record<IntentState, PublicStatus> = {
	RECEIVED: "pending",
	NODE_VERIFYING: "pending",
	VERIFIED: "pending",
	CRANKER_LEASED: "pending",
	SUBMITTED: "pending",
	CONFIRMED: "executed",
	REJECTED: "canceled"
};

export function statesOfStatus(status: string): IntentState[] {
	if ((INTENT_STATES as readonly string[]).includes(status)) return [status as IntentState];
	return INTENT_STATES.filter(s => PUBLIC_STATUS[s] === status);
}

/** States no move leaves: what an epoch close archives. */
export const TERMINAL_STATES: readonly IntentState[] = ["CONFIRMED", "REJECTED"];

/** States an intent may still expire in: nothing has been sent on chain yet. */
export const EXPIRABLE_STATES: readonly IntentState[] = ["RECEIVED", "NODE_VERIFYING", "VERIFIED", "CRANKER_LEASED"];

/** CreateIntentRequest (SPEC §2.1) as accepted by the schema. */
export interface CreateIntentRequest extends PaymentAuthorizationFields {
	senderAuthorizationMessage: string;
	senderAuthorizationSignature: string;
	recipientHash?: string;
	transactionCommitment?: string;
}

export interface Lease {
	crankerPubkey: string;
	leasedAt: string;
	expiresAt: string;
}

export interface Submission {
	transactionSignature: string;
	submittedAt: string;
	slot?: number;
}

export interface HistoryEntry {
	state: IntentState;
	at: string;
	by?: string;
	reason?: string;
}

/** The stored document. Top-level scalars are the store's indexed fields. */
export interface IntentRecord {
	id: string;
	paymentId: string;
	state: IntentState;
	stateVersion: number;
	senderWallet: string;
	/** Canonical JSON digest of the request: idempotency compares bodies by it. */
	requestDigest: string;
	transactionCommitment: string;
	epoch: number;
	createdAt: string;
	updatedAt: string;
	/** `senderAuthorizationExpiresAt`, kept as a column for the expiry sweep. */
	expiresAt: string;
	expiresAtSlot: number;
	/** `lease.expiresAt`, kept as a column for the lease sweep; null without a lease. */
	leaseExpiresAt: string | null;
	request: CreateIntentRequest;
	lease: Lease | null;
	submission: Submission | null;
	history: HistoryEntry[];
	rejectionReason?: RejectionReason | "EXPIRED" | string;
	/** Why verification refused it, replayed in the error message. */
	rejectionDetail?: string;
	/** The epoch whose close archived it; absent while it is live. */
	archivedIn?: number;
}

export interface PublicMempoolIntent {
	id: string;
	paymentId: string;
	status: PublicStatus;
	receiverStatus: IntentState;
	recipientTin: string;
	tokenMintAddress: string;
	amount: string;
	feeLimit: string;
	senderWallet: string;
	expiresAt: string;
	expiresAtSlot: number;
	transactionCommitment: string;
	createdAt: string;
	updatedAt: string;
	transactionSignature?: string;
	rejectionReason?: string;
	epoch: number;
}

export type MempoolIntent = CreateIntentRequest &
	PublicMempoolIntent & {
		stateVersion: number;
		lease: Lease | null;
		submission: Submission | null;
		history: HistoryEntry[];
	};

export function toPublicView(record: IntentRecord): PublicMempoolIntent {
	const { request } = record;
	const view: PublicMempoolIntent = {
		id: record.id,
		paymentId: record.paymentId,
		status: PUBLIC_STATUS[record.state],
		receiverStatus: record.state,
		recipientTin: request.recipientTin,
		tokenMintAddress: request.tokenMintAddress,
		amount: request.amount,
		feeLimit: request.feeLimit,
		senderWallet: request.senderWallet,
		expiresAt: request.senderAuthorizationExpiresAt,
		expiresAtSlot: request.expiresAtSlot,
		transactionCommitment: record.transactionCommitment,
		createdAt: record.createdAt,
		updatedAt: record.updatedAt,
		epoch: record.epoch
	};
	if (record.state === "CONFIRMED" && record.submission) view.transactionSignature = record.submission.transactionSignature;
	if (record.state === "REJECTED" && record.rejectionReason) view.rejectionReason = record.rejectionReason;
	return view;
}

/** The worker view: the whole submitted request flattened beside the public fields. */
export function toWorkerView(record: IntentRecord): MempoolIntent {
	return {
		...record.request,
		...toPublicView(record),
		stateVersion: record.stateVersion,
		lease: record.lease,
		submission: record.submission,
		history: record.history
	};
}

// ---------------------------------------------------------------------------------------------
// State machine

export type Actor = "node" | "cranker";

/** Every allowed move, and who makes it. Anything not listed is INVALID_TRANSITION. */
export const TRANSITIONS: readonly { from: IntentState; to: IntentState; by: Actor; rule: string }[] = [
	{ from: "RECEIVED", to: "NODE_VERIFYING", by: "node", rule: "a verifier picks it up" },
	{ from: "NODE_VERIFYING", to: "VERIFIED", by: "node", rule: "the authorization verified and its nonce was free" },
	{ from: "NODE_VERIFYING", to: "REJECTED", by: "node", rule: "verification refused it (rejectionReason)" },
	{ from: "NODE_VERIFYING", to: "RECEIVED", by: "node", rule: "no verifier answered in time; a sweep retries" },
	{ from: "RECEIVED", to: "REJECTED", by: "node", rule: "expired before verification" },
	{ from: "VERIFIED", to: "REJECTED", by: "node", rule: "expired before a lease" },
	{ from: "CRANKER_LEASED", to: "VERIFIED", by: "node", rule: "the lease expired without renewal" },
	{ from: "CRANKER_LEASED", to: "REJECTED", by: "node", rule: "expired before submission" },
	{ from: "VERIFIED", to: "CRANKER_LEASED", by: "cranker", rule: "an online settlement Cranker leases it" },
	{ from: "CRANKER_LEASED", to: "CRANKER_LEASED", by: "cranker", rule: "the holder renews the lease" },
	{ from: "CRANKER_LEASED", to: "VERIFIED", by: "cranker", rule: "the holder releases it" },
	{ from: "CRANKER_LEASED", to: "SUBMITTED", by: "cranker", rule: "the holder sent the transaction" },
	{ from: "SUBMITTED", to: "CONFIRMED", by: "cranker", rule: "the transaction is confirmed" },
	{ from: "SUBMITTED", to: "VERIFIED", by: "cranker", rule: "the transaction was dropped" },
	{ from: "CRANKER_LEASED", to: "REJECTED", by: "cranker", rule: "the holder refuses it" },
	{ from: "SUBMITTED", to: "REJECTED", by: "cranker", rule: "the chain refused it" }
];

export function canMove(from: IntentState, to: IntentState, by: Actor): boolean {
	return TRANSITIONS.some(t => t.from === from && t.to === to && t.by === by);
}

/** Applies a move: the next record, with stateVersion +1 (except a renewal) and a history entry. */
export function applyMove(
	record: IntentRecord,
	to: IntentState,
	at: string,
	changes: Partial<Pick<IntentRecord, "lease" | "submission" | "rejectionReason" | "rejectionDetail">> & { by?: string; reason?: string } = {}
): IntentRecord {
	const { by, reason, ...fields } = changes;
	const renewal = record.state === "CRANKER_LEASED" && to === "CRANKER_LEASED";
	const next: IntentRecord = { ...record, ...fields, state: to, updatedAt: at };
	next.leaseExpiresAt = next.lease?.expiresAt ?? null;
	if (!renewal) {
		next.stateVersion = record.stateVersion + 1;
		const entry: HistoryEntry = { state: to, at };
		if (by) entry.by = by;
		if (reason) entry.reason = reason;
		next.history = [...record.history, entry];
	}
	return next;
}

export function isExpired(record: IntentRecord, nowMs: number, latestSlot: number | null): boolean {
	return Date.parse(record.expiresAt) <= nowMs || (latestSlot !== null && record.expiresAtSlot <= latestSlot);
}

// ---------------------------------------------------------------------------------------------
// Cranker status updates (PATCH /intents/{id}/status)

export interface UpdateStatusRequest {
	status: IntentState;
	crankerPubkey: string;
	expectedVersion: number;
	transactionSignature?: string;
	slot?: number;
	reason?: string;
}

export type StatusDecision = { kind: "replay" } | { kind: "move"; next: IntentRecord };

export interface StatusContext {
	now: Date;
	leaseTtlMs: number;
	/** Whether `crankerPubkey` is an online Cranker with the `settlement` role. */
	crankerAllowed: boolean;
}

/**
 * Decides a Cranker's status update, with the refusals in SPEC §2.4's order: version, transition,
 * Cranker, lease holder, lease expiry, missing fields. The caller has already answered 404.
 */
export function decideStatusUpdate(record: IntentRecord, request: UpdateStatusRequest, context: StatusContext): StatusDecision {
	if (isReplay(record, request)) return { kind: "replay" };

	if (request.expectedVersion !== record.stateVersion)
		throw new ServiceError("VERSION_CONFLICT", `expectedVersion ${request.expectedVersion} is not the current stateVersion ${record.stateVersion}`, {
			stateVersion: record.stateVersion,
			state: record.state
		});
	const { state: from } = record;
	const to = request.status;
	if (!canMove(from, to, "cranker")) throw new ServiceError("INVALID_TRANSITION", `A Cranker cannot move an intent from ${from} to ${to}`, { from, to });
	if (!context.crankerAllowed)
		throw new ServiceError("CRANKER_NOT_ALLOWED", "The Cranker is not online with the settlement role", { crankerPubkey: request.crankerPubkey });

	const nowMs = context.now.getTime();
	const at = context.now.toISOString();
	const isHolder = record.lease?.crankerPubkey === request.crankerPubkey;
	const leaseLive = record.lease !== null && Date.parse(record.lease.expiresAt) > nowMs;
	if (from === "CRANKER_LEASED") {
		if (!isHolder) throw new ServiceError("NOT_LEASE_HOLDER", "Another Cranker holds the lease");
		if (!leaseLive) throw new ServiceError("LEASE_EXPIRED", "The lease has expired", { leaseExpiresAt: record.lease?.expiresAt });
	} else if (from === "SUBMITTED" && !isHolder && leaseLive) {
		// Once the holder's lease has lapsed, any settlement Cranker that checked the chain may finish it.
		throw new ServiceError("NOT_LEASE_HOLDER", "Another Cranker holds the lease");
	}

	const by = request.crankerPubkey;
	const lease = (): Lease => ({ crankerPubkey: by, leasedAt: record.lease && isHolder ? record.lease.leasedAt : at, expiresAt: new Date(nowMs + context.leaseTtlMs).toISOString() });
	switch (`${from}>${to}`) {
		case "VERIFIED>CRANKER_LEASED":
		case "CRANKER_LEASED>CRANKER_LEASED":
			return { kind: "move", next: applyMove(record, to, at, { by, lease: lease() }) };
		case "CRANKER_LEASED>VERIFIED":
			return { kind: "move", next: applyMove(record, to, at, { by, lease: null, reason: request.reason ?? "released" }) };
		case "CRANKER_LEASED>SUBMITTED": {
			const transactionSignature = required(request, "transactionSignature");
			const submission: Submission = { transactionSignature, submittedAt: at };
			if (request.slot !== undefined) submission.slot = request.slot;
			return { kind: "move", next: applyMove(record, to, at, { by, submission }) };
		}
		case "SUBMITTED>CONFIRMED": {
			const transactionSignature = required(request, "transactionSignature");
			if (transactionSignature !== record.submission?.transactionSignature)
				throw new ServiceError("VALIDATION_ERROR", "transactionSignature differs from the submitted one", [
					{ type: "mismatch", field: "transactionSignature", message: "must equal the submitted transactionSignature" }
				]);
			const submission: Submission = { ...record.submission, ...(request.slot !== undefined ? { slot: request.slot } : {}) };
			return { kind: "move", next: applyMove(record, to, at, { by, submission }) };
		}
		case "SUBMITTED>VERIFIED":
			return { kind: "move", next: applyMove(record, to, at, { by, lease: null, submission: null, reason: required(request, "reason") }) };
		default: {
			// CRANKER_LEASED>REJECTED and SUBMITTED>REJECTED, the only other Cranker moves.
			const reason = required(request, "reason");
			return { kind: "move", next: applyMove(record, to, at, { by, reason, rejectionReason: reason }) };
		}
	}
}

function required(request: UpdateStatusRequest, field: "transactionSignature" | "reason"): string {
	const value = request[field];
	if (value === undefined)
		throw new ServiceError("VALIDATION_ERROR", `${field} is required for a move to ${request.status}`, [
			{ type: "required", field, message: `The '${field}' field is required.` }
		]);
	return value;
}

/**
 * A successful update sent again: same status, Cranker and signature, with the expectedVersion it
 * was first sent with, while the intent is still in the state it produced. The signature is part
 * of the update only for the moves that record one (SUBMITTED, CONFIRMED).
 */
function isReplay(record: IntentRecord, request: UpdateStatusRequest): boolean {
	const last = record.history[record.history.length - 1];
	const recordsSignature = request.status === "SUBMITTED" || request.status === "CONFIRMED";
	return (
		record.state === request.status &&
		request.expectedVersion === record.stateVersion - 1 &&
		last?.by === request.crankerPubkey &&
		(!recordsSignature || request.transactionSignature === record.submission?.transactionSignature)
	);
}

/** True when verification refused the intent (as opposed to a later expiry or a Cranker's refusal). */
export function rejectedAtVerification(record: IntentRecord): boolean {
	return record.state === "REJECTED" && record.history[record.history.length - 2]?.state === "NODE_VERIFYING";
}
