/**
 * The Cranker's loops: signed heartbeats with its liquidity, settlement work (role `settlement`)
 * and the TIN pipeline's stages (roles `verifier` and `submitter`). One piece of work at a time
 * per loop; `stop()` lets the current piece finish (or release its lease) and returns. A settlement
 * Cranker also follows the Node's VERIFIED events (GET /events), each of which has it look for work
 * at once; polling stays, slower while the stream is up, for what no event announces (a skipped
 * intent's turn, new liquidity, orphans) and for when the stream is down.
 */
import { createKeyPairSignerFromBytes, getSignatureFromTransaction, type KeyPairSigner, type Transaction } from "@solana/kit";
import { buildHeartbeatMessage } from "../lib/canonical";
import { createSigner } from "../lib/ed25519";
import { isAmount, isIsoTime } from "../lib/encoding";
import { keypairSigningKey } from "../lib/http-signature";
import { INTENT_EVENT_TYPE, type MempoolIntent, type PublicMempoolIntent } from "../lib/intents";
import type { TinStage } from "../lib/schemas";
import { registryMemo, signMemoTransaction } from "../lib/settlement";
import { SilenceWatch, SseParser, readEvents } from "../lib/sse";
import { MAX_CLOCK_SKEW_MS, checkValidityWindow, isOwnerSigned } from "../lib/verification";
import type { StageRequest } from "../lib/tin-operations";
import { Chain } from "./chain";
import type { CrankerConfig } from "./config";
import { SettlementJournal } from "./journal";
import type { Logger } from "./log";
import { CrankerMetrics } from "./metrics";
import { NodeApiError, NodeClient, type IntentWorkItem, type TinOperationWork } from "./node-client";
import { rememberLatest } from "./recent";
import { Settler } from "./settler";

export const CRANKER_VERSION = "0.1.0";

/** How often the settlement loop also looks for SUBMITTED intents whose Cranker vanished, in POLL_INTERVAL_MS. */
const ORPHAN_CHECK_EVERY = 5;
/** How long an intent this Cranker released is left to others. */
const SKIP_RELEASED_MS = 30_000;
/**
 * A settlement round reads the work in pages of WORK_PAGE_ITEMS, at most WORK_PAGES_PER_ROUND of
 * them, and the next round goes on where it stopped; past the end it starts again from the oldest.
 * Work it cannot take (another mint, more than its liquidity) then hides nothing behind it for
 * long, however much of it there is, and a round's cost stays bounded.
 */
const WORK_PAGE_ITEMS = 100;
const WORK_PAGES_PER_ROUND = 5;
/** Announced intents kept, and tried per round (the newest): older ones are left to the pages. */
const ANNOUNCED_MAX = 100;
const ANNOUNCED_PER_ROUND = 10;
/** The events that announce settlement work: an intent became VERIFIED (new, released, dropped or its lease lapsed). */
const WORK_EVENTS = `types=${INTENT_EVENT_TYPE}&states=VERIFIED`;
/** While the event stream is up, /intent-work is polled no more often than this (POLL_INTERVAL_MS when longer). */
const STREAM_POLL_INTERVAL_MS = 5000;
/** A stream silent this long is taken for dead and reopened: the Node sends a heartbeat every EVENT_HEARTBEAT_MS (15 s by default). */
const STREAM_IDLE_MS = 45_000;
/** Reconnections back off from the Node's `retry:` (1 s without one), doubling up to this. */
const STREAM_MAX_BACKOFF_MS = 30_000;
/**
 * A registry transaction this process did not sign (it restarted since), not seen for this long by
 * its own clock, can no longer land: a blockhash lives about 90 s.
 */
const REGISTRY_GIVE_UP_MS = 10 * 60_000;
/** And that many blocks: a blockhash lives 150. */
const REGISTRY_GIVE_UP_BLOCKS = 300n;
/** Registry transactions kept, to be sent again rather than signed again. */
const REGISTRY_TRANSACTIONS_MAX = 10_000;
/** The stream ids this Node sends (`<intents seq>-<tin operations seq>`): any other is not sent back as Last-Event-ID. */
const STREAM_ID = /^\d{1,15}-\d{1,15}$/;

/** A registry transaction this Cranker signed, kept until its owner's signature expires (`keepUntil`, ms). */
interface RegistryTransaction {
	transaction: Transaction;
	signature: string;
	lastValidBlockHeight: bigint;
	keepUntil: number;
}

/** The Node's 422 for the Last-Event-ID a stream was resumed with (services/event-streams.ts). */
function refusedLastEventId(err: unknown): boolean {
	return err instanceof NodeApiError && err.status === 422 && Array.isArray(err.data) && err.data.some(entry => (entry as { field?: unknown } | null)?.field === "Last-Event-ID");
}

