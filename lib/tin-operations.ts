/**
 * TIN operations (SPEC §5): the record, its two views and the staged pipeline as one table, with
 * the role and lifecycle rules of each stage. Pure: callers pass the time and the Cranker's standing.
 */
import { Type, type Static } from "@sinclair/typebox";
import { isBase58OfLength } from "./encoding";
import { ServiceError } from "./errors";
import type { TinStage } from "./schemas";
import type { RouteRecord } from "./registry";
import type { OutboxEvent } from "./outbox-event";
import { Address, Amount, Hex64, Identifier, IsoTime, Nullable, Signature, StringEnum, Tin, Version, named } from "./wire-formats";

export const TIN_OPERATION_STATES = ["PENDING_VERIFICATION", "VERIFIED", "FEE_COMMITTED", "SUBMITTED", "FINALIZED", "FAILED", "REJECTED"] as const;
export const TinOperationStateSchema = StringEnum(TIN_OPERATION_STATES, { $id: "TinOperationState" });
export type TinOperationState = Static<typeof TinOperationStateSchema>;
const IntentTypeSchema = StringEnum(["create", "update"]);

/** CreateTinOperationRequest as accepted by the schema, and as the worker view repeats it. */
export const TinOperationRequestSchema = Type.Object(
	{
		operationId: Identifier,
		intentType: IntentTypeSchema,
		tin: Type.Optional(Tin),
		ownerWallet: Address,
		routeCommitment: Hex64,
		policyCommitment: Hex64,
		ownerSignature: Signature,
		issuedAt: IsoTime,
		expiresAt: IsoTime
	},
	named("TinOperationRequest")
);
export type TinOperationRequest = Static<typeof TinOperationRequestSchema>;

export const TinOperationHistoryEntrySchema = Type.Object(
	{
		status: TinOperationStateSchema,
		at: IsoTime,
		by: Type.Optional(Address),
		reason: Type.Optional(Type.String()),
		onChainChecked: Type.Optional(Type.Boolean({ description: "On the FINALIZED entry: false when no chain was configured to read the transaction" }))
	},
	named("TinOperationHistoryEntry")
);
export type TinOperationHistoryEntry = Static<typeof TinOperationHistoryEntrySchema>;

const publicOperationFields = {
	id: Type.String({ description: "top_ + 32 hex digits" }),
	operationId: Identifier,
	intentType: IntentTypeSchema,
	tin: Tin,
	status: TinOperationStateSchema,
	routeVersion: Type.Optional(Version),
	createdAt: IsoTime,
	updatedAt: IsoTime,
	failureReason: Type.Optional(Type.String())
};

export const PublicTinOperationSchema = Type.Object(publicOperationFields, named("PublicTinOperationRecord"));
export type PublicTinOperation = Static<typeof PublicTinOperationSchema>;

/** The worker view: the public fields, the submitted request, the history and who did what. */
export const TinOperationViewSchema = Type.Object(
	{
		...publicOperationFields,
		request: TinOperationRequestSchema,
		history: Type.Array(TinOperationHistoryEntrySchema),
		verifiedBy: Nullable(Address),
		feeCommittedBy: Nullable(Address),
		feeAmount: Nullable(Amount),
		submittedBy: Nullable(Address),
		transactionSignature: Nullable(Signature)
	},
	named("TinOperationRecord")
);
export type TinOperationView = Static<typeof TinOperationViewSchema>;

export interface TinOperationRecord {
	id: string;
	operationId: string;
	intentType: "create" | "update";
	/** Allocated at submission for a create; the target TIN for an update. */
	tin: string;
	status: TinOperationState;
	/** Canonical JSON digest of the request, for idempotency on operationId. */
	requestDigest: string;
	request: TinOperationRequest;
	history: TinOperationHistoryEntry[];
	verifiedBy: string | null;
	feeCommittedBy: string | null;
	feeAmount: string | null;
	submittedBy: string | null;
	transactionSignature: string | null;
	routeVersion?: number;
	failureReason?: string;
	/** Set when a finalization has begun (the route is being written); no other stage may move it then. */
	finalizing?: string;
	/** With `finalizing`: the FINALIZED entry the finalization appends, its chain evidence included. */
	finalizedEntry?: TinOperationHistoryEntry;
	createdAt: string;
	updatedAt: string;
}

