/**
 * The gateway's JSON body reader against body-parser's, over real HTTP: the same bodies give the
 * same req.body (or the same refusal type) and the same raw bytes, whichever path reads them.
 */
import http, { type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import zlib from "node:zlib";
import bodyParser from "body-parser";
import { MAX_BODY_DEPTH, nestsDeeperThan, refusedShape } from "../../lib/json-body";
import { jsonBody, type BodyRequest } from "../../services/json-body";

const LIMIT = 1024;
type Outcome = { body?: unknown; raw?: string; refused?: string };

/** A server whose one route reads the body with `read` and answers what it found. */
async function serve(read: (req: BodyRequest, res: ServerResponse, next: (err?: unknown) => void) => void): Promise<{ url: string; close(): Promise<void> }> {
	const server = http.createServer((req: IncomingMessage, res) =>
		read(req, res, err => {
			const found = req as BodyRequest;
			const outcome: Outcome = err ? { refused: (err as { type?: string }).type ?? "?" } : { body: found.body, raw: found.rawBody?.toString("base64") };
			res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(outcome ?? null));
		})
	);
	await new Promise<void>(resolve => server.listen(0, "127.0.0.1", resolve));
	return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => new Promise(resolve => server.close(() => resolve())) };
}

function send(url: string, body: Buffer | string | null, headers: Record<string, string>, chunked = false): Promise<Outcome> {
	return new Promise((resolve, reject) => {
		const req = http.request(url, { method: "POST", agent: false, headers: body !== null && !chunked ? { ...headers, "content-length": String(Buffer.byteLength(body)) } : headers }, res => {
			const chunks: Buffer[] = [];
			res.on("data", c => chunks.push(c));
			res.on("end", () => resolve(JSON.parse(Buffer.concat(chunks).toString("utf8")) as Outcome));
		});
		req.on("error", reject);
		if (body !== null) req.end(body);
		else req.end();
	});
}

// body-parser with the gateway's rules for __proto__ and for null members (its reviver before this reader).
const reference = bodyParser.json({
	limit: LIMIT,
	strict: true,
	reviver(this: unknown, key: string, value: unknown) {
		if (key === "__proto__") throw new SyntaxError("forbidden key __proto__");
		// The root (key ""): every route takes an object, never an array.
		if (key === "" && Array.isArray(value)) throw new SyntaxError("an array body");
		// null is no value: an object's null member is dropped, an array's null item kept.
		return value === null && !Array.isArray(this) ? undefined : value;
	},
	verify: (req: BodyRequest, _res: ServerResponse, raw: Buffer) => void (req.rawBody = raw)
});

