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
import { parse as parseContentType } from "content-type";
import { BodyError, parseJsonBody, shapeRefusal } from "../lib/json-body";

export type BodyRequest = IncomingMessage & { body?: unknown; rawBody?: Buffer };
type Next = (err?: unknown) => void;

/**
 * A content-type's media type and charset (lower case) as body-parser reads them, with the same
 * parser (content-type's: a charset inside a quoted parameter is no charset); null when it does
 * not parse, which body-parser takes for another media type.
 */
function mediaType(header: string | undefined): { type: string; charset?: string } | null {
	if (header === undefined) return null;
	// What nearly every client sends.
	if (header === "application/json") return { type: header };
	try {
		const { type, parameters } = parseContentType(header);
		return { type, charset: parameters.charset?.toLowerCase() };
	} catch {
		return null;
	}
}

/** body-parser's JSON: the media type only, parameters and case aside. The gateway's check of a body's content-type too. */
export function isJson(contentType: string | undefined): boolean {
	return mediaType(contentType)?.type === "application/json";
}

/** What this reader takes itself: no content-encoding, and no charset but UTF-8 in the content-type read (`charset`). */
function isPlainUtf8(headers: IncomingHttpHeaders, charset: string | undefined): boolean {
	const encoding = headers["content-encoding"];
	if (encoding !== undefined && encoding.toLowerCase() !== "identity") return false;
	return charset === undefined || charset === "utf-8";
}

/** Middleware: `req.body` (undefined without a body or with another media type) and `req.rawBody`. */
export function jsonBody(limit: number): (req: BodyRequest, res: ServerResponse, next: Next) => void {
	const decoding = bodyParser.json({ limit, strict: true, verify: (req: BodyRequest, _res: ServerResponse, raw: Buffer) => void (req.rawBody = raw) });
	return (req, res, next) => {
		const hasBody = req.headers["transfer-encoding"] !== undefined || (req.headers["content-length"] !== undefined && !Number.isNaN(Number(req.headers["content-length"])));
		// Parsed once: its media type decides whether to read the body, its charset how.
		const media = mediaType(req.headers["content-type"]);
		if (!hasBody || media?.type !== "application/json") return next();
		let done = false;
		const finish = (err?: unknown) => {
			if (done) return;
			done = true;
			next(err);
		};
		if (!isPlainUtf8(req.headers, media.charset)) {
			// body-parser holds the decoded body to the limit; the bytes sent are held to it here (a
			// chunked body states no length): a few kilobytes of JSON behind megabytes of empty gzip
			// members would otherwise be taken, decoded to the last byte.
			let sent = 0;
			const countSent = (chunk: Buffer) => {
				sent += chunk.length;
				if (sent <= limit) return;
				req.off("data", countSent);
				// The decoder is left to wait; the rest is read and dropped, so that the answer (413) can be sent.
				req.unpipe();
				req.resume();
				finish(new BodyError("entity.too.large", `The body is over ${limit} bytes as sent`));
			};
			req.on("data", countSent);
			return decoding(req, res, err => finish(err ?? shapeRefusal(req.body)));
		}
		const chunks: Buffer[] = [];
		let size = 0;
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
				req.body = parseJsonBody(raw);
			} catch (err) {
				return finish(err);
			}
			finish();
		});
	};
}
