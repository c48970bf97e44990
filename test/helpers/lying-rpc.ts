/**
 * A JSON-RPC endpoint in front of a real one (the local chain) that passes every call through,
 * except the methods told to lie: a provider that is compromised, or lags. An answer it makes up
 * replaces the upstream's `result`; `down` answers every call 500.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";

/** Makes up a method's result from its params and the upstream's true result (an RpcRefusal: an error answer instead). */
export type Lie = (params: unknown[], truth: unknown) => unknown;

/** A JSON-RPC error a lie answers with, as a backend refuses what it cannot answer (-32016: a minContextSlot it has not reached). */
export class RpcRefusal {
	constructor(
		readonly code: number,
		readonly message: string
	) {}
}

export interface LyingRpc {
	url: string;
	lie(method: string, answer: Lie | null): void;
	/** Stops every lie. */
	honest(): void;
	/** Calls received, by method. */
	calls: Map<string, number>;
	down: boolean;
	/** Each answer waits this long first (a slow provider). */
	delayMs: number;
	close(): Promise<void>;
}

export async function startLyingRpc(upstream: string): Promise<LyingRpc> {
	const lies = new Map<string, Lie>();
	const rpc = { down: false, delayMs: 0, calls: new Map<string, number>() };
	const server = http.createServer((req, res) => {
		const chunks: Buffer[] = [];
		req.on("data", (chunk: Buffer) => chunks.push(chunk));
		req.on("end", async () => {
			if (rpc.delayMs) await new Promise(resolve => setTimeout(resolve, rpc.delayMs));
			if (rpc.down) return void res.writeHead(500).end();
			const body = Buffer.concat(chunks).toString();
			const upstreamAnswer = await fetch(upstream, { method: "POST", headers: { "content-type": "application/json" }, body })
				.then(response => response.text())
				.catch(() => null);
			if (upstreamAnswer === null) return void res.writeHead(502).end();
			const call = JSON.parse(body) as { method: string; params?: unknown[] };
			rpc.calls.set(call.method, (rpc.calls.get(call.method) ?? 0) + 1);
			const lie = lies.get(call.method);
			let answer = upstreamAnswer;
			if (lie) {
				const truth = JSON.parse(upstreamAnswer) as { result?: unknown };
				const made = lie(call.params ?? [], truth.result);
				answer = JSON.stringify(made instanceof RpcRefusal ? { jsonrpc: "2.0", id: (truth as { id?: unknown }).id, error: { code: made.code, message: made.message } } : { ...truth, result: made });
			}
			res.writeHead(200, { "content-type": "application/json" }).end(answer);
		});
	});
	await new Promise<void>(resolve => server.listen(0, "127.0.0.1", resolve));
	return Object.assign(rpc, {
		url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
		lie: (method: string, answer: Lie | null) => void (answer ? lies.set(method, answer) : lies.delete(method)),
		honest: () => lies.clear(),
		close: () =>
			new Promise<void>(resolve => {
				server.closeAllConnections();
				server.close(() => resolve());
			})
	});
}
