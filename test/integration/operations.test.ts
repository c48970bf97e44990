/**
 * Operating the service: registry reads, POST /, rate limits, verification without a verifier and
 * the wake route, a restart on the same DATA_DIR, health, and the real `npm start` process
 * (secrets generated but never printed, clean SIGTERM, refusal of a bad registry seed).
 */
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { createNode } from "../../services";
import { loadConfig } from "../../lib/config";
import type { GenesisRoute } from "../../lib/registry";
import { newRoute, newWallet, signedHeartbeat, signedIntent, writeSeedFile } from "../helpers/fixtures";
import { API_KEY, httpClient, startNode, tempDir, worker, type TestNode } from "../helpers/node";
import { rawConnection, type RawConnection } from "../helpers/raw-http";
import { freePort, spawnScript, waitFor } from "../../devkit/process";

const ROOT = path.resolve(__dirname, "../..");
const sender = newWallet();
const wait = (ms: number) => new Promise(resolve => setTimeout(resolve, ms));

describe("registry and mempool status", () => {
	let node: TestNode;
	let route: GenesisRoute;
	const owned = { ...newRoute(), ownerWallet: newWallet().address };

	beforeAll(async () => {
		route = newRoute({ routeVersion: 3 });
		const dataDir = tempDir();
		node = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route, owned]) }, dataDir);
	});
	afterAll(() => node.stop());

	it("GET /registry/tins/{tin} serves the active route; 404 unknown, 422 malformed", async () => {
		const { status, body } = await node.http("GET", `/registry/tins/${route.tin}`);
		expect(status).toBe(200);
		expect(body).toEqual({ ...route, active: true, updatedAt: expect.any(String) });
		expect((await node.http("GET", `/registry/tins/${owned.tin}`)).body).not.toHaveProperty("ownerWallet");
		expect((await node.http("GET", `/registry/tins/${newRoute().tin}`)).body).toMatchObject({ code: 404, type: "NOT_FOUND" });
		for (const bad of ["1234567890", "0123456789", "12345", "abcdefghij"]) expect((await node.http("GET", `/registry/tins/${bad}`)).body).toMatchObject({ code: 422, type: "VALIDATION_ERROR" });
	});

	it("POST / answers MempoolStatusResponse, limited to what `include` asks for", async () => {
		await node.http("POST", "/intents", signedIntent(sender, route));
		const cranker = newWallet();
		expect((await node.as(cranker)("POST", "/crankers/heartbeat", signedHeartbeat(cranker))).status).toBe(200);
		const { status, body } = await node.http("POST", "/", {});
		expect(status).toBe(200);
		expect(body).toMatchObject({
			ok: true,
			healthy: true,
			counts: { VERIFIED: 1, RECEIVED: 0, REJECTED: 0 },
			epoch: { epoch: 1, startedAt: expect.any(String), intents: { received: 1, executed: 0, canceled: 0 }, volume: {} },
			crankersOnline: 1
		});
		const only = await node.http("POST", "/", { include: ["counts"] });
		expect(Object.keys(only.body).sort()).toEqual(["counts", "healthy", "ok"]);
		expect((await node.http("POST", "/", { include: ["everything"] })).status).toBe(422);
	});

	it("keeps an idle keep-alive connection 65 s by default, past the 60 s a proxy's pool keeps it, and says so", async () => {
		// Node's default, 5 s, closed connections that an Ingress (60 s) or fetch's pool (3 s, the
		// 5 s hint less 2) could send the next request on at that moment: a 502, ECONNRESET.
		const connection = await rawConnection(node.url);
		try {
			await connection.ask();
			expect(connection.received()).toMatch(/^Keep-Alive: timeout=65\r$/im);
		} finally {
			connection.socket.destroy();
		}
	});
});

describe("KEEP_ALIVE_TIMEOUT_MS", () => {
	it("is how long an idle connection is kept: open before it, closed after", async () => {
		const dataDir = tempDir();
		const short = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dataDir, [newRoute()]), KEEP_ALIVE_TIMEOUT_MS: "2000" }, dataDir);
		const connection = await rawConnection(short.url);
		try {
			await connection.ask();
			await new Promise(resolve => setTimeout(resolve, 1500));
			await connection.ask();
			await new Promise(resolve => setTimeout(resolve, 1500));
			expect(connection.closed()).toBe(false);
			await waitFor(() => connection.closed() || null, 3_000, "the idle connection closed");
		} finally {
			connection.socket.destroy();
			await short.stop();
		}
	}, 20_000);
});

