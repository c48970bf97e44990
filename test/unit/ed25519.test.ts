/**
 * lib/ed25519 (node:crypto) against @noble/curves, the library SDK wallets sign with, against
 * the RFC 8032 §7.1 test vectors, and strict verification's known answers (small-order points,
 * ed25519-speccheck, the bug report's forgery, S ≥ L).
 */
import { spawnSync } from "node:child_process";
import nodeCrypto, { createHash, createPublicKey, randomBytes, verify as cryptoVerify } from "node:crypto";
import { ed25519 } from "@noble/curves/ed25519.js";
import * as strictEd25519 from "../../lib/ed25519";
import { createSigner, generateKeypair, keypairFromSecretKey, verifySignature } from "../../lib/ed25519";
import { VerifyPool } from "../../lib/verify-pool";
import { decodeBase58, encodeBase58 } from "../../lib/encoding";

const hex = (s: string) => Uint8Array.from(Buffer.from(s, "hex"));

/** RFC 8032 §7.1, TEST 1 (empty message) and TEST 2 (one byte 0x72). */
const RFC1 = {
	seed: hex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"),
	publicKey: hex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"),
	message: new Uint8Array(0),
	signature: hex("e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b")
};
const RFC2 = {
	seed: hex("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb"),
	publicKey: hex("3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c"),
	message: Uint8Array.of(0x72),
	signature: hex("92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00")
};

const concat = (a: Uint8Array, b: Uint8Array) => Uint8Array.from([...a, ...b]);

function nobleWallet() {
	const secretKey = ed25519.utils.randomSecretKey();
	const publicKey = ed25519.getPublicKey(secretKey);
	return {
		secretKey,
		publicKey,
		address: encodeBase58(publicKey),
		sign: (message: string) => encodeBase58(ed25519.sign(new TextEncoder().encode(message), secretKey))
	};
}

/** Changes one character of a base58 string to another base58 character. */
function flipChar(value: string, index: number): string {
	const c = value[index];
	return value.slice(0, index) + (c === "2" ? "3" : "2") + value.slice(index + 1);
}

const MESSAGE = "Settlement Coordination Payment Authorization\nversion: 1\namount: 1500000 — ünïcode ✓";

describe("RFC 8032 test vectors", () => {
	it.each([
		["TEST 1", RFC1],
		["TEST 2", RFC2]
	])("%s: keypairFromSecretKey derives the public key and createSigner gives the RFC signature", (_name, v) => {
		const keypair = keypairFromSecretKey(concat(v.seed, v.publicKey));
		expect(keypair.publicKey).toBe(encodeBase58(v.publicKey));
		expect(createSigner(keypair)(v.message)).toBe(encodeBase58(v.signature));
		expect(verifySignature(keypair.publicKey, v.message, encodeBase58(v.signature))).toBe(true);
	});

	it("the RFC 1 signature does not verify the RFC 2 message", () => {
		expect(verifySignature(encodeBase58(RFC1.publicKey), RFC2.message, encodeBase58(RFC1.signature))).toBe(false);
	});
});

describe("noble signs, lib verifies", () => {
	const wallet = nobleWallet();
	const signature = wallet.sign(MESSAGE);

	it("verifies a noble signature over the UTF-8 bytes of the message", () => {
		expect(verifySignature(wallet.address, MESSAGE, signature)).toBe(true);
		expect(verifySignature(wallet.address, new TextEncoder().encode(MESSAGE), signature)).toBe(true);
	});

	it("refuses a tampered message", () => {
		expect(verifySignature(wallet.address, MESSAGE.replace("1500000", "1500001"), signature)).toBe(false);
		expect(verifySignature(wallet.address, `${MESSAGE}\n`, signature)).toBe(false);
	});

	it("refuses a tampered signature (one bit flipped in the middle)", () => {
		const bytes = decodeBase58(signature)!;
		bytes[40] ^= 0x01;
		expect(verifySignature(wallet.address, MESSAGE, encodeBase58(bytes))).toBe(false);
	});

	it("refuses the signature under another key", () => {
		expect(verifySignature(nobleWallet().address, MESSAGE, signature)).toBe(false);
	});

	it("is stable across calls (the public-key cache does not change answers)", () => {
		for (let i = 0; i < 3; i++) {
			expect(verifySignature(wallet.address, MESSAGE, signature)).toBe(true);
			expect(verifySignature(wallet.address, "other", signature)).toBe(false);
		}
	});
});

