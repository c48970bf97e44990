/**
 * The application SDK (issue 4): the facade a sender's app uses to pay through the service. It runs
 * in a browser as well as in Node (web APIs only: fetch, TextEncoder/TextDecoder, AbortController,
 * crypto.getRandomValues; its dependencies @noble/*, @scure/base, @solana/kit and @solana-program/*;
 * never an API key), builds the canonical message of SPEC §1 on the device and has it signed
 * through a Signer.
 */
import { ed25519 } from "@noble/curves/ed25519.js";
import { address, createSolanaRpcFromTransport, signature as toSignature, type Address, type Rpc, type SolanaRpcApi } from "@solana/kit";
import { MAX_VALIDITY_MS, SUPPORTED_FUNDING_MODE, buildPaymentMessage, type PaymentAuthorizationFields } from "../lib/canonical";
import { HEX64_PATTERN, IDENTIFIER_PATTERN, NONCE_PATTERN, decodeBase58, encodeBase58, isAmount, isBase58OfLength, isIsoTime } from "../lib/encoding";
import type { CreateIntentRequest, PublicMempoolIntent } from "../lib/intents";
import { AnswerTooLargeError, parseJson, readJsonAnswer } from "../lib/json-answer";
import type { ActiveRoute } from "../lib/registry";
import { DEFAULT_SETTLEMENT_PROGRAM_ID, expectedSettlementOf, readFetchedSettlementTransaction, settlementMemo, settlementMismatches } from "../lib/settlement";
import { SilenceWatch, SseParser, readEvents } from "../lib/sse";
import { isValidTin } from "../lib/tin";
import { cappedTransport } from "../lib/rpc-transport";

