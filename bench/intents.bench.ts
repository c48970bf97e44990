/**
 * POST /intents throughput benchmark (SPEC §1, §2.1).
 *
 *   npm run bench:intents                                  # starts `node dist/index.js` itself
 *   CONCURRENCY=64 COUNT=50000 npm run bench:intents
 *   npm run bench:intents -- --concurrency 16 --count 5000 --warmup 500
 *   BENCH_URL=http://host:3000 BENCH_SEED_FILE=seed.json npm run bench:intents
 *
 * Options (argv `--name value`, `--name=value` or `NAME=value`, else the environment):
 *   CONCURRENCY (32)  requests in flight, also the keep-alive agent's maxSockets
 *   COUNT (20000)     measured intents
 *   WARMUP (1000)     intents sent first, not measured
 *   WALLETS (256)     distinct sender wallets (the verifier shards by sender)
 *   VERIFY_SECONDS (2) duration of the raw ed25519 verification measurement
 *   BENCH_URL         an already-started service; then BENCH_SEED_FILE (the registry seed it was
 *                     started with) names the route to pay, BENCH_TIN picks one of its TINs, and
 *                     WORKER_API_KEY (optional) enables the post-run check of stuck intents.
 *
 * Every body is built and signed before timing starts: signing speed is not part of the result.
 * After the HTTP phase (the child service stopped, or an external one idle) the same kind of
 * message is verified with node:crypto on this one core for comparison.
 * Results: bench/results/intents-<timestamp>.json and a Markdown table on stdout. Exits 1 when the
 * service cannot start, 2 when more than 1 % of the measured requests were not 201.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes, verify as cryptoVerify, createPublicKey, type KeyObject } from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { buildPaymentMessage, type PaymentAuthorizationFields } from "../lib/canonical";
import { createSigner, generateKeypair, verifySignature, type Keypair } from "../lib/ed25519";
import { decodeBase58, encodeBase58, sha256Hex } from "../lib/encoding";
import type { CreateIntentRequest } from "../lib/intents";
import { tinFromSequence } from "../lib/tin";

// ---------------------------------------------------------------------------------------------
// Options

interface Options {
	concurrency: number;
	count: number;
	warmup: number;
	wallets: number;
	verifySeconds: number;
	url: string | null;
	seedFile: string | null;
	tin: string | null;
	workerApiKey: string | null;
}

class UsageError extends Error {
	override name = "UsageError";
}

const OPTION_NAMES = ["CONCURRENCY", "COUNT", "WARMUP", "WALLETS", "VERIFY_SECONDS", "BENCH_URL", "BENCH_SEED_FILE", "BENCH_TIN", "WORKER_API_KEY"];

function readArgv(argv: readonly string[]): Record<string, string> {
	const out: Record<string, string> = {};
	for (let i = 0; i < argv.length; i++) {
		const arg = argv[i];
		let key: string;
		let value: string | undefined;
		if (arg.startsWith("--")) {
			const eq = arg.indexOf("=");
			if (eq >= 0) {
				key = arg.slice(2, eq);
				value = arg.slice(eq + 1);
			} else {
				key = arg.slice(2);
				value = argv[i + 1];
				i++;
			}
		} else if (/^[A-Za-z_][A-Za-z0-9_]*=/.test(arg)) {
			const eq = arg.indexOf("=");
			key = arg.slice(0, eq);
			value = arg.slice(eq + 1);
		} else {
			throw new UsageError(`unexpected argument "${arg}" (use --name value, --name=value or NAME=value)`);
		}
		const name = key.replace(/-/g, "_").toUpperCase();
		if (!OPTION_NAMES.includes(name)) throw new UsageError(`unknown option "${key}"; known: ${OPTION_NAMES.join(", ")}`);
		if (value === undefined) throw new UsageError(`option --${key} needs a value`);
		out[name] = value;
	}
	return out;
}

function parseOptions(argv: readonly string[], env: NodeJS.ProcessEnv): Options {
	const args = readArgv(argv);
	const get = (name: string): string | null => {
		const value = (args[name] ?? env[name])?.trim();
		return value ? value : null;
	};
	const int = (name: string, fallback: number, min: number): number => {
		const raw = get(name);
		if (raw == null) return fallback;
		if (!/^\d+$/.test(raw) || Number(raw) < min) throw new UsageError(`${name} must be an integer ≥ ${min}, got "${raw}"`);
		return Number(raw);
	};
	const options: Options = {
		concurrency: int("CONCURRENCY", 32, 1),
		count: int("COUNT", 20_000, 1),
		warmup: int("WARMUP", 1000, 0),
		wallets: int("WALLETS", 256, 1),
		verifySeconds: int("VERIFY_SECONDS", 2, 1),
		url: get("BENCH_URL"),
		seedFile: get("BENCH_SEED_FILE"),
		tin: get("BENCH_TIN"),
		workerApiKey: get("WORKER_API_KEY")
	};
	if (options.url && !options.seedFile)
		throw new UsageError("BENCH_URL needs BENCH_SEED_FILE: the registry seed the service was started with (the route to pay comes from it)");
	return options;
}

// ---------------------------------------------------------------------------------------------
// Route, service

interface Route {
	tin: string;
	routeCommitment: string;
	routeVersion: number;
	policyCommitment: string;
}

function routeFromSeed(file: string, tin: string | null): Route {
	const entries = JSON.parse(fs.readFileSync(file, "utf8")) as unknown;
	if (!Array.isArray(entries) || !entries.length) throw new Error(`${file}: expected a non-empty JSON array of routes`);
	const route = (tin ? entries.find(e => (e as Route)?.tin === tin) : entries[0]) as Route | undefined;
	if (!route) throw new Error(`${file}: no route for TIN ${tin}`);
	if (typeof route.tin !== "string" || typeof route.routeCommitment !== "string" || !Number.isInteger(route.routeVersion))
		throw new Error(`${file}: the route needs tin, routeCommitment and routeVersion`);
	return route;
}

function projectRoot(): string {
	// Compiled: dist/bench/intents.bench.js; from source: bench/intents.bench.ts.
	let dir = __dirname;
	for (let i = 0; i < 5; i++) {
		if (fs.existsSync(path.join(dir, "package.json"))) return dir;
		dir = path.dirname(dir);
	}
	throw new Error(`no package.json above ${__dirname}`);
}

function freePort(): Promise<number> {
	return new Promise((resolve, reject) => {
		const server = net.createServer();
		server.unref();
		server.on("error", reject);
		server.listen(0, "127.0.0.1", () => {
			const address = server.address();
			const port = typeof address === "object" && address ? address.port : 0;
			server.close(() => (port ? resolve(port) : reject(new Error("could not find a free port"))));
		});
	});
}

function httpGet(url: string, timeoutMs: number): Promise<number> {
	return new Promise(resolve => {
		const req = http.get(url, { timeout: timeoutMs }, res => {
			res.resume();
			res.on("end", () => resolve(res.statusCode ?? 0));
		});
		req.on("timeout", () => req.destroy(new Error("timeout")));
		req.on("error", () => resolve(0));
	});
}

function httpJson(url: string, method: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: unknown }> {
	return new Promise((resolve, reject) => {
		const payload = body === undefined ? undefined : JSON.stringify(body);
		const req = http.request(
			url,
			{ method, timeout: 10_000, headers: { ...(payload ? { "content-type": "application/json", "content-length": Buffer.byteLength(payload) } : {}), ...headers } },
			res => {
				const chunks: Buffer[] = [];
				res.on("data", (c: Buffer) => chunks.push(c));
				res.on("end", () => {
					const text = Buffer.concat(chunks).toString("utf8");
					let parsed: unknown = text;
					try {
						parsed = JSON.parse(text);
					} catch {
						// keep the raw text
					}
					resolve({ status: res.statusCode ?? 0, body: parsed });
				});
			}
		);
		req.on("timeout", () => req.destroy(new Error("timeout")));
		req.on("error", reject);
		req.end(payload);
	});
}

interface ServiceHandle {
	url: string;
	route: Route;
	workerApiKey: string | null;
	/** Stops the child service (no-op for an external one). */
	stop(): Promise<void>;
	child: ChildProcess | null;
	dataDir: string | null;
	/** The child's first and last output lines (empty for an external service). */
	output: string[];
	/** The child's log records counted by message. */
	logSummary: Record<string, number>;
}