describe("lib signs, noble verifies", () => {
	const keypair = generateKeypair();
	const sign = createSigner(keypair);

	it("noble's ed25519.verify accepts createSigner's signature", () => {
		const signature = decodeBase58(sign(MESSAGE))!;
		expect(signature).toHaveLength(64);
		expect(ed25519.verify(signature, new TextEncoder().encode(MESSAGE), decodeBase58(keypair.publicKey)!)).toBe(true);
	});

	it("noble refuses it for another message", () => {
		const signature = decodeBase58(sign(MESSAGE))!;
		expect(ed25519.verify(signature, new TextEncoder().encode(`${MESSAGE}.`), decodeBase58(keypair.publicKey)!)).toBe(false);
	});

	it("is deterministic and matches noble's signature for the same seed", () => {
		expect(sign(MESSAGE)).toBe(sign(MESSAGE));
		const nobleSignature = ed25519.sign(new TextEncoder().encode(MESSAGE), keypair.secretKey.subarray(0, 32));
		expect(sign(MESSAGE)).toBe(encodeBase58(nobleSignature));
	});
});

describe("malformed input returns false and never throws", () => {
	const wallet = nobleWallet();
	const signature = wallet.sign(MESSAGE);
	const cases: [string, string, string][] = [
		["address with a non-base58 character (0)", `0${wallet.address.slice(1)}`, signature],
		["address with a non-base58 character (l)", `${wallet.address.slice(0, -1)}l`, signature],
		["empty address", "", signature],
		["31-byte address", encodeBase58(wallet.publicKey.subarray(1)), signature],
		["33-byte address", encodeBase58(concat(wallet.publicKey, Uint8Array.of(1))), signature],
		["signature with a non-base58 character", wallet.address, `O${signature.slice(1)}`],
		["empty signature", wallet.address, ""],
		["63-byte signature", wallet.address, encodeBase58(decodeBase58(signature)!.subarray(1))],
		["65-byte signature", wallet.address, encodeBase58(concat(decodeBase58(signature)!, Uint8Array.of(0)))],
		["signature of 64 zero bytes", wallet.address, encodeBase58(new Uint8Array(64))],
		["all-0xff 32-byte address (not a curve point)", encodeBase58(new Uint8Array(32).fill(0xff)), signature],
		["a one-character change in the address", flipChar(wallet.address, 10), signature]
	];
	it.each(cases)("%s", (_label, address, sig) => {
		expect(() => verifySignature(address, MESSAGE, sig)).not.toThrow();
		expect(verifySignature(address, MESSAGE, sig)).toBe(false);
	});

	it("non-string values from an unchecked body do not throw either", () => {
		expect(verifySignature(undefined as unknown as string, MESSAGE, signature)).toBe(false);
		expect(verifySignature(wallet.address, MESSAGE, null as unknown as string)).toBe(false);
		expect(verifySignature(wallet.address, MESSAGE, 12 as unknown as string)).toBe(false);
	});
});