describe("MAX_CONNECTIONS, MAX_CONNECTIONS_PER_CLIENT and SOCKET_TIMEOUT_MS", () => {
	// Each client below is a loopback address of its own (Linux routes 127/8 to lo), apart from the
	// harness's own connections from 127.0.0.1.
	const refusedCount = async (node: TestNode, limit: string) =>
		Number(new RegExp(`scs_http_connections_refused_total\\{limit="${limit}",node="[^"]+"\\} (\\d+)`).exec((await node.http("GET", "/metrics?format=prometheus")).body)?.[1]);

	it("closes a client's connection past its limit unanswered, and takes the next once one of its own closes; other clients are not held back", async () => {
		const node = await startNode({ MAX_CONNECTIONS_PER_CLIENT: "3", EVENT_STREAMS_PER_IP: "1" });
		const held: RawConnection[] = [];
		try {
			await holdConnections(held, node.url, "127.0.0.2", 3);
			// A review's replay: idle connections, one request each, held a minute apiece by keep-alive.
			const fourth = await rawConnection(node.url, "127.0.0.2");
			await waitFor(() => fourth.closed() || null, 5_000, "the fourth connection closed");
			expect(fourth.received()).toBe("");
			expect(await refusedCount(node, "client")).toBe(1);
			const other = await rawConnection(node.url, "127.0.0.3");
			held.push(other);
			await other.ask();
			held[0].socket.destroy();
			await waitFor(() => tryAsk(node.url, "127.0.0.2"), 5_000, "a connection taken again");
			for (const connection of held.slice(1)) expect(connection.closed()).toBe(false);
		} finally {
			for (const connection of held) connection.socket.destroy();
			await node.stop();
		}
	}, 20_000);

	it("does not count a proxy of TRUST_PROXY, which carries many clients; a client beside it is counted", async () => {
		const node = await startNode({ MAX_CONNECTIONS_PER_CLIENT: "3", EVENT_STREAMS_PER_IP: "1", TRUST_PROXY: "127.0.0.2" });
		const held: RawConnection[] = [];
		try {
			await holdConnections(held, node.url, "127.0.0.2", 5);
			await holdConnections(held, node.url, "127.0.0.3", 3);
			expect(await tryAsk(node.url, "127.0.0.3")).toBe(false);
			expect(await refusedCount(node, "client")).toBe(1);
		} finally {
			for (const connection of held) connection.socket.destroy();
			await node.stop();
		}
	}, 20_000);

	it("closes any connection past the process's limit unanswered", async () => {
		const node = await startNode({ MAX_CONNECTIONS: "5", MAX_CONNECTIONS_PER_CLIENT: "0", EVENT_STREAMS_MAX: "2" });
		const held: RawConnection[] = [];
		try {
			// Idle keep-alive connections, up to the limit (the harness may hold one of its own).
			const refused = await fillUntilRefused(held, node.url, "127.0.0.2", 6);
			expect(refused?.closed()).toBe(true);
			expect(refused?.received()).toBe("");
			expect(held.length).toBeGreaterThanOrEqual(4);
			expect(held.length).toBeLessThanOrEqual(5);
			// Room again once one closes, for any client.
			held.pop()!.socket.destroy();
			await waitFor(() => tryAsk(node.url, "127.0.0.3"), 5_000, "a connection taken again");
			// Read on a connection of its own, which may come before the server has seen tryAsk's close
			// (refused, and counted, too).
			expect(await waitFor(() => refusedCount(node, "process").catch(() => null), 5_000, "the refusals read")).toBeGreaterThanOrEqual(1);
		} finally {
			for (const connection of held) connection.socket.destroy();
			await node.stop();
		}
	}, 20_000);

	it("keeps nothing of a client that pipelined requests and left: answers queued behind another never tell their close", async () => {
		const node = await startNode();
		const api = node.broker.getLocalService("api") as unknown as { inFlight: { size: number } };
		const connection = await rawConnection(node.url, "127.0.0.2");
		try {
			// A review's replay: each left its answer (about 110 KB) in the responses in flight, for
			// good, and SIGTERM's drain waited its 30 s for them. Queued behind an event stream, which
			// never ends, as many as a connection may have in progress.
			connection.socket.write(`GET /events HTTP/1.1\r\nHost: localhost\r\nx-api-key: ${API_KEY}\r\n\r\n` + "GET /openapi.json HTTP/1.1\r\nHost: localhost\r\n\r\n".repeat(15));
			await waitFor(() => api.inFlight.size === 16 || null, 5_000, "pipelined requests in flight");
			connection.socket.destroy();
			await waitFor(() => api.inFlight.size === 0 || null, 5_000, "nothing in flight");
		} finally {
			connection.socket.destroy();
			await node.stop();
		}
	}, 20_000);

	it("closes a connection pipelining more requests than it may have answers in progress (16), instead of holding an answer for each", async () => {
		const node = await startNode();
		const api = node.broker.getLocalService("api") as unknown as { inFlight: { size: number } };
		const connection = await rawConnection(node.url, "127.0.0.2");
		try {
			// A review's replay: 600 answers of about 110 KB each, held for a client that reads a few KB a second.
			connection.socket.pause();
			let mostInFlight = 0;
			const watch = setInterval(() => (mostInFlight = Math.max(mostInFlight, api.inFlight.size)), 1);
			connection.socket.write("GET /openapi.json HTTP/1.1\r\nHost: localhost\r\n\r\n".repeat(600));
			connection.socket.resume();
			await waitFor(() => connection.closed() || null, 5_000, "the connection closed");
			clearInterval(watch);
			expect(mostInFlight).toBeLessThanOrEqual(16);
			await waitFor(() => api.inFlight.size === 0 || null, 5_000, "nothing in flight");
			expect(await refusedCount(node, "pipelined")).toBe(1);
			// Other connections are served as before.
			expect((await node.http("GET", "/health/live")).status).toBe(200);
		} finally {
			connection.socket.destroy();
			await node.stop();
		}
	}, 20_000);

	it("keeps no call of a route answered in the gateway itself (health, event streams) queued behind another answer on a connection that left", async () => {
		const node = await startNode();
		const api = node.broker.getLocalService("api") as unknown as { inFlight: { size: number }; _trackedContexts: unknown[] };
		const connection = await rawConnection(node.url, "127.0.0.2");
		try {
			// A review's replay: an event stream first, which never finishes, then health checks queued
			// behind it. Each kept its call's context (its request and response in it) for good: the
			// gateway's own answers never tell moleculer-web they are done, and a queued answer never closes.
			connection.socket.write(`GET /events HTTP/1.1\r\nHost: localhost\r\nx-api-key: ${API_KEY}\r\n\r\n` + "GET /health/live HTTP/1.1\r\nHost: localhost\r\n\r\n".repeat(15));
			await waitFor(() => api._trackedContexts.length >= 15 || null, 5_000, "the pipelined requests taken");
			connection.socket.destroy();
			await waitFor(() => (api.inFlight.size === 0 && api._trackedContexts.length === 0) || null, 5_000, "no call left");
		} finally {
			connection.socket.destroy();
			await node.stop();
		}
	}, 20_000);

	it("closes a connection whose client stopped reading its answers once they have not moved for SOCKET_TIMEOUT_MS", async () => {
		const dataDir = tempDir();
		const route = newRoute();
		const node = await startNode({ SOCKET_TIMEOUT_MS: "2000", REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]) }, dataDir);
		for (let i = 0; i < 25; i++) await Promise.all(Array.from({ length: 20 }, () => node.http("POST", "/intents", signedIntent(sender, route))));
		// The gateway's end of the connection: the client's, paused, does not see the close.
		const server = (node.broker.getLocalService("api") as unknown as { server: net.Server }).server;
		const accepted: net.Socket[] = [];
		server.on("connection", socket => accepted.push(socket));
		const connection = await rawConnection(node.url, "127.0.0.2");
		try {
			// A review's replay: answers asked for and never read (pages of about a megabyte of work
			// items, more than the kernel's buffers take), their unsent rest held by the process;
			// keep-alive's timer does not run while an answer is unsent.
			connection.socket.pause();
			connection.socket.write(`GET /intent-work?limit=500 HTTP/1.1\r\nHost: localhost\r\nx-api-key: ${API_KEY}\r\n\r\n`.repeat(16));
			const gatewayEnd = await waitFor(() => accepted.find(socket => socket.remotePort === connection.socket.localPort), 5_000, "the gateway's end");
			await waitFor(() => gatewayEnd.destroyed || null, 10_000, "the stalled connection closed by the gateway");
			// A paused socket does not see its close: reading again, the client finds the answers cut off.
			connection.socket.resume();
			await waitFor(() => connection.closed() || null, 5_000, "the close seen");
			expect(connection.received().match(/HTTP\/1\.1 200/g)?.length ?? 0).toBeLessThan(16);
			expect(await refusedCount(node, "pipelined")).toBe(0);
		} finally {
			connection.socket.destroy();
			await node.stop();
		}
	}, 30_000);

	it("gives a request still being served, its answer not begun, another SOCKET_TIMEOUT_MS: silence is not a stuck client", async () => {
		const node = await startNode({ SOCKET_TIMEOUT_MS: "1000", REQUEST_TIMEOUT_MS: "10000" });
		const connection = await rawConnection(node.url, "127.0.0.2");
		try {
			// Its body comes 2.5 s after its headers (the gateway has taken it by then): a slow owner would look the same.
			connection.socket.write("POST /intents HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n");
			await wait(2_500);
			expect(connection.closed()).toBe(false);
			connection.socket.write("{}");
			await waitFor(() => /^HTTP\/1\.1 \d{3} /.test(connection.received()) || null, 5_000, "an answer");
		} finally {
			connection.socket.destroy();
			await node.stop();
		}
	}, 20_000);
});

