/**
 * The application SDK (issue 4): the facade a sender's app uses to pay through the service. It runs
 * in a browser as well as in Node (web APIs only: fetch, TextEncoder/TextDecoder, AbortController,
 * crypto.getRandomValues; its dependencies @noble/*, @scure/base, @solana/kit and @solana-program/*;
 * never an API key), builds the canonical message of SPEC §1 on the device and has it signed
 * through a Signer.
 */
import { ed25519 } from "@noble/curves/ed25519.js";
import { createSolanaRpc, signature as toSignature, type Rpc, type SolanaRpcApi } from "@solana/kit";
import { buildPaymentMessage, type PaymentAuthorizationFields } from "../lib/canonical";
import { encodeBase58 } from "../lib/encoding";
import type { CreateIntentRequest, PublicMempoolIntent } from "../lib/intents";
import type { ActiveRoute } from "../lib/registry";
import { readEncodedSettlementTransaction, settlementMismatches, type ExpectedSettlement } from "../lib/settlement";
import { SilenceWatch, SseParser, readEvents } from "../lib/sse";

// The domain types an app handles through the SDK, so that it can name them.
export type { PaymentAuthorizationFields } from "../lib/canonical";
export type { CreateIntentRequest, PublicMempoolIntent } from "../lib/intents";
export type { ActiveRoute } from "../lib/registry";
export type { ExpectedSettlement } from "../lib/settlement";

/** What signs a message: a local keypair here, a wallet adapter's `signMessage` in an app. */
export interface Signer {
	/** Base58 public key: the sender wallet. */
	readonly address: string;
	/** ed25519 signature over the raw message bytes (no envelope), 64 bytes. */
	signMessage(message: Uint8Array): Promise<Uint8Array>;
}

/** A Signer over a local ed25519 key (@noble/curves): tests, scripts, server-side senders. */
export class LocalKeypairSigner implements Signer {
	readonly address: string;

	private constructor(private readonly seed: Uint8Array) {
		this.address = encodeBase58(ed25519.getPublicKey(seed));
	}

	static generate(): LocalKeypairSigner {
		return new LocalKeypairSigner(ed25519.utils.randomSecretKey());
	}

	/** From a 32-byte seed or a 64-byte Solana CLI secret key (seed ‖ public key). */
	static fromSecretKey(secretKey: Uint8Array): LocalKeypairSigner {
		if (secretKey.length !== 32 && secretKey.length !== 64) throw new Error("a secret key is 32 bytes (seed) or 64 bytes (Solana CLI keypair)");
		return new LocalKeypairSigner(secretKey.slice(0, 32));
	}

	async signMessage(message: Uint8Array): Promise<Uint8Array> {
		return ed25519.sign(message, this.seed);
	}
}

/** An error answered by the service, carrying SPEC §7's `type` (or NETWORK_ERROR / TIMEOUT from the SDK itself). */
export class SettlementError extends Error {
	constructor(
		message: string,
		readonly type: string,
		readonly code: number | null,
		readonly data?: unknown,
		/** How long the service asked to wait before asking again (its `retry-after`, as on a `429`), in ms. */
		readonly retryAfterMs?: number
	) {
		super(message);
		this.name = "SettlementError";
	}
}

export interface PaymentParams {
	paymentId: string;
	recipientTin: string;
	/** The route resolveTin() returned; the intent is bound to its commitment and version. */
	route: ActiveRoute;
	tokenMintAddress: string;
	amount: string;
	feeLimit: string;
	expiresAtSlot: number;
	/** One-time per wallet; a random one when absent. */
	nonce?: string;
	/** Defaults: now, and now + 10 minutes. */
	issuedAt?: Date;
	expiresAt?: Date;
}

export interface PaymentAuthorization {
	fields: PaymentAuthorizationFields;
	/** The exact SPEC §1 text the wallet signs. */
	message: string;
	transactionCommitment: string;
}

export interface ClientOptions {
	baseUrl: string;
	fetch?: typeof fetch;
	/** Attempts of submit() on network errors and 502/503/504 answers (the same body each time, so the service answers the same record). */
	submitAttempts?: number;
	/** Solana JSON-RPC endpoint for confirmOnChain(). */
	solanaRpcUrl?: string;
	/**
	 * waitForStatus takes an event stream that sent nothing this long for dropped, and resumes it:
	 * 45 s, three of the service's heartbeats at its default EVENT_HEARTBEAT_MS (15 s).
	 */
	streamSilenceMs?: number;
}

export interface OnChainSettlement {
	signature: string;
	slot: bigint;
	memo: string;
}

