/**
 * Known-answer vectors for the canonical messages of SPEC §1, §2.5 and §6. Every expected text is
 * written out literally and every digest was computed outside the code under test, e.g.
 *   printf '%s' "<the 15 lines>" | sha256sum
 */
import {
	buildHeartbeatMessage,
	buildPaymentMessage,
	buildPayoutMessage,
	canonicalMessage,
	parseCanonicalMessage,
	parsePaymentMessage,
	payoutNullifier,
	type PaymentAuthorizationFields,
	type PayoutAuthorizationFields
} from "../../lib/canonical";
import { PAYOUT_MESSAGE_VECTOR } from "./records";

const SENDER = "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM";
const MINT = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v";
const CRANKER = "Es9vMFrzaCERmJfrF4H2FYD4KCoNkY11McCe8BenwNYB";
const ROUTE_COMMITMENT = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";

const PAYMENT: PaymentAuthorizationFields = {
	paymentId: "pay_kat_0001",
	senderWallet: SENDER,
	recipientTin: "1234567897",
	recipientRouteCommitment: ROUTE_COMMITMENT,
	recipientRouteVersion: 3,
	tokenMintAddress: MINT,
	amount: "1500000",
	feeLimit: "5000",
	senderFundingMode: "wallet_only_v2",
	senderAuthorizationNonce: "nonce_kat_0123456789",
	senderAuthorizationIssuedAt: "2026-11-21T18:00:00.000Z",
	senderAuthorizationExpiresAt: "2026-11-21T18:10:00.000Z",
	expiresAtSlot: 345678901
};

/** sha256 of the first 15 lines below, computed with `printf '%s' … | sha256sum`. */
const EXPECTED_COMMITMENT = "ffc08ef150b4ccf53d753f5e2419c858b3bd63b2f516d60e3a08fcdeb90a1992";

const EXPECTED_PAYMENT_MESSAGE = [
	"Settlement Coordination Payment Authorization",
	"version: 1",
	"paymentId: pay_kat_0001",
	"sender: 9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM",
	"recipientTin: 1234567897",
	"recipientRouteCommitment: 0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0",
	"recipientRouteVersion: 3",
	"tokenMint: EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v",
	"amount: 1500000",
	"feeLimit: 5000",
	"fundingMode: wallet_only_v2",
	"nonce: nonce_kat_0123456789",
	"issuedAt: 2026-11-21T18:00:00.000Z",
	"expiresAt: 2026-11-21T18:10:00.000Z",
	"expiresAtSlot: 345678901",
	"transactionCommitment: ffc08ef150b4ccf53d753f5e2419c858b3bd63b2f516d60e3a08fcdeb90a1992"
].join("\n");

/** sha256 of `9WzD…AWWM:nonce_kat_0123456789`, computed with sha256sum. */
const EXPECTED_NULLIFIER = "02f40388b9b0ee6627828994874400a7e70de8bab281469edf7fc4336507bea0";

describe("canonical payment message (SPEC §1)", () => {
	it("builds the known-answer message, line for line", () => {
		const { message } = buildPaymentMessage(PAYMENT);
		expect(message.split("\n")).toEqual(EXPECTED_PAYMENT_MESSAGE.split("\n"));
		expect(message).toBe(EXPECTED_PAYMENT_MESSAGE);
	});

	it("computes the known-answer transactionCommitment over the first fifteen lines", () => {
		expect(buildPaymentMessage(PAYMENT).transactionCommitment).toBe(EXPECTED_COMMITMENT);
	});

	it("has sixteen lines, no trailing newline and no carriage returns", () => {
		const { message } = buildPaymentMessage(PAYMENT);
		expect(message.split("\n")).toHaveLength(16);
		expect(message.endsWith("\n")).toBe(false);
		expect(message).not.toContain("\r");
	});

	it("does not depend on the key order of the input object", () => {
		const reversed = Object.fromEntries(Object.entries(PAYMENT).reverse()) as unknown as PaymentAuthorizationFields;
		expect(buildPaymentMessage(reversed).message).toBe(EXPECTED_PAYMENT_MESSAGE);
	});

	it.each(Object.keys(PAYMENT) as (keyof PaymentAuthorizationFields)[])("binds %s: changing it changes the commitment", field => {
		const changed = { ...PAYMENT, [field]: typeof PAYMENT[field] === "number" ? (PAYMENT[field] as number) + 1 : `${PAYMENT[field]}x` };
		expect(buildPaymentMessage(changed).transactionCommitment).not.toBe(EXPECTED_COMMITMENT);
	});
});

