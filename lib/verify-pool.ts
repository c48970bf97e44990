/**
 * ed25519 verification on worker threads, so that the event loop taking requests is not the one
 * spending ~90 µs per signature. The strict checks of lib/ed25519.ts (key and R canonical and not
 * of small order, S < L) stay on the calling thread, where their verdict per key is cached; the
 * workers only solve the equation with node:crypto. Requests made in one event-loop turn go out
 * as one message per worker.
 */
import { Worker } from "node:worker_threads";
import { strictSignatureEquation, verifySignature } from "./ed25519";

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
	private readonly workers: Worker[] = [];
	/** Jobs sent and not answered, with the worker that has them. */
	private readonly waiting = new Map<number, { resolve(ok: boolean): void; job: Job; worker: number }>();
	private batch: { job: Job; resolve(ok: boolean): void }[] = [];
	private flushScheduled = false;
	private nextId = 0;
	private nextWorker = 0;
	private closed = false;

	constructor(readonly threads: number) {
		if (!Number.isInteger(threads) || threads < 1) throw new Error(`a verify pool needs at least one thread, not ${threads}`);
		for (let index = 0; index < threads; index++) this.workers.push(this.startWorker(index));
	}

	/** verifySignature's verdict, the equation solved on a worker thread. */
	verify(address: string, message: string | Uint8Array, signature: string | Uint8Array): Promise<boolean> {
		const equation = strictSignatureEquation(address, signature);
		if (!equation) return Promise.resolve(false);
		const job: Job = [this.nextId++, address, equation.key.raw, message, equation.signature];
		if (this.closed) return Promise.resolve(verifyOnThisThread(job));
		return new Promise(resolve => {
			this.batch.push({ job, resolve });
			if (!this.flushScheduled) {
				this.flushScheduled = true;
				setImmediate(() => this.flush());
			}
		});
	}

	/** Stops the workers; a job still waiting is verified on this thread. */
	async close(): Promise<void> {
		this.closed = true;
		this.flush();
		await Promise.all(this.workers.map(worker => worker.terminate()));
		this.settleOnThisThread(() => true);
	}

	private startWorker(index: number): Worker {
		const worker = new Worker(WORKER_SOURCE, { eval: true, name: "ed25519-verify" });
		worker.on("message", (verdicts: [number, boolean][]) => {
			for (const [id, ok] of verdicts) {
				this.waiting.get(id)?.resolve(ok);
				this.waiting.delete(id);
			}
			this.idleUnlessBusy(index);
		});
		// A worker that fails (out of memory, a crash) takes no verdict with it: its jobs are verified
		// here, never answered as forgeries or as errors, and a new worker takes its place.
		const replace = () => {
			if (this.closed || this.workers[index] !== worker) return;
			this.settleOnThisThread(pending => pending.worker === index);
			this.workers[index] = this.startWorker(index);
		};
		worker.on("error", replace);
		worker.on("exit", replace);
		// After the listeners (adding one refs the worker again): an idle pool keeps no process alive,
		// a busy one does (flush refs a worker it sends jobs to).
		worker.unref();
		return worker;
	}

	private idleUnlessBusy(index: number): void {
		for (const pending of this.waiting.values()) if (pending.worker === index) return;
		this.workers[index].unref();
	}

	/** This turn's jobs, split evenly over the workers. */
	private flush(): void {
		this.flushScheduled = false;
		const batch = this.batch;
		this.batch = [];
		if (!batch.length) return;
		if (this.closed) return batch.forEach(({ job, resolve }) => resolve(verifyOnThisThread(job)));
		const share = Math.ceil(batch.length / this.workers.length);
		for (let i = 0; i < batch.length; i += share) {
			const index = this.nextWorker++ % this.workers.length;
			const part = batch.slice(i, i + share);
			for (const { job, resolve } of part) this.waiting.set(job[0], { resolve, job, worker: index });
			this.workers[index].ref();
			this.workers[index].postMessage(part.map(({ job }) => job));
		}
	}

	private settleOnThisThread(which: (pending: { worker: number }) => boolean): void {
		for (const [id, pending] of this.waiting)
			if (which(pending)) {
				this.waiting.delete(id);
				pending.resolve(verifyOnThisThread(pending.job));
			}
	}
}

/** The equation on the calling thread: what a worker would have answered. */
function verifyOnThisThread([, address, , message, signature]: Job): boolean {
	return verifySignature(address, message, signature);
}