/** Whether a new connection from `localAddress` gets an answer (it is closed after). */
async function tryAsk(url: string, localAddress: string): Promise<boolean> {
	const connection = await rawConnection(url, localAddress);
	try {
		return await connection.ask().then(() => true, () => false);
	} finally {
		connection.socket.destroy();
	}
}

/** Opens `count` keep-alive connections from `localAddress` into `held`, then asks once on each (so the gateway has counted it). */
async function holdConnections(held: RawConnection[], url: string, localAddress: string, count: number): Promise<void> {
	const opened: RawConnection[] = [];
	for (let i = 0; i < count; i++) opened.push(await rawConnection(url, localAddress));
	held.push(...opened);
	for (const connection of opened) await connection.ask();
}

/**
 * Opens keep-alive connections from `localAddress`, each asked once, into `held` until one is
 * closed unanswered or `held` has `atMost`: the one closed unanswered, or null.
 */
async function fillUntilRefused(held: RawConnection[], url: string, localAddress: string, atMost: number): Promise<RawConnection | null> {
	while (held.length < atMost) {
		const connection = await rawConnection(url, localAddress);
		if (!(await connection.ask().then(() => true, () => false))) return connection;
		held.push(connection);
	}
	return null;
}

describe("rate limiting of public routes", () => {
	it("answers 429 RATE_LIMITED with retry-after past RATE_LIMIT_PER_MIN, per client IP, never on health or worker routes", async () => {
		const node = await startNode({ RATE_LIMIT_PER_MIN: "5", TRUST_PROXY: "true" });
		try {
			const from = (ip: string) => ({ "x-forwarded-for": `1.2.3.4, ${ip}` });
			const answers = [];
			for (let i = 0; i < 6; i++) answers.push(await node.http("GET", "/registry/tins/1234567897", undefined, from("10.0.0.1")));
			expect(answers.slice(0, 5).map(a => a.status)).toEqual([404, 404, 404, 404, 404]);
			expect(answers[5].status).toBe(429);
			expect(answers[5].body).toMatchObject({ code: 429, type: "RATE_LIMITED" });
			expect(Number(answers[5].headers.get("retry-after"))).toBeGreaterThan(0);
			// The limit follows the last x-forwarded-for entry (the proxy's), not the client-supplied ones.
			expect((await node.http("GET", "/registry/tins/1234567897", undefined, from("10.0.0.2"))).status).toBe(404);
			expect((await node.http("GET", "/health/live", undefined, from("10.0.0.1"))).status).toBe(200);
			expect((await node.http("GET", "/intents", undefined, { ...worker, ...from("10.0.0.1") })).status).toBe(200);
			// An IPv6 client by its /64, however written, and an IPv4 one whether IPv4-mapped or not (a
			// review's replay: each address had a budget of its own).
			for (let i = 0; i < 5; i++) expect((await node.http("GET", "/registry/tins/1234567897", undefined, from(`2001:db8:7:7::${i + 1}`))).status).toBe(404);
			for (const other of ["2001:db8:7:7:a:b:c:d", "2001:DB8:7:7:0::99"]) expect((await node.http("GET", "/registry/tins/1234567897", undefined, from(other))).status).toBe(429);
			expect((await node.http("GET", "/registry/tins/1234567897", undefined, from("2001:db8:7:8::1"))).status).toBe(404);
			expect((await node.http("GET", "/registry/tins/1234567897", undefined, from("::ffff:10.0.0.1"))).status).toBe(429);
		} finally {
			await node.stop();
		}
	});

	it("counts POST /intents (served by the gateway's front door) with the other public routes, in one limit per client", async () => {
		const dataDir = tempDir();
		const route = newRoute();
		const node = await startNode({ RATE_LIMIT_PER_MIN: "5", REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]) }, dataDir);
		try {
			const answers = [];
			for (let i = 0; i < 3; i++) answers.push(await node.http("GET", `/registry/tins/${route.tin}`));
			for (let i = 0; i < 3; i++) answers.push(await node.http("POST", "/intents", signedIntent(sender, route)));
			expect(answers.map(a => a.status)).toEqual([200, 200, 200, 201, 201, 429]);
			expect(answers.map(a => a.headers.get("x-rate-limit-remaining"))).toEqual(["4", "3", "2", "1", "0", "0"]);
			expect(answers[5].body).toMatchObject({ code: 429, type: "RATE_LIMITED" });
			expect(Number(answers[5].headers.get("retry-after"))).toBeGreaterThan(0);
			expect((await node.http("GET", `/registry/tins/${route.tin}`)).status).toBe(429);
		} finally {
			await node.stop();
		}
	});
});