class StartupError extends Error {
	override name = "StartupError";
}

async function startService(root: string): Promise<ServiceHandle> {
	const entry = path.join(root, "dist", "index.js");
	if (!fs.existsSync(entry)) throw new StartupError(`${entry} does not exist: run npm run build first`);
	const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "scs-bench-"));
	const route: Route = {
		tin: tinFromSequence(100_000_000 + Math.floor(Math.random() * 800_000_000)),
		routeCommitment: randomBytes(32).toString("hex"),
		routeVersion: 1,
		policyCommitment: randomBytes(32).toString("hex")
	};
	const seedFile = path.join(dataDir, "..", `${path.basename(dataDir)}-registry-seed.json`);
	fs.writeFileSync(seedFile, JSON.stringify([route]));
	const workerApiKey = randomBytes(24).toString("base64url");
	const port = await freePort();
	const url = `http://127.0.0.1:${port}`;

	// The first 60 lines (the first error is the telling one) and a rolling tail of 60 more.
	const output: string[] = [];
	const tail: string[] = [];
	let dropped = 0;
	// Log records counted by message (timestamp removed), so a warning per request shows as one line.
	const summary: Record<string, number> = {};
	const keep = (prefix: string) => (chunk: Buffer) => {
		for (const line of chunk.toString("utf8").split("\n")) {
			if (!line.trim()) continue;
			const record = /^\[\d\d:\d\d:\d\d\.\d{3}Z\]\s+(.*)$/.exec(line);
			if (record) {
				const message = record[1].trim().slice(0, 300);
				if (message in summary || Object.keys(summary).length < 50) summary[message] = (summary[message] ?? 0) + 1;
			}
			if (output.length < 60) output.push(`${prefix}${line}`);
			else {
				tail.push(`${prefix}${line}`);
				if (tail.length > 60) {
					tail.shift();
					dropped++;
				}
			}
		}
		output.length = Math.min(output.length, 60);
		output.splice(60, Infinity, ...(dropped ? [`[… ${dropped} lines left out …]`] : []), ...tail);
	};
	const child = spawn(process.execPath, [entry], {
		cwd: root,
		env: {
			...process.env,
			PORT: String(port),
			DATA_DIR: dataDir,
			REGISTRY_SEED_FILE: seedFile,
			WORKER_API_KEYS: workerApiKey,
			RATE_LIMIT_PER_MIN: "0",
			LOG_LEVEL: "warn"
		},
		stdio: ["ignore", "pipe", "pipe"]
	});
	child.stdout?.on("data", keep("[service] "));
	child.stderr?.on("data", keep("[service:err] "));
	let exited: { code: number | null; signal: NodeJS.Signals | null } | null = null;
	const exitPromise = new Promise<void>(resolve =>
		child.on("exit", (code, signal) => {
			exited = { code, signal };
			resolve();
		})
	);
	const spawnError = new Promise<Error>(resolve => child.on("error", resolve));

	const cleanup = () => {
		fs.rmSync(dataDir, { recursive: true, force: true });
		fs.rmSync(seedFile, { force: true });
	};
	const stop = async () => {
		if (!exited) {
			child.kill("SIGTERM");
			const timer = setTimeout(() => {
				if (!exited) {
					process.stderr.write(`service (pid ${child.pid}) did not exit 15 s after SIGTERM; sending SIGKILL\n`);
					child.kill("SIGKILL");
				}
			}, 15_000);
			await exitPromise;
			clearTimeout(timer);
		}
		const final = exited as { code: number | null; signal: NodeJS.Signals | null } | null;
		if (final && final.code !== 0 && final.signal !== "SIGTERM")
			process.stderr.write(`note: service exited with code ${final.code} signal ${final.signal}\n${output.slice(-20).join("\n")}\n`);
		cleanup();
	};

	const deadline = Date.now() + 30_000;
	let failure: string | null = null;
	for (;;) {
		const status = await Promise.race([httpGet(`${url}/health/ready`, 1000), spawnError.then(err => `spawn:${err.message}`)]);
		if (status === 200) break;
		if (typeof status === "string") {
			failure = `could not spawn ${process.execPath} ${entry}: ${status}`;
			break;
		}
		if (exited) {
			const e = exited as { code: number | null; signal: NodeJS.Signals | null };
			failure = `the service exited during startup (code ${e.code}, signal ${e.signal})`;
			break;
		}
		if (Date.now() > deadline) {
			failure = `GET ${url}/health/ready did not answer 200 within 30 s (last status ${status || "no answer"})`;
			break;
		}
		await new Promise(r => setTimeout(r, 100));
	}
	if (failure) {
		if (!exited) {
			child.kill("SIGTERM");
			const t = setTimeout(() => child.kill("SIGKILL"), 5000);
			await exitPromise;
			clearTimeout(t);
		}
		cleanup();
		throw new StartupError(`${failure}\n--- service output ---\n${output.join("\n") || "(none)"}`);
	}
	return { url, route, workerApiKey, stop, child, dataDir, output, logSummary: summary };
}

