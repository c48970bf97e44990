/**
 * The pieces every benchmark shares: signed bodies built before timing starts, one HTTP load
 * generator (closed loop at a fixed concurrency, or paced at a fixed rate), percentiles, and the
 * CPU a target process spent, read from /proc so that any process (ours, the lean yardstick,
 * nats-server) is measured the same way; a target started as a process, once it is ready; and
 * the rate of one thread verifying signatures, the yardstick of the machine a run is on.
 */
import { execFileSync } from "node:child_process";
import { createPublicKey, verify as cryptoVerify, randomBytes, type KeyObject } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import http from "node:http";
import net from "node:net";
import { spawnScript, waitFor, type ScriptProcess } from "../devkit/process";
import { buildPaymentMessage, type PaymentAuthorizationFields } from "../lib/canonical";
import { createSigner, generateKeypair, verifySignature } from "../lib/ed25519";
import { decodeBase58, encodeBase58 } from "../lib/encoding";
import type { CreateIntentRequest } from "../lib/intents";
import { tinFromSequence } from "../lib/tin";

export interface Route {
	tin: string;
	routeCommitment: string;
	routeVersion: number;
	policyCommitment?: string;
}

/** A route of a random TIN, and a registry seed file (in a temp folder) that holds it alone, for a target to start with. */
export function newRouteSeed(): { route: Route; seedFile: string } {
	const route: Route = { tin: tinFromSequence(100_000_000 + Math.floor(Math.random() * 800_000_000)), routeCommitment: randomBytes(32).toString("hex"), routeVersion: 1, policyCommitment: randomBytes(32).toString("hex") };
	const seedFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "scs-bench-seed-")), "registry-seed.json");
	fs.writeFileSync(seedFile, JSON.stringify([route]));
	return { route, seedFile };
}

/** `NAME=value,NAME=value` settings as an environment; a value may hold "=" itself (NODE_OPTIONS=--max-semi-space-size=64). */
export function envPairs(text: string): Record<string, string> {
	return Object.fromEntries(text.split(",").filter(Boolean).map(pair => [pair.slice(0, pair.indexOf("=")).trim(), pair.slice(pair.indexOf("=") + 1).trim()]));
}

/** A fixed token mint: base58 of 32 bytes. */
const MINT = encodeBase58(new Uint8Array(32).fill(7));

/** A stream of distinct signed CreateIntentRequests for `route`, from `wallets` senders (the verifier shards by sender). */
export class BodyFactory {
	private readonly signers: { address: string; sign(message: string): string }[];
	private readonly run = randomBytes(6).toString("base64url");
	private next = 0;
	readonly samples: CreateIntentRequest[] = [];

	constructor(
		private readonly route: Route,
		wallets: number
	) {
		this.signers = Array.from({ length: wallets }, () => {
			const keypair = generateKeypair();
			return { address: keypair.publicKey, sign: createSigner(keypair) };
		});
	}

	/** `count` new bodies, each with its own paymentId and nonce, as JSON text. */
	take(count: number): string[] {
		const now = Date.now();
		const issuedAt = new Date(now - 1000).toISOString();
		const expiresAt = new Date(now + 3_600_000).toISOString();
		return Array.from({ length: count }, () => {
			const i = this.next++;
			const signer = this.signers[i % this.signers.length];
			const fields: PaymentAuthorizationFields = {
				paymentId: `bench_${this.run}_${i}`,
				senderWallet: signer.address,
				recipientTin: this.route.tin,
				recipientRouteCommitment: this.route.routeCommitment,
				recipientRouteVersion: this.route.routeVersion,
				tokenMintAddress: MINT,
				amount: "1000",
				feeLimit: "5000",
				senderFundingMode: "wallet_only_v2",
				senderAuthorizationNonce: `nonce_${this.run}_${i}_${randomBytes(6).toString("base64url")}`,
				senderAuthorizationIssuedAt: issuedAt,
				senderAuthorizationExpiresAt: expiresAt,
				expiresAtSlot: 10_000_000
			};
			const { message, transactionCommitment } = buildPaymentMessage(fields);
			const request: CreateIntentRequest = { ...fields, senderAuthorizationMessage: message, senderAuthorizationSignature: signer.sign(message), transactionCommitment };
			if (this.samples.length < 1000) this.samples.push(request);
			return JSON.stringify(request);
		});
	}
}

export interface PhaseResult {
	sent: number;
	wallSeconds: number;
	/** Per request, from when it was due (paced) or sent (closed loop) to its answer. */
	latenciesMs: Float64Array;
	statuses: Record<string, number>;
	/** The first few answers per status other than the expected one. */
	errorSamples: Record<string, string[]>;
}

