/**
 * HTTP Message Signatures (RFC 9421) with Content-Digest (RFC 9530) in the single profile of
 * SPEC §6.1, by which a Cranker signs its calls to the gateway with its ed25519 key:
 *
 *   Content-Digest: sha-256=:<base64 of SHA-256 of the body bytes>:
 *   Signature-Input: sig1=("@method" "@target-uri" "content-digest");created=<s>;keyid="<base58>";alg="ed25519"
 *   Signature: sig1=:<base64 of the 64-byte ed25519 signature>:
 *
 * The signature base is built by `http-message-signatures`; the Structured Field dictionaries
 * are parsed by its dependency `structured-headers`. The verifier accepts exactly that profile
 * and nothing more (one signature, those three components in that order, the parameters
 * created, keyid and alg="ed25519" only), enforces the ±60 s window itself against the clock it
 * is given, and never throws: a hostile client controls every header, so every refusal is a result.
 *
 * keyid ≠ the body's crankerPubkey, and replays, are the caller's checks.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { httpbis } from "http-message-signatures";
// structured-headers is ESM with a CommonJS build reached through its "exports" map, which the
// project's moduleResolution (node10) does not read: the types come from the CommonJS build's
// declarations, the value from Node's own resolution of the package name.
import type * as StructuredHeaders from "structured-headers/cjs/index.cjs";
import { createSigner, verifySignature, type Keypair } from "./ed25519";
import { decodeBase58, encodeBase58, isBase58OfLength } from "./encoding";

// eslint-disable-next-line @typescript-eslint/no-require-imports
const sf: typeof StructuredHeaders = require("structured-headers");

export const SIGNATURE_LABEL = "sig1";
export const SIGNATURE_ALGORITHM = "ed25519";
/** The covered components, in the order the profile fixes. */
export const COVERED_COMPONENTS: readonly string[] = Object.freeze(["@method", "@target-uri", "content-digest"]);
/** The only signature parameters, every one required. */
export const SIGNATURE_PARAMETERS: readonly string[] = Object.freeze(["created", "keyid", "alg"]);
export const MAX_CLOCK_SKEW_S = 60;
/** A profile header is under 200 characters; anything far longer is refused unparsed. */
export const MAX_SIGNATURE_HEADER_LENGTH = 1024;

const DIGEST_ALGORITHM = "sha-256";
const ED25519_SIGNATURE_LENGTH = 64;
const ED25519_PUBLIC_KEY_LENGTH = 32;

/** The RFC 9530 Content-Digest field value of the exact body bytes: `sha-256=:<base64>:`. */
export function contentDigest(body: string | Uint8Array): string {
	return sf.serializeDictionary(new Map([[DIGEST_ALGORITHM, [sha256(body), new Map()]]]));
}

function sha256(body: string | Uint8Array): Buffer {
	return createHash("sha256")
		.update(typeof body === "string" ? Buffer.from(body, "utf8") : body)
		.digest();
}

export interface SignableRequest {
	readonly method: string;
	/** The absolute target URI, e.g. `http://127.0.0.1:3000/intents/int_1/status`. */
	readonly url: string;
	readonly body: string | Uint8Array;
}

export interface RequestSigningKey {
	/** The Cranker's public key, base58. */
	readonly keyid: string;
	/** Returns the 64-byte ed25519 signature of `data`. */
	sign(data: Uint8Array): Uint8Array | Promise<Uint8Array>;
}

/** A Solana CLI keypair as the key that signs its owner's requests. */
export function keypairSigningKey(keypair: Keypair): RequestSigningKey {
	const sign = createSigner(keypair);
	return { keyid: keypair.publicKey, sign: data => decodeBase58(sign(data))! };
}

/**
 * The headers to add to a request (lowercase names): `content-digest`, `signature-input` and
 * `signature`. `created` defaults to now.
 */