// ---------------------------------------------------------------------------------------------
// Intents

/** A fixed token mint: base58 of 32 bytes. */
const MINT = encodeBase58(new Uint8Array(32).fill(7));

interface Sender {
	keypair: Keypair;
	sign(message: string): string;
}

function buildBodies(route: Route, total: number, walletCount: number): { bodies: string[]; senders: Sender[]; samples: CreateIntentRequest[] } {
	const senders: Sender[] = [];
	for (let i = 0; i < walletCount; i++) {
		const keypair = generateKeypair();
		senders.push({ keypair, sign: createSigner(keypair) });
	}
	const now = Date.now();
	const issuedAt = new Date(now - 1000).toISOString();
	const expiresAt = new Date(now + 3_600_000).toISOString();
	const run = randomBytes(6).toString("base64url");
	const bodies: string[] = new Array(total);
	const samples: CreateIntentRequest[] = [];
	for (let i = 0; i < total; i++) {
		const sender = senders[i % walletCount];
		const fields: PaymentAuthorizationFields = {
			paymentId: `bench_${run}_${i}`,
			senderWallet: sender.keypair.publicKey,
			recipientTin: route.tin,
			recipientRouteCommitment: route.routeCommitment,
			recipientRouteVersion: route.routeVersion,
			tokenMintAddress: MINT,
			amount: "1000",
			feeLimit: "5000",
			senderFundingMode: "wallet_only_v2",
			senderAuthorizationNonce: `nonce_${run}_${i}_${randomBytes(6).toString("base64url")}`,
			senderAuthorizationIssuedAt: issuedAt,
			senderAuthorizationExpiresAt: expiresAt,
			expiresAtSlot: 10_000_000
		};
		const { message, transactionCommitment } = buildPaymentMessage(fields);
		const request: CreateIntentRequest = {
			...fields,
			senderAuthorizationMessage: message,
			senderAuthorizationSignature: sender.sign(message),
			transactionCommitment
		};
		if (samples.length < 1000) samples.push(request);
		bodies[i] = JSON.stringify(request);
	}
	return { bodies, senders, samples };
}

