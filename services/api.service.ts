/**
 * api: the REST gateway (moleculer-web). It owns no data: it maps the routes of SPEC §4 to the
 * owners' actions, admits worker callers by API key and Crankers by their request signature
 * (SPEC §6.1), limits body size, time and request rate, drains on shutdown, and shapes every
 * error as SPEC §7's body.
 */
import { randomUUID } from "node:crypto";
import http, { type IncomingMessage, type ServerResponse } from "node:http";
import type { Socket } from "node:net";
import { Errors, type Context, type Service, type ServiceBroker, type ServiceSchema } from "moleculer";
import ApiGateway, { type ApiSettingsSchema, type IncomingRequest } from "moleculer-web";
import { FailureThrottle } from "../lib/auth-throttle";
import { clientAddressOf, clientKey, proxyTrust, type ProxyTrust } from "../lib/client-key";
import type { Config } from "../lib/config";
import { ConnectionsPerClient, RefusalNotice } from "../lib/connection-cap";
import { corsPolicy, decideCors } from "../lib/cors";
import { ERROR_STATUS, errorBody, isServiceError, isUnanswered, ServiceError, type ErrorType } from "../lib/errors";
import { CRANKER_ROUTES, crankerRequestOf, unsignedRefusal, verifyCrankerRequest, type CrankerRequest } from "../lib/cranker-call";
import { ROUTE_CONTRACTS, TAGS } from "../lib/api-contract";
import { buildOpenApiDocument, type OpenApiDocument, type Operation } from "../lib/openapi";
import { INTAKE_BATCH_BYTES, INTAKE_BATCH_ENOUGH, INTAKE_BATCH_MAX, refusalOf, type Submission, type SubmissionAnswer } from "../lib/intake";
import { workItemWrapper, workPageViews, type CreateIntentRequest, type IntentWorkItem, type PublicMempoolIntent, type WorkPage } from "../lib/intents";
import { BodyError, MAX_BODY_DEPTH } from "../lib/json-body";
import { answersJsonTexts, jsonArrayBuffer, type TakesJsonTexts } from "../lib/json-text";
import { WORK_PAGE, createIntentParams, limit } from "../lib/schemas";
import { createKeyChecker, loadOrCreateWorkerKeys } from "../lib/secrets";
import { WEBHOOK_LIST_PAGE, listWebhooksParams, type WebhookSubscription } from "../lib/webhooks";
import { Batcher } from "../lib/batcher";
import { TransientSet } from "../lib/transient-set";
import type { CrankerSignedMeta } from "../mixins/cranker-signed.mixin";
import type { EventsAppended } from "../mixins/outbox.mixin";
import { EVENT_STREAM_PARAMS, INTENT_STREAM_PARAMS, LAST_EVENT_ID, eventStreams, isClientGone, type EventStreams } from "./event-streams";
import { markDraining, probeAnswer, RETRY_AFTER_UNAVAILABLE_S, type Probe } from "./health";
import { isJson, jsonBody } from "./json-body";
import { isServed, isServedHere, workersOnly } from "./internal";
import { answersInProgress, onResponseGone } from "./response-gone";
import { actForWorker } from "./bus-guard";
import { httpMetrics, metricsForm } from "./metrics";

/** SPEC §10: request bodies up to 65,536 bytes as sent, and as decoded. */
const MAX_BODY_BYTES = 65_536;
/** Answers one connection may have in progress (pipelined requests); a request past them closes it. */
const MAX_ANSWERS_PER_CONNECTION = 16;
/** On SIGTERM, how long requests already in flight may take to finish. */
const DRAIN_TIMEOUT_MS = 30_000;

type WireError = { name?: string; message?: string; code?: unknown; status?: unknown; type?: unknown; data?: unknown };
type Request = IncomingMessage & { originalUrl?: string; query?: Record<string, unknown>; body?: unknown; rawBody?: Buffer };
type Next = (err?: unknown) => void;

/**
 * The place in the work list of the intent `id` names, in whatever state it is now, read through
 * the view every mempool version serves (so that a gateway ahead of its mempool in a rolling update
 * pages as its clients ask); 422 when no intent has that id.
 */
async function placeOf(ctx: Context, id: string): Promise<NonNullable<WorkPage["last"]>> {
	try {
		const { createdAt } = await ctx.call<PublicMempoolIntent, object>("mempool.view", { id });
		return { createdAt, id };
	} catch (err) {
		if ((err as { type?: string }).type !== "NOT_FOUND") throw err;
		throw new ServiceError("VALIDATION_ERROR", "after names no intent", [{ type: "intentId", field: "after", message: "after must be the id of an intent, the last of the previous page." }]);
	}
}

/** The JSON parser's refusals, as SPEC §7 errors: whatever went wrong reading a body is the client's input. */
function bodyError(err: WireError, req: IncomingMessage): ServiceError {
	switch (err.type) {
		case "entity.too.large":
			return new ServiceError("PAYLOAD_TOO_LARGE", `Request bodies are limited to ${MAX_BODY_BYTES} bytes, as sent and as decoded`);
		case "encoding.unsupported":
			return new ServiceError("UNSUPPORTED_MEDIA_TYPE", "The content-encoding is not one this route takes (gzip, deflate, br or none)");
		case "entity.parse.failed": {
			// This gateway's reader says why (not an object, an array, too deep, __proto__); body-parser's only that it failed.
			const reason = err instanceof BodyError ? err.message : "The body is not valid JSON";
			return new ServiceError("VALIDATION_ERROR", reason, [
				{ type: "json", field: "$body", message: `The body must be a JSON object, nested at most ${MAX_BODY_DEPTH} deep, without the key __proto__.` }
			]);
		}
	}
	// A compressed body that does not decode (zlib's and brotli's many error codes): never a 5xx.
	if ((req.headers["content-encoding"] ?? "identity") !== "identity") return new ServiceError("UNSUPPORTED_MEDIA_TYPE", "The request body does not decode with its content-encoding");
	return new ServiceError("VALIDATION_ERROR", "The request body cannot be read", [{ type: "body", field: "$body", message: "The body must be a UTF-8 JSON document." }]);
}

/** Validation errors list the failing fields; nothing else of Moleculer's item (node id, action) leaves the gateway. */
function publicData(type: ErrorType, data: unknown): unknown {
	if (type !== "VALIDATION_ERROR" || !Array.isArray(data)) return data;
	return data.map(item => {
		const { type: kind, field, message, expected, actual } = (item ?? {}) as Record<string, unknown>;
		// fastest-validator names no field for keys a strict schema does not list: they are the fields.
		const named = field ?? (kind === "objectStrict" ? actual : undefined);
		return Object.fromEntries(Object.entries({ type: kind, field: named, message, expected, actual }).filter(([, v]) => v !== undefined));
	});
}