describe("keypairs", () => {
	it("generateKeypair gives a 64-byte Solana CLI keypair whose halves match", () => {
		const keypair = generateKeypair();
		expect(keypair.secretKey).toHaveLength(64);
		expect(decodeBase58(keypair.publicKey)).toHaveLength(32);
		expect(encodeBase58(ed25519.getPublicKey(keypair.secretKey.subarray(0, 32)))).toBe(keypair.publicKey);
		expect(Buffer.from(keypair.secretKey.subarray(32)).equals(Buffer.from(decodeBase58(keypair.publicKey)!))).toBe(true);
		expect(keypairFromSecretKey(keypair.secretKey).publicKey).toBe(keypair.publicKey);
	});

	it("two generated keypairs differ", () => {
		expect(generateKeypair().publicKey).not.toBe(generateKeypair().publicKey);
	});

	it("keypairFromSecretKey reads a noble (Solana CLI layout) keypair", () => {
		const wallet = nobleWallet();
		expect(keypairFromSecretKey(concat(wallet.secretKey, wallet.publicKey)).publicKey).toBe(wallet.address);
	});

	it("keypairFromSecretKey refuses a 64-byte array whose public half does not match its seed", () => {
		const a = nobleWallet();
		const b = nobleWallet();
		expect(() => keypairFromSecretKey(concat(a.secretKey, b.publicKey))).toThrow(/does not match/);
		const flipped = concat(a.secretKey, a.publicKey);
		flipped[63] ^= 0x80;
		expect(() => keypairFromSecretKey(flipped)).toThrow(/does not match/);
	});

	it.each([0, 32, 63, 65])("keypairFromSecretKey refuses %i bytes", length => {
		expect(() => keypairFromSecretKey(new Uint8Array(length).fill(1))).toThrow(/64 bytes/);
	});
});

/* Strict verification (RFC 8032 §5.1.7 + ed25519-dalek verify_strict): known-answer tests. */

const SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");
/** What plain node:crypto (OpenSSL) answers: the verifier lib/ed25519 must never rely on alone. */
function rawNodeVerify(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): boolean {
	try {
		const key = createPublicKey({ key: Buffer.concat([SPKI_PREFIX, publicKey]), format: "der", type: "spki" });
		return cryptoVerify(null, message, key, signature);
	} catch {
		return false;
	}
}

const ZERO32 = new Uint8Array(32);
const IDENTITY = hex("0100000000000000000000000000000000000000000000000000000000000000");
const L = 2n ** 252n + 27742317777372353535851937790883648493n;
const toLE = (value: bigint) => Uint8Array.from({ length: 32 }, (_, i) => Number((value >> BigInt(8 * i)) & 0xffn));
const fromLE = (bytes: Uint8Array) => BigInt(`0x${Buffer.from(bytes).reverse().toString("hex") || "0"}`);
const toHex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");
/** Fixed pseudo-random messages, so the counts of what raw node:crypto accepts are reproducible. */
const pseudoRandomMessages = (count: number, label: string) =>
	Array.from({ length: count }, (_, i) => Uint8Array.from(createHash("sha256").update(`${label} ${i}`).digest()));

/** Every encoding of the 8 small-order points: 5 y-values and the 2 non-canonical y = p, p + 1, each with both sign bits. */
const SMALL_ORDER_CANONICAL = [
	"0000000000000000000000000000000000000000000000000000000000000000", // y = 0, order 4
	"0000000000000000000000000000000000000000000000000000000000000080", // y = 0, order 4 (other x)
	"0100000000000000000000000000000000000000000000000000000000000000", // y = 1, identity
	"ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // y = p − 1, order 2
	"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05", // order 8
	"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85", // order 8
	"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a", // order 8
	"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa" // order 8
];
const SMALL_ORDER_NON_CANONICAL = [
	"0100000000000000000000000000000000000000000000000000000000000080", // identity, x = 0 with sign bit
	"ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff", // order 2, x = 0 with sign bit
	"edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // y = p ≡ 0
	"edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff", // y = p ≡ 0, sign bit
	"eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // y = p + 1 ≡ 1
	"eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff" // y = p + 1 ≡ 1, sign bit
];
const SMALL_ORDER_ENCODINGS = [...SMALL_ORDER_CANONICAL, ...SMALL_ORDER_NON_CANONICAL];