export async function signRequest(request: SignableRequest, key: RequestSigningKey, created: Date = new Date()): Promise<Record<string, string>> {
	const digest = contentDigest(request.body);
	const signed = await httpbis.signMessage(
		{
			key: {
				id: key.keyid,
				alg: SIGNATURE_ALGORITHM,
				sign: async data => Buffer.from(await key.sign(new Uint8Array(data.buffer, data.byteOffset, data.byteLength)))
			},
			name: SIGNATURE_LABEL,
			fields: [...COVERED_COMPONENTS],
			params: [...SIGNATURE_PARAMETERS],
			paramValues: { created }
		},
		{ method: request.method, url: request.url, headers: { "content-digest": digest } }
	);
	const headers = lowercaseHeaders(signed.headers);
	return { "content-digest": digest, "signature-input": headers["signature-input"]!, signature: headers["signature"]! };
}

/**
 * Signs a Cranker's requests with its key, each signature once: ed25519 is deterministic, so the
 * same request (method, URI, body) signed again within the same second would repeat its
 * signature, which the Node refuses as a replay (SPEC §6.1). A repeat takes the next second as
 * `created` instead (the Node accepts up to 60 s ahead).
 */
export class RequestSigner {
	/** The last `created` (unix s) per request, while the Node could still take it as a replay. */
	private readonly lastCreated = new Map<string, number>();

	constructor(private readonly key: RequestSigningKey) {}

	async sign(request: SignableRequest, nowMs = Date.now()): Promise<Record<string, string>> {
		const nowS = Math.floor(nowMs / 1000);
		const id = `${request.method} ${request.url} ${contentDigest(request.body)}`;
		const created = Math.max(nowS, (this.lastCreated.get(id) ?? -Infinity) + 1);
		if (created - nowS > MAX_CLOCK_SKEW_S / 2) throw new Error(`the same request was signed more than ${MAX_CLOCK_SKEW_S / 2} times within a few seconds`);
		if (this.lastCreated.size > 1000) for (const [key, at] of this.lastCreated) if (at < nowS - MAX_CLOCK_SKEW_S) this.lastCreated.delete(key);
		this.lastCreated.set(id, created);
		return signRequest(request, this.key, new Date(created * 1000));
	}
}

function lowercaseHeaders(headers: Record<string, string | string[]>): Record<string, string> {
	const out: Record<string, string> = {};
	for (const [name, value] of Object.entries(headers)) out[name.toLowerCase()] = Array.isArray(value) ? value.join(", ") : value;
	return out;
}

export type SignatureRefusalReason = "missing" | "malformed" | "unsupported" | "stale" | "digest-mismatch" | "bad-signature";

export type SignatureCheck =
	| {
			ok: true;
			/** The Cranker's public key (base58) that made the signature. */
			keyid: string;
			/** The `created` parameter, unix seconds. */
			created: number;
			/** The signature, base64 of its 64 bytes as between the colons of the Signature value: the replay key. */
			signature: string;
	  }
	| { ok: false; status: 401 | 403; reason: SignatureRefusalReason; detail: string };

export interface SignedRequest {
	readonly method: string;
	/** The absolute URI the client called, rebuilt by the server from its public base URL + path and query. */
	readonly targetUri: string;
	/** Header names in any case; a header sent on several lines may be an array. */
	readonly headers: Readonly<Record<string, string | string[] | undefined>>;
	/** The exact body bytes received. */
	readonly body: Uint8Array;
}

class Refusal {
	constructor(
		readonly status: 401 | 403,
		readonly reason: SignatureRefusalReason,
		readonly detail: string
	) {}
}

const refuse = (reason: SignatureRefusalReason, detail: string): Refusal => new Refusal(403, reason, detail);

/**
 * Checks the profile's signature of a request at `nowMs`. Refusals: no Signature and no
 * Signature-Input → 401 "missing"; otherwise 403 with "malformed", "unsupported", "stale",
 * "digest-mismatch" or "bad-signature". Never throws.
 */
