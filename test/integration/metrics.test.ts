/**
 * GET /metrics in Prometheus form over HTTP: a live scrape after real traffic passes
 * `promtool check metrics`, requests are counted per route template, the verification, lease,
 * payout and sweep figures move, and METRICS_API_KEY guards the text (never the JSON).
 */
import { Registry } from "prom-client";
import { ConfigError, loadConfig } from "../../lib/config";
import type { GenesisRoute } from "../../lib/registry";
import { bearerToken } from "../../services/api.service";
import { histogramQuantile, metricsForm } from "../../services/metrics";
import { newRoute, newWallet, signedHeartbeat, signedIntent, writeSeedFile } from "../helpers/fixtures";
import { startNode, tempDir, type TestNode } from "../helpers/node";
import { itWithPromtool, promtoolAvailable, promtoolCheck } from "../helpers/promtool";

const METRICS_KEY = "metrics-key-0123456789abcdef";
const sender = newWallet();
const settler = newWallet();

let node: TestNode;
let route: GenesisRoute;
let intentId: string;

async function scrape(target: TestNode = node, headers: Record<string, string> = {}): Promise<string> {
	const response = await fetch(`${target.url}/metrics?format=prometheus`, { headers });
	expect(response.status).toBe(200);
	expect(response.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
	return response.text();
}

/** The value of the one series `name{labels…}` whose labels include `labels` (any node). */
function sample(text: string, name: string, labels: Record<string, string>): number | undefined {
	for (const line of text.split("\n")) {
		const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
		if (!match || match[1] !== name) continue;
		const found = Object.fromEntries([...(match[2] ?? "").matchAll(/([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"/g)].map(([, key, value]) => [key, value]));
		if (Object.entries(labels).every(([key, value]) => found[key] === value)) return Number(match[3]);
	}
	return undefined;
}

beforeAll(async () => {
	route = newRoute();
	const dataDir = tempDir();
	node = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]) }, dataDir);
	// Traffic: a verified intent, a forgery (refused without a record), a lease and a payout authorization asked twice.
	const created = await node.http("POST", "/intents", signedIntent(sender, route));
	expect(created.status).toBe(201);
	intentId = created.body.id;
	expect((await node.http("POST", "/intents", { ...signedIntent(sender, route), senderAuthorizationSignature: newWallet().sign("x") })).status).toBe(400);
	expect((await node.as(settler)("POST", "/crankers/heartbeat", signedHeartbeat(settler))).status).toBe(200);
	expect((await node.as(settler)("PATCH", `/intents/${intentId}/status`, { status: "CRANKER_LEASED", crankerPubkey: settler.address, expectedVersion: 3 })).status).toBe(200);
	for (let i = 0; i < 2; i++) expect((await node.as(settler)("POST", "/internal/settlement-authorizations/settlement", { workId: intentId, crankerPubkey: settler.address })).status).toBe(200);
	for (let i = 0; i < 2; i++) expect((await node.http("GET", `/intents/${intentId}`)).status).toBe(200);
	expect((await node.http("GET", "/no/such/route")).status).toBe(404);
});
afterAll(() => node.stop());

describe("GET /metrics?format=prometheus", () => {
	itWithPromtool("passes promtool check metrics on a live scrape", async () => {
		const { status, output } = promtoolCheck(await scrape());
		expect(output).toBe("");
		expect(status).toBe(0);
	});

	it("counts requests per route template, never per raw URL", async () => {
		const text = await scrape();
		expect(sample(text, "scs_http_requests_total", { method: "GET", route: "/intents/:id", status: "200" })).toBe(2);
		expect(sample(text, "scs_http_requests_total", { method: "POST", route: "/intents", status: "201" })).toBe(1);
		expect(sample(text, "scs_http_requests_total", { method: "GET", route: "unmatched", status: "404" })).toBe(1);
		expect(sample(text, "scs_http_request_duration_seconds_count", { method: "PATCH", route: "/intents/:id/status" })).toBe(1);
		expect(sample(text, "scs_http_request_duration_seconds_bucket", { method: "GET", route: "/intents/:id", le: "+Inf" })).toBe(2);
		// No id, path or key ever becomes a label value.
		expect(text).not.toContain(intentId);
		expect(text).not.toContain("/no/such/route");
		expect(text).not.toContain(settler.address);
	});

	it("labels each process's own series with its node, and gives the store's figures once", async () => {
		const text = await scrape();
		const own = nodeLabel(text);
		expect(sample(text, "scs_verifications_total", { outcome: "verified", node: own })).toBe(1);
		expect(sample(text, "scs_verifications_total", { outcome: "unrecorded", node: own })).toBe(1);
		expect(sample(text, "scs_verification_duration_seconds_count", { node: own })).toBe(1);
		expect(sample(text, "scs_lease_events_total", { event: "granted", node: own })).toBe(1);
		expect(sample(text, "scs_payout_authorizations_total", { result: "issued", node: own })).toBe(1);
		expect(sample(text, "scs_payout_authorizations_total", { result: "repeated", node: own })).toBe(1);
		expect(sample(text, "scs_payout_authorization_duration_seconds_count", { node: own })).toBe(2);
		expect(sample(text, "scs_sweep_results_total", { sweep: "intent-expiry", result: "expired", node: own })).toBe(0);
		// The verify threads answered every signature: none fell back to the event loop.
		expect(sample(text, "scs_verifier_thread_fallbacks_total", { reason: "worker_lost", node: own })).toBe(0);
		expect(sample(text, "scs_verifier_thread_fallbacks_total", { reason: "unmatched_answer", node: own })).toBe(0);
		// Process and runtime metrics under their standard names.
		expect(sample(text, "process_cpu_user_seconds_total", { node: own })).toBeGreaterThan(0);
		expect(sample(text, "nodejs_heap_size_used_bytes", { node: own })).toBeGreaterThan(0);
		// The store's figures: no node label, one series each.
		expect(text).toMatch(/^scs_intents\{state="CRANKER_LEASED"\} 1$/m);
		expect(text).toMatch(/^scs_intent_verdicts_total\{verdict="verified"\} 1$/m);
		expect(text).toMatch(/^scs_leases_active 1$/m);
		expect(text).toMatch(/^scs_crankers_online\{role="settlement"\} 1$/m);
		expect(text).toMatch(/^scs_crankers_registered 1$/m);
		expect(text).toMatch(/^scs_store_figures_up 1$/m);
		// One HELP and one TYPE per family.
		const types = text.split("\n").filter(line => line.startsWith("# TYPE "));
		expect(new Set(types).size).toBe(types.length);
	});

	it("serves each process's own figures while the store's cannot be read, with scs_store_figures_up 0 and none of the store's (an operator's review)", async () => {
		const alone = await startNode();
		try {
			// The Cranker records' owner gone (its store down, a rolling update): every scrape failed whole before.
			await alone.broker.destroyService(alone.broker.getLocalService("crankers")!);
			const text = await scrape(alone);
			expect(text).toMatch(/^scs_store_figures_up 0$/m);
			expect(sample(text, "process_cpu_user_seconds_total", { node: nodeLabel(text) })).toBeGreaterThan(0);
			expect(text).not.toMatch(/^scs_intents/m);
			expect(text).not.toMatch(/^scs_crankers_registered/m);
			if (promtoolAvailable) expect(promtoolCheck(text)).toEqual({ status: 0, output: "" });
			// An owner that hangs rather than fails: the scrape waits 3 s for it, within Prometheus's 10 s, not the bus's 15 s.
			alone.broker.createService({ name: "crankers", actions: { summary: () => new Promise(() => {}) } });
			await alone.broker.waitForServices(["crankers"]);
			const startedAt = Date.now();
			expect(await scrape(alone)).toMatch(/^scs_store_figures_up 0$/m);
			expect(Date.now() - startedAt).toBeLessThan(5_000);
		} finally {
			await alone.stop();
		}
	}, 30_000);
});

/** The node label of this single-process node's series. */
function nodeLabel(text: string): string {
	const match = /^process_cpu_user_seconds_total\{node="([^"]+)"\}/m.exec(text);
	expect(match).not.toBeNull();
	return match![1];
}

describe("METRICS_API_KEY", () => {
	let guarded: TestNode;
	beforeAll(async () => {
		guarded = await startNode({ METRICS_API_KEY: METRICS_KEY });
	});
	afterAll(() => guarded.stop());

	it("the Prometheus text needs Authorization: Bearer <key>: missing → 401, wrong → 403", async () => {
		const asks: [string, Record<string, string>][] = [
			["/metrics?format=prometheus", {}],
			["/metrics", { accept: "text/plain" }],
			["/metrics?format=prometheus", { authorization: `Basic ${METRICS_KEY}` }]
		];
		for (const [path, headers] of asks) {
			const missing = await guarded.http("GET", path, undefined, headers);
			expect(missing.status).toBe(401);
			expect(missing.body).toEqual({ name: "UnauthorizedError", message: expect.any(String), code: 401, type: "UNAUTHORIZED" });
			expect(missing.headers.get("www-authenticate")).toMatch(/^Bearer/);
		}
		// Exactly `Bearer <token>`: anything after the token makes the header malformed, a 401 like a missing one.
		for (const authorization of [`Bearer ${METRICS_KEY} junk`, `Bearer ${METRICS_KEY} ${METRICS_KEY}`, "Bearer", METRICS_KEY]) {
			const malformed = await guarded.http("GET", "/metrics?format=prometheus", undefined, { authorization });
			expect({ authorization, status: malformed.status }).toEqual({ authorization, status: 401 });
		}
		expect(await scrape(guarded, { authorization: `bearer ${METRICS_KEY}` })).toMatch(/^# TYPE scs_intents gauge$/m);
		const wrong = await guarded.http("GET", "/metrics?format=prometheus", undefined, { authorization: `Bearer ${METRICS_KEY}x` });
		expect(wrong.status).toBe(403);
		expect(wrong.body).toEqual({ name: "ForbiddenError", message: expect.any(String), code: 403, type: "FORBIDDEN" });
		expect(JSON.stringify(wrong.body)).not.toContain(METRICS_KEY);
		expect(await scrape(guarded, { authorization: `Bearer ${METRICS_KEY}` })).toMatch(/^# TYPE scs_intents gauge$/m);
	});

	it("must be 16 or more visible characters, refused without repeating the value", () => {
		for (const value of ["short-key", "sixteen chars ok"]) {
			expect(() => loadConfig({ METRICS_API_KEY: value })).toThrow(ConfigError);
			expect(() => loadConfig({ METRICS_API_KEY: value })).toThrow(/^METRICS_API_KEY must be at least 16 visible ASCII characters without spaces$/);
		}
		expect(loadConfig({ METRICS_API_KEY: METRICS_KEY }).metricsApiKey).toBe(METRICS_KEY);
	});

	it("the JSON figures stay public", async () => {
		for (const path of ["/metrics", "/metrics?format=json"]) {
			const { status, body } = await guarded.http("GET", path);
			expect(status).toBe(200);
			expect(body).toMatchObject({ intents: expect.any(Object), verification: expect.any(Object) });
		}
	});

	it("serves exactly the form the gateway authorized: JSON, public, whenever Accept does not prefer text", async () => {
		const asks: [string, Record<string, string>][] = [
			["/metrics", { accept: "application/json;q=0.9, text/plain;q=0.1" }],
			["/metrics", { accept: "text/plain;q=0" }],
			["/metrics", { accept: "*/*" }],
			["/metrics?format=json", { accept: "text/plain" }]
		];
		for (const [path, headers] of asks) {
			const answer = await guarded.http("GET", path, undefined, headers);
			expect({ path, headers, status: answer.status, type: answer.headers.get("content-type") }).toEqual({ path, headers, status: 200, type: "application/json; charset=utf-8" });
			expect(answer.body).toMatchObject({ intents: expect.any(Object) });
		}
		// Prometheus's own Accept, with the key: the text.
		const text = await guarded.http("GET", "/metrics", undefined, { accept: "text/plain;version=0.0.4;q=0.3,*/*;q=0.2", authorization: `Bearer ${METRICS_KEY}` });
		expect(text.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
		expect(text.body).toMatch(/^# TYPE scs_intents gauge$/m);
	});
});

describe("GET /metrics JSON reads only the families it shows", () => {
	it("never collects the process and runtime metrics (a readdir of /proc/self/fd and more per call)", async () => {
		const reads = jest.spyOn(Registry.prototype, "getMetricsAsJSON");
		try {
			expect((await node.http("GET", "/metrics")).body.verification).toMatchObject({ unrecorded: 1 });
			// The one registry holding the runtime metrics is never asked for all its families.
			const runtimeReads = reads.mock.contexts.filter(registry => (registry as Registry).getSingleMetric("process_cpu_user_seconds_total") !== undefined);
			expect(runtimeReads).toHaveLength(0);
			// The Prometheus text does read them: the spy sees what it should.
			await scrape();
			expect(reads.mock.contexts.filter(registry => (registry as Registry).getSingleMetric("process_cpu_user_seconds_total") !== undefined).length).toBeGreaterThan(0);
		} finally {
			reads.mockRestore();
		}
	});
});

describe("metricsForm (GET /metrics: Prometheus text or JSON)", () => {
	it("?format decides when given", () => {
		expect(metricsForm("prometheus", "application/json")).toBe("prometheus");
		expect(metricsForm("json", "text/plain")).toBe("json");
		// Another value is JSON here, and refused by the action's schema.
		expect(metricsForm("xml", "text/plain")).toBe("json");
		expect(metricsForm(["prometheus", "json"], "text/plain")).toBe("json");
	});

	it("without it, text only when text/plain weighs more than 0 and strictly more than JSON", () => {
		const cases: [string | undefined, "prometheus" | "json"][] = [
			[undefined, "json"],
			["", "json"],
			["*/*", "json"], // curl
			["application/json", "json"],
			["text/plain", "prometheus"],
			["TEXT/PLAIN; charset=utf-8", "prometheus"],
			["text/plain;version=0.0.4;q=0.3,*/*;q=0.2", "prometheus"], // Prometheus 2
			["application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2", "prometheus"],
			["application/json;q=0.9, text/plain;q=0.1", "json"],
			["text/plain;q=0", "json"],
			["text/plain;q=0.5, application/*;q=0.5", "json"], // a tie is JSON
			["text/plain;q=0.5, application/*;q=0.4", "prometheus"],
			["text/*", "prometheus"],
			["text/html, */*;q=0.8", "json"], // a browser
			["text/plain;q=2", "json"], // not a weight: the range says nothing
			["text/plain;q=abc, application/json;q=0.1", "json"]
		];
		for (const [accept, form] of cases) expect({ accept, form: metricsForm(undefined, accept) }).toEqual({ accept, form });
	});
});

describe("bearerToken (Authorization of the Prometheus text)", () => {
	it("takes exactly `Bearer <token>`, the scheme in any case", () => {
		expect(bearerToken("Bearer abc.DEF-123")).toBe("abc.DEF-123");
		expect(bearerToken("bearer abc")).toBe("abc");
		expect(bearerToken("BEARER  abc")).toBe("abc");
		for (const malformed of [undefined, "", "Bearer", "Bearer ", "Bearer abc junk", "Basic abc", "Bearerabc", "abc", "Bearer abc\tjunk"]) expect({ malformed, token: bearerToken(malformed) }).toEqual({ malformed, token: null });
	});
});

describe("histogramQuantile (JSON p50Ms/p99Ms from the verification histogram)", () => {
	it("interpolates within the bucket as histogram_quantile does, and never past the last finite bound", () => {
		const buckets = [
			{ le: 0.001, count: 0 },
			{ le: 0.005, count: 10 },
			{ le: 0.01, count: 19 },
			{ le: Infinity, count: 20 }
		];
		expect(histogramQuantile(0.5, buckets)).toBeCloseTo(0.001 + (0.004 * 10) / 10);
		expect(histogramQuantile(0.9, buckets)).toBeCloseTo(0.005 + (0.005 * 8) / 9);
		expect(histogramQuantile(0.99, buckets)).toBe(0.01);
		expect(histogramQuantile(0.5, [{ le: 0.001, count: 0 }, { le: Infinity, count: 0 }])).toBe(0);
	});
});