// The domain types an app handles through the SDK, so that it can name them.
export type { PaymentAuthorizationFields } from "../lib/canonical";
export type { CreateIntentRequest, PublicMempoolIntent } from "../lib/intents";
export type { ActiveRoute } from "../lib/registry";

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
	/** Private: never in a JSON.stringify or a Node log (a browser's dev tools show it). */
	readonly #seed: Uint8Array;

	private constructor(seed: Uint8Array) {
		this.#seed = seed;
		this.address = encodeBase58(ed25519.getPublicKey(seed));
	}

	static generate(): LocalKeypairSigner {
		return new LocalKeypairSigner(ed25519.utils.randomSecretKey());
	}

	/** From a 32-byte seed or a 64-byte Solana CLI secret key (seed ‖ public key, which must be the seed's). */
	static fromSecretKey(secretKey: Uint8Array): LocalKeypairSigner {
		if (secretKey.length !== 32 && secretKey.length !== 64) throw new Error("a secret key is 32 bytes (seed) or 64 bytes (Solana CLI keypair)");
		const signer = new LocalKeypairSigner(secretKey.slice(0, 32));
		// A keypair put together wrong would sign as another wallet than the one it names.
		if (secretKey.length === 64 && encodeBase58(secretKey.subarray(32)) !== signer.address) throw new Error("the keypair's public key does not match its secret seed");
		return signer;
	}

	async signMessage(message: Uint8Array): Promise<Uint8Array> {
		return ed25519.sign(message, this.#seed);
	}

	toJSON(): { address: string } {
		return { address: this.address };
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
	/**
	 * The recipient's active route: its commitment and version bind the payment. resolveTin()
	 * answers it, on the service's word; an app that has the route from its payee (an invoice, a QR
	 * code) passes that. Its `tin` must be `recipientTin`.
	 */
	route: ActiveRoute & { active?: boolean };
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
	/** The settlement program the credit accounts derive from: the deployment's (the service's SETTLEMENT_PROGRAM_ID). */
	settlementProgramId?: string;
	/** Each request to the service, and each RPC read of confirmOnChain, is abandoned after this (default 30 s); waitForStatus has its own timeout. */
	requestTimeoutMs?: number;
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

/** The most of a service's answer the SDK reads: its answers are a record or a short list. */
const MAX_ANSWER_BYTES = 4 * 1024 * 1024;
/**
 * How much of a Solana RPC answer is read: a settlement's getTransaction is a few KB. Kit parses an
 * answer whole on the main thread, so a lying endpoint's hundreds of MB would hold the page.
 */
const MAX_RPC_ANSWER_BYTES = 1024 * 1024;
const HEX64 = new RegExp(HEX64_PATTERN);
const IDENTIFIER = new RegExp(IDENTIFIER_PATTERN);
const NONCE = new RegExp(NONCE_PATTERN);
/** How long each probe of /health/live may take (see networkError). */
const PROBE_TIMEOUT_MS = 5000;
/**
 * Answers after which the same submission may succeed: a proxy that lost the service (502, 504), a
 * service starting or draining (503). Like a network error, the intent may or may not exist.
 */
const RETRYABLE_STATUS = new Set([502, 503, 504]);
/** The longest submit() waits between two attempts, whatever the backoff or a retry-after say. */
const MAX_SUBMIT_WAIT_MS = 5000;
/** The longest a timer keeps: past it, Node and browsers fire it at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;
const TERMINAL = new Set(["executed", "canceled"]);
/** How many of its latest submissions a client keeps, to check their views by (waitForStatus). */
const SUBMISSIONS_KEPT = 1000;
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
	private readonly programId: Address;
	private readonly requestTimeoutMs: number;
	/** The requests of this client's latest submissions, by their intents' ids (oldest first). */
	private readonly submissions = new Map<string, CreateIntentRequest>();

	constructor(options: ClientOptions) {
		this.baseUrl = options.baseUrl.replace(/\/+$/, "");
		this.fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
		// At most 20: each is a request, and waits up to MAX_SUBMIT_WAIT_MS after a failure.
		this.submitAttempts = counted("submitAttempts", options.submitAttempts ?? 3, 20);
		this.streamSilenceMs = timerMs("streamSilenceMs", options.streamSilenceMs ?? 45_000);
		this.rpc = options.solanaRpcUrl ? createSolanaRpcFromTransport(cappedTransport(options.solanaRpcUrl, MAX_RPC_ANSWER_BYTES)) : null;
		this.programId = options.settlementProgramId ? address(options.settlementProgramId) : DEFAULT_SETTLEMENT_PROGRAM_ID;
		this.requestTimeoutMs = timerMs("requestTimeoutMs", options.requestTimeoutMs ?? 30_000);
	}

	/**
	 * Two answers, because they differ: `canSubmit`, the service takes signed intents now (they wait
	 * in the mempool until a Cranker leases them); `canSettleNow`, an online settlement Cranker also
	 * offers liquidity in the mint (any mint when none is given), so a payment can settle now.
	 */
	async checkReadiness(tokenMintAddress?: string): Promise<Readiness> {
		// Within requestTimeoutMs, as every request: a server that never answers is not ready.
		if (!(await this.request("GET", "/health/ready").catch(() => null))) return { canSubmit: false, canSettleNow: false };
		const networks = await this.request<{ network: string; tokenMintAddress: string; liquidity: string; crankersOnline: number }[]>("GET", "/settlement-networks");
		if (!Array.isArray(networks)) throw new SettlementError("the answer is not a list", "INVALID_ANSWER", null);
		const network = tokenMintAddress === undefined ? networks[0] : networks.find(n => n?.tokenMintAddress === tokenMintAddress);
		if (network === undefined) return { canSubmit: true, canSettleNow: false };
		if (typeof network !== "object" || network === null) throw new SettlementError("a settlement network in the answer is not an object", "INVALID_ANSWER", null);
		return { canSubmit: true, canSettleNow: true, network: { network: network.network, tokenMintAddress: network.tokenMintAddress, liquidity: network.liquidity, crankersOnline: network.crankersOnline } };
	}

	/**
	 * The TIN's active route (its commitment and version bind the payment), on the service's word:
	 * signPayment checks that it is the route of the TIN asked for, and active, not that the
	 * registry holds it. An app that has the route from its payee passes that instead.
	 */
	async resolveTin(tin: string): Promise<ActiveRoute & { active: boolean; updatedAt: string }> {
		const route = await this.request<ActiveRoute & { active: boolean; updatedAt: string }>("GET", `/registry/tins/${encodeURIComponent(tin)}`);
		if (route.tin !== tin) throw new SettlementError(`the service answered the route of another TIN than ${tin}`, "ANSWER_MISMATCH", null);
		return route;
	}

	/**
	 * The canonical message and commitment of SPEC §1 for these parameters, as the wallet will sign
	 * them. Parameters the service would refuse, or that could make the text read otherwise than
	 * the fields (a line break in a field), throw VALIDATION_ERROR: nothing of the kind is signed.
	 */
	buildPaymentAuthorization(sender: string, params: PaymentParams): PaymentAuthorization {
		const { route } = params;
		for (const time of [params.issuedAt, params.expiresAt])
			if (time !== undefined && !(time instanceof Date && Number.isFinite(time.getTime()))) throw new SettlementError("issuedAt and expiresAt must be valid Dates", "VALIDATION_ERROR", null);
		if (route.tin !== params.recipientTin) throw new SettlementError(`the route is TIN ${route.tin}'s, not the recipient ${params.recipientTin}'s`, "VALIDATION_ERROR", null);
		if (route.active === false) throw new SettlementError(`the route of TIN ${route.tin} is not active`, "VALIDATION_ERROR", null);
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
			senderFundingMode: SUPPORTED_FUNDING_MODE,
			senderAuthorizationNonce: params.nonce ?? `n_${randomToken(16)}`,
			senderAuthorizationIssuedAt: issuedAt.toISOString(),
			senderAuthorizationExpiresAt: isoTimeOf(params.expiresAt ?? new Date(issuedAt.getTime() + 10 * 60_000)),
			expiresAtSlot: params.expiresAtSlot
		};
		const problem = paymentFieldsProblem(fields);
		if (problem) throw new SettlementError(`not a payment to sign: ${problem}`, "VALIDATION_ERROR", null);
		return { fields, ...buildPaymentMessage(fields) };
	}

	/** Builds the authorization and has the signer sign it: the CreateIntentRequest to submit. */
	async signPayment(signer: Signer, params: PaymentParams): Promise<CreateIntentRequest> {
		// Read once: it may change while the wallet asks.
		const sender = signer.address;
		const { fields, message, transactionCommitment } = this.buildPaymentAuthorization(sender, params);
		const bytes = utf8.encode(message);
		const signature = Uint8Array.from(await signer.signMessage(bytes));
		// A wallet that signed with another account, or returned anything else, is told now.
		if (!signsFor(sender, bytes, signature)) throw new SettlementError(`the signer's signature does not verify for its address ${sender}`, "INVALID_SIGNATURE", null);
		return { ...fields, senderAuthorizationMessage: message, senderAuthorizationSignature: encodeBase58(signature), transactionCommitment };
	}

	/**
	 * POST /intents. Network errors and 502/503/504 answers are retried with the same body: the
	 * service answers a replay with the record it already holds, so a retry never creates a second
	 * intent. A CORS refusal (see networkError) is not retried: the answer would be the same.
	 */
	async submit(intent: CreateIntentRequest): Promise<PublicMempoolIntent> {
		for (let attempt = 1; ; attempt++) {
			let record: PublicMempoolIntent;
			try {
				record = await this.request<PublicMempoolIntent>("POST", "/intents", intent);
			} catch (err) {
				const failure = err as SettlementError;
				if (!isRetryable(failure) || attempt >= this.submitAttempts) throw failure;
				// A 503 says when to come back (NOT_READY: another body holding this paymentId is unverified).
				await sleep(Math.min(Math.max(100 * 2 ** (attempt - 1), failure.retryAfterMs ?? 0), MAX_SUBMIT_WAIT_MS));
				continue;
			}
			// The record is the one of this payment, or the app would follow another's.
			if (!isIntentId(record?.id) || !isRecordOf(record, intent)) throw new SettlementError(`the service answered a record of another payment than ${intent.paymentId}`, "ANSWER_MISMATCH", null);
			// One id for two payments would have a wait for the first take the second's views.
			const kept = this.submissions.get(record.id);
			if (kept && kept.paymentId !== intent.paymentId)
				throw new SettlementError(`the service answered payment ${intent.paymentId} with another's id`, "ANSWER_MISMATCH", null);
			this.submissions.delete(record.id);
			this.submissions.set(record.id, intent);
			if (this.submissions.size > SUBMISSIONS_KEPT) this.submissions.delete(this.submissions.keys().next().value!);
			return record;
		}
	}

	/**
	 * GET /intents/{id}: the public view, which must be intent `id`'s, and that payment's when known
	 * (`intent`, or one of this client's last 1,000 submits), as waitForStatus checks; else ANSWER_MISMATCH.
	 */
	async getIntent(id: string, intent?: CreateIntentRequest): Promise<PublicMempoolIntent> {
		return checkedView(id, await this.request("GET", `/intents/${encodeURIComponent(id)}`), intent ?? this.submissions.get(id));
	}

	/**
	 * Resolves once the intent is executed or canceled, told by its event stream (GET /intents/{id}/events),
	 * or by polling GET /intents/{id} where there is none. Past `timeoutMs`: TIMEOUT, the last record seen in `data.intent`.
	 * Every view must be intent `id`'s, and that payment's when known: `intent` (what signPayment
	 * returned), or one of this client's last 1,000 submits; else ANSWER_MISMATCH. `signal`: the
	 * caller's, whose abort ends the wait (ABORTED), its stream or poll with it.
	 */
	async waitForStatus(id: string, options: { timeoutMs: number; intent?: CreateIntentRequest; signal?: AbortSignal }): Promise<PublicMempoolIntent> {
		const intent = options.intent ?? this.submissions.get(id);
		const check = (answer: unknown) => checkedView(id, answer, intent);
		// Where no stream can be had (a fetch without a streaming body, a service without the route,
		// a network or CORS refusal, 429), it polls with backoff, 100 ms doubling to 2 s.
		const deadline = Date.now() + timerMs("timeoutMs", options.timeoutMs);
		const stop = new AbortController();
		// The caller's abort ends the wait as the timeout does; whichever came first is told.
		const leave = () => stop.abort("aborted");
		options.signal?.addEventListener("abort", leave, { once: true });
		if (options.signal?.aborted) leave();
		const timer = options.timeoutMs === Infinity ? undefined : setTimeout(() => stop.abort("timeout"), options.timeoutMs);
		let last: PublicMempoolIntent | undefined;
		/** The last poll's failure, retried: told with the TIMEOUT (a wrong baseUrl, a service that stayed down). */
		let failure: SettlementError | undefined;
		const timeout = () =>
			stop.signal.reason === "aborted"
				? new SettlementError(`waiting for intent ${id} was aborted: ${describeReason(options.signal!.reason)}`, "ABORTED", null, last && { intent: last })
				: new SettlementError(
						`intent ${id} is ${last ? `still ${last.receiverStatus}` : "not executed or canceled"} after ${options.timeoutMs} ms${failure ? ` (the last poll failed: ${failure.message})` : ""}`,
						"TIMEOUT",
						null,
						last && { intent: last }
					);
		try {
			const streamed = await this.streamStatus(id, check, stop.signal, view => (last = view));
			if (streamed) return streamed;
			if (stop.signal.aborted) throw timeout();
			// A poll that fails as a submission may (the service restarting, a proxy's 502) is tried
			// again; none outlives the timeout.
			for (let delay = 100; ; delay = Math.min(delay * 2, 2000)) {
				let wait = delay;
				try {
					const polled = check(await this.request<unknown>("GET", `/intents/${encodeURIComponent(id)}`, undefined, stop.signal));
					last = polled;
					failure = undefined;
					if (TERMINAL.has(polled.status)) return polled;
				} catch (err) {
					if (stop.signal.aborted) throw timeout();
					const refused = err as SettlementError;
					if (refused.type === "ANSWER_MISMATCH") throw refused;
					// Too many requests from this client (429): asked again once the service said to.
					if (refused.code === 429) wait = Math.max(delay, refused.retryAfterMs ?? 0);
					else if (!isRetryable(refused)) throw err;
					else if (refused.code === 503) {
						// A service starting or draining: asked again no sooner than it said either, up to
						// MAX_SUBMIT_WAIT_MS as submit() waits, where the timeout leaves time for that and a
						// step of the backoff; else at the next step, as another instance may answer sooner.
						const asked = Math.min(refused.retryAfterMs ?? 0, MAX_SUBMIT_WAIT_MS);
						if (Date.now() + asked + delay <= deadline) wait = Math.max(delay, asked);
					}
					failure = refused;
				}
				if (stop.signal.aborted || Date.now() + wait > deadline) throw timeout();
				await pause(wait, stop.signal);
				if (stop.signal.aborted) throw timeout();
			}
		} finally {
			clearTimeout(timer);
			options.signal?.removeEventListener("abort", leave);
			stop.abort(); // the stream still open, if any
		}
	}

	/** The terminal view from the event stream; null once `signal` aborts, or with no stream to be had. */
	private async streamStatus(id: string, check: (answer: unknown) => PublicMempoolIntent, signal: AbortSignal, seen: (view: PublicMempoolIntent) => void): Promise<PublicMempoolIntent | null> {
		// A stream that ends or drops before a terminal state is resumed with Last-Event-ID after the
		// delay the service asked for (`retry:`), also through network errors and 5xx answers while
		// the service restarts; a refusal of the first request, or any other answer, means no stream.
		// A failed reconnection is tried next without Last-Event-ID: a simple request, which a service
		// that does not allow that header to this page still answers (with the current state first).
		// Two connections in a row that sent nothing at all, not even the line the service writes as it
		// opens one (a proxy that buffers the body), mean no stream: polling instead.
		const parser = new SseParser();
		for (let streamed = false, failed = 0, mute = 0; ; await pause(parser.retry ?? 1000, signal)) {
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
						const view = check(parseJson(event.data));
						seen(view);
						if (TERMINAL.has(view.status)) return view;
					}
				} catch (err) {
					if ((err as SettlementError).type === "ANSWER_MISMATCH") throw err;
					// A dropped or silent connection (or the abort): resumed, or ended, by the loop.
				}
			} finally {
				silence.stop();
				connection.release();
				connection.abort(); // whatever ended this connection, nothing of it stays open
			}
			mute = silence.spoke ? 0 : mute + 1;
			if (mute === 2) return null;
		}
	}

	/**
	 * Checks on chain, through the Solana RPC, that `signature` (the record's transactionSignature)
	 * is a successful settlement of `intent`, the request signPayment returned: its memo names the
	 * commitment of what the wallet signed and its payout nullifier, and it transfers exactly the
	 * signed amount of the signed mint to the credit account of the signed route. Every expected
	 * value comes from the signed request, none from the service, so a settlement of another
	 * payment, or to another account, never passes; and the transaction the RPC answers must carry
	 * `signature`, signed by its fee payer. Read at `confirmed`, as the service reads it, unless
	 * `commitment` says `finalized` (about 13 s later, and then no fork can drop it): a settlement
	 * confirmed but not yet finalized is then NOT_FINALIZED, worth asking again, not NOT_ON_CHAIN.
	 */
	async confirmOnChain(signature: string, intent: CreateIntentRequest, options: { commitment?: "confirmed" | "finalized" } = {}): Promise<OnChainSettlement> {
		if (!this.rpc) throw new SettlementError("confirmOnChain needs the solanaRpcUrl client option", "CONFIGURATION_ERROR", null);
		const commitment = options.commitment ?? "confirmed";
		if (commitment !== "confirmed" && commitment !== "finalized") throw new SettlementError(`commitment must be confirmed or finalized, not ${String(commitment)}`, "VALIDATION_ERROR", null);
		const problem = typeof signature === "string" && isBase58OfLength(signature, 64) ? paymentFieldsProblem(intent) : "the transaction signature is not base58 of 64 bytes";
		if (problem) throw new SettlementError(`not a signed payment: ${problem}`, "VALIDATION_ERROR", null);
		const expected = expectedSettlementOf({ ...intent, transactionCommitment: buildPaymentMessage(intent).transactionCommitment }, this.programId);
		const read = async (at: "confirmed" | "finalized") => {
			try {
				// Within requestTimeoutMs, as every request: an RPC that never answers is no answer.
				const attempt = abortsWith(undefined, this.requestTimeoutMs);
				try {
					const found = await this.rpc!.getTransaction(toSignature(signature), { encoding: "base64", commitment: at, maxSupportedTransactionVersion: 0 }).send({ abortSignal: attempt.signal });
					// Without its status (meta and its err), not shown on chain.
					if (!found?.meta || !("err" in found.meta)) return null;
					if (!Array.isArray(found.transaction) || typeof found.transaction[0] !== "string") throw new SettlementError(`the Solana RPC answered transaction ${signature} in another form than base64`, "INVALID_ANSWER", null);
					return found;
				} finally {
					attempt.release();
				}
			} catch (err) {
				if (err instanceof SettlementError) throw err;
				// Longer than any transaction: an endpoint that lies, not one to ask again.
				if (err instanceof AnswerTooLargeError) throw new SettlementError(`the Solana RPC's answer to getTransaction ${err.message}`, "INVALID_ANSWER", null);
				throw new SettlementError(`Solana RPC getTransaction failed: ${(err as Error).message}`, "NETWORK_ERROR", null);
			}
		};
		/** What the transaction read at `at` settles, or why it does not. */
		const settled = async (fetched: NonNullable<Awaited<ReturnType<typeof read>>>): Promise<OnChainSettlement> => {
			if (fetched.meta?.err) throw new SettlementError(`transaction ${signature} failed on chain`, "ONCHAIN_FAILED", null, { err: fetched.meta.err });
			const contents = readFetchedSettlementTransaction(fetched.transaction[0], signature);
			const problems = await settlementMismatches(contents, expected);
			if (problems.length) throw new SettlementError(`transaction ${signature} is not this settlement: ${problems.join("; ")}`, "SETTLEMENT_MISMATCH", null, { problems });
			// The settlement's own memo, which the checks found: not another that merely quotes the commitment.
			return { signature, slot: fetched.slot, memo: settlementMemo(expected.transactionCommitment, expected.payoutNullifier) };
		};
		const fetched = await read(commitment);
		if (fetched) return settled(fetched);
		// Not finalized: a failed or wrong transaction is said at once; only a settlement is worth waiting for.
		const confirmed = commitment === "finalized" ? await read("confirmed") : null;
		if (!confirmed) throw new SettlementError(`transaction ${signature} is not ${commitment} on chain`, "NOT_ON_CHAIN", null);
		await settled(confirmed);
		throw new SettlementError(`transaction ${signature} settles this payment and is confirmed, not finalized yet`, "NOT_FINALIZED", null);
	}

	/**
	 * One request, abandoned after requestTimeoutMs (a NETWORK_ERROR) or with `signal`; its answer
	 * read up to MAX_ANSWER_BYTES. A success answer that is not a JSON object or list (a proxy's
	 * page, a body cut short) is INVALID_ANSWER, which may be retried like a network error.
	 */
	private async request<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
		const attempt = abortsWith(signal, this.requestTimeoutMs);
		try {
			let response: Response | undefined;
			let answer: unknown;
			try {
				response = await this.fetch(`${this.baseUrl}${path}`, {
					method,
					headers: body === undefined ? {} : { "content-type": "application/json" },
					body: body === undefined ? undefined : JSON.stringify(body),
					signal: attempt.signal
				});
				answer = await readJsonAnswer(response, MAX_ANSWER_BYTES);
			} catch (err) {
				if (err instanceof AnswerTooLargeError) {
					// An error page too long to read is still its status (a proxy's 503 is retried).
					if (response && !response.ok) throw new SettlementError(`HTTP ${response.status}`, "HTTP_ERROR", response.status, undefined, retryAfterMs(response.headers.get("retry-after")));
					throw new SettlementError(`the answer to ${path} passed ${MAX_ANSWER_BYTES} bytes`, "INVALID_ANSWER", null);
				}
				if (signal?.aborted) throw err; // the caller's own abort: nothing to tell apart
				throw await this.networkError(path, err as Error, signal);
			}
			if (response.ok) {
				if (typeof answer !== "object" || answer === null) throw new SettlementError(`the answer to ${path} is not JSON`, "INVALID_ANSWER", response.status);
				return answer as T;
			}
			const payload = (typeof answer === "object" ? answer : null) as { message?: unknown; type?: unknown; data?: unknown } | null;
			const text = (value: unknown, fallback: string) => (typeof value === "string" ? value.slice(0, 500) : fallback);
			// A type the SDK alone gives is its own finding, never the service's word: one a service sent would pass for it (a made-up CORS refusal, an error retried).
			const type = text(payload?.type, "HTTP_ERROR");
			throw new SettlementError(text(payload?.message, `HTTP ${response.status}`), SDK_OWN_TYPES.has(type) ? "HTTP_ERROR" : type, response.status, SDK_OWN_TYPES.has(type) ? undefined : payload?.data, retryAfterMs(response.headers.get("retry-after")));
		} finally {
			attempt.release();
		}
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
				const probing = abortsWith(signal, PROBE_TIMEOUT_MS);
				try {
					await this.fetch(`${this.baseUrl}/health/live`, { mode, signal: probing.signal });
					return true;
				} catch {
					return false;
				} finally {
					probing.release();
				}
			};
			if (await probe("cors"))
				return new SettlementError(
					`request to ${path} failed: ${err.message} (not CORS: the service at ${this.baseUrl} answers this page's origin; the connection or a proxy failed)`,
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
			return new SettlementError(`request to ${path} failed: ${err.message} (the service at ${this.baseUrl} is unreachable from this page)`, "NETWORK_ERROR", null, { cors: false, origin: pageOrigin });
		}
		return new SettlementError(`request to ${path} failed: ${err.message}`, "NETWORK_ERROR", null);
	}
}

