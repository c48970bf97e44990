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
/** ISO-8601 UTC with milliseconds, as `Date.prototype.toISOString` writes it. */
export const ISO_TIME_PATTERN = "^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}\\.\\d{3}Z$";

const U64_MAX = 18446744073709551615n;
const AMOUNT_RE = new RegExp(AMOUNT_PATTERN);
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

/** A base58 string that decodes to exactly `length` bytes (32 for addresses, 64 for signatures). */
export function isBase58OfLength(value: string, length: number): boolean {
	return decodeBase58(value)?.length === length;
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
