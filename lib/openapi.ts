/**
 * The OpenAPI 3.1 document of the gateway: its input from the route table and the actions'
 * fastest-validator schemas, its answers from the TypeBox schemas the answers are typed with, so
 * the published contract is the one that is enforced and built. Framework-free: the caller lists
 * the operations; nothing here knows Moleculer.
 */
import { ErrorBodySchema } from "./answers";
import { ERROR_STATUS, type ErrorType } from "./errors";

/** A JSON Schema 2020-12 object (OpenAPI 3.1's dialect), limited to the keywords produced here. */
export interface JsonSchema {
	type?: string | string[];
	description?: string;
	default?: unknown;
	enum?: unknown[];
	pattern?: string;
	minLength?: number;
	maxLength?: number;
	minimum?: number;
	maximum?: number;
	exclusiveMinimum?: number;
	exclusiveMaximum?: number;
	items?: JsonSchema;
	minItems?: number;
	maxItems?: number;
	uniqueItems?: boolean;
	properties?: Record<string, JsonSchema>;
	required?: string[];
	additionalProperties?: boolean;
	anyOf?: JsonSchema[];
	$ref?: string;
}

/** Any JSON Schema, such as a TypeBox schema; a sub-schema with `$id` is published as a named component. */
export type AnswerSchema = object;

export type Answer = {
	description: string;
	/** By media type; none for an answer without a body. */
	content?: Record<string, AnswerSchema>;
	headers?: Record<string, { description: string; schema: AnswerSchema }>;
};

export type Operation = {
	method: string;
	/** moleculer-web style, e.g. `/intents/:id/status`. */
	path: string;
	access: "public" | "worker";
	/** A Cranker route: the request carries the Cranker's RFC 9421 signature besides the worker key. */
	signed?: boolean;
	/** The action behind the route; becomes the operationId. */
	action: string;
	/** The action's fastest-validator params schema. */
	params?: Record<string, unknown>;
	tag: string;
	summary: string;
	description?: string;
	/** Every success answer, by status. */
	answers: Record<number, Answer>;
	/** Every error type the route can answer; grouped by status (ERROR_STATUS). */
	errors: readonly ErrorType[];
	/** Instead of what `access` and `signed` imply: requirements of SECURITY_SCHEMES, any one of which admits. */
	security?: Record<string, string[]>[];
	/** Request headers the route reads (besides those of its access). */
	headers?: ParameterObject[];
};

export type ParameterObject = { name: string; in: "path" | "query" | "header"; required: boolean; description?: string; schema: JsonSchema };
type MediaContent = Record<string, { schema: AnswerSchema }>;
type ResponseObject = { description: string; headers?: Record<string, { description: string; schema: AnswerSchema }>; content?: MediaContent };
export type OperationObject = {
	operationId: string;
	summary: string;
	description?: string;
	tags: string[];
	security: Record<string, string[]>[];
	parameters?: ParameterObject[];
	requestBody?: { required: boolean; content: MediaContent };
	responses: Record<string, ResponseObject>;
};
export type OpenApiDocument = {
	openapi: "3.1.0";
	info: { title: string; version: string; description: string; license: { name: string; identifier: string } };
	servers: { url: string; description: string }[];
	tags: { name: string; description: string }[];
	paths: Record<string, Record<string, OperationObject>>;
	components: { schemas: Record<string, AnswerSchema>; securitySchemes: Record<string, Record<string, string>> };
};

type Rule = Record<string, unknown>;

/** fastest-validator shorthand: "string|min:3|optional" → { type: "string", min: 3, optional: true }. */
function expandShorthand(shorthand: string): Rule {
	const [type, ...options] = shorthand.split("|");
	const rule: Rule = { type: type.trim() };
	for (const option of options) {
		const [key, value] = option.split(":").map(part => part.trim());
		if (value === undefined || value === "true") rule[key] = true;
		else if (value === "false") rule[key] = false;
		else rule[key] = value !== "" && Number.isFinite(Number(value)) ? Number(value) : value;
	}
	return rule;
}

