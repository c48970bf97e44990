/**
 * waitForStatus over the intent's event stream (GET /intents/{id}/events) against the real
 * service: resolved by the stream without polling, resumed with Last-Event-ID after a cut
 * connection and across a Node restart, aborted at its timeout, and polling where no stream can
 * be had (429, an unknown intent's 404). EVENT_STREAMS_PER_IP is 1, so a stream left open by a
 * test would refuse the next one: every test also waits for the Node to count none open.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { LocalKeypairSigner, SettlementClient, type PublicMempoolIntent } from "../../sdk";
import type { GenesisRoute } from "../../lib/registry";
import { MINT, newRoute, newWallet, uniqueId, writeSeedFile } from "../helpers/fixtures";
import { SETTLEMENT_MOVES, settlementMove, sleep, startNode, tempDir, type TestNode } from "../helpers/node";

let node: TestNode;
const route: GenesisRoute = newRoute();
const settler = newWallet();
const dataDir = tempDir();
const env = { REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]), EVENT_STREAMS_PER_IP: "1" };

beforeAll(async () => {
	node = await startNode(env, dataDir);
});
afterAll(() => node.stop());

const wait = (ms: number) => new Promise(resolve => setTimeout(resolve, ms));

async function until<T>(probe: () => Promise<T> | T, what: string, timeoutMs = 10_000): Promise<T> {
	const deadline = Date.now() + timeoutMs;
	for (;;) {
		const value = await probe();
		if (value) return value;
		if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
		await wait(25);
	}
}

interface Call {
	method: string;
	path: string;
	/** "error": the fetch threw (nothing listening). */
	status: number | "error";
	lastEventId: string | null;
}

/** A fetch for the SDK that records each request it makes and how it was answered. */
function recordingFetch(): { calls: Call[]; fetch: typeof fetch } {
	const calls: Call[] = [];
	return {
		calls,
		fetch: async (input, init) => {
			const call: Call = { method: init?.method ?? "GET", path: new URL(String(input)).pathname, status: "error", lastEventId: new Headers(init?.headers).get("last-event-id") };
			calls.push(call);
			const answer = await fetch(input, init);
			call.status = answer.status;
			return answer;
		}
	};
}

async function submitted(): Promise<PublicMempoolIntent> {
	const client = new SettlementClient({ baseUrl: node.url });
	const resolved = await client.resolveTin(route.tin);
	const intent = await client.signPayment(LocalKeypairSigner.generate(), { paymentId: uniqueId(), recipientTin: route.tin, route: resolved, tokenMintAddress: MINT, amount: "1250", feeLimit: "5000", expiresAtSlot: 9_000_000 });
	return client.submit(intent);
}

const move = (id: string, step: (typeof SETTLEMENT_MOVES)[number]) => settlementMove(node, settler, id, step);

/** scs_event_streams_open of the intent route, as the Node's Prometheus text reports it. */
async function openStreams(): Promise<number> {
	const { body } = await node.http("GET", "/metrics?format=prometheus");
	const line = (body as string).split("\n").find(l => l.startsWith("scs_event_streams_open{") && l.includes('route="/intents/:id/events"'));
	return line ? Number(line.split(" ").at(-1)) : 0;
}
const noStreamOpen = () => until(async () => (await openStreams()) === 0, "no event stream open");

afterEach(() => noStreamOpen());

