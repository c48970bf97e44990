/**
 * api: the REST gateway (moleculer-web). It owns no data: it maps the routes of SPEC §4 to the
 * owners' actions, checks worker keys, limits body size and request rate, and shapes every error
 * as SPEC §7's body.
 */
import { isReady } from "./health";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Context, Service, ServiceSchema } from "moleculer";
import ApiGateway, { type ApiSettingsSchema } from "moleculer-web";
import type { Config } from "../lib/config";
import { ERROR_STATUS, ServiceError, type ErrorType } from "../lib/errors";
import { buildOpenApiDocument, type Operation } from "../lib/openapi";
import { createKeyChecker, loadOrCreateWorkerKeys } from "../lib/secrets";

/** SPEC §10: request bodies up to 65,536 bytes as sent. */
const MAX_BODY_BYTES = 65_536;

type WireError = { name?: string; message?: string; code?: unknown; status?: unknown; type?: unknown; data?: unknown };

/** Maps anything thrown below the gateway to a SPEC §7 error; unknown failures become a bare 500. */
function toWireError(err: WireError): ServiceError {
	if (typeof err.type === "string" && err.type in ERROR_STATUS) return new ServiceError(err.type as ErrorType, err.message ?? "", err.data);
	switch (err.type) {
		case "entity.too.large":
			return new ServiceError("PAYLOAD_TOO_LARGE", `Request bodies are limited to ${MAX_BODY_BYTES} bytes`);
		case "entity.parse.failed":
			return new ServiceError("VALIDATION_ERROR", "The request body is not valid JSON", [
				{ type: "json", field: "$body", message: "The body must be a JSON document without the key __proto__." }
			]);
		case "RATE_LIMIT_EXCEEDED":
		case undefined:
			if (err.code === 429 || err.name === "RateLimitExceeded") return new ServiceError("RATE_LIMITED", "Too many requests; retry later");
			break;
		case "SERVICE_NOT_FOUND":
		case "SERVICE_NOT_AVAILABLE":
		case "REQUEST_TIMEOUT":
		case "BROKER_DISCONNECTED":
			return new ServiceError("NOT_READY", "The service is not ready to answer this request");
	}
	const status = Number(err.status ?? err.code);
	if (err.name === "NotFoundError" || status === 404) return new ServiceError("NOT_FOUND", "Not found");
	// Other refusals of malformed requests (body charset or encoding, undecodable path segments)
	// are the client's input, not a server fault.
	if (status >= 400 && status < 500) return new ServiceError("VALIDATION_ERROR", err.message ?? "Malformed request");
	return new ServiceError("INTERNAL_ERROR", "Internal error");
}

/** SPEC §4 worker routes (x-api-key), each to the action that serves it. */
const WORKER_ROUTES: Record<string, string> = {
	"GET /intents": "mempool.list",
	"PATCH /intents/:id/status": "leases.updateStatus",
	"GET /intent-work": "mempool.work",
	"POST /internal/settlement-authorizations/settlement": "leases.authorizePayout",
	"POST /internal/wake": "receiver.wake",
	"POST /crankers/heartbeat": "crankers.heartbeat",
	"POST /epoch/close": "epochs.close",
	"GET /tin-operations/verification-work": "tin.verificationWork",
	"GET /tin-operations/fee-work": "tin.feeWork",
	"GET /tin-operations/registry-work": "tin.registryWork",
	"POST /tin-operations/:id/verified": "tin.verified",
	"POST /tin-operations/:id/fee-committed": "tin.feeCommitted",
	"POST /tin-operations/:id/submitted": "tin.submitted",
	"POST /tin-operations/:id/finalized": "tin.finalized",
	"POST /tin-operations/:id/failed": "tin.failed",
	"POST /tin-operations/:id/rejected": "tin.rejected"
};