/**
 * Whether a work item has what the Cranker weighs it by before its checks (id, mint, amount,
 * expiry): an item that has not is passed over, where it would have failed every round and so
 * stopped the work behind it. The Settler checks the rest, and the sender's signature.
 */
function isWeighable(item: IntentWorkItem | null): item is IntentWorkItem {
	const intent = item?.intent as Partial<Record<keyof MempoolIntent, unknown>> | undefined;
	return typeof intent?.id === "string" && typeof intent.tokenMintAddress === "string" && typeof intent.amount === "string" && isAmount(intent.amount) && typeof intent.senderAuthorizationExpiresAt === "string";
}

/** Whether `hostname` (as URL gives it) is this machine: traffic to it never leaves it. */
function isLoopbackHost(hostname: string): boolean {
	return hostname === "localhost" || hostname === "[::1]" || /^127\.\d+\.\d+\.\d+$/.test(hostname);
}

export class Cranker {
	readonly pubkey: string;
	readonly metrics = new CrankerMetrics();
	private readonly node: NodeClient;
	private readonly chain: Chain;
	private readonly settler: Settler | null;
	private readonly signHeartbeat: (message: string) => string;
	private liquidity = new Map<string, bigint>();
	/** The last balances read on chain (liquidity is that, less what was paid since). */
	private balancesRead = new Map<string, bigint>();
	/** The balances grew: the next page is read from the oldest. */
	private pagesFromOldest = false;
	/** The check of CRANKER_MINTS on chain (checkMints), in flight or done; null until one starts and after one fails. */
	private mintCheck: Promise<void> | null = null;
	private online = false;
	/**
	 * The settlement program the Node's latest heartbeat or payout answer named (null: none named
	 * one yet, as an older Node's do not). While it is another than this Cranker's, its settlements would pay
	 * credit accounts the Node never counts: it takes no work and offers no liquidity. Only ever
	 * compared: a hostile Node would name a program of its own.
	 */
	private nodeProgram: string | null = null;
	/** An answer named another program: the liquidity is withdrawn by a heartbeat sent at once. */
	private heartbeatAgain = false;
	/** Ends the heartbeat loop's sleep (a payout answer named another program). */
	private wakeHeartbeat: () => void = () => {};
	/** The latest accepted heartbeat's sentAt (ms): the next one is later, as the Node requires, even within the same millisecond. */
	private lastAcceptedAtMs = 0;
	private stopping = false;
	/** Heartbeats outlive the work loops, so a settlement finishing after SIGTERM is still accepted. */
	private heartbeatsStopping = false;
	/** Intents this Cranker just gave back (expired evidence, preflight refusal): not leased again until when (performance.now()). */
	private readonly skipUntil = new Map<string, number>();
	/** Where the next settlement round reads on from: the last work item read (null: the oldest). */
	private workCursor: string | null = null;
	/** Intents the event stream announced that this Cranker could pay, in the order announced: the newest are tried before the pages. */
	private readonly announced = new Map<string, true>();
	/** Per TIN operation (its owner-signed operationId), the registry transaction this Cranker signed for it. */
	private readonly registryTransactions = new Map<string, RegistryTransaction>();
	/** Per TIN operation submitted before this process started, when (performance.now(), block height) its transaction was first not seen. */
	private readonly registryUnseenSince = new Map<string, { at: number; height: bigint }>();
	private readonly sleepers = new Set<() => void>();
	private loops: Promise<void>[] = [];
	/** The event stream is open: polling slows down. */
	private streamUp = false;
	/** The open event stream's connection, aborted by stop() or when it falls silent. */
	private stream: AbortController | null = null;
	/** A VERIFIED event arrived during the settlement round in hand: the next round starts at once. */
	private workAnnounced = false;
	/** Ends the settlement loop's sleep. */
	private wakeSettlement: () => void = () => {};
	/** When the settlement loop next looks for orphans: by time, as rounds come at the pace of events. */
	private nextOrphanCheck = 0;
	private heartbeatLoop: Promise<void> = Promise.resolve();

	private constructor(
		private readonly config: CrankerConfig,
		private readonly signer: KeyPairSigner,
		private readonly log: Logger,
		/** Null without the settlement role. */
		private readonly journal: SettlementJournal | null
	) {
		this.pubkey = signer.address;
		this.node = new NodeClient(config.nodeUrl, config.workerApiKey, keypairSigningKey(config.keypair), 30_000, (path, reason) => log.warn("Node unavailable, retrying", { path, reason }), this.metrics);
		this.chain = new Chain(config.solanaRpcUrl, config.rpcTimeoutMs);
		this.settler = journal && new Settler(this.node, this.chain, signer, config, log, () => this.stopping, journal, this.metrics, program => this.programNamed(program));
		this.signHeartbeat = createSigner(config.keypair);
	}

