/** GET /openapi.json: generated from the route tables and the actions' own parameter schemas (SPEC §4). */
import { startNode, type TestNode } from "../helpers/node";

let node: TestNode;
beforeAll(async () => {
	node = await startNode();
});
afterAll(() => node.stop());

/** moleculer-web's `:name` segments in OpenAPI's `{name}` form. */
const openApiPath = (path: string) => path.replace(/:([A-Za-z_]\w*)/g, "{$1}");

describe("GET /openapi.json", () => {
	it("documents exactly the routes the gateway serves", async () => {
		const { status, body } = await node.http("GET", "/openapi.json");
		expect(status).toBe(200);
		expect(body.openapi).toBe("3.1.0");
		const documented = Object.entries(body.paths as Record<string, Record<string, unknown>>).flatMap(([path, ops]) => Object.keys(ops).map(method => `${method.toUpperCase()} ${path}`));
		const api = node.broker.getLocalService("api") as unknown as { aliases: { method: string; fullPath: string }[] };
		const served = api.aliases.map(alias => `${alias.method} ${openApiPath(alias.fullPath)}`);
		expect(new Set(documented)).toEqual(new Set(served));
		expect(documented).toHaveLength(served.length);
	});

	it("takes each operation's input from the schema its action validates with, and documents SPEC §7 errors and the worker key", async () => {
		const { body } = await node.http("GET", "/openapi.json");
		const submit = body.paths["/intents"].post;
		expect(submit.security).toBeUndefined();
		const intentSchema = submit.requestBody.content["application/json"].schema;
		expect(intentSchema.required).toEqual(expect.arrayContaining(["paymentId", "senderWallet", "amount", "expiresAtSlot"]));
		expect(intentSchema.required).not.toContain("recipientHash");
		expect(intentSchema.additionalProperties).toBe(false);
		expect(intentSchema.properties.amount.pattern).toBe("^(0|[1-9][0-9]{0,19})$");

		const patch = body.paths["/intents/{id}/status"].patch;
		expect(patch.security).toEqual([{ workerKey: [] }]);
		expect(patch.parameters).toEqual([expect.objectContaining({ name: "id", in: "path", required: true })]);
		expect(patch.requestBody.content["application/json"].schema.properties.status.enum).toContain("CRANKER_LEASED");

		const work = body.paths["/intent-work"].get;
		expect(work.parameters).toEqual([expect.objectContaining({ name: "limit", in: "query", schema: expect.objectContaining({ type: "integer", minimum: 1, maximum: 500, default: 50 }) })]);

		expect(body.components.securitySchemes.workerKey).toEqual({ type: "apiKey", in: "header", name: "x-api-key" });
		expect(body.components.schemas.Error.required).toEqual(expect.arrayContaining(["name", "message", "code", "type"]));
		for (const ops of Object.values(body.paths as Record<string, Record<string, { responses: Record<string, unknown> }>>))
			for (const op of Object.values(ops)) {
				expect(op.responses["4XX"]).toBeDefined();
				expect(op.responses["5XX"]).toBeDefined();
			}
	});
});