describe("small-order points, in every encoding", () => {
	it("the list is exactly the torsion subgroup (checked with @noble/curves)", () => {
		expect(new Set(SMALL_ORDER_ENCODINGS).size).toBe(14);
		for (const encoding of SMALL_ORDER_CANONICAL) expect(ed25519.Point.fromBytes(hex(encoding)).isSmallOrder()).toBe(true);
		for (const encoding of SMALL_ORDER_NON_CANONICAL) expect(() => ed25519.Point.fromBytes(hex(encoding))).toThrow();
		// The multiples 0..7 of an order-8 point are the 8 torsion points.
		const generator = ed25519.Point.fromBytes(hex(SMALL_ORDER_CANONICAL[4]));
		const multiples: string[] = [];
		let point = ed25519.Point.ZERO;
		for (let k = 0; k < 8; k++) {
			multiples.push(toHex(point.toBytes()));
			point = point.add(generator);
		}
		expect(point.equals(ed25519.Point.ZERO)).toBe(true);
		expect(new Set(multiples)).toEqual(new Set(SMALL_ORDER_CANONICAL));
	});

	const wallet = nobleWallet();
	const message = new TextEncoder().encode(MESSAGE);
	const realSignature = decodeBase58(wallet.sign(MESSAGE))!;

	it.each(SMALL_ORDER_ENCODINGS)("refused as the public key: %s", encoding => {
		const address = encodeBase58(hex(encoding));
		const signatures = [
			concat(IDENTITY, ZERO32), // the forgery of the bug report
			concat(hex(encoding), ZERO32), // R = A, S = 0
			realSignature
		];
		for (const m of [message, ...pseudoRandomMessages(8, encoding)])
			for (const signature of signatures) {
				expect(verifySignature(address, m, signature)).toBe(false);
				expect(verifySignature(address, m, encodeBase58(signature))).toBe(false);
			}
	});

	it.each(SMALL_ORDER_ENCODINGS)("refused as R with a real key, S = 0 and S = 1: %s", encoding => {
		for (const s of [0n, 1n]) expect(verifySignature(wallet.address, message, concat(hex(encoding), toLE(s)))).toBe(false);
	});

	it("R = identity with S = k·a (a nonce of 0) satisfies the equation for a real key: node:crypto accepts, strict refuses", () => {
		const digest = createHash("sha512").update(wallet.secretKey).digest();
		digest[0] &= 248;
		digest[31] = (digest[31] & 63) | 64;
		const a = fromLE(digest.subarray(0, 32));
		const k = fromLE(createHash("sha512").update(concat(concat(IDENTITY, wallet.publicKey), message)).digest()) % L;
		const signature = concat(IDENTITY, toLE((k * a) % L));
		expect(rawNodeVerify(wallet.publicKey, message, signature)).toBe(true);
		expect(verifySignature(wallet.address, message, signature)).toBe(false);
	});
});

/**
 * "Taming the many EdDSAs" (Chalkias, Garillot, Nikolaenko, 2020): the 12 cases of cases.json in
 * github.com/novifinancial/ed25519-speccheck (commit 65519336fda78a3d016e947df6d82848aca0c9da).
 * Strict ed25519 answers as the "Dalek strict" row of its results.md: only case 3 verifies.
 */
