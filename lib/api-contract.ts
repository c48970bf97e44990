/**
 * What each route of the gateway answers, by the action behind it: a summary, every success
 * answer with the schema its builder is typed with, and the error types the action itself can
 * raise. The gateway adds the errors of its own checks (body, access, rate, readiness) and joins
 * this to its route tables for GET /openapi.json (services/api.service.ts).
 */
import { Type, type TSchema } from "@sinclair/typebox";
import {
	CrankerHeartbeatAnswerSchema,
	EpochCloseResultSchema,
	EpochStatusSchema,
	LivenessSchema,
	MempoolStatusSchema,
	MetricsSchema,
	NetworkOverviewSchema,
	OpenApiDocumentSchema,
	ReadinessSchema,
	SettlementNetworkSchema,
	ThresholdAccessGrantSchema,
	WakeResultSchema
} from "./answers";
import type { ErrorType } from "./errors";
import { IntentWorkItemSchema, MempoolIntentSchema, PublicMempoolIntentSchema } from "./intents";
import type { Answer } from "./openapi";
import { PayoutAuthorizationAnswerSchema } from "./payout";
import { RegistryRouteSchema } from "./registry";
import { PublicTinOperationSchema, TinOperationViewSchema } from "./tin-operations";
import { CreatedWebhookSubscriptionSchema, WebhookSubscriptionSchema } from "./webhooks";

export interface RouteContract {
	tag: "health" | "intents" | "crankers" | "tin-operations" | "epochs" | "observation" | "webhooks";
	summary: string;
	description?: string;
	answers: Record<number, Answer>;
	/** The refusals of the action (and of what it calls); the gateway's own are added to these. */
	errors: readonly ErrorType[];
	/** Credentials, when they are not those of the route's access (lib/openapi.ts). */
	security?: Record<string, string[]>[];
}

const json = (description: string, schema: TSchema): Answer => ({ description, content: { "application/json": schema } });
const ok = (schema: TSchema, description = "OK") => ({ 200: json(description, schema) });

const TIN_STAGE_ERRORS: readonly ErrorType[] = ["NOT_FOUND", "INVALID_TRANSITION", "CRANKER_NOT_ALLOWED"];
const tinStage = (summary: string, description: string, extra: readonly ErrorType[] = []): RouteContract => ({
	tag: "tin-operations",
	summary,
	description: `${description} The same move sent again by the Cranker that made it answers 200 and changes nothing.`,
	answers: ok(TinOperationViewSchema),
	errors: [...TIN_STAGE_ERRORS, ...extra]
});

export const TAGS: { name: RouteContract["tag"]; description: string }[] = [
	{ name: "health", description: "Probes: neither rate-limited nor authenticated" },
	{ name: "intents", description: "Payment intents, their Cranker moves and payout authorizations" },
	{ name: "crankers", description: "Cranker admission" },
	{ name: "tin-operations", description: "TIN operations and the registry" },
	{ name: "epochs", description: "Epochs and their Merkle roots" },
	{ name: "observation", description: "Status, metrics, threshold access and this document" },
	{ name: "webhooks", description: "Subscriptions to state changes, delivered per Standard Webhooks (docs/webhooks.md)" }
];