// ---------------------------------------------------------------------------------------------
// HTTP load

interface PhaseResult {
	sent: number;
	wallNs: bigint;
	latenciesMs: Float64Array;
	statuses: Record<string, number>;
	/** First few non-201 answers per status, for the report. */
	errorSamples: Record<string, string[]>;
}

function postIntent(agent: http.Agent, target: URL, body: string): Promise<{ status: string; text: string | null }> {
	return new Promise(resolve => {
		const req = http.request(
			{
				host: target.hostname,
				port: target.port,
				path: "/intents",
				method: "POST",
				agent,
				headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) }
			},
			res => {
				const status = String(res.statusCode ?? 0);
				if (status === "201") {
					res.resume();
					res.on("end", () => resolve({ status, text: null }));
				} else {
					const chunks: Buffer[] = [];
					res.on("data", (c: Buffer) => chunks.push(c));
					res.on("end", () => resolve({ status, text: Buffer.concat(chunks).toString("utf8").slice(0, 500) }));
				}
				res.on("error", err => resolve({ status: `ERR_${(err as NodeJS.ErrnoException).code ?? err.message}`, text: err.message }));
			}
		);
		req.setTimeout(60_000, () => req.destroy(Object.assign(new Error("no answer within 60 s"), { code: "TIMEOUT" })));
		req.on("error", err => resolve({ status: `ERR_${(err as NodeJS.ErrnoException).code ?? "REQUEST"}`, text: err.message }));
		req.end(body);
	});
}