const FUNDING_MODE = "wallet_only_v2";
/** How long each probe of /health/live may take (see networkError). */
const PROBE_TIMEOUT_MS = 5000;
/**
 * Answers after which the same submission may succeed: a proxy that lost the service (502, 504), a
 * service starting or draining (503). Like a network error, the intent may or may not exist.
 */
const RETRYABLE_STATUS = new Set([502, 503, 504]);
/** The longest submit() waits between two attempts for a retry-after. */
const MAX_SUBMIT_WAIT_MS = 5000;
const TERMINAL = new Set(["executed", "canceled"]);
const utf8 = new TextEncoder();
const sleep = (ms: number) => new Promise(resolve => setTimeout(resolve, ms));
/** Like sleep, but over as soon as `signal` aborts (or at once if it has). */
const pause = (ms: number, signal: AbortSignal) =>
	new Promise<void>(resolve => {
		if (signal.aborted) return resolve();
		const done = () => {
			clearTimeout(timer);
			signal.removeEventListener("abort", done);
			resolve();
		};
		const timer = setTimeout(done, ms);
		signal.addEventListener("abort", done);
	});

function randomToken(bytes: number): string {
	const buffer = new Uint8Array(bytes);
	globalThis.crypto.getRandomValues(buffer);
	return encodeBase58(buffer);
}

/** What checkReadiness answers. */
export interface Readiness {
	/** The service takes signed intents now. */
	canSubmit: boolean;
	/** An online settlement Cranker offers liquidity in the mint: a payment can settle now. */
	canSettleNow: boolean;
	/** The settlement network that would settle it, when there is one. */
	network?: { network: string; tokenMintAddress: string; liquidity: string; crankersOnline: number };
}

export class SettlementClient {
	private readonly baseUrl: string;
	private readonly fetch: typeof fetch;
	private readonly submitAttempts: number;
	private readonly streamSilenceMs: number;
	private readonly rpc: Rpc<SolanaRpcApi> | null;

	constructor(options: ClientOptions) {
		this.baseUrl = options.baseUrl.replace(/\/+$/, "");
		this.fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
		this.submitAttempts = options.submitAttempts ?? 3;
		this.streamSilenceMs = options.streamSilenceMs ?? 45_000;
		this.rpc = options.solanaRpcUrl ? createSolanaRpc(options.solanaRpcUrl) : null;
	}

	/**
	 * Two answers, because they differ: `canSubmit`, the service takes signed intents now (they wait
	 * in the mempool until a Cranker leases them); `canSettleNow`, an online settlement Cranker also
	 * offers liquidity in the mint (any mint when none is given), so a payment can settle now.
	 */
	async checkReadiness(tokenMintAddress?: string): Promise<Readiness> {
		const health = await this.fetch(`${this.baseUrl}/health/ready`).catch(() => null);
		if (!health?.ok) return { canSubmit: false, canSettleNow: false };
		const networks = await this.request<{ network: string; tokenMintAddress: string; liquidity: string; crankersOnline: number }[]>("GET", "/settlement-networks");
		const network = tokenMintAddress === undefined ? networks[0] : networks.find(n => n.tokenMintAddress === tokenMintAddress);
		if (!network) return { canSubmit: true, canSettleNow: false };
		return { canSubmit: true, canSettleNow: true, network: { network: network.network, tokenMintAddress: network.tokenMintAddress, liquidity: network.liquidity, crankersOnline: network.crankersOnline } };
	}

	/** The TIN's active route (its commitment and version bind the payment). */
	resolveTin(tin: string): Promise<ActiveRoute & { active: boolean; updatedAt: string }> {
		return this.request("GET", `/registry/tins/${encodeURIComponent(tin)}`);
	}

	/** The canonical message and commitment of SPEC §1 for these parameters, as the wallet will sign them. */
	buildPaymentAuthorization(sender: string, params: PaymentParams): PaymentAuthorization {
		const issuedAt = params.issuedAt ?? new Date();
		const fields: PaymentAuthorizationFields = {
			paymentId: params.paymentId,
			senderWallet: sender,
			recipientTin: params.recipientTin,
			recipientRouteCommitment: params.route.routeCommitment,
			recipientRouteVersion: params.route.routeVersion,
			tokenMintAddress: params.tokenMintAddress,
			amount: params.amount,
			feeLimit: params.feeLimit,
			senderFundingMode: FUNDING_MODE,
			senderAuthorizationNonce: params.nonce ?? `n_${randomToken(16)}`,
			senderAuthorizationIssuedAt: issuedAt.toISOString(),
			senderAuthorizationExpiresAt: (params.expiresAt ?? new Date(issuedAt.getTime() + 10 * 60_000)).toISOString(),
			expiresAtSlot: params.expiresAtSlot
		};
		return { fields, ...buildPaymentMessage(fields) };
	}