const SPECCHECK_CASES: { message: string; pub_key: string; signature: string }[] = [
	{
		message: "8c93255d71dcab10e8f379c26200f3c7bd5f09d9bc3068d3ef4edeb4853022b6",
		pub_key: "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
		signature: "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a0000000000000000000000000000000000000000000000000000000000000000"
	},
	{
		message: "9bd9f44f4dcc75bd531b56b2cd280b0bb38fc1cd6d1230e14861d861de092e79",
		pub_key: "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
		signature: "f7badec5b8abeaf699583992219b7b223f1df3fbbea919844e3f7c554a43dd43a5bb704786be79fc476f91d3f3f89b03984d8068dcf1bb7dfc6637b45450ac04"
	},
	{
		message: "aebf3f2601a0c8c5d39cc7d8911642f740b78168218da8471772b35f9d35b9ab",
		pub_key: "f7badec5b8abeaf699583992219b7b223f1df3fbbea919844e3f7c554a43dd43",
		signature: "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa8c4bd45aecaca5b24fb97bc10ac27ac8751a7dfe1baff8b953ec9f5833ca260e"
	},
	{
		message: "9bd9f44f4dcc75bd531b56b2cd280b0bb38fc1cd6d1230e14861d861de092e79",
		pub_key: "cdb267ce40c5cd45306fa5d2f29731459387dbf9eb933b7bd5aed9a765b88d4d",
		signature: "9046a64750444938de19f227bb80485e92b83fdb4b6506c160484c016cc1852f87909e14428a7a1d62e9f22f3d3ad7802db02eb2e688b6c52fcd6648a98bd009"
	},
	{
		message: "e47d62c63f830dc7a6851a0b1f33ae4bb2f507fb6cffec4011eaccd55b53f56c",
		pub_key: "cdb267ce40c5cd45306fa5d2f29731459387dbf9eb933b7bd5aed9a765b88d4d",
		signature: "160a1cb0dc9c0258cd0a7d23e94d8fa878bcb1925f2c64246b2dee1796bed5125ec6bc982a269b723e0668e540911a9a6a58921d6925e434ab10aa7940551a09"
	},
	{
		message: "e47d62c63f830dc7a6851a0b1f33ae4bb2f507fb6cffec4011eaccd55b53f56c",
		pub_key: "cdb267ce40c5cd45306fa5d2f29731459387dbf9eb933b7bd5aed9a765b88d4d",
		signature: "21122a84e0b5fca4052f5b1235c80a537878b38f3142356b2c2384ebad4668b7e40bc836dac0f71076f9abe3a53f9c03c1ceeeddb658d0030494ace586687405"
	},
	{
		message: "85e241a07d148b41e47d62c63f830dc7a6851a0b1f33ae4bb2f507fb6cffec40",
		pub_key: "442aad9f089ad9e14647b1ef9099a1ff4798d78589e66f28eca69c11f582a623",
		signature: "e96f66be976d82e60150baecff9906684aebb1ef181f67a7189ac78ea23b6c0e547f7690a0e2ddcd04d87dbc3490dc19b3b3052f7ff0538cb68afb369ba3a514"
	},
	{
		message: "85e241a07d148b41e47d62c63f830dc7a6851a0b1f33ae4bb2f507fb6cffec40",
		pub_key: "442aad9f089ad9e14647b1ef9099a1ff4798d78589e66f28eca69c11f582a623",
		signature: "8ce5b96c8f26d0ab6c47958c9e68b937104cd36e13c33566acd2fe8d38aa19427e71f98a473474f2f13f06f97c20d58cc3f54b8bd0d272f42b695dd7e89a8c22"
	},
	{
		message: "9bedc267423725d473888631ebf45988bad3db83851ee85c85e241a07d148b41",
		pub_key: "f7badec5b8abeaf699583992219b7b223f1df3fbbea919844e3f7c554a43dd43",
		signature: "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff03be9678ac102edcd92b0210bb34d7428d12ffc5df5f37e359941266a4e35f0f"
	},
	{
		message: "9bedc267423725d473888631ebf45988bad3db83851ee85c85e241a07d148b41",
		pub_key: "f7badec5b8abeaf699583992219b7b223f1df3fbbea919844e3f7c554a43dd43",
		signature: "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffca8c5b64cd208982aa38d4936621a4775aa233aa0505711d8fdcfdaa943d4908"
	},
	{
		message: "e96b7021eb39c1a163b6da4e3093dcd3f21387da4cc4572be588fafae23c155b",
		pub_key: "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
		signature: "a9d55260f765261eb9b84e106f665e00b867287a761990d7135963ee0a7d59dca5bb704786be79fc476f91d3f3f89b03984d8068dcf1bb7dfc6637b45450ac04"
	},
	{
		message: "39a591f5321bbe07fd5a23dc2f39d025d74526615746727ceefd6e82ae65c06f",
		pub_key: "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
		signature: "a9d55260f765261eb9b84e106f665e00b867287a761990d7135963ee0a7d59dca5bb704786be79fc476f91d3f3f89b03984d8068dcf1bb7dfc6637b45450ac04"
	}
];

describe("ed25519-speccheck (Taming the many EdDSAs)", () => {
	it.each(SPECCHECK_CASES.map((c, index) => [index, c] as const))("case %i: the strict answer", (index, c) => {
		expect(verifySignature(encodeBase58(hex(c.pub_key)), hex(c.message), hex(c.signature))).toBe(index === 3);
		expect(verifySignature(encodeBase58(hex(c.pub_key)), hex(c.message), encodeBase58(hex(c.signature)))).toBe(index === 3);
	});

	it.each([0, 1, 2])("case %i: plain node:crypto accepts it (small-order key or R): why the checks exist", index => {
		const c = SPECCHECK_CASES[index];
		expect(rawNodeVerify(hex(c.pub_key), hex(c.message), hex(c.signature))).toBe(true);
	});
});