describe("POST /intents spelled another way", () => {
	it("/intents/ (through moleculer-web's routing, not the front door) answers as /intents does, with its request id", async () => {
		const dataDir = tempDir();
		const route = newRoute();
		const node = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]) }, dataDir);
		// Raw fetch for /intents/: the document names the path one way.
		const slash = async (body: object, headers: Record<string, string> = {}) => {
			const answer = await fetch(`${node.url}/intents/`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
			return { status: answer.status, headers: answer.headers, body: (await answer.json()) as Record<string, unknown> };
		};
		try {
			const request = signedIntent(sender, route);
			const created = await slash(request, { "x-request-id": "slash-1" });
			expect([created.status, created.headers.get("location"), created.headers.get("x-request-id")]).toEqual([201, `/intents/${created.body.id}`, "slash-1"]);
			const again = await node.http("POST", "/intents", request, { "x-request-id": "plain-1" });
			expect([again.status, again.body, again.headers.get("x-request-id")]).toEqual([200, created.body, "plain-1"]);
			expect((await slash(request)).status).toBe(200);
			const invalid = { ...signedIntent(sender, route), amount: "-1" };
			const [viaSlash, plain] = await Promise.all([slash(invalid), node.http("POST", "/intents", invalid)]);
			expect(viaSlash.body).toEqual(plain.body);
			expect(plain.body).toMatchObject({ code: 422, type: "VALIDATION_ERROR", data: [{ field: "amount", type: "stringPattern" }, { field: "amount", type: "u64" }] });
			// Every answer carries a request id, made up when the client sends none.
			expect(plain.headers.get("x-request-id")).toMatch(/^[0-9a-f-]{36}$/);
		} finally {
			await node.stop();
		}
	});
});