	/** Builds the authorization and has the signer sign it: the CreateIntentRequest to submit. */
	async signPayment(signer: Signer, params: PaymentParams): Promise<CreateIntentRequest> {
		const { fields, message, transactionCommitment } = this.buildPaymentAuthorization(signer.address, params);
		const signature = await signer.signMessage(utf8.encode(message));
		if (signature.length !== 64) throw new SettlementError("the signer returned a signature that is not 64 bytes", "INVALID_SIGNATURE", null);
		return { ...fields, senderAuthorizationMessage: message, senderAuthorizationSignature: encodeBase58(signature), transactionCommitment };
	}

	/**
	 * POST /intents. Network errors and 502/503/504 answers are retried with the same body: the
	 * service answers a replay with the record it already holds, so a retry never creates a second
	 * intent. A CORS refusal (see networkError) is not retried: the answer would be the same.
	 */
	async submit(intent: CreateIntentRequest): Promise<PublicMempoolIntent> {
		for (let attempt = 1; ; attempt++) {
			try {
				return await this.request<PublicMempoolIntent>("POST", "/intents", intent);
			} catch (err) {
				const failure = err as SettlementError;
				if (!isRetryable(failure) || attempt >= this.submitAttempts) throw failure;
				// A 503 says when to come back (NOT_READY: another body under this paymentId is not verified yet).
				await sleep(Math.max(100 * 2 ** (attempt - 1), Math.min(failure.retryAfterMs ?? 0, MAX_SUBMIT_WAIT_MS)));
			}
		}
	}

	/** GET /intents/{id}: the public view. */
	getIntent(id: string): Promise<PublicMempoolIntent> {
		return this.request("GET", `/intents/${encodeURIComponent(id)}`);
	}

	/**
	 * Resolves once the intent is executed or canceled, told by its event stream (GET /intents/{id}/events),
	 * or by polling GET /intents/{id} where there is none. Past `timeoutMs`: TIMEOUT, the last record seen in `data.intent`.
	 */
	async waitForStatus(id: string, options: { timeoutMs: number }): Promise<PublicMempoolIntent> {
		// Where no stream can be had (a fetch without a streaming body, a service without the route,
		// a network or CORS refusal, 429), it polls with backoff, 100 ms doubling to 2 s.
		const deadline = Date.now() + options.timeoutMs;
		const stop = new AbortController();
		const timer = setTimeout(() => stop.abort(), options.timeoutMs);
		let last: PublicMempoolIntent | undefined;
		/** The last poll's failure, retried: told with the TIMEOUT (a wrong baseUrl, a service that stayed down). */
		let failure: SettlementError | undefined;
		const timeout = () =>
			new SettlementError(
				`intent ${id} is ${last ? `still ${last.receiverStatus}` : "not executed or canceled"} after ${options.timeoutMs} ms${failure ? ` (the last poll failed: ${failure.message})` : ""}`,
				"TIMEOUT",
				null,
				last && { intent: last }
			);
		try {
			const streamed = await this.streamStatus(id, stop.signal, view => (last = view));
			if (streamed) return streamed;
			if (stop.signal.aborted) throw timeout();
			// A poll that fails as a submission may (the service restarting, a proxy's 502) is tried
			// again; none outlives the timeout.
			for (let delay = 100; ; delay = Math.min(delay * 2, 2000)) {
				let wait = delay;
				try {
					const polled = await this.request<PublicMempoolIntent | null>("GET", `/intents/${encodeURIComponent(id)}`, undefined, stop.signal);
					// null: no record in the answer (its body cut by the timeout, a proxy's page): tried again.
					if (polled) {
						last = polled;
						failure = undefined;
						if (TERMINAL.has(polled.status)) return polled;
					}
				} catch (err) {
					if (stop.signal.aborted) throw timeout();
					const refused = err as SettlementError;
					// Too many requests from this client (429): asked again once the service said to.
					if (refused.code === 429) wait = Math.max(delay, refused.retryAfterMs ?? 0);
					else if (!isRetryable(refused)) throw err;
					failure = refused;
				}
				if (stop.signal.aborted || Date.now() + wait > deadline) throw timeout();
				await pause(wait, stop.signal);
			}
		} finally {
			clearTimeout(timer);
			stop.abort(); // the stream still open, if any
		}
	}