/** Whether `signature` is `address`'s strict (RFC 8032) ed25519 signature of `message`. */
function signsFor(address: string, message: Uint8Array, signature: Uint8Array): boolean {
	const publicKey = decodeBase58(address);
	if (publicKey?.length !== 32 || signature.length !== 64) return false;
	try {
		return ed25519.verify(signature, message, publicKey, { zip215: false });
	} catch {
		return false;
	}
}

/** The public view's fields that say which payment it is: each must be the signed request's. */
const PAYMENT_FIELDS = ["paymentId", "senderWallet", "recipientTin", "tokenMintAddress", "amount", "feeLimit", "expiresAtSlot"] as const;

/** The error types only the SDK gives (README, "Application SDK"); the service's catalogue has none of them. */
const SDK_OWN_TYPES: ReadonlySet<string> = new Set(["NETWORK_ERROR", "TIMEOUT", "ABORTED", "ANSWER_MISMATCH", "INVALID_ANSWER", "NOT_FINALIZED", "ONCHAIN_FAILED", "CONFIGURATION_ERROR"]);

/** An intent id (SPEC §0: `int_` and an opaque rest), path-safe and bounded: anything else would be kept, and put in the paths of later requests. */
function isIntentId(id: unknown): id is string {
	return typeof id === "string" && /^int_[A-Za-z0-9_-]{1,124}$/.test(id);
}