export interface Target {
	url: string;
	path: string;
	/** The status a successful request answers (201 for a new intent). */
	expected: number;
	headers?: Record<string, string>;
}

function send(agent: http.Agent, target: URL, path: string, body: string | null, expected: string, headers: Record<string, string> = {}): Promise<{ status: string; text: string | null }> {
	return new Promise(resolve => {
		const req = http.request(
			{
				host: target.hostname,
				port: target.port,
				path,
				method: body === null ? "GET" : "POST",
				agent,
				headers: { ...headers, ...(body === null ? {} : { "content-type": "application/json", "content-length": Buffer.byteLength(body) }) }
			},
			res => {
				const status = String(res.statusCode ?? 0);
				const chunks: Buffer[] = [];
				if (status === expected) res.resume();
				else res.on("data", (c: Buffer) => chunks.push(c));
				res.on("end", () => resolve({ status, text: status === expected ? null : Buffer.concat(chunks).toString("utf8").slice(0, 500) }));
				res.on("error", err => resolve({ status: `ERR_${(err as NodeJS.ErrnoException).code ?? err.message}`, text: err.message }));
			}
		);
		req.setTimeout(60_000, () => req.destroy(Object.assign(new Error("no answer within 60 s"), { code: "TIMEOUT" })));
		req.on("error", err => resolve({ status: `ERR_${(err as NodeJS.ErrnoException).code ?? "REQUEST"}`, text: err.message }));
		req.end(body ?? undefined);
	});
}

class Recorder {
	readonly latenciesMs: Float64Array;
	readonly statuses: Record<string, number> = {};
	readonly errorSamples: Record<string, string[]> = {};
	constructor(
		count: number,
		private readonly expected: string
	) {
		this.latenciesMs = new Float64Array(count);
	}
	record(i: number, startedNs: bigint, answer: { status: string; text: string | null }): void {
		this.latenciesMs[i] = Number(process.hrtime.bigint() - startedNs) / 1e6;
		this.statuses[answer.status] = (this.statuses[answer.status] ?? 0) + 1;
		if (answer.status !== this.expected) {
			const list = (this.errorSamples[answer.status] ??= []);
			if (list.length < 3) list.push(answer.text ?? "");
		}
	}
	result(sent: number, startedNs: bigint): PhaseResult {
		return { sent, wallSeconds: Number(process.hrtime.bigint() - startedNs) / 1e9, latenciesMs: this.latenciesMs, statuses: this.statuses, errorSamples: this.errorSamples };
	}
}

/** Closed loop: `concurrency` requests in flight, the next sent as one is answered. `bodies` null entries are GETs. */
export async function runClosed(target: Target, bodies: readonly (string | null)[], concurrency: number): Promise<PhaseResult> {
	const url = new URL(target.url);
	const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency, maxFreeSockets: concurrency });
	const recorder = new Recorder(bodies.length, String(target.expected));
	let next = 0;
	const lane = async () => {
		for (let i = next++; i < bodies.length; i = next++) {
			const t0 = process.hrtime.bigint();
			recorder.record(i, t0, await send(agent, url, target.path, bodies[i], String(target.expected), target.headers));
		}
	};
	const start = process.hrtime.bigint();
	await Promise.all(Array.from({ length: Math.min(concurrency, bodies.length) }, lane));
	agent.destroy();
	return recorder.result(bodies.length, start);
}

const HEADER_END = Buffer.from("\r\n\r\n");

/**
 * GETs over one kept-alive connection whose reads all land in one reused buffer (net's `onread`),
 * for timing large answers one at a time. node:http allocates a Buffer for every socket read; a
 * megabyte answer every few milliseconds then drove the generator into a mark-compact about every
 * 60 ms ("external memory pressure"), and those pauses were the p99 of every large list, the bare
 * floor's included. Answers must carry a Content-Length, as the service's and the floor's do.
 */
class GetConnection {
	private readonly socket: net.Socket;
	private readonly opened: Promise<void>;
	private waiting: { resolve: (status: string) => void; reject: (err: Error) => void } | null = null;
	/** The answer's head while it spans reads. */
	private head = Buffer.alloc(0);
	/** Body bytes still due; null while the head is read. */
	private bodyLeft: number | null = null;
	private status = "";

	constructor(private readonly target: URL) {
		const reads = Buffer.allocUnsafe(1 << 18);
		this.socket = net.connect({
			host: target.hostname,
			port: Number(target.port),
			onread: {
				buffer: reads,
				callback: n => {
					this.onRead(reads.subarray(0, n));
					return true;
				}
			}
		});
		this.opened = new Promise((resolve, reject) => {
			this.socket.once("connect", resolve);
			this.socket.once("error", reject);
		});
		// Awaited by ready() or get(); a refusal before then must not end the process unhandled.
		this.opened.catch(() => undefined);
		this.socket.on("error", err => this.fail(err));
		this.socket.on("close", () => this.fail(new Error("the connection closed")));
	}

