/** Verification of a payment authorization (SPEC §1) with real @noble/curves-signed requests. */
import { buildPaymentMessage } from "../../lib/canonical";
import type { CreateIntentRequest } from "../../lib/intents";
import type { ActiveRoute } from "../../lib/registry";
import { verifyPaymentAuthorization, verifyPaymentAuthorizationWith, type VerificationContext, type VerificationResult } from "../../lib/verification";
import { VerifyPool } from "../../lib/verify-pool";
import { sha256HexNative } from "../../lib/digest";
import { newRoute, newWallet, signedIntent } from "../helpers/fixtures";

const NOW = Date.parse("2026-11-21T18:00:00.000Z");
const iso = (msFromNow: number) => new Date(NOW + msFromNow).toISOString();
const MINUTE = 60_000;
const HOUR = 60 * MINUTE;

const wallet = newWallet();
const otherWallet = newWallet();
const route = newRoute({ routeVersion: 2 });
const activeRoute: ActiveRoute = { tin: route.tin, routeCommitment: route.routeCommitment, routeVersion: 2, policyCommitment: route.policyCommitment };

/** A valid request at NOW: issued a minute ago, valid for ten minutes, slot 1,000,000. */
function request(fields: Partial<CreateIntentRequest> = {}, after: Partial<Record<keyof CreateIntentRequest, unknown>> = {}): CreateIntentRequest {
	return signedIntent(wallet, route, { senderAuthorizationIssuedAt: iso(-MINUTE), senderAuthorizationExpiresAt: iso(10 * MINUTE), expiresAtSlot: 1_000_000, ...fields }, after);
}

function context(overrides: Partial<VerificationContext> = {}): VerificationContext {
	return { nowMs: NOW, latestSlot: 999_999, route: activeRoute, ...overrides };
}

/** Every case the tests decide, replayed through the worker-thread variant at the end. */
const decided: [CreateIntentRequest, VerificationContext, VerificationResult][] = [];

const reason = (req: CreateIntentRequest, ctx = context()) => {
	const result = verifyPaymentAuthorization(req, ctx);
	decided.push([req, ctx, result]);
	return result.ok ? "OK" : result.reason;
};