describe("waitForStatus over the event stream", () => {
	it("resolves from the stream when the intent is executed: one request, no polling", async () => {
		const intent = await submitted();
		const { calls, fetch } = recordingFetch();
		const waiting = new SettlementClient({ baseUrl: node.url, fetch }).waitForStatus(intent.id, { timeoutMs: 10_000 });
		await until(async () => (await openStreams()) === 1, "the SDK's stream");
		for (const step of SETTLEMENT_MOVES) await move(intent.id, step);
		expect(await waiting).toMatchObject({ id: intent.id, status: "executed", receiverStatus: "CONFIRMED", transactionSignature: "5".repeat(87) });
		expect(calls).toEqual([{ method: "GET", path: `/intents/${intent.id}/events`, status: 200, lastEventId: null }]);
	});

	it("resolves at once for an intent already canceled: the stream's first event is its current state", async () => {
		const intent = await submitted();
		await move(intent.id, SETTLEMENT_MOVES[0]);
		const rejected = await node.as(settler)("PATCH", `/intents/${intent.id}/status`, { status: "REJECTED", crankerPubkey: settler.address, expectedVersion: 4, reason: "ONCHAIN_FAILED: test" });
		expect(rejected.status).toBe(200);
		const { calls, fetch } = recordingFetch();
		expect(await new SettlementClient({ baseUrl: node.url, fetch }).waitForStatus(intent.id, { timeoutMs: 5000 })).toMatchObject({ id: intent.id, status: "canceled", receiverStatus: "REJECTED" });
		expect(calls.map(call => `${call.path} ${call.status}`)).toEqual([`/intents/${intent.id}/events 200`]);
	});

	it("times out with TIMEOUT and the last state it was sent, and closes its stream", async () => {
		const intent = await submitted();
		const { calls, fetch } = recordingFetch();
		const startedAt = Date.now();
		const error = await new SettlementClient({ baseUrl: node.url, fetch }).waitForStatus(intent.id, { timeoutMs: 700 }).catch(err => err);
		// At its timeout, not after the stream's reconnection delay (2 s) or a poll's backoff.
		expect(Date.now() - startedAt).toBeGreaterThanOrEqual(700);
		expect(Date.now() - startedAt).toBeLessThan(1500);
		expect(error).toMatchObject({ name: "SettlementError", type: "TIMEOUT", code: null, data: { intent: { id: intent.id, status: "pending", receiverStatus: "VERIFIED" } } });
		expect(error.message).toBe(`intent ${intent.id} is still VERIFIED after 700 ms`);
		expect(calls.map(call => `${call.path} ${call.status}`)).toEqual([`/intents/${intent.id}/events 200`]);
		// The Node sees the connection closed (afterEach waits for it; here, promptly).
		await until(async () => (await openStreams()) === 0, "the stream closed", 2000);
	});

	it("after a cut connection, resumes with Last-Event-ID: only the changes it missed, no current state again", async () => {
		const intent = await submitted();
		// A proxy between the SDK and the Node that copies what the Node streams and can cut the client's connection.
		const streamed: string[] = [];
		const clients = new Set<http.ServerResponse>();
		const proxy = http.createServer((req, res) => {
			const index = streamed.push("") - 1;
			const upstream = http.request(node.url + req.url, { method: req.method, headers: req.headers }, answer => {
				res.writeHead(answer.statusCode ?? 502, answer.headers);
				answer.on("data", (chunk: Buffer) => (streamed[index] += chunk.toString()));
				answer.pipe(res);
			});
			clients.add(res);
			res.on("close", () => {
				clients.delete(res);
				upstream.destroy();
			});
			req.pipe(upstream);
		});
		await new Promise<void>(resolve => proxy.listen(0, "127.0.0.1", resolve));
		try {
			const { calls, fetch } = recordingFetch();
			const waiting = new SettlementClient({ baseUrl: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`, fetch }).waitForStatus(intent.id, { timeoutMs: 15_000 });
			await until(() => streamed[0]?.includes('"receiverStatus":"VERIFIED"'), "the current state");
			await move(intent.id, SETTLEMENT_MOVES[0]);
			await until(() => streamed[0].includes('"receiverStatus":"CRANKER_LEASED"'), "the lease");
			await wait(200); // delivered to the SDK as well
			for (const res of clients) res.socket?.destroy();
			// While it waits to reconnect (the stream's `retry: 2000`), the intent settles.
			await move(intent.id, SETTLEMENT_MOVES[1]);
			await move(intent.id, SETTLEMENT_MOVES[2]);
			expect(await waiting).toMatchObject({ id: intent.id, status: "executed", receiverStatus: "CONFIRMED" });

			const ids = (text: string) => [...text.matchAll(/^id: (\d+)$/gm)].map(([, id]) => id);
			const states = (text: string) => [...text.matchAll(/"receiverStatus":"([A-Z_]+)"/g)].map(([, state]) => state);
			expect(streamed).toHaveLength(2);
			expect(states(streamed[0])).toEqual(["VERIFIED", "CRANKER_LEASED"]);
			expect(states(streamed[1])).toEqual(["SUBMITTED", "CONFIRMED"]);
			expect(calls).toEqual([
				{ method: "GET", path: `/intents/${intent.id}/events`, status: 200, lastEventId: null },
				{ method: "GET", path: `/intents/${intent.id}/events`, status: 200, lastEventId: ids(streamed[0]).at(-1) }
			]);
			expect(Number(ids(streamed[1])[0])).toBeGreaterThan(Number(ids(streamed[0]).at(-1)));
		} finally {
			proxy.closeAllConnections();
			await new Promise(resolve => proxy.close(resolve));
		}
	});

	it("takes a stream silent past streamSilenceMs for dropped (a half-open connection): reopens it with Last-Event-ID, resolves", async () => {
		const intent = await submitted();
		const { calls, fetch: recording } = recordingFetch();
		// The network loses the first stream after its first bytes, without a close: nothing more arrives, nothing ends.
		let silenced = false;
		const fetch: typeof globalThis.fetch = async (input, init) => {
			const answer = await recording(input, init);
			if (silenced || !String(input).endsWith("/events")) return answer;
			silenced = true;
			const reader = answer.body!.getReader();
			const first = await reader.read();
			const body = new ReadableStream<Uint8Array>({
				start(controller) {
					controller.enqueue(first.value!);
					init?.signal?.addEventListener("abort", () => {
						controller.error(new Error("aborted"));
						reader.cancel().catch(() => {});
					});
				}
			});
			return new Response(body, { status: answer.status, headers: answer.headers });
		};
		const waiting = new SettlementClient({ baseUrl: node.url, fetch, streamSilenceMs: 1000 }).waitForStatus(intent.id, { timeoutMs: 15_000 });
		await until(() => calls.length === 2, "the stream reopened after its silence");
		for (const step of SETTLEMENT_MOVES) await move(intent.id, step);
		expect(await waiting).toMatchObject({ id: intent.id, status: "executed" });
		expect(calls[0]).toMatchObject({ path: `/intents/${intent.id}/events`, status: 200, lastEventId: null });
		expect(calls[1]).toMatchObject({ path: `/intents/${intent.id}/events`, status: 200, lastEventId: expect.stringMatching(/^\d+$/) });
	});

	it("ends when the caller's signal aborts (a page that unmounts: a review): ABORTED, its stream closed, and nothing asked with a signal aborted already", async () => {
		const intent = await submitted();
		const { calls, fetch } = recordingFetch();
		const client = new SettlementClient({ baseUrl: node.url, fetch });
		const leaving = new AbortController();
		const waiting = client.waitForStatus(intent.id, { timeoutMs: Infinity, signal: leaving.signal });
		await until(async () => (await openStreams()) === 1, "the SDK's stream");
		await sleep(200); // its current state read
		const abortedAt = Date.now();
		leaving.abort(new Error("the page went away"));
		const aborted = await waiting.catch((err: unknown) => err);
		expect(aborted).toMatchObject({ type: "ABORTED", message: expect.stringContaining("the page went away"), data: { intent: expect.objectContaining({ id: intent.id, status: "pending" }) } });
		expect(Date.now() - abortedAt).toBeLessThan(1000);
		await noStreamOpen();
		expect(calls).toHaveLength(1);
		await expect(client.waitForStatus(intent.id, { timeoutMs: 10_000, signal: leaving.signal })).rejects.toMatchObject({ type: "ABORTED" });
		expect(calls).toHaveLength(1);
	});

	it("polls once its streams stay mute from their first byte on (a proxy that buffers the body: a review), instead of reopening them until the timeout", async () => {
		const intent = await submitted();
		const { calls, fetch: recording } = recordingFetch();
		// Every stream's headers pass, and nothing of its body ever does.
		const fetch: typeof globalThis.fetch = async (input, init) => {
			const answer = await recording(input, init);
			if (!String(input).endsWith("/events")) return answer;
			void answer.body?.cancel();
			const body = new ReadableStream<Uint8Array>({ start: controller => init?.signal?.addEventListener("abort", () => controller.error(new Error("aborted"))) });
			return new Response(body, { status: answer.status, headers: answer.headers });
		};
		for (const step of SETTLEMENT_MOVES) await move(intent.id, step);
		const waited = await new SettlementClient({ baseUrl: node.url, fetch, streamSilenceMs: 300 }).waitForStatus(intent.id, { timeoutMs: 10_000 });
		expect(waited).toMatchObject({ id: intent.id, status: "executed" });
		expect(calls.filter(call => call.path.endsWith("/events"))).toHaveLength(2);
		expect(calls.at(-1)).toMatchObject({ method: "GET", path: `/intents/${intent.id}`, status: 200 });
	});

	it("follows the intent across a Node restart on the same DATA_DIR: reconnects through the refused connections, resumes, resolves", async () => {
		const intent = await submitted();
		await move(intent.id, SETTLEMENT_MOVES[0]);
		const { calls, fetch } = recordingFetch();
		const baseUrl = node.url;
		const waiting = new SettlementClient({ baseUrl, fetch }).waitForStatus(intent.id, { timeoutMs: 20_000 });
		await until(async () => (await openStreams()) === 1, "the SDK's stream");
		await node.stop();
		await wait(2500); // at least one reconnection finds nothing listening
		node = await startNode({ ...env, PORT: new URL(baseUrl).port }, dataDir);
		await until(() => calls.length > 2 && calls.at(-1)!.status === 200, "the reconnection to the restarted Node");
		for (const step of SETTLEMENT_MOVES.slice(1)) await move(intent.id, step);
		expect(await waiting).toMatchObject({ id: intent.id, status: "executed" });

		expect(calls.every(call => call.path === `/intents/${intent.id}/events`)).toBe(true);
		expect(calls[0]).toMatchObject({ status: 200, lastEventId: null });
		expect(calls.slice(1, -1).map(call => call.status)).toContain("error");
		// The reconnections named the last event it had, the lease (the stream's first event was its
		// current state), every other one: after a failed one, the next goes without Last-Event-ID.
		const resumedAt = calls[1].lastEventId;
		expect(resumedAt).toMatch(/^\d+$/);
		expect(calls.slice(1).map(call => call.lastEventId)).toEqual(calls.slice(1).map((_, i) => (i % 2 === 0 ? resumedAt : null)));
	}, 40_000);
});

describe("waitForStatus without a stream: it polls", () => {
	it("when the Node refuses the stream (429: EVENT_STREAMS_PER_IP is 1 and another is open)", async () => {
		const other = await submitted();
		const held = new AbortController();
		const holder = await fetch(`${node.url}/intents/${other.id}/events`, { signal: held.signal });
		expect(holder.status).toBe(200);
		try {
			const intent = await submitted();
			const { calls, fetch } = recordingFetch();
			const waiting = new SettlementClient({ baseUrl: node.url, fetch }).waitForStatus(intent.id, { timeoutMs: 10_000 });
			await until(() => calls.some(call => call.path === `/intents/${intent.id}`), "the first poll");
			for (const step of SETTLEMENT_MOVES) await move(intent.id, step);
			expect(await waiting).toMatchObject({ id: intent.id, status: "executed" });
			expect(calls[0]).toEqual({ method: "GET", path: `/intents/${intent.id}/events`, status: 429, lastEventId: null });
			expect(calls.slice(1).length).toBeGreaterThanOrEqual(2);
			expect(calls.slice(1).every(call => call.path === `/intents/${intent.id}` && call.status === 200)).toBe(true);
		} finally {
			held.abort();
		}
	});

	it("rides out polls the network or a proxy fails (the Node restarting), and a poll never outlives timeoutMs", async () => {
		const intent = await submitted();
		const { calls, fetch: recording } = recordingFetch();
		// No stream to be had (429), then the second poll finds nothing listening and the third a proxy's 503.
		let polls = 0;
		const fetch: typeof globalThis.fetch = async (input, init) => {
			if (String(input).endsWith("/events")) return new Response(JSON.stringify({ type: "RATE_LIMITED", message: "busy" }), { status: 429 });
			polls++;
			if (polls === 2) throw new TypeError("fetch failed");
			if (polls === 3) return new Response("Service Unavailable", { status: 503 });
			if (polls === 4) return new Response("<html>a proxy's page</html>", { status: 200 });
			return recording(input, init);
		};
		const waiting = new SettlementClient({ baseUrl: node.url, fetch }).waitForStatus(intent.id, { timeoutMs: 10_000 });
		await until(() => polls >= 5, "a poll after the failed ones");
		for (const step of SETTLEMENT_MOVES) await move(intent.id, step);
		expect(await waiting).toMatchObject({ id: intent.id, status: "executed" });
		expect(calls.every(call => call.status === 200)).toBe(true);

		// A poll that never answers ends at the timeout, with TIMEOUT.
		const hanging: typeof globalThis.fetch = async (input, init) => {
			if (String(input).endsWith("/events")) return new Response("{}", { status: 429 });
			return new Promise<Response>((_, reject) => init?.signal?.addEventListener("abort", () => reject(init.signal!.reason)));
		};
		const startedAt = Date.now();
		const error = await new SettlementClient({ baseUrl: node.url, fetch: hanging }).waitForStatus(intent.id, { timeoutMs: 300 }).catch(err => err);
		expect(error).toMatchObject({ name: "SettlementError", type: "TIMEOUT" });
		expect(Date.now() - startedAt).toBeLessThan(1500);

		// Nothing listening at all: polls retried to the timeout, whose error tells why they failed.
		const nowhere = await new SettlementClient({ baseUrl: "http://127.0.0.1:9" }).waitForStatus(intent.id, { timeoutMs: 500 }).catch(err => err);
		expect(nowhere).toMatchObject({ name: "SettlementError", type: "TIMEOUT", message: expect.stringMatching(/the last poll failed/) });
	});

	it("waits out a poll's 429 for its retry-after, and times out at once when that is past timeoutMs", async () => {
		const intent = await submitted();
		const rateLimited = (retryAfter: string) => new Response(JSON.stringify({ name: "ServiceError", type: "RATE_LIMITED", code: 429, message: "Rate limit exceeded" }), { status: 429, headers: { "retry-after": retryAfter } });
		const pollTimes: number[] = [];
		const fetch: typeof globalThis.fetch = async (input, init) => {
			if (String(input).endsWith("/events")) return new Response("{}", { status: 429 });
			pollTimes.push(Date.now());
			return pollTimes.length === 1 ? rateLimited("1") : globalThis.fetch(input, init);
		};
		const waiting = new SettlementClient({ baseUrl: node.url, fetch }).waitForStatus(intent.id, { timeoutMs: 10_000 });
		await until(() => pollTimes.length >= 2, "the poll after the 429");
		expect(pollTimes[1] - pollTimes[0]).toBeGreaterThanOrEqual(990);
		for (const step of SETTLEMENT_MOVES) await move(intent.id, step);
		expect(await waiting).toMatchObject({ id: intent.id, status: "executed" });

		// Told to come back after the wait would have ended: TIMEOUT now, saying why, not at timeoutMs.
		const startedAt = Date.now();
		const limited: typeof globalThis.fetch = async input => (String(input).endsWith("/events") ? new Response("{}", { status: 429 }) : rateLimited("60"));
		const error = await new SettlementClient({ baseUrl: node.url, fetch: limited }).waitForStatus(intent.id, { timeoutMs: 5000 }).catch(err => err);
		expect(error).toMatchObject({ name: "SettlementError", type: "TIMEOUT", message: expect.stringMatching(/the last poll failed: Rate limit exceeded/) });
		expect(Date.now() - startedAt).toBeLessThan(1000);

		// Any refused call tells the wait asked for, in either form of the header.
		const dated = new SettlementClient({ baseUrl: node.url, fetch: async () => rateLimited(new Date(Date.now() + 30_000).toUTCString()) });
		const refusal = await dated.getIntent(intent.id).catch(err => err);
		expect(refusal).toMatchObject({ type: "RATE_LIMITED", code: 429 });
		expect(refusal.retryAfterMs).toBeGreaterThan(28_000);
		expect(refusal.retryAfterMs).toBeLessThanOrEqual(30_000);
	});

	it("waits out a poll's 503 for its retry-after, at most 5 s (a service starting or draining)", async () => {
		const intent = await submitted();
		const unavailable = (retryAfter: string) => new Response(JSON.stringify({ name: "ServiceError", type: "NOT_READY", code: 503, message: "Not ready" }), { status: 503, headers: { "retry-after": retryAfter } });
		const pollTimes: number[] = [];
		// The first 503 asks for 2 s; the second for an hour.
		const fetch: typeof globalThis.fetch = async (input, init) => {
			if (String(input).endsWith("/events")) return new Response("{}", { status: 429 });
			pollTimes.push(Date.now());
			return pollTimes.length <= 2 ? unavailable(pollTimes.length === 1 ? "2" : "3600") : globalThis.fetch(input, init);
		};
		const waiting = new SettlementClient({ baseUrl: node.url, fetch }).waitForStatus(intent.id, { timeoutMs: 20_000 });
		await until(() => pollTimes.length >= 2, "the poll after the first 503");
		// Not the 100 ms backoff: the 2 s the service asked for.
		expect(pollTimes[1] - pollTimes[0]).toBeGreaterThanOrEqual(1990);
		// A retry-after of an hour waits the cap, not the hour (nor a TIMEOUT at once, as for a 429).
		await until(() => pollTimes.length >= 3, "the poll after the second 503", 8000);
		expect(pollTimes[2] - pollTimes[1]).toBeGreaterThanOrEqual(4990);
		expect(pollTimes[2] - pollTimes[1]).toBeLessThan(7000);
		for (const step of SETTLEMENT_MOVES) await move(intent.id, step);
		expect(await waiting).toMatchObject({ id: intent.id, status: "executed" });

		// A retry-after past the timeout: polled again at the backoff's pace, not given up at once.
		const shortTimes: number[] = [];
		const short: typeof globalThis.fetch = async (input, init) => {
			if (String(input).endsWith("/events")) return new Response("{}", { status: 429 });
			shortTimes.push(Date.now());
			return shortTimes.length === 1 ? unavailable("5") : globalThis.fetch(input, init);
		};
		expect(await new SettlementClient({ baseUrl: node.url, fetch: short }).waitForStatus(intent.id, { timeoutMs: 3000 })).toMatchObject({ status: "executed" });
		expect(shortTimes[1] - shortTimes[0]).toBeLessThan(1000);
	}, 30_000);

	it("for an unknown intent: the stream's 404, then the poll's NOT_FOUND, as without streams", async () => {
		const { calls, fetch } = recordingFetch();
		const error = await new SettlementClient({ baseUrl: node.url, fetch }).waitForStatus("no_such_intent", { timeoutMs: 5000 }).catch(err => err);
		expect(error).toMatchObject({ name: "SettlementError", type: "NOT_FOUND", code: 404 });
		expect(calls.map(call => `${call.path} ${call.status}`)).toEqual(["/intents/no_such_intent/events 404", "/intents/no_such_intent 404"]);
	});
});