	/** `onJournalLost`: another process took the settlement journal's lock; this Cranker signs nothing more, and should stop. */
	static async create(config: CrankerConfig, log: Logger, onJournalLost: () => void = () => {}): Promise<Cranker> {
		const signer = await createKeyPairSignerFromBytes(config.keypair.secretKey);
		if (!config.roles.includes("settlement")) return new Cranker(config, signer, log, null);
		const journal = await SettlementJournal.open(config.stateDir, signer.address, {
			onLockLost: err => {
				log.error("the settlement journal's lock was lost to another process: this Cranker signs no more settlements", { error: err.message });
				onJournalLost();
			}
		});
		log.info("settlement journal open", { file: journal.file, settlementsThatMayLand: journal.size });
		return new Cranker(config, signer, log, journal);
	}

	start(): void {
		// The origin only: a URL can carry credentials.
		const node = new URL(this.config.nodeUrl);
		this.log.info("cranker starting", { crankerPubkey: this.pubkey, roles: this.config.roles, node: node.origin });
		// Request signatures hold a minute; the worker key, read on the way, admits its reader to every worker route.
		if (node.protocol === "http:" && !isLoopbackHost(node.hostname)) this.log.warn("NODE_URL is plain http to another host: anyone on the way can read the worker API key (use https)", { node: node.origin });
		this.heartbeatLoop = this.every(
			this.config.heartbeatIntervalMs,
			async () => {
				this.heartbeatAgain = false;
				await this.heartbeat();
				// Once per round at most: answers that keep changing their minds (a hostile Node, replicas set differently) wait for the interval.
				if (this.heartbeatAgain && !this.heartbeatsStopping) await this.heartbeat();
			},
			() => this.heartbeatsStopping,
			wake => (this.wakeHeartbeat = wake)
		);
		if (this.settler) this.loops.push(this.settlementLoop(this.settler), this.followWorkEvents());
		if (this.config.roles.some(role => role === "verifier" || role === "submitter")) this.loops.push(this.every(this.config.pollIntervalMs, () => this.tinRound(), () => this.stopping));
	}

	/** Whether its latest heartbeat was accepted. */
	get isOnline(): boolean {
		return this.online;
	}

	/** Finishes (or releases) the work in hand, then returns. */
	async stop(): Promise<void> {
		this.stopping = true;
		this.stream?.abort();
		for (const wake of this.sleepers) wake();
		await Promise.all(this.loops);
		this.heartbeatsStopping = true;
		for (const wake of this.sleepers) wake();
		await this.heartbeatLoop;
		await this.journal?.close();
		this.log.info("cranker stopped", { crankerPubkey: this.pubkey });
	}

	// --- heartbeats -------------------------------------------------------------------------------

	/**
	 * Tells the operator, once the chain answers, of each of CRANKER_MINTS it can never pay in:
	 * such a mint reads 0 at every heartbeat and would otherwise pass unseen.
	 */
	private async checkMints(): Promise<void> {
		try {
			for (const problem of await this.chain.mintProblems(this.config.mints)) this.log.warn(`CRANKER_MINTS: ${problem}; it offers none of it`);
		} catch {
			// The balances' read tells of the RPC failing; the check runs again at the next heartbeat.
			this.mintCheck = null;
		}
	}

	private async heartbeat(): Promise<void> {
		// Only a settlement Cranker pays out: the others report no liquidity.
		if (this.settler) {
			// Not awaited: while the RPC hangs, a heartbeat waits one RPC timeout, not two.
			this.mintCheck ??= this.checkMints();
			const balances = await this.chain.tokenBalances(this.signer.address, this.config.mints).catch(err => {
				this.log.warn("could not read token balances; reporting the last known ones", { error: (err as Error).message });
				return null;
			});
			if (balances) {
				// More on chain than the last reading: work passed over for want of it, the oldest first, may be payable now.
				if ([...balances].some(([mint, amount]) => amount > (this.balancesRead.get(mint) ?? 0n))) {
					this.pagesFromOldest = true;
					this.workAnnounced = true;
					this.wakeSettlement();
				}
				this.balancesRead = balances;
				this.liquidity = new Map(balances);
			}
		}
		const sentAtMs = Math.max(Date.now(), this.lastAcceptedAtMs + 1);
		const sentAt = new Date(sentAtMs).toISOString();
		const { roles } = this.config;
		try {
			const answer = await this.node.heartbeat({
				crankerPubkey: this.pubkey,
				roles,
				liquidity: this.sameProgram ? [...this.liquidity].map(([tokenMintAddress, available]) => ({ tokenMintAddress, available: available.toString() })) : [],
				version: CRANKER_VERSION,
				sentAt,
				signature: this.signHeartbeat(buildHeartbeatMessage({ crankerPubkey: this.pubkey, roles, sentAt }))
			});
			this.lastAcceptedAtMs = sentAtMs;
			if (this.settler) this.programNamed((answer as { settlementProgramId?: unknown } | null)?.settlementProgramId);
			if (!this.online) {
				this.log.info("online", { crankerPubkey: this.pubkey });
				this.online = true;
				// Work may have been announced while it could not take it.
				this.wakeSettlement();
			}
			this.metrics.heartbeats.inc({ result: "accepted" });
		} catch (err) {
			this.online = false;
			this.metrics.heartbeats.inc({ result: "failed" });
			this.log.warn("heartbeat not accepted", { error: (err as Error).message, type: (err as NodeApiError).type });
		}
	}