/** A submitted operation as first stored: PENDING_VERIFICATION, no stage taken yet. */
export function newTinOperation(id: string, request: TinOperationRequest, tin: string, requestDigest: string, at: string): TinOperationRecord {
	return {
		id,
		operationId: request.operationId,
		intentType: request.intentType,
		tin,
		status: "PENDING_VERIFICATION",
		requestDigest,
		request,
		history: [{ status: "PENDING_VERIFICATION", at }],
		verifiedBy: null,
		feeCommittedBy: null,
		feeAmount: null,
		submittedBy: null,
		transactionSignature: null,
		createdAt: at,
		updatedAt: at
	};
}

/**
 * The route a finalization writes: the next version of the TIN's route (the first, for a create),
 * naming the operation, so that a resumed finalization sees it already written. The owner stays.
 */
export function finalizedRoute(current: RouteRecord | null, operation: TinOperationRecord, at: string): RouteRecord {
	const { request } = operation;
	return {
		id: operation.tin,
		tin: operation.tin,
		routeCommitment: request.routeCommitment,
		routeVersion: (current?.routeVersion ?? 0) + 1,
		policyCommitment: request.policyCommitment,
		ownerWallet: current?.ownerWallet ?? request.ownerWallet,
		active: true,
		updatedAt: at,
		lastOperationId: operation.id
	};
}

export function toPublicTinOperation(record: TinOperationRecord): PublicTinOperation {
	return {
		id: record.id,
		operationId: record.operationId,
		intentType: record.intentType,
		tin: record.tin,
		status: record.status,
		...(record.routeVersion !== undefined ? { routeVersion: record.routeVersion } : {}),
		createdAt: record.createdAt,
		updatedAt: record.updatedAt,
		...(record.failureReason !== undefined ? { failureReason: record.failureReason } : {})
	};
}

/** The type of the outbox event a TIN operation's status change writes. */
export const TIN_OPERATION_EVENT_TYPE = "tin_operation.status_changed";

/** The outbox event of a write from `previous` (null: new) to `next`; none when the status stays (a finalization's mark). */
export function tinOperationEvent(previous: TinOperationRecord | null, next: TinOperationRecord): OutboxEvent | undefined {
	if (previous && previous.status === next.status) return undefined;
	return { subject: next.id, type: TIN_OPERATION_EVENT_TYPE, at: next.updatedAt, data: { previousState: previous?.status ?? null, state: next.status, view: toPublicTinOperation(next) } };
}

export function toTinOperationView(record: TinOperationRecord): TinOperationView {
	return {
		...toPublicTinOperation(record),
		request: record.request,
		history: record.history,
		verifiedBy: record.verifiedBy,
		feeCommittedBy: record.feeCommittedBy,
		feeAmount: record.feeAmount,
		submittedBy: record.submittedBy,
		transactionSignature: record.transactionSignature
	};
}

/** Where each stage leads, and from which states it may be taken. */
export const STAGES: Record<TinStage, { to: TinOperationState; from: readonly TinOperationState[] }> = {
	verified: { to: "VERIFIED", from: ["PENDING_VERIFICATION"] },
	"fee-committed": { to: "FEE_COMMITTED", from: ["VERIFIED"] },
	submitted: { to: "SUBMITTED", from: ["FEE_COMMITTED"] },
	finalized: { to: "FINALIZED", from: ["SUBMITTED"] },
	failed: { to: "FAILED", from: ["PENDING_VERIFICATION", "VERIFIED", "FEE_COMMITTED", "SUBMITTED"] },
	rejected: { to: "REJECTED", from: ["PENDING_VERIFICATION", "VERIFIED"] }
};

export interface StageRequest {
	crankerPubkey: string;
	transactionSignature?: string;
	feeAmount?: string;
	reason?: string;
}

export interface CrankerStanding {
	online: boolean;
	roles: string[];
}

export interface StagePolicy {
	allowSingleCrankerTins: boolean;
	createFee: string;
	updateFee: string;
}

export type StageDecision = { kind: "replay" } | { kind: "move"; next: TinOperationRecord };

/** Marks `record` as being finalized into `finalized` (its last entry kept, so that anyone can finish it alike). */
export function markFinalizing(record: TinOperationRecord, finalized: TinOperationRecord): TinOperationRecord {
	return { ...record, finalizing: finalized.updatedAt, finalizedEntry: finalized.history[finalized.history.length - 1] };
}

/**
 * The FINALIZED operation a begun finalization makes: the same as the one its Cranker's request
 * made. A mark of an earlier version keeps no entry: its entry is rebuilt, without chain evidence.
 */
export function finishedFinalization(marked: TinOperationRecord): TinOperationRecord {
	const { finalizing, finalizedEntry, ...record } = marked;
	const entry = finalizedEntry ?? { status: "FINALIZED" as const, at: finalizing!, ...(record.submittedBy ? { by: record.submittedBy } : {}) };
	return { ...record, status: "FINALIZED", updatedAt: entry.at, history: [...record.history, entry] };
}