describe("the forgery of the bug report", () => {
	const identityAddress = "4uQeVj5tqViQh7yWWGStvkEG1Zmhx6uasJtWCJziofM";
	const forgery = concat(IDENTITY, ZERO32);

	it("identity key, R = identity, S = 0: node:crypto accepts every message, verifySignature none", () => {
		expect(decodeBase58(identityAddress)).toEqual(IDENTITY);
		for (const m of [...pseudoRandomMessages(20, "identity"), randomBytes(40)]) {
			expect(rawNodeVerify(IDENTITY, m, forgery)).toBe(true);
			expect(verifySignature(identityAddress, m, forgery)).toBe(false);
			expect(verifySignature(identityAddress, m, encodeBase58(forgery))).toBe(false);
		}
	});

	it("the 32-zero-byte key (order 4) is refused for 50 messages, R = identity or R = 0, S = 0", () => {
		const zeroAddress = "11111111111111111111111111111111";
		expect(decodeBase58(zeroAddress)).toEqual(ZERO32);
		let rawAccepted = 0;
		for (const m of pseudoRandomMessages(50, "zero key"))
			for (const signature of [forgery, concat(ZERO32, ZERO32)]) {
				if (rawNodeVerify(ZERO32, m, signature)) rawAccepted++;
				expect(verifySignature(zeroAddress, m, signature)).toBe(false);
			}
		expect(rawAccepted).toBeGreaterThan(0); // about a quarter: the bug
	});

	it("non-canonical encodings of the identity (y = p + 1; x = 0 with sign bit) are refused as key and as R", () => {
		const encodings = [IDENTITY, hex("eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"), hex("0100000000000000000000000000000000000000000000000000000000000080")];
		for (const key of encodings)
			for (const r of encodings)
				for (const m of pseudoRandomMessages(5, "non-canonical")) expect(verifySignature(encodeBase58(key), m, concat(r, ZERO32))).toBe(false);
	});
});

describe("S must be below L", () => {
	const wallet = nobleWallet();
	const message = new TextEncoder().encode(MESSAGE);
	const signature = ed25519.sign(message, wallet.secretKey);

	it("S + L (same point [S]B, non-canonical scalar) is refused", () => {
		const s = fromLE(signature.subarray(32));
		expect(s + L).toBeLessThan(2n ** 256n);
		const malleated = concat(signature.subarray(0, 32), toLE(s + L));
		expect(verifySignature(wallet.address, message, signature)).toBe(true);
		expect(verifySignature(wallet.address, message, malleated)).toBe(false);
		expect(verifySignature(wallet.address, message, encodeBase58(malleated))).toBe(false);
	});

	it("S = L exactly is refused", () => {
		expect(verifySignature(wallet.address, message, concat(signature.subarray(0, 32), toLE(L)))).toBe(false);
	});
});

describe("a normal signature still verifies", () => {
	it("through the base58 and the raw 64-byte forms, with the key checked and built once (cache hit)", () => {
		const wallet = nobleWallet();
		const signature = ed25519.sign(new TextEncoder().encode(MESSAGE), wallet.secretKey);
		// noble's Point is frozen, so the cache is observed on node:crypto's key building instead.
		const buildKey = jest.spyOn(nodeCrypto, "createPublicKey");
		try {
			expect(verifySignature(wallet.address, MESSAGE, encodeBase58(signature))).toBe(true);
			expect(verifySignature(wallet.address, MESSAGE, signature)).toBe(true);
			expect(verifySignature(wallet.address, MESSAGE, Buffer.from(signature))).toBe(true);
			expect(buildKey).toHaveBeenCalledTimes(1);
		} finally {
			buildKey.mockRestore();
		}
	});
});