/** An ISO time, or VALIDATION_ERROR for a Date outside the range a Date can print. */
function isoTimeOf(date: Date): string {
	if (!Number.isFinite(date.getTime())) throw new SettlementError("the authorization's expiry is past the dates a Date holds", "VALIDATION_ERROR", null);
	return date.toISOString();
}

/** Whether `record` (a public view) is the record of the payment `intent` signs for. */
function isRecordOf(record: Partial<PublicMempoolIntent> | null | undefined, intent: CreateIntentRequest): boolean {
	return record?.transactionCommitment === buildPaymentMessage(intent).transactionCommitment && PAYMENT_FIELDS.every(field => record[field] === intent[field]);
}

/**
 * The public view of intent `id` in a service's answer, and of `intent`'s payment when given;
 * ANSWER_MISMATCH when it is not one (another intent's, say).
 */
function checkedView(id: string, answer: unknown, intent?: CreateIntentRequest): PublicMempoolIntent {
	const view = answer as Partial<PublicMempoolIntent> | null | undefined;
	if (view?.id !== id || typeof view.status !== "string" || (intent && !isRecordOf(view, intent)))
		throw new SettlementError(`the service answered another record than intent ${id}${intent ? ` of payment ${intent.paymentId}` : ""}`, "ANSWER_MISMATCH", null);
	return view as PublicMempoolIntent;
}

