/**
 * The gateway's JSON request bodies. Every body is held to `limit` bytes as sent and as decoded,
 * keeps its exact bytes (`rawBody`: a Cranker's signature covers them), must be an object (every
 * route's input is one), and may not hold the key `__proto__` at any depth: it would become the
 * params' prototype when the gateway merges them, dodging the strict schema.
 *
 * The body of almost every request (application/json, UTF-8, no content-encoding) is read here in
 * one pass; any other (gzip, deflate, br or zstd, another charset) goes to body-parser, which
 * decodes those. Its general path (raw-body, iconv-lite, a reviver called on every key) cost
 * each intent about 20 µs, a twentieth of its intake.
 */
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http";
import bodyParser from "body-parser";

export type BodyRequest = IncomingMessage & { body?: unknown; rawBody?: Buffer };
type Next = (err?: unknown) => void;

/** A refusal, with body-parser's `type` for it, so that both paths answer the same error. */
export class BodyError extends Error {
	constructor(
		readonly type: "entity.too.large" | "entity.parse.failed" | "request.aborted",
		message: string
	) {
		super(message);
	}
}

/** body-parser's JSON: the media type only, parameters and case aside. The gateway's check of a body's content-type too. */
export function isJson(contentType: string | undefined): boolean {
	return contentType !== undefined && contentType.split(";", 1)[0].trim().toLowerCase() === "application/json";
}

/** What this reader takes itself: no content-encoding and no charset but UTF-8. */
function isPlainUtf8(headers: IncomingHttpHeaders): boolean {
	const encoding = headers["content-encoding"];
	if (encoding !== undefined && encoding.toLowerCase() !== "identity") return false;
	const charset = /;\s*charset\s*=\s*"?([^";\s]*)/i.exec(headers["content-type"] ?? "")?.[1];
	return charset === undefined || charset.toLowerCase() === "utf-8";
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
function shapeRefusal(value: unknown): BodyError | undefined {
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

/** Middleware: `req.body` (undefined without a body or with another media type) and `req.rawBody`. */
export function jsonBody(limit: number): (req: BodyRequest, res: ServerResponse, next: Next) => void {
	const decoding = bodyParser.json({ limit, strict: true, verify: (req: BodyRequest, _res: ServerResponse, raw: Buffer) => void (req.rawBody = raw) });
	return (req, res, next) => {
		const hasBody = req.headers["transfer-encoding"] !== undefined || (req.headers["content-length"] !== undefined && !Number.isNaN(Number(req.headers["content-length"])));
		if (!hasBody || !isJson(req.headers["content-type"])) return next();
		if (!isPlainUtf8(req.headers))
			return decoding(req, res, err => {
				next(err ?? shapeRefusal(req.body));
			});
		const chunks: Buffer[] = [];
		let size = 0;
		let done = false;
		const finish = (err?: unknown) => {
			if (done) return;
			done = true;
			next(err);
		};
		req.on("data", (chunk: Buffer) => {
			size += chunk.length;
			// Past the limit the rest is read and dropped, so that the answer (413) can be sent.
			if (size <= limit) chunks.push(chunk);
		});
		req.once("error", () => finish(new BodyError("request.aborted", "The request was aborted")));
		req.once("end", () => {
			if (size > limit) return finish(new BodyError("entity.too.large", `The body is over ${limit} bytes`));
			const raw = Buffer.concat(chunks, size);
			req.rawBody = raw;
			try {
				// As body-parser decodes UTF-8: a byte-order mark is dropped, bad sequences become U+FFFD.
				const text = raw.toString("utf8");
				req.body = parseStrictJson(text.charCodeAt(0) === 0xfeff ? text.slice(1) : text);
			} catch (err) {
				return finish(err);
			}
			finish();
		});
	};
}
