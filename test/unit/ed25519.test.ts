/**
 * lib/ed25519 (node:crypto) against @noble/curves, the library SDK wallets sign with, and against
 * the RFC 8032 §7.1 test vectors.
 */
import { ed25519 } from "@noble/curves/ed25519.js";
import { createSigner, generateKeypair, keypairFromSecretKey, verifySignature } from "../../lib/ed25519";
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