/**
 * Why the fields of a payment are not ones the service accepts (SPEC §1), or null. Checked before
 * a wallet signs them: a field that is not its form (a line break in the route commitment, an
 * amount written "1e6") would have the wallet sign text that reads otherwise than the payment.
 */
function paymentFieldsProblem(f: PaymentAuthorizationFields): string | null {
	const checks: [boolean, string][] = [
		[typeof f.paymentId === "string" && IDENTIFIER.test(f.paymentId), "paymentId is 8–128 characters A–Z a–z 0–9 _ -"],
		[typeof f.senderWallet === "string" && isBase58OfLength(f.senderWallet, 32), "senderWallet is a base58 public key"],
		[typeof f.recipientTin === "string" && isValidTin(f.recipientTin), "recipientTin is a 10-digit TIN with its check digit"],
		[typeof f.recipientRouteCommitment === "string" && HEX64.test(f.recipientRouteCommitment), "the route commitment is 64 lowercase hex digits"],
		[Number.isSafeInteger(f.recipientRouteVersion) && f.recipientRouteVersion >= 1, "the route version is an integer ≥ 1"],
		[typeof f.tokenMintAddress === "string" && isBase58OfLength(f.tokenMintAddress, 32), "tokenMintAddress is a base58 address"],
		[typeof f.amount === "string" && isAmount(f.amount) && f.amount !== "0", "amount is a decimal count of base units, more than 0, at most 2^64 - 1"],
		[typeof f.feeLimit === "string" && isAmount(f.feeLimit), "feeLimit is a decimal count of base units"],
		[typeof f.senderAuthorizationNonce === "string" && NONCE.test(f.senderAuthorizationNonce), "the nonce is 16–128 characters A–Z a–z 0–9 _ -"],
		[Number.isSafeInteger(f.expiresAtSlot) && f.expiresAtSlot >= 0, "expiresAtSlot is a slot number"],
		[isIsoTime(f.senderAuthorizationIssuedAt) && isIsoTime(f.senderAuthorizationExpiresAt), "issuedAt and expiresAt are ISO times of years 0–9999"],
		[Date.parse(f.senderAuthorizationExpiresAt) > Date.parse(f.senderAuthorizationIssuedAt), "it expires after it is issued"],
		[Date.parse(f.senderAuthorizationExpiresAt) - Date.parse(f.senderAuthorizationIssuedAt) <= MAX_VALIDITY_MS, "it is valid 24 h at most"]
	];
	return checks.find(([ok]) => !ok)?.[1] ?? null;
}