describe("verification without a verifier", () => {
	it("answers 202 RECEIVED, verifies later on POST /internal/wake, and wake is 503 while no verifier runs", async () => {
		const dataDir = tempDir();
		const route = newRoute();
		const seed = writeSeedFile(dataDir, [route]);
		const env = { REGISTRY_SEED_FILE: seed, SWEEP_INTERVAL_MS: "600000", VERIFY_TIMEOUT_MS: "300" };
		const withoutVerifier = await startNode({ ...env, SERVICES: "api,receiver,mempool,payouts,crankers,tin,epochs,network" }, dataDir);
		const request = signedIntent(sender, route);
		// A forgery under a paymentId the real sender will use: unverifiable now, so accepted as work…
		const genuine = signedIntent(sender, route);
		const forged = { ...genuine, senderAuthorizationSignature: newWallet().sign("x") };
		let id: string;
		let forgedId: string;
		try {
			const accepted = await withoutVerifier.http("POST", "/intents", request);
			expect(accepted.status).toBe(202);
			expect(accepted.body).toMatchObject({ receiverStatus: "RECEIVED", status: "pending" });
			id = accepted.body.id;
			expect((await withoutVerifier.http("POST", "/intents", request)).status).toBe(200);
			const acceptedForgery = await withoutVerifier.http("POST", "/intents", forged);
			expect(acceptedForgery.status).toBe(202);
			forgedId = acceptedForgery.body.id;
			// The real sender is not told 409 (another signed body) while nothing holding its paymentId is verified: retry later.
			const held = await withoutVerifier.http("POST", "/intents", genuine);
			expect(held.status).toBe(503);
			expect(held.body).toMatchObject({ type: "NOT_READY", data: { paymentId: genuine.paymentId } });
			expect(Number(held.headers.get("retry-after"))).toBeGreaterThan(0);
			const wake = await withoutVerifier.http("POST", "/internal/wake", undefined, worker);
			expect(wake.body).toMatchObject({ code: 503, type: "VERIFIER_UNAVAILABLE" });
		} finally {
			await withoutVerifier.stop();
		}

		// Same DATA_DIR, now with every service: the accepted intent is still there and gets verified.
		const full = await startNode(env, dataDir);
		try {
			expect((await full.http("GET", `/intents/${id}`)).body.receiverStatus).toBe("RECEIVED");
			const wake = await full.http("POST", "/internal/wake", undefined, worker);
			expect(wake.status).toBe(200);
			expect(wake.body).toEqual({ ok: true, status: { picked: 2, verified: 1, rejected: 1, pending: 0, verifierUnavailable: false } });
			const verified = await full.http("GET", `/intents/${id}`, undefined, worker);
			expect(verified.body.receiverStatus).toBe("VERIFIED");
			expect(verified.body.history.map((h: { state: string }) => h.state)).toEqual(["RECEIVED", "NODE_VERIFYING", "VERIFIED"]);
			expect((await full.http("POST", "/intents", request)).body.receiverStatus).toBe("VERIFIED");

			// …until a verifier sees it is not signed: its record is gone, so the paymentId and the nonce
			// are free, the forgery replays its 400, and the real sender's body is accepted (SPEC §2.1).
			expect((await full.http("GET", `/intents/${forgedId}`)).status).toBe(404);
			expect((await full.http("POST", "/intents", forged)).body).toMatchObject({ code: 400, type: "INVALID_SIGNATURE", data: { paymentId: genuine.paymentId } });
			expect((await full.http("POST", "/intents", genuine)).status).toBe(201);
		} finally {
			await full.stop();
		}
	});
});

describe("restart on the same DATA_DIR", () => {
	it("loses nothing: intents, leases, nonces, heartbeats, the authority key and the epoch survive", async () => {
		const dataDir = tempDir();
		const route = newRoute();
		const cranker = newWallet();
		const env = { REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]), LEASE_TTL_MS: "60000" };
		const first = await startNode(env, dataDir);
		const ids: string[] = [];
		const nonce = "restart_nonce_0123456789";
		let authorization: unknown;
		let before: unknown;
		let figuresBefore: unknown;
		try {
			await first.as(cranker)("POST", "/crankers/heartbeat", signedHeartbeat(cranker));
			ids.push((await first.http("POST", "/intents", signedIntent(sender, route, { senderAuthorizationNonce: nonce }))).body.id);
			for (let i = 0; i < 20; i++) ids.push((await first.http("POST", "/intents", signedIntent(sender, route))).body.id);
			// Over 2,000 more, so that seeding the totals at the next start reads several pages.
			for (let batch = 0; batch < 21; batch++)
				expect((await Promise.all(Array.from({ length: 100 }, () => first.http("POST", "/intents", signedIntent(sender, route))))).every(r => r.status === 201)).toBe(true);
			await first.as(cranker)("PATCH", `/intents/${ids[0]}/status`, { status: "CRANKER_LEASED", crankerPubkey: cranker.address, expectedVersion: 3 });
			authorization = (await first.as(cranker)("POST", "/internal/settlement-authorizations/settlement", { workId: ids[0], crankerPubkey: cranker.address })).body;
			// Settle one, so the restart must also bring back the settled count and volume.
			const patch = (status: string, expectedVersion: number) =>
				first.as(cranker)("PATCH", `/intents/${ids[1]}/status`, { status, crankerPubkey: cranker.address, expectedVersion, transactionSignature: "5".repeat(87), lastValidBlockHeight: 1_000_000 });
			await patch("CRANKER_LEASED", 3);
			await patch("SUBMITTED", 4);
			expect((await patch("CONFIRMED", 5)).status).toBe(200);
			before = await Promise.all(ids.map(id => first.http("GET", `/intents/${id}`, undefined, worker).then(r => r.body)));
			const metrics = (await first.http("GET", "/metrics")).body;
			figuresBefore = { intents: metrics.intents, settled: metrics.settled, epoch: (await first.http("GET", "/epoch/status")).body };
			expect(metrics.settled.count).toBe(1);
		} finally {
			await first.stop();
		}

		const second = await startNode(env, dataDir);
		try {
			const after = await Promise.all(ids.map(id => second.http("GET", `/intents/${id}`, undefined, worker).then(r => r.body)));
			expect(after).toEqual(before);
			const metrics = (await second.http("GET", "/metrics")).body;
			expect({ intents: metrics.intents, settled: metrics.settled, epoch: (await second.http("GET", "/epoch/status")).body }).toEqual(figuresBefore);
			// The Cranker is still known and online, so its lease can move on; the authorization is the same one.
			expect((await second.as(cranker)("POST", "/internal/settlement-authorizations/settlement", { workId: ids[0], crankerPubkey: cranker.address })).body).toEqual(authorization);
			expect((await second.http("POST", "/intents", signedIntent(sender, route, { senderAuthorizationNonce: nonce }))).body.type).toBe("NONCE_REUSED");
			expect((await second.http("POST", "/", { include: ["epoch"] })).body.epoch.epoch).toBe(1);
		} finally {
			await second.stop();
		}
	});
});

