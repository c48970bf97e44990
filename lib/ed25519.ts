/**
 * ed25519 with node:crypto (OpenSSL), about ten times faster at verifying than pure JS. Keys are
 * raw 32-byte values wrapped in the fixed DER prefixes of RFC 8410.
 *
 * Verification is strict ("Strict ed25519, everywhere"): RFC 8032 §5.1.7 plus ed25519-dalek's
 * `verify_strict`. node:crypto alone is not enough: it accepts public keys and R values of small
 * order, so the identity as public key with R = identity and S = 0 verifies EVERY message. A small-order
 * or non-canonical public key or R, and S ≥ L, are therefore refused before OpenSSL checks the equation.
 */
import { createPrivateKey, createPublicKey, generateKeyPairSync, sign, verify, type KeyObject } from "node:crypto";
import { ed25519 } from "@noble/curves/ed25519.js";
import { decodeBase58, encodeBase58 } from "./encoding";

const SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");
const PKCS8_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex");

/** A 256-bit integer as 32 little-endian bytes, the order of encodings on the wire. */
const leBytes = (value: bigint) => Uint8Array.from({ length: 32 }, (_, i) => Number((value >> BigInt(8 * i)) & 0xffn));
const P = 2n ** 255n - 19n;
const P_BYTES = leBytes(P);
/** The group order L, as 32 little-endian bytes. */
const L_BYTES = leBytes(2n ** 252n + 27742317777372353535851937790883648493n);

/**
 * The y-coordinates of the 8 points of small order: 0 (order 4, x = ±√−1), 1 (identity), p − 1 (order 2)
 * and the two of order 8. A point encoding is its y (low 255 bits) plus the sign of x (top bit). Refusing
 * y ≥ p and these five y-values, whatever the sign bit, refuses every encoding of a small-order point:
 * the 8 canonical ones, x = 0 with the sign bit set (y = 1, p − 1), and y = p, p + 1 (the only 255-bit
 * values ≥ p that reduce to a small-order y) — 14 byte strings in all.
 */
const SMALL_ORDER_Y = [
	leBytes(0n),
	leBytes(1n),
	leBytes(P - 1n),
	Buffer.from("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05", "hex"),
	Buffer.from("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a", "hex")
];

/** Compares 32 little-endian bytes of `bytes` at `offset` with `bound`, from the most significant end; `topMask` 0x7f drops a point's sign bit. */
function compareLE(bytes: Uint8Array, offset: number, bound: Uint8Array, topMask = 0xff): number {
	for (let i = 31; i >= 0; i--) {
		const b = i === 31 ? bytes[offset + i] & topMask : bytes[offset + i];
		if (b !== bound[i]) return b < bound[i] ? -1 : 1;
	}
	return 0;
}

/** Byte-level and so cheap enough per signature: a non-canonical y (≥ p) or any small-order encoding. */
function isNonCanonicalOrSmallOrder(bytes: Uint8Array, offset: number): boolean {
	return compareLE(bytes, offset, P_BYTES, 0x7f) >= 0 || SMALL_ORDER_Y.some(y => compareLE(bytes, offset, y, 0x7f) === 0);
}

/** A public key that passed the strict checks: its key object, and its 32 bytes for another thread. */
interface StrictKey {
	object: KeyObject;
	raw: Uint8Array;
}

/** Public keys per base58 address (null: refused): building one costs more than half a verification. */
const publicKeyCache = new Map<string, StrictKey | null>();
const PUBLIC_KEY_CACHE_LIMIT = 50_000;

function publicKeyOf(address: string): StrictKey | null {
	let key = publicKeyCache.get(address);
	if (key !== undefined) return key;
	key = strictPublicKey(decodeBase58(address));
	// A full cache is dropped whole: cheap, and a hot sender's key is back on its next intent.
	if (publicKeyCache.size >= PUBLIC_KEY_CACHE_LIMIT) publicKeyCache.clear();
	publicKeyCache.set(address, key);
	return key;
}

