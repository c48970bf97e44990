/**
 * CORS (CORS_ORIGINS) on the public routes only, over HTTP against the real gateway. A preflight
 * is answered by the gateway and never runs the action it asks about; worker routes never answer
 * CORS; without CORS_ORIGINS no route does. A real browser's view of the same rules is
 * test/browser/sdk-browser.test.ts (Debian Chromium).
 */
import type { Service } from "moleculer";
import type { GenesisRoute } from "../../lib/registry";
import { newRoute, newWallet, signedIntent, writeSeedFile } from "../helpers/fixtures";
import { startNode, tempDir, worker, type TestNode } from "../helpers/node";
import { rawRequest } from "../helpers/raw-http";

const APP = "https://app.example.com";
let node: TestNode;
let closed: TestNode;
let route: GenesisRoute;

beforeAll(async () => {
	const dataDir = tempDir();
	route = newRoute();
	// Rate limited (generously): its x-rate-limit-* headers must be readable by the page.
	node = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]), CORS_ORIGINS: `${APP},http://localhost:5173`, RATE_LIMIT_PER_MIN: "100000" }, dataDir);
	closed = await startNode();
});
afterAll(async () => {
	await node.stop();
	await closed.stop();
});

const preflight = (target: TestNode, path: string, method: string, origin = APP) =>
	fetch(target.url + path, { method: "OPTIONS", headers: { origin, "access-control-request-method": method, "access-control-request-headers": "content-type" } });

test("a preflight from an allowed origin for a public route: 204 with the CORS headers", async () => {
	const answer = await preflight(node, "/intents", "POST");
	expect(answer.status).toBe(204);
	expect(answer.headers.get("access-control-allow-origin")).toBe(APP);
	expect(answer.headers.get("access-control-allow-methods")).toBe("POST");
	expect(answer.headers.get("access-control-allow-headers")).toContain("content-type");
	expect(answer.headers.get("vary")).toBe("Origin");
	expect((await preflight(node, "/intents/int_x", "GET", "http://localhost:5173")).status).toBe(204);
});

test("a preflight never runs the action it asks about", async () => {
	const before = (await node.http("GET", "/metrics")).body.intents;
	// POST / answers the status body when its action runs; POST /intents would record an intent.
	for (const [path, method] of [["/", "POST"], ["/intents", "POST"], ["/epoch/close", "POST"]]) {
		const answer = await fetch(node.url + path, { method: "OPTIONS", headers: { "access-control-request-method": method } });
		expect(answer.status).toBe(403);
		expect(((await answer.json()) as { type: string }).type).toBe("FORBIDDEN");
	}
	expect((await preflight(node, "/", "POST")).status).toBe(204);
	expect((await node.http("GET", "/metrics")).body.intents).toEqual(before);
	expect((await node.http("GET", "/epoch/status")).body.epoch).toBe(1);
});

test("an actual request from an allowed origin gets the CORS headers on public routes, never on worker routes", async () => {
	const submitted = await fetch(`${node.url}/intents`, { method: "POST", headers: { origin: APP, "content-type": "application/json" }, body: JSON.stringify(signedIntent(newWallet(), route)) });
	expect(submitted.status).toBe(201);
	expect(submitted.headers.get("access-control-allow-origin")).toBe(APP);
	expect(submitted.headers.get("access-control-expose-headers")).toContain("x-request-id");
	const list = await fetch(`${node.url}/intents`, { headers: { origin: APP, ...worker } });
	expect(list.status).toBe(200);
	expect(list.headers.get("access-control-allow-origin")).toBeNull();
	expect((await preflight(node, "/intents", "GET")).status).toBe(403);
	expect((await preflight(node, "/intent-work", "GET")).status).toBe(403);
	expect((await preflight(node, "/intents/int_x/status", "PATCH")).status).toBe(403);
});