describe("parsePaymentMessage", () => {
	it("reads the known-answer message back into the request fields", () => {
		expect(parsePaymentMessage(EXPECTED_PAYMENT_MESSAGE)).toEqual({ ...PAYMENT, transactionCommitment: EXPECTED_COMMITMENT });
	});

	it("round-trips: build(parse(message)) is the same message", () => {
		const parsed = parsePaymentMessage(EXPECTED_PAYMENT_MESSAGE);
		expect(parsed).not.toBeNull();
		expect(typeof parsed!.recipientRouteVersion).toBe("number");
		expect(typeof parsed!.expiresAtSlot).toBe("number");
		expect(buildPaymentMessage(parsed!).message).toBe(EXPECTED_PAYMENT_MESSAGE);
	});

	const lines = () => EXPECTED_PAYMENT_MESSAGE.split("\n");
	const swapped = (i: number, j: number) => {
		const l = lines();
		[l[i], l[j]] = [l[j], l[i]];
		return l.join("\n");
	};
	const malformed: [string, string][] = [
		["a wrong header", ["Settlement Coordination Payout Authorization", ...lines().slice(1)].join("\n")],
		["a wrong version", [lines()[0], "version: 2", ...lines().slice(2)].join("\n")],
		["paymentId and sender swapped", swapped(2, 3)],
		["amount and feeLimit swapped", swapped(8, 9)],
		["a trailing newline", `${EXPECTED_PAYMENT_MESSAGE}\n`],
		["an extra line", `${EXPECTED_PAYMENT_MESSAGE}\nextra: 1`],
		["a missing line", lines().slice(0, 15).join("\n")],
		["CRLF line ends", lines().join("\r\n")],
		["a non-numeric slot", EXPECTED_PAYMENT_MESSAGE.replace("expiresAtSlot: 345678901", "expiresAtSlot: 34567890x")],
		["a negative slot", EXPECTED_PAYMENT_MESSAGE.replace("expiresAtSlot: 345678901", "expiresAtSlot: -1")],
		["a slot with a leading zero", EXPECTED_PAYMENT_MESSAGE.replace("expiresAtSlot: 345678901", "expiresAtSlot: 0345678901")],
		["a non-numeric route version", EXPECTED_PAYMENT_MESSAGE.replace("recipientRouteVersion: 3", "recipientRouteVersion: three")],
		["no space after a colon", EXPECTED_PAYMENT_MESSAGE.replace("amount: 1500000", "amount:1500000")],
		["a renamed key", EXPECTED_PAYMENT_MESSAGE.replace("tokenMint: ", "tokenMintAddress: ")],
		["an empty text", ""]
	];
	it.each(malformed)("rejects a message with %s", (_label, text) => {
		expect(text).not.toBe(EXPECTED_PAYMENT_MESSAGE);
		expect(parsePaymentMessage(text)).toBeNull();
	});
});

describe("parseCanonicalMessage / canonicalMessage", () => {
	it("joins header, version and key: value lines with single newlines", () => {
		expect(canonicalMessage("H", [["a", "x"], ["b", 2]])).toBe("H\nversion: 1\na: x\nb: 2");
	});

	it("keeps an empty value as `key: ` with nothing after the space", () => {
		const text = canonicalMessage("H", [["tin", ""], ["b", "y"]]);
		expect(text).toBe("H\nversion: 1\ntin: \nb: y");
		expect(parseCanonicalMessage(text, "H", ["tin", "b"])).toEqual({ tin: "", b: "y" });
	});

	it("keeps colons inside values", () => {
		expect(parseCanonicalMessage("H\nversion: 1\nat: 12:30: ok", "H", ["at"])).toEqual({ at: "12:30: ok" });
	});
});

describe("payout authorization message (SPEC §2.5)", () => {
	it("payoutNullifier is the known sha256 of `senderWallet:nonce`", () => {
		expect(payoutNullifier(SENDER, "nonce_kat_0123456789")).toBe(EXPECTED_NULLIFIER);
	});

	it("payoutNullifier separates wallet and nonce with a colon (no ambiguity with concatenation)", () => {
		expect(payoutNullifier("ab", "c")).not.toBe(payoutNullifier("a", "bc"));
	});

	it("builds the known-answer message in SPEC order", () => {
		const fields: PayoutAuthorizationFields = {
			workId: "int_kat_0001",
			paymentId: "pay_kat_0001",
			crankerPubkey: CRANKER,
			tokenMintAddress: MINT,
			amount: "1500000",
			feeLimit: "5000",
			recipientRouteCommitment: ROUTE_COMMITMENT,
			recipientRouteVersion: 3,
			transactionCommitment: EXPECTED_COMMITMENT,
			payoutNullifier: EXPECTED_NULLIFIER,
			expiresAtSlot: 345678901,
			issuedAt: "2026-11-21T18:01:00.000Z",
			expiresAt: "2026-11-21T18:02:30.000Z"
		};
		const expected = PAYOUT_MESSAGE_VECTOR;
		// Shuffled input: the order comes from the builder, not from the object.
		const shuffled = Object.fromEntries(Object.entries(fields).reverse()) as unknown as PayoutAuthorizationFields;
		expect(buildPayoutMessage(shuffled)).toBe(expected);
	});
});

describe("heartbeat message (SPEC §6)", () => {
	it("builds the known-answer message with roles joined by commas in the order sent", () => {
		expect(
			buildHeartbeatMessage({
				crankerPubkey: "FVen3X669xLzsi6N2V91DoiyzHzg1uAgqiT8jZ9nS96Z",
				roles: ["settlement", "verifier"],
				sentAt: "2026-11-21T18:00:00.000Z"
			})
		).toBe(
			[
				"Settlement Coordination Cranker Heartbeat",
				"version: 1",
				"crankerPubkey: FVen3X669xLzsi6N2V91DoiyzHzg1uAgqiT8jZ9nS96Z",
				"roles: settlement,verifier",
				"sentAt: 2026-11-21T18:00:00.000Z"
			].join("\n")
		);
	});

	it("keeps the roles in the order sent", () => {
		const a = buildHeartbeatMessage({ crankerPubkey: "K", roles: ["verifier", "settlement"], sentAt: "T" });
		expect(a.split("\n")[3]).toBe("roles: verifier,settlement");
	});
});