	private get sameProgram(): boolean {
		return this.nodeProgram === null || this.nodeProgram === this.config.settlementProgramId;
	}

	/**
	 * The program a heartbeat or payout answer named. One that names none (an older replica's, in a
	 * rolling upgrade) changes nothing: it would otherwise let work in between two that name another.
	 */
	private programNamed(named: unknown): void {
		if (typeof named !== "string" || named === this.nodeProgram) return;
		const wasSame = this.sameProgram;
		this.nodeProgram = named;
		if (this.sameProgram === wasSame) return;
		if (this.sameProgram) {
			this.log.info("the Node now checks settlements against this Cranker's program: taking work again", { settlementProgramId: named });
			this.wakeSettlement();
			return;
		}
		this.log.error("the Node checks settlements against another program than SETTLEMENT_PROGRAM_ID: this Cranker takes no work until they are the same", { node: named, own: this.config.settlementProgramId });
		// Its liquidity withdrawn at once, not a heartbeat interval later: again in this round, or the sleeping loop woken.
		this.heartbeatAgain = true;
		this.wakeHeartbeat();
	}

	// --- settlement -------------------------------------------------------------------------------

	private async settlementLoop(settler: Settler): Promise<void> {
		while (!this.stopping) {
			let worked = false;
			this.workAnnounced = false;
			try {
				if (this.online && this.sameProgram) {
					worked = await this.settleNext(settler);
					if (this.sameProgram && performance.now() >= this.nextOrphanCheck) {
						this.nextOrphanCheck = performance.now() + ORPHAN_CHECK_EVERY * this.config.pollIntervalMs;
						await settler.finishOrphans();
					}
				}
			} catch (err) {
				this.log.warn("settlement round failed; retrying", { error: (err as Error).message });
			}
			const pollMs = this.streamUp ? Math.max(this.config.pollIntervalMs, STREAM_POLL_INTERVAL_MS) : this.config.pollIntervalMs;
			if (!worked && !this.workAnnounced) await this.sleep(pollMs, undefined, wake => (this.wakeSettlement = wake));
		}
	}

	/**
	 * Follows the Node's VERIFIED events until stop(), reconnecting with Last-Event-ID (so that an
	 * event committed while it was away is still delivered) and backoff. A failure only logs: the
	 * polling goes on without it.
	 */
	private async followWorkEvents(): Promise<void> {
		const parser = new SseParser();
		for (let failures = 0; !this.stopping; failures++) {
			// An id the Node never sends (a man in the middle's, a broken Node's) would be refused as a header for good.
			if (parser.lastEventId && !STREAM_ID.test(parser.lastEventId)) parser.lastEventId = "";
			const connection = (this.stream = new AbortController());
			const silence = new SilenceWatch(STREAM_IDLE_MS, () => connection.abort(new Error(`no data for ${STREAM_IDLE_MS} ms`)));
			let failure: unknown = null;
			try {
				const body = await this.node.eventStream(WORK_EVENTS, parser.lastEventId, connection.signal);
				this.streamUp = true;
				failures = 0;
				this.log.info("following the Node's event stream", { resumedAfter: parser.lastEventId || null });
				// Read through a pipe that the connection's abort ends: fetch's abort did not always reach a
				// body being read, and a stop then waited for the stream for good.
				for await (const event of readEvents(body.pipeThrough(new TransformStream<Uint8Array, Uint8Array>(), { signal: connection.signal }), parser, silence)) {
					// Work this Cranker cannot pay does not wake it: a flood of it would have it read pages for nothing.
					const id = event.type === INTENT_EVENT_TYPE ? this.payableAnnounced(event.data) : null;
					// Nor one it just gave back: its own release is announced too.
					if (id === null || this.skipUntil.has(id)) continue;
					if (id) rememberLatest(this.announced, id, true, ANNOUNCED_MAX);
					this.workAnnounced = true;
					this.wakeSettlement();
				}
			} catch (err) {
				failure = connection.signal.aborted && connection.signal.reason instanceof Error ? connection.signal.reason : err;
			} finally {
				silence.stop();
				this.streamUp = false;
			}
			if (this.stopping) break;
			if (refusedLastEventId(failure)) {
				// Its log ends before that id (a store restored from a backup, say): asking with it again
				// would be refused for good. From now on; the polling covers what came in between.
				this.log.warn("the Node refused the stream's Last-Event-ID; following it from now", { lastEventId: parser.lastEventId });
				parser.lastEventId = "";
			}
			const retryInMs = Math.min((parser.retry ?? 1000) * 2 ** failures, STREAM_MAX_BACKOFF_MS);
			this.log.warn("event stream down; polling every POLL_INTERVAL_MS until it is back", { error: failure === null ? "ended by the Node" : (failure as Error).message, retryInMs });
			await this.sleep(retryInMs);
		}
	}