describe("VerifyPool: the equation on worker threads, the strict checks unchanged", () => {
	const pool = new VerifyPool(2);
	afterAll(() => pool.close());

	it("answers as verifySignature on every speccheck case, the forgery, S + L, and good and tampered signatures", async () => {
		const wallet = nobleWallet();
		const signature = ed25519.sign(new TextEncoder().encode(MESSAGE), wallet.secretKey);
		const malleated = concat(signature.subarray(0, 32), toLE(fromLE(signature.subarray(32)) + L));
		const cases: [address: string, message: string | Uint8Array, signature: string | Uint8Array][] = [
			...SPECCHECK_CASES.map(c => [encodeBase58(hex(c.pub_key)), hex(c.message), hex(c.signature)] as [string, Uint8Array, Uint8Array]),
			["4uQeVj5tqViQh7yWWGStvkEG1Zmhx6uasJtWCJziofM", MESSAGE, concat(IDENTITY, ZERO32)],
			[wallet.address, MESSAGE, malleated],
			[wallet.address, MESSAGE, encodeBase58(signature)],
			[wallet.address, `${MESSAGE}!`, encodeBase58(signature)],
			[nobleWallet().address, MESSAGE, signature],
			[wallet.address, MESSAGE, "not base58 0OIl"]
		];
		// All at once: one event-loop turn's jobs travel as one batch per worker.
		const pooled = await Promise.all(cases.map(([address, message, sig]) => pool.verify(address, message, sig)));
		expect(pooled).toEqual(cases.map(([address, message, sig]) => verifySignature(address, message, sig)));
		expect(pooled.filter(Boolean)).toHaveLength(2); // speccheck case 3 and the good signature
	});

	it("keeps up with many signatures in one turn, each answered for its own job", async () => {
		const wallets = Array.from({ length: 8 }, nobleWallet);
		const jobs = Array.from({ length: 400 }, (_, i) => {
			const message = `${MESSAGE} #${i}`;
			const signature = wallets[i % 8].sign(message);
			return { address: wallets[i % 8].address, message: i % 5 === 0 ? `${message}?` : message, signature };
		});
		const verdicts = await Promise.all(jobs.map(job => pool.verify(job.address, job.message, job.signature)));
		expect(verdicts).toEqual(jobs.map((_, i) => i % 5 !== 0));
	});

	/** 200 jobs, one in four tampered, and what they must answer. */
	function jobs() {
		const wallets = Array.from({ length: 4 }, nobleWallet);
		return Array.from({ length: 200 }, (_, i) => {
			const message = `${MESSAGE} ~${i}`;
			return { address: wallets[i % 4].address, message, signature: wallets[i % 4].sign(i % 4 === 0 ? `${message}?` : message), ok: i % 4 !== 0 };
		});
	}

	it("a worker that dies mid-batch is replaced, and the jobs it had are verified on the calling thread, never refused, and told", async () => {
		const fallbacks: [string, number][] = [];
		const own = new VerifyPool(2, (reason, count) => fallbacks.push([reason, count]));
		try {
			const batch = jobs();
			const verdicts = Promise.all(batch.map(job => own.verify(job.address, job.message, job.signature)));
			// The batch goes out at the end of this turn; then one worker dies with its share (half).
			await new Promise(resolve => setImmediate(resolve));
			await (own as unknown as { workers: { terminate(): Promise<number> }[] }).workers[0].terminate();
			expect(await verdicts).toEqual(batch.map(job => job.ok));
			// Told once, with the jobs it still had (none if it answered before it died).
			expect(fallbacks).toEqual([["worker_lost", expect.any(Number)]]);
			expect(fallbacks[0][1]).toBeLessThanOrEqual(batch.length / 2);
			const again = jobs();
			expect(await Promise.all(again.map(job => own.verify(job.address, job.message, job.signature)))).toEqual(again.map(job => job.ok));
		} finally {
			await own.close();
		}
	});

	/** The pool's insides these tests reach: its workers, and per worker the messages it sent and awaits. */
	const insides = (own: VerifyPool) => own as unknown as { workers: import("node:worker_threads").Worker[]; sent: { jobs: [number, ...unknown[]][] }[][]; flush(): void };

	it("many messages in flight per worker: each answer is taken for the message it answers, none verified again here", async () => {
		const fallbacks: unknown[] = [];
		const own = new VerifyPool(2, (...fallback) => fallbacks.push(fallback));
		try {
			const turns = Array.from({ length: 10 }, jobs);
			const onThisThread = jest.spyOn(strictEd25519, "verifySignature");
			const verdicts: Promise<boolean[]>[] = [];
			for (const batch of turns) {
				verdicts.push(Promise.all(batch.map(job => own.verify(job.address, job.message, job.signature))));
				// Out now, as the end of a turn sends them: all ten go before any answer is read.
				insides(own).flush();
			}
			expect(insides(own).sent.map(queue => queue.length)).toEqual([10, 10]);
			expect(await Promise.all(verdicts)).toEqual(turns.map(batch => batch.map(job => job.ok)));
			expect(onThisThread).not.toHaveBeenCalled();
			expect(fallbacks).toEqual([]);
		} finally {
			jest.restoreAllMocks();
			await own.close();
		}
	});

	it("an answer naming other jobs is not taken, and a replaced worker's last words are ignored: those jobs are verified here, and told", async () => {
		const fallbacks: [string, number][] = [];
		const own = new VerifyPool(1, (reason, count) => fallbacks.push([reason, count]));
		try {
			const forged = jobs().filter(job => !job.ok);
			const claimAllValid = (worker: { emit(event: string, value: unknown): boolean }, shift: number) =>
				worker.emit("message", insides(own).sent[0][0].jobs.map(job => [job[0] + shift, true]));
			// An answer whose ids are not the jobs': each of those is verified on this thread instead.
			let verdicts = Promise.all(forged.map(job => own.verify(job.address, job.message, job.signature)));
			await new Promise(resolve => setImmediate(resolve));
			claimAllValid(insides(own).workers[0], 1);
			expect(await verdicts).toEqual(forged.map(() => false));
			expect(fallbacks).toEqual([["unmatched_answer", forged.length]]);
			// A worker replaced (one of its answers could not be read): whatever it says while it is
			// being stopped is not an answer to its successor's jobs.
			const first = insides(own).workers[0];
			first.emit("messageerror", new Error("an answer that cannot be deserialized"));
			expect(insides(own).workers[0]).not.toBe(first);
			verdicts = Promise.all(forged.map(job => own.verify(job.address, job.message, job.signature)));
			// All in this turn, before the old worker can have stopped: the jobs go out, and it speaks.
			insides(own).flush();
			claimAllValid(first, 0);
			expect(await verdicts).toEqual(forged.map(() => false));
			// The replacement is told (with no job lost: the first message was answered); the old worker's words are not a fallback.
			expect(fallbacks).toEqual([
				["unmatched_answer", forged.length],
				["worker_lost", 0]
			]);
		} finally {
			await own.close();
		}
	});

	it("close() answers the jobs still waiting, and later ones are verified on the calling thread", async () => {
		const own = new VerifyPool(1);
		const batch = jobs();
		const verdicts = Promise.all(batch.map(job => own.verify(job.address, job.message, job.signature)));
		await own.close();
		expect(await verdicts).toEqual(batch.map(job => job.ok));
		expect(await own.verify(batch[1].address, batch[1].message, batch[1].signature)).toBe(true);
	});

	it("an idle pool keeps no process alive", () => {
		// A real signature, so that the job crosses to a worker and back.
		const script = `
			const { VerifyPool } = require(${JSON.stringify(require.resolve("../../dist/lib/verify-pool.js"))});
			const { generateKeypair, createSigner } = require(${JSON.stringify(require.resolve("../../dist/lib/ed25519.js"))});
			const keypair = generateKeypair();
			new VerifyPool(2).verify(keypair.publicKey, "m", createSigner(keypair)("m")).then(ok => console.log("verdict", ok));`;
		const run = spawnSync(process.execPath, ["-e", script], { encoding: "utf8", timeout: 10_000 });
		expect([run.status, run.signal, run.stdout.trim()]).toEqual([0, null, "verdict true"]);
	});
});
