/**
 * The Cranker's search of the chain for an earlier settlement, against a stand-in JSON-RPC that
 * lists a credit account's history: it reads back to the intent's signing time, and no further
 * than any honest history could go, whatever the RPC lists.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { address } from "@solana/kit";
import { Chain } from "../../cranker/chain";
import { encodeBase58 } from "../../lib/encoding";

const ACCOUNT = address(encodeBase58(new Uint8Array(32).fill(9)));
const MEMO = `scs:v1:${"cd".repeat(32)}:${"ab".repeat(32)}`;

/** A stand-in RPC whose history of ACCOUNT is `pages` full pages (null: endless), each entry a second older than the one before. */
async function historyRpc(pages: number | null, newestBlockTime: number, maxPages?: number) {
	let served = 0;
	const server = http.createServer((req, res) => {
		let body = "";
		req.on("data", chunk => (body += chunk));
		req.on("end", () => {
			const { id } = JSON.parse(body) as { id: number };
			const page = served++;
			const entries = pages !== null && page >= pages ? [] : Array.from({ length: 1000 }, (_, i) => {
				const n = page * 1000 + i;
				return { signature: encodeBase58(Buffer.alloc(64, n % 251 + 1)), slot: 1_000_000 - n, err: null, memo: null, blockTime: newestBlockTime - n, confirmationStatus: "finalized" };
			});
			res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ jsonrpc: "2.0", id, result: entries }));
		});
	});
	await new Promise<void>(resolve => server.listen(0, "127.0.0.1", resolve));
	return { chain: new Chain(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, 5000, maxPages), served: () => served, close: () => new Promise(resolve => server.close(resolve)) };
}

test("the search stops at the page that reaches back past the time the intent was signed", async () => {
	const now = Math.floor(Date.now() / 1000);
	const rpc = await historyRpc(50, now);
	try {
		// Signed 2,500 s ago: the third page (entries 2,000–2,999 s old) reaches past it.
		expect(await rpc.chain.findSettlements(ACCOUNT, MEMO, now - 2500)).toEqual([]);
		expect(rpc.served()).toBe(3);
	} finally {
		await rpc.close();
	}
});

test("an RPC that lists an endless history is not believed: the search fails instead of running forever", async () => {
	// Five pages here, not the thousand a Cranker allows: each takes a quarter of a second to read.
	const rpc = await historyRpc(null, 4_000_000_000, 5);
	try {
		await expect(rpc.chain.findSettlements(ACCOUNT, MEMO, 0)).rejects.toThrow(/the RPC lists more than 5000 transactions/);
		expect(rpc.served()).toBe(5);
	} finally {
		await rpc.close();
	}
});

test("a history too long to read before `until` fails the search at the first page that would start after it", async () => {
	// Anyone may name a credit account in transactions of their own: 50 pages, all since the intent was signed.
	const now = Math.floor(Date.now() / 1000);
	const rpc = await historyRpc(50, now);
	try {
		const until = performance.now() + 300;
		await expect(rpc.chain.findSettlements(ACCOUNT, MEMO, now - 100_000, until)).rejects.toThrow(/is longer than this Cranker can read in time \(\d+000 transactions read\)/);
		expect(rpc.served()).toBeGreaterThanOrEqual(1);
		expect(rpc.served()).toBeLessThan(50);
	} finally {
		await rpc.close();
	}
});

test("where the endpoint's history starts: its first block's time, from genesis when that block has none, and no answer when the time is no number (a review)", async () => {
	let time: unknown = 1_700_000_000;
	const server = http.createServer((req, res) => {
		let body = "";
		req.on("data", chunk => (body += chunk));
		req.on("end", () => {
			const { id, method } = JSON.parse(body) as { id: number; method: string };
			res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ jsonrpc: "2.0", id, result: method === "getFirstAvailableBlock" ? 5 : time }));
		});
	});
	await new Promise<void>(resolve => server.listen(0, "127.0.0.1", resolve));
	const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
	try {
		expect(await new Chain(url).historyStartsAt()).toBe(1_700_000_000);
		// A block from before Solana kept block times: history from the beginning.
		time = null;
		expect(await new Chain(url).historyStartsAt()).toBe(0);
		// Anything else is no time, not a history that reaches back (NaN compares false with every time).
		time = "yesterday";
		await expect(new Chain(url).historyStartsAt()).rejects.toThrow(/no time for its first available block/);
	} finally {
		await new Promise(resolve => server.close(resolve));
	}
});