/** The record after a move to `to`: the changed fields, the new status and a history entry. */
export function applyStage(record: TinOperationRecord, to: TinOperationState, at: string, by?: string, changes: Partial<TinOperationRecord> = {}, reason?: string): TinOperationRecord {
	const entry = { status: to, at, ...(by ? { by } : {}), ...(reason ? { reason } : {}) };
	return { ...record, ...changes, status: to, updatedAt: at, history: [...record.history, entry] };
}

function notAllowed(message: string): ServiceError {
	return new ServiceError("CRANKER_NOT_ALLOWED", message);
}

function invalid(field: string, message: string): ServiceError {
	return new ServiceError("VALIDATION_ERROR", message, [{ type: "stage", field, message }]);
}

/**
 * Decides a stage move with SPEC §5's refusals in order: transition (409), Cranker (403: offline,
 * role, separation of duties, not the Cranker the row names), fields (422). The caller answered 404.
 */
export function decideStage(record: TinOperationRecord, stage: TinStage, request: StageRequest, standing: CrankerStanding, policy: StagePolicy, now: Date): StageDecision {
	const { to, from } = STAGES[stage];
	const by = request.crankerPubkey;
	const last = record.history[record.history.length - 1];
	// The same move sent again by the Cranker that made it changes nothing; but another transaction
	// in place of the one submitted is no repeat: answered as one, it would be sent beside the first.
	if (record.status === to && last?.by === by) {
		if ((stage === "submitted" || stage === "finalized") && request.transactionSignature !== undefined && request.transactionSignature !== record.transactionSignature)
			throw new ServiceError("INVALID_TRANSITION", "This TIN operation was submitted with another transaction", { status: record.status, stage, transactionSignature: record.transactionSignature });
		return { kind: "replay" };
	}
	if (!from.includes(record.status) || (record.finalizing !== undefined && stage !== "finalized"))
		throw new ServiceError("INVALID_TRANSITION", `Cannot move a TIN operation from ${record.status} by '${stage}'`, { status: record.status, stage });

	const has = (role: string) => standing.online && standing.roles.includes(role);
	const at = now.toISOString();
	const move = (changes: Partial<TinOperationRecord>, reason?: string): StageDecision => ({ kind: "move", next: applyStage(record, to, at, by, changes, reason) });

	switch (stage) {
		case "verified":
			if (!has("verifier")) throw notAllowed("Only an online Cranker with the verifier role can verify");
			// Verification is the check on what the owner signed: not the owner's own to give.
			if (!policy.allowSingleCrankerTins && record.request.ownerWallet === by) throw notAllowed("The owner of a TIN operation cannot verify it");
			return move({ verifiedBy: by });
		case "fee-committed": {
			if (!has("submitter")) throw notAllowed("Only an online Cranker with the submitter role can commit the fee");
			if (!policy.allowSingleCrankerTins && record.verifiedBy === by) throw notAllowed("The Cranker that verified an operation cannot also commit its fee");
			const fee = record.intentType === "create" ? policy.createFee : policy.updateFee;
			if (request.feeAmount !== fee) throw invalid("feeAmount", `feeAmount must be ${fee}, the ${record.intentType} fee`);
			return move({ feeCommittedBy: by, feeAmount: fee });
		}
		case "submitted":
			if (!has("submitter") || record.feeCommittedBy !== by) throw notAllowed("Only the Cranker that committed the fee can submit");
			if (!request.transactionSignature || !isBase58OfLength(request.transactionSignature, 64))
				throw invalid("transactionSignature", "transactionSignature (base58 of 64 bytes) is required");
			return move({ submittedBy: by, transactionSignature: request.transactionSignature });
		case "finalized":
			if (!has("submitter") || record.submittedBy !== by) throw notAllowed("Only the Cranker that submitted can finalize");
			if (request.transactionSignature !== undefined && request.transactionSignature !== record.transactionSignature)
				throw invalid("transactionSignature", "transactionSignature must equal the submitted one");
			return move({});
		case "failed":
			if (!has("verifier") && !has("submitter")) throw notAllowed("Only an online verifier or submitter can fail an operation");
			if (!request.reason) throw invalid("reason", "reason is required");
			return move({ failureReason: request.reason }, request.reason);
		case "rejected":
			if (!has("verifier")) throw notAllowed("Only an online verifier can reject an operation");
			if (!request.reason) throw invalid("reason", "reason is required");
			return move({ failureReason: request.reason }, request.reason);
	}
}
