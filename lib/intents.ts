/**
 * Payment intents: the record the mempool keeps, its two views (SPEC §2.2, §2.3) and the state
 * machine of SPEC §2.4/§3 as one table. Pure: callers pass the time and what they looked up.
 */
import { Type, type Static } from "@sinclair/typebox";
import { judgeChainEvidence, type ChainEvidence, type ChainObservation } from "./chain-evidence";
import { ServiceError, type RejectionReason } from "./errors";
import { Address, Amount, Hex64, Identifier, IsoTime, Nonce, Nullable, Signature, Slot, StringEnum, Tin, Version, named } from "./wire-formats";
import type { OutboxEvent } from "./outbox-event";

export const INTENT_STATES = ["RECEIVED", "NODE_VERIFYING", "VERIFIED", "CRANKER_LEASED", "SUBMITTED", "CONFIRMED", "REJECTED"] as const;
export const PUBLIC_STATUSES = ["pending", "canceled", "executed"] as const;
export const IntentStateSchema = StringEnum(INTENT_STATES, { $id: "IntentState", description: "Internal state of an intent" });
export const PublicStatusSchema = StringEnum(PUBLIC_STATUSES, { $id: "PublicStatus", description: "What an intent's state means to its sender" });
export type IntentState = Static<typeof IntentStateSchema>;
export type PublicStatus = Static<typeof PublicStatusSchema>;

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

/** CreateIntentRequest (SPEC §2.1) as accepted by the schema, and as the worker view repeats it. */
export const CreateIntentRequestSchema = Type.Object(
	{
		paymentId: Identifier,
		recipientTin: Tin,
		recipientRouteCommitment: Hex64,
		recipientRouteVersion: Version,
		tokenMintAddress: Address,
		senderWallet: Address,
		senderAuthorizationMessage: Type.String({ maxLength: 4096 }),
		senderAuthorizationSignature: Signature,
		senderAuthorizationNonce: Nonce,
		senderAuthorizationIssuedAt: IsoTime,
		senderAuthorizationExpiresAt: IsoTime,
		amount: Amount,
		feeLimit: Amount,
		expiresAtSlot: Slot,
		senderFundingMode: Type.String({ maxLength: 64 }),
		recipientHash: Type.Optional(Type.String({ maxLength: 64 })),
		transactionCommitment: Type.Optional(Hex64)
	},
	{ additionalProperties: false }
);
export type CreateIntentRequest = Static<typeof CreateIntentRequestSchema>;

export const LeaseSchema = Type.Object({ crankerPubkey: Address, leasedAt: IsoTime, expiresAt: IsoTime }, named("Lease"));
export type Lease = Static<typeof LeaseSchema>;

export const SubmissionSchema = Type.Object(
	{
		transactionSignature: Signature,
		submittedAt: IsoTime,
		slot: Type.Optional(Slot),
		lastValidBlockHeight: Type.Optional(Slot),
		heightAtSubmission: Type.Optional(Slot),
		slotAtSubmission: Type.Optional(Slot)
	},
	named("Submission", "lastValidBlockHeight (and slot) are the Cranker's word; heightAtSubmission and slotAtSubmission the chain's block height and slot as the Node read them when it took the report")
);
export type Submission = Static<typeof SubmissionSchema>;

export const IntentHistoryEntrySchema = Type.Object(
	{
		state: IntentStateSchema,
		at: IsoTime,
		by: Type.Optional(Type.String({ description: "The Cranker, or verifier@<node> for a verdict; absent for the Node's sweeps" })),
		reason: Type.Optional(Type.String()),
		onChainChecked: Type.Optional(Type.Boolean({ description: "On a CONFIRMED entry: false when no chain was configured to check the Cranker's word" }))
	},
	named("IntentHistoryEntry")
);
export type HistoryEntry = Static<typeof IntentHistoryEntrySchema>;

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
	/** The broker call that recorded it, so that a retry of that call is recognised (services/replay.ts). */
	intakeCall?: string | null;
	/** Verification's verdict, set by the verdict move only (the metrics count verdicts by it). */
	verdict?: "VERIFIED" | "REJECTED";
	/** How many entries HISTORY_MAX dropped from the history, after its first ones; absent while none. */
	historyOmitted?: number;
	/** How many times the lease sweep returned a lapsed lease (a Cranker's own release is not one). */
	lapsedLeases?: number;
	/**
	 * `<senderWallet>:<nonce>` while the intent holds its sender's nonce (SPEC §1: from the verdict
	 * VERIFIED on, until it is REJECTED), else null. A unique index on it is the nonce rule: one
	 * holder at a time, freed by a rejection. Every move keeps it right (applyMove).
	 */
	nonceKey?: string | null;
}