function asRule(rule: unknown): Rule {
	if (typeof rule === "string") return expandShorthand(rule);
	return rule !== null && typeof rule === "object" && !Array.isArray(rule) ? (rule as Rule) : {};
}

const num = (value: unknown) => (typeof value === "number" && Number.isFinite(value) ? value : undefined);
const list = (value: unknown) => (Array.isArray(value) ? [...value] : undefined);

/** Drops keys left undefined so the document serializes without noise (and deep-equals cleanly). */
function compact(schema: JsonSchema): JsonSchema {
	for (const key of Object.keys(schema) as (keyof JsonSchema)[]) if (schema[key] === undefined) delete schema[key];
	return schema;
}

/** A field is required unless it is optional or the validator fills it in with a default. */
function isOptional(rule: unknown): boolean {
	if (Array.isArray(rule)) return rule.some(isOptional);
	const r = asRule(rule);
	return r.optional === true || r.default !== undefined;
}

function objectSchema(props: Record<string, unknown>, closed: boolean): JsonSchema {
	const properties: Record<string, JsonSchema> = {};
	const required: string[] = [];
	for (const [key, rule] of Object.entries(props)) {
		properties[key] = fastestToJsonSchema(rule);
		if (!isOptional(rule)) required.push(key);
	}
	return compact({ type: "object", properties, required: required.length ? required : undefined, additionalProperties: closed ? false : undefined });
}

/** The type-specific part of a rule. `custom` checks cannot be expressed, so only the base type shows. */
function baseSchema(rule: Rule): JsonSchema {
	switch (rule.type) {
		case "string":
			return {
				type: "string",
				pattern: rule.pattern instanceof RegExp ? rule.pattern.source : typeof rule.pattern === "string" ? rule.pattern : undefined,
				minLength: num(rule.length ?? rule.min) ?? (rule.empty === false ? 1 : undefined),
				maxLength: num(rule.length ?? rule.max),
				enum: list(rule.enum)
			};
		case "number":
			return {
				type: rule.integer === true ? "integer" : "number",
				minimum: num(rule.min),
				maximum: num(rule.max),
				exclusiveMinimum: rule.positive === true ? 0 : undefined,
				exclusiveMaximum: rule.negative === true ? 0 : undefined
			};
		case "boolean":
			return { type: "boolean" };
		case "enum":
			return { enum: list(rule.values) };
		case "array":
			return {
				type: "array",
				items: rule.items === undefined ? undefined : fastestToJsonSchema(rule.items),
				minItems: num(rule.length ?? rule.min) ?? (rule.empty === false ? 1 : undefined),
				maxItems: num(rule.length ?? rule.max),
				uniqueItems: rule.unique === true ? true : undefined
			};
		case "object": {
			const props = rule.props ?? rule.properties;
			return props && typeof props === "object" ? objectSchema(props as Record<string, unknown>, rule.strict === true) : { type: "object" };
		}
		case "multi":
			return { anyOf: (list(rule.rules) ?? []).map(fastestToJsonSchema) };
		default:
			// "any" and kinds not mapped here accept anything rather than claim a wrong constraint.
			return {};
	}
}

/** Converts one fastest-validator rule (object, shorthand string or array of alternatives). */
export function fastestToJsonSchema(rule: unknown): JsonSchema {
	// fastest-validator reads an array of rules as "any one of these".
	if (Array.isArray(rule)) return { anyOf: rule.map(fastestToJsonSchema) };
	const r = asRule(rule);
	const schema = compact(baseSchema(r));
	if (r.nullable === true && typeof schema.type === "string") schema.type = [schema.type, "null"];
	if (typeof r.description === "string") schema.description = r.description;
	// A function default is computed per call and has no JSON value.
	if (r.default !== undefined && typeof r.default !== "function") schema.default = r.default;
	return schema;
}

