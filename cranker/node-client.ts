/**
 * The Cranker's REST client for the Node's worker routes. Every request that acts as the Cranker
 * carries its HTTP message signature (SPEC §6.1), made afresh for each attempt (the Node refuses a
 * signature it has seen). A Node that restarts or is briefly unreachable answers network errors and
 * 5xx: those are retried with backoff for as long as the caller allows; every other answer is
 * final and comes back as a NodeApiError with SPEC §7's type. Retrying is safe because the routes
 * are idempotent: a status update re-sent after a lost answer is a replay the Node answers 200
 * without a second transition.
 */
import { RequestSigner, type RequestSigningKey } from "../lib/http-signature";
import type { MempoolIntent, UpdateStatusRequest } from "../lib/intents";
import { AnswerTooLargeError, readJsonAnswer } from "../lib/json-answer";
import type { PayoutAuthorization } from "../lib/payout";
import type { TinStage } from "../lib/schemas";
import type { StageRequest, toTinOperationView } from "../lib/tin-operations";
import type { CrankerMetrics } from "./metrics";

export class NodeApiError extends Error {
	constructor(
		message: string,
		readonly status: number,
		readonly type: string,
		readonly data?: unknown
	) {
		super(message);
		this.name = "NodeApiError";
	}
}

export interface IntentWorkItem {
	intent: MempoolIntent;
	leaseTtlMs: number;
}

/** What the work lists and stage routes answer: the worker view of a TIN operation. */
export type TinOperationWork = ReturnType<typeof toTinOperationView>;

const sleep = (ms: number) => new Promise(resolve => setTimeout(resolve, ms));

/**
 * The most of an answer the Cranker reads: a page of 20 worker views stays under 8 MB (a history
 * keeps at most 128 entries). A Node that sends more is not believed, and not read to the end.
 */
export const MAX_ANSWER_BYTES = 16 * 1024 * 1024;

type ErrorAnswer = { message?: string; type?: string; data?: unknown } | null;

/** The answer's JSON (undefined when it is not JSON); past MAX_ANSWER_BYTES a NodeApiError (502), the rest unread. */
async function answerJson(response: Response): Promise<unknown> {
	try {
		return await readJsonAnswer(response, MAX_ANSWER_BYTES);
	} catch (err) {
		if (err instanceof AnswerTooLargeError) throw new NodeApiError(`the Node's answer passed ${MAX_ANSWER_BYTES} bytes`, 502, "ANSWER_TOO_LARGE");
		throw err;
	}
}

/** What fetch's failure carries when the Node closed the connection under the request (undici's code, and the system's). */
const CLOSED_UNDER_REQUEST = new Set(["ECONNRESET", "EPIPE", "UND_ERR_SOCKET"]);

export class NodeClient {
	private readonly signer: RequestSigner;

	constructor(
		private readonly baseUrl: string,
		private readonly apiKey: string,
		/** The Cranker's key: signs the requests that act as the Cranker. */
		key: RequestSigningKey,
		/** How long a call keeps retrying a Node that is down, by default. */
		private readonly retryForMs = 30_000,
		private readonly onRetry: (path: string, reason: string) => void = () => {},
		/** Counts every attempt and its latency, by route template. */
		private readonly metrics: CrankerMetrics | null = null
	) {
		this.signer = new RequestSigner(key);
	}

	heartbeat(body: object): Promise<unknown> {
		return this.request("POST", "/crankers/heartbeat", "/crankers/heartbeat", body, 0, true);
	}

	/** The oldest work, or (`after`, an intent's id) the work past that intent. */
	intentWork(limit: number, after?: string): Promise<IntentWorkItem[]> {
		return this.request("GET", "/intent-work", `/intent-work?limit=${limit}${after !== undefined ? `&after=${encodeURIComponent(after)}` : ""}`, undefined, 0);
	}

	intent(id: string, retryForMs = this.retryForMs): Promise<MempoolIntent> {
		return this.request("GET", "/intents/:id", `/intents/${encodeURIComponent(id)}`, undefined, retryForMs);
	}

	intentIds(status: string, limit = 100): Promise<{ id: string }[]> {
		return this.request("GET", "/intents", `/intents?status=${encodeURIComponent(status)}&limit=${limit}`, undefined, 0);
	}

	/** PATCH /intents/{id}/status, retried through Node restarts (a replay is answered 200). */
	updateStatus(id: string, update: UpdateStatusRequest, retryForMs = this.retryForMs): Promise<MempoolIntent> {
		return this.request("PATCH", "/intents/:id/status", `/intents/${encodeURIComponent(id)}/status`, update, retryForMs, true);
	}

	payoutAuthorization(workId: string, crankerPubkey: string): Promise<PayoutAuthorization> {
		const path = "/internal/settlement-authorizations/settlement";
		return this.request("POST", path, path, { workId, crankerPubkey }, this.retryForMs, true);
	}

