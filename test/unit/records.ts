/** Fixed intent records for the unit tests of lib/intents.ts and lib/payout.ts (not a test file). */
import type { CreateIntentRequest, IntentRecord, IntentState, Lease } from "../../lib/intents";

export const NOW = new Date("2026-11-21T18:00:00.000Z");
export const at = (msFromNow: number) => new Date(NOW.getTime() + msFromNow).toISOString();

/** Fixed, recognisable values, so that a view can be searched for them. */
export const SENDER = "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM";
export const MINT = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v";
export const CRANKER_A = "Es9vMFrzaCERmJfrF4H2FYD4KCoNkY11McCe8BenwNYB";
export const CRANKER_B = "FVen3X669xLzsi6N2V91DoiyzHzg1uAgqiT8jZ9nS96Z";
export const ROUTE_COMMITMENT = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";
export const COMMITMENT = "ffc08ef150b4ccf53d753f5e2419c858b3bd63b2f516d60e3a08fcdeb90a1992";
export const NONCE = "nonce_kat_0123456789";
export const SENDER_SIGNATURE = "5awYiUvGiDFA33EJjj4TXJG44a5afJc8QjWRpGgQiu6b23jCr7yndW2fmp9ujwqJVe32J456wV3VF78Asb1obnTc";
export const TX_SIG = "2SiMKVdPshRJM6m3DyxUg7ro2DoPjszCPcqXSZ5hWUVeYV28B4dhg7NDftpehMB3w8aB7HLq7JkNgTp4C6N58DrA";
export const OTHER_TX_SIG = "4srD4fuuqJr9z7P5rnL5YKjNQhh23Xu24Y5CPS8JsANcV9sTAQfnHbnTWutxg3kScXn3QPdWX6EHk9WM1TDmLdFU";

export const REQUEST: CreateIntentRequest = {
	paymentId: "pay_kat_0001",
	senderWallet: SENDER,
	recipientTin: "1234567897",
	recipientRouteCommitment: ROUTE_COMMITMENT,
	recipientRouteVersion: 3,
	tokenMintAddress: MINT,
	amount: "1500000",
	feeLimit: "5000",
	senderFundingMode: "wallet_only_v2",
	senderAuthorizationNonce: NONCE,
	senderAuthorizationIssuedAt: "2026-11-21T17:59:00.000Z",
	senderAuthorizationExpiresAt: "2026-11-21T18:10:00.000Z",
	expiresAtSlot: 345678901,
	senderAuthorizationMessage: "(the signed message)",
	senderAuthorizationSignature: SENDER_SIGNATURE,
	transactionCommitment: COMMITMENT
};

export function lease(crankerPubkey: string, expiresInMs: number): Lease {
	return { crankerPubkey, leasedAt: at(-30_000), expiresAt: at(expiresInMs) };
}

const PATHS: Record<IntentState, IntentState[]> = {
	RECEIVED: ["RECEIVED"],
	NODE_VERIFYING: ["RECEIVED", "NODE_VERIFYING"],
	VERIFIED: ["RECEIVED", "NODE_VERIFYING", "VERIFIED"],
	CRANKER_LEASED: ["RECEIVED", "NODE_VERIFYING", "VERIFIED", "CRANKER_LEASED"],
	SUBMITTED: ["RECEIVED", "NODE_VERIFYING", "VERIFIED", "CRANKER_LEASED", "SUBMITTED"],
	CONFIRMED: ["RECEIVED", "NODE_VERIFYING", "VERIFIED", "CRANKER_LEASED", "SUBMITTED", "CONFIRMED"],
	REJECTED: ["RECEIVED", "NODE_VERIFYING", "REJECTED"]
};
const BY_CRANKER: IntentState[] = ["CRANKER_LEASED", "SUBMITTED", "CONFIRMED"];

/**
 * A record that reached `state` the ordinary way (stateVersion = history length); a leased or
 * submitted one is held by CRANKER_A with a lease that has 30 s left.
 */
export function record(state: IntentState, overrides: Partial<IntentRecord> = {}): IntentRecord {
	const path = PATHS[state];
	const held = state === "CRANKER_LEASED" || state === "SUBMITTED";
	const base: IntentRecord = {
		id: "int_kat_0001",
		paymentId: REQUEST.paymentId,
		state,
		stateVersion: path.length,
		senderWallet: SENDER,
		requestDigest: "d".repeat(64),
		transactionCommitment: COMMITMENT,
		epoch: 1,
		createdAt: at(-60_000),
		updatedAt: at(-10_000),
		expiresAt: REQUEST.senderAuthorizationExpiresAt,
		expiresAtSlot: REQUEST.expiresAtSlot,
		leaseExpiresAt: null,
		request: { ...REQUEST },
		lease: held ? lease(CRANKER_A, 30_000) : null,
		submission: state === "SUBMITTED" || state === "CONFIRMED" ? { transactionSignature: TX_SIG, submittedAt: at(-5_000) } : null,
		history: path.map((s, i) => ({ state: s, at: at(-60_000 + i * 1000), ...(BY_CRANKER.includes(s) ? { by: CRANKER_A } : {}) })),
		...(state === "REJECTED" ? { rejectionReason: "INVALID_SIGNATURE" } : {})
	};
	const merged = { ...base, ...overrides };
	merged.leaseExpiresAt = merged.lease?.expiresAt ?? null;
	return merged;
}

/** The payout authorization message of these records, written out line by line (SPEC §2.5 order). */
export const PAYOUT_MESSAGE_VECTOR = [
	"Settlement Coordination Payout Authorization",
	"version: 1",
	"workId: int_kat_0001",
	"paymentId: pay_kat_0001",
	"crankerPubkey: Es9vMFrzaCERmJfrF4H2FYD4KCoNkY11McCe8BenwNYB",
	"tokenMintAddress: EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v",
	"amount: 1500000",
	"feeLimit: 5000",
	"recipientRouteCommitment: 0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0",
	"recipientRouteVersion: 3",
	"transactionCommitment: ffc08ef150b4ccf53d753f5e2419c858b3bd63b2f516d60e3a08fcdeb90a1992",
	"payoutNullifier: 02f40388b9b0ee6627828994874400a7e70de8bab281469edf7fc4336507bea0",
	"expiresAtSlot: 345678901",
	"issuedAt: 2026-11-21T18:01:00.000Z",
	"expiresAt: 2026-11-21T18:02:30.000Z"
].join("\n");