	/** Stopping, or a payout answer of this round named another program: no more leases this round. */
	private get leasingHalted(): boolean {
		return this.stopping || !this.sameProgram;
	}

	/**
	 * Settles the first work item this Cranker can pay: one the event stream announced first (it may
	 * lie far past the cursor), then the pages from where the last round stopped; false when none.
	 */
	private async settleNext(settler: Settler): Promise<boolean> {
		const now = performance.now();
		for (const [id, until] of this.skipUntil) if (until <= now) this.skipUntil.delete(id);
		if (await this.settleAnnounced(settler)) return true;
		for (let page = 0; page < WORK_PAGES_PER_ROUND && !this.leasingHalted; page++) {
			const outcome = await this.settleOnPage(settler);
			if (outcome === "settled") return true;
			if (outcome === "end") return false;
		}
		return false;
	}

	/**
	 * The newest ANNOUNCED_PER_ROUND announced intents (the likeliest still free), each read as it is
	 * now and taken out: true once one is settled. Those announced meanwhile wait for the next round.
	 */
	private async settleAnnounced(settler: Settler): Promise<boolean> {
		const newest = [...this.announced.keys()].slice(-ANNOUNCED_PER_ROUND).reverse();
		for (const id of newest) this.announced.delete(id);
		for (const id of newest) {
			if (this.leasingHalted) return false;
			if (this.skipUntil.has(id)) continue;
			// No retries: one slow answer must not hold the round, nor a Node that is down stop() for long.
			const intent = await this.node.intent(id, 0).catch(err => {
				if (err instanceof NodeApiError && err.status === 0) throw err;
				if (!(err instanceof NodeApiError && err.status === 404)) this.log.warn("could not read an announced intent", { intent: id, error: (err as Error).message });
				return null;
			});
			if (intent?.receiverStatus === "VERIFIED" && isWeighable({ intent, leaseTtlMs: 0 }) && (await this.trySettle(settler, intent))) return true;
		}
		return false;
	}

	/**
	 * One page of work after the cursor. Settled: the cursor stays, so the rest of the page is read
	 * again next. Otherwise the cursor moves past the page ("more"), or back to the oldest after the
	 * last page ("end").
	 */
	private async settleOnPage(settler: Settler): Promise<"settled" | "more" | "end"> {
		if (this.pagesFromOldest) {
			this.pagesFromOldest = false;
			this.workCursor = null;
		}
		let work: IntentWorkItem[];
		try {
			work = await this.node.intentWork(WORK_PAGE_ITEMS, this.workCursor ?? undefined);
		} catch (err) {
			// Refused at this place in the list: its intent is unknown to this Node (its store was
			// replaced, say), or the gateway is of a version before `after=`. The next round reads from
			// the oldest. Not this one: before `after=`, it would read the first page again and again.
			if (err instanceof NodeApiError && err.status === 422 && this.workCursor !== null) {
				this.log.warn("the Node refused this Cranker's place in the work list; the next round reads from the oldest", { after: this.workCursor });
				this.workCursor = null;
				return "end";
			}
			throw err;
		}
		for (const { intent } of work.filter(isWeighable)) {
			if (this.leasingHalted) return "end";
			if (await this.trySettle(settler, intent)) return "settled";
		}
		const last = work[work.length - 1]?.intent?.id;
		this.workCursor = work.length === WORK_PAGE_ITEMS && typeof last === "string" ? last : null;
		return this.workCursor === null || this.pagesFromOldest ? "end" : "more";
	}

