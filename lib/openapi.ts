/**
 * The OpenAPI 3.1 document of the gateway, derived from its route table and the actions'
 * fastest-validator schemas, so the published contract is the one that is enforced.
 * Framework-free: the caller lists the operations; nothing here knows Moleculer.
 */

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

export type Operation = {
	method: string;
	/** moleculer-web style, e.g. `/intents/:id/status`. */
	path: string;
	access: "public" | "worker";
	/** The action behind the route; becomes the operationId. */
	action: string;
	/** The action's fastest-validator params schema. */
	params?: Record<string, unknown>;
	summary?: string;
};

export type ParameterObject = { name: string; in: "path" | "query"; required: boolean; schema: JsonSchema };
type MediaContent = { "application/json": { schema: JsonSchema } };
export type OperationObject = {
	operationId: string;
	summary?: string;
	tags: string[];
	security?: Record<string, string[]>[];
	parameters?: ParameterObject[];
	requestBody?: { required: boolean; content: MediaContent };
	responses: Record<string, { description: string; content: MediaContent }>;
};
export type OpenApiDocument = {
	openapi: "3.1.0";
	info: { title: string; version: string };
	paths: Record<string, Record<string, OperationObject>>;
	components: { schemas: Record<string, JsonSchema>; securitySchemes: Record<string, Record<string, string>> };
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
const json = (schema: JsonSchema): MediaContent => ({ "application/json": { schema } });

function errorSchema(): JsonSchema {
	return {
		type: "object",
		description: "Every error body (SPEC §7); `code` is the HTTP status.",
		required: ["name", "message", "code", "type"],
		properties: {
			name: { type: "string" },
			message: { type: "string" },
			code: { type: "integer" },
			type: { type: "string" },
			data: { type: ["object", "array"] }
		}
	};
}

export function buildOpenApiDocument(input: { title: string; version: string; operations: Operation[] }): OpenApiDocument {
	const paths: OpenApiDocument["paths"] = {};
	const actionUses = new Map<string, number>();
	for (const op of input.operations) actionUses.set(op.action, (actionUses.get(op.action) ?? 0) + 1);
	const usedIds = new Set<string>();
	const errorRef = (description: string) => ({ description, content: json({ $ref: "#/components/schemas/Error" }) });

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

		let operationId = (actionUses.get(op.action) ?? 0) > 1 ? `${op.action}_${method}` : op.action;
		for (let n = 2; usedIds.has(operationId); n++) operationId = `${op.action}_${method}_${n}`;
		usedIds.add(operationId);

		const operation: OperationObject = {
			operationId,
			...(op.summary ? { summary: op.summary } : {}),
			tags: [op.access],
			...(op.access === "worker" ? { security: [{ workerKey: [] }] } : {}),
			...(parameters.length ? { parameters } : {}),
			...(requestBody ? { requestBody } : {}),
			responses: {
				"200": { description: "OK", content: json({}) },
				"4XX": errorRef("The request was refused"),
				"5XX": errorRef("The service failed or is not ready")
			}
		};
		const item = (paths[path] ??= {});
		if (item[method]) throw new Error(`Duplicate operation ${method.toUpperCase()} ${path}`);
		item[method] = operation;
	}

	return {
		openapi: "3.1.0",
		info: { title: input.title, version: input.version },
		paths,
		components: {
			schemas: { Error: errorSchema() },
			securitySchemes: { workerKey: { type: "apiKey", in: "header", name: "x-api-key" } }
		}
	};
}