/** The page's origin when the SDK runs in a browser page and `baseUrl` is another origin (CORS applies), else null. */
function crossOriginPage(baseUrl: string): string | null {
	const { document, location } = globalThis as { document?: unknown; location?: { origin?: string; href?: string } };
	if (document === undefined || typeof location?.origin !== "string") return null;
	const target = new URL(baseUrl, location.href).origin;
	return target === location.origin ? null : location.origin;
}

/** An abort's reason as a line of text: an Error's message, or the value itself. */
function describeReason(reason: unknown): string {
	return (reason instanceof Error ? reason.message : String(reason)).slice(0, 200);
}

/** Option `name`, an integer from 1 to `max` (`orInfinity`: or Infinity); else a CONFIGURATION_ERROR. */
function counted(name: string, value: number, max: number, orInfinity = false): number {
	if ((orInfinity && value === Infinity) || (Number.isSafeInteger(value) && value >= 1 && value <= max)) return value;
	throw new SettlementError(`${name} must be 1 to ${max}; got ${value}`, "CONFIGURATION_ERROR", null);
}

/**
 * A time a timer can keep, for option `name`: 1 to 2^31 - 1 ms, or Infinity for no timer. Past
 * 2^31 - 1 ms (or NaN) a timer fires at once, which would end every wait as it began.
 */