	/** Settles `intent` if this Cranker can pay it and has not just given it back: true once settled. */
	private async trySettle(settler: Settler, intent: MempoolIntent): Promise<boolean> {
		if (!this.canPay(intent) || this.skipUntil.has(intent.id)) return false;
		let result;
		try {
			result = await settler.settle(intent);
		} catch (err) {
			// An item that fails each time must not stop the ones behind it; a Node that is down stops the round.
			if (err instanceof NodeApiError && err.status === 0) throw err;
			this.log.warn("settlement failed; trying the next work item", { intent: intent.id, error: (err as Error).message });
			return false;
		}
		if (result === "lost") return false; // another Cranker leased it first
		if (result === "released" || result === "unsigned") {
			this.skipUntil.set(intent.id, performance.now() + SKIP_RELEASED_MS);
			return false;
		}
		if (result === "confirmed") {
			// Until the next reading. That one may have come after the payment already, so the
			// difference can fall short of 0, which is no balance (and no amount a heartbeat may carry).
			const left = (this.liquidity.get(intent.tokenMintAddress) ?? 0n) - BigInt(intent.amount);
			this.liquidity.set(intent.tokenMintAddress, left > 0n ? left : 0n);
		}
		return true;
	}

	private canPay(intent: MempoolIntent): boolean {
		return this.canPayIn(intent.tokenMintAddress, intent.amount, intent.senderAuthorizationExpiresAt);
	}

	private canPayIn(mint: string, amount: string, expiresAt: string): boolean {
		return (this.liquidity.get(mint) ?? 0n) >= BigInt(amount) && Date.parse(expiresAt) > Date.now();
	}

	/**
	 * The id of the intent an event announces (its public view) when this Cranker could pay it, null
	 * when it could not, "" when the event does not tell (the pages will).
	 */
	private payableAnnounced(data: string): string | null {
		try {
			const view = (JSON.parse(data) as { view?: Partial<Record<keyof PublicMempoolIntent, unknown>> }).view;
			const { id, tokenMintAddress: mint, amount, expiresAt } = view ?? {};
			if (typeof id !== "string" || typeof mint !== "string" || typeof amount !== "string" || !isAmount(amount) || typeof expiresAt !== "string") return "";
			return this.canPayIn(mint, amount, expiresAt) ? id : null;
		} catch {
			return "";
		}
	}

	// --- TIN pipeline -----------------------------------------------------------------------------

	private async tinRound(): Promise<void> {
		if (!this.online) return;
		const { roles } = this.config;
		if (roles.includes("verifier"))
			for (const op of await this.node.tinWork("verification-work")) {
				// The Node refuses an owner's verification of its own operation: another verifier's to give.
				if (op.request.ownerWallet !== this.pubkey) await this.tinStep(op, () => this.verifyOperation(op));
			}
		if (roles.includes("submitter")) {
			for (const op of await this.node.tinWork("fee-work", this.pubkey)) await this.tinStep(op, () => this.commitFee(op));
			for (const op of await this.node.tinWork("registry-work", this.pubkey)) await this.tinStep(op, () => this.advanceRegistry(op));
		}
	}

	/** One stage move; a refusal means another Cranker moved it first, which is fine. */
	private async tinStep(op: TinOperationWork, step: () => Promise<unknown>): Promise<void> {
		if (this.stopping) return;
		try {
			await step();
		} catch (err) {
			if (!(err instanceof NodeApiError) || err.status >= 500 || err.status === 0) throw err;
			this.log.warn("TIN stage refused", { operation: op.id, type: err.type });
		}
	}

	/** An independent check of the owner's signature over the SPEC §5 message. */
	private async verifyOperation(op: TinOperationWork): Promise<void> {
		const { request } = op;
		const valid = isOwnerSigned(request);
		if (valid) await this.moveTinStage(op.id, "verified", { crankerPubkey: this.pubkey });
		else await this.moveTinStage(op.id, "rejected", { crankerPubkey: this.pubkey, reason: "INVALID_SIGNATURE: the owner signature does not verify" });
		this.log.info(valid ? "TIN operation verified" : "TIN operation rejected", { operation: op.id });
	}

	private async commitFee(op: TinOperationWork): Promise<void> {
		const feeAmount = op.intentType === "create" ? this.config.tinCreateFee : this.config.tinUpdateFee;
		await this.moveTinStage(op.id, "fee-committed", { crankerPubkey: this.pubkey, feeAmount });
		this.log.info("TIN fee committed", { operation: op.id, feeAmount });
	}