/** moleculer-web's and Moleculer's client errors: the only errors whose status the gateway reads. */
const GATEWAY_ERRORS = new Set(["NotFoundError", "BadRequestError", "InvalidRequestBodyError", "InvalidResponseTypeError", "UnAuthorizedError", "ForbiddenError", "PayloadTooLarge", "UnsupportedMediaTypeError", "MoleculerClientError", "ValidationError"]);

/** Maps anything thrown below the gateway to a SPEC §7 error; unknown failures become a bare 500. */
function toWireError(err: WireError): ServiceError {
	if (typeof err.type === "string" && Object.hasOwn(ERROR_STATUS, err.type)) return new ServiceError(err.type as ErrorType, err.message ?? "", publicData(err.type as ErrorType, err.data));
	if ((err.type === "RATE_LIMIT_EXCEEDED" || err.type === undefined) && (err.code === 429 || err.name === "RateLimitExceeded")) return new ServiceError("RATE_LIMITED", "Too many requests; retry later");
	// moleculer-web's, for a route whose action no process serves yet (its owners not discovered): no type, status 503.
	if (isUnanswered(err) || err.name === "ServiceUnavailableError") return new ServiceError("NOT_READY", "The service is not ready to answer this request");
	// Only the gateway's own refusals carry an HTTP status; a code from anywhere else (a database
	// error code, say) is never read as one.
	if (!GATEWAY_ERRORS.has(err.name ?? "")) return new ServiceError("INTERNAL_ERROR", "Internal error");
	const status = Number(err.status ?? err.code);
	if (err.name === "NotFoundError" || status === 404) return new ServiceError("NOT_FOUND", "Not found");
	// Other refusals of malformed requests (body charset, undecodable path segments) are the
	// client's input, not a server fault.
	if (status >= 400 && status < 500) return new ServiceError("VALIDATION_ERROR", "Malformed request");
	return new ServiceError("INTERNAL_ERROR", "Internal error");
}

/**
 * The status a request is logged and counted with once its connection is done with it: its
 * answer's, or 499 (nginx's number for it) when the connection closed before the answer was sent
 * whole: a request its client gave up on, an event stream it left (or that was cut for reading
 * too slowly).
 */
const statusAtClose = (res: ServerResponse) => (res.writableFinished ? res.statusCode : (answeredRaw.get(res) ?? 499));

/**
 * One line per request when its answer is sent, or the client left: method, path (without the
 * query), status (statusAtClose), duration and the request id (the client's x-request-id, or the
 * one generated and returned in that header). Health probes only at debug: a probe every few
 * seconds is not traffic.
 */
function accessLog(logger: Service["logger"], req: Request, res: ServerResponse, level: "info" | "debug"): void {
	const started = process.hrtime.bigint();
	res.once("close", () => {
		const ms = Number(process.hrtime.bigint() - started) / 1e6;
		// moleculer-web rewrites req.url relative to the route (/health/live → /live); originalUrl is the request's.
		const path = (req.originalUrl ?? req.url ?? "").split("?")[0];
		const requestId = res.getHeader("x-request-id") ?? "-";
		logger[level](`${req.method} ${path} ${statusAtClose(res)} ${ms.toFixed(1)}ms request=${requestId}`);
	});
}

/**
 * Per-route request counts and durations when the answer is sent, or the client left (status
 * 499). `route` is the template the request matched (`/intents/:id`), never the raw URL, so the
 * series stay few: a path no route has is `unmatched`.
 */
function countRequest(metrics: ReturnType<typeof httpMetrics>, routeOf: (req: IncomingMessage) => string, req: IncomingMessage, res: ServerResponse): void {
	const endTimer = metrics.duration.startTimer();
	res.once("close", () => {
		const labels = { method: req.method ?? "", route: routeOf(req) };
		endTimer(labels);
		metrics.requests.inc({ ...labels, status: String(statusAtClose(res)) });
	});
}

/**
 * The token of `Authorization: Bearer <token>` (scheme in any case, then one token of visible
 * ASCII), or null for anything else: no header, another scheme, no token, or more than one.
 */
export function bearerToken(authorization: string | undefined): string | null {
	return /^bearer +([\x21-\x7e]+)$/i.exec(authorization ?? "")?.[1] ?? null;
}

/** SPEC §4 worker routes (x-api-key), each to the action that serves it. */
const WORKER_ROUTES: Record<string, string> = {
	"GET /intents": "mempool.list",
	"GET /intent-work": "api.intentWork",
	"POST /internal/wake": "receiver.wake",
	"POST /epoch/close": "epochs.close",
	"GET /tin-operations/verification-work": "tin.verificationWork",
	"GET /tin-operations/fee-work": "tin.feeWork",
	"GET /tin-operations/registry-work": "tin.registryWork",
	"POST /webhooks": "webhooks.create",
	"GET /webhooks": "api.webhookList",
	"GET /webhooks/:id": "webhooks.get",
	"DELETE /webhooks/:id": "webhooks.remove",
	...CRANKER_ROUTES
};

/** The worker routes that act as a Cranker: they carry its request signature (SPEC §6.1). */
const CRANKER_ACTIONS: ReadonlySet<string> = new Set(Object.values(CRANKER_ROUTES));

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

/**
 * Event streams (server-sent events), answered by the gateway itself from the owners' event logs
 * (services/event-streams.ts); the name stands for the operation in the OpenAPI document.
 */
const PUBLIC_STREAM_ROUTES: Record<string, string> = { "GET /intents/:id/events": "api.intentEvents" };
const WORKER_STREAM_ROUTES: Record<string, string> = { "GET /events": "api.events" };
const STREAM_PARAMS: Record<string, Record<string, unknown>> = { "api.intentEvents": INTENT_STREAM_PARAMS, "api.events": EVENT_STREAM_PARAMS };

/** The health routes answer from the gateway itself, without an action. */
const HEALTH_ROUTES = ["GET /health/live", "GET /health/ready"];

/** The errors the gateway answers itself on a route, whatever its action: body, access, rate and readiness checks. */
function gatewayErrors(access: "health" | "public" | "worker", method: string): ErrorType[] {
	// Any request: a body declared too large is refused before routing; a failure of the gateway is a bare 500.
	const errors: ErrorType[] = ["PAYLOAD_TOO_LARGE", "INTERNAL_ERROR"];
	if (access === "health") return errors;
	errors.push("VALIDATION_ERROR", "RATE_LIMITED", "NOT_READY", "SHUTTING_DOWN");
	if (method !== "GET") errors.push("UNSUPPORTED_MEDIA_TYPE");
	if (access === "worker") errors.push("UNAUTHORIZED", "FORBIDDEN");
	return errors;
}