const timerMs = (name: string, value: number) => counted(name, value, MAX_TIMER_MS, true);

/**
 * A signal of its own that also aborts with `parent` (at once if it has), and after `afterMs`
 * (Infinity: never). `release` detaches it and stops the timer, so that a long-lived parent (a
 * wait's) collects no listener per connection or probe.
 */
function abortsWith(parent: AbortSignal | undefined, afterMs = Infinity): { signal: AbortSignal; abort(): void; release(): void } {
	const controller = new AbortController();
	const abort = () => controller.abort();
	if (parent?.aborted) abort();
	else parent?.addEventListener("abort", abort);
	const timer = afterMs === Infinity ? undefined : setTimeout(abort, afterMs);
	return {
		signal: controller.signal,
		abort,
		release: () => {
			clearTimeout(timer);
			parent?.removeEventListener("abort", abort);
		}
	};
}


/**
 * A failure after which the same request may succeed: a network error that is not a CORS refusal,
 * a success answer that was not JSON, or a RETRYABLE_STATUS answer.
 */
function isRetryable(error: SettlementError): boolean {
	if (error.type === "NETWORK_ERROR") return !isCorsRefusal(error);
	return (error.type === "INVALID_ANSWER" && error.code !== null) || (error.code !== null && RETRYABLE_STATUS.has(error.code));
}

/** A NETWORK_ERROR that the probes showed to be the browser's CORS refusal: retrying gets the same refusal. */
function isCorsRefusal(error: SettlementError): boolean {
	return (error.data as { cors?: boolean } | undefined)?.cors === true;
}

/** A `retry-after` header's wait in ms (delay-seconds or an HTTP date), at most MAX_TIMER_MS; undefined without one, or unreadable. */
function retryAfterMs(header: string | null): number | undefined {
	if (header === null) return undefined;
	const ms = /^\s*\d+\s*$/.test(header) ? Number(header) * 1000 : Date.parse(header) - Date.now();
	return Number.isFinite(ms) ? Math.min(Math.max(0, ms), MAX_TIMER_MS) : undefined;
}
