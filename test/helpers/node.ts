/**
 * Starts the real service (every service in one broker, the real moleculer-web gateway on a free
 * port, SQLite files in a temp DATA_DIR) and talks to it over HTTP.
 */
import { randomBytes } from "node:crypto";
import { mongoUrlWithDatabase } from "../../lib/store/mongo-url";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import type { ServiceBroker } from "moleculer";
import { loadConfig, type Config } from "../../lib/config";
import { RequestSigner } from "../../lib/http-signature";
import { freePort, spawnScript, waitFor, type ScriptProcess } from "../../devkit/process";
import { createNode, stopNode } from "../../services";
import { contractViolation, type ContractOptions } from "./contract";
import { signedHeartbeat, signingKey, type Wallet } from "./fixtures";

export const API_KEY = "test-worker-key-0123456789";

export interface TestNode {
	url: string;
	config: Config;
	broker: ServiceBroker;
	dataDir: string;
	http: Http;
	/** Requests as this Cranker: the worker key and the Cranker's request signature (SPEC §6.1). */
	as(cranker: Wallet): Http;
	stop(): Promise<void>;
}

export interface HttpResponse<T = any> {
	status: number;
	body: T;
	headers: Headers;
}

/** `options`: what the contract check (./contract.ts) lets through, such as a 500 a test provokes on purpose. */
export type Http = (method: string, path: string, body?: unknown, headers?: Record<string, string>, options?: ContractOptions) => Promise<HttpResponse>;

export const sleep = (ms: number) => new Promise(resolve => setTimeout(resolve, ms));

export function tempDir(prefix = "scs-test-"): string {
	return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

/** `log`: the broker writes its log to the console (a test that reads it spies on console first). */
export async function startNode(env: Record<string, string> = {}, dataDir = tempDir(), { log = false } = {}): Promise<TestNode> {
	const config = loadConfig({
		PORT: "0",
		DATA_DIR: dataDir,
		WORKER_API_KEYS: API_KEY,
		RATE_LIMIT_PER_MIN: "0",
		SWEEP_INTERVAL_MS: "200",
		LOG_LEVEL: "warn",
		// MONGO_URL=… npm test runs the HTTP suites on MongoDB, each node in a database of its own.
		...(process.env.MONGO_URL ? { MONGO_URL: mongoUrlWithDatabase(process.env.MONGO_URL, `scs_test_${process.pid}_${randomBytes(4).toString("hex")}`) } : {}),
		...env
	});
	// TEST_LOG=1 shows the broker log when a test needs debugging.
	const broker = createNode(config, { ...(process.env.TEST_LOG || log ? {} : { logger: false }), skipProcessEventRegistration: true });
	await broker.start();
	const api = broker.getLocalService("api") as unknown as { server: { address(): { port: number } } };
	const url = `http://127.0.0.1:${api.server.address().port}`;
	return { url, config, broker, dataDir, http: httpClient(url), as: cranker => crankerClient(url, cranker), stop: () => stopNode(broker) };
}

/**
 * Requests to a gateway. Every answer is checked against the OpenAPI document (./contract.ts): one
 * it does not describe fails the request, and so the test that made it.
 */
export function httpClient(url: string, defaultHeaders: Record<string, string> = {}): Http {
	return async (method, route, body, headers = {}, options = {}) => {
		const response = await fetch(url + route, {
			method,
			headers: { ...(body !== undefined ? { "content-type": "application/json" } : {}), ...defaultHeaders, ...headers },
			body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body)
		});
		const text = await response.text();
		const violation = contractViolation({ method, path: route.split("?")[0], status: response.status, headers: response.headers, text }, options);
		if (violation) throw new Error(`Contract (docs/api.md, GET /openapi.json): ${method} ${route} answered ${response.status}: ${violation}\nbody: ${text.slice(0, 500)}`);
		let parsed: unknown = text;
		try {
			parsed = JSON.parse(text);
		} catch {
			// Not JSON: tests assert on the raw text.
		}
		return { status: response.status, body: parsed, headers: response.headers };
	};
}

export const worker = { "x-api-key": API_KEY };

/** One signer per Cranker, as a Cranker process has one: repeats of a request never repeat its signature. */
const signers = new Map<string, RequestSigner>();

/** An Http that signs every request as `cranker` (SPEC §6.1), with the worker key; `headers` override. */
export function crankerClient(url: string, cranker: Wallet, apiKey = API_KEY): Http {
	const http = httpClient(url);
	return async (method, route, body, headers = {}, options = {}) => {
		const text = body === undefined ? "" : typeof body === "string" ? body : JSON.stringify(body);
		let signer = signers.get(cranker.address);
		if (!signer) signers.set(cranker.address, (signer = new RequestSigner(signingKey(cranker))));
		const signature = await signer.sign({ method, url: url + route, body: text });
		return http(method, route, body === undefined ? undefined : text, { "x-api-key": apiKey, ...signature, ...headers }, options);
	};
}

/**
 * The built service as a process of its own (`node dist/index.js`) on a free port, once it is
 * ready: for the tests that kill it (SIGKILL) and start it again on the same DATA_DIR.
 */
export async function spawnService(env: Record<string, string>): Promise<{ proc: ScriptProcess; url: string }> {
	const port = await freePort();
	const proc = spawnScript(path.resolve(__dirname, "../../dist/index.js"), { ...env, PORT: String(port) });
	const url = `http://127.0.0.1:${port}`;
	await waitFor(async () => (await fetch(`${url}/health/ready`).catch(() => null))?.status === 200, 20_000, "the service to be ready", 50);
	return { proc, url };
}

/** A settling Cranker's moves of a VERIFIED intent (version 3), the last one terminal. */
export const SETTLEMENT_MOVES = [
	["CRANKER_LEASED", 3],
	["SUBMITTED", 4],
	["CONFIRMED", 5]
] as const;

/** One of SETTLEMENT_MOVES by `settler`, through the real routes; the lease after a heartbeat, so that it is online. */
export async function settlementMove(node: TestNode, settler: Wallet, id: string, [status, expectedVersion]: (typeof SETTLEMENT_MOVES)[number]): Promise<void> {
	if (status === "CRANKER_LEASED") expect((await node.as(settler)("POST", "/crankers/heartbeat", signedHeartbeat(settler))).status).toBe(200);
	const answer = await node.as(settler)("PATCH", `/intents/${id}/status`, { status, crankerPubkey: settler.address, expectedVersion, transactionSignature: "5".repeat(87), lastValidBlockHeight: 1_000_000 });
	expect(answer.status).toBe(200);
}
