/**
 * Wire encodings of SPEC §0: base58 keys and signatures, lowercase hex digests, u64 amounts.
 * Isomorphic (no Node-only API): the SDK builds the same messages in a browser.
 */
import { sha256 } from "@noble/hashes/sha2.js";
import { bytesToHex } from "@noble/hashes/utils.js";
import { base58 } from "@scure/base";

export const HEX64_PATTERN = "^[0-9a-f]{64}$";
export const AMOUNT_PATTERN = "^(0|[1-9][0-9]{0,19})$";
export const IDENTIFIER_PATTERN = "^[A-Za-z0-9_-]{8,128}$";
export const NONCE_PATTERN = "^[A-Za-z0-9_-]{16,128}$";
/** Base58 digits (Bitcoin's alphabet: no 0, O, I or l); whether they make 32 or 64 bytes is isBase58OfLength's. */
export const BASE58_PATTERN = "^[1-9A-HJ-NP-Za-km-z]+$";
/** ISO-8601 UTC with milliseconds, as `Date.prototype.toISOString` writes it. */
export const ISO_TIME_PATTERN = "^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}\\.\\d{3}Z$";

/** The largest amount an intent, a liquidity or a figure can state (a u64 of base units). */
export const U64_MAX = 18446744073709551615n;
const AMOUNT_RE = new RegExp(AMOUNT_PATTERN);
const BASE58_RE = new RegExp(BASE58_PATTERN);
const ISO_TIME_RE = new RegExp(ISO_TIME_PATTERN);

export function decodeBase58(value: string): Uint8Array | null {
	try {
		return base58.decode(value);
	} catch {
		return null;
	}
}

export function encodeBase58(bytes: Uint8Array): string {
	return base58.encode(bytes);
}

/** BYTE_BOUNDS[k]: base58 of 256^k, the least number that takes k + 1 bytes. */
const BYTE_BOUNDS = Array.from({ length: 65 }, (_, k) => base58.encode(Uint8Array.from({ length: k + 1 }, (_, i) => (i === 0 ? 1 : 0))));

/**
 * Numeric order of two base58 numerals without leading 1s (zeros): the longer is larger, and at
 * equal lengths the string order is the numeric order, the alphabet being in ASCII order.
 */
function compareBase58(a: string, b: string): number {
	if (a.length !== b.length) return a.length - b.length;
	return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * A base58 string that decodes to exactly `length` bytes (32 for addresses, 64 for signatures),
 * told without decoding it: each leading 1 is a zero byte, and the rest is a number that takes the
 * remaining bytes when it lies in [256^(n−1), 256^n). Schemas check every address and signature
 * with this, so the strict signature check's decode is the only one an intent pays for.
 */
export function isBase58OfLength(value: string, length: number): boolean {
	if (!(Number.isInteger(length) && length >= 0 && length < BYTE_BOUNDS.length)) return decodeBase58(value)?.length === length;
	// The empty numeral is no digit at all: zero bytes, as decoding has it.
	if (value.length > 0 && !BASE58_RE.test(value)) return false;
	let zeros = 0;
	while (zeros < value.length && value.charCodeAt(zeros) === 0x31) zeros++;
	const bytes = length - zeros;
	if (bytes < 0) return false;
	const rest = value.slice(zeros);
	if (bytes === 0) return rest.length === 0;
	return compareBase58(rest, BYTE_BOUNDS[bytes - 1]) >= 0 && compareBase58(rest, BYTE_BOUNDS[bytes]) < 0;
}

export function isAmount(value: string): boolean {
	return AMOUNT_RE.test(value) && BigInt(value) <= U64_MAX;
}

/** An ISO time string that is a real instant and round-trips (rejects 2026-02-31 and the like). */
export function isIsoTime(value: string): boolean {
	if (!ISO_TIME_RE.test(value)) return false;
	const ms = Date.parse(value);
	return Number.isFinite(ms) && new Date(ms).toISOString() === value;
}

const utf8 = new TextEncoder();

export function sha256Hex(text: string | Uint8Array): string {
	return bytesToHex(sha256(typeof text === "string" ? utf8.encode(text) : text));
}

/** Canonical JSON (sorted keys, recursively): equal values give equal strings whatever the key order. */
export function canonicalJson(value: unknown): string {
	if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
	if (value && typeof value === "object") {
		// Keys in UTF-16 code unit order (sort's default for strings), appended in one pass.
		let json = "";
		for (const key of Object.keys(value).sort()) {
			const entry = (value as Record<string, unknown>)[key];
			if (entry !== undefined) json += `${json ? "," : ""}${JSON.stringify(key)}:${canonicalJson(entry)}`;
		}
		return `{${json}}`;
	}
	return JSON.stringify(value);
}
