/**
 * SHA-256 on the server, with node:crypto (OpenSSL): about four times faster than the portable
 * implementation lib/encoding.ts keeps for browsers and the SDK. Same digests, byte for byte.
 */
import { createHash } from "node:crypto";
import { canonicalJson } from "./encoding";

export function sha256HexNative(text: string): string {
	return createHash("sha256").update(text, "utf8").digest("hex");
}

/** The digest idempotency compares bodies by: canonical JSON, so key order and absent optional fields do not count. */
export function requestDigest(request: object): string {
	return sha256HexNative(canonicalJson(request));
}
