/** OpenAPI 3.1 document built from the route table, the fastest-validator schemas and the answers' schemas. */
import { Type } from "@sinclair/typebox";
import { buildOpenApiDocument, fastestToJsonSchema, paramsToObjectSchema, type OpenApiDocument, type Operation } from "../../lib/openapi";
import { AMOUNT_PATTERN, IDENTIFIER_PATTERN } from "../../lib/encoding";
import { INTENT_STATES } from "../../lib/intents";
import { CRANKER_ROLES, address, createIntentParams, heartbeatParams, isoTime, limit, positiveAmount, slot, tin, updateStatusParams } from "../../lib/schemas";
import { TIN_PATTERN } from "../../lib/tin";

describe("fastestToJsonSchema", () => {
	it("maps string shorthands and bare types", () => {
		expect(fastestToJsonSchema("string")).toEqual({ type: "string" });
		expect(fastestToJsonSchema("boolean")).toEqual({ type: "boolean" });
		expect(fastestToJsonSchema("number")).toEqual({ type: "number" });
		expect(fastestToJsonSchema("object")).toEqual({ type: "object" });
		expect(fastestToJsonSchema("any")).toEqual({});
		expect(fastestToJsonSchema("string|min:3|max:10|optional")).toEqual({ type: "string", minLength: 3, maxLength: 10 });
	});

	it("keeps the base type of rules with a custom check, with their pattern and lengths", () => {
		expect(fastestToJsonSchema(address())).toEqual({ type: "string", maxLength: 128 });
		expect(fastestToJsonSchema(isoTime())).toEqual({ type: "string", maxLength: 24 });
		expect(fastestToJsonSchema(tin())).toEqual({ type: "string", pattern: TIN_PATTERN });
		expect(fastestToJsonSchema(positiveAmount())).toEqual({ type: "string", pattern: AMOUNT_PATTERN });
		expect(fastestToJsonSchema({ type: "string", pattern: /^a+$/ })).toEqual({ type: "string", pattern: "^a+$" });
	});

	it("maps numbers: integer, bounds and default (limit() is 1–500, default 50)", () => {
		expect(fastestToJsonSchema(limit())).toEqual({ type: "integer", minimum: 1, maximum: 500, default: 50 });
		expect(fastestToJsonSchema(slot())).toEqual({ type: "integer", minimum: 0, maximum: Number.MAX_SAFE_INTEGER });
		expect(fastestToJsonSchema({ type: "number", positive: true })).toEqual({ type: "number", exclusiveMinimum: 0 });
	});

	it("maps enums, arrays and strict objects", () => {
		expect(fastestToJsonSchema(updateStatusParams.status)).toEqual({ enum: [...INTENT_STATES] });
		expect(fastestToJsonSchema(heartbeatParams.roles)).toEqual({ type: "array", minItems: 1, maxItems: 3, uniqueItems: true, items: { enum: [...CRANKER_ROLES] } });
		expect(fastestToJsonSchema(heartbeatParams.liquidity)).toEqual({
			type: "array",
			maxItems: 64,
			items: {
				type: "object",
				properties: { tokenMintAddress: { type: "string", maxLength: 128 }, available: { type: "string", pattern: AMOUNT_PATTERN } },
				required: ["tokenMintAddress", "available"],
				additionalProperties: false
			}
		});
		// Not strict: extra properties are allowed.
		expect(fastestToJsonSchema({ type: "object", props: { a: "string|optional" } })).toEqual({ type: "object", properties: { a: { type: "string" } } });
	});

	it("carries description and nullable, and reads an array of rules as anyOf", () => {
		expect(fastestToJsonSchema({ type: "string", description: "A name", nullable: true })).toEqual({ type: ["string", "null"], description: "A name" });
		expect(fastestToJsonSchema(["string", "number"])).toEqual({ anyOf: [{ type: "string" }, { type: "number" }] });
	});
});

describe("paramsToObjectSchema", () => {
	it("converts createIntentParams: required fields, closed object, patterns", () => {
		const schema = paramsToObjectSchema(createIntentParams);
		expect(schema.type).toBe("object");
		expect(schema.additionalProperties).toBe(false);
		expect(Object.keys(schema.properties ?? {})).not.toContain("$$strict");
		expect(schema.required).toEqual(expect.arrayContaining(["paymentId", "amount", "feeLimit", "expiresAtSlot", "senderAuthorizationSignature"]));
		expect(schema.required).not.toContain("recipientHash");
		expect(schema.required).not.toContain("transactionCommitment");
		expect(schema.properties?.amount).toEqual({ type: "string", pattern: AMOUNT_PATTERN });
		expect(schema.properties?.paymentId).toEqual({ type: "string", pattern: IDENTIFIER_PATTERN });
	});

	it("does not require fields that have a default, nor close an object without $$strict", () => {
		const schema = paramsToObjectSchema({ limit: limit(), status: { type: "string", optional: true } });
		expect(schema).toEqual({ type: "object", properties: { limit: { type: "integer", minimum: 1, maximum: 500, default: 50 }, status: { type: "string" } } });
	});
});