const json = { "content-type": "application/json" };
const CASES: [name: string, body: Buffer | string | null, headers: Record<string, string>, chunked?: boolean][] = [
	["an object", '{"a":1,"b":["x",{"c":null}]}', json],
	["an array", "[1,2]", json],
	["leading whitespace", ' \n\t{"a":1}', json],
	["a byte-order mark", Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{"a":"é"}')]), json],
	["bad UTF-8", Buffer.concat([Buffer.from('{"a":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]), json],
	["an empty body", "", json],
	["no body sent", null, json],
	["whitespace only", "  ", json],
	["a bare string", '"text"', json],
	["a number", "12", json],
	["broken JSON", '{"a":', json],
	["__proto__ at the top", '{"__proto__":{"polluted":true}}', json],
	["__proto__ nested in an array", '{"a":[{"b":{"__proto__":1}}]}', json],
	["__proto__ spelled with escapes", '{"\\u005f_proto__":{"x":1}}', json],
	["a key that only looks like it", '{"__proto":1,"proto__":2}', json],
	["over the limit", `{"a":"${"x".repeat(LIMIT)}"}`, json],
	["over the limit, chunked", `{"a":"${"x".repeat(LIMIT)}"}`, json, true],
	["chunked", '{"a":1}', json, true],
	["charset utf-8, quoted and in capitals", '{"a":1}', { "content-type": 'application/json; charset="UTF-8"' }],
	["another media type", '{"a":1}', { "content-type": "text/plain" }],
	["application/json with a suffix", '{"a":1}', { "content-type": "application/json-patch+json" }],
	["no content-type", '{"a":1}', {}],
	["gzip", zlib.gzipSync('{"a":1}'), { ...json, "content-encoding": "gzip" }],
	["gzip with __proto__", zlib.gzipSync('{"__proto__":{}}'), { ...json, "content-encoding": "gzip" }],
	["gzip over the limit as decoded", zlib.gzipSync(`{"a":"${"x".repeat(10 * LIMIT)}"}`), { ...json, "content-encoding": "gzip" }],
	["an unknown content-encoding", '{"a":1}', { ...json, "content-encoding": "xz" }],
	["charset utf-16", Buffer.from('{"a":1}', "utf16le"), { "content-type": "application/json; charset=utf-16le" }],
	["charset latin-1", '{"a":1}', { "content-type": "application/json; charset=latin1" }],
	// A review's: a charset inside a quoted parameter is no charset, and a no-break space is no space.
	["a charset inside a quoted parameter, then another", '{"a":1}', { "content-type": 'application/json; v="x;charset=utf-8"; charset=utf-16le' }],
	["a no-break space after the media type", '{"a":1}', { "content-type": "application/json\xa0" }],
	["a content-type that does not parse", '{"a":1}', { "content-type": "application/json; charset" }]
];

// A rest parameter: jest passes a done callback to a function declaring more parameters than its row has.
test.each(CASES)("%s: the same body, bytes or refusal as body-parser", async (...[, body, headers, chunked]) => {
	const [ours, theirs] = await Promise.all([serve(jsonBody(LIMIT)), serve(reference)]);
	try {
		const [got, expected] = await Promise.all([send(ours.url, body, headers, chunked), send(theirs.url, body, headers, chunked)]);
		expect(got).toStrictEqual(expected);
	} finally {
		await Promise.all([ours.close(), theirs.close()]);
	}
});

test("refusedShape finds __proto__ at every depth, and only own keys named so", () => {
	expect(refusedShape(JSON.parse('{"a":{"b":[1,{"__proto__":0}]}}'))).toBe("The body holds the key __proto__");
	expect(refusedShape({ a: { b: [1, { c: 0 }] } })).toBeNull();
	expect(refusedShape(Object.create({ inherited: 1 }))).toBeNull();
});

test("refusedShape drops null members of objects at every depth (null is no value), and keeps null items of arrays for the schema to refuse", () => {
	const body = JSON.parse('{"a":null,"b":{"c":null,"d":[null,{"e":null,"f":0}]},"g":""}');
	expect(refusedShape(body)).toBeNull();
	expect(body).toEqual({ b: { d: [null, { f: 0 }] }, g: "" });
});

test("refusedShape refuses nesting past MAX_BODY_DEPTH, walking any depth JSON.parse takes without overflowing the call stack", () => {
	const nested = (levels: number) => JSON.parse('{"a":'.repeat(levels - 1) + "[]" + "}".repeat(levels - 1));
	expect(refusedShape(nested(MAX_BODY_DEPTH))).toBeNull();
	expect(refusedShape(nested(MAX_BODY_DEPTH + 1))).toBe(`The body nests deeper than ${MAX_BODY_DEPTH} levels`);
	const levels = 200_000;
	expect(refusedShape(JSON.parse("[".repeat(levels) + "]".repeat(levels)))).toMatch(/nests deeper/);
	expect(refusedShape(JSON.parse('{"a":'.repeat(levels) + '{"__proto__":1}' + "}".repeat(levels)))).toMatch(/nests deeper/);
});

test("nestsDeeperThan counts the brackets of the text's structure, not those inside strings, escaped quotes included, at any depth", () => {
	const deeper = (text: string, limit: number) => nestsDeeperThan(Buffer.from(text), limit);
	const nested = (levels: number) => "[".repeat(levels) + "]".repeat(levels);
	expect([deeper(nested(3), 3), deeper(nested(4), 3), deeper(`{"a":{"b":[1]}}`, 3), deeper(`{"a":{"b":[[1]]}}`, 3)]).toEqual([false, true, false, true]);
	// Brackets in strings, behind escaped quotes and backslashes: no structure.
	expect(deeper(`{"a":"[[[[{{{{"}`, 2)).toBe(false);
	expect(deeper(`{"a":"\\"[[[[\\"","b":"\\\\"}`, 2)).toBe(false);
	expect(deeper(`{"a":"\\\\","b":[[[1]]]}`, 3)).toBe(true);
	// As deep as JSON.parse takes, without recursion; an unterminated string ends the count.
	expect(deeper(`{"x":${nested(200_000)}}`, 64)).toBe(true);
	expect(deeper(`{"x":"${nested(200_000)}`, 64)).toBe(false);
});