/** A record while a Cranker holds its lease. */
export type LeasedIntentRecord = IntentRecord & { lease: Lease };

const publicIntentFields = {
	id: Type.String({ description: "int_ + 32 hex digits" }),
	paymentId: Identifier,
	status: PublicStatusSchema,
	receiverStatus: IntentStateSchema,
	recipientTin: Tin,
	tokenMintAddress: Address,
	amount: Amount,
	feeLimit: Amount,
	senderWallet: Address,
	expiresAt: IsoTime,
	expiresAtSlot: Slot,
	transactionCommitment: Hex64,
	createdAt: IsoTime,
	updatedAt: IsoTime,
	transactionSignature: Type.Optional(Signature),
	rejectionReason: Type.Optional(Type.String()),
	epoch: Version
};

/** The public view (SPEC §2.2): never the signature, the nonce, the route commitment or lease data. */
export const PublicMempoolIntentSchema = Type.Object(publicIntentFields, named("PublicMempoolIntent"));
export type PublicMempoolIntent = Static<typeof PublicMempoolIntentSchema>;

/** The worker view (SPEC §2.3): the public fields, the submitted request flattened beside them, and the lease state. */
export const MempoolIntentSchema = Type.Object(
	{
		...CreateIntentRequestSchema.properties,
		...publicIntentFields,
		stateVersion: Version,
		lease: Nullable(LeaseSchema),
		submission: Nullable(SubmissionSchema),
		history: Type.Array(IntentHistoryEntrySchema),
		historyOmitted: Type.Optional(
			Type.Integer({ minimum: 1, description: "Entries left out of `history` after its first three, to keep 128 in all; absent while none were" })
		)
	},
	named("MempoolIntent")
);
export type MempoolIntent = Static<typeof MempoolIntentSchema>;

export const IntentWorkItemSchema = Type.Object({ intent: MempoolIntentSchema, leaseTtlMs: Type.Integer({ minimum: 1 }) }, named("IntentWorkItem"));
export type IntentWorkItem = Static<typeof IntentWorkItemSchema>;

/**
 * A page of GET /intent-work from the mempool to the gateway: the worker views' JSON texts, and the
 * last one's place (the next page's cursor). `cut`: the page stopped at its byte budget
 * (WORK_PAGE_BYTES) before its `limit`, and more may follow.
 */
export interface WorkPage {
	intents: string[];
	leaseTtlMs: number;
	last: { createdAt: string; id: string } | null;
	cut?: true;
}

/**
 * A page's worker views as JSON text, the lease length its items carry, its last item's place and
 * whether it was cut short. A mempool of an earlier version (a rolling update runs both) answers
 * the items whole.
 */
export function workPageViews(page: WorkPage | IntentWorkItem[]): { views: string[]; leaseTtlMs: number | null; last: WorkPage["last"]; cut: boolean } {
	if (!Array.isArray(page)) return { views: page.intents, leaseTtlMs: page.leaseTtlMs, last: page.last, cut: page.cut === true };
	const last = page[page.length - 1]?.intent;
	return { views: page.map(item => JSON.stringify(item.intent)), leaseTtlMs: page[0]?.leaseTtlMs ?? null, last: last ? { createdAt: last.createdAt, id: last.id } : null, cut: false };
}

/** How many items of these `sizes`, from the first, fit in `budget`: at least one, so that a page always moves on. */
export function fittingCount(sizes: readonly number[], budget: number): number {
	let used = 0;
	for (let i = 0; i < sizes.length; i++) {
		used += sizes[i];
		if (used > budget) return Math.max(i, 1);
	}
	return sizes.length;
}

