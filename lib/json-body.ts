/**
 * The shape of a JSON request body, as the gateway reads it and as an owner reads the body a
 * Cranker signed (lib/cranker-call.ts): an object, no `__proto__` at any depth, not too deep, and
 * null members dropped. No framework here: services/json-body.ts is the gateway's reader.
 */

/** A refusal, with body-parser's `type` for it, so that both paths answer the same error. */
export class BodyError extends Error {
	constructor(
		readonly type: "entity.too.large" | "entity.parse.failed" | "request.aborted",
		message: string
	) {
		super(message);
	}
}

/** Deeper than any body of the API nests; the bus's serializer (JSON.stringify) recurses, and overflows at some thousands. */
export const MAX_BODY_DEPTH = 32;

/**
 * Why a parsed JSON body is refused, or null: the key `__proto__` anywhere (JSON.parse makes it an
 * own property), or nesting deeper than MAX_BODY_DEPTH. A walk with its own stack: JSON.parse
 * takes nesting as deep as a body allows (tens of thousands of `[` in 64 KB).
 *
 * On its way it drops every object member whose value is null: null is no value. The validator
 * lets null through wherever a field is optional, and the handlers read an optional field's
 * absence, so a null stood for "given" to them: a submission stored with a null signature, a
 * webhook filter of `{ "tins": null }` taken as no filter. Dropped, a null is as missing: an
 * optional field is left out, a required one is refused (422).
 */
export function refusedShape(value: unknown): string | null {
	// Objects and arrays only, each with its depth (two stacks: no pair allocated per value).
	const pending: object[] = [];
	const depths: number[] = [];
	const push = (item: unknown, depth: number) => {
		if (typeof item !== "object" || item === null) return;
		pending.push(item);
		depths.push(depth);
	};
	push(value, 1);
	while (pending.length) {
		const next = pending.pop()!;
		const depth = depths.pop()!;
		if (depth > MAX_BODY_DEPTH) return `The body nests deeper than ${MAX_BODY_DEPTH} levels`;
		if (Array.isArray(next)) {
			for (const item of next) push(item, depth + 1);
			continue;
		}
		if (Object.hasOwn(next, "__proto__")) return "The body holds the key __proto__";
		const members = next as Record<string, unknown>;
		for (const key in members) {
			if (members[key] === null) delete members[key];
			else push(members[key], depth + 1);
		}
	}
	return null;
}

/** A body of a refused shape, as the refusal both readers answer. */
export function shapeRefusal(value: unknown): BodyError | undefined {
	// Every route's input is an object: an array would reach the schema as fields "0", "1", ….
	const reason = Array.isArray(value) ? "The body is a JSON array; every route takes a JSON object" : refusedShape(value);
	return reason ? new BodyError("entity.parse.failed", reason) : undefined;
}

const WHITESPACE = new Set([" ", "\t", "\n", "\r"]);

/** body-parser's strict JSON (nothing is {}, else an object or array), then the shape every route takes: an object, no __proto__ anywhere. */
export function parseStrictJson(text: string): unknown {
	if (text.length === 0) return {};
	let first = 0;
	while (first < text.length && WHITESPACE.has(text[first])) first++;
	if (text[first] !== "{" && text[first] !== "[") throw new BodyError("entity.parse.failed", "The body is not a JSON object");
	let value: unknown;
	try {
		value = JSON.parse(text);
	} catch {
		throw new BodyError("entity.parse.failed", "The body is not valid JSON");
	}
	const refusal = shapeRefusal(value);
	if (refusal) throw refusal;
	return value;
}

/** A body's bytes as the gateway reads them: UTF-8 as body-parser decodes it (a byte-order mark dropped, bad sequences become U+FFFD), then parseStrictJson. */
export function parseJsonBody(raw: Buffer): unknown {
	const text = raw.toString("utf8");
	return parseStrictJson(text.charCodeAt(0) === 0xfeff ? text.slice(1) : text);
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACE = 0x7d;
const CLOSE_BRACKET = 0x5d;

/**
 * Whether JSON text nests objects and arrays deeper than `limit`, read from its bytes before any
 * parse (brackets inside strings do not count): JSON.parse takes any depth, and whatever then walks
 * the value recursively (the bus's serializer answering a call, a validator) overflows the stack.
 * Strings are skipped with indexOf, so it costs about a quarter of JSON.parse.
 */
export function nestsDeeperThan(bytes: Uint8Array, limit: number): boolean {
	let depth = 0;
	for (let i = 0; i < bytes.length; i++) {
		const byte = bytes[i];
		if (byte === QUOTE) {
			// To the quote that closes it: one after an even run of backslashes.
			for (;;) {
				const close = bytes.indexOf(QUOTE, i + 1);
				if (close === -1) return false;
				let backslashes = 0;
				while (bytes[close - 1 - backslashes] === BACKSLASH) backslashes++;
				i = close;
				if (backslashes % 2 === 0) break;
			}
		} else if (byte === OPEN_BRACE || byte === OPEN_BRACKET) {
			if (++depth > limit) return true;
		} else if (byte === CLOSE_BRACE || byte === CLOSE_BRACKET) depth--;
	}
	return false;
}
