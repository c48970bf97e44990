/**
 * ed25519 with node:crypto (OpenSSL), about ten times faster at verifying than pure JS. Keys are
 * raw 32-byte values wrapped in the fixed DER prefixes of RFC 8410.
 */
import { createPrivateKey, createPublicKey, generateKeyPairSync, sign, verify, type KeyObject } from "node:crypto";
import { decodeBase58, encodeBase58 } from "./encoding";

const SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");
const PKCS8_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex");

/** Public-key objects per base58 address: building one costs more than half a verification. */
const publicKeyCache = new Map<string, KeyObject | null>();
const PUBLIC_KEY_CACHE_LIMIT = 50_000;

function publicKeyOf(address: string): KeyObject | null {
	let key = publicKeyCache.get(address);
	if (key !== undefined) return key;
	const raw = decodeBase58(address);
	try {
		key = raw?.length === 32 ? createPublicKey({ key: Buffer.concat([SPKI_PREFIX, raw]), format: "der", type: "spki" }) : null;
	} catch {
		key = null;
	}
	// A full cache is dropped whole: cheap, and a hot sender's key is back on its next intent.
	if (publicKeyCache.size >= PUBLIC_KEY_CACHE_LIMIT) publicKeyCache.clear();
	publicKeyCache.set(address, key);
	return key;
}

/** Verifies a base58 ed25519 signature over the UTF-8 bytes of `message` by base58 `address`. */
export function verifySignature(address: string, message: string | Uint8Array, signature: string): boolean {
	const key = publicKeyOf(address);
	const sig = decodeBase58(signature);
	if (!key || sig?.length !== 64) return false;
	try {
		return verify(null, typeof message === "string" ? Buffer.from(message, "utf8") : message, key, sig);
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