/**
 * The text around a worker view that makes it a GET /intent-work item (IntentWorkItemSchema), in
 * the shape of json-text's ItemWrapper; not imported from there, since the SDK's declarations
 * include this module and must not reach Node's Buffer.
 */
export function workItemWrapper(leaseTtlMs: number): { before: string; after: string } {
	return { before: '{"intent":', after: `,"leaseTtlMs":${leaseTtlMs}}` };
}

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

/** The type of the outbox event an intent's state change writes (webhooks and SSE streams carry it). */
export const INTENT_EVENT_TYPE = "intent.status_changed";

/** What an intent's event carries: the previous and new state, and the public view after the change. */
export interface IntentEventData {
	[key: string]: unknown;
	previousState: IntentState | null;
	state: IntentState;
	view: PublicMempoolIntent;
}

/** States whose record is not verified yet: what it says is the sender's claim, maybe a forgery's. */
export const UNVERIFIED_STATES: ReadonlySet<IntentState> = new Set(["RECEIVED", "NODE_VERIFYING"]);

/**
 * The outbox event of a write from `previous` (null: the record is new) to `next`; none when the
 * state stays (a lease renewal, an archiving): events announce state changes. None before the
 * verdict either: an unverified record may be a forgery, removed once its signature fails, and
 * webhooks and streams must never carry what nobody signed. An intent's first event is its verdict.
 */
export function intentEvent(previous: IntentRecord | null, next: IntentRecord): OutboxEvent | undefined {
	if ((previous && previous.state === next.state) || UNVERIFIED_STATES.has(next.state)) return undefined;
	const data: IntentEventData = { previousState: previous?.state ?? null, state: next.state, view: toPublicView(next) };
	return { subject: next.id, type: INTENT_EVENT_TYPE, at: next.updatedAt, data };
}

const REQUEST_FIELDS = Object.keys(CreateIntentRequestSchema.properties) as (keyof CreateIntentRequest)[];

/**
 * The worker view: the whole submitted request flattened beside the public fields. Copied field
 * by field: spreading a parsed document costs V8's generic copy, about 20 µs a record on the
 * development machine, five times the JSON.parse of it, and a work page has up to 500.
 */
export function toWorkerView(record: IntentRecord): MempoolIntent {
	const view: Record<string, unknown> = {};
	for (const field of REQUEST_FIELDS) if (record.request[field] !== undefined) view[field] = record.request[field];
	const publicView = toPublicView(record);
	for (const field in publicView) view[field] = publicView[field as keyof PublicMempoolIntent];
	view.stateVersion = record.stateVersion;
	view.lease = record.lease;
	view.submission = record.submission;
	view.history = record.history;
	if (record.historyOmitted) view.historyOmitted = record.historyOmitted;
	return view as MempoolIntent;
}

// ---------------------------------------------------------------------------------------------
// State machine

export type Actor = "node" | "cranker";

/** What makes a move: the node's verification and sweeps, or a Cranker's status update. */
export type Trigger =
	| "claim"
	| "verdict"
	| "verifier-timeout"
	| "expiry"
	| "route-replaced"
	| "lease-lapse"
	| "lease"
	| "renew"
	| "release"
	| "submit"
	| "confirm"
	| "drop"
	| "refuse";

export interface Transition {
	from: IntentState;
	to: IntentState;
	by: Actor;
	on: Trigger;
	rule: string;
}