describe("health", () => {
	it("is live at once and ready only when every local service has started", async () => {
		// receiver waits for mempool and epochs, which this node does not run: it never becomes ready.
		const config = loadConfig({ PORT: "0", DATA_DIR: tempDir(), WORKER_API_KEYS: API_KEY, SERVICES: "api,receiver" });
		// A bounded wait for the missing dependencies, so the start settles once the test is done.
		const broker = createNode(config, { logger: false, skipProcessEventRegistration: true, dependencyTimeout: 3000 });
		const starting = broker.start().catch(() => undefined);
		try {
			const api = broker.getLocalService("api") as unknown as { server: net.Server };
			await waitFor(() => api.server.listening, 10_000, "the gateway to listen", 20);
			const http = httpClient(`http://127.0.0.1:${(api.server.address() as net.AddressInfo).port}`);
			expect((await http("GET", "/health/live")).status).toBe(200);
			const ready = await http("GET", "/health/ready");
			expect(ready.status).toBe(503);
			expect(ready.body).toMatchObject({ code: 503, type: "NOT_READY" });
			// A route whose owner no process serves yet is not ready either, not a server fault (a review:
			// moleculer-web's refusal carries no type, and was answered 500 INTERNAL_ERROR).
			for (const path of ["/epoch/status", "/registry/tins/1000000001"]) expect((await http("GET", path)).body).toMatchObject({ code: 503, type: "NOT_READY" });
		} finally {
			await broker.stop();
			await starting;
		}
	});
});

/** The compiled service as `npm start` runs it (the test script builds it first). */
const startProcess = (env: Record<string, string>) => spawnScript(path.join(ROOT, "dist/index.js"), env);

/** The service as a process with the probes on a port of their own (HEALTH_PORT), once it listens on PORT. */
async function startWithHealthPort(env: Record<string, string> = {}, route: GenesisRoute = newRoute()) {
	const dataDir = tempDir();
	const [port, healthPort] = [await freePort(), await freePort()];
	const proc = startProcess({ PORT: String(port), HEALTH_PORT: String(healthPort), DATA_DIR: dataDir, REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]), LOG_LEVEL: "info", ...env });
	await waitFor(() => proc.output().includes("listening on port"), 20_000, "the service to listen", 20).catch(err => {
		proc.child.kill("SIGKILL");
		throw err;
	});
	return { proc, port, healthPort };
}