	/** The terminal view from the event stream; null once `signal` aborts, or with no stream to be had. */
	private async streamStatus(id: string, signal: AbortSignal, seen: (view: PublicMempoolIntent) => void): Promise<PublicMempoolIntent | null> {
		// A stream that ends or drops before a terminal state is resumed with Last-Event-ID after the
		// delay the service asked for (`retry:`), also through network errors and 5xx answers while
		// the service restarts; a refusal of the first request, or any other answer, means no stream.
		// A failed reconnection is tried next without Last-Event-ID: a simple request, which a service
		// that does not allow that header to this page still answers (with the current state first).
		const parser = new SseParser();
		for (let streamed = false, failed = 0; ; await pause(parser.retry ?? 1000, signal)) {
			if (signal.aborted) return null;
			// This connection ends with the wait, or when it goes silent (dropped without a close).
			const connection = abortsWith(signal);
			const silence = new SilenceWatch(this.streamSilenceMs, connection.abort);
			try {
				let response: Response;
				try {
					response = await this.fetch(`${this.baseUrl}/intents/${encodeURIComponent(id)}/events`, {
						headers: { accept: "text/event-stream", ...(parser.lastEventId && failed % 2 === 0 ? { "last-event-id": parser.lastEventId } : {}) },
						signal: connection.signal
					});
				} catch {
					if (!streamed) return null;
					failed++;
					continue;
				}
				if (!response.ok || !response.body || !response.headers.get("content-type")?.startsWith("text/event-stream")) {
					void response.body?.cancel().catch(() => {});
					if (!streamed || !RETRYABLE_STATUS.has(response.status)) return null;
					failed++;
					continue;
				}
				streamed = true;
				failed = 0;
				try {
					for await (const event of readEvents(response.body, parser, silence)) {
						if (event.type !== "status") continue;
						const view = JSON.parse(event.data) as PublicMempoolIntent;
						seen(view);
						if (TERMINAL.has(view.status)) return view;
					}
				} catch {
					// A dropped or silent connection (or the abort): resumed, or ended, by the loop.
				}
			} finally {
				silence.stop();
				connection.release();
				connection.abort(); // whatever ended this connection, nothing of it stays open
			}
		}
	}

	/**
	 * Checks on chain, through the Solana RPC, that `signature` is a confirmed, successful settlement
	 * of the expected payment: its memo names the intent's transactionCommitment and it transfers
	 * exactly the amount of the mint to the credit account of the route the payment was signed for
	 * (`recipientRouteCommitment`, from resolveTin), so a transfer anywhere else never passes.
	 * Typically `{ ...intent, recipientRouteCommitment: route.routeCommitment }`.
	 */
	async confirmOnChain(signature: string, expected: ExpectedSettlement & { recipientRouteCommitment: string }): Promise<OnChainSettlement> {
		if (!this.rpc) throw new SettlementError("confirmOnChain needs the solanaRpcUrl client option", "CONFIGURATION_ERROR", null);
		let fetched;
		try {
			fetched = await this.rpc.getTransaction(toSignature(signature), { encoding: "base64", commitment: "confirmed", maxSupportedTransactionVersion: 0 }).send();
		} catch (err) {
			throw new SettlementError(`Solana RPC getTransaction failed: ${(err as Error).message}`, "NETWORK_ERROR", null);
		}
		if (!fetched) throw new SettlementError(`transaction ${signature} is not confirmed on chain`, "NOT_ON_CHAIN", null);
		if (fetched.meta?.err) throw new SettlementError(`transaction ${signature} failed on chain`, "ONCHAIN_FAILED", null, { err: fetched.meta.err });
		const contents = readEncodedSettlementTransaction(fetched.transaction[0]);
		const problems = await settlementMismatches(contents, expected);
		if (problems.length) throw new SettlementError(`transaction ${signature} is not this settlement: ${problems.join("; ")}`, "SETTLEMENT_MISMATCH", null, { problems });
		const memo = contents.memos.find(m => m.includes(expected.transactionCommitment))!;
		return { signature, slot: fetched.slot, memo };
	}