async function runPhase(agent: http.Agent, target: URL, bodies: readonly string[], concurrency: number): Promise<PhaseResult> {
	const latencies = new Float64Array(bodies.length);
	const statuses: Record<string, number> = {};
	const errorSamples: Record<string, string[]> = {};
	let next = 0;
	const lane = async () => {
		for (;;) {
			const i = next++;
			if (i >= bodies.length) return;
			const t0 = process.hrtime.bigint();
			const { status, text } = await postIntent(agent, target, bodies[i]);
			latencies[i] = Number(process.hrtime.bigint() - t0) / 1e6;
			statuses[status] = (statuses[status] ?? 0) + 1;
			if (status !== "201") {
				const list = (errorSamples[status] ??= []);
				if (list.length < 3) list.push(text ?? "");
			}
		}
	};
	const start = process.hrtime.bigint();
	await Promise.all(Array.from({ length: Math.min(concurrency, bodies.length) }, lane));
	return { sent: bodies.length, wallNs: process.hrtime.bigint() - start, latenciesMs: latencies, statuses, errorSamples };
}

function percentile(sorted: Float64Array, p: number): number {
	if (!sorted.length) return NaN;
	const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
	return sorted[rank];
}

// ---------------------------------------------------------------------------------------------
// Raw verification

interface VerifyResult {
	/** node:crypto verify with cached KeyObjects and pre-decoded signatures. */
	rawPerSec: number;
	/** lib/ed25519 verifySignature (base58 decoding, key cache lookup, UTF-8 encoding included). */
	libPerSec: number;
	rawOps: number;
	libOps: number;
}

function measureVerify(samples: readonly CreateIntentRequest[], seconds: number): VerifyResult {
	const keys = new Map<string, KeyObject>();
	const prepared = samples.map(s => {
		let key = keys.get(s.senderWallet);
		if (!key) {
			const raw = decodeBase58(s.senderWallet)!;
			key = createPublicKey({ key: Buffer.concat([Buffer.from("302a300506032b6570032100", "hex"), raw]), format: "der", type: "spki" });
			keys.set(s.senderWallet, key);
		}
		return { key, message: Buffer.from(s.senderAuthorizationMessage, "utf8"), signature: Buffer.from(decodeBase58(s.senderAuthorizationSignature)!) };
	});
	// Sanity: every sample verifies, and a tampered one does not.
	for (const p of prepared) if (!cryptoVerify(null, p.message, p.key, p.signature)) throw new Error("a benchmark signature does not verify");
	const tampered = Buffer.from(prepared[0].message);
	tampered[tampered.length - 1] ^= 1;
	if (cryptoVerify(null, tampered, prepared[0].key, prepared[0].signature)) throw new Error("a tampered message verified");

	const timed = (fn: (i: number) => boolean, ms: number): { ops: number; perSec: number } => {
		let ops = 0;
		let ok = true;
		const start = process.hrtime.bigint();
		const end = start + BigInt(Math.round(ms * 1e6));
		let now = start;
		while (now < end) {
			for (let k = 0; k < 64; k++) ok = fn(ops++ % prepared.length) && ok;
			now = process.hrtime.bigint();
		}
		if (!ok) throw new Error("a verification failed during the measurement");
		return { ops, perSec: ops / (Number(now - start) / 1e9) };
	};
	const raw = (i: number) => cryptoVerify(null, prepared[i].message, prepared[i].key, prepared[i].signature);
	const lib = (i: number) => verifySignature(samples[i].senderWallet, samples[i].senderAuthorizationMessage, samples[i].senderAuthorizationSignature);
	timed(raw, 200); // warm up
	const r = timed(raw, seconds * 1000);
	timed(lib, 200);
	const l = timed(lib, Math.max(500, (seconds * 1000) / 2));
	return { rawPerSec: r.perSec, libPerSec: l.perSec, rawOps: r.ops, libOps: l.ops };
}

// ---------------------------------------------------------------------------------------------
// Main

const fmt = (n: number, digits = 0) => (Number.isFinite(n) ? n.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits }) : "n/a");