describe("the `npm start` process", () => {
	it("generates its secrets into DATA_DIR without printing them, serves, and exits 0 on SIGTERM after finishing in-flight work", async () => {
		const dataDir = tempDir();
		const route = newRoute();
		const port = await freePort();
		const proc = startProcess({ PORT: String(port), DATA_DIR: dataDir, REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]), LOG_LEVEL: "info" });
		try {
			const http = httpClient(`http://127.0.0.1:${port}`);
			await waitFor(() => proc.output().includes("listening on port"), 20_000, "the service to listen", 20);
			expect((await http("GET", "/health/ready")).status).toBe(200);

			const key = fs.readFileSync(path.join(dataDir, "worker-api-keys"), "utf8").trim();
			const keypair = fs.readFileSync(path.join(dataDir, "node-authority-keypair.json"), "utf8");
			expect(fs.statSync(path.join(dataDir, "worker-api-keys")).mode & 0o777).toBe(0o600);
			expect(proc.output()).toContain(path.join(dataDir, "worker-api-keys"));
			expect(proc.output()).not.toContain(key);
			expect(proc.output()).not.toContain(keypair);
			expect((await http("GET", "/intents", undefined, { "x-api-key": key })).status).toBe(200);

			// Requests in flight when SIGTERM arrives still get their answers.
			const inFlight = Array.from({ length: 20 }, () => http("POST", "/intents", signedIntent(sender, route)));
			await wait(5);
			proc.child.kill("SIGTERM");
			const answers = await Promise.allSettled(inFlight);
			expect(await proc.exited).toBe(0);
			// Those that reached it before SIGTERM are answered 201; later ones 503 SHUTTING_DOWN (SPEC §10).
			const answered = answers.filter(a => a.status === "fulfilled").map(a => (a as PromiseFulfilledResult<{ status: number; body: { type?: string } }>).value);
			expect(answered.every(({ status, body }) => status === 201 || (status === 503 && body.type === "SHUTTING_DOWN"))).toBe(true);
			expect(proc.output()).not.toContain("GracefulStopTimeoutError");
		} finally {
			proc.child.kill("SIGKILL");
		}
	});

	it("answers the probes on HEALTH_PORT while connections fill MAX_CONNECTIONS on PORT", async () => {
		const { proc, port, healthPort } = await startWithHealthPort({ MAX_CONNECTIONS: "5", MAX_CONNECTIONS_PER_CLIENT: "0", EVENT_STREAMS_MAX: "2" });
		const url = `http://127.0.0.1:${port}`;
		const held: RawConnection[] = [];
		try {
			expect(proc.output()).toContain(`Health routes on port ${healthPort}`);
			// A flood of idle keep-alive connections, up to the limit: the next is closed unread.
			const refused = await fillUntilRefused(held, url, "127.0.0.2", 6);
			expect(refused?.closed()).toBe(true);
			expect(held.length).toBeLessThanOrEqual(5);
			expect(await tryAsk(url, "127.0.0.3")).toBe(false);
			// The probes still get their answers (on PORT they were refused too, and the kubelet would restart a busy process).
			const probes = httpClient(`http://127.0.0.1:${healthPort}`);
			expect(await probes("GET", "/health/live")).toMatchObject({ status: 200, body: { status: "live" } });
			expect(await probes("GET", "/health/ready")).toMatchObject({ status: 200, body: { status: "ready" } });
			// Nothing but the probes there.
			expect((await fetch(`http://127.0.0.1:${healthPort}/intents`)).status).toBe(404);
		} finally {
			for (const connection of held) connection.socket.destroy();
			proc.child.kill("SIGKILL");
		}
	});

	it("on HEALTH_PORT, is not ready from SIGTERM on, while a request in flight on PORT still gets its answer", async () => {
		const route = newRoute();
		const { proc, port, healthPort } = await startWithHealthPort({}, route);
		const socket = new net.Socket();
		try {
			const probe = (name: string) => fetch(`http://127.0.0.1:${healthPort}/health/${name}`);
			expect((await probe("ready")).status).toBe(200);
			// A request in flight: its head in, its body still coming.
			const body = Buffer.from(JSON.stringify(signedIntent(sender, route)));
			let answer = "";
			socket.on("data", chunk => (answer += chunk.toString("latin1"))).on("error", () => {});
			await new Promise<void>(resolve => socket.connect(port, "127.0.0.1", resolve));
			socket.write(`POST /intents HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`);
			socket.write(body.subarray(0, 100));
			await wait(100);
			proc.child.kill("SIGTERM");
			const notReady = await waitFor(async () => {
				const answer = await probe("ready");
				return answer.status === 503 ? answer : null;
			}, 5_000, "readiness to fail");
			expect(notReady.headers.get("retry-after")).toBe("1");
			expect(await notReady.json()).toMatchObject({ code: 503, type: "NOT_READY" });
			expect((await probe("live")).status).toBe(200);
			socket.write(body.subarray(100));
			await waitFor(() => /^HTTP\/1\.1 \d{3}/.test(answer) || null, 10_000, "the answer in flight");
			expect(answer).toMatch(/^HTTP\/1\.1 201 /);
			expect(await proc.exited).toBe(0);
		} finally {
			socket.destroy();
			proc.child.kill("SIGKILL");
		}
	});

	it("holds at most 4 connections per address on HEALTH_PORT, each 5 s at most, and closes each once answered", async () => {
		const { proc, healthPort } = await startWithHealthPort();
		const probes = `http://127.0.0.1:${healthPort}`;
		const held: RawConnection[] = [];
		try {
			// Connections that send nothing (or trickle their head): four from one address.
			for (let i = 0; i < 5; i++) held.push(await rawConnection(probes, "127.0.0.2"));
			await waitFor(() => held[4].closed() || null, 5_000, "the fifth connection closed");
			expect(held[4].received()).toBe("");
			expect(held.slice(0, 4).some(connection => connection.closed())).toBe(false);
			// The kubelet, from its own address, is answered, and its connection closed.
			const kubelet = await rawConnection(probes, "127.0.0.3");
			await kubelet.ask();
			expect(kubelet.received()).toMatch(/connection: close/i);
			await waitFor(() => kubelet.closed() || null, 5_000, "the answered connection closed");
			// The silent ones are cut off after 5 s (checked every second).
			const startedAt = Date.now();
			await waitFor(() => held.slice(0, 4).every(connection => connection.closed()) || null, 10_000, "the silent connections closed");
			expect(Date.now() - startedAt).toBeLessThan(8_000);
			await (await rawConnection(probes, "127.0.0.2")).ask();
		} finally {
			for (const connection of held) connection.socket.destroy();
			proc.child.kill("SIGKILL");
		}
	}, 20_000);

	it("without the gateway, with HEALTH_PORT, serves the probes there and nothing on PORT", async () => {
		const dataDir = tempDir();
		const [port, healthPort] = [await freePort(), await freePort()];
		const proc = startProcess({ SERVICES: "verifier", PORT: String(port), HEALTH_PORT: String(healthPort), DATA_DIR: dataDir, LOG_LEVEL: "info" });
		try {
			await waitFor(() => proc.output().includes(`health routes on port ${healthPort}:`), 20_000, "the start-up summary", 20);
			expect((await fetch(`http://127.0.0.1:${healthPort}/health/ready`)).status).toBe(200);
			await expect(fetch(`http://127.0.0.1:${port}/health/ready`)).rejects.toThrow();
		} finally {
			proc.child.kill("SIGKILL");
		}
	});

	it("refuses HEALTH_PORT equal to PORT, and a HEALTH_PORT already taken, with a clear message", async () => {
		const dataDir = tempDir();
		const same = startProcess({ PORT: "3999", HEALTH_PORT: "3999", DATA_DIR: dataDir, LOG_LEVEL: "error" });
		expect(await same.exited).toBe(1);
		expect(same.output()).toContain("HEALTH_PORT must differ from PORT");
		const taken = net.createServer();
		await new Promise<void>(resolve => taken.listen(0, "0.0.0.0", resolve));
		try {
			const busy = startProcess({ PORT: String(await freePort()), HEALTH_PORT: String((taken.address() as net.AddressInfo).port), DATA_DIR: dataDir, LOG_LEVEL: "error" });
			expect(await busy.exited).toBe(1);
			expect(busy.output()).toContain("could not start: listen EADDRINUSE");
		} finally {
			taken.close();
		}
	});

	it("on SIGTERM, does not wait out the drain for an answer begun before it whose client stopped reading: SOCKET_TIMEOUT_MS ends it", async () => {
		const dataDir = tempDir();
		const route = newRoute();
		const port = await freePort();
		const proc = startProcess({ PORT: String(port), SOCKET_TIMEOUT_MS: "2000", WORKER_API_KEYS: API_KEY, RATE_LIMIT_PER_MIN: "0", DATA_DIR: dataDir, REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]), LOG_LEVEL: "info" });
		const socket = new net.Socket();
		try {
			await waitFor(() => proc.output().includes("listening on port"), 20_000, "the service to listen", 20);
			const http = httpClient(`http://127.0.0.1:${port}`);
			for (let i = 0; i < 25; i++) await Promise.all(Array.from({ length: 20 }, () => http("POST", "/intents", signedIntent(sender, route))));
			// Eight pipelined pages of about a megabyte of work items each, asked for and never read: the
			// kernel's buffers take a few, the answer being written when they are full has its headers
			// sent and the rest of its body waiting in the process, and the others wait behind it.
			socket.on("error", () => {});
			await new Promise<void>(resolve => socket.connect(port, "127.0.0.1", resolve));
			socket.pause();
			socket.write(`GET /intent-work?limit=500 HTTP/1.1\r\nHost: localhost\r\nx-api-key: ${API_KEY}\r\n\r\n`.repeat(8));
			await wait(500);
			const stoppedAt = Date.now();
			proc.child.kill("SIGTERM");
			expect(await proc.exited).toBe(0);
			// The drain waits up to 30 s for answers in flight; this one is cut off after 2 s without progress.
			expect(Date.now() - stoppedAt).toBeLessThan(10_000);
		} finally {
			socket.destroy();
			proc.child.kill("SIGKILL");
		}
	}, 60_000);

	it("refuses to start on an invalid REGISTRY_SEED_FILE with a clear message and no stack trace", async () => {
		const dataDir = tempDir();
		const proc = startProcess({ PORT: String(await freePort()), DATA_DIR: dataDir, REGISTRY_SEED_FILE: writeSeedFile(dataDir, [{ tin: "1234567890" }]), LOG_LEVEL: "error" });
		expect(await proc.exited).toBe(1);
		expect(proc.output()).toContain("REGISTRY_SEED_FILE");
		expect(proc.output()).toContain("tin must be a 10-digit Luhn-valid TIN");
		expect(proc.output()).not.toMatch(/\n\s+at .+\(.+:\d+:\d+\)/);
	});

	it("refuses an unreadable authority keypair without echoing the file", async () => {
		const dataDir = tempDir();
		const file = path.join(dataDir, "authority.json");
		fs.writeFileSync(file, "s3cr3tBase58NotAKeypair");
		const proc = startProcess({ PORT: String(await freePort()), DATA_DIR: dataDir, NODE_AUTHORITY_KEYPAIR_PATH: file, LOG_LEVEL: "error" });
		expect(await proc.exited).toBe(1);
		expect(proc.output()).toContain(`cannot read keypair file ${file}: not valid JSON`);
		expect(proc.output()).not.toContain("s3cr3t");
		expect(proc.output()).not.toMatch(/\n\s+at .+\(.+:\d+:\d+\)/);
	});

	it("refuses a malformed environment variable", async () => {
		const proc = startProcess({ PORT: "not-a-port", DATA_DIR: tempDir() });
		expect(await proc.exited).toBe(1);
		expect(proc.output()).toContain("PORT must be an integer");
	});
});