/** A canonical public key not of small order; noble decodes strictly (RFC 8032 §5.1.3). */
function strictPublicKey(raw: Uint8Array | null): StrictKey | null {
	if (raw?.length !== 32 || isNonCanonicalOrSmallOrder(raw, 0)) return null;
	try {
		if (ed25519.Point.fromBytes(raw).isSmallOrder()) return null;
		return { object: createPublicKey({ key: Buffer.concat([SPKI_PREFIX, raw]), format: "der", type: "spki" }), raw };
	} catch {
		return null;
	}
}

/** What is left to check of a signature once its key and encoding passed the strict checks: the equation. */
export interface SignatureEquation {
	key: StrictKey;
	signature: Uint8Array;
}

/**
 * The strict checks of the header that need no curve arithmetic on the signature: a key that is
 * canonical and not of small order, R canonical and not of small order, S < L. Null when refused
 * whatever the message; else the equation still to verify (verifySignature, or a VerifyPool).
 */
export function strictSignatureEquation(address: string, signature: string | Uint8Array): SignatureEquation | null {
	const sig = typeof signature === "string" ? decodeBase58(signature) : signature instanceof Uint8Array ? signature : null;
	// R (bytes 0..31) small-order or non-canonical, or S (bytes 32..63) ≥ L: refused whatever the message.
	if (sig?.length !== 64 || isNonCanonicalOrSmallOrder(sig, 0) || compareLE(sig, 32, L_BYTES) >= 0) return null;
	const key = publicKeyOf(address);
	return key ? { key, signature: sig } : null;
}

/**
 * Verifies an ed25519 signature (base58, or the raw 64 bytes) over `message` (a string is taken as its
 * UTF-8 bytes) by base58 `address`, strictly: see the header. The one verification rule of the code
 * base (lib/verify-pool.ts runs its last step on other threads).
 */
export function verifySignature(address: string, message: string | Uint8Array, signature: string | Uint8Array): boolean {
	const equation = strictSignatureEquation(address, signature);
	if (!equation) return false;
	try {
		return verify(null, typeof message === "string" ? Buffer.from(message, "utf8") : message, equation.key.object, equation.signature);
	} catch {
		return false;
	}
}

/** An ed25519 keypair in Solana CLI form: 64 bytes, the 32-byte seed followed by the public key. */
export interface Keypair {
	readonly publicKey: string;
	readonly secretKey: Uint8Array;
}

export function generateKeypair(): Keypair {
	const { privateKey, publicKey } = generateKeyPairSync("ed25519");
	const seed = privateKey.export({ format: "der", type: "pkcs8" }).subarray(PKCS8_PREFIX.length);
	const pub = publicKey.export({ format: "der", type: "spki" }).subarray(SPKI_PREFIX.length);
	return { publicKey: encodeBase58(pub), secretKey: new Uint8Array(Buffer.concat([seed, pub])) };
}

/** Reads a Solana CLI keypair (64 bytes) and checks that its public half matches its seed. */
export function keypairFromSecretKey(secretKey: Uint8Array): Keypair {
	if (secretKey.length !== 64) throw new Error("a keypair is 64 bytes: a 32-byte seed and a 32-byte public key");
	const derived = createPublicKey(privateKeyOf(secretKey)).export({ format: "der", type: "spki" }).subarray(SPKI_PREFIX.length);
	if (!Buffer.from(secretKey.subarray(32)).equals(derived)) throw new Error("the keypair's public key does not match its secret seed");
	return { publicKey: encodeBase58(derived), secretKey };
}

function privateKeyOf(secretKey: Uint8Array): KeyObject {
	return createPrivateKey({ key: Buffer.concat([PKCS8_PREFIX, secretKey.subarray(0, 32)]), format: "der", type: "pkcs8" });
}

/** Returns a signer bound to the keypair; the private key object is built once. */
export function createSigner(keypair: Keypair): (message: string | Uint8Array) => string {
	const key = privateKeyOf(keypair.secretKey);
	return message => encodeBase58(sign(null, typeof message === "string" ? Buffer.from(message, "utf8") : message, key));
}
