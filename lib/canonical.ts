/**
 * Canonical signed messages of SPEC §1, §2.5 and §6: a header line, `version: 1`, then
 * `key: value` lines in a fixed order, joined by a single "\n" with no trailing newline.
 */
import { sha256Hex } from "./encoding";

export const PAYMENT_HEADER = "Settlement Coordination Payment Authorization";
export const PAYOUT_HEADER = "Settlement Coordination Payout Authorization";
export const HEARTBEAT_HEADER = "Settlement Coordination Cranker Heartbeat";
export const THRESHOLD_ACCESS_HEADER = "Settlement Coordination Threshold Access";
export const TIN_OPERATION_HEADER = "Settlement Coordination TIN Operation";
export const MESSAGE_VERSION = 1;
/** The one funding mode a payment may name (SPEC §1). */
export const SUPPORTED_FUNDING_MODE = "wallet_only_v2";
/** The longest a payment's signed validity may be, `expiresAt` after `issuedAt` (SPEC §1). */
export const MAX_VALIDITY_MS = 24 * 60 * 60 * 1000;

export type Line = readonly [key: string, value: string | number];

export function canonicalMessage(header: string, lines: readonly Line[]): string {
	return [header, `version: ${MESSAGE_VERSION}`, ...lines.map(([key, value]) => `${key}: ${value}`)].join("\n");
}

/** Parses a canonical message with the given header and exact key order; null when it is not one. */
export function parseCanonicalMessage(text: string, header: string, keys: readonly string[]): Record<string, string> | null {
	const lines = text.split("\n");
	if (lines.length !== keys.length + 2 || lines[0] !== header || lines[1] !== `version: ${MESSAGE_VERSION}`) return null;
	const fields: Record<string, string> = {};
	for (let i = 0; i < keys.length; i++) {
		const prefix = `${keys[i]}: `;
		const line = lines[i + 2];
		if (!line.startsWith(prefix)) return null;
		fields[keys[i]] = line.slice(prefix.length);
	}
	return fields;
}

/** The fields of a payment authorization, named as in CreateIntentRequest. */
export interface PaymentAuthorizationFields {
	paymentId: string;
	senderWallet: string;
	recipientTin: string;
	recipientRouteCommitment: string;
	recipientRouteVersion: number;
	tokenMintAddress: string;
	amount: string;
	feeLimit: string;
	senderFundingMode: string;
	senderAuthorizationNonce: string;
	senderAuthorizationIssuedAt: string;
	senderAuthorizationExpiresAt: string;
	expiresAtSlot: number;
}

/** Message keys in signing order, mapped to the request field that fills each. */
const PAYMENT_KEYS = [
	["paymentId", "paymentId"],
	["sender", "senderWallet"],
	["recipientTin", "recipientTin"],
	["recipientRouteCommitment", "recipientRouteCommitment"],
	["recipientRouteVersion", "recipientRouteVersion"],
	["tokenMint", "tokenMintAddress"],
	["amount", "amount"],
	["feeLimit", "feeLimit"],
	["fundingMode", "senderFundingMode"],
	["nonce", "senderAuthorizationNonce"],
	["issuedAt", "senderAuthorizationIssuedAt"],
	["expiresAt", "senderAuthorizationExpiresAt"],
	["expiresAtSlot", "expiresAtSlot"]
] as const satisfies readonly (readonly [string, keyof PaymentAuthorizationFields])[];

export interface PaymentMessage {
	/** The full text the sender signs (sixteen lines). */
	message: string;
	/** Lowercase hex SHA-256 of the first fifteen lines. */
	transactionCommitment: string;
}

/**
 * The message and commitment of these fields. `hash` is SHA-256 as lowercase hex: the portable one
 * by default (browsers, the SDK); the server passes node:crypto's (lib/digest.ts), about four times
 * faster.
 */