	tinWork(list: "verification-work" | "fee-work" | "registry-work", operatorPubkey?: string): Promise<TinOperationWork[]> {
		const query = operatorPubkey && list !== "verification-work" ? `?operator_pubkey=${operatorPubkey}` : "";
		return this.request("GET", `/tin-operations/${list}`, `/tin-operations/${list}${query}`, undefined, 0);
	}

	tinStage(id: string, stage: TinStage, body: StageRequest): Promise<TinOperationWork> {
		return this.request("POST", `/tin-operations/:id/${stage}`, `/tin-operations/${encodeURIComponent(id)}/${stage}`, body, this.retryForMs, true);
	}

	/**
	 * GET /events (the worker key; not a signed route) from `lastEventId` ("": from now): the body
	 * once the Node answers 200 text/event-stream. Not retried: the caller reconnects with backoff.
	 * Any other answer is a NodeApiError with its status (0: no answer).
	 */
	async eventStream(query: string, lastEventId: string, signal: AbortSignal): Promise<ReadableStream<Uint8Array>> {
		const endTimer = this.metrics?.nodeRequestDuration.startTimer({ method: "GET", route: "/events" });
		let status = "error";
		try {
			const response = await fetch(`${this.baseUrl}/events?${query}`, {
				headers: { "x-api-key": this.apiKey, accept: "text/event-stream", ...(lastEventId ? { "last-event-id": lastEventId } : {}) },
				redirect: "error",
				signal
			});
			status = String(response.status);
			if (response.ok && response.body && response.headers.get("content-type")?.startsWith("text/event-stream")) return response.body;
			const payload = ((await answerJson(response)) ?? null) as ErrorAnswer;
			throw new NodeApiError(payload?.message ?? `HTTP ${response.status}`, response.status, payload?.type ?? "HTTP_ERROR", payload?.data);
		} catch (err) {
			if (err instanceof NodeApiError) throw err;
			throw new NodeApiError(`GET /events failed: ${(err as Error).message}`, 0, "NODE_UNAVAILABLE");
		} finally {
			endTimer?.();
			this.metrics?.nodeRequests.inc({ method: "GET", route: "/events", status });
		}
	}

	/**
	 * `route` is the path's template (`/intents/:id`): the metrics' label, never an id. A read that a
	 * gateway turned away unserved is asked once more at once, even with no time to retry: a pooled
	 * connection closed under it (a draining gateway, its keep-alive ending), or a draining
	 * gateway's 503 SHUTTING_DOWN. The next attempt takes a new connection, or another replica.
	 */
	private async request<T>(method: string, route: string, path: string, body?: unknown, retryForMs = this.retryForMs, signed = false): Promise<T> {
		const deadline = performance.now() + retryForMs;
		const url = this.baseUrl + path;
		const text = body === undefined ? undefined : JSON.stringify(body);
		let mayAskAgainAtOnce = method === "GET";
		for (let delay = 200; ; ) {
			let failure: string;
			let turnedAway = false;
			const endTimer = this.metrics?.nodeRequestDuration.startTimer({ method, route });
			let status = "error";
			try {
				const signature = signed ? await this.signer.sign({ method, url, body: text ?? "" }) : {};
				const response = await fetch(url, {
					method,
					headers: { "x-api-key": this.apiKey, ...(text === undefined ? {} : { "content-type": "application/json" }), ...signature },
					body: text,
					// A redirect would take the worker key and the signature elsewhere (fetch keeps them, http:// included).
					redirect: "error",
					signal: AbortSignal.timeout(15_000)
				});
				status = String(response.status);
				const answer = await answerJson(response);
				// Every answer the Cranker acts on is a JSON object or list: anything else is not taken for a yes.
				if (response.ok && (typeof answer !== "object" || answer === null)) throw new NodeApiError(`${method} ${path}: the Node's answer is not JSON`, 502, "BAD_ANSWER");
				if (response.ok) return answer as T;
				const payload = (answer ?? null) as ErrorAnswer;
				if (response.status < 500) throw new NodeApiError(payload?.message ?? `HTTP ${response.status}`, response.status, payload?.type ?? "HTTP_ERROR", payload?.data);
				failure = `HTTP ${response.status} ${payload?.type ?? ""}`.trim();
				turnedAway = payload?.type === "SHUTTING_DOWN";
			} catch (err) {
				if (err instanceof NodeApiError) throw err;
				failure = (err as Error).message;
				// Not a timeout, a refused connection or a name that does not resolve: asked again at once they fail again, or wait as long.
				turnedAway = CLOSED_UNDER_REQUEST.has(((err as Error).cause as { code?: string } | undefined)?.code ?? "");
			} finally {
				endTimer?.();
				this.metrics?.nodeRequests.inc({ method, route, status });
			}
			if (turnedAway && mayAskAgainAtOnce) {
				mayAskAgainAtOnce = false;
				this.onRetry(path, failure);
				continue;
			}
			if (performance.now() + delay > deadline) throw new NodeApiError(`${method} ${path} failed: ${failure}`, 0, "NODE_UNAVAILABLE");
			this.onRetry(path, failure);
			await sleep(delay);
			delay = Math.min(delay * 2, 3000);
		}
	}
}
