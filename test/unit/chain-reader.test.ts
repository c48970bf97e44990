/**
 * ChainReader's transport against a real HTTP endpoint on 127.0.0.1 that answers what a hostile
 * or broken RPC provider would: an answer without end, a gzip bomb, integers past 2^53.
 */
import http from "node:http";
import zlib from "node:zlib";
import type { AddressInfo } from "node:net";
import { ChainReader, readFailure } from "../../lib/chain";
import { AnswerTooLargeError } from "../../lib/json-answer";
import { decodeBase58, encodeBase58 } from "../../lib/encoding";
import { generateKeyPairSync, randomBytes, sign } from "node:crypto";

/** Solana's compact-u16 length prefix. */
function compactU16(n: number): number[] {
	const bytes: number[] = [];
	do {
		const low = n & 0x7f;
		n >>= 7;
		bytes.push(n ? low | 0x80 : low);
	} while (n);
	return bytes;
}

/** A legacy transaction of one memo instruction carrying `memoBytes`, signed by its fee payer: what anyone can make. */
function selfSignedMemoTransaction(memoBytes: number): Buffer {
	const { publicKey, privateKey } = generateKeyPairSync("ed25519");
	const payer = publicKey.export({ format: "der", type: "spki" }).subarray(-32);
	const memoProgram = decodeBase58("MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr")!;
	const data = Buffer.alloc(memoBytes, "a");
	const message = Buffer.from([1, 0, 1, ...compactU16(2), ...payer, ...memoProgram, ...randomBytes(32), ...compactU16(1), 1, ...compactU16(0), ...compactU16(data.length), ...data]);
	return Buffer.concat([Buffer.from(compactU16(1)), sign(null, message, privateKey), message]);
}

type Answer = (res: http.ServerResponse, call: { id: unknown; method: string }) => void;

let server: http.Server;
let url: string;
let answer: Answer;
/** Bytes the endpoint managed to hand to its socket for the last answer, and whether the reader hung up first. */
let sent = 0;
let hungUp = false;

beforeAll(async () => {
	server = http.createServer((req, res) => {
		let body = "";
		req.on("data", chunk => (body += chunk));
		req.on("end", () => answer(res, JSON.parse(body) as { id: unknown; method: string }));
	});
	await new Promise<void>(resolve => server.listen(0, "127.0.0.1", resolve));
	url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
	server.closeAllConnections();
	await new Promise(resolve => server.close(resolve));
});

/** An answer that never ends: a result's padding written in 64 KB chunks for as long as the reader reads. */
const endless: Answer = (res, call) => {
	sent = 0;
	hungUp = false;
	res.writeHead(200, { "content-type": "application/json" });
	res.write(`{"jsonrpc":"2.0","id":${JSON.stringify(call.id)},"result":{"padding":"`);
	const chunk = "x".repeat(64 * 1024);
	const more = () => {
		while (!res.destroyed && sent < 512 * 1024 * 1024) {
			sent += chunk.length;
			if (!res.write(chunk)) return void res.once("drain", more);
		}
	};
	res.on("close", () => (hungUp = true));
	more();
};