test("an origin not allowed, or no CORS_ORIGINS at all: no CORS headers anywhere", async () => {
	const other = await fetch(`${node.url}/epoch/status`, { headers: { origin: "https://evil.example" } });
	expect(other.status).toBe(200);
	expect(other.headers.get("access-control-allow-origin")).toBeNull();
	expect((await preflight(node, "/intents", "POST", "https://evil.example")).status).toBe(403);
	const closedAnswer = await fetch(`${closed.url}/epoch/status`, { headers: { origin: APP } });
	expect(closedAnswer.headers.get("access-control-allow-origin")).toBeNull();
	const closedPreflight = await preflight(closed, "/intents", "POST");
	expect(closedPreflight.status).toBe(403);
	expect(closedPreflight.headers.get("access-control-allow-origin")).toBeNull();
});

test("the page may read every header an answer carries for it: request id, location and moleculer-web's x-rate-limit-*", async () => {
	const submitted = await fetch(`${node.url}/intents`, { method: "POST", headers: { origin: APP, "content-type": "application/json" }, body: JSON.stringify(signedIntent(newWallet(), route)) });
	expect(submitted.status).toBe(201);
	const exposed = (submitted.headers.get("access-control-expose-headers") ?? "").split(",").map(name => name.trim());
	const rateLimit = [...submitted.headers.keys()].filter(name => name.startsWith("x-rate-limit"));
	expect(rateLimit.sort()).toEqual(["x-rate-limit-limit", "x-rate-limit-remaining", "x-rate-limit-reset"]);
	for (const name of [...rateLimit, "x-request-id", "location"]) expect({ name, exposed: exposed.includes(name) }).toEqual({ name, exposed: true });
});

test("a body declared too large is refused (413) with the CORS headers, so the page reads the refusal", async () => {
	// Written by hand: fetch would send the body it declares.
	const port = Number(new URL(node.url).port);
	const { answer } = await rawRequest(port, `POST /intents HTTP/1.1\r\nhost: x\r\norigin: ${APP}\r\ncontent-type: application/json\r\ncontent-length: 70000\r\n\r\n`);
	expect(answer).toMatch(/^HTTP\/1\.1 413 /);
	expect(answer).toMatch(new RegExp(`\r\naccess-control-allow-origin: ${APP.replace(/\./g, "\\.")}\r\n`, "i"));
	expect(answer).toMatch(/"type":"PAYLOAD_TOO_LARGE"/);
	// Not for an origin that is not allowed.
	const { answer: other } = await rawRequest(port, `POST /intents HTTP/1.1\r\nhost: x\r\norigin: https://evil.example\r\ncontent-type: application/json\r\ncontent-length: 70000\r\n\r\n`);
	expect(other).toMatch(/^HTTP\/1\.1 413 /);
	expect(other).not.toMatch(/access-control-allow-origin/i);
});

test("while draining: new requests get 503 SHUTTING_DOWN with the CORS headers and retry-after; preflights and health still answer", async () => {
	const draining = await startNode({ CORS_ORIGINS: APP });
	try {
		await (draining.broker.getLocalService("api") as unknown as Service & { drain(): Promise<void> }).drain();
		const refused = await draining.http("POST", "/intents", signedIntent(newWallet(), route), { origin: APP });
		expect(refused.status).toBe(503);
		expect(refused.body).toMatchObject({ type: "SHUTTING_DOWN", code: 503 });
		expect(refused.headers.get("access-control-allow-origin")).toBe(APP);
		expect(refused.headers.get("access-control-expose-headers")).toContain("retry-after");
		expect(refused.headers.get("retry-after")).toBe("1");
		expect(refused.headers.get("connection")).toBe("close");
		const asked = await preflight(draining, "/intents", "POST");
		expect(asked.status).toBe(204);
		expect(asked.headers.get("access-control-allow-origin")).toBe(APP);
		const live = await fetch(`${draining.url}/health/live`, { headers: { origin: APP } });
		expect(live.status).toBe(200);
		expect(live.headers.get("access-control-allow-origin")).toBe(APP);
		const ready = await draining.http("GET", "/health/ready");
		expect(ready.status).toBe(503);
		expect(ready.headers.get("retry-after")).toBe("1");
	} finally {
		await draining.stop();
	}
});