/** Every allowed move, who makes it and why. Anything not listed is INVALID_TRANSITION. */
export const TRANSITIONS: readonly Transition[] = [
	{ from: "RECEIVED", to: "NODE_VERIFYING", by: "node", on: "claim", rule: "a verifier picks it up" },
	{ from: "NODE_VERIFYING", to: "VERIFIED", by: "node", on: "verdict", rule: "the authorization verified and its nonce was free" },
	{ from: "NODE_VERIFYING", to: "REJECTED", by: "node", on: "verdict", rule: "verification refused it (rejectionReason)" },
	{ from: "NODE_VERIFYING", to: "RECEIVED", by: "node", on: "verifier-timeout", rule: "no verifier answered in time; a sweep retries" },
	{ from: "VERIFIED", to: "REJECTED", by: "node", on: "expiry", rule: "expired before a lease" },
	{ from: "CRANKER_LEASED", to: "REJECTED", by: "node", on: "expiry", rule: "expired before submission" },
	{ from: "CRANKER_LEASED", to: "VERIFIED", by: "node", on: "lease-lapse", rule: "the lease expired without renewal" },
	{ from: "CRANKER_LEASED", to: "REJECTED", by: "node", on: "route-replaced", rule: "a newer route of the recipient's TIN went live after the sender signed: the signed route can no longer be paid" },
	{ from: "VERIFIED", to: "CRANKER_LEASED", by: "cranker", on: "lease", rule: "an online settlement Cranker leases it" },
	{ from: "CRANKER_LEASED", to: "CRANKER_LEASED", by: "cranker", on: "renew", rule: "the holder renews the lease" },
	{ from: "CRANKER_LEASED", to: "VERIFIED", by: "cranker", on: "release", rule: "the holder releases it" },
	{ from: "CRANKER_LEASED", to: "SUBMITTED", by: "cranker", on: "submit", rule: "the holder signed the transaction and is about to send it" },
	{ from: "SUBMITTED", to: "CONFIRMED", by: "cranker", on: "confirm", rule: "the chain shows this settlement landed" },
	{ from: "SUBMITTED", to: "VERIFIED", by: "cranker", on: "drop", rule: "the chain shows the transaction can no longer land" },
	{ from: "CRANKER_LEASED", to: "REJECTED", by: "cranker", on: "refuse", rule: "the holder refuses it" },
	{ from: "SUBMITTED", to: "REJECTED", by: "cranker", on: "refuse", rule: "the chain shows the transaction failed or can no longer land" }
];

/** States no move leaves: what an epoch close archives. */
export const TERMINAL_STATES: readonly IntentState[] = INTENT_STATES.filter(state => !TRANSITIONS.some(t => t.from === state));

/**
 * States the node expires an intent from: verified, and nothing sent on chain yet. Never before its
 * verdict: an unverified body may be anyone's forgery, and only a signer holds a paymentId (SPEC
 * §1), so one that expired waiting is left to its verification, which refuses it EXPIRED when it is
 * signed and removes it when it is not.
 */
export const EXPIRABLE_STATES: readonly IntentState[] = [...new Set(TRANSITIONS.filter(t => t.on === "expiry").map(t => t.from))];

type MoveChanges = Partial<Pick<IntentRecord, "lease" | "submission" | "rejectionReason" | "rejectionDetail">> & { by?: string; reason?: string; onChainChecked?: boolean };

/** The states in which an intent holds its sender's nonce: verified, and not (yet) rejected. */
const NONCE_HOLDING_STATES: ReadonlySet<IntentState> = new Set(["VERIFIED", "CRANKER_LEASED", "SUBMITTED", "CONFIRMED"]);

function nonceKeyOf(request: Pick<CreateIntentRequest, "senderWallet" | "senderAuthorizationNonce">): string {
	return `${request.senderWallet}:${request.senderAuthorizationNonce}`;
}

/**
 * Applies a move the table allows for `on` (INVALID_TRANSITION otherwise): the next record, with
 * stateVersion +1 (except a renewal), a history entry, and its hold on the sender's nonce.
 */
export function applyMove(record: IntentRecord, on: Trigger, to: IntentState, at: string, changes: MoveChanges = {}): IntentRecord {
	if (!TRANSITIONS.some(t => t.from === record.state && t.to === to && t.on === on))
		throw new ServiceError("INVALID_TRANSITION", `An intent cannot move from ${record.state} to ${to} by ${on}`, { from: record.state, to });
	const { by, reason, onChainChecked, ...fields } = changes;
	const next: IntentRecord = { ...record, ...fields, state: to, updatedAt: at };
	next.leaseExpiresAt = next.lease?.expiresAt ?? null;
	next.nonceKey = NONCE_HOLDING_STATES.has(to) ? nonceKeyOf(record.request) : null;
	if (on !== "renew") {
		next.stateVersion = record.stateVersion + 1;
		const entry: HistoryEntry = { state: to, at };
		if (by) entry.by = by;
		if (reason) entry.reason = reason;
		if (onChainChecked !== undefined) entry.onChainChecked = onChainChecked;
		next.history = [...record.history, entry];
		if (next.history.length > HISTORY_MAX) {
			const dropped = next.history.splice(HISTORY_HEAD, next.history.length - HISTORY_MAX).length;
			next.historyOmitted = (record.historyOmitted ?? 0) + dropped;
		}
	}
	return next;
}

