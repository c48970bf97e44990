/**
 * Parameter schemas (fastest-validator) for the actions behind the routes, the single source of
 * the wire shapes of SPEC §0–§6. Custom checks push errors of the types listed in
 * VALIDATION_MESSAGES, which the broker's validator is configured with.
 *
 * Field rules are functions returning a fresh object: fastest-validator takes a rule object seen
 * twice in one schema for a cycle and skips its custom check the second time.
 */
import { AMOUNT_PATTERN, HEX64_PATTERN, IDENTIFIER_PATTERN, NONCE_PATTERN, isAmount, isBase58OfLength, isIsoTime } from "./encoding";
import { INTENT_STATES } from "./intents";
import { TIN_PATTERN, isValidTin } from "./tin";

type Errors = { type: string; actual?: unknown; expected?: unknown }[];

export const VALIDATION_MESSAGES = {
	base58Bytes: "The '{field}' field must be base58 of exactly {expected} bytes.",
	u64: "The '{field}' field must be a decimal amount() of base units no greater than 18446744073709551615.",
	positiveAmount: "The '{field}' field must be greater than 0.",
	isoTime: "The '{field}' field must be an ISO-8601 UTC time with milliseconds (2026-11-21T18:00:00.000Z).",
	luhn: "The '{field}' field must be a 10-digit TIN with a valid Luhn check digit.",
	distinctMints: "The '{field}' field must name each tokenMintAddress once.",
	// fastest-validator's own wording shows the allowed values as if they were the value sent.
	enumValue: "The '{field}' field value '{actual}' is not one of the allowed values: {expected}."
};

/**
 * A custom check that reports `type` when `valid` fails. Values that are not strings are left to
 * the rule's own type check (fastest-validator also runs custom checks on absent optional fields).
 */
function check(type: string, valid: (value: string) => boolean, expected?: unknown) {
	return (value: unknown, errors: Errors) => {
		if (typeof value === "string" && !valid(value)) errors.push({ type, expected, actual: value });
		return value;
	};
}

function base58Of(bytes: number) {
	return { type: "string", max: 128, custom: check("base58Bytes", value => isBase58OfLength(value, bytes), bytes) };
}

export const address = () => base58Of(32);
export const signature = () => base58Of(64);
export const hex64 = () => ({ type: "string", pattern: HEX64_PATTERN });
export const identifier = () => ({ type: "string", pattern: IDENTIFIER_PATTERN });
export const nonce = () => ({ type: "string", pattern: NONCE_PATTERN });
export const isoTime = () => ({ type: "string", max: 24, custom: check("isoTime", isIsoTime) });
export const amount = () => ({ type: "string", pattern: AMOUNT_PATTERN, custom: check("u64", isAmount) });
export const positiveAmount = () => {
	const u64 = check("u64", isAmount);
	const positive = check("positiveAmount", value => value !== "0");
	return { ...amount(), custom: (value: unknown, errors: Errors) => positive(u64(value, errors), errors) };
};
export const tin = () => ({ type: "string", pattern: TIN_PATTERN, custom: check("luhn", isValidTin) });
export const slot = () => ({ type: "number", integer: true, min: 0, max: Number.MAX_SAFE_INTEGER });
/**
 * Intents per page of GET /intent-work between a gateway and a mempool in another process: about
 * 2.5 KB each, so a page is a few hundred KB on the bus, under NATS's 1 MB message limit.
 */
export const WORK_PAGE = 100;
/**
 * And at most this many bytes (UTF-8) of their views' JSON: an intent leased and released many
 * times carries a long history (each release up to a 512-character reason), and a hundred such
 * views would pass the bus's limit. The bus escapes each view's quotes and backslashes again, at
 * most doubling it; one view alone may pass the budget (its history is bounded: HISTORY_MAX).
 */
export const WORK_PAGE_BYTES = 256 * 1024;

/** The most items a list route answers (`limit`). */
export const LIST_LIMIT_MAX = 500;
/** `limit` query parameter of the list routes: 1–500, default 50. */
export const limit = () => ({ type: "number", integer: true, min: 1, max: LIST_LIMIT_MAX, convert: true, default: 50 });