/** SPEC §4 public routes (rate limited), each to the action that serves it. */
const PUBLIC_ROUTES: Record<string, string> = {
	"POST /": "network.status",
	"POST /intents": "receiver.submit",
	"POST /threshold-access/nonces/consume": "access.consume",
	"GET /intents/:id": "mempool.view",
	"GET /registry/tins/:tin": "tin.getRoute",
	"GET /epoch/status": "epochs.status",
	"POST /tin-operations": "tin.submitOperation",
	"GET /tin-operations": "tin.listOperations",
	"GET /tin-operations/:id": "tin.getOperation",
	"GET /metrics": "network.metrics",
	"GET /network/overview": "network.overview",
	"GET /settlement-networks": "network.settlementNetworks",
	"GET /openapi.json": "api.openapi"
};

/** The health routes answer from the gateway itself, without an action. */
const HEALTH_ROUTES = ["GET /health/live", "GET /health/ready"];

/**
 * The gateway merges query, body and path into one params object; each route takes its input from
 * one place only, so a query field can never override (or smuggle past the schema of) a body field.
 */
function assertInputPlacement(req: IncomingMessage & { query?: Record<string, unknown>; body?: unknown }): void {
	const hasQuery = Object.keys(req.query ?? {}).length > 0;
	const hasBody = Number(req.headers["content-length"] ?? 0) > 0 || req.headers["transfer-encoding"] !== undefined;
	if (req.method === "GET" ? hasBody : hasQuery)
		throw new ServiceError("VALIDATION_ERROR", req.method === "GET" ? "GET requests take no body" : "This route takes a JSON body, not query parameters", [
			{ type: req.method === "GET" ? "body" : "query", field: req.method === "GET" ? "$body" : "$query", message: "Input is accepted in one place only." }
		]);
	if (hasBody && !String(req.headers["content-type"] ?? "").startsWith("application/json"))
		throw new ServiceError("VALIDATION_ERROR", "The body must be application/json", [{ type: "contentType", field: "$body", message: "The content-type must be application/json." }]);
}