const Thing = Type.Object({ id: Type.String() }, { $id: "Thing" });
const answers = { 200: { description: "OK", content: { "application/json": Thing } } };
/** An operation of the table, with the parts every one has. */
const op = (operation: Omit<Operation, "tag" | "summary" | "answers" | "errors"> & Partial<Operation>): Operation => ({ tag: "t", summary: `${operation.method} ${operation.path}`, answers, errors: [], ...operation });

const operations: Operation[] = [
	op({ method: "GET", path: "/intents", access: "worker", action: "mempool.list", params: { status: { type: "string", optional: true }, limit: limit() } }),
	op({ method: "PATCH", path: "/intents/:id/status", access: "worker", signed: true, action: "mempool.updateStatus", params: updateStatusParams, errors: ["NOT_FOUND", "VERSION_CONFLICT", "INVALID_TRANSITION", "NOT_LEASE_HOLDER"] }),
	op({ method: "POST", path: "/crankers/heartbeat", access: "worker", signed: true, action: "crankers.heartbeat", params: heartbeatParams }),
	op({ method: "POST", path: "/internal/wake", access: "worker", action: "receiver.wake", errors: ["VERIFIER_UNAVAILABLE"] }),
	op({ method: "POST", path: "/intents", access: "public", action: "receiver.submit", params: createIntentParams, summary: "Submit a payment intent" }),
	op({ method: "GET", path: "/intents/:id", access: "public", action: "mempool.view", params: { id: { type: "string", max: 64 } } }),
	op({ method: "GET", path: "/registry/tins/:tin", access: "public", action: "tin.getRoute" }),
	op({ method: "POST", path: "/", access: "public", action: "network.status" }),
	// The same action twice: operationIds must stay unique.
	op({ method: "GET", path: "/epoch/status", access: "public", action: "epochs.status" }),
	op({ method: "POST", path: "/epoch/status", access: "public", action: "epochs.status" }),
	op({ method: "GET", path: "/metrics", access: "public", action: "network.metrics", security: [{}, { metricsKey: [] }] })
];
const input = { title: "Settlement Coordination Service", version: "0.1.0", description: "d", tags: [{ name: "t", description: "T" }] };