/**
 * The most entries a history keeps: its first HISTORY_HEAD (for most intents the intake: received,
 * claimed, verdict) and the latest. Leases and releases can repeat without end (Crankers that
 * cannot pay, a chain outage, a Cranker that means harm), and every write and every worker view
 * carries the whole history. An entry's reason is at most 512 characters, up to about 3 KB as JSON
 * (control characters escaped), so a view stays under about 0.4 MB, and under 0.5 MB as the bus
 * escapes it again: within NATS's 1 MB messages.
 */
export const HISTORY_MAX = 128;
const HISTORY_HEAD = 3;

/** The move from `current` to `next` as stored at `at`: its updatedAt, and the history entry it added. */
export function restamped(current: IntentRecord, next: IntentRecord, at: string): IntentRecord {
	if (next.updatedAt === current.updatedAt) return next;
	// Every move but a renewal adds an entry (stateVersion + 1), also once a full history drops its oldest.
	const added = next.stateVersion !== current.stateVersion;
	return { ...next, updatedAt: at, history: added ? [...next.history.slice(0, -1), { ...next.history[next.history.length - 1], at }] : next.history };
}

export function isExpired(record: IntentRecord, nowMs: number, latestSlot: number | null): boolean {
	return Date.parse(record.expiresAt) <= nowMs || (latestSlot !== null && record.expiresAtSlot <= latestSlot);
}

/** The node's expiry move (SPEC §2.4): REJECTED with reason EXPIRED. */
export function expire(record: IntentRecord, at: string): IntentRecord {
	return applyMove(record, "expiry", "REJECTED", at, { reason: "EXPIRED", rejectionReason: "EXPIRED", rejectionDetail: "the authorization expired before submission" });
}

/**
 * The node's refusal of a leased intent whose signed route a newer version of its TIN replaced:
 * route versions only grow, so no Cranker can ever be authorized to pay it, and a release would
 * only have the next Cranker lease it and fail again until it expires. Null while the signed
 * version is still the live one (or newer: a registry behind), or the intent is not leased.
 */
export function rejectReplacedRoute(record: IntentRecord, liveRouteVersion: number, at: string): IntentRecord | null {
	const signed = record.request.recipientRouteVersion;
	if (record.state !== "CRANKER_LEASED" || liveRouteVersion <= signed) return null;
	return applyMove(record, "route-replaced", "REJECTED", at, {
		reason: "ROUTE_MISMATCH",
		rejectionReason: "ROUTE_MISMATCH",
		rejectionDetail: `the recipient's route version ${signed} was replaced by version ${liveRouteVersion}`
	});
}

// ---------------------------------------------------------------------------------------------
// Lease rules: Cranker status updates (PATCH /intents/{id}/status) and payout authorizations

export interface UpdateStatusRequest {
	status: IntentState;
	crankerPubkey: string;
	expectedVersion: number;
	transactionSignature?: string;
	slot?: number;
	lastValidBlockHeight?: number;
	reason?: string;
}

/** A move that the chain must prove first (SPEC §2.4), with what it must prove about which submission. */
export interface PendingChainCheck {
	need: ChainEvidence;
	submission: Submission;
}

export type StatusDecision =
	| { kind: "replay" }
	/** The intent expired before SUBMITTED: the node's expiry is stored, then the update is refused. */
	| { kind: "expire"; next: IntentRecord }
	| { kind: "move"; next: IntentRecord; chainCheck?: PendingChainCheck };

