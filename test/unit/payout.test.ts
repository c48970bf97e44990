/** One-time payout authorizations (SPEC §2.5). */
import { ed25519 } from "@noble/curves/ed25519.js";
import { createSigner, generateKeypair, keypairFromSecretKey, verifySignature } from "../../lib/ed25519";
import { decodeBase58 } from "../../lib/encoding";
import { PAYOUT_AUTHORIZATION_TTL_MS, buildPayoutAuthorization, payoutAuthorizationProblem } from "../../lib/payout";
import type { LeasedIntentRecord, Lease } from "../../lib/intents";
import { CRANKER_A, MINT, PAYOUT_MESSAGE_VECTOR, ROUTE_COMMITMENT, at, lease, record } from "./records";

const leasedWith = (l: Lease): LeasedIntentRecord => record("CRANKER_LEASED", { lease: l }) as LeasedIntentRecord;

/** RFC 8032 §7.1 TEST 1 key (seed ‖ public key), as the Node's authority keypair. */
const AUTHORITY = keypairFromSecretKey(
	Uint8Array.from(Buffer.from("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "hex"))
);
const authoritySigner = { publicKey: AUTHORITY.publicKey, sign: createSigner(AUTHORITY) };

/** Issued at 18:01:00; the lease ends at 18:05:00, after the 90 s cap. */
const ISSUED = new Date("2026-11-21T18:01:00.000Z");
const leased = () => leasedWith({ crankerPubkey: CRANKER_A, leasedAt: "2026-11-21T18:00:30.000Z", expiresAt: "2026-11-21T18:05:00.000Z" });

/** The expected text, written out; its sha256 is 45e89797…3f779765 (sha256sum). */
const EXPECTED_MESSAGE = PAYOUT_MESSAGE_VECTOR;

/** Python `cryptography` Ed25519 signature of EXPECTED_MESSAGE with the RFC 8032 TEST 1 key, base58. */
const EXPECTED_SIGNATURE = "4srD4fuuqJr9z7P5rnL5YKjNQhh23Xu24Y5CPS8JsANcV9sTAQfnHbnTWutxg3kScXn3QPdWX6EHk9WM1TDmLdFU";

describe("buildPayoutAuthorization", () => {
	it("builds the known-answer authorization", () => {
		expect(buildPayoutAuthorization(leased(), ISSUED, authoritySigner)).toEqual({
			kind: "SVC_PAYOUT_AUTHORIZATION",
			version: 1,
			workId: "int_kat_0001",
			paymentId: "pay_kat_0001",
			crankerPubkey: CRANKER_A,
			tokenMintAddress: MINT,
			amount: "1500000",
			feeLimit: "5000",
			recipientRouteCommitment: ROUTE_COMMITMENT,
			recipientRouteVersion: 3,
			transactionCommitment: "ffc08ef150b4ccf53d753f5e2419c858b3bd63b2f516d60e3a08fcdeb90a1992",
			payoutNullifier: "02f40388b9b0ee6627828994874400a7e70de8bab281469edf7fc4336507bea0",
			expiresAtSlot: 345678901,
			issuedAt: "2026-11-21T18:01:00.000Z",
			expiresAt: "2026-11-21T18:02:30.000Z",
			authorizationSigner: AUTHORITY.publicKey,
			authorizationMessage: EXPECTED_MESSAGE,
			authorizationSignature: EXPECTED_SIGNATURE
		});
	});

	it("carries exactly the SPEC §2.5 fields", () => {
		expect(Object.keys(buildPayoutAuthorization(leased(), ISSUED, authoritySigner)).sort()).toEqual(
			[
				"kind",
				"version",
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
				"expiresAt",
				"authorizationSigner",
				"authorizationMessage",
				"authorizationSignature"
			].sort()
		);
	});

	it("its signature verifies against authorizationSigner over authorizationMessage (lib and noble)", () => {
		const authority = generateKeypair();
		const auth = buildPayoutAuthorization(leased(), ISSUED, { publicKey: authority.publicKey, sign: createSigner(authority) });
		expect(auth.authorizationSigner).toBe(authority.publicKey);
		expect(verifySignature(auth.authorizationSigner, auth.authorizationMessage, auth.authorizationSignature)).toBe(true);
		expect(
			ed25519.verify(decodeBase58(auth.authorizationSignature)!, new TextEncoder().encode(auth.authorizationMessage), decodeBase58(auth.authorizationSigner)!)
		).toBe(true);
		// …and not for a changed message or another signer.
		expect(verifySignature(auth.authorizationSigner, auth.authorizationMessage.replace("amount: 1500000", "amount: 1500001"), auth.authorizationSignature)).toBe(false);
		expect(verifySignature(generateKeypair().publicKey, auth.authorizationMessage, auth.authorizationSignature)).toBe(false);
	});

	it("expiresAt is now + 90 s when the lease ends later", () => {
		expect(PAYOUT_AUTHORIZATION_TTL_MS).toBe(90_000);
		const auth = buildPayoutAuthorization(leased(), ISSUED, authoritySigner);
		expect(auth.expiresAt).toBe("2026-11-21T18:02:30.000Z");
	});

	it("expiresAt is the lease end when the lease ends sooner than now + 90 s", () => {
		const rec = leasedWith({ crankerPubkey: CRANKER_A, leasedAt: "2026-11-21T18:00:30.000Z", expiresAt: "2026-11-21T18:01:45.000Z" });
		const auth = buildPayoutAuthorization(rec, ISSUED, authoritySigner);
		expect(auth.expiresAt).toBe("2026-11-21T18:01:45.000Z");
		expect(auth.authorizationMessage.split("\n").at(-1)).toBe("expiresAt: 2026-11-21T18:01:45.000Z");
	});

	it("expiresAt is never the intent's own expiry", () => {
		const now = new Date(Date.parse(at(0)));
		const rec = leasedWith(lease(CRANKER_A, 60_000));
		const auth = buildPayoutAuthorization(rec, now, authoritySigner);
		expect(auth.expiresAt).toBe(at(60_000));
		expect(auth.expiresAt).not.toBe(rec.request.senderAuthorizationExpiresAt);
	});

	it("names the lease holder as crankerPubkey and keeps the same payoutNullifier when issued again later", () => {
		const first = buildPayoutAuthorization(leased(), ISSUED, authoritySigner);
		const later = buildPayoutAuthorization(leased(), new Date("2026-11-21T18:03:00.000Z"), authoritySigner);
		expect(later.crankerPubkey).toBe(CRANKER_A);
		expect(later.payoutNullifier).toBe(first.payoutNullifier);
		expect(later.issuedAt).toBe("2026-11-21T18:03:00.000Z");
		expect(later.expiresAt).toBe("2026-11-21T18:04:30.000Z");
		expect(later.authorizationSignature).not.toBe(first.authorizationSignature);
	});

	it("the nullifier changes with the sender's nonce", () => {
		const rec = leased();
		const other: LeasedIntentRecord = { ...rec, request: { ...rec.request, senderAuthorizationNonce: "nonce_kat_9999999999" } };
		expect(buildPayoutAuthorization(other, ISSUED, authoritySigner).payoutNullifier).not.toBe(buildPayoutAuthorization(rec, ISSUED, authoritySigner).payoutNullifier);
	});
});

describe("payoutAuthorizationProblem: what a Cranker checks before it pays", () => {
	const genuine = () => buildPayoutAuthorization(leased(), ISSUED, authoritySigner);
	const expected = () => {
		const { workId, crankerPubkey, tokenMintAddress, amount, recipientRouteCommitment, transactionCommitment, payoutNullifier } = genuine();
		return { workId, crankerPubkey, tokenMintAddress, amount, recipientRouteCommitment, transactionCommitment, payoutNullifier };
	};
	const before = ISSUED.getTime() + 1000;

	it("accepts the genuine authorization for the lease", () => {
		expect(payoutAuthorizationProblem(genuine(), expected(), AUTHORITY.publicKey, before)).toBeNull();
	});

	it("refuses another signer, even one whose signature verifies", () => {
		const other = generateKeypair();
		const forged = buildPayoutAuthorization(leased(), ISSUED, { publicKey: other.publicKey, sign: createSigner(other) });
		expect(payoutAuthorizationProblem(forged, expected(), AUTHORITY.publicKey, before)).toMatch(/authority/);
	});

	it("refuses a genuine message and signature carried under other fields (a rewritten answer)", () => {
		const rewritten = { ...genuine(), amount: "999000000" };
		expect(payoutAuthorizationProblem(rewritten, { ...expected(), amount: "999000000" }, AUTHORITY.publicKey, before)).toMatch(/message is not the message of its fields/);
	});

	it("refuses a signature that does not verify, fields that differ from the lease, and an expired one", () => {
		const tampered = { ...genuine(), authorizationSignature: genuine().authorizationSignature.replace(/.$/, c => (c === "1" ? "2" : "1")) };
		expect(payoutAuthorizationProblem(tampered, expected(), AUTHORITY.publicKey, before)).toMatch(/signature/);
		expect(payoutAuthorizationProblem(genuine(), { ...expected(), workId: "int_other" }, AUTHORITY.publicKey, before)).toMatch(/differs from the lease in workId/);
		expect(payoutAuthorizationProblem(genuine(), expected(), AUTHORITY.publicKey, Date.parse(genuine().expiresAt))).toMatch(/expired/);
	});
});