export function buildPaymentMessage(fields: PaymentAuthorizationFields, hash: (text: string) => string = sha256Hex): PaymentMessage {
	const body = canonicalMessage(
		PAYMENT_HEADER,
		PAYMENT_KEYS.map(([key, field]) => [key, fields[field]] as const)
	);
	const transactionCommitment = hash(body);
	return { message: `${body}\ntransactionCommitment: ${transactionCommitment}`, transactionCommitment };
}

/** Reads a payment message back into request fields; null when it is not a well-formed one. */
export function parsePaymentMessage(text: string): (PaymentAuthorizationFields & { transactionCommitment: string }) | null {
	const raw = parseCanonicalMessage(text, PAYMENT_HEADER, [...PAYMENT_KEYS.map(([key]) => key), "transactionCommitment"]);
	if (!raw) return null;
	const fields: Record<string, string | number> = {};
	for (const [key, field] of PAYMENT_KEYS) fields[field] = raw[key];
	for (const numeric of ["recipientRouteVersion", "expiresAtSlot"] as const) {
		if (!/^(0|[1-9][0-9]*)$/.test(String(fields[numeric]))) return null;
		fields[numeric] = Number(fields[numeric]);
	}
	return { ...(fields as unknown as PaymentAuthorizationFields), transactionCommitment: raw.transactionCommitment };
}

export interface PayoutAuthorizationFields {
	workId: string;
	paymentId: string;
	crankerPubkey: string;
	tokenMintAddress: string;
	amount: string;
	feeLimit: string;
	recipientRouteCommitment: string;
	recipientRouteVersion: number;
	transactionCommitment: string;
	payoutNullifier: string;
	expiresAtSlot: number;
	issuedAt: string;
	expiresAt: string;
}

const PAYOUT_KEYS = [
	"workId",
	"paymentId",
	"crankerPubkey",
	"tokenMintAddress",
	"amount",
	"feeLimit",
	"recipientRouteCommitment",
	"recipientRouteVersion",
	"transactionCommitment",
	"payoutNullifier",
	"expiresAtSlot",
	"issuedAt",
	"expiresAt"
] as const satisfies readonly (keyof PayoutAuthorizationFields)[];

export function buildPayoutMessage(fields: PayoutAuthorizationFields): string {
	return canonicalMessage(
		PAYOUT_HEADER,
		PAYOUT_KEYS.map(key => [key, fields[key]] as const)
	);
}

/** `payoutNullifier` = hex SHA-256 of `senderWallet + ":" + nonce` (SPEC §2.5). */
export function payoutNullifier(senderWallet: string, nonce: string): string {
	return sha256Hex(`${senderWallet}:${nonce}`);
}

export function buildHeartbeatMessage(fields: { crankerPubkey: string; roles: readonly string[]; sentAt: string }): string {
	return canonicalMessage(HEARTBEAT_HEADER, [
		["crankerPubkey", fields.crankerPubkey],
		["roles", fields.roles.join(",")],
		["sentAt", fields.sentAt]
	]);
}

export function buildThresholdAccessMessage(fields: { wallet: string; nonce: string; issuedAt: string }): string {
	return canonicalMessage(THRESHOLD_ACCESS_HEADER, [
		["wallet", fields.wallet],
		["nonce", fields.nonce],
		["issuedAt", fields.issuedAt]
	]);
}

export interface TinOperationFields {
	operationId: string;
	intentType: "create" | "update";
	/** Absent for a create: its line is then `tin: ` with nothing after the space. */
	tin?: string;
	ownerWallet: string;
	routeCommitment: string;
	policyCommitment: string;
	issuedAt: string;
	expiresAt: string;
}

export function buildTinOperationMessage(fields: TinOperationFields): string {
	return canonicalMessage(TIN_OPERATION_HEADER, [
		["operationId", fields.operationId],
		["intentType", fields.intentType],
		["tin", fields.tin ?? ""],
		["ownerWallet", fields.ownerWallet],
		["routeCommitment", fields.routeCommitment],
		["policyCommitment", fields.policyCommitment],
		["issuedAt", fields.issuedAt],
		["expiresAt", fields.expiresAt]
	]);
}