export interface StatusContext {
	now: Date;
	leaseTtlMs: number;
	/** Whether `crankerPubkey` is an online Cranker with the `settlement` role. */
	crankerAllowed: boolean;
	/** Latest slot observed on chain; null when none has been. */
	latestSlot: number | null;
}

/** Whether a Cranker may move a lease, or have it authorized: online (and allowed, CRANKER_OPERATORS) with the settlement role. */
export function maySettle(standing: { online: boolean; roles: readonly string[] }): boolean {
	return standing.online && standing.roles.includes("settlement");
}

/**
 * Decides a Cranker's status update. First the node's own rule (an expired intent is REJECTED),
 * then the refusals in SPEC §2.4's order: version, transition, Cranker, lease holder, lease expiry,
 * missing fields. What the chain must show comes last, read by the caller. The caller answered 404.
 */
export function decideStatusUpdate(record: IntentRecord, request: UpdateStatusRequest, context: StatusContext): StatusDecision {
	const nowMs = context.now.getTime();
	const at = context.now.toISOString();
	if (EXPIRABLE_STATES.includes(record.state) && isExpired(record, nowMs, context.latestSlot)) return { kind: "expire", next: expire(record, at) };
	if (isReplay(record, request)) return { kind: "replay" };

	if (request.expectedVersion !== record.stateVersion)
		throw new ServiceError("VERSION_CONFLICT", `expectedVersion ${request.expectedVersion} is not the current stateVersion ${record.stateVersion}`, {
			stateVersion: record.stateVersion,
			state: record.state
		});
	const { state: from } = record;
	const to = request.status;
	const transition = TRANSITIONS.find(t => t.from === from && t.to === to && t.by === "cranker");
	if (!transition) throw new ServiceError("INVALID_TRANSITION", `A Cranker cannot move an intent from ${from} to ${to}`, { from, to });
	if (!context.crankerAllowed)
		throw new ServiceError("CRANKER_NOT_ALLOWED", "The Cranker is not online with the settlement role", { crankerPubkey: request.crankerPubkey });

	const isHolder = record.lease?.crankerPubkey === request.crankerPubkey;
	const leaseLive = record.lease !== null && Date.parse(record.lease.expiresAt) > nowMs;
	if (from === "CRANKER_LEASED") {
		if (!isHolder) throw new ServiceError("NOT_LEASE_HOLDER", "Another Cranker holds the lease");
		if (!leaseLive) throw new ServiceError("LEASE_EXPIRED", "The lease has expired", { leaseExpiresAt: record.lease?.expiresAt });
	} else if (from === "SUBMITTED" && !isHolder && (leaseLive || transition.on === "refuse")) {
		// Once the holder's lease has lapsed, any settlement Cranker may finish it as the chain shows:
		// confirm it, or return it for another try. Cancelling it for good stays the holder's call.
		throw new ServiceError("NOT_LEASE_HOLDER", leaseLive ? "Another Cranker holds the lease" : "Only the lease holder may reject a submitted intent");
	}

	const by = request.crankerPubkey;
	const move = (changes: MoveChanges, need?: ChainEvidence): StatusDecision => {
		const next = applyMove(record, transition.on, to, at, { by, ...changes });
		return need ? { kind: "move", next, chainCheck: { need, submission: record.submission! } } : { kind: "move", next };
	};
	const lease = (): Lease => ({ crankerPubkey: by, leasedAt: record.lease && isHolder ? record.lease.leasedAt : at, expiresAt: new Date(nowMs + context.leaseTtlMs).toISOString() });
	switch (transition.on) {
		case "lease":
		case "renew":
			return move({ lease: lease() });
		case "release":
			return move({ lease: null, reason: request.reason ?? "released" });
		case "submit": {
			const submission: Submission = {
				transactionSignature: required(request, "transactionSignature"),
				submittedAt: at,
				...(request.slot !== undefined ? { slot: request.slot } : {}),
				lastValidBlockHeight: required(request, "lastValidBlockHeight")
			};
			return move({ submission });
		}
		case "confirm": {
			if (required(request, "transactionSignature") !== record.submission?.transactionSignature)
				throw new ServiceError("VALIDATION_ERROR", "transactionSignature differs from the submitted one", [
					{ type: "mismatch", field: "transactionSignature", message: "must equal the submitted transactionSignature" }
				]);
			const submission: Submission = { ...record.submission, ...(request.slot !== undefined ? { slot: request.slot } : {}) };
			return move({ submission }, "landed");
		}
		case "drop":
			return move({ lease: null, submission: null, reason: required(request, "reason") }, "cannot-land");
		default: {
			// "refuse", from CRANKER_LEASED (nothing sent) or from SUBMITTED (the chain must agree: it frees the nonce).
			const reason = required(request, "reason");
			return move({ reason, rejectionReason: reason }, from === "SUBMITTED" ? "failed-or-cannot-land" : undefined);
		}
	}
}