	/**
	 * FEE_COMMITTED: record the operation on chain, reported before it is sent, and sent only once
	 * the Node shows that report; SUBMITTED: finalize once it landed, fail it once it cannot land.
	 * What this Cranker signed is kept by the id its owner signed (`operationId`) until the owner's
	 * signature expires, landed or not: an operation listed again, under any id and in any state, is
	 * reported and sent the same bytes, and a new transaction is signed only once the kept one can
	 * no longer land and was never seen.
	 */
	private async advanceRegistry(op: TinOperationWork): Promise<void> {
		if (op.status === "FEE_COMMITTED") {
			const problem = this.registryProblem(op);
			// Past the owner's expiry by more than a clock may be off: the Node's own would not take the report either.
			if (problem === "expired" && Date.parse(op.request.expiresAt) + MAX_CLOCK_SKEW_MS <= Date.now()) {
				// Nothing was sent (that waits for the Node to show the report): failed, so that it leaves
				// the work list. A Node that cannot take that now must not hold up the operations behind it.
				const reason = "EXPIRED: the owner's signature expired before the operation was submitted";
				return void (await this.moveTinStage(op.id, "failed", { crankerPubkey: this.pubkey, reason }).catch((err: Error) => this.log.warn("could not fail an expired TIN operation", { operation: op.id, error: err.message })));
			}
			if (problem) return void this.log.warn(`TIN operation not submitted: ${problem}`, { operation: op.id });
			const kept = this.registryTransactions.get(op.operationId);
			// The height before the signature: a transaction not seen after its blockhash expired never lands.
			const reusable = kept && ((await this.chain.blockHeight()) <= kept.lastValidBlockHeight || (await this.chain.signatureState(kept.signature)).kind !== "unknown");
			const signed = reusable ? kept : await this.signRegistry(op);
			if (!signed) return void this.log.warn("TIN operation not submitted: this Cranker holds as many unexpired registry transactions as it keeps", { operation: op.id });
			const recorded = await this.moveTinStage(op.id, "submitted", { crankerPubkey: this.pubkey, transactionSignature: signed.signature });
			if (recorded.status !== "SUBMITTED" || recorded.submittedBy !== this.pubkey || recorded.transactionSignature !== signed.signature)
				return void this.log.warn("the Node does not show this submission: not sent", { operation: op.id, transactionSignature: signed.signature });
			return this.sendRegistry(op, signed, reusable);
		}
		const signature = op.transactionSignature;
		if (op.submittedBy !== this.pubkey || !signature) return;
		// Another signature than the one kept (a report recorded late, say) is acted on as one signed
		// before a restart, and the kept one stays: nothing on this path signs anything.
		const kept = this.registryTransactions.get(op.operationId);
		const own = kept?.signature === signature ? kept : undefined;
		const height = await this.chain.blockHeight();
		const state = await this.chain.signatureState(signature);
		if (state.kind === "landed") {
			await this.moveTinStage(op.id, "finalized", { crankerPubkey: this.pubkey, transactionSignature: signature });
			this.log.info("TIN operation finalized", { operation: op.id });
		} else if (state.kind === "failed") {
			await this.moveTinStage(op.id, "failed", { crankerPubkey: this.pubkey, reason: `ONCHAIN_FAILED: ${state.detail}` });
		} else if (state.kind === "unknown") {
			// Not seen: sent again while it can land, failed once it cannot, so that its owner can try
			// again. One signed before this process started: once unseen for REGISTRY_GIVE_UP_MS by
			// this clock and REGISTRY_GIVE_UP_BLOCKS by the chain's (a halted cluster keeps blockhashes alive).
			if (own && height <= own.lastValidBlockHeight) return this.sendRegistry(op, own, true);
			if (own) this.forgetRegistry(op.operationId);
			else {
				const first = this.registryUnseenSince.get(op.operationId);
				if (!first) return void rememberLatest(this.registryUnseenSince, op.operationId, { at: performance.now(), height }, REGISTRY_TRANSACTIONS_MAX);
				if (performance.now() - first.at < REGISTRY_GIVE_UP_MS || height < first.height + REGISTRY_GIVE_UP_BLOCKS) return;
				this.registryUnseenSince.delete(op.operationId);
				// The one this Cranker kept may be the one that landed: it does not say otherwise.
				if (kept && (await this.chain.signatureState(kept.signature)).kind !== "unknown")
					return void this.log.error("TIN operation listed with a transaction never seen, while the one this Cranker sent for it is on chain: left for an operator", { operation: op.id });
			}
			await this.moveTinStage(op.id, "failed", { crankerPubkey: this.pubkey, reason: "NOT_LANDED: the registry transaction was not seen before its blockhash expired" });
		}
	}