/** Converts a whole action params schema; `$$` keys are validator options, not fields. */
export function paramsToObjectSchema(params: Record<string, unknown>): JsonSchema {
	const fields = Object.fromEntries(Object.entries(params).filter(([key]) => !key.startsWith("$$")));
	return objectSchema(fields, params.$$strict === true);
}

const BODY_METHODS = new Set(["post", "put", "patch"]);
const json = (schema: AnswerSchema): MediaContent => ({ "application/json": { schema } });

/** SPEC §6.1: the headers of a Cranker's request signature, all required. */
const SIGNATURE_HEADERS: ParameterObject[] = [
	{ name: "Signature", in: "header", required: true, description: "RFC 9421 signature `sig1=:<base64>:` by the Cranker named in crankerPubkey", schema: { type: "string", maxLength: 1024 } },
	{
		name: "Signature-Input",
		in: "header",
		required: true,
		description: 'RFC 9421 `sig1=("@method" "@target-uri" "content-digest");created=<s>;keyid="<base58>";alg="ed25519"`',
		schema: { type: "string", maxLength: 1024 }
	},
	{ name: "Content-Digest", in: "header", required: true, description: "RFC 9530 `sha-256=:<base64>:` of the body bytes as sent", schema: { type: "string", maxLength: 1024 } }
];

const SECURITY_SCHEMES = {
	workerKey: { type: "apiKey", in: "header", name: "x-api-key", description: "One of WORKER_API_KEYS" },
	crankerSignature: {
		type: "apiKey",
		in: "header",
		name: "Signature",
		description: "The Cranker's RFC 9421 request signature (with Signature-Input and Content-Digest), always together with x-api-key (docs/signing.md §6)"
	},
	metricsKey: { type: "http", scheme: "bearer", description: "METRICS_API_KEY, when it is set: required by the Prometheus text of GET /metrics" }
};

const RETRY_AFTER = { description: "Seconds to wait before retrying", schema: { type: "integer", minimum: 0 } };
const ERROR_REF = { $ref: "#/components/schemas/Error" };

/** The error answers of a route, one per status, each naming the error types it can carry. */
function errorResponses(errors: readonly ErrorType[]): Record<string, ResponseObject> {
	const byStatus = new Map<number, ErrorType[]>();
	for (const type of new Set(errors)) byStatus.set(ERROR_STATUS[type], [...(byStatus.get(ERROR_STATUS[type]) ?? []), type]);
	const responses: Record<string, ResponseObject> = {};
	for (const [status, types] of [...byStatus].sort(([a], [b]) => a - b))
		responses[status] = {
			description: types.join(", "),
			...(status === 429 || status === 503 ? { headers: { "Retry-After": RETRY_AFTER } } : {}),
			content: json({ allOf: [ERROR_REF, { type: "object", properties: { code: { type: "integer", const: status }, type: { type: "string", enum: types } } }] })
		};
	return responses;
}

/**
 * Replaces every sub-schema carrying `$id` by a `$ref` to its entry in `components` (added once),
 * so generated clients get named types. Values of `enum`, `const` and `default` are data, left as they are.
 */
function hoistNamedSchemas(schema: unknown, components: Record<string, AnswerSchema>): unknown {
	if (Array.isArray(schema)) return schema.map(item => hoistNamedSchemas(item, components));
	if (schema === null || typeof schema !== "object") return schema;
	const out: Record<string, unknown> = {};
	// Object.entries leaves out TypeBox's symbol-keyed markers.
	for (const [key, value] of Object.entries(schema)) out[key] = key === "enum" || key === "const" || key === "default" ? value : hoistNamedSchemas(value, components);
	if (typeof out.$id !== "string") return out;
	const { $id: name, ...named } = out as { $id: string };
	if (components[name] !== undefined && JSON.stringify(components[name]) !== JSON.stringify(named)) throw new Error(`Two different schemas are named ${name}`);
	components[name] = named;
	return { $ref: `#/components/schemas/${name}` };
}