async function main(): Promise<number> {
	const options = parseOptions(process.argv.slice(2), process.env);
	const root = projectRoot();
	const log = (line: string) => process.stderr.write(`${line}\n`);

	let service: ServiceHandle;
	if (options.url) {
		const route = routeFromSeed(options.seedFile!, options.tin);
		const url = options.url.replace(/\/+$/, "");
		const ready = await httpGet(`${url}/health/ready`, 5000);
		if (ready !== 200) throw new StartupError(`GET ${url}/health/ready answered ${ready || "nothing"}, not 200`);
		service = { url, route, workerApiKey: options.workerApiKey, stop: async () => {}, child: null, dataDir: null, output: [], logSummary: {} };
		log(`using the running service at ${url} (TIN ${route.tin})`);
	} else {
		log("starting node dist/index.js …");
		service = await startService(root);
		log(`service ready at ${service.url} (pid ${service.child?.pid}, DATA_DIR ${service.dataDir}, TIN ${service.route.tin})`);
	}
	const onSignal = () => {
		service.child?.kill("SIGTERM");
		process.exit(130);
	};
	process.once("SIGINT", onSignal);

	let stopped = false;
	const stopService = async () => {
		if (stopped) return;
		stopped = true;
		await service.stop();
	};

	try {
		const total = options.warmup + options.count;
		log(`signing ${total} intents with ${options.wallets} wallets …`);
		const t0 = Date.now();
		const { bodies, samples } = buildBodies(service.route, total, options.wallets);
		log(`signed in ${((Date.now() - t0) / 1000).toFixed(1)} s`);

		const target = new URL(service.url);
		const agent = new http.Agent({ keepAlive: true, maxSockets: options.concurrency, maxFreeSockets: options.concurrency });
		let warm: PhaseResult | null = null;
		if (options.warmup) {
			log(`warmup: ${options.warmup} intents, concurrency ${options.concurrency} …`);
			warm = await runPhase(agent, target, bodies.slice(0, options.warmup), options.concurrency);
			log(`warmup statuses: ${JSON.stringify(warm.statuses)}`);
		}
		log(`measured: ${options.count} intents, concurrency ${options.concurrency} …`);
		const measured = await runPhase(agent, target, bodies.slice(options.warmup), options.concurrency);
		agent.destroy();

		// Post-run checks while the service is still up: what the mempool holds, and stuck intents.
		let mempoolCounts: unknown = null;
		try {
			const res = await httpJson(`${service.url}/`, "POST", { include: ["counts"] });
			mempoolCounts = res.status === 200 ? (res.body as { counts?: unknown }).counts : { status: res.status, body: res.body };
		} catch (err) {
			mempoolCounts = { error: (err as Error).message };
		}
		let unverified: unknown = null;
		if (service.workerApiKey) {
			try {
				const res = await httpJson(`${service.url}/intents?status=RECEIVED&limit=500`, "GET", undefined, { "x-api-key": service.workerApiKey });
				unverified = res.status === 200 && Array.isArray(res.body) ? (res.body.length >= 500 ? "≥500" : res.body.length) : { status: res.status, body: res.body };
			} catch (err) {
				unverified = { error: (err as Error).message };
			}
		}

		await stopService();
		log(options.url ? "HTTP phase done; measuring raw ed25519 verification …" : "service stopped; measuring raw ed25519 verification …");
		const verifyResult = measureVerify(samples, options.verifySeconds);

		const sorted = Float64Array.from(measured.latenciesMs).sort();
		const wallSeconds = Number(measured.wallNs) / 1e9;
		const accepted = measured.statuses["201"] ?? 0;
		const notAccepted = measured.sent - accepted;
		const intentsPerSec = accepted / wallSeconds;
		const ratio = intentsPerSec / verifyResult.rawPerSec;
		const warmFailed = !!warm && warm.sent !== (warm.statuses["201"] ?? 0);
		const cpus = os.cpus();
		const cpuModel = cpus[0]?.model?.trim() ?? "unknown";
		const cores = typeof os.availableParallelism === "function" ? os.availableParallelism() : cpus.length;

		const results = {
			benchmark: "intents",
			at: new Date().toISOString(),
			target: options.url ? "external" : "child process (node dist/index.js, SQLite, one process)",
			url: service.url,
			concurrency: options.concurrency,
			count: options.count,
			warmup: options.warmup,
			wallets: options.wallets,
			wallSeconds,
			accepted,
			notAccepted,
			intentsPerSec,
			requestsPerSec: measured.sent / wallSeconds,
			latencyMs: {
				p50: percentile(sorted, 50),
				p90: percentile(sorted, 90),
				p99: percentile(sorted, 99),
				max: sorted[sorted.length - 1],
				mean: sorted.reduce((a, b) => a + b, 0) / sorted.length
			},
			statuses: measured.statuses,
			errorSamples: measured.errorSamples,
			warmupStatuses: warm?.statuses ?? null,
			warmupErrorSamples: warm?.errorSamples ?? null,
			mempoolCountsAfter: mempoolCounts,
			receivedAfter: unverified,
			serviceLogSummary: service.logSummary,
			serviceOutput: notAccepted > 0 || warmFailed ? service.output : service.output.slice(0, 10),
			rawVerifiesPerSec: verifyResult.rawPerSec,
			libVerifySignaturePerSec: verifyResult.libPerSec,
			ratioIntentsToRawVerifies: ratio,
			node: process.version,
			platform: `${os.platform()} ${os.release()} ${os.arch()}`,
			cpuModel,
			cores,
			loadAverage: os.loadavg(),
			bodySampleSha256: sha256Hex(bodies[0])
		};

		const dir = path.join(root, "bench", "results");
		fs.mkdirSync(dir, { recursive: true });
		const file = path.join(dir, `intents-${results.at.replace(/[:.]/g, "-")}.json`);
		fs.writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`);

		const statusText = Object.entries(measured.statuses)
			.sort(([a], [b]) => a.localeCompare(b))
			.map(([s, n]) => `${s}: ${n}`)
			.join(", ");
		const out = [
			"",
			"| concurrency | count | intents/s | p50 ms | p99 ms | raw verifies/s (1 core) | intents/s ÷ verifies/s | node | cpu |",
			"|---:|---:|---:|---:|---:|---:|---:|---|---|",
			`| ${options.concurrency} | ${options.count} | ${fmt(intentsPerSec)} | ${fmt(results.latencyMs.p50, 2)} | ${fmt(results.latencyMs.p99, 2)} | ${fmt(verifyResult.rawPerSec)} | ${fmt(ratio, 3)} | ${process.version} | ${cpuModel} × ${cores} |`,
			"",
			`status codes (measured): ${statusText}`,
			`warmup status codes: ${warm ? JSON.stringify(warm.statuses) : "(no warmup)"}`,
			`wall ${wallSeconds.toFixed(2)} s; p90 ${fmt(results.latencyMs.p90, 2)} ms; max ${fmt(results.latencyMs.max, 2)} ms; lib verifySignature ${fmt(verifyResult.libPerSec)}/s`,
			`mempool counts after: ${JSON.stringify(mempoolCounts)}${unverified !== null ? `; still RECEIVED: ${JSON.stringify(unverified)}` : ""}`,
			`results: ${path.relative(process.cwd(), file) || file}`
		];
		for (const [status, list] of Object.entries(measured.errorSamples)) out.push(`non-201 ${status} (${measured.statuses[status]}×), e.g. ${list[0]}`);
		for (const [message, n] of Object.entries(service.logSummary)) out.push(`service log: ${n} × ${message}`);
		if (service.output.length && (notAccepted > 0 || warmFailed))
			out.push("--- service output (first and last lines) ---", ...service.output.slice(0, 40), ...(service.output.length > 40 ? ["…", ...service.output.slice(-20)] : []));
		process.stdout.write(`${out.join("\n")}\n`);

		if (notAccepted > measured.sent * 0.01) {
			process.stderr.write(
				`FAIL: ${notAccepted} of ${measured.sent} measured requests (${((100 * notAccepted) / measured.sent).toFixed(2)} %) were not 201: ${statusText}\n`
			);
			return 2;
		}
		if (notAccepted > 0) process.stderr.write(`warning: ${notAccepted} measured requests were not 201 (under the 1 % limit)\n`);
		return 0;
	} finally {
		await stopService();
		process.removeListener("SIGINT", onSignal);
	}
}

main().then(
	code => process.exit(code),
	err => {
		if (err instanceof StartupError) process.stderr.write(`FAIL: the service could not start: ${err.message}\n`);
		else if (err instanceof UsageError) process.stderr.write(`FAIL: ${err.message}\n`);
		else process.stderr.write(`FAIL: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
		process.exit(1);
	}
);