/**
 * GET /openapi.json: every route of the tables above with its contract (lib/api-contract.ts), the
 * gateway's own refusals, and the input schema its action validates with (`paramsOf`).
 */
export function openApiDocument(paramsOf: (action: string) => Record<string, unknown> | undefined): OpenApiDocument {
	const operation = (access: "health" | "public" | "worker") => ([route, action]: [string, string]): Operation => {
		const [method, path] = route.split(" ");
		const contract = ROUTE_CONTRACTS[action];
		if (!contract) throw new Error(`No contract for ${route} (${action}) in lib/api-contract.ts`);
		const { errors, ...described } = contract;
		return {
			method,
			path,
			access: access === "worker" ? "worker" : "public",
			signed: CRANKER_ACTIONS.has(action),
			action,
			params: STREAM_PARAMS[action] ?? paramsOf(action),
			...(action in STREAM_PARAMS ? { headers: [LAST_EVENT_ID] } : {}),
			...described,
			errors: [...gatewayErrors(access, method), ...errors]
		};
	};
	return buildOpenApiDocument({
		title: "Settlement Coordination Service",
		version: "1",
		description: "The off-chain coordination layer of a Solana payment network (docs/api.md). Every error has the body of the Error schema.",
		tags: TAGS,
		operations: [
			...HEALTH_ROUTES.map(route => operation("health")([route, `api.${route.split("/").pop()}`])),
			...Object.entries({ ...PUBLIC_ROUTES, ...PUBLIC_STREAM_ROUTES }).map(operation("public")),
			...Object.entries({ ...WORKER_ROUTES, ...WORKER_STREAM_ROUTES }).map(operation("worker"))
		]
	});
}

/**
 * A header sent with something in it, each of its lines apart (`headersDistinct`): an empty one is
 * no signature to the verifier either (lib/http-signature.ts).
 */
function hasValue(lines: string[] | undefined): boolean {
	return (lines ?? []).some(value => value.trim() !== "");
}

/**
 * The gateway merges query, body and path into one params object; each route takes its input from
 * one place only, so a query field can never override (or smuggle past the schema of) a body field.
 */
function assertInputPlacement(req: Request): void {
	const hasQuery = Object.keys(req.query ?? {}).length > 0;
	const hasBody = Number(req.headers["content-length"] ?? 0) > 0 || req.headers["transfer-encoding"] !== undefined;
	if (req.method === "GET" ? hasBody : hasQuery)
		throw new ServiceError("VALIDATION_ERROR", req.method === "GET" ? "GET requests take no body" : "This route takes a JSON body, not query parameters", [
			{ type: req.method === "GET" ? "body" : "query", field: req.method === "GET" ? "$body" : "$query", message: "Input is accepted in one place only." }
		]);
	// The media type the body reader parses, exactly: "application/jsonx" would pass a prefix check unread.
	if (hasBody && !isJson(req.headers["content-type"]))
		throw new ServiceError("VALIDATION_ERROR", "The body must be application/json", [{ type: "contentType", field: "$body", message: "The content-type must be application/json." }]);
}

/** The gateway's state: made in `created`, after moleculer-web built its routes and its server. */
interface ApiVars {
	/** Whether a candidate is one of the worker API keys (compared in constant time). */
	isWorkerKey: (candidate: string) => boolean;
	/** METRICS_API_KEY's checker, when one is set. */
	isMetricsKey: ((candidate: string) => boolean) | null;
	/** Failed authentications per client: past the limit, 429 until its window ends. */
	authFailures: FailureThrottle;
	corsRules: ReturnType<typeof corsPolicy>;
	/** The public route's rate store (moleculer-web's), which the front door counts in too. */
	publicRate: PublicRateStore | null;
	/** The SSE routes' server side. */
	streams: EventStreams;
	/** POST /intents: the body check, and the batches of submissions to the receiver. */
	intake: { check: (params: object) => true | object[]; batch: Batcher<Submission, SubmissionAnswer> };
	/** The keys of the submissions (services/replay.ts), which no client chooses: this process's, then a count. */
	submissionKeys: { process: string; count: number };
	/** Requests being answered now; on SIGTERM those not yet answered are told the connection closes. */
	inFlight: TransientSet<ServerResponse>;
	draining: boolean;
	drained: () => void;
	/** GET /openapi.json as last built (about 110 KB): rebuilt only when the registry changes. */
	openApiCache: OpenApiDocument | null;
}

interface ApiMethods {
	clientIp(req: IncomingMessage): string;
	workerKeyOf(req: IncomingMessage): string;
	clientKeyOf(req: IncomingMessage): string;
	serveIntake(req: Request, res: ServerResponse): Promise<void>;
	serveStream(serve: "serveIntent" | "serveAll", req: Request, res: ServerResponse, next: Next): void;
	parseBody(req: Request, res: ServerResponse, next: Next): void;
	limitPublicRate(req: IncomingMessage, res: ServerResponse): void;
	assertMetricsKey(req: IncomingMessage, res: ServerResponse): void;
	workerKeyAttempt(req: IncomingMessage, res: ServerResponse): boolean;
	assertNotThrottled(req: IncomingMessage, res: ServerResponse): void;
	checkBeforeBody(req: Request & { parsedUrl?: string }, res: ServerResponse): boolean;
	signedCrankerRequest(req: Request): Promise<CrankerRequest>;
	routeOf(req: Request & { $alias?: { fullPath?: string }; parsedUrl?: string }): string;
	limitConnections(metrics: ReturnType<typeof httpMetrics>): void;
}

/** What moleculer-web adds to the service that this one calls. */
interface GatewayMethods {
	server?: http.Server;
	httpHandler: http.RequestListener;
	sendError(req: IncomingMessage, res: ServerResponse, err: unknown): void;
	resolveAlias(url: string, method?: string): { alias: { fullPath: string; action?: string; route: { opts: { name?: string } } } } | false;
	routes: { opts: { name?: string }; rateLimit?: { store?: PublicRateStore } }[];
}

type ApiThis = Service<ApiSettingsSchema> & ApiVars & ApiMethods & GatewayMethods;
/** moleculer-web's default store, as it makes one for a route with a rate limit. */
type PublicRateStore = InstanceType<typeof ApiGateway.RateLimitStores.MemoryStore>;

/** Request bodies (services/json-body.ts), for every route and the front door. */
const readJson = jsonBody(MAX_BODY_BYTES);

/**
 * A route middleware calling the service's methods (moleculer-web calls them with the service as
 * `this`). moleculer-web runs it before its own checks: a request that no body can save is left
 * unread here (Node drops its bytes), so a few hundred bytes of gzip cannot buy a 64 KiB parse.
 */
function parseBodyMiddleware(this: ApiThis, req: Request & { parsedUrl?: string }, res: ServerResponse, next: Next): void {
	try {
		if (!this.checkBeforeBody(req, res)) return next();
	} catch (err) {
		return next(isServiceError(err) ? asClientError(err) : err);
	}
	this.parseBody(req, res, next);
}