	/**
	 * Why this Cranker does not put `op` on chain, on the Node's word alone: the fee its own, and
	 * the operation its owner's, signed (checked as a verifier checks it) and still valid. "expired":
	 * the owner's signature is past its expiry. Null: it may.
	 */
	private registryProblem(op: TinOperationWork): string | null {
		const { request } = op;
		if (op.feeCommittedBy !== this.pubkey) return "its fee was committed by another Cranker";
		if (op.operationId !== request.operationId) return "its id is not the one its owner signed";
		if (!isOwnerSigned(request)) return "its owner signature does not verify";
		if (!isIsoTime(request.issuedAt) || !isIsoTime(request.expiresAt)) return "its owner signed no time the Node takes";
		const window = checkValidityWindow(request.issuedAt, request.expiresAt, Date.now());
		return window.ok ? null : window.reason === "EXPIRED" ? "expired" : window.detail;
	}

	/**
	 * A new registry transaction for `op`, kept until its owner's signature expires; none while as
	 * many unexpired ones are kept as REGISTRY_TRANSACTIONS_MAX (a Node listing operations without
	 * end would otherwise push out one that may still land, and have it signed again).
	 */
	private async signRegistry(op: TinOperationWork): Promise<RegistryTransaction | undefined> {
		if (this.registryTransactions.size >= REGISTRY_TRANSACTIONS_MAX)
			for (const [operationId, kept] of this.registryTransactions) if (kept.keepUntil < Date.now()) this.forgetRegistry(operationId);
		if (this.registryTransactions.size >= REGISTRY_TRANSACTIONS_MAX) return undefined;
		const lifetime = await this.chain.latestBlockhash();
		const transaction = await signMemoTransaction(this.signer, registryMemo(op.operationId, op.request.routeCommitment), lifetime);
		const signed = { transaction, signature: getSignatureFromTransaction(transaction), lastValidBlockHeight: lifetime.lastValidBlockHeight, keepUntil: Date.parse(op.request.expiresAt) + MAX_CLOCK_SKEW_MS };
		this.registryTransactions.set(op.operationId, signed);
		return signed;
	}

	private forgetRegistry(operationId: string): void {
		this.registryTransactions.delete(operationId);
		this.registryUnseenSince.delete(operationId);
	}

	/**
	 * Sends `signed` (`again`: sent before, or kept: the same bytes land at most once). A first send
	 * the chain says can never land fails its operation; a resend's answer proves nothing of the
	 * first (its blockhash may be too old to take again while the first landed): the expiry check decides.
	 */
	private async sendRegistry(op: TinOperationWork, signed: RegistryTransaction, again = false): Promise<void> {
		const outcome = await this.chain.send(signed.transaction).catch((err: Error) => ({ kind: "error" as const, detail: err.message }));
		this.log.info("TIN operation submitted", { operation: op.id, transactionSignature: signed.signature, outcome: outcome.kind });
		if (again || (outcome.kind !== "expired" && outcome.kind !== "refused")) return;
		this.forgetRegistry(op.operationId);
		await this.moveTinStage(op.id, "failed", { crankerPubkey: this.pubkey, reason: `NOT_LANDED: the registry transaction was ${outcome.kind}` });
	}

	private async moveTinStage(id: string, stage: TinStage, body: StageRequest): Promise<TinOperationWork> {
		const answer = await this.node.tinStage(id, stage, body);
		this.metrics.tinStages.inc({ stage });
		return answer;
	}

	// --- plumbing ---------------------------------------------------------------------------------

	private async every(intervalMs: number, round: () => Promise<void>, done: () => boolean, onWake?: (wake: () => void) => void): Promise<void> {
		while (!done()) {
			const startedAt = performance.now();
			await round().catch(err => this.log.warn("round failed; retrying", { error: (err as Error).message }));
			// A fixed rate: a slow round does not push the next one later. Timed on the monotonic clock:
			// by the wall clock, one set back during a round would hold the next (a heartbeat) for as long.
			await this.sleep(Math.max(0, intervalMs - (performance.now() - startedAt)), done, onWake);
		}
	}

	/** `onWake` receives what ends this sleep early (stop() ends every sleep). */
	private sleep(ms: number, done: () => boolean = () => this.stopping, onWake?: (wake: () => void) => void): Promise<void> {
		if (done()) return Promise.resolve();
		return new Promise(resolve => {
			const wake = () => {
				clearTimeout(timer);
				this.sleepers.delete(wake);
				resolve();
			};
			const timer = setTimeout(wake, ms);
			this.sleepers.add(wake);
			onWake?.(wake);
		});
	}
}