	/** Once connected: timing starts after the TCP handshake. */
	ready(): Promise<void> {
		return this.opened;
	}

	/** The answer's status, once its whole body has arrived. */
	async get(path: string, headers: Record<string, string> = {}): Promise<string> {
		await this.opened;
		// A write to a closed socket raises nothing: the answer would never come.
		if (this.socket.destroyed || !this.socket.writable) throw new Error("the connection closed");
		const answered = new Promise<string>((resolve, reject) => (this.waiting = { resolve, reject }));
		this.head = Buffer.alloc(0);
		this.bodyLeft = null;
		this.socket.write(`GET ${path} HTTP/1.1\r\nhost: ${this.target.host}\r\n${Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`).join("")}\r\n`);
		return answered;
	}

	close(): void {
		this.socket.destroy();
	}

	private onRead(bytes: Buffer): void {
		if (!this.waiting) return;
		if (this.bodyLeft === null) {
			const head = this.head.length ? Buffer.concat([this.head, bytes]) : bytes;
			const end = head.indexOf(HEADER_END);
			if (end < 0) {
				this.head = Buffer.from(head);
				return;
			}
			const text = head.toString("latin1", 0, end);
			const length = /\r\ncontent-length: *(\d+)/i.exec(text);
			if (!length) return this.fail(new Error(`an answer without Content-Length: ${text.split("\r\n")[0]}`));
			this.status = text.split(" ")[1] ?? "0";
			this.bodyLeft = Number(length[1]) - (head.length - end - HEADER_END.length);
		} else this.bodyLeft -= bytes.length;
		if (this.bodyLeft <= 0) {
			const { resolve } = this.waiting;
			this.waiting = null;
			resolve(this.status);
		}
	}

	private fail(err: Error): void {
		const waiting = this.waiting;
		this.waiting = null;
		waiting?.reject(err);
	}
}

/**
 * One GET at a time to each target in turn, `count` rounds: every target is timed under the same
 * conditions (a noisy spell on a shared machine lands on all of them, not on whichever phase ran
 * then), by a client that allocates nothing per answer (GetConnection). One result per target:
 * its latencies; its wall time is the whole alternation's.
 */
export async function runAlternating(targets: readonly Target[], count: number): Promise<PhaseResult[]> {
	const lanes = targets.map(target => ({ target, connection: new GetConnection(new URL(target.url)), recorder: new Recorder(count, String(target.expected)) }));
	const start = process.hrtime.bigint();
	try {
		await Promise.all(lanes.map(({ connection }) => connection.ready()));
		for (let i = 0; i < count; i++)
			for (const { target, connection, recorder } of lanes) {
				const t0 = process.hrtime.bigint();
				const status = await connection.get(target.path, target.headers);
				recorder.record(i, t0, { status, text: status === String(target.expected) ? null : "(the body is not kept)" });
			}
	} finally {
		for (const { connection } of lanes) connection.close();
	}
	return lanes.map(({ recorder }) => recorder.result(count, start));
}

/**
 * Open loop at `perSecond`: request i is due at start + i/perSecond whether or not earlier ones
 * were answered, and its latency counts from when it was due, so a stall shows in the tail
 * instead of slowing the generator down (no coordinated omission).
 */
export async function runPaced(target: Target, bodies: readonly (string | null)[], perSecond: number): Promise<PhaseResult> {
	const url = new URL(target.url);
	const agent = new http.Agent({ keepAlive: true, maxSockets: 512, maxFreeSockets: 512 });
	const recorder = new Recorder(bodies.length, String(target.expected));
	const start = process.hrtime.bigint();
	const intervalNs = 1e9 / perSecond;
	const answered: Promise<void>[] = [];
	let i = 0;
	await new Promise<void>(resolve => {
		const tick = () => {
			const elapsedNs = Number(process.hrtime.bigint() - start);
			for (; i < bodies.length && i * intervalNs <= elapsedNs; i++) {
				const due = start + BigInt(Math.round(i * intervalNs));
				const n = i;
				answered.push(send(agent, url, target.path, bodies[n], String(target.expected), target.headers).then(answer => recorder.record(n, due, answer)));
			}
			if (i < bodies.length) setTimeout(tick, 1);
			else resolve();
		};
		tick();
	});
	await Promise.all(answered);
	agent.destroy();
	return recorder.result(bodies.length, start);
}

/** The value at rank ⌈p·n⌉ of the sorted sample. */
export function percentile(sorted: Float64Array, p: number): number {
	if (!sorted.length) return NaN;
	return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

export interface Summary {
	perSecond: number;
	p50: number;
	p99: number;
	accepted: number;
	notAccepted: number;
}

/** A phase with more than 1 % of its requests answered otherwise than expected measured something else: the bench fails. */
export function mostlyRefused({ accepted, notAccepted }: Pick<Summary, "accepted" | "notAccepted">): boolean {
	return notAccepted > (accepted + notAccepted) * 0.01;
}

export function summarize(phase: PhaseResult, expected = 201): Summary {
	const sorted = Float64Array.from(phase.latenciesMs).sort();
	const accepted = phase.statuses[String(expected)] ?? 0;
	return { perSecond: accepted / phase.wallSeconds, p50: percentile(sorted, 50), p99: percentile(sorted, 99), accepted, notAccepted: phase.sent - accepted };
}

const CLOCK_TICKS = (() => {
	try {
		return Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100;
	} catch {
		return 100;
	}
})();

/** CPU seconds (user + system, all threads) a live process has used, from /proc/<pid>/stat. */
export function cpuSeconds(pid: number): number {
	const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
	// Fields after the command name, which is in parentheses and may hold spaces.
	const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
	return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
}

export const fmt = (n: number, digits = 0) => (Number.isFinite(n) ? n.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits }) : "n/a");

export interface RunningTarget {
	name: string;
	url: string;
	/** The process whose CPU is counted; null for an external service. */
	pid: number | null;
	stop(): Promise<void>;
}

/** `node <script>` with `env` (behind `wrapper`, if any), once its /health/ready answers 200 (both targets serve it). */
export async function startProcess(name: string, script: string, args: string[], env: Record<string, string>, url: string, wrapper: readonly string[] = [], readyTimeoutMs = 30_000): Promise<RunningTarget> {
	const proc: ScriptProcess = spawnScript(script, env, args, name, wrapper);
	try {
		await waitFor(async () => {
			if (proc.child.exitCode !== null) throw new Error(`${name} exited with ${proc.child.exitCode}:\n${proc.output().slice(-3000)}`);
			return (await fetch(`${url}/health/ready`).catch(() => null))?.status === 200;
		}, readyTimeoutMs, `${name} to be ready`, 100);
	} catch (err) {
		proc.child.kill("SIGKILL");
		throw err;
	}
	return {
		name,
		url,
		pid: proc.child.pid!,
		async stop() {
			if (proc.child.exitCode === null) proc.child.kill("SIGTERM");
			const timer = setTimeout(() => proc.child.kill("SIGKILL"), 15_000);
			await proc.exited;
			clearTimeout(timer);
		}
	};
}

/**
 * Verifications per second on this thread: raw node:crypto with keys and signatures decoded
 * beforehand, and the service's strict check (lib/ed25519 verifySignature: base58 decoding, the
 * small-order and canonical-encoding checks of SPEC §0, its key cache), so their cost shows.
 */
export function verifiesPerSecond(samples: readonly CreateIntentRequest[], seconds: number): { raw: number; strict: number } {
	const keys = new Map<string, KeyObject>();
	const prepared = samples.map(sample => {
		let key = keys.get(sample.senderWallet);
		if (!key) {
			const raw = decodeBase58(sample.senderWallet)!;
			key = createPublicKey({ key: Buffer.concat([Buffer.from("302a300506032b6570032100", "hex"), raw]), format: "der", type: "spki" });
			keys.set(sample.senderWallet, key);
		}
		return { key, message: Buffer.from(sample.senderAuthorizationMessage, "utf8"), signature: Buffer.from(decodeBase58(sample.senderAuthorizationSignature)!) };
	});
	const timed = (check: (i: number) => boolean, ms: number) => {
		let ops = 0;
		let ok = true;
		const start = process.hrtime.bigint();
		const end = start + BigInt(ms * 1e6);
		let now = start;
		while (now < end) {
			for (let k = 0; k < 64; k++, ops++) ok = check(ops % prepared.length) && ok;
			now = process.hrtime.bigint();
		}
		if (!ok) throw new Error("a benchmark signature did not verify");
		return ops / (Number(now - start) / 1e9);
	};
	const raw = (i: number) => cryptoVerify(null, prepared[i].message, prepared[i].key, prepared[i].signature);
	const strict = (i: number) => verifySignature(samples[i].senderWallet, samples[i].senderAuthorizationMessage, samples[i].senderAuthorizationSignature);
	timed(raw, 200);
	const rawPerSec = timed(raw, seconds * 1000);
	timed(strict, 200);
	return { raw: rawPerSec, strict: timed(strict, seconds * 1000) };
}