describe("buildOpenApiDocument", () => {
	const doc = buildOpenApiDocument({ ...input, operations });

	it("has the OpenAPI 3.1 envelope", () => {
		expect(doc.openapi).toBe("3.1.0");
		expect(doc.info).toEqual(expect.objectContaining({ title: "Settlement Coordination Service", version: "0.1.0", license: { name: "Apache-2.0", identifier: "Apache-2.0" } }));
		expect(doc.servers).toEqual([expect.objectContaining({ url: "/" })]);
		expect(JSON.parse(JSON.stringify(doc))).toEqual(doc);
	});

	it("turns :id segments into {id} path parameters, schema taken from params", () => {
		expect(doc.paths["/intents/:id/status"]).toBeUndefined();
		const patch = doc.paths["/intents/{id}/status"].patch;
		expect(patch.parameters?.[0]).toEqual({ name: "id", in: "path", required: true, schema: { type: "string", maxLength: 64 } });
		// Without a params schema the path parameter is a plain string.
		expect(doc.paths["/registry/tins/{tin}"].get.parameters).toEqual([{ name: "tin", in: "path", required: true, schema: { type: "string" } }]);
	});

	it("puts GET params in the query string", () => {
		const list = doc.paths["/intents"].get;
		expect(list.requestBody).toBeUndefined();
		expect(list.parameters).toEqual([
			{ name: "status", in: "query", required: false, schema: { type: "string" } },
			{ name: "limit", in: "query", required: false, schema: { type: "integer", minimum: 1, maximum: 500, default: 50 } }
		]);
		// A path parameter is not repeated in the query.
		expect(doc.paths["/intents/{id}"].get.parameters?.map(p => p.in)).toEqual(["path"]);
	});

	it("puts POST/PATCH params in a JSON request body, without the path parameters", () => {
		const submit = doc.paths["/intents"].post;
		expect(submit.parameters).toBeUndefined();
		expect(submit.summary).toBe("Submit a payment intent");
		expect(submit.requestBody).toEqual({ required: true, content: { "application/json": { schema: paramsToObjectSchema(createIntentParams) } } });

		const body = doc.paths["/intents/{id}/status"].patch.requestBody;
		const schema = body?.content["application/json"].schema as { additionalProperties?: boolean; properties?: object; required?: string[] } | undefined;
		expect(body?.required).toBe(true);
		expect(schema?.additionalProperties).toBe(false);
		expect(Object.keys(schema?.properties ?? {})).toEqual(["status", "crankerPubkey", "expectedVersion", "transactionSignature", "slot", "lastValidBlockHeight", "reason"]);
		expect(schema?.required).toEqual(["status", "crankerPubkey", "expectedVersion"]);
		// No params, no body.
		expect(doc.paths["/internal/wake"].post.requestBody).toBeUndefined();
	});

	it("secures worker operations with x-api-key, signed ones with the key and the request signature together", () => {
		expect(doc.components.securitySchemes.workerKey).toEqual(expect.objectContaining({ type: "apiKey", in: "header", name: "x-api-key" }));
		for (const { path, method, access, signed, security } of operations) {
			const operation = doc.paths[path.replace(/:(\w+)/g, "{$1}")][method.toLowerCase()];
			const headers = operation.parameters?.filter(p => p.in === "header").map(p => p.name) ?? [];
			expect(operation.security).toEqual(security ?? (access === "public" ? [] : signed ? [{ workerKey: [], crankerSignature: [] }] : [{ workerKey: [] }]));
			expect(headers).toEqual(signed ? ["Signature", "Signature-Input", "Content-Digest"] : []);
		}
	});

	it("answers the declared success bodies, named schemas as components, and each error status with its error types", () => {
		const { responses } = doc.paths["/intents/{id}/status"].patch;
		expect(responses["200"]).toEqual({ description: "OK", content: { "application/json": { schema: { $ref: "#/components/schemas/Thing" } } } });
		expect(doc.components.schemas.Thing).toEqual({ type: "object", properties: { id: { type: "string" } }, required: ["id"] });
		expect(Object.keys(responses)).toEqual(["200", "403", "404", "409"]);
		expect(responses["409"].content?.["application/json"].schema).toEqual({
			allOf: [{ $ref: "#/components/schemas/Error" }, { type: "object", properties: { code: { type: "integer", const: 409 }, type: { type: "string", enum: ["VERSION_CONFLICT", "INVALID_TRANSITION"] } } }]
		});
		expect(doc.paths["/internal/wake"].post.responses["503"].headers).toEqual({ "Retry-After": expect.anything() });
		const error = doc.components.schemas.Error as { required: string[] };
		expect(error.required).toEqual(["name", "message", "code", "type"]);
	});

	it("refuses two different schemas under one name", () => {
		const other = op({ method: "GET", path: "/other", access: "public", action: "other.get", answers: { 200: { description: "OK", content: { "application/json": Type.Object({ n: Type.Number() }, { $id: "Thing" }) } } } });
		expect(() => buildOpenApiDocument({ ...input, operations: [operations[0], other] })).toThrow("Two different schemas are named Thing");
	});

	it("uses the action as operationId, suffixed with the method when an action is used twice", () => {
		const ids = allOperations(doc).map(op => op.operationId);
		expect(new Set(ids).size).toBe(ids.length);
		expect(doc.paths["/intents"].get.operationId).toBe("mempool.list");
		expect(doc.paths["/epoch/status"].get.operationId).toBe("epochs.status_get");
		expect(doc.paths["/epoch/status"].post.operationId).toBe("epochs.status_post");
	});

	it("refuses the same method and path twice", () => {
		const twice = [operations[0], { ...operations[0], action: "other.list" }];
		expect(() => buildOpenApiDocument({ ...input, operations: twice })).toThrow("Duplicate operation GET /intents");
	});

	// The served document is linted by Redocly (test/integration/openapi.test.ts); here, the structural
	// rules a validator would reject this small table's document for.
	it("is structurally valid OpenAPI 3.1", () => {
		const methods = new Set(["get", "put", "post", "delete", "options", "head", "patch", "trace"]);
		for (const [path, item] of Object.entries(doc.paths)) {
			expect(path).toMatch(/^\/([^:]*)$/);
			const templated = [...path.matchAll(/\{([^}]+)\}/g)].map(m => m[1]);
			for (const [method, op] of Object.entries(item)) {
				expect(methods.has(method)).toBe(true);
				expect(typeof op.operationId).toBe("string");
				expect(Object.keys(op.responses).length).toBeGreaterThan(0);
				for (const [code, response] of Object.entries(op.responses)) {
					expect(code).toMatch(/^[1-5](\d\d|XX)$/);
					expect(typeof response.description).toBe("string");
				}
				const params = op.parameters ?? [];
				// Every template has exactly one required path parameter; (name, in) pairs are unique.
				expect(params.filter(p => p.in === "path").map(p => p.name)).toEqual(templated);
				for (const p of params) if (p.in === "path") expect(p.required).toBe(true);
				expect(new Set(params.map(p => `${p.in}:${p.name}`)).size).toBe(params.length);
				if (op.requestBody) expect(Object.keys(op.requestBody.content)).toEqual(["application/json"]);
				for (const requirement of op.security ?? []) for (const name of Object.keys(requirement)) expect(doc.components.securitySchemes[name]).toBeDefined();
			}
		}
		// Every $ref resolves inside the document.
		for (const ref of JSON.stringify(doc).match(/"\$ref":"[^"]+"/g) ?? []) {
			const pointer = ref.slice(8, -1).replace(/^#\//, "").split("/");
			expect(pointer.reduce<unknown>((node, key) => (node as Record<string, unknown>)?.[key], doc)).toBeDefined();
		}
	});
});

function allOperations(doc: OpenApiDocument) {
	return Object.values(doc.paths).flatMap(item => Object.values(item));
}