/** A refusal of a route middleware as a Moleculer error, so moleculer-web passes it on whole (it rebuilds any other, dropping `data`). */
const asClientError = ({ message, code, type, data }: { message: string; code: number; type: string; data?: unknown }) => new Errors.MoleculerClientError(message, code, type, data);

/**
 * The whole answer to a request Node's HTTP parser refused or cut off, written to the socket as no
 * request object exists yet: the status Node itself would send, with SPEC §7's body, and the
 * connection closed.
 */
function parserRefusal(code: string | undefined): ServiceError {
	return (
		code === "HPE_HEADER_OVERFLOW"
			? new ServiceError("HEADERS_TOO_LARGE", "The request headers are too large")
			: code === "HPE_CHUNK_EXTENSIONS_OVERFLOW"
				? new ServiceError("PAYLOAD_TOO_LARGE", "The chunk extensions are too large")
				: code === "ERR_HTTP_REQUEST_TIMEOUT"
					? new ServiceError("REQUEST_TOO_SLOW", "The request did not arrive within the time limits")
					: new ServiceError("BAD_REQUEST", "The request is not valid HTTP/1.1")
	);
}

/** `error` as a whole HTTP/1.1 answer, written to the socket itself, and the connection closed. */
function rawAnswer(error: ServiceError): string {
	const body = JSON.stringify(errorBody(error));
	return `HTTP/1.1 ${error.code} ${http.STATUS_CODES[error.code]}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`;
}

/** Requests the parser cut off mid-body, answered on their socket (parserRefusal): the status they were logged and counted with. */
const answeredRaw = new WeakMap<ServerResponse, number>();

/** A stream route's alias: the request is answered by the service's event streams. */
const streamAlias = (serve: "serveIntent" | "serveAll") =>
	function (this: ApiThis, req: Request, res: ServerResponse, next: Next): void {
		this.serveStream(serve, req, res, next);
	};

