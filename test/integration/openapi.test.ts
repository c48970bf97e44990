/**
 * GET /openapi.json: generated from the route tables, the actions' own parameter schemas and the
 * schemas the answers are typed with (SPEC §4). It must lint clean with Redocly's recommended
 * rules, and a client generated from it (openapi-typescript) must know every success body. That
 * every answer of the HTTP suites matches it is checked by test/helpers/contract.ts.
 */
import { execFile } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import ts from "typescript";
import { ERROR_STATUS } from "../../lib/errors";
import { networkService } from "../../services/network.service";
import { startNode, tempDir, type TestNode } from "../helpers/node";

const ROOT = path.join(__dirname, "../..");
const run = promisify(execFile);
/** Neither tool may reach the network: no telemetry, no update check. */
const OFFLINE = { ...process.env, REDOCLY_TELEMETRY: "off", REDOCLY_SUPPRESS_UPDATE_NOTICE: "true", NO_UPDATE_NOTIFIER: "1" };

let node: TestNode;
let doc: any;
let docFile: string;
beforeAll(async () => {
	node = await startNode();
	const { status, body } = await node.http("GET", "/openapi.json");
	expect(status).toBe(200);
	doc = body;
	docFile = path.join(tempDir("scs-openapi-"), "openapi.json");
	fs.writeFileSync(docFile, JSON.stringify(doc));
});
afterAll(() => node.stop());

async function waitUntil(check: () => Promise<boolean>, timeoutMs = 5000): Promise<void> {
	for (const deadline = Date.now() + timeoutMs; !(await check()); ) {
		if (Date.now() > deadline) throw new Error("the condition did not hold in time");
		await new Promise(resolve => setTimeout(resolve, 20));
	}
}

/** moleculer-web's `:name` segments in OpenAPI's `{name}` form. */
const openApiPath = (route: string) => route.replace(/:([A-Za-z_]\w*)/g, "{$1}");
const operations = () => Object.entries(doc.paths as Record<string, Record<string, any>>).flatMap(([route, ops]) => Object.entries(ops).map(([method, op]) => ({ route, method, op })));