export const createIntentParams = {
	$$strict: true,
	paymentId: identifier(),
	recipientTin: tin(),
	recipientRouteCommitment: hex64(),
	recipientRouteVersion: { type: "number", integer: true, min: 1, max: Number.MAX_SAFE_INTEGER },
	tokenMintAddress: address(),
	senderWallet: address(),
	senderAuthorizationMessage: { type: "string", max: 4096 },
	senderAuthorizationSignature: signature(),
	senderAuthorizationNonce: nonce(),
	senderAuthorizationIssuedAt: isoTime(),
	senderAuthorizationExpiresAt: isoTime(),
	amount: positiveAmount(),
	feeLimit: amount(),
	expiresAtSlot: slot(),
	senderFundingMode: { type: "string", max: 64 },
	recipientHash: { type: "string", max: 64, optional: true },
	transactionCommitment: { ...hex64(), optional: true }
};

export const updateStatusParams = {
	$$strict: true,
	id: { type: "string", max: 64 },
	status: { type: "enum", values: [...INTENT_STATES] },
	crankerPubkey: address(),
	expectedVersion: { type: "number", integer: true, min: 1, max: Number.MAX_SAFE_INTEGER },
	transactionSignature: { ...signature(), optional: true },
	slot: { ...slot(), optional: true },
	/** Of the submitted transaction's blockhash; required for SUBMITTED (SPEC §2.4). */
	lastValidBlockHeight: { ...slot(), optional: true },
	reason: { type: "string", min: 1, max: 512, optional: true }
};

export const CRANKER_ROLES = ["settlement", "verifier", "submitter"] as const;
export type CrankerRole = (typeof CRANKER_ROLES)[number];

/** The most liquidity entries (one per mint) a heartbeat may carry. */
export const MAX_LIQUIDITY_ENTRIES = 64;

export const heartbeatParams = {
	$$strict: true,
	crankerPubkey: address(),
	roles: { type: "array", min: 1, max: 3, unique: true, items: { type: "enum", values: [...CRANKER_ROLES] } },
	liquidity: {
		type: "array",
		max: MAX_LIQUIDITY_ENTRIES,
		items: { type: "object", strict: true, props: { tokenMintAddress: address(), available: amount() } },
		// A mint named twice would count its liquidity, and its Cranker, twice in the public figures.
		custom: (value: unknown, errors: Errors) => {
			const mints = Array.isArray(value) ? value.map(entry => (entry as { tokenMintAddress?: unknown } | null)?.tokenMintAddress) : [];
			if (new Set(mints).size !== mints.length) errors.push({ type: "distinctMints" });
			return value;
		}
	},
	version: { type: "string", max: 64, optional: true },
	sentAt: isoTime(),
	signature: signature()
};

export const payoutAuthorizationParams = {
	$$strict: true,
	workId: { type: "string", max: 64 },
	crankerPubkey: address()
};

export const consumeNonceParams = {
	$$strict: true,
	wallet: address(),
	nonce: nonce(),
	issuedAt: isoTime(),
	signature: signature()
};

export const createTinOperationParams = {
	$$strict: true,
	operationId: identifier(),
	intentType: { type: "enum", values: ["create", "update"] },
	tin: { ...tin(), optional: true },
	ownerWallet: address(),
	routeCommitment: hex64(),
	policyCommitment: hex64(),
	ownerSignature: signature(),
	issuedAt: isoTime(),
	expiresAt: isoTime()
};

export const TIN_STAGES = ["verified", "fee-committed", "submitted", "finalized", "failed", "rejected"] as const;
export type TinStage = (typeof TIN_STAGES)[number];

/**
 * Only the types here: SPEC §5 answers 404, 409 and 403 before 422, so the formats of these fields
 * are checked by the stage decision (lib/tin-operations.ts), after the record and the Cranker.
 */
export const tinStageParams = {
	$$strict: true,
	id: { type: "string", max: 64 },
	crankerPubkey: { type: "string", max: 128 },
	transactionSignature: { type: "string", max: 128, optional: true },
	feeAmount: { type: "string", max: 32, optional: true },
	reason: { type: "string", min: 1, max: 512, optional: true }
};