export function apiService(config: Config): ServiceSchema<ApiSettingsSchema, ApiMethods, ApiVars, ApiThis> {
	const proxies = proxyTrust(config.trustProxy);
	const common = {
		mappingPolicy: "restrict" as const,
		bodyParsers: false,
		use: [parseBodyMiddleware],
		mergeParams: true,
		logging: true,
		autoAliases: false,
		// This gateway takes a list's items as their JSON texts (forCaller) ...
		callOptions: { meta: { jsonTexts: true } satisfies TakesJsonTexts },
		/** ... and sends them as one JSON array, encoded once; an owner of an earlier version answers objects. */
		onAfterCall(_ctx: Context, _route: unknown, req: IncomingRequest, _res: ServerResponse, data: unknown) {
			const texts = (req.$action as { answersJsonTexts?: boolean } | undefined)?.answersJsonTexts && Array.isArray(data) && typeof data[0] !== "object";
			return texts ? jsonArrayBuffer(data as string[]) : data;
		}
	};

	return {
		name: "api",
		mixins: [ApiGateway],

		settings: {
			port: config.port,
			ip: "0.0.0.0",
			// The access log (accessLog) is the one line per request at info; moleculer-web's own
			// request, response and route-registration lines are detail for debug.
			logRequest: "debug",
			logResponse: "debug",
			logRouteRegistration: "debug",
			log4XXResponses: false,
			// Requests are ours to route; anything unmatched is a 404 in SPEC §7's shape.
			routes: [
				{
					name: "health",
					path: "/health",
					...common,
					use: [],
					aliases: Object.fromEntries(
						(["live", "ready"] as Probe[]).map(probe => [
							`GET /${probe}`,
							function (this: ApiThis, _req: IncomingMessage, res: ServerResponse) {
								const { status, body, headers } = probeAnswer(probe, this.broker);
								sendJson(res, status, body, headers);
							}
						])
					)
				},
				{
					// Worker routes: x-api-key required; the Cranker routes also the Cranker's signature.
					name: "worker",
					path: "/",
					...common,
					authorization: true,
					aliases: { ...WORKER_ROUTES, "GET /events": streamAlias("serveAll") }
				},
				{
					// Public routes: RATE_LIMIT_PER_MIN per client, one count for every public route and the front door.
					name: "public",
					path: "/",
					...common,
					// Kept for its store, which checkBeforeBody and the front door count in: every request that
					// reaches this count was counted already, and its empty key is not counted again.
					rateLimit: config.rateLimitPerMin > 0 ? { window: 60_000, limit: config.rateLimitPerMin, headers: true, key: (req: IncomingMessage & { rateCounted?: boolean }) => (req.rateCounted ? "" : clientKey(clientAddress(req, proxies))) } : undefined,
					onBeforeCall(this: ApiThis, ctx: Context<unknown, { worker?: boolean; metricsForm?: string }>, _route: unknown, req: Request, res: ServerResponse, alias?: { action?: string }) {
						if (alias?.action === "network.metrics") {
							// Decided once, here: the key is checked for the very form the action then serves.
							ctx.meta.metricsForm = metricsForm(req.query?.format, req.headers.accept);
							if (ctx.meta.metricsForm === "prometheus") this.assertMetricsKey(req, res);
						}
						ctx.meta.worker = this.workerKeyAttempt(req, res);
						// The answer depends on the key: a shared cache keyed on the URL alone must neither keep a
						// worker's view (signatures, nonces, route commitments) nor serve it to another caller.
						const vary = res.getHeader("vary");
						res.setHeader("vary", vary ? `${String(vary)}, X-Api-Key` : "X-Api-Key");
						if (ctx.meta.worker) res.setHeader("cache-control", "private, no-store");
						// An owner on the bus believes `worker` (the worker's view) only with the proof of the key.
						if (ctx.meta.worker) actForWorker(ctx.meta, req.headers["x-api-key"] as string);
					},
					aliases: { ...PUBLIC_ROUTES, "GET /intents/:id/events": streamAlias("serveIntent") }
				}
			],

			onError(this: ApiThis, req: IncomingMessage, res: ServerResponse, err: Error) {
				const error = toWireError(err as WireError);
				if (error.code >= 500 && error.type === "INTERNAL_ERROR") this.logger.error(`Unhandled error on ${req.method} ${(req as Request).originalUrl ?? req.url}:`, err);
				if (error.type === "RATE_LIMITED" && !res.headersSent && !res.hasHeader("Retry-After")) {
					// The public routes' rate store keeps the end of the current window.
					const resetTime = this.publicRate?.resetTime ?? Date.now() + 60_000;
					res.setHeader("Retry-After", String(Math.max(1, Math.ceil((resetTime - Date.now()) / 1000))));
				}
				if (error.code === 503 && !res.headersSent && !res.hasHeader("Retry-After")) res.setHeader("Retry-After", String(RETRY_AFTER_UNAVAILABLE_S));
				sendJson(res, error.code, error);
			}
		},

		actions: {
			// moleculer-web's own actions would let any node on the bus add, remove or list the
			// gateway's routes (a route without the worker key before an owner's actions, say).
			addRoute: false,
			removeRoute: false,
			listAliases: false,

			/**
			 * GET /intent-work: the mempool's work pages joined here, written as one JSON array with
			 * each stored view inside its item, never copied into a string. A mempool in this process
			 * answers the whole list in one page (passed by reference); one in another process, pages
			 * of WORK_PAGE intents and WORK_PAGE_BYTES, so that no list of up to 500 intents crosses the
			 * bus in one message (NATS refuses messages over 1 MB). Every mempool runs with the same
			 * LEASE_TTL_MS; the items carry the first page's. `after` (an intent's id) starts the list
			 * past that intent, so that a Cranker pages past work it cannot take.
			 */
			intentWork: workersOnly(answersJsonTexts({
				params: { $$strict: true, limit: limit(), after: { type: "string", optional: true, max: 64 } },
				async handler(this: ApiThis, ctx: Context<{ limit: number; after?: string }>): Promise<Buffer> {
					const here = isServedHere(this.broker, "mempool.workPage");
					let pageSize = here ? ctx.params.limit : WORK_PAGE;
					const options = { meta: { jsonTexts: true } satisfies TakesJsonTexts, ...(here ? { nodeID: this.broker.nodeID } : {}) };
					const views: string[] = [];
					let leaseTtlMs: number | null = null;
					for (let after = ctx.params.after !== undefined ? await placeOf(ctx, ctx.params.after) : null; views.length < ctx.params.limit; ) {
						const size = Math.min(pageSize, ctx.params.limit - views.length);
						const page = workPageViews(await ctx.call<WorkPage | IntentWorkItem[], object>("mempool.workPage", { limit: size, ...(after ? { after } : {}) }, options));
						views.push(...page.views);
						leaseTtlMs ??= page.leaseTtlMs;
						if (page.views.length < size && !page.cut) break;
						// A page cut at its byte budget read rows it did not send: ask the next for about as many as fit.
						pageSize = Math.min(page.cut ? page.views.length * 2 : pageSize * 2, WORK_PAGE);
						after = page.last;
					}
					// No page had an item: the answer is [] whatever the lease length.
					return jsonArrayBuffer(views, leaseTtlMs === null ? undefined : workItemWrapper(leaseTtlMs));
				}
			})),

			/**
			 * GET /webhooks: the owner's pages of WEBHOOK_LIST_PAGE joined here, none over the bus's
			 * message size. An owner of the previous version (a rolling update) has no pages: its one list.
			 */
			webhookList: workersOnly({
				params: listWebhooksParams,
				async handler(this: ApiThis, ctx: Context<{ limit: number }>): Promise<WebhookSubscription[]> {
					if (!isServed(this.broker, "webhooks.page")) return ctx.call<WebhookSubscription[], object>("webhooks.list", { limit: ctx.params.limit });
					const views: WebhookSubscription[] = [];
					for (let after: { createdAt: string; id: string } | null = null; views.length < ctx.params.limit; ) {
						const size = Math.min(WEBHOOK_LIST_PAGE, ctx.params.limit - views.length);
						const page: WebhookSubscription[] = await ctx.call<WebhookSubscription[], object>("webhooks.page", { limit: size, ...(after ? { after } : {}) });
						views.push(...page);
						if (page.length < size) break;
						const { createdAt, id } = page[page.length - 1];
						after = { createdAt, id };
					}
					return views;
				}
			}),

			/**
			 * GET /openapi.json: OpenAPI 3.1 of every route, built from the route tables above and the
			 * parameter schemas the actions validate with, as the registry knows them (this process's
			 * own where it runs the action: another node's are what it announced); built once, and again
			 * after the registry changes ($services.changed below).
			 */
			openapi: {
				params: { $$strict: true },
				handler(this: ApiThis): OpenApiDocument {
					if (!this.openApiCache) {
						const { registry, nodeID } = this.broker;
						const paramsOf = (name: string) => {
							const endpoint = registry.getActionEndpointByNodeId(name, nodeID) ?? registry.getActionEndpoints(name)?.endpoints[0];
							return (endpoint?.action as { params?: Record<string, unknown> } | undefined)?.params;
						};
						this.openApiCache = openApiDocument(paramsOf);
					}
					return this.openApiCache;
				}
			}
		},

		events: {
			/** A service came, went or changed (here or on another node): its actions' schemas may differ. */
			"$services.changed"(this: ApiThis) {
				this.openApiCache = null;
			},

			/** An owner committed new events: the streams that follow its log read them. */
			"events.appended"(this: ApiThis, ctx: Context<EventsAppended>) {
				this.streams.notify(ctx.params.stream);
			}
		},

		methods: {
			/** Every error is answered by onError (which logs the server's own failures); client errors are not logged. */
			errorHandler(this: ApiThis, req: IncomingMessage, res: ServerResponse, err: Error) {
				// The owner's refusals of a signature the gateway let through (a replay; a call it does not
				// cover) are failed authentications too, as the gateway's own refusals are (authorize).
				const reason = (err as ServiceError).data as { reason?: unknown } | undefined;
				if (reason?.reason === "replayed" || reason?.reason === "not-signed") this.authFailures.fail(this.clientKeyOf(req), Date.now());
				this.sendError(req, res, err);
			},

			/**
			 * Worker routes: missing key → 401, wrong key → 403 (compared in constant time); then, on
			 * the Cranker routes, the request signature (SPEC §6.1). Failures count towards 429.
			 */
			async authorize(this: ApiThis, ctx: Context<unknown, CrankerSignedMeta & { crankerPubkey?: string }>, _route: unknown, req: Request, res: ServerResponse, alias: { action?: string }) {
				this.assertNotThrottled(req, res);
				try {
					// The owners check the key too: the route's calls over the bus prove it.
					actForWorker(ctx.meta, this.workerKeyOf(req));
					if (alias.action && CRANKER_ACTIONS.has(alias.action)) {
						ctx.meta.crankerRequest = await this.signedCrankerRequest(req);
						// For owners of the previous version during a rolling update (gateways first): they
						// read the signer from here. Owners of this version ignore it.
						ctx.meta.crankerPubkey = (req.body as { crankerPubkey: string }).crankerPubkey;
					}
				} catch (err) {
					const { type } = err as ServiceError;
					if (type === "UNAUTHORIZED" || type === "FORBIDDEN") this.authFailures.fail(this.clientKeyOf(req), Date.now());
					throw err;
				}
			},

			/** The worker key a request carries; missing → 401, not one of WORKER_API_KEYS → 403 (the caller counts the failure). */
			workerKeyOf(this: ApiThis, req: IncomingMessage): string {
				const key = req.headers["x-api-key"];
				if (typeof key !== "string" || key === "") throw new ServiceError("UNAUTHORIZED", "The x-api-key header is required");
				if (!this.isWorkerKey(key)) throw new ServiceError("FORBIDDEN", "The API key is not valid");
				return key;
			},

			clientIp(this: ApiThis, req: IncomingMessage): string {
				return clientAddress(req, proxies);
			},

			/** Who the public rate and the failed-key lock-out count a request against (an IPv6 client by its /64). */
			clientKeyOf(this: ApiThis, req: IncomingMessage): string {
				return clientKey(this.clientIp(req));
			},

			/**
			 * POST /intents, the hot route, served by the front door (createServer) with the checks the
			 * public route makes: the rate, where the input is, a key sent, then the body (last, so that
			 * a refused request is not read). Each body is checked against createIntentParams where it
			 * enters, then the submissions of INTAKE_WINDOW_MS go to the receiver as one batch
			 * (lib/intake.ts), and each is answered with its own outcome. Routing it through
			 * moleculer-web (its `rest` action, route and alias handlers) cost about 35 µs of a
			 * submission's 70 µs in the gateway. The path spelled otherwise (/intents/) still goes
			 * through moleculer-web, to receiver.submit, one at a time.
			 */
			async serveIntake(this: ApiThis, req: Request, res: ServerResponse): Promise<void> {
				// As moleculer-web answers every request: the client's request id, or one made here.
				res.setHeader("X-Request-ID", req.headers["x-correlation-id"] ?? req.headers["x-request-id"] ?? randomUUID());
				this.limitPublicRate(req, res);
				assertInputPlacement(req);
				this.workerKeyAttempt(req, res);
				await new Promise<void>((resolve, reject) => this.parseBody(req, res, err => (err ? reject(err) : resolve())));
				// As moleculer-web merges a route's params: the body's own fields (a query was refused above).
				const params = Object.assign({}, typeof req.body === "object" && req.body !== null ? req.body : {});
				const check = this.intake.check(params);
				if (check !== true) throw new Errors.ValidationError("Parameters validation error!", "VALIDATION_ERROR", check);
				const call = `${this.submissionKeys.process}/${++this.submissionKeys.count}`;
				const answer = await this.intake.batch.add({ request: params as CreateIntentRequest, call }, req.rawBody?.length ?? 0);
				if ("refused" in answer) throw new ServiceError(answer.refused.type, answer.refused.message, answer.refused.data);
				sendJson(res, answer.status, answer.view, answer.status === 201 ? { location: `/intents/${answer.view.id}` } : {});
			},

			/** A stream route: a refusal before the stream opens is answered by onError, and nothing is for a client that left before. */
			serveStream(this: ApiThis, serve: "serveIntent" | "serveAll", req: Request, res: ServerResponse, next: Next): void {
				void this.streams[serve](req, res).catch(err => {
					if (isClientGone(err) || res.headersSent) res.destroy();
					else next(err);
				});
			},

			/** The body (services/json-body.ts); its refusals leave as SPEC §7 errors. */
			parseBody(this: ApiThis, req: Request, res: ServerResponse, next: Next): void {
				readJson(req, res, err => {
					if (!err) return next();
					next(asClientError(bodyError(err as WireError, req)));
				});
			},

			/**
			 * The checks that need no body, before it is read (they throw their refusals), and whether
			 * it is to be read: not for a path no alias takes (404); a worker route without a valid key
			 * is refused here (401 or 403, the failure counted). A public route's rate is
			 * counted here, once (a throttled client's 429 too); moleculer-web then skips its own count.
			 * Where the input may be (assertInputPlacement) is checked here, for the public and worker routes.
			 */
			checkBeforeBody(this: ApiThis, req: Request & { parsedUrl?: string; rateCounted?: boolean }, res: ServerResponse): boolean {
				const found = this.resolveAlias(req.parsedUrl ?? "", req.method);
				if (!found) return false;
				const route = found.alias.route.opts.name;
				if (route === "public") {
					this.limitPublicRate(req, res);
					req.rateCounted = true;
				}
				if (route === "worker") {
					// A worker's answers (views with signatures, nonces, route commitments), errors too: no shared cache keeps them.
					res.setHeader("cache-control", "private, no-store");
					this.assertNotThrottled(req, res);
					const signed = !!found.alias.action && CRANKER_ACTIONS.has(found.alias.action);
					// Failed authentications, counted: a missing or wrong key, told 401 or 403 before moleculer-web
					// looks for the action's owner (not 503 for an owner down, which would tell anyone which are);
					// and SPEC §6.1, a Cranker route without a request signature, refused before anything else is read.
					try {
						this.workerKeyOf(req);
						if (signed && !hasValue(req.headersDistinct.signature) && !hasValue(req.headersDistinct["signature-input"])) throw unsignedRefusal();
					} catch (err) {
						this.authFailures.fail(this.clientKeyOf(req), Date.now());
						throw err;
					}
					// Its signature covers the exact body bytes: refused before any of them is decoded.
					if (signed && String(req.headers["content-encoding"] ?? "identity").toLowerCase() !== "identity") throw new ServiceError("UNSUPPORTED_MEDIA_TYPE", "Signed Cranker requests take no content-encoding");
				}
				// A body where none is taken (a GET's), or one that is not JSON: refused unread.
				assertInputPlacement(req);
				return true;
			},

			/** The front door's count in the public routes' rate store, with the headers moleculer-web sends. */
			limitPublicRate(this: ApiThis, req: IncomingMessage, res: ServerResponse): void {
				if (!this.publicRate) return;
				const remaining = config.rateLimitPerMin - this.publicRate.inc(this.clientKeyOf(req));
				res.setHeader("X-Rate-Limit-Limit", config.rateLimitPerMin);
				res.setHeader("X-Rate-Limit-Remaining", Math.max(0, remaining));
				res.setHeader("X-Rate-Limit-Reset", this.publicRate.resetTime);
				if (remaining < 0) throw new ServiceError("RATE_LIMITED", "Too many requests; retry later");
			},

			/**
			 * METRICS_API_KEY set: the Prometheus text of GET /metrics takes `Authorization: Bearer <key>`
			 * (Prometheus's own bearer auth), compared in constant time; missing or malformed (another
			 * scheme, `Bearer <key> junk`) → 401, wrong key → 403, and wrong keys count towards 429 as
			 * the worker key's do. The JSON figures stay public.
			 */
			assertMetricsKey(this: ApiThis, req: IncomingMessage, res: ServerResponse): void {
				if (!this.isMetricsKey) return;
				this.assertNotThrottled(req, res);
				const token = bearerToken(req.headers.authorization);
				if (token === null) {
					res.setHeader("WWW-Authenticate", 'Bearer realm="metrics"');
					throw new ServiceError("UNAUTHORIZED", "The metrics in Prometheus form take Authorization: Bearer <METRICS_API_KEY>");
				}
				if (!this.isMetricsKey(token)) {
					this.authFailures.fail(this.clientKeyOf(req), Date.now());
					throw new ServiceError("FORBIDDEN", "The metrics key is not valid");
				}
			},

			/** An x-api-key sent to a public route is an authentication attempt like any other: wrong ones count. True for a worker key. */
			workerKeyAttempt(this: ApiThis, req: IncomingMessage, res: ServerResponse): boolean {
				const key = req.headers["x-api-key"];
				if (typeof key !== "string") return false;
				this.assertNotThrottled(req, res);
				const worker = this.isWorkerKey(key);
				if (!worker) this.authFailures.fail(this.clientKeyOf(req), Date.now());
				return worker;
			},

			/** A client past its failed authentications gets 429 until its window ends. */
			assertNotThrottled(this: ApiThis, req: IncomingMessage, res: ServerResponse): void {
				const waitMs = this.authFailures.retryAfterMs(this.clientKeyOf(req), Date.now());
				if (!waitMs) return;
				res.setHeader("Retry-After", String(Math.ceil(waitMs / 1000)));
				throw new ServiceError("RATE_LIMITED", "Too many failed authentications; retry later");
			},

			/**
			 * SPEC §6.1: the signed parts of a Cranker's request, for its owner, which checks them again
			 * (mixins/cranker-signed.mixin.ts) and admits each signature once. Checked here first, so
			 * that a bad signature counts as a failed authentication and costs the owners nothing (a
			 * content-encoding was refused before the body was read: checkBeforeBody).
			 */
			async signedCrankerRequest(this: ApiThis, req: Request): Promise<CrankerRequest> {
				// The URI a Cranker signed (`@target-uri`): behind a proxy, rebuilt from PUBLIC_BASE_URL.
				const targetUri = `${config.publicBaseUrl ?? `http://${req.headers.host ?? ""}`}${req.originalUrl ?? req.url ?? ""}`;
				// headersDistinct: a signature header sent twice must be seen twice (and refused), not joined into one.
				const request = crankerRequestOf(req.method ?? "", targetUri, req.headersDistinct, req.rawBody ?? Buffer.alloc(0));
				await verifyCrankerRequest(request, (req.body as { crankerPubkey?: unknown } | undefined)?.crankerPubkey, Date.now());
				return request;
			},

			/** The template moleculer-web matched; for requests answered before it matched (a body refused, 413, 503), looked up. */
			routeOf(this: ApiThis, req: Request & { $alias?: { fullPath?: string }; parsedUrl?: string }): string {
				if (req.$alias?.fullPath) return req.$alias.fullPath;
				const path = req.parsedUrl ?? (req.originalUrl ?? req.url ?? "").split("?")[0].replace(/(.)\/$/, "$1");
				try {
					const found = this.resolveAlias(path, req.method);
					return found ? found.alias.fullPath : "unmatched";
				} catch {
					return "unmatched"; // an undecodable path segment
				}
			},

			/**
			 * moleculer-web's server, with SPEC §10's time limits (headers in 10 s, the whole request
			 * in 30 s, checked every second) and a front door: a body declared too large is refused
			 * unread, and on SIGTERM new requests are refused while those in flight finish. Called by
			 * moleculer-web's `created`, before this service's: the state it reads is there by the
			 * first request.
			 */
			createServer(this: ApiThis) {
				if (this.server) return;
				const metrics = httpMetrics(this.broker);
				this.server = http.createServer(
					{ headersTimeout: config.headersTimeoutMs, requestTimeout: config.requestTimeoutMs, keepAliveTimeout: config.keepAliveTimeoutMs, connectionsCheckingInterval: Math.min(1000, config.headersTimeoutMs) },
					(req, res) => {
						// Closed for pipelining too deep (limitConnections): the requests read with it go unanswered.
						if (req.socket.destroyed) return;
						const isHealth = req.url?.startsWith("/health/");
						accessLog(this.logger, req, res, isHealth ? "debug" : "info");
						countRequest(metrics, request => this.routeOf(request), req, res);
						// First, so that every answer below carries it: a browser reads an answer without
						// its CORS headers as an opaque network error, not as the 503 or 413 it is.
						const cors = decideCors(this.corsRules, req.method ?? "", (req.url ?? "").split("?")[0], req.headers.origin, req.headers["access-control-request-method"] as string | undefined);
						const closing: Record<string, string> = this.draining ? { connection: "close" } : {};
						if (this.draining) res.shouldKeepAlive = false;
						if (cors.kind === "preflight") {
							// Answered here: a preflight never runs the action of the route it asks about.
							if (cors.status === 204) {
								res.writeHead(204, { ...cors.headers, ...closing, "content-length": "0" });
								return void res.end();
							}
							return sendJson(res, 403, new ServiceError("FORBIDDEN", "Cross-origin requests are not allowed here"), { ...cors.headers, ...closing });
						}
						if (cors.kind === "actual") for (const [name, value] of Object.entries(cors.headers)) res.setHeader(name, value);
						if (this.draining && !isHealth)
							return sendJson(res, 503, new ServiceError("SHUTTING_DOWN", "The service is shutting down; retry on another instance"), { ...closing, "retry-after": String(RETRY_AFTER_UNAVAILABLE_S) });
						if (Number(req.headers["content-length"] ?? 0) > MAX_BODY_BYTES) {
							res.shouldKeepAlive = false;
							return sendJson(res, 413, new ServiceError("PAYLOAD_TOO_LARGE", `Request bodies are limited to ${MAX_BODY_BYTES} bytes`), { connection: "close" });
						}
						const answered = this.inFlight.add(res);
						onResponseGone(res, () => {
							answered();
							// An answer queued behind another on a connection that went never had a socket, and
							// never closes by itself; moleculer-web's call waits for its close (the broker tracks
							// that call's context, the request and answer in it, until then).
							if (!res.socket && !res.writableFinished) res.emit("close");
							if (this.draining && this.inFlight.size === 0) this.drained();
						});
						if (req.method === "POST" && req.url === "/intents") return void this.serveIntake(req, res).catch(err => this.sendError(req, res, err));
						this.httpHandler(req, res);
					}
				);
				this.limitConnections(metrics);
				// As Node's own handler, with SPEC §7's body: nothing is written once an answer on the connection has begun.
				this.server.on("clientError", (err: NodeJS.ErrnoException, socket: Socket & { _httpMessage?: ServerResponse | null }) => {
					const inProgress = socket._httpMessage;
					if (socket.writable && !inProgress?.headersSent) {
						const refusal = parserRefusal(err.code);
						socket.write(rawAnswer(refusal));
						// A request cut off mid-body was answered so: its access line and count say this status, not 499.
						if (inProgress) answeredRaw.set(inProgress, refusal.code);
					}
					socket.destroy(err);
				});
			},

			/**
			 * MAX_CONNECTIONS, MAX_CONNECTIONS_PER_CLIENT and SOCKET_TIMEOUT_MS. Past either limit a
			 * connection is closed at once, before its request is read: a 429 would need it kept until
			 * its request is in and the answer read, the holding the limit is there to refuse.
			 */
			limitConnections(this: ApiThis, metrics: ReturnType<typeof httpMetrics>) {
				const server = this.server!;
				server.maxConnections = config.maxConnections;
				// Nothing moved on a connection this long. Closed: one stuck (an answer its client does not
				// read, held until then) or idle between requests (keep-alive's timer: Node's own close).
				// A request still being served, its answer not begun (a slow owner), gets another period.
				server.timeout = config.socketTimeoutMs;
				server.on("timeout", (socket: Socket) => {
					if (socket.writableLength > 0 || answersInProgress(socket) === 0) socket.destroy();
					else socket.setTimeout(config.socketTimeoutMs);
				});
				const perClient = new ConnectionsPerClient(config.maxConnectionsPerClient, proxies);
				const notices = {
					process: new RefusalNotice(`Connections refused: this process holds MAX_CONNECTIONS (${config.maxConnections})`),
					client: new RefusalNotice(`Connections refused: a client holds MAX_CONNECTIONS_PER_CLIENT (${config.maxConnectionsPerClient})`),
					pipelined: new RefusalNotice(`Connections closed: a client pipelined more than ${MAX_ANSWERS_PER_CONNECTION} requests on one`)
				};
				const refused = (limit: keyof typeof notices) => {
					metrics.refusedConnections.inc({ limit });
					const line = notices[limit].refused();
					if (line) this.logger.warn(line);
				};
				server.on("drop", () => refused("process"));
				// Node reads every request a client pipelines at once and keeps each answer until the client
				// has read those before it: one connection read slowly would hold hundreds of answers. A
				// client pipelining deeper than browsers and HTTP libraries do loses the connection.
				server.prependListener("request", (req: IncomingMessage) => {
					if (req.socket.destroyed || answersInProgress(req.socket) < MAX_ANSWERS_PER_CONNECTION) return;
					req.socket.destroy();
					refused("pipelined");
				});
				server.on("connection", (socket: Socket) => {
					if (!perClient.admit(socket)) {
						socket.destroy();
						return refused("client");
					}
					metrics.openConnections.inc();
					socket.once("close", () => metrics.openConnections.dec());
				});
			},

			/**
			 * SIGTERM, first step: readiness and new requests answer 503 at once, requests in flight
			 * finish (told their connection closes), then idle connections are closed.
			 */
			async drain(this: ApiThis) {
				this.draining = true;
				markDraining(this.broker);
				// Streams never finish by themselves: ended now, their clients reconnect to another replica.
				this.streams.closeAll();
				for (const res of this.inFlight) if (!res.headersSent) res.setHeader("connection", "close");
				if (this.inFlight.size) {
					const done = new Promise<void>(resolve => (this.drained = resolve));
					await Promise.race([done, new Promise(resolve => setTimeout(resolve, DRAIN_TIMEOUT_MS).unref())]);
				}
				this.server?.closeIdleConnections();
			}
		},

		created(this: ApiThis) {
			this.authFailures = new FailureThrottle(config.authFailuresPerMin);
			// CORS_ORIGINS: the browser apps that may call the public routes (and the health routes the SDK reads).
			this.corsRules = corsPolicy(config.corsOrigins, [...Object.keys(PUBLIC_ROUTES), ...Object.keys(PUBLIC_STREAM_ROUTES), ...HEALTH_ROUTES]);
			this.publicRate = this.routes.find(route => route.opts.name === "public")?.rateLimit?.store ?? null;
			this.streams = eventStreams(this.broker, config, req => this.clientIp(req));
			this.intake = {
				check: this.broker.validator!.compile(createIntentParams) as unknown as (params: object) => true | object[],
				batch: new Batcher(submissions => submitAll(this.broker, submissions), { items: INTAKE_BATCH_MAX, weight: INTAKE_BATCH_BYTES, windowMs: config.intakeWindowMs, enough: INTAKE_BATCH_ENOUGH })
			};
			this.submissionKeys = { process: randomUUID(), count: 0 };
			this.inFlight = new TransientSet();
			this.draining = false;
			this.drained = () => {};
			this.openApiCache = null;
			this.isMetricsKey = config.metricsApiKey ? createKeyChecker([config.metricsApiKey]) : null;
			const keys = loadOrCreateWorkerKeys(config.workerApiKeys, config.dataDir);
			this.isWorkerKey = createKeyChecker(keys.value);
			if (keys.generated) this.logger.info(`Generated a worker API key into ${keys.source}.`);
			else if (keys.source !== "environment") this.logger.info(`Worker API keys read from ${keys.source}.`);
		}
	};
}