describe("GET /openapi.json", () => {
	it("documents exactly the routes the gateway serves", () => {
		expect(doc.openapi).toBe("3.1.0");
		const documented = operations().map(({ method, route }) => `${method.toUpperCase()} ${route}`);
		const api = node.broker.getLocalService("api") as unknown as { aliases: { method: string; fullPath: string }[] };
		const served = api.aliases.map(alias => `${alias.method} ${openApiPath(alias.fullPath)}`);
		expect(new Set(documented)).toEqual(new Set(served));
		expect(documented).toHaveLength(served.length);
	});

	it("is built once and rebuilt when the registry changes, still documenting exactly the routes served", async () => {
		const served = () => {
			const api = node.broker.getLocalService("api") as unknown as { aliases: { method: string; fullPath: string }[] };
			return new Set(api.aliases.map(alias => `${alias.method} ${openApiPath(alias.fullPath)}`));
		};
		const documented = (document: any) => new Set(Object.entries(document.paths as Record<string, object>).flatMap(([route, ops]) => Object.keys(ops).map(method => `${method.toUpperCase()} ${route}`)));
		const metricsParams = async () => ((await node.http("GET", "/openapi.json")).body.paths["/metrics"].get.parameters ?? []).map((p: { name: string }) => p.name);
		expect((await node.http("GET", "/openapi.json")).body).toEqual(doc);
		expect(await metricsParams()).toEqual(["format"]);
		// Built once: a local call answers the very object the last one did.
		const built = await node.broker.call("api.openapi");
		expect(await node.broker.call("api.openapi")).toBe(built);
		// The network service goes: its actions' schemas leave the registry, and the document follows.
		const network = node.broker.getLocalService("network")!;
		await node.broker.destroyService(network);
		await waitUntil(async () => (await metricsParams()).length === 0);
		expect(documented((await node.http("GET", "/openapi.json")).body)).toEqual(served());
		// It comes back: so do they.
		node.broker.createService(networkService(node.config));
		await waitUntil(async () => (await metricsParams()).length === 1);
		expect(await node.broker.call("api.openapi")).not.toBe(built);
		const rebuilt = (await node.http("GET", "/openapi.json")).body;
		expect(documented(rebuilt)).toEqual(served());
		expect(rebuilt).toEqual(doc);
	});

	it("takes each operation's input from the schema its action validates with", () => {
		const submit = doc.paths["/intents"].post;
		const intentSchema = submit.requestBody.content["application/json"].schema;
		expect(intentSchema.required).toEqual(expect.arrayContaining(["paymentId", "senderWallet", "amount", "expiresAtSlot"]));
		expect(intentSchema.required).not.toContain("recipientHash");
		expect(intentSchema.additionalProperties).toBe(false);
		expect(intentSchema.properties.amount.pattern).toBe("^(0|[1-9][0-9]{0,19})$");

		const patch = doc.paths["/intents/{id}/status"].patch;
		expect(patch.parameters[0]).toEqual(expect.objectContaining({ name: "id", in: "path", required: true }));
		expect(patch.requestBody.content["application/json"].schema.properties.status.enum).toContain("CRANKER_LEASED");

		const work = doc.paths["/intent-work"].get;
		expect(work.parameters).toEqual([
			expect.objectContaining({ name: "limit", in: "query", schema: expect.objectContaining({ type: "integer", minimum: 1, maximum: 500, default: 50 }) }),
			expect.objectContaining({ name: "after", in: "query", required: false, schema: { type: "string", maxLength: 64 } })
		]);
	});

	it("secures worker routes with x-api-key, and the Cranker routes with the worker key and the request signature together", () => {
		expect(doc.components.securitySchemes.workerKey).toEqual(expect.objectContaining({ type: "apiKey", in: "header", name: "x-api-key" }));
		const api = node.broker.getLocalService("api") as unknown as { aliases: { method: string; fullPath: string; route: { opts: { name: string } } }[] };
		const workerRoutes = new Set(api.aliases.filter(alias => alias.route.opts.name === "worker").map(alias => `${alias.method} ${openApiPath(alias.fullPath)}`));
		const signed = ["POST /crankers/heartbeat", "PATCH /intents/{id}/status", "POST /internal/settlement-authorizations/settlement", ...["verified", "fee-committed", "submitted", "finalized", "failed", "rejected"].map(stage => `POST /tin-operations/{id}/${stage}`)];
		for (const { route, method, op } of operations()) {
			const name = `${method.toUpperCase()} ${route}`;
			const headers = (op.parameters ?? []).filter((p: { in: string }) => p.in === "header").map((p: { name: string; required: boolean }) => `${p.name}:${p.required}`);
			// GET /metrics: public, but its Prometheus text takes METRICS_API_KEY when that is set.
			const security = signed.includes(name) ? [{ workerKey: [], crankerSignature: [] }] : workerRoutes.has(name) ? [{ workerKey: [] }] : name === "GET /metrics" ? [{}, { metricsKey: [] }] : [];
			expect({ name, security: op.security }).toEqual({ name, security });
			const streams = ["GET /intents/{id}/events", "GET /events"];
			expect({ name, headers }).toEqual({ name, headers: signed.includes(name) ? ["Signature:true", "Signature-Input:true", "Content-Digest:true"] : streams.includes(name) ? ["Last-Event-ID:false"] : [] });
		}
		expect(doc.servers).toEqual([expect.objectContaining({ url: "/" })]);
	});

	it("declares every answer by its status: success bodies by schema, each error status with the error types that have it", () => {
		expect(doc.paths["/intents"].post.responses).toEqual(expect.objectContaining({ 200: expect.anything(), 201: expect.anything(), 202: expect.anything() }));
		expect(doc.paths["/intents"].post.responses[201].content["application/json"].schema).toEqual({ $ref: "#/components/schemas/PublicMempoolIntent" });
		expect(Object.keys(doc.paths["/metrics"].get.responses[200].content)).toEqual(["application/json", "text/plain"]);
		expect(Object.keys(doc.paths["/health/ready"].get.responses)).toEqual(expect.arrayContaining(["200", "503"]));
		for (const { route, method, op } of operations()) {
			expect({ route, method, summary: typeof op.summary }).toEqual({ route, method, summary: "string" });
			for (const [status, response] of Object.entries(op.responses as Record<string, any>)) {
				expect(status).toMatch(/^[1-5]\d\d$/);
				if (Number(status) < 400) continue;
				const [error, constraint] = response.content["application/json"].schema.allOf;
				expect(error).toEqual({ $ref: "#/components/schemas/Error" });
				expect(constraint.properties.code.const).toBe(Number(status));
				for (const type of constraint.properties.type.enum) expect({ type, status: ERROR_STATUS[type as keyof typeof ERROR_STATUS] }).toEqual({ type, status: Number(status) });
			}
		}
	});

	it("lints clean with Redocly's recommended rules (redocly.yaml), offline", async () => {
		const { stdout } = await run(path.join(ROOT, "node_modules/.bin/redocly"), ["lint", docFile, "--config", path.join(ROOT, "redocly.yaml"), "--format=json"], { cwd: ROOT, env: OFFLINE });
		const report = JSON.parse(stdout);
		expect(report.problems.map((p: { ruleId: string; message: string }) => `${p.ruleId}: ${p.message}`)).toEqual([]);
		expect(report.totals).toEqual({ errors: 0, warnings: 0, ignored: 0 });
	});

	it("generates client types (openapi-typescript) that know every success body", async () => {
		const typesFile = path.join(path.dirname(docFile), "api.d.ts");
		await run(path.join(ROOT, "node_modules/.bin/openapi-typescript"), [docFile, "--output", typesFile], { cwd: ROOT, env: OFFLINE });
		const bodies = responseBodies(fs.readFileSync(typesFile, "utf8"));
		expect(bodies.filter(body => body.status < 300).length).toBeGreaterThan(30);
		// A success body never holds an `unknown` anywhere; an error body is never unknown as a whole
		// (only its free-form `data` details may hold one).
		expect(bodies.filter(body => body.status < 300 && body.unknown).map(body => body.name)).toEqual([]);
		expect(bodies.filter(body => body.wholeUnknown).map(body => body.name)).toEqual([]);
		// The check follows references: it sees the `unknown` of the Error schema's details.
		expect(bodies.some(body => body.status >= 400 && body.unknown)).toBe(true);
	});
});