export const ROUTE_CONTRACTS: Record<string, RouteContract> = {
	// Answered by the gateway itself, without an action.
	"api.live": {
		tag: "health",
		summary: "Liveness probe",
		description: "Live while the process runs; 503 once its bus client gave up for good (its credentials refused): only a restart can recover.",
		answers: ok(LivenessSchema, "The process is live"),
		errors: ["NOT_READY"]
	},
	"api.ready": {
		tag: "health",
		summary: "Readiness probe",
		description: "Ready once every local service has started; 503 while starting, while the bus connection is down, and from SIGTERM on.",
		answers: ok(ReadinessSchema, "Ready to serve"),
		errors: ["NOT_READY"]
	},

	"receiver.submit": {
		tag: "intents",
		summary: "Submit a signed payment intent",
		description: "Verifies and records the intent. A replay of the same body answers 200 with the current record. Another body under a paymentId held by a body not verified yet (taken while no verifier answered): a signed one has that holder verified at once, and is answered 201 (the holder was a forgery, now removed) or 409; 503 NOT_READY (retry) while the holder cannot be verified.",
		answers: {
			200: json("The same body again: the current record", PublicMempoolIntentSchema),
			201: {
				...json("Recorded and verified", PublicMempoolIntentSchema),
				headers: { Location: { description: "/intents/{id} of the new intent", schema: Type.String() } }
			},
			202: json("Recorded, not yet verified (no verifier answered within VERIFY_TIMEOUT_MS); verified later", PublicMempoolIntentSchema)
		},
		errors: ["INVALID_MESSAGE", "INVALID_SIGNATURE", "EXPIRED", "UNSUPPORTED_FUNDING_MODE", "UNKNOWN_TIN", "ROUTE_MISMATCH", "NONCE_REUSED", "IDEMPOTENCY_CONFLICT"]
	},
	"mempool.view": {
		tag: "intents",
		summary: "Read a payment intent",
		description: "The public view; the worker view with a valid x-api-key. Archived intents stay readable.",
		answers: ok(Type.Union([PublicMempoolIntentSchema, MempoolIntentSchema]), "The public view, or the worker view"),
		errors: ["NOT_FOUND"]
	},
	"mempool.list": { tag: "intents", summary: "List live intents", description: "Newest first, by internal state or public status.", answers: ok(Type.Array(PublicMempoolIntentSchema)), errors: [] },
	"api.intentWork": {
		tag: "intents",
		summary: "List intents a settlement Cranker can lease",
		description: "VERIFIED intents that have not expired, oldest first.",
		answers: ok(Type.Array(IntentWorkItemSchema)),
		errors: []
	},
	"api.intentEvents": {
		tag: "intents",
		summary: "Follow an intent's status (server-sent events)",
		description:
			"An `event: status` with the intent's public view (PublicMempoolIntent) as `data`, first for its current state, then for each change; `id` is the change's sequence number, which `Last-Event-ID` resumes after, on any replica. The stream closes after a terminal state. A comment line every EVENT_HEARTBEAT_MS (15 s) keeps proxies from closing it. Streams per client IP and per gateway are limited (429).",
		answers: {
			200: { description: "The event stream", content: { "text/event-stream": Type.String({ description: "`id: <seq>`, `event: status`, `data: <PublicMempoolIntent JSON>`" }) } },
			204: { description: "Resumed after the intent's terminal change: nothing will follow (an EventSource stops reconnecting)" }
		},
		errors: ["NOT_FOUND"]
	},
	"api.events": {
		tag: "intents",
		summary: "Follow every intent and TIN operation change (server-sent events)",
		description:
			"One event per state change, `event:` its type (`intent.status_changed` or `tin_operation.status_changed`), `data:` `{ seq, type, subject, at, previousState, state, view }`. From now, or after `Last-Event-ID` (`<intents seq>-<tin_operations seq>`, as sent in `id`). `types` and `states` (comma-separated) filter. A Cranker follows `types=intent.status_changed&states=VERIFIED` to learn of new work without polling.",
		answers: { 200: { description: "The event stream", content: { "text/event-stream": Type.String({ description: "`id: <intents>-<tin_operations>`, `event: <type>`, `data: <event JSON>`" }) } } },
		errors: []
	},
	"mempool.updateStatus": {
		tag: "intents",
		summary: "Move an intent (a Cranker's status update)",
		description: "Lease, renew, release, submit, confirm, drop or reject; a repeat of a successful update answers 200 with no second move.",
		answers: ok(MempoolIntentSchema, "The intent after the move"),
		errors: ["NOT_FOUND", "VERSION_CONFLICT", "INVALID_TRANSITION", "CRANKER_NOT_ALLOWED", "NOT_LEASE_HOLDER", "LEASE_EXPIRED", "EVIDENCE_INCONSISTENT", "NOT_ON_CHAIN", "SUBMISSION_LIVE", "SETTLEMENT_MISMATCH", "CHAIN_UNAVAILABLE"]
	},
	"payouts.authorize": {
		tag: "intents",
		summary: "Obtain the payout authorization of a leased intent",
		description: "The same authorization again while it is valid; a fresh one (same payoutNullifier) once it has expired.",
		answers: ok(PayoutAuthorizationAnswerSchema),
		errors: ["NOT_FOUND", "INVALID_TRANSITION", "NOT_LEASE_HOLDER", "LEASE_EXPIRED", "CRANKER_NOT_ALLOWED", "EVIDENCE_INCONSISTENT", "VERSION_CONFLICT"]
	},
	"receiver.wake": {
		tag: "intents",
		summary: "Run the verification sweep now",
		answers: ok(WakeResultSchema),
		errors: ["VERIFIER_UNAVAILABLE"]
	},

	"crankers.heartbeat": {
		tag: "crankers",
		summary: "Send a Cranker's signed heartbeat",
		description: "A Cranker is online while its last heartbeat is younger than CRANKER_TTL_MS.",
		answers: ok(CrankerHeartbeatAnswerSchema),
		errors: ["INVALID_SIGNATURE", "CRANKER_NOT_ALLOWED", "STALE_HEARTBEAT"]
	},

	"tin.getRoute": { tag: "tin-operations", summary: "Resolve a TIN to its active route", answers: ok(RegistryRouteSchema), errors: ["NOT_FOUND"] },
	"tin.submitOperation": {
		tag: "tin-operations",
		summary: "Submit a signed TIN create or update",
		answers: {
			200: json("The same body again: the stored record", PublicTinOperationSchema),
			201: json("Recorded, PENDING_VERIFICATION", PublicTinOperationSchema)
		},
		errors: ["INVALID_SIGNATURE", "INVALID_MESSAGE", "EXPIRED", "UNKNOWN_TIN", "NOT_OWNER", "IDEMPOTENCY_CONFLICT", "LIMIT_REACHED"]
	},
	"tin.listOperations": { tag: "tin-operations", summary: "List TIN operations", description: "Newest first.", answers: ok(Type.Array(PublicTinOperationSchema)), errors: [] },
	"tin.getOperation": { tag: "tin-operations", summary: "Read a TIN operation", answers: ok(PublicTinOperationSchema), errors: ["NOT_FOUND"] },
	"tin.verificationWork": { tag: "tin-operations", summary: "List operations waiting for verification", answers: ok(Type.Array(TinOperationViewSchema)), errors: [] },
	"tin.feeWork": { tag: "tin-operations", summary: "List verified operations waiting for their fee", answers: ok(Type.Array(TinOperationViewSchema)), errors: [] },
	"tin.registryWork": { tag: "tin-operations", summary: "List operations waiting for their registry submission", answers: ok(Type.Array(TinOperationViewSchema)), errors: [] },
	"tin.verified": tinStage("Mark an operation verified", "By an online verifier Cranker, not the operation's owner."),
	"tin.feeCommitted": tinStage("Commit an operation's fee", "By an online submitter, not the Cranker that verified it. An update already superseded (see finalized) ends FAILED (SUPERSEDED) here, answered 409 INVALID_TRANSITION."),
	"tin.submitted": tinStage("Report an operation's registry submission", "By the Cranker that committed the fee."),
	"tin.finalized": tinStage("Finalize an operation and activate its route", "By the Cranker that submitted; with a chain, the Node reads the transaction first. An update its owner signed before the one that set the TIN's newest route ends FAILED (SUPERSEDED), answered 409 INVALID_TRANSITION.", [
		"NOT_ON_CHAIN",
		"SETTLEMENT_MISMATCH",
		"CHAIN_UNAVAILABLE"
	]),
	"tin.failed": tinStage("Fail an operation", "By an online verifier or submitter."),
	"tin.rejected": tinStage("Reject an operation", "By an online verifier."),

	"epochs.status": { tag: "epochs", summary: "Status of the open epoch", answers: ok(EpochStatusSchema), errors: [] },
	"epochs.close": {
		tag: "epochs",
		summary: "Close the open epoch",
		description: "Archives its terminal intents, records the Merkle root of the executed ones and opens the next epoch. With `epoch`, closes that epoch only (409 unless it is the open one) and answers its result once closed: the safe retry of a close that answered 503 while it went on.",
		answers: ok(EpochCloseResultSchema),
		errors: ["INVALID_TRANSITION", "NOT_READY"]
	},

	"network.status": { tag: "observation", summary: "Status of the mempool", answers: ok(MempoolStatusSchema), errors: [] },
	"network.metrics": {
		tag: "observation",
		summary: "Metrics",
		description:
			"JSON by default; Prometheus text with format=prometheus, or with accept: text/plain and no format. With METRICS_API_KEY set, the Prometheus text takes `Authorization: Bearer <METRICS_API_KEY>` (401 without it, 403 with another); the JSON stays public.",
		// No credentials, or the metrics key for the Prometheus text.
		security: [{}, { metricsKey: [] }],
		answers: {
			200: {
				description: "The metrics",
				content: { "application/json": MetricsSchema, "text/plain": Type.String({ description: "Prometheus text exposition format 0.0.4" }) }
			}
		},
		errors: ["UNAUTHORIZED", "FORBIDDEN"]
	},
	"network.overview": { tag: "observation", summary: "Overview of Crankers, liquidity and intents", answers: ok(NetworkOverviewSchema), errors: [] },
	"network.settlementNetworks": {
		tag: "observation",
		summary: "Networks and mints a payment can settle in now",
		answers: ok(Type.Array(SettlementNetworkSchema)),
		errors: ["REGISTRY_INVALID"]
	},
	"access.consume": {
		tag: "observation",
		summary: "Consume a threshold-access nonce",
		description: "A wallet proves control with a signed, fresh message; each nonce is consumed once.",
		answers: ok(ThresholdAccessGrantSchema),
		errors: ["EXPIRED", "INVALID_SIGNATURE", "NONCE_REUSED"]
	},
	"api.openapi": { tag: "observation", summary: "This OpenAPI 3.1 document", answers: ok(OpenApiDocumentSchema), errors: [] },

	"webhooks.create": {
		tag: "webhooks",
		summary: "Subscribe a URL to events",
		description:
			"Delivers the events of the given types (and filter) committed from now on. The url must be http or https without credentials, and resolve to public addresses only (unless WEBHOOK_ALLOW_PRIVATE): 422 naming `url` otherwise; 503 NOT_READY when this process's host lookups stay taken by other hosts for 5 s (try again). The answer holds the signing secret, never shown again.",
		answers: {
			201: {
				...json("Subscribed; delivering from the latest event of each stream", CreatedWebhookSubscriptionSchema),
				headers: { Location: { description: "/webhooks/{id} of the new subscription", schema: Type.String() } }
			}
		},
		errors: ["LIMIT_REACHED", "NOT_READY"]
	},
	"api.webhookList": { tag: "webhooks", summary: "List webhook subscriptions", description: "Newest first, with their delivery state; never a secret.", answers: ok(Type.Array(WebhookSubscriptionSchema)), errors: [] },
	"webhooks.get": {
		tag: "webhooks",
		summary: "Read a webhook subscription and its delivery state",
		description: "Enabled or disabled, the cursor in each stream, the event being retried and the recent failures; never the secret.",
		answers: ok(WebhookSubscriptionSchema),
		errors: ["NOT_FOUND"]
	},
	"webhooks.remove": { tag: "webhooks", summary: "Delete a webhook subscription", description: "Answers the subscription as it was; a worker holding its lease may still make one attempt, then nothing more is delivered for it.", answers: ok(WebhookSubscriptionSchema, "Deleted"), errors: ["NOT_FOUND"] }
};
