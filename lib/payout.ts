/** One-time payout authorizations (SPEC §2.5), signed by the Node's authority key. */
import { Type, type Static } from "@sinclair/typebox";
import { buildPayoutMessage, payoutNullifier, type PayoutAuthorizationFields } from "./canonical";
import { verifySignature } from "./ed25519";
import type { LeasedIntentRecord } from "./intents";
import { Address, Amount, Hex64, Identifier, IsoTime, Signature, Slot, Version, named } from "./wire-formats";

/** An authorization lives at most this long, and never past the end of the lease. */
export const PAYOUT_AUTHORIZATION_TTL_MS = 90_000;

/** The answer of POST /internal/settlement-authorizations/settlement: the payout message's fields, the message and its signature. */
export const PayoutAuthorizationSchema = Type.Object(
	{
		kind: Type.Literal("SVC_PAYOUT_AUTHORIZATION"),
		version: Type.Literal(1),
		workId: Type.String({ maxLength: 64 }),
		paymentId: Identifier,
		crankerPubkey: Address,
		tokenMintAddress: Address,
		amount: Amount,
		feeLimit: Amount,
		recipientRouteCommitment: Hex64,
		recipientRouteVersion: Version,
		transactionCommitment: Hex64,
		payoutNullifier: Hex64,
		expiresAtSlot: Slot,
		issuedAt: IsoTime,
		expiresAt: IsoTime,
		authorizationSigner: Address,
		authorizationMessage: Type.String(),
		authorizationSignature: Signature
	},
	named("PayoutAuthorization")
);
export type PayoutAuthorization = Static<typeof PayoutAuthorizationSchema>;

/**
 * The answer to a payout request: the authorization, and the settlement program the Node checks
 * the settlement against (outside the signed message), so that a Cranker set to another one gives
 * the lease back before it signs a payment the Node would never count. Optional: an owner of an
 * earlier version, in a rolling update, answers without it.
 */
export const PayoutAuthorizationAnswerSchema = Type.Object(
	{ ...PayoutAuthorizationSchema.properties, settlementProgramId: Type.Optional(Address) },
	named("PayoutAuthorizationAnswer")
);

export function buildPayoutAuthorization(
	record: LeasedIntentRecord,
	now: Date,
	signer: { publicKey: string; sign: (message: string) => string }
): PayoutAuthorization {
	const { request, lease } = record;
	const fields: PayoutAuthorizationFields = {
		workId: record.id,
		paymentId: record.paymentId,
		crankerPubkey: lease.crankerPubkey,
		tokenMintAddress: request.tokenMintAddress,
		amount: request.amount,
		feeLimit: request.feeLimit,
		recipientRouteCommitment: request.recipientRouteCommitment,
		recipientRouteVersion: request.recipientRouteVersion,
		transactionCommitment: record.transactionCommitment,
		payoutNullifier: payoutNullifier(request.senderWallet, request.senderAuthorizationNonce),
		expiresAtSlot: request.expiresAtSlot,
		issuedAt: now.toISOString(),
		expiresAt: new Date(Math.min(now.getTime() + PAYOUT_AUTHORIZATION_TTL_MS, Date.parse(lease.expiresAt))).toISOString()
	};
	const authorizationMessage = buildPayoutMessage(fields);
	return {
		kind: "SVC_PAYOUT_AUTHORIZATION",
		version: 1,
		...fields,
		authorizationSigner: signer.publicKey,
		authorizationMessage,
		authorizationSignature: signer.sign(authorizationMessage)
	};
}

/** What a Cranker expects of the authorization for its lease (from the worker view it leased). */
export interface ExpectedPayout {
	workId: string;
	crankerPubkey: string;
	tokenMintAddress: string;
	amount: string;
	recipientRouteCommitment: string;
	transactionCommitment: string;
	payoutNullifier: string;
}

const EXPECTED_FIELDS = ["workId", "crankerPubkey", "tokenMintAddress", "amount", "recipientRouteCommitment", "transactionCommitment", "payoutNullifier"] as const satisfies readonly (keyof ExpectedPayout)[];

/**
 * Why a Cranker must not pay on this authorization (null when it may): signed by the authority it
 * was configured with, over exactly the fields it carries (a genuine message and signature under
 * other fields prove nothing), for exactly its lease, and not expired.
 */
export function payoutAuthorizationProblem(authorization: PayoutAuthorization, expected: ExpectedPayout, authorityPubkey: string, nowMs: number): string | null {
	if (authorization.authorizationSigner !== authorityPubkey) return "not signed by the Node's authority key";
	if (authorization.authorizationMessage !== buildPayoutMessage(authorization)) return "its message is not the message of its fields";
	if (!verifySignature(authorityPubkey, authorization.authorizationMessage, authorization.authorizationSignature)) return "its signature does not verify";
	const differing = EXPECTED_FIELDS.filter(field => authorization[field] !== expected[field]);
	if (differing.length) return `it differs from the lease in ${differing.join(", ")}`;
	if (Date.parse(authorization.expiresAt) <= nowMs) return "it expired before use";
	return null;
}
