/**
 * ed25519 verification on worker threads, so that the event loop taking requests is not the one
 * spending ~90 µs per signature. The strict checks of lib/ed25519.ts (key and R canonical and not
 * of small order, S < L) stay on the calling thread, where their verdict per key is cached; the
 * workers only solve the equation with node:crypto. Requests made in one event-loop turn go out
 * as one message per worker.
 */
import { Worker } from "node:worker_threads";
import { strictSignatureEquation } from "./ed25519";

/** One job on the wire: the key's 32 bytes (a worker keeps its own key objects), the message, the signature. */
type Job = [id: number, address: string, key: Uint8Array, message: string | Uint8Array, signature: Uint8Array];

// Plain CommonJS, evaluated: the same code whether the pool runs compiled or under ts-jest.
const WORKER_SOURCE = `
const { parentPort } = require("node:worker_threads");
const { createPublicKey, verify } = require("node:crypto");
const SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");
const keys = new Map();
parentPort.on("message", jobs => {
	const verdicts = new Array(jobs.length);
	for (let i = 0; i < jobs.length; i++) {
		const [id, address, raw, message, signature] = jobs[i];
		let key = keys.get(address);
		if (!key) {
			if (keys.size >= 50000) keys.clear();
			key = createPublicKey({ key: Buffer.concat([SPKI_PREFIX, raw]), format: "der", type: "spki" });
			keys.set(address, key);
		}
		let ok = false;
		try { ok = verify(null, typeof message === "string" ? Buffer.from(message, "utf8") : message, key, signature); } catch {}
		verdicts[i] = [id, ok];
	}
	parentPort.postMessage(verdicts);
});`;

export class VerifyPool {
	private readonly workers: Worker[];
	private readonly waiting = new Map<number, { resolve(ok: boolean): void; reject(err: Error): void }>();
	private batch: Job[] = [];
	private flushScheduled = false;
	private nextId = 0;
	private nextWorker = 0;
	private failure: Error | null = null;

	constructor(readonly threads: number) {
		if (!Number.isInteger(threads) || threads < 1) throw new Error(`a verify pool needs at least one thread, not ${threads}`);
		this.workers = Array.from({ length: threads }, () => {
			const worker = new Worker(WORKER_SOURCE, { eval: true, name: "ed25519-verify" });
			// Idle workers must not keep a stopping process alive.
			worker.unref();
			worker.on("message", (verdicts: [number, boolean][]) => {
				for (const [id, ok] of verdicts) {
					this.waiting.get(id)?.resolve(ok);
					this.waiting.delete(id);
				}
			});
			worker.on("error", err => this.fail(err));
			return worker;
		});
	}

	/** verifySignature's verdict, the equation solved on a worker thread. */
	verify(address: string, message: string | Uint8Array, signature: string | Uint8Array): Promise<boolean> {
		if (this.failure) return Promise.reject(this.failure);
		const equation = strictSignatureEquation(address, signature);
		if (!equation) return Promise.resolve(false);
		return new Promise((resolve, reject) => {
			const id = this.nextId++;
			this.waiting.set(id, { resolve, reject });
			this.batch.push([id, address, equation.key.raw, message, equation.signature]);
			if (!this.flushScheduled) {
				this.flushScheduled = true;
				setImmediate(() => this.flush());
			}
		});
	}

	async close(): Promise<void> {
		await Promise.all(this.workers.map(worker => worker.terminate()));
	}

	/** This turn's jobs, split evenly over the workers. */
	private flush(): void {
		this.flushScheduled = false;
		const jobs = this.batch;
		this.batch = [];
		const share = Math.ceil(jobs.length / this.workers.length);
		for (let i = 0; i < jobs.length; i += share) this.workers[this.nextWorker++ % this.workers.length].postMessage(jobs.slice(i, i + share));
	}

	/** A worker that dies takes its jobs with it: they fail as errors, never as forgeries. */
	private fail(err: Error): void {
		this.failure = err;
		const waiting = [...this.waiting.values()];
		this.waiting.clear();
		for (const { reject } of waiting) reject(err);
	}
}