describe("slot expiry with SOLANA_RPC_URL", () => {
	it("refuses intents whose expiresAtSlot is not after the latest observed slot, and expires them as the chain moves", async () => {
		let slot = 5000;
		const rpc = (await import("node:http")).createServer((req, res) => {
			let body = "";
			req.on("data", chunk => (body += chunk));
			req.on("end", () => {
				const { id, method } = JSON.parse(body);
				res.setHeader("content-type", "application/json");
				// The slot moves only while the endpoint shows a genesis hash (one cluster, of one endpoint).
				const result = { getSlot: slot, getGenesisHash: "11111111111111111111111111111111" }[method as string];
				res.end(JSON.stringify(result !== undefined ? { jsonrpc: "2.0", id, result } : { jsonrpc: "2.0", id, error: { code: -32601, message: "no" } }));
			});
		});
		await new Promise<void>(resolve => rpc.listen(0, "127.0.0.1", resolve));
		const dataDir = tempDir();
		const route = newRoute();
		const node = await startNode(
			{ REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]), SOLANA_RPC_URL: `http://127.0.0.1:${(rpc.address() as net.AddressInfo).port}`, SOLANA_CLUSTER: "solana-localnet", SLOT_POLL_INTERVAL_MS: "50" },
			dataDir
		);
		try {
			const stale = await node.http("POST", "/intents", signedIntent(sender, route, { expiresAtSlot: 5000 }));
			expect(stale.body).toMatchObject({ code: 400, type: "EXPIRED" });
			const live = await node.http("POST", "/intents", signedIntent(sender, route, { expiresAtSlot: 5100 }));
			expect(live.status).toBe(201);

			slot = 5100;
			const deadline = Date.now() + 5000;
			let record = live.body;
			while (record.receiverStatus !== "REJECTED" && Date.now() < deadline) {
				await wait(50);
				record = (await node.http("GET", `/intents/${live.body.id}`)).body;
			}
			expect(record).toMatchObject({ receiverStatus: "REJECTED", rejectionReason: "EXPIRED" });
			expect((await node.http("GET", "/intent-work", undefined, worker)).body).toEqual([]);
		} finally {
			await node.stop();
			rpc.close();
		}
	});
});