	private async request<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
		let response: Response;
		try {
			response = await this.fetch(`${this.baseUrl}${path}`, {
				method,
				headers: body === undefined ? {} : { "content-type": "application/json" },
				body: body === undefined ? undefined : JSON.stringify(body),
				...(signal ? { signal } : {})
			});
		} catch (err) {
			if (signal?.aborted) throw err; // the caller's own abort: nothing to tell apart
			throw await this.networkError(path, err as Error, signal);
		}
		const payload = (await response.json().catch(() => null)) as { message?: string; type?: string; data?: unknown } | null;
		if (!response.ok) throw new SettlementError(payload?.message ?? `HTTP ${response.status}`, payload?.type ?? "HTTP_ERROR", response.status, payload?.data, retryAfterMs(response.headers.get("retry-after")));
		return payload as T;
	}

	/**
	 * The NETWORK_ERROR for a fetch that threw. In a page calling another origin, a CORS refusal, a
	 * network drop and an answer without CORS headers (a proxy's 502, say) are the same opaque
	 * TypeError. Two probes of /health/live, which the service's CORS rules cover, tell them apart:
	 * - in CORS mode: answered, so this origin is allowed and the failure was not CORS (retry);
	 * - refused, but answered in no-cors mode: the service is reachable and refuses this origin;
	 * - neither: the service is unreachable.
	 */
	private async networkError(path: string, err: Error, signal?: AbortSignal): Promise<SettlementError> {
		const pageOrigin = crossOriginPage(this.baseUrl);
		if (pageOrigin !== null) {
			// Bounded: a probe that hangs is an unreachable service, not a reason to hang submit(); and
			// it ends with the request's own signal (waitForStatus's timeout).
			const probe = async (mode: "cors" | "no-cors") => {
				if (signal?.aborted) return false; // no request at all for a wait already over
				const probing = abortsWith(signal);
				const timer = setTimeout(probing.abort, PROBE_TIMEOUT_MS);
				try {
					await this.fetch(`${this.baseUrl}/health/live`, { mode, signal: probing.signal });
					return true;
				} catch {
					return false;
				} finally {
					clearTimeout(timer);
					probing.release();
				}
			};
			if (await probe("cors"))
				return new SettlementError(
					`request to ${path} failed: ${err.message} (the service at ${this.baseUrl} answers this page's origin, so not a CORS refusal: the connection or a proxy failed)`,
					"NETWORK_ERROR",
					null,
					{ cors: false, origin: pageOrigin }
				);
			if (await probe("no-cors"))
				return new SettlementError(
					`request to ${path} was refused by the browser by CORS: the service at ${this.baseUrl} answers, but not to this page's origin ${pageOrigin} (is it in the service's CORS_ORIGINS?)`,
					"NETWORK_ERROR",
					null,
					{ cors: true, origin: pageOrigin }
				);
			return new SettlementError(`request to ${path} failed: ${err.message} (the service at ${this.baseUrl} is unreachable from this page: network down, or blocked)`, "NETWORK_ERROR", null, { cors: false, origin: pageOrigin });
		}
		return new SettlementError(`request to ${path} failed: ${err.message}`, "NETWORK_ERROR", null);
	}
}

/** The page's origin when the SDK runs in a browser page and `baseUrl` is another origin (CORS applies), else null. */
function crossOriginPage(baseUrl: string): string | null {
	const { document, location } = globalThis as { document?: unknown; location?: { origin?: string; href?: string } };
	if (document === undefined || typeof location?.origin !== "string") return null;
	const target = new URL(baseUrl, location.href).origin;
	return target === location.origin ? null : location.origin;
}

/**
 * A signal of its own that also aborts with `parent` (at once if it has). `release` detaches it, so
 * that a long-lived parent (a wait's) collects no listener per connection or probe.
 */
function abortsWith(parent: AbortSignal | undefined): { signal: AbortSignal; abort(): void; release(): void } {
	const controller = new AbortController();
	const abort = () => controller.abort();
	if (parent?.aborted) abort();
	else parent?.addEventListener("abort", abort);
	return { signal: controller.signal, abort, release: () => parent?.removeEventListener("abort", abort) };
}

/** A `retry-after` header's wait in ms (delay-seconds or an HTTP date); undefined without one, or unreadable. */
function retryAfterMs(header: string | null): number | undefined {
	if (header === null) return undefined;
	const ms = /^\s*\d+\s*$/.test(header) ? Number(header) * 1000 : Date.parse(header) - Date.now();
	return Number.isFinite(ms) ? Math.max(0, ms) : undefined;
}

/** A failure after which the same request may succeed: a network error that is not a CORS refusal, or a RETRYABLE_STATUS answer. */
function isRetryable(error: SettlementError): boolean {
	return error.type === "NETWORK_ERROR" ? !isCorsRefusal(error) : error.code !== null && RETRYABLE_STATUS.has(error.code);
}

/** A NETWORK_ERROR that the probes showed to be the browser's CORS refusal: retrying gets the same refusal. */
function isCorsRefusal(error: SettlementError): boolean {
	return (error.data as { cors?: boolean } | undefined)?.cors === true;
}