export function buildOpenApiDocument(input: {
	title: string;
	version: string;
	description: string;
	tags: { name: string; description: string }[];
	operations: Operation[];
}): OpenApiDocument {
	const paths: OpenApiDocument["paths"] = {};
	const schemas: Record<string, AnswerSchema> = {};
	hoistNamedSchemas(ErrorBodySchema, schemas);
	const actionUses = new Map<string, number>();
	for (const op of input.operations) actionUses.set(op.action, (actionUses.get(op.action) ?? 0) + 1);
	const usedIds = new Set<string>();

	for (const op of input.operations) {
		const method = op.method.toLowerCase();
		const pathNames: string[] = [];
		// moleculer-web's `:id` (or optional `:id?`) → OpenAPI's `{id}`; path parameters are always required there.
		const path = op.path.replace(/:([A-Za-z0-9_$]+)\??/g, (_, name: string) => {
			pathNames.push(name);
			return `{${name}}`;
		});
		const params = op.params ?? {};
		const parameters: ParameterObject[] = pathNames.map(name => ({
			name,
			in: "path",
			required: true,
			schema: Object.hasOwn(params, name) ? fastestToJsonSchema(params[name]) : { type: "string" }
		}));
		const rest = paramsToObjectSchema(Object.fromEntries(Object.entries(params).filter(([key]) => !pathNames.includes(key))));
		const fields = Object.keys(rest.properties ?? {});

		let requestBody: OperationObject["requestBody"];
		if (BODY_METHODS.has(method)) {
			if (fields.length) requestBody = { required: (rest.required?.length ?? 0) > 0, content: json(rest) };
		} else {
			// GET/DELETE take their input from the query string (the gateway refuses a body on GET).
			for (const name of fields) parameters.push({ name, in: "query", required: rest.required?.includes(name) ?? false, schema: rest.properties![name] });
		}
		if (op.signed) parameters.push(...SIGNATURE_HEADERS);
		if (op.headers) parameters.push(...op.headers);

		let operationId = (actionUses.get(op.action) ?? 0) > 1 ? `${op.action}_${method}` : op.action;
		for (let n = 2; usedIds.has(operationId); n++) operationId = `${op.action}_${method}_${n}`;
		usedIds.add(operationId);

		const responses: Record<string, ResponseObject> = {};
		for (const [status, answer] of Object.entries(op.answers))
			responses[status] = {
				description: answer.description,
				...(answer.headers ? { headers: answer.headers } : {}),
				...(answer.content ? { content: Object.fromEntries(Object.entries(answer.content).map(([type, schema]) => [type, { schema: hoistNamedSchemas(schema, schemas) as AnswerSchema }])) } : {})
			};
		Object.assign(responses, errorResponses(op.errors));

		const operation: OperationObject = {
			operationId,
			summary: op.summary,
			...(op.description ? { description: op.description } : {}),
			tags: [op.tag],
			// Public routes take no credentials: an empty requirement says so explicitly.
			security: op.security ?? (op.access === "public" ? [] : [op.signed ? { workerKey: [], crankerSignature: [] } : { workerKey: [] }]),
			...(parameters.length ? { parameters } : {}),
			...(requestBody ? { requestBody } : {}),
			responses
		};
		const item = (paths[path] ??= {});
		if (item[method]) throw new Error(`Duplicate operation ${method.toUpperCase()} ${path}`);
		item[method] = operation;
	}

	return {
		openapi: "3.1.0",
		info: { title: input.title, version: input.version, description: input.description, license: { name: "Apache-2.0", identifier: "Apache-2.0" } },
		servers: [{ url: "/", description: "The Node that serves this document" }],
		tags: input.tags,
		paths,
		components: { schemas, securitySchemes: SECURITY_SCHEMES }
	};
}
