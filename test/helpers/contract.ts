/**
 * The contract check of the HTTP suites: every answer the gateway gives them must be one the
 * OpenAPI document (GET /openapi.json) describes: a declared status, the headers it declares
 * (Location, Retry-After), a declared media type, and a body its schema accepts (ajv, JSON Schema
 * 2020-12, OpenAPI 3.1's dialect); and never an unexpected 500. The document is built
 * in-process by the same function the gateway serves it with; the answers it describes do not
 * depend on the actions' input schemas, which only a running broker knows.
 */
import Ajv2020, { type ValidateFunction } from "ajv/dist/2020";
import addFormats from "ajv-formats";
import type { OpenApiDocument, OperationObject } from "../../lib/openapi";
import { openApiDocument } from "../../services/api.service";

/**
 * Refusals that come before a request is routed, so a path or method no route has can get them
 * too, each with the error types it may carry there.
 */
const UNROUTED: Record<number, readonly string[]> = { 404: ["NOT_FOUND"], 413: ["PAYLOAD_TOO_LARGE"], 503: ["NOT_READY", "SHUTTING_DOWN"] };

/** An answer as received: `path` without the query string, `headers` as sent, `text` the body. */
export interface ReceivedAnswer {
	method: string;
	path: string;
	status: number;
	headers: { get(name: string): string | null };
	text: string;
}

export interface ContractOptions {
	/**
	 * Every operation declares 500 INTERNAL_ERROR, so the document alone would pass any crash: a 500
	 * is a violation unless the test provokes one on purpose and says so here.
	 */
	allowInternalError?: boolean;
}

let contract: { doc: OpenApiDocument; ajv: Ajv2020; validators: Map<string, ValidateFunction> } | undefined;

function load() {
	if (!contract) {
		const ajv = new Ajv2020({ strict: false, allErrors: true });
		addFormats(ajv);
		contract = { doc: openApiDocument(() => undefined), ajv, validators: new Map() };
	}
	return contract;
}

/** The operation a request reaches: a literal segment wins over a path parameter, as in the gateway. */
function findOperation(doc: OpenApiDocument, method: string, path: string): { template: string; operation: OperationObject } | undefined {
	const segments = path.split("/");
	let best: { template: string; operation: OperationObject; parameters: number } | undefined;
	for (const [template, item] of Object.entries(doc.paths)) {
		const operation = item[method];
		const parts = template.split("/");
		if (!operation || parts.length !== segments.length) continue;
		let parameters = 0;
		const matches = parts.every((part, i) => (part.startsWith("{") ? segments[i] !== "" && ++parameters > 0 : part === segments[i]));
		if (matches && (!best || parameters < best.parameters)) best = { template, operation, parameters };
	}
	return best;
}

function validator(key: string, schema: object): ValidateFunction {
	const { ajv, validators, doc } = load();
	let validate = validators.get(key);
	// The schema's `#/components/...` references resolve against a root that carries the components.
	if (!validate) validators.set(key, (validate = ajv.compile({ ...schema, components: doc.components })));
	return validate;
}

function schemaProblem(key: string, schema: object, value: unknown): string | null {
	const validate = validator(key, schema);
	return validate(value) ? null : load().ajv.errorsText(validate.errors, { dataVar: "body" });
}

/** Header values are text; a header declared as an integer is checked as the number it spells. */
function headerValue(schema: { type?: unknown }, raw: string): unknown {
	return schema.type === "integer" && /^-?\d+$/.test(raw) ? Number(raw) : raw;
}

/** Why an answer breaks the contract, or null when the document describes it. */
export function contractViolation(answer: ReceivedAnswer, options: ContractOptions = {}): string | null {
	const { method, path, status, headers, text } = answer;
	// CORS preflights are answered by the gateway before any route (lib/cors.ts), with no body, and
	// test/integration/cors.test.ts asserts them; they are not operations of the API.
	if (method === "OPTIONS") return null;
	if (status === 500 && !options.allowInternalError) return "an unexpected 500 (a test that provokes one on purpose passes { allowInternalError: true })";
	const { doc } = load();
	const verb = method.toLowerCase();
	const contentType = headers.get("content-type");
	const mediaType = (contentType ?? "").split(";")[0].trim().toLowerCase();
	const found = findOperation(doc, verb, path);
	const body = (): { value: unknown } | string => {
		try {
			return { value: JSON.parse(text) };
		} catch {
			return `the body is not JSON: ${text.slice(0, 120)}`;
		}
	};

	if (!found) {
		// No route: the gateway's 404, or a refusal it makes before routing; always an Error body.
		const types = UNROUTED[status];
		if (!types) return `${status} to a path or method the document has no operation for`;
		if (mediaType !== "application/json") return `content-type ${contentType} instead of application/json`;
		const parsed = body();
		if (typeof parsed === "string") return parsed;
		const problem = schemaProblem("Error", doc.components.schemas.Error, parsed.value);
		if (problem) return problem;
		const { code, type } = parsed.value as { code?: unknown; type?: unknown };
		if (code !== status) return `code is not the status ${status}`;
		if (!types.includes(String(type))) return `type ${String(type)} with status ${status} (expected ${types.join(" or ")})`;
		// As every routed 503 declares it.
		if (status === 503 && headers.get("retry-after") === null) return "a 503 without Retry-After";
		return null;
	}

	const { template, operation } = found;
	const response = operation.responses[status];
	if (!response) return `status ${status} is not declared for ${method} ${template} (declared: ${Object.keys(operation.responses).join(", ")})`;
	for (const [name, header] of Object.entries(response.headers ?? {})) {
		const raw = headers.get(name);
		if (raw === null) return `${status} of ${method} ${template} declares the header ${name}, which did not come`;
		const problem = schemaProblem(`${verb} ${template} ${status} header ${name}`, header.schema, headerValue(header.schema as { type?: unknown }, raw));
		if (problem) return `header ${name}: ${problem.replace(/^body/, name)}`;
	}
	if (!response.content) return text === "" ? null : `status ${status} of ${method} ${template} declares no body, but one came`;
	const media = response.content[mediaType];
	if (!media) return `content-type ${contentType} is not declared for ${status} of ${method} ${template} (declared: ${Object.keys(response.content).join(", ")})`;
	let value: unknown = text;
	if (mediaType === "application/json") {
		const parsed = body();
		if (typeof parsed === "string") return parsed;
		value = parsed.value;
	}
	return schemaProblem(`${verb} ${template} ${status} ${mediaType}`, media.schema, value);
}