export function apiService(config: Config): ServiceSchema<ApiSettingsSchema> {
	let isWorkerKey: (candidate: string) => boolean = () => false;

	const clientIp = (req: IncomingMessage): string => {
		if (config.trustProxy) {
			// The last entry is the one our proxy appended; earlier ones are whatever the client sent.
			const forwarded = String(req.headers["x-forwarded-for"] ?? "").split(",").map(s => s.trim()).filter(Boolean);
			if (forwarded.length) return forwarded[forwarded.length - 1];
		}
		return req.socket.remoteAddress ?? "unknown";
	};

	// "__proto__" would become the params' prototype when the gateway merges them, dodging the strict schema.
	const reviver = (key: string, value: unknown) => {
		if (key === "__proto__") throw new SyntaxError("forbidden key __proto__");
		return value;
	};
	// strict: a body is an object (or an array, which the schemas refuse), never a bare primitive.
	const jsonBody = { json: { limit: MAX_BODY_BYTES, strict: true, reviver }, urlencoded: false };
	const common = { mappingPolicy: "restrict" as const, bodyParsers: jsonBody, mergeParams: true, logging: true, autoAliases: false };

	return {
		name: "api",
		mixins: [ApiGateway],

		settings: {
			port: config.port,
			ip: "0.0.0.0",
			logRequest: "debug",
			logResponse: "debug",
			log4XXResponses: false,
			// Requests are ours to route; anything unmatched is a 404 in SPEC §7's shape.
			routes: [
				{
					name: "health",
					path: "/health",
					...common,
					bodyParsers: false,
					aliases: {
						"GET /live"(this: unknown, _req: IncomingMessage, res: ServerResponse) {
							sendJson(res, 200, { status: "live" });
						},
						"GET /ready"(this: { broker: Context["broker"] }, _req: IncomingMessage, res: ServerResponse) {
							const ready = isReady(this.broker);
							sendJson(res, ready ? 200 : 503, ready ? { status: "ready" } : new ServiceError("NOT_READY", "The service is starting or stopping"));
						}
					}
				},
				{
					// Worker routes: x-api-key required. Routes sharing a path need distinct names.
					name: "worker",
					path: "/",
					...common,
					authorization: true,
					aliases: WORKER_ROUTES
				},
				{
					// Public routes: rate limited per client IP.
					name: "public",
					path: "/",
					...common,
					rateLimit: config.rateLimitPerMin > 0 ? { window: 60_000, limit: config.rateLimitPerMin, headers: true, key: clientIp } : undefined,
					onBeforeCall(ctx: Context<unknown, { worker?: boolean; accept?: string }>, _route: unknown, req: IncomingMessage) {
						assertInputPlacement(req);
						const key = req.headers["x-api-key"];
						ctx.meta.worker = typeof key === "string" && isWorkerKey(key);
						ctx.meta.accept = req.headers.accept;
					},
					aliases: PUBLIC_ROUTES
				}
			],

			onError(this: { logger: Context["broker"]["logger"] }, req: IncomingMessage, res: ServerResponse, err: Error) {
				const error = toWireError(err as WireError);
				if (error.code >= 500 && error.type === "INTERNAL_ERROR") this.logger.error(`Unhandled error on ${req.method} ${req.url}:`, err);
				if (error.type === "RATE_LIMITED") {
					// moleculer-web's memory store keeps the end of the current window on the route.
					const route = (req as { $route?: { rateLimit?: { store?: { resetTime?: number } } } }).$route;
					const resetTime = route?.rateLimit?.store?.resetTime ?? Date.now() + 60_000;
					res.setHeader("Retry-After", String(Math.max(1, Math.ceil((resetTime - Date.now()) / 1000))));
				}
				sendJson(res, error.code, error);
			}
		},

		actions: {
			/**
			 * GET /openapi.json: OpenAPI 3.1 of every route, built from the route tables above and the
			 * parameter schemas the actions validate with, as the registry knows them now.
			 */
			openapi: {
				params: { $$strict: true },
				handler(this: Service) {
					const params = new Map(this.broker.registry.getActionList({ skipInternal: true }).map(item => [item.name, (item.action as { params?: Record<string, unknown> } | undefined)?.params]));
					const operation = (access: "public" | "worker") => ([route, action]: [string, string]): Operation => {
						const [method, path] = route.split(" ");
						return { method, path, access, action, params: params.get(action) };
					};
					return buildOpenApiDocument({
						title: "Settlement Coordination Service",
						version: "1",
						operations: [
							...HEALTH_ROUTES.map(route => operation("public")([route, `api.${route.split("/").pop()}`])),
							...Object.entries(PUBLIC_ROUTES).map(operation("public")),
							...Object.entries(WORKER_ROUTES).map(operation("worker"))
						]
					});
				}
			}
		},

		methods: {
			/** Worker routes: missing key → 401, wrong key → 403 (compared in constant time). */
			authorize(_ctx: Context, _route: unknown, req: IncomingMessage) {
				const key = req.headers["x-api-key"];
				if (typeof key !== "string" || key === "") throw new ServiceError("UNAUTHORIZED", "The x-api-key header is required");
				if (!isWorkerKey(key)) throw new ServiceError("FORBIDDEN", "The API key is not valid");
				assertInputPlacement(req);
			}
		},

		created() {
			const keys = loadOrCreateWorkerKeys(config.workerApiKeys, config.dataDir);
			isWorkerKey = createKeyChecker(keys.value);
			if (keys.generated) this.logger.info(`Generated a worker API key into ${keys.source}.`);
			else if (keys.source !== "environment") this.logger.info(`Worker API keys read from ${keys.source}.`);
		}
	};
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
	if (res.headersSent) {
		res.end();
		return;
	}
	const payload = body instanceof ServiceError ? { name: body.name, message: body.message, code: body.code, type: body.type, ...(body.data !== undefined ? { data: body.data } : {}) } : body;
	res.writeHead(status, { "content-type": "application/json; charset=utf-8" });
	res.end(JSON.stringify(payload));
}