export async function verifyRequestSignature(request: SignedRequest, nowMs: number): Promise<SignatureCheck> {
	try {
		return verifyOrRefuse(request, nowMs);
	} catch (error) {
		const refusal =
			error instanceof Refusal ? error : refuse("malformed", `the signature could not be checked: ${error instanceof Error ? error.message : String(error)}`);
		return { ok: false, status: refusal.status, reason: refusal.reason, detail: refusal.detail };
	}
}

function verifyOrRefuse(request: SignedRequest, nowMs: number): SignatureCheck {
	const signatureField = headerValue(request.headers, "signature");
	const inputField = headerValue(request.headers, "signature-input");
	if (signatureField === undefined && inputField === undefined) throw new Refusal(401, "missing", "the request carries no HTTP message signature");
	if (signatureField === undefined) throw refuse("malformed", "Signature-Input without Signature");
	if (inputField === undefined) throw refuse("malformed", "Signature without Signature-Input");

	const signatures = parseDictionaryField("Signature", signatureField);
	const inputs = parseDictionaryField("Signature-Input", inputField);
	if (signatures.size !== 1 || inputs.size !== 1) throw refuse("unsupported", "exactly one signature is accepted");
	const [label, input] = [...inputs][0]!;
	const signatureMember = signatures.get(label);
	if (!signatureMember) throw refuse("malformed", "the Signature and Signature-Input labels do not match");
	if (label !== SIGNATURE_LABEL) throw refuse("unsupported", `the signature label must be ${SIGNATURE_LABEL}`);

	const params = checkSignatureInput(input, inputField);
	const signature = checkSignatureValue(signatureMember);

	const skewMs = Math.abs(nowMs - params.created * 1000);
	if (!(skewMs <= MAX_CLOCK_SKEW_S * 1000)) throw refuse("stale", `created is ${Math.round(skewMs / 1000)} s away from the server's clock (at most ${MAX_CLOCK_SKEW_S} s)`);

	const digestField = headerValue(request.headers, "content-digest");
	checkContentDigest(digestField, request.body);

	const base = signatureBase(request.method, request.targetUri, digestField!, input);
	if (!verifySignature(params.keyid, base, encodeBase58(signature))) throw refuse("bad-signature", "the signature does not verify");
	return { ok: true, keyid: params.keyid, created: params.created, signature: signature.toString("base64") };
}

/** One header's value whatever the case of its name; several lines are rejected, not combined. */
function headerValue(headers: SignedRequest["headers"], name: string): string | undefined {
	const values: string[] = [];
	for (const [key, value] of Object.entries(headers)) {
		if (key.toLowerCase() !== name || value === undefined) continue;
		for (const line of Array.isArray(value) ? value : [value]) {
			if (typeof line !== "string") throw refuse("malformed", `the ${name} header is not text`);
			if (line.trim() !== "") values.push(line);
		}
	}
	if (values.length > 1) throw refuse("unsupported", `the ${name} header is sent more than once`);
	return values[0];
}

function parseDictionaryField(name: string, value: string): StructuredHeaders.Dictionary {
	if (value.length > MAX_SIGNATURE_HEADER_LENGTH) throw refuse("malformed", `the ${name} header is longer than ${MAX_SIGNATURE_HEADER_LENGTH} characters`);
	let parsed: StructuredHeaders.Dictionary;
	try {
		parsed = sf.parseDictionary(value);
	} catch {
		throw refuse("malformed", `the ${name} header is not a structured-field dictionary`);
	}
	return parsed;
}

interface ProfileParameters {
	readonly created: number;
	readonly keyid: string;
}