/** The client a request counts against: its peer, or behind a trusted proxy the address the proxy saw. */
function clientAddress(req: IncomingMessage, proxies: ProxyTrust): string {
	return clientAddressOf(req.socket.remoteAddress ?? "unknown", String(req.headers["x-forwarded-for"] ?? ""), proxies);
}

/** A batch of submissions to the receiver; one by one to a receiver of the previous version (a rolling update). */
function submitAll(broker: ServiceBroker, submissions: Submission[]): Promise<SubmissionAnswer[]> {
	if (isServed(broker, "receiver.submitMany")) return broker.call<SubmissionAnswer[], object>("receiver.submitMany", { submissions });
	return Promise.all(
		submissions.map(async ({ request }) => {
			const meta: { $statusCode?: number } = {};
			try {
				const view = await broker.call<PublicMempoolIntent, CreateIntentRequest>("receiver.submit", request, { meta });
				return { status: (meta.$statusCode ?? 201) as 200 | 201 | 202, view };
			} catch (err) {
				return refusalOf(err, cause => broker.logger.error("receiver.submit failed:", cause));
			}
		})
	);
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
	if (res.headersSent) {
		res.end();
		return;
	}
	const payload = body instanceof ServiceError ? { name: body.name, message: body.message, code: body.code, type: body.type, ...(body.data !== undefined ? { data: body.data } : {}) } : body;
	res.writeHead(status, { "content-type": "application/json; charset=utf-8", ...headers });
	res.end(JSON.stringify(payload));
}