describe("ChainReader: an RPC answer is read up to a bound", () => {
	it("stops reading an answer past its bound, and hangs up on the endpoint", async () => {
		answer = endless;
		const reader = new ChainReader(url, 10_000, 1024 * 1024);
		const read = reader.blockHeight();
		await expect(read).rejects.toBeInstanceOf(AnswerTooLargeError);
		await read.catch(err => expect(readFailure(err)).toBe("AnswerTooLargeError"));
		// Cut off about the bound (plus what the sockets held), not after the endpoint's 512 MB.
		await new Promise(resolve => setTimeout(resolve, 50));
		expect(hungUp).toBe(true);
		expect(sent).toBeLessThan(64 * 1024 * 1024);
	});

	it("counts the bytes once decoded: a gzip bomb is cut off too", async () => {
		// 64 MB of one letter, about 64 KB compressed.
		const bomb = zlib.gzipSync(Buffer.from(`{"jsonrpc":"2.0","id":"0","result":{"padding":"${"x".repeat(64 * 1024 * 1024)}"}}`));
		expect(bomb.length).toBeLessThan(1024 * 1024);
		answer = res => res.writeHead(200, { "content-type": "application/json", "content-encoding": "gzip" }).end(bomb);
		await expect(new ChainReader(url, 10_000, 1024 * 1024).slot()).rejects.toBeInstanceOf(AnswerTooLargeError);
	});

	it("reads a height, a slot, a hash or a status up to 16 KB, whatever the reader's bound", async () => {
		answer = (res, call) => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ jsonrpc: "2.0", id: call.id, result: "x".repeat(20_000) }));
		const reader = new ChainReader(url);
		await expect(reader.genesisHash()).rejects.toBeInstanceOf(AnswerTooLargeError);
		await expect(reader.slot()).rejects.toBeInstanceOf(AnswerTooLargeError);
	});

	it("takes a transaction longer than the bound for one that cannot be read, not for a failing endpoint", async () => {
		// A landed transaction made long on purpose (large inner calls): its reading lets nothing go.
		const results: Record<string, unknown> = {
			getBlockHeight: 100,
			getSignatureStatuses: { context: { slot: 5 }, value: [{ slot: 5, confirmations: null, err: null, confirmationStatus: "confirmed", status: { Ok: null } }] },
			getTransaction: { slot: 5, meta: { err: null }, transaction: ["x".repeat(300_000), "base64"] }
		};
		answer = (res, call) => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ jsonrpc: "2.0", id: call.id, result: results[call.method] }));
		const read = jest.fn(async () => ({ mismatches: [], related: true }));
		const observation = await new ChainReader(url, 10_000, 256 * 1024).observe(encodeBase58(randomBytes(64)), read);
		expect(observation).toEqual({ blockHeight: 100, status: "landed", content: { mismatches: ["the transaction could not be read"], related: true } });
		expect(read).not.toHaveBeenCalled();
	});

	it("tells a transaction listed but not given yet (a backend a moment behind) from one that cannot be read (a review)", async () => {
		const results: Record<string, unknown> = {
			getBlockHeight: 100,
			getSignatureStatuses: { context: { slot: 5 }, value: [{ slot: 5, confirmations: null, err: null, confirmationStatus: "confirmed", status: { Ok: null } }] },
			getTransaction: null
		};
		answer = (res, call) => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ jsonrpc: "2.0", id: call.id, result: results[call.method] }));
		const read = jest.fn(async () => ({ mismatches: [], related: true }));
		const reader = new ChainReader(url);
		const observation = await reader.observe(encodeBase58(randomBytes(64)), read);
		expect(observation).toEqual({ blockHeight: 100, status: "landed", content: { mismatches: ["the endpoint gives no transaction for it yet"], related: true, notGiven: true } });
		// Nor is an answer that is no transaction at all (a lying endpoint's 0) taken for one.
		results.getTransaction = 0;
		expect(await reader.observe(encodeBase58(randomBytes(64)), read)).toMatchObject({ content: { notGiven: true } });
		expect(read).not.toHaveBeenCalled();
	});

	it("reads a transaction up to 256 KB, whatever the reader's bound (the Cranker's is 8 MB, for pages of signatures)", async () => {
		answer = (res, call) => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ jsonrpc: "2.0", id: call.id, result: { slot: 5, meta: { err: null }, transaction: ["A".repeat(300_000), "base64"] } }));
		await expect(new ChainReader(url).transactionContents(encodeBase58(randomBytes(64)))).rejects.toBeInstanceOf(AnswerTooLargeError);
	});

	it("takes no transaction longer than Solana's 1,232 bytes for one shown, though its fee payer signed it (a review: a made-up one of megabytes was kept ten minutes)", async () => {
		const wire = selfSignedMemoTransaction(5_000);
		const signature = encodeBase58(wire.subarray(1, 65));
		answer = (res, call) => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ jsonrpc: "2.0", id: call.id, result: { slot: 5, meta: { err: null }, transaction: [wire.toString("base64"), "base64"] } }));
		const contents = await new ChainReader(url).transactionContents(signature);
		expect(contents).toMatchObject({ notShown: true, unreadable: expect.stringContaining("more than a Solana transaction holds") });
		// The same transaction at a size Solana allows is shown: only its length was refused.
		const small = selfSignedMemoTransaction(100);
		answer = (res, call) => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ jsonrpc: "2.0", id: call.id, result: { slot: 5, meta: { err: null }, transaction: [small.toString("base64"), "base64"] } }));
		expect(await new ChainReader(url).transactionContents(encodeBase58(small.subarray(1, 65)))).not.toHaveProperty("notShown");
	});

	it("keeps Solana's integers exact, as kit's own transport does", async () => {
		answer = (res, call) => res.writeHead(200, { "content-type": "application/json" }).end(`{"jsonrpc":"2.0","id":${JSON.stringify(call.id)},"result":9007199254740993}`);
		await expect(new ChainReader(url).blockHeight()).resolves.toBe(9007199254740993n);
	});

	it("tells a failure in fixed words, never the endpoint's", async () => {
		answer = res => res.writeHead(503, "FAKE LOG LINE").end("<html>down</html>");
		await expect(new ChainReader(url).slot().catch(readFailure)).resolves.toBe("HTTP 503");
		answer = (res, call) => res.writeHead(200).end(JSON.stringify({ jsonrpc: "2.0", id: call.id, error: { code: -32005, message: "FAKE LOG LINE" } }));
		await expect(new ChainReader(url).slot().catch(readFailure)).resolves.toBe("RPC error -32005");
		// Kit copies an error's data into its context, code included: a code that is no number is not shown.
		answer = (res, call) => res.writeHead(200).end(JSON.stringify({ jsonrpc: "2.0", id: call.id, error: { code: 1, message: "x", data: { __code: "-1)\nFAKE LOG LINE (" } } }));
		await expect(new ChainReader(url).slot().catch(readFailure)).resolves.toBe("RPC error");
		answer = res => res.writeHead(200).end("FAKE LOG LINE");
		await expect(new ChainReader(url).slot().catch(readFailure)).resolves.toBe("SyntaxError");
		answer = (res, call) => res.writeHead(200).end(JSON.stringify({ jsonrpc: "2.0", id: call.id, result: "FAKE LOG LINE" }));
		await expect(new ChainReader(url).slot().catch(readFailure)).resolves.toBe("no height or slot in the answer");
	});
});