function checkSignatureInput(input: StructuredHeaders.Item | StructuredHeaders.InnerList, inputField: string): ProfileParameters {
	if (!sf.isInnerList(input)) throw refuse("malformed", "the Signature-Input member is not an inner list");
	const [components, params] = input;
	const covered = components.map(([name, componentParams]) => (typeof name === "string" && componentParams.size === 0 ? name : null));
	if (covered.length !== COVERED_COMPONENTS.length || covered.some((name, i) => name !== COVERED_COMPONENTS[i])) {
		throw refuse("unsupported", `the covered components must be exactly ${COVERED_COMPONENTS.map(c => `"${c}"`).join(" ")}`);
	}
	for (const param of params.keys()) {
		if (!SIGNATURE_PARAMETERS.includes(param)) throw refuse("unsupported", `the signature parameter ${param} is not accepted`);
	}
	const alg = params.get("alg");
	const created = params.get("created");
	const keyid = params.get("keyid");
	if (alg === undefined) throw refuse("malformed", "the signature has no alg");
	if (alg !== SIGNATURE_ALGORITHM) throw refuse("unsupported", `alg must be "${SIGNATURE_ALGORITHM}"`);
	if (created === undefined) throw refuse("malformed", "the signature has no created time");
	// RFC 9421 §2.3: an Integer. The parser gives a Decimal such as 1700000000.0 as the same number,
	// so its spelling is read from the field (a key is never inside a string here: keyid is base58).
	if (typeof created !== "number" || !Number.isSafeInteger(created) || /;\s*created=-?\d+\./.test(inputField)) throw refuse("malformed", "created is not an integer");
	if (keyid === undefined) throw refuse("malformed", "the signature has no keyid");
	if (typeof keyid !== "string" || !isBase58OfLength(keyid, ED25519_PUBLIC_KEY_LENGTH)) {
		throw refuse("malformed", "keyid is not a base58 ed25519 public key");
	}
	return { created, keyid };
}

function checkSignatureValue(member: StructuredHeaders.Item | StructuredHeaders.InnerList): Buffer {
	if (!isByteSequence(member)) throw refuse("malformed", "the Signature member is not a byte sequence");
	const signature = Buffer.from(member[0]);
	if (signature.length !== ED25519_SIGNATURE_LENGTH) throw refuse("malformed", `the signature is ${signature.length} bytes, not ${ED25519_SIGNATURE_LENGTH}`);
	return signature;
}

/** A parameterless Byte Sequence item (the parser returns an ArrayBuffer; checked without `instanceof`, which is realm-bound). */
function isByteSequence(member: StructuredHeaders.Item | StructuredHeaders.InnerList): member is [ArrayBuffer, StructuredHeaders.Parameters] {
	return !sf.isInnerList(member) && Object.prototype.toString.call(member[0]) === "[object ArrayBuffer]" && member[1].size === 0;
}

function checkContentDigest(field: string | undefined, body: Uint8Array): void {
	if (field === undefined) throw refuse("malformed", "the request has no Content-Digest header");
	const digests = parseDictionaryField("Content-Digest", field);
	const member = digests.get(DIGEST_ALGORITHM);
	if (digests.size !== 1 || member === undefined) throw refuse("unsupported", `Content-Digest must hold ${DIGEST_ALGORITHM} alone`);
	if (!isByteSequence(member)) throw refuse("malformed", "the Content-Digest value is not a byte sequence");
	const claimed = Buffer.from(member[0]);
	const actual = sha256(body);
	if (claimed.length !== actual.length || !timingSafeEqual(claimed, actual)) throw refuse("digest-mismatch", "Content-Digest does not match the body");
}

/** The RFC 9421 signature base of the profile, built by the library from the parsed Signature-Input member. */
function signatureBase(method: string, targetUri: string, digestField: string, input: StructuredHeaders.InnerList): string {
	const base = httpbis.createSignatureBase(
		{ fields: input[0].map(item => sf.serializeItem(item)) },
		{ method, url: targetUri, headers: { "content-digest": digestField } }
	);
	base.push(['"@signature-params"', [sf.serializeList([input])]]);
	return httpbis.formatSignatureBase(base);
}