/**
 * Every response body type of openapi-typescript's `operations`, by operation, status and media
 * type: whether it holds `unknown` anywhere (following `components["schemas"][…]`), or is `unknown`.
 */
function responseBodies(source: string): { name: string; status: number; unknown: boolean; wholeUnknown: boolean }[] {
	const file = ts.createSourceFile("api.d.ts", source, ts.ScriptTarget.Latest, true);
	const declaration = (name: string) => file.statements.find((s): s is ts.InterfaceDeclaration => ts.isInterfaceDeclaration(s) && s.name.text === name)!;
	const member = (type: ts.TypeNode | undefined, name: string) =>
		type && ts.isTypeLiteralNode(type) ? type.members.find((m): m is ts.PropertySignature => ts.isPropertySignature(m) && m.name.getText().replace(/"/g, "") === name)?.type : undefined;
	const members = (type: ts.TypeNode | undefined) => (type && ts.isTypeLiteralNode(type) ? type.members.filter(ts.isPropertySignature) : []);
	const schemas = declaration("components").members.filter(ts.isPropertySignature).find(m => m.name.getText() === "schemas")!.type;

	const holdsUnknown = (node: ts.Node, seen: Set<string>): boolean => {
		if (node.kind === ts.SyntaxKind.UnknownKeyword) return true;
		const ref = /^components\["schemas"\]\["([^"]+)"\]$/.exec(node.getText());
		if (ts.isIndexedAccessTypeNode(node) && ref) {
			if (seen.has(ref[1])) return false;
			seen.add(ref[1]);
			const target = member(schemas, ref[1]);
			return target !== undefined && holdsUnknown(target, seen);
		}
		return ts.forEachChild(node, child => holdsUnknown(child, seen) || undefined) ?? false;
	};

	return declaration("operations").members.filter(ts.isPropertySignature).flatMap(operation =>
		members(member(operation.type, "responses")).flatMap(response =>
			members(member(response.type, "content")).map(media => ({
				name: `${operation.name.getText()} ${response.name.getText()} ${media.name.getText()}`,
				status: Number(response.name.getText()),
				unknown: holdsUnknown(media.type!, new Set()),
				wholeUnknown: media.type!.kind === ts.SyntaxKind.UnknownKeyword
			}))
		)
	);
}

describe("internal actions (services/internal.ts)", () => {
	it("every action a worker route runs, and each one the gateway's own worker actions call, is workersOnly: its owner checks the worker's key too; no public route's is", () => {
		const api = node.broker.getLocalService("api") as unknown as { aliases: { action?: string; route: { opts: { name?: string } } }[] };
		const flagged = (action: string) => (node.broker.registry.getActionEndpointByNodeId(action, node.broker.nodeID) as { action?: { workersOnly?: boolean } } | null)?.action?.workersOnly === true;
		const actionsOf = (route: string) => [...new Set(api.aliases.flatMap(alias => (alias.route.opts.name === route && alias.action && !alias.action.startsWith("api.") ? [alias.action] : [])))];
		expect(actionsOf("worker").length).toBeGreaterThan(15);
		expect(actionsOf("worker").filter(action => !flagged(action))).toEqual([]);
		expect(actionsOf("public").length).toBeGreaterThan(10);
		expect(actionsOf("public").filter(flagged)).toEqual([]);
		// GET /intent-work and GET /webhooks are the gateway's own actions, which page the owners'.
		expect(["mempool.workPage", "webhooks.page"].filter(action => !flagged(action))).toEqual([]);
	});

	it("every action the gateway does not route is internal, and the gateway refuses to run one even when a route names it", async () => {
		const api = node.broker.getLocalService("api") as unknown as { aliases: { action?: string }[] };
		const routed = new Set(api.aliases.map(alias => alias.action));
		const actions = node.broker.registry.getActionList({ skipInternal: true }) as { name: string; action?: { visibility?: string } }[];
		// moleculer-web's own route management (api.addRoute …) is its own business.
		const unrouted = actions.filter(item => !routed.has(item.name) && !item.name.startsWith("api."));
		expect(unrouted.filter(item => item.action?.visibility !== "public").map(item => item.name)).toEqual([]);
		expect(unrouted.map(item => item.name)).toEqual(expect.arrayContaining(["mempool.receive", "verifier.verify", "crankers.standing", "tin.resolve"]));

		const gateway = node.broker.getLocalService("api") as unknown as { addRoute(route: object): void; removeRoute(path: string): void };
		gateway.addRoute({ path: "/exposed", aliases: { "GET totals": "mempool.totals", "GET epoch": "epochs.status" }, mappingPolicy: "restrict" });
		try {
			// moleculer-web answers as for a service that is not there: the action never runs.
			const answer = await fetch(`${node.url}/exposed/totals`);
			expect([answer.status, ((await answer.json()) as { type: string }).type]).toEqual([503, "NOT_READY"]);
			// The same route runs a published action (raw fetch: these paths are not in the document).
			expect((await fetch(`${node.url}/exposed/epoch`)).status).toBe(200);
		} finally {
			gateway.removeRoute("/exposed");
		}
	});
});