describe("verifyPaymentAuthorization", () => {
	it("accepts a correctly signed request for the active route", () => {
		expect(verifyPaymentAuthorization(request(), context())).toEqual({ ok: true });
	});

	it("accepts a request without the optional transactionCommitment and with a matching recipientHash", () => {
		const req = request({}, { transactionCommitment: undefined, recipientHash: route.tin });
		expect(reason(req)).toBe("OK");
	});

	describe("INVALID_MESSAGE: message binding", () => {
		it("a field sent differently from what was signed", () => {
			expect(reason(request({}, { amount: "1500001" }))).toBe("INVALID_MESSAGE");
			expect(reason(request({}, { recipientRouteVersion: 3 }))).toBe("INVALID_MESSAGE");
			expect(reason(request({}, { expiresAtSlot: 1_000_001 }))).toBe("INVALID_MESSAGE");
		});

		it("a message with a trailing newline", () => {
			const req = request();
			expect(reason({ ...req, senderAuthorizationMessage: `${req.senderAuthorizationMessage}\n` })).toBe("INVALID_MESSAGE");
		});

		it("a transactionCommitment that is not the computed one", () => {
			expect(reason(request({}, { transactionCommitment: "0".repeat(64) }))).toBe("INVALID_MESSAGE");
		});

		it("a recipientHash that differs from recipientTin", () => {
			expect(reason(request({}, { recipientHash: "4000000002" }))).toBe("INVALID_MESSAGE");
		});

		it("issuedAt more than 60 s ahead", () => {
			expect(reason(request({ senderAuthorizationIssuedAt: iso(60_001), senderAuthorizationExpiresAt: iso(HOUR) }))).toBe("INVALID_MESSAGE");
		});

		it("issuedAt exactly 60 s ahead is accepted", () => {
			expect(reason(request({ senderAuthorizationIssuedAt: iso(60_000), senderAuthorizationExpiresAt: iso(HOUR) }))).toBe("OK");
		});

		it("a validity over 24 h", () => {
			expect(reason(request({ senderAuthorizationIssuedAt: iso(-MINUTE), senderAuthorizationExpiresAt: iso(24 * HOUR - MINUTE + 1) }))).toBe("INVALID_MESSAGE");
		});

		it("a validity of exactly 24 h is accepted", () => {
			expect(reason(request({ senderAuthorizationIssuedAt: iso(-MINUTE), senderAuthorizationExpiresAt: iso(24 * HOUR - MINUTE) }))).toBe("OK");
		});
	});

	it("UNSUPPORTED_FUNDING_MODE for any mode but wallet_only_v2 (signed as such)", () => {
		expect(reason(request({ senderFundingMode: "wallet_only_v1" }))).toBe("UNSUPPORTED_FUNDING_MODE");
		expect(reason(request({ senderFundingMode: "" }))).toBe("UNSUPPORTED_FUNDING_MODE");
	});

	describe("INVALID_SIGNATURE", () => {
		it("a signature by another wallet", () => {
			const req = request();
			expect(reason({ ...req, senderAuthorizationSignature: otherWallet.sign(req.senderAuthorizationMessage) })).toBe("INVALID_SIGNATURE");
		});

		it("a request signed by one wallet but sent as another's (message rebuilt for the claimed wallet)", () => {
			const claimed = request({ senderWallet: otherWallet.address });
			const forged = { ...claimed, senderAuthorizationSignature: wallet.sign(claimed.senderAuthorizationMessage) };
			expect(reason(forged)).toBe("INVALID_SIGNATURE");
		});

		it("the signature of another request", () => {
			expect(reason({ ...request(), senderAuthorizationSignature: request().senderAuthorizationSignature })).toBe("INVALID_SIGNATURE");
		});

		it("a signature that is not 64 bytes of base58", () => {
			expect(reason({ ...request(), senderAuthorizationSignature: "111" })).toBe("INVALID_SIGNATURE");
			expect(reason({ ...request(), senderAuthorizationSignature: "0OIl" })).toBe("INVALID_SIGNATURE");
		});
	});

	describe("EXPIRED", () => {
		it("expiresAt has passed, or is now", () => {
			expect(reason(request({ senderAuthorizationIssuedAt: iso(-HOUR), senderAuthorizationExpiresAt: iso(-1) }))).toBe("EXPIRED");
			expect(reason(request({ senderAuthorizationIssuedAt: iso(-HOUR), senderAuthorizationExpiresAt: iso(0) }))).toBe("EXPIRED");
			expect(reason(request({ senderAuthorizationIssuedAt: iso(-HOUR), senderAuthorizationExpiresAt: iso(1) }))).toBe("OK");
		});

		it("expiresAtSlot at or below the latest observed slot", () => {
			expect(reason(request({ expiresAtSlot: 500 }), context({ latestSlot: 500 }))).toBe("EXPIRED");
			expect(reason(request({ expiresAtSlot: 500 }), context({ latestSlot: 501 }))).toBe("EXPIRED");
			expect(reason(request({ expiresAtSlot: 500 }), context({ latestSlot: 499 }))).toBe("OK");
		});

		it("latest slot 0 is a real observation", () => {
			expect(reason(request({ expiresAtSlot: 0 }), context({ latestSlot: 0 }))).toBe("EXPIRED");
		});

		it("the slot check only runs when a slot has been observed", () => {
			expect(reason(request({ expiresAtSlot: 0 }), context({ latestSlot: null }))).toBe("OK");
			expect(reason(request({ expiresAtSlot: 1 }), context({ latestSlot: null }))).toBe("OK");
		});
	});

	it("UNKNOWN_TIN when the TIN has no active route", () => {
		expect(reason(request(), context({ route: null }))).toBe("UNKNOWN_TIN");
	});

	describe("ROUTE_MISMATCH", () => {
		it("another route commitment", () => {
			expect(reason(request(), context({ route: { ...activeRoute, routeCommitment: "a".repeat(64) } }))).toBe("ROUTE_MISMATCH");
		});

		it("another route version (an older one signed)", () => {
			expect(reason(request({ recipientRouteVersion: 1 }))).toBe("ROUTE_MISMATCH");
			expect(reason(request(), context({ route: { ...activeRoute, routeVersion: 3 } }))).toBe("ROUTE_MISMATCH");
		});
	});

	describe("the first failing check wins (message, funding mode, signature, expiry, route)", () => {
		const forged = (req: CreateIntentRequest) => ({ ...req, senderAuthorizationSignature: otherWallet.sign(req.senderAuthorizationMessage) });
		const expired = { senderAuthorizationIssuedAt: iso(-HOUR), senderAuthorizationExpiresAt: iso(-MINUTE) };

		it("bad message + bad funding mode → INVALID_MESSAGE", () => {
			expect(reason(request({ senderFundingMode: "custodial" }, { amount: "1" }))).toBe("INVALID_MESSAGE");
		});

		it("bad message + everything else wrong → INVALID_MESSAGE", () => {
			const req = forged(request({ senderFundingMode: "custodial", ...expired }, { transactionCommitment: "f".repeat(64) }));
			expect(reason(req, context({ route: null, latestSlot: 10_000_000 }))).toBe("INVALID_MESSAGE");
		});

		it("bad funding mode + bad signature → UNSUPPORTED_FUNDING_MODE", () => {
			expect(reason(forged(request({ senderFundingMode: "custodial" })))).toBe("UNSUPPORTED_FUNDING_MODE");
		});

		it("bad signature + expired → INVALID_SIGNATURE", () => {
			expect(reason(forged(request(expired)))).toBe("INVALID_SIGNATURE");
			expect(reason(forged(request({ expiresAtSlot: 5 })), context({ latestSlot: 10 }))).toBe("INVALID_SIGNATURE");
		});

		it("bad signature + unknown TIN → INVALID_SIGNATURE", () => {
			expect(reason(forged(request()), context({ route: null }))).toBe("INVALID_SIGNATURE");
		});

		it("expired + unknown TIN → EXPIRED", () => {
			expect(reason(request(expired), context({ route: null }))).toBe("EXPIRED");
		});

		it("slot-expired + route mismatch → EXPIRED", () => {
			expect(reason(request({ expiresAtSlot: 5, recipientRouteVersion: 1 }), context({ latestSlot: 10 }))).toBe("EXPIRED");
		});
	});

	it("returns a detail that explains the refusal", () => {
		const result = verifyPaymentAuthorization(request({ expiresAtSlot: 5 }), context({ latestSlot: 10 }));
		expect(result).toEqual({ ok: false, reason: "EXPIRED", detail: expect.stringContaining("expiresAtSlot 5") });
	});

	it("binds the signature to the exact canonical text (the fixture signs what buildPaymentMessage builds)", () => {
		const req = request();
		expect(req.senderAuthorizationMessage).toBe(buildPaymentMessage(req).message);
		expect(req.transactionCommitment).toBe(buildPaymentMessage(req).transactionCommitment);
	});
});

describe("verifyPaymentAuthorizationWith a VerifyPool (the equation on a worker thread)", () => {
	it("decides every case above as verifyPaymentAuthorization does", async () => {
		const pool = new VerifyPool(1);
		try {
			expect(decided.length).toBeGreaterThan(20);
			const pooled = await Promise.all(decided.map(([req, ctx]) => verifyPaymentAuthorizationWith((...args) => pool.verify(...args), req, () => ctx, sha256HexNative)));
			expect(pooled.map(({ transactionCommitment, ...result }) => result)).toEqual(decided.map(([, , result]) => result));
			// The commitment answered with each verdict is the request's own, whatever the verdict.
			expect(pooled.map(answer => answer.transactionCommitment)).toEqual(decided.map(([req]) => buildPaymentMessage(req).transactionCommitment));
		} finally {
			await pool.close();
		}
	});
});
