/** One-time payout authorizations (SPEC §2.5), signed by the Node's authority key. */
import { buildPayoutMessage, payoutNullifier, type PayoutAuthorizationFields } from "./canonical";
import type { IntentRecord } from "./intents";

/** An authorization lives at most this long, and never past the end of the lease. */
export const PAYOUT_AUTHORIZATION_TTL_MS = 90_000;

export interface PayoutAuthorization extends PayoutAuthorizationFields {
	kind: "SVC_PAYOUT_AUTHORIZATION";
	version: 1;
	authorizationSigner: string;
	authorizationMessage: string;
	authorizationSignature: string;
}

export function buildPayoutAuthorization(
	record: IntentRecord & { lease: NonNullable<IntentRecord["lease"]> },
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
