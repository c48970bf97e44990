/**
 * CORS (CORS_ORIGINS) on the public routes only, over HTTP against the real gateway. A preflight
 * is answered by the gateway and never runs the action it asks about; worker routes never answer
 * CORS; without CORS_ORIGINS no route does. A real browser's view of the same rules is
 * test/browser/sdk-browser.test.ts (Debian Chromium).
 */
import type { GenesisRoute } from "../../lib/registry";
import { newRoute, newWallet, signedIntent, writeSeedFile } from "../helpers/fixtures";
import { startNode, tempDir, worker, type TestNode } from "../helpers/node";

const APP = "https://app.example.com";
let node: TestNode;
let closed: TestNode;
let route: GenesisRoute;

beforeAll(async () => {
	const dataDir = tempDir();
	route = newRoute();
	node = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]), CORS_ORIGINS: `${APP},http://localhost:5173` }, dataDir);
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
