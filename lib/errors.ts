/**
 * The error catalogue of SPEC §7, built in one place. Errors carry Moleculer's error shape
 * (`name`, `message`, `code`, `type`, `data`, `retryable`) without importing Moleculer, so that
 * lib/ stays framework-free: the broker's regenerator and the gateway treat them as client errors.
 */
export const ERROR_STATUS = {
	VALIDATION_ERROR: 422,
	INVALID_MESSAGE: 400,
	INVALID_SIGNATURE: 400,
	EXPIRED: 400,
	UNSUPPORTED_FUNDING_MODE: 400,
	UNKNOWN_TIN: 422,
	ROUTE_MISMATCH: 422,
	/** Payout authorization refused because the intent's evidence no longer holds (SPEC §2.5). */
	EVIDENCE_INCONSISTENT: 422,
	NONCE_REUSED: 409,
	IDEMPOTENCY_CONFLICT: 409,
	VERSION_CONFLICT: 409,
	INVALID_TRANSITION: 409,
	LEASE_EXPIRED: 409,
	STALE_HEARTBEAT: 409,
	NOT_ON_CHAIN: 409,
	SUBMISSION_LIVE: 409,
	/** A bounded resource is full (WEBHOOKS_MAX subscriptions). */
	LIMIT_REACHED: 409,
	SETTLEMENT_MISMATCH: 422,
	UNSUPPORTED_MEDIA_TYPE: 415,
	// HTTP's own refusals, before any route.
	BAD_REQUEST: 400,
	REQUEST_TOO_SLOW: 408,
	HEADERS_TOO_LARGE: 431,
	UNAUTHORIZED: 401,
	FORBIDDEN: 403,
	NOT_LEASE_HOLDER: 403,
	CRANKER_NOT_ALLOWED: 403,
	NOT_OWNER: 403,
	NOT_FOUND: 404,
	PAYLOAD_TOO_LARGE: 413,
	RATE_LIMITED: 429,
	INTERNAL_ERROR: 500,
	REGISTRY_INVALID: 503,
	VERIFIER_UNAVAILABLE: 503,
	NOT_READY: 503,
	CHAIN_UNAVAILABLE: 503,
	SHUTTING_DOWN: 503
} as const;

export type ErrorType = keyof typeof ERROR_STATUS;

/** Moleculer's error types for a call that got no answer (no endpoint, a timeout, a broken bus): NOT_READY to a client. */
export const UNANSWERED_CALL_TYPES: ReadonlySet<string> = new Set(["SERVICE_NOT_FOUND", "SERVICE_NOT_AVAILABLE", "REQUEST_TIMEOUT", "REQUEST_REJECTED", "BROKER_DISCONNECTED"]);

/** Whether a call failed unanswered (UNANSWERED_CALL_TYPES), by the error's `type`, whatever process rebuilt it. */
export function isUnanswered(err: unknown): boolean {
	const type = (err as { type?: unknown } | null | undefined)?.type;
	return typeof type === "string" && UNANSWERED_CALL_TYPES.has(type);
}

/** Reasons a payment intent is rejected during verification (kept as `rejectionReason`). */
export type RejectionReason =
	| "INVALID_MESSAGE"
	| "INVALID_SIGNATURE"
	| "EXPIRED"
	| "UNSUPPORTED_FUNDING_MODE"
	| "UNKNOWN_TIN"
	| "ROUTE_MISMATCH"
	| "NONCE_REUSED";

export class ServiceError extends Error {
	readonly code: number;
	readonly type: ErrorType;
	readonly data?: unknown;
	readonly retryable = false;

	constructor(type: ErrorType, message: string, data?: unknown) {
		super(message);
		this.name = errorName(type);
		this.type = type;
		this.code = ERROR_STATUS[type];
		if (data !== undefined) this.data = data;
	}
}

/** `NOT_LEASE_HOLDER` → `NotLeaseHolderError`: the `name` SDKs see in the body. */
function errorName(type: string): string {
	const camel = type.toLowerCase().replace(/(^|_)([a-z])/g, (_m, _s, c: string) => c.toUpperCase());
	return camel.endsWith("Error") ? camel : `${camel}Error`;
}

export function isServiceError(err: unknown): err is ServiceError {
	return err instanceof ServiceError;
}

/** Messages shown for rejection reasons, so a replayed rejection reads the same as the first. */
const REJECTION_MESSAGES: Record<RejectionReason, string> = {
	INVALID_MESSAGE: "The signed message does not match the request fields",
	INVALID_SIGNATURE: "The sender signature does not verify",
	EXPIRED: "The authorization has expired",
	UNSUPPORTED_FUNDING_MODE: "Unsupported sender funding mode",
	UNKNOWN_TIN: "The recipient TIN is not in the registry",
	ROUTE_MISMATCH: "The recipient route does not match the TIN's active route",
	NONCE_REUSED: "The authorization nonce was already used by this sender"
};

/** A rejection as answered; `id` is absent when the body left no record (SPEC §2.1: it was not signed). */
export function rejectionError(reason: RejectionReason, data: { id?: string; paymentId: string }, detail?: string): ServiceError {
	const message = detail ? `${REJECTION_MESSAGES[reason]}: ${detail}` : REJECTION_MESSAGES[reason];
	return new ServiceError(reason, message, data);
}

/** An error's body as SPEC §7 has it, for answers written without moleculer-web (probes, the HTTP parser's refusals). */
export function errorBody(error: ServiceError): { name: string; message: string; code: number; type: string } {
	return { name: error.name, message: error.message, code: error.code, type: error.type };
}