/**
 * The last block height at which a submission can land. The Cranker's lastValidBlockHeight is only
 * a claim, and a low one would let a live transaction pass for dead: it never counts for less than
 * a blockhash fetched when the Node took the report could live (`blockhashLifetimeBlocks` past
 * the height it read then).
 */
export function lastLandingHeight(submission: Submission, blockhashLifetimeBlocks: number): number | undefined {
	const { lastValidBlockHeight, heightAtSubmission } = submission;
	if (lastValidBlockHeight === undefined || heightAtSubmission === undefined) return lastValidBlockHeight;
	return Math.max(lastValidBlockHeight, heightAtSubmission + blockhashLifetimeBlocks);
}

/**
 * How far before the report a Cranker's `slot` is believed: a settlement it finds already landed
 * is at most as old as its intent's validity (24 h) and the hour its search looks back before the
 * intent was signed, about 225,000 slots of 400 ms. Further back, a lease holder's made-up slot 0
 * would keep the intent SUBMITTED for good behind any endpoint without the whole history.
 */
const REPORTED_SLOT_REACH = 250_000;

/**
 * A slot at or before the first at which the submission could land, for telling a transaction that
 * never landed from one a pruned ledger forgot: a blockhash lifetime before the Node's slot at the
 * report (a Cranker may report again a transaction it signed, and sent, before), or the slot the
 * Cranker names (that of a settlement it found landed) if that is lower, down to
 * REPORTED_SLOT_REACH before. Records stored before the Node read the slot have the block height
 * read then, which is never above the slot.
 */
export function earliestLandingSlot(submission: Submission, blockhashLifetimeBlocks: number): number | undefined {
	const read = submission.slotAtSubmission ?? submission.heightAtSubmission;
	if (read === undefined) return undefined;
	const reported = Math.max(submission.slot ?? Infinity, read - REPORTED_SLOT_REACH);
	return Math.max(0, Math.min(read - blockhashLifetimeBlocks, reported));
}

/**
 * A SUBMITTED record with the block height and slot the Node read when it took the report. The
 * height is the highest of its RPC endpoints' (`heights`), which gives the latest last landing
 * height; the slot the lowest (`slots`), which gives the earliest landing slot. Endpoints more than a
 * blockhash lifetime apart in either are not believed (503): the highest height would be one
 * endpoint's word alone, and one made up high would keep the submission "live", the intent stuck,
 * for good; so would a slot made up low, which no endpoint's history would reach back to. A
 * claimed lastValidBlockHeight beyond any blockhash fetched by then is refused (422) for the same
 * reason.
 */
