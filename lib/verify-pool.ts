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

/** Jobs that travel as one message, and who waits for each one's verdict. */
interface Sent {
	jobs: Job[];
	resolves: ((ok: boolean) => void)[];
}

/**
 * Why jobs sent to a worker were verified on the calling thread instead: its worker was lost (it
 * died, failed, or sent an answer that could not be read), or it answered for other jobs. Either
 * slows the event loop, and neither should happen: the pool tells its owner.
 */
export const VERIFY_FALLBACKS = ["worker_lost", "unmatched_answer"] as const;
export type VerifyFallback = (typeof VERIFY_FALLBACKS)[number];

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
	/**
	 * Per worker, the messages sent to it and not answered yet, oldest first: a worker answers its
	 * messages in the order they came. Queues, not a Map of jobs by id, for the reason
	 * lib/transient-set.ts gives: a Map churned by every intent kept the jobs, and their requests,
	 * alive into the old generation.
	 */
	private readonly sent: Sent[][] = [];
	private batch: Sent = { jobs: [], resolves: [] };
	private flushScheduled = false;
	private nextId = 0;
	private nextWorker = 0;
	private closed = false;

	constructor(
		readonly threads: number,
		/** Told of each fallback, with the number of jobs it verified here. */
		private readonly onFallback: (reason: VerifyFallback, jobs: number) => void = () => {}
	) {
		if (!Number.isInteger(threads) || threads < 1) throw new Error(`a verify pool needs at least one thread, not ${threads}`);
		for (let index = 0; index < threads; index++) {
			this.sent.push([]);
			this.workers.push(this.startWorker(index));
		}
	}

	/** verifySignature's verdict, the equation solved on a worker thread. */
	verify(address: string, message: string | Uint8Array, signature: string | Uint8Array): Promise<boolean> {
		const equation = strictSignatureEquation(address, signature);
		if (!equation) return Promise.resolve(false);
		const job: Job = [this.nextId++, address, equation.key.raw, message, equation.signature];
		if (this.closed) return Promise.resolve(verifyOnThisThread(job));
		return new Promise(resolve => {
			this.batch.jobs.push(job);
			this.batch.resolves.push(resolve);
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
		this.workers.forEach((_, index) => this.settleOnThisThread(index));
	}

	private startWorker(index: number): Worker {
		const worker = new Worker(WORKER_SOURCE, { eval: true, name: "ed25519-verify" });
		worker.on("message", (verdicts: [number, boolean][]) => {
			// A replaced worker's late answer: its jobs were verified here already.
			if (this.workers[index] !== worker) return;
			const answered = this.sent[index].shift();
			if (!answered) return;
			// A verdict is taken only for the job it names; anything else is verified here.
			let unmatched = 0;
			answered.jobs.forEach((job, i) => {
				if (verdicts[i]?.[0] === job[0]) return answered.resolves[i](verdicts[i][1]);
				unmatched++;
				answered.resolves[i](verifyOnThisThread(job));
			});
			if (unmatched) this.onFallback("unmatched_answer", unmatched);
			if (!this.sent[index].length) worker.unref();
		});
		// A worker that fails (out of memory, a crash, an answer that cannot be read) takes no verdict
		// with it: its jobs are verified here, never answered as forgeries or as errors, and a new
		// worker takes its place (an answer lost would pair each later answer with the wrong message).
		const replace = () => {
			if (this.closed || this.workers[index] !== worker) return;
			const jobs = this.settleOnThisThread(index);
			this.onFallback("worker_lost", jobs);
			this.workers[index] = this.startWorker(index);
			void worker.terminate();
		};
		worker.on("error", replace);
		worker.on("exit", replace);
		worker.on("messageerror", replace);
		// After the listeners (adding one refs the worker again): an idle pool keeps no process alive,
		// a busy one does (flush refs a worker it sends jobs to).
		worker.unref();
		return worker;
	}

	/** This turn's jobs, split evenly over the workers. */
	private flush(): void {
		this.flushScheduled = false;
		const batch = this.batch;
		const { jobs, resolves } = batch;
		this.batch = { jobs: [], resolves: [] };
		if (!jobs.length) return;
		if (this.closed) return answerOnThisThread(batch);
		const share = Math.ceil(jobs.length / this.workers.length);
		for (let i = 0; i < jobs.length; i += share) {
			const index = this.nextWorker++ % this.workers.length;
			const part = { jobs: jobs.slice(i, i + share), resolves: resolves.slice(i, i + share) };
			this.sent[index].push(part);
			this.workers[index].ref();
			this.workers[index].postMessage(part.jobs);
		}
	}

	/** Verifies here what worker `index` was sent and has not answered; answers how many jobs that was. */
	private settleOnThisThread(index: number): number {
		const unanswered = this.sent[index];
		this.sent[index] = [];
		unanswered.forEach(answerOnThisThread);
		return unanswered.reduce((jobs, message) => jobs + message.jobs.length, 0);
	}
}

/** The equation on the calling thread: what a worker would have answered. */
function verifyOnThisThread([, address, , message, signature]: Job): boolean {
	return verifySignature(address, message, signature);
}

/** Every job of a message, answered on the calling thread. */
function answerOnThisThread({ jobs, resolves }: Sent): void {
	jobs.forEach((job, i) => resolves[i](verifyOnThisThread(job)));
}