export function withSubmissionReading(next: IntentRecord, { heights, slots }: { heights: readonly number[]; slots: readonly number[] }, blockhashLifetimeBlocks: number): IntentRecord {
	const heightAtSubmission = Math.max(...heights);
	if (![...heights, ...slots].every(Number.isSafeInteger)) throw new ServiceError("CHAIN_UNAVAILABLE", "An RPC endpoint of SOLANA_RPC_URL answered no block height or slot", { reason: "RPC_INVALID_ANSWER" });
	if (heightAtSubmission - Math.min(...heights) > blockhashLifetimeBlocks)
		throw new ServiceError("CHAIN_UNAVAILABLE", "The RPC endpoints of SOLANA_RPC_URL disagree on the block height by more than a blockhash lifetime", { reason: "RPC_DISAGREEMENT", heights });
	if (Math.max(...slots) - Math.min(...slots) > blockhashLifetimeBlocks)
		throw new ServiceError("CHAIN_UNAVAILABLE", "The RPC endpoints of SOLANA_RPC_URL disagree on the slot by more than a blockhash lifetime", { reason: "RPC_DISAGREEMENT", slots });
	const submission = next.submission!;
	const latest = heightAtSubmission + blockhashLifetimeBlocks;
	if (submission.lastValidBlockHeight !== undefined && submission.lastValidBlockHeight > latest)
		throw new ServiceError("VALIDATION_ERROR", `lastValidBlockHeight ${submission.lastValidBlockHeight} is beyond any blockhash valid now (at most ${latest})`, [
			{ type: "lastValidBlockHeight", field: "lastValidBlockHeight", message: `The 'lastValidBlockHeight' field must be at most ${latest}.`, actual: submission.lastValidBlockHeight }
		]);
	return { ...next, submission: { ...submission, heightAtSubmission, slotAtSubmission: Math.min(...slots) } };
}

/** The move once the chain has been read (each RPC endpoint's observation; `null`: no chain configured); throws what the chain refutes. */
export function withChainEvidence(decision: { next: IntentRecord; chainCheck: PendingChainCheck }, observations: readonly ChainObservation[] | null, blockhashLifetimeBlocks: number): IntentRecord {
	const { need, submission } = decision.chainCheck;
	const onChainChecked = judgeChainEvidence(need, observations, lastLandingHeight(submission, blockhashLifetimeBlocks), earliestLandingSlot(submission, blockhashLifetimeBlocks));
	if (decision.next.state !== "CONFIRMED") return decision.next;
	const history = [...decision.next.history];
	history[history.length - 1] = { ...history[history.length - 1], onChainChecked };
	return { ...decision.next, history };
}

function required<F extends "transactionSignature" | "reason" | "lastValidBlockHeight">(request: UpdateStatusRequest, field: F): NonNullable<UpdateStatusRequest[F]> {
	const value = request[field];
	if (value === undefined)
		throw new ServiceError("VALIDATION_ERROR", `${field} is required for a move to ${request.status}`, [
			{ type: "required", field, message: `The '${field}' field is required.` }
		]);
	return value as NonNullable<UpdateStatusRequest[F]>;
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

/**
 * The lease a payout authorization is issued under (SPEC §2.5), with the refusals in order: not
 * leased (409), another holder (403), lease lapsed (409), intent expired (422).
 */
export function leaseForPayout(record: IntentRecord, crankerPubkey: string, nowMs: number, latestSlot: number | null): Lease {
	const { lease } = record;
	if (record.state !== "CRANKER_LEASED" || !lease) throw new ServiceError("INVALID_TRANSITION", `The intent is ${record.state}, not CRANKER_LEASED`);
	if (lease.crankerPubkey !== crankerPubkey) throw new ServiceError("NOT_LEASE_HOLDER", "Another Cranker holds the lease");
	if (Date.parse(lease.expiresAt) <= nowMs) throw new ServiceError("LEASE_EXPIRED", "The lease has expired");
	if (isExpired(record, nowMs, latestSlot)) throw new ServiceError("EVIDENCE_INCONSISTENT", "The intent has expired", { reason: "EXPIRED" });
	return lease;
}

/**
 * A record an earlier version's expiry sweep moved to REJECTED before any verdict (RECEIVED or
 * NODE_VERIFYING expired): what it holds may be a forgery's, which no verification will now remove.
 */
export function expiredUnverified(record: IntentRecord): boolean {
	const [before, last] = record.history.slice(-2);
	return record.state === "REJECTED" && record.verdict === undefined && last?.reason === "EXPIRED" && !last.by && before !== undefined && UNVERIFIED_STATES.has(before.state);
}

/** True when verification refused the intent (as opposed to a later expiry or a Cranker's refusal). */
export function rejectedAtVerification(record: IntentRecord): boolean {
	return record.state === "REJECTED" && record.history[record.history.length - 2]?.state === "NODE_VERIFYING";
}
