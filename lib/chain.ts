/**
 * Reading Solana through JSON-RPC (@solana/kit): block height, slots, a signature's status, a
 * transaction's settlement content and token balances. The Node reads the chain itself before it
 * lets a submission go (SPEC §2.4) and before it publishes a Cranker's liquidity; the Cranker
 * builds on the same reader. Every call has a deadline, so a hung RPC node cannot stall a caller.
 */
import { createSolanaRpcFromTransport, isSolanaError, signature as toSignature, SOLANA_ERROR__RPC__TRANSPORT_HTTP_ERROR, type Address, type Rpc, type SolanaRpcApi } from "@solana/kit";
import { AccountState, getTokenDecoder, TOKEN_PROGRAM_ADDRESS } from "@solana-program/token";
import type { ChainObservation, SettlementReading, SignatureStatus } from "./chain-evidence";
import { associatedTokenAccount, readFetchedSettlementTransaction, type SettlementContents } from "./settlement";
import { ServiceError } from "./errors";
import { isBase58OfLength } from "./encoding";
import { ConditionStreaks, type ConditionLog } from "./failure-streak";
import { endpointsOnCluster, PUBLIC_CLUSTERS, UNREADABLE } from "./clusters";
import { AnswerTooLargeError } from "./json-answer";
import { cappedTransport } from "./rpc-transport";
import { SharedReads } from "./shared-reads";

/**
 * The Node's chain reads end within this: a check makes at most three, well within the broker's
 * 10 s request timeout, and a slower RPC is answered 503 CHAIN_UNAVAILABLE rather than held on to.
 */
const NODE_READ_TIMEOUT_MS = 2500;

/**
 * The Node's longest answer is a settlement transaction with its meta: a few KB, with logs cut at
 * 10 KB on chain. One made to be longer (inner calls with large data) is read as unreadable, which
 * lets nothing go (ChainReader.observe); an answer of 256 KB holds the event loop a quarter of a
 * second at most.
 */
const NODE_MAX_ANSWER_BYTES = 256 * 1024;

/** The most accounts one `getMultipleAccounts` may ask for (the RPC's limit). */
export const MAX_ACCOUNTS_PER_READ = 100;

/** An owner's token account of a mint: what it can pay out of that mint. */
export interface TokenHolding {
	owner: Address;
	mint: Address;
	/** Its associated token account (lib/settlement.ts associatedTokenAccount). */
	account: Address;
}

/** How many signatures' first disagreement the Node keeps, to warn at the second. */
const DISAGREEMENTS_KEPT = 1000;

/** How long a passed cluster check holds: an endpoint's provider may be pointed elsewhere later. */
const CLUSTER_RECHECK_MS = 10 * 60_000;

/** How often a failed cluster check is tried again for the slot's sake (every slot poll would read every genesis hash). */
const CLUSTER_RETRY_MS = 5000;

/**
 * The Node's view of the chain through every RPC endpoint of SOLANA_RPC_URL, on the cluster
 * SOLANA_CLUSTER names; null without one (nothing can be proven then).
 */
export function nodeChain(rpcUrls: readonly string[], cluster: string, log: ConditionLog): NodeChain | null {
	return rpcUrls.length ? new NodeChain(rpcUrls, cluster, log) : null;
}

/** An answer that should have been a block height or slot and was not. */
class NotACountError extends Error {}

/**
 * Why a read failed, in fixed words: an endpoint's own (an error message, a body) never reach the
 * log. Kit copies a JSON-RPC error's `data` into the error's context, so even its code is shown
 * only when it is a number.
 */
export function readFailure(err: unknown): string {
	const shown = (value: unknown) => (Number.isSafeInteger(value) ? ` ${value as number}` : "");
	if (isSolanaError(err, SOLANA_ERROR__RPC__TRANSPORT_HTTP_ERROR)) return `HTTP${shown(err.context.statusCode)}`;
	if (isSolanaError(err)) return `RPC error${shown(err.context.__code)}`;
	if (err instanceof NotACountError) return "no height or slot in the answer";
	return err instanceof Error ? err.name : "Error";
}

/**
 * A height or slot as the RPC answered it: @solana/kit makes integers bigints and passes anything
 * else through, and a height that is not a number (NaN once converted) would pass every comparison
 * as false, a submission that can never be shown dead.
 */
function counted(answer: unknown): bigint {
	if (typeof answer !== "bigint" || answer < 0n) throw new NotACountError("The RPC answered something other than a block height or slot");
	return answer;
}

/**
 * How much of an RPC answer is read; a longer one fails the read (AnswerTooLargeError). Kit parses
 * an answer on the event loop, making every integer a bigint, which costs about a second per MB of
 * integers an endpoint chooses to send: each bound is also one on how long an answer can hold the
 * process. By default, the Cranker's, for its longest answers: a page of 1,000 signatures with
 * their memos (about 6 MB at worst).
 */
const MAX_RPC_ANSWER_BYTES = 8 * 1024 * 1024;

/** For answers of a fixed small size: a height, a slot, a genesis hash, one signature's status. */
const SHORT_ANSWER_BYTES = 16 * 1024;
/** For getTransaction: a transaction with its status and logs (the Node's own bound for every answer). */
const TRANSACTION_ANSWER_BYTES = 256 * 1024;
/** How long a transaction an endpoint showed is kept (it does not change; the bound is memory's). */
const SHOWN_TRANSACTION_KEPT_MS = 10 * 60_000;

export const base64Bytes = (text: string) => new Uint8Array(Buffer.from(text, "base64"));

/** An answer from a backend behind a slot the same endpoint had shown: it cannot tell what landed since. */
export class BackendBehindError extends Error {
	override name = "BackendBehindError";
}

export type SignatureState = { kind: "landed"; slot: bigint } | { kind: "failed"; slot: bigint; detail: string } | { kind: "pending" } | { kind: "unknown" };

export class ChainReader {
	protected readonly rpc: Rpc<SolanaRpcApi>;
	/** The same endpoint, for the answers of a fixed small size (SHORT_ANSWER_BYTES). */
	private readonly shortRpc: Rpc<SolanaRpcApi>;
	/** The same endpoint, for one transaction (TRANSACTION_ANSWER_BYTES). */
	private readonly transactionRpc: Rpc<SolanaRpcApi>;
	/** The latest slot a position() answer stood at: the floor of the next one. */
	private positionSeen = 0n;
	/**
	 * Transactions this endpoint showed to be the one their signature names, as read: a confirmed
	 * transaction does not change, so a report repeated (one of up to 256 KB, say) is not fetched
	 * and parsed again. What was not shown (none yet, other bytes) is read afresh each time.
	 */
	private readonly shownTransactions = new SharedReads<{ failed: boolean; contents: SettlementContents } | null>(SHOWN_TRANSACTION_KEPT_MS, read => read !== null && !read.contents.notShown);

	constructor(
		rpcUrl: string,
		private readonly timeoutMs = 10_000,
		maxAnswerBytes = MAX_RPC_ANSWER_BYTES
	) {
		this.rpc = createSolanaRpcFromTransport(cappedTransport(rpcUrl, maxAnswerBytes));
		this.shortRpc = createSolanaRpcFromTransport(cappedTransport(rpcUrl, Math.min(SHORT_ANSWER_BYTES, maxAnswerBytes)));
		this.transactionRpc = createSolanaRpcFromTransport(cappedTransport(rpcUrl, Math.min(TRANSACTION_ANSWER_BYTES, maxAnswerBytes)));
	}

	protected get deadline() {
		return { abortSignal: AbortSignal.timeout(this.timeoutMs) };
	}

	blockHeight(): Promise<bigint> {
		return this.shortRpc.getBlockHeight({ commitment: "confirmed" }).send(this.deadline).then(counted);
	}

	genesisHash(): Promise<string> {
		return this.shortRpc.getGenesisHash().send(this.deadline);
	}

	slot(): Promise<bigint> {
		return this.shortRpc.getSlot({ commitment: "confirmed" }).send(this.deadline).then(counted);
	}

	/** Unix seconds of `slot`'s block; null for a block from before the cluster kept block times. */
	blockTime(slot: bigint): Promise<bigint | null> {
		return this.shortRpc.getBlockTime(slot).send(this.deadline);
	}

	/** The first slot whose transactions the endpoint still shows: its ledger, and long-term storage if it has one. */
	firstAvailableSlot(): Promise<bigint> {
		return this.shortRpc.getFirstAvailableBlock().send(this.deadline).then(counted);
	}

	/**
	 * The block height and the slot it stood at, in one answer: what the endpoint's later answers
	 * must have seen. Never behind a position this reader was shown before (minContextSlot): a
	 * backend behind the one that answered last refuses instead.
	 */
	async position(): Promise<{ height: bigint; slot: bigint }> {
		const floor = this.positionSeen;
		const { blockHeight, absoluteSlot } = await this.shortRpc.getEpochInfo({ commitment: "confirmed", ...(floor > 0n ? { minContextSlot: floor } : {}) }).send(this.deadline);
		const position = { height: counted(blockHeight), slot: counted(absoluteSlot) };
		if (position.slot > this.positionSeen) this.positionSeen = position.slot;
		return position;
	}

	/**
	 * Searches the whole history; `pending` is a transaction seen in a block not yet confirmed. With
	 * `seenSlot`, an answer from a backend that has not reached that slot is refused (one endpoint's
	 * URL may lead to several backends, each as far as it got): it cannot tell what landed since.
	 */
	async signatureState(signature: string, seenSlot?: bigint): Promise<SignatureState> {
		const { context, value } = await this.shortRpc.getSignatureStatuses([toSignature(signature)], { searchTransactionHistory: true }).send(this.deadline);
		if (seenSlot !== undefined && !(typeof context?.slot === "bigint" && context.slot >= seenSlot)) throw new BackendBehindError(`the RPC answered a signature's status as of slot ${String(context?.slot)}, before slot ${seenSlot}, which it had shown: a backend behind`);
		const status = value[0];
		if (!status) return { kind: "unknown" };
		if (status.confirmationStatus === "processed") return { kind: "pending" };
		if (status.err) return { kind: "failed", slot: status.slot, detail: JSON.stringify(status.err, (_, v) => (typeof v === "bigint" ? v.toString() : v)) };
		return { kind: "landed", slot: status.slot };
	}

	/**
	 * What a confirmed transaction did, read from its wire bytes once they are shown to be that
	 * transaction (an unreadable reading otherwise); null when there is none, or when it failed and
	 * `includeFailed` is not set.
	 */
	async transactionContents(signature: string, includeFailed = false): Promise<SettlementContents | null> {
		const read = await this.shownTransactions.get(signature, async () => {
			const fetched = await this.transactionRpc.getTransaction(toSignature(signature), { encoding: "base64", commitment: "confirmed", maxSupportedTransactionVersion: 0 }).send(this.deadline);
			// Any answer that is no transaction (null, or whatever a lying endpoint sends instead) is none.
			return fetched ? { failed: !!fetched.meta?.err, contents: readFetchedSettlementTransaction(fetched.transaction[0], signature) } : null;
		});
		return read && (includeFailed || !read.failed) ? read.contents : null;
	}

	/**
	 * What the chain shows of a submission: the block height first, then the signature's status
	 * (a transaction not seen after that height had passed its last landing height can never land),
	 * and for a transaction the chain has (landed or failed) what `read` makes of its content. With
	 * `history`, for a signature the chain does not know, where its history starts: a pruned
	 * ledger does not know landed transactions either.
	 */
	async observe(signature: string, read?: (contents: SettlementContents) => Promise<SettlementReading>, history = false): Promise<ChainObservation> {
		const blockHeight = Number(await this.blockHeight());
		const status: SignatureStatus = (await this.signatureState(signature)).kind;
		if (status === "unknown" && history) return { blockHeight, status, historyFrom: Number(await this.firstAvailableSlot()) };
		if ((status !== "landed" && status !== "failed") || !read) return { blockHeight, status };
		// Unreadable or not given yet: taken for this settlement, the answer that lets nothing go.
		let content: SettlementReading;
		try {
			const contents = await this.transactionContents(signature, true);
			// Listed and no transaction given: a backend a moment behind its statuses (a CONFIRMED is then not on chain yet, not refused).
			content = contents ? await read(contents) : { mismatches: ["the endpoint gives no transaction for it yet"], related: true, notGiven: true };
		} catch (err) {
			// Longer than the reader's bound, a transaction is crafted (a settlement is a few KB): it is
			// the transaction that cannot be read, not the endpoint.
			if (!(err instanceof AnswerTooLargeError)) throw err;
			content = { mismatches: ["the transaction could not be read"], related: true };
		}
		return { blockHeight, status, content };
	}

	/**
	 * What the owner can pay out of its associated token account of each mint (classic SPL Token):
	 * 0 for an account that does not exist or is frozen. One `getMultipleAccounts` of at most 64
	 * accounts, whatever other token accounts others opened for the owner.
	 */
	async tokenBalances(owner: Address, mints: readonly Address[]): Promise<Map<Address, bigint>> {
		const holdings = await Promise.all(mints.map(async mint => ({ owner, mint, account: await associatedTokenAccount(owner, mint) })));
		const amounts = await this.tokenAmounts(holdings);
		return new Map(mints.map((mint, i) => [mint, amounts[i]]));
	}

	/** What each holding can pay out, in their order, in one `getMultipleAccounts` (at most MAX_ACCOUNTS_PER_READ). */
	async tokenAmounts(holdings: readonly TokenHolding[]): Promise<bigint[]> {
		const value = await this.accounts(holdings.map(holding => holding.account));
		return holdings.map(({ owner, mint }, i) => {
			const account = value[i];
			if (!account || account.owner !== TOKEN_PROGRAM_ADDRESS) return 0n;
			const token = getTokenDecoder().decode(base64Bytes(account.data[0]));
			return token.mint === mint && token.owner === owner && token.state === AccountState.Initialized ? token.amount : 0n;
		});
	}

	/** The accounts at `addresses`, in their order (null: none there), in one getMultipleAccounts; `dataSlice`: only those bytes of each. */
	protected async accounts(addresses: readonly Address[], dataSlice?: { offset: number; length: number }) {
		const { value } = await this.rpc.getMultipleAccounts(addresses, { encoding: "base64", commitment: "confirmed", ...(dataSlice ? { dataSlice } : {}) }).send(this.deadline);
		// An answer that is not one entry per account asked is a failed read, not empty accounts.
		if (!Array.isArray(value) || value.length !== addresses.length) throw new Error(`getMultipleAccounts answered ${Array.isArray(value) ? value.length : "no"} entries for ${addresses.length} accounts`);
		return value;
	}
}

/**
 * The chain as several RPC endpoints show it, each read on its own. One provider's word is not
 * the chain's: an exit from SUBMITTED is judged on every endpoint's observation
 * (lib/chain-evidence.ts), so an endpoint that lies or lags can delay one, never make one. Every
 * endpoint must answer: one that cannot is the Node's 503 CHAIN_UNAVAILABLE, and a warning names
 * it by its place in SOLANA_RPC_URL, never by its URL, which may carry an API key.
 */
export class NodeChain {
	private readonly readers: ChainReader[];
	/** Endpoints failing and a wrong cluster, told when they start, as reminders, and when they end. */
	private readonly conditions: ConditionStreaks;
	/** When every endpoint last showed the expected genesis hash (performance.now()). */
	private clusterCheckedAt = -Infinity;
	private clusterCheck: Promise<void> | null = null;
	/** Which endpoints the last cluster check found on the cluster, and when the last failed one ended (performance.now()). */
	private onCluster: readonly boolean[];
	private clusterFailedAt = -Infinity;
	/** Signatures the endpoints disagreed on at their last read (a bounded few). */
	private readonly disagreedOn = new Set<string>();

	constructor(
		rpcUrls: readonly string[],
		private readonly cluster: string,
		private readonly log: ConditionLog
	) {
		this.readers = rpcUrls.map(url => new ChainReader(url, NODE_READ_TIMEOUT_MS, NODE_MAX_ANSWER_BYTES));
		this.onCluster = rpcUrls.map(() => false);
		this.conditions = new ConditionStreaks(log);
	}

	/** Each endpoint's block height, in SOLANA_RPC_URL's order. */
	async blockHeights(): Promise<number[]> {
		await this.sameCluster();
		return this.fromEach(async reader => Number(await reader.blockHeight()));
	}

	/** Each endpoint's slot, in SOLANA_RPC_URL's order. */
	async slots(): Promise<number[]> {
		await this.sameCluster();
		return this.fromEach(async reader => Number(await reader.slot()));
	}

	/**
	 * Each endpoint's observation, in SOLANA_RPC_URL's order. Endpoints that disagree on a
	 * signature's status at two reads in a row are told by their places: one of them
	 * holds moves back, and an operator must find which. Once is a landing one endpoint has not
	 * caught up with yet, which the Cranker's retry finds settled.
	 */
	async observe(signature: string, read: (contents: SettlementContents) => Promise<SettlementReading>, history = false): Promise<ChainObservation[]> {
		await this.sameCluster();
		const observations = await this.fromEach(reader => reader.observe(signature, read, history));
		const disagree = new Set(observations.map(o => o.status)).size > 1;
		if (disagree && this.disagreedOn.has(signature))
			this.log.warn(`The endpoints of SOLANA_RPC_URL disagree on transaction ${signature} again: ${observations.map((o, i) => `entry ${i + 1} ${o.status}`).join(", ")}`);
		if (!disagree) this.disagreedOn.delete(signature);
		else {
			if (this.disagreedOn.size >= DISAGREEMENTS_KEPT) this.disagreedOn.clear();
			this.disagreedOn.add(signature);
		}
		return observations;
	}

	/**
	 * Every endpoint must be on the cluster SOLANA_CLUSTER names (its genesis hash, for a public
	 * one; one hash for all, for another name): an endpoint of another cluster shows another
	 * chain's transactions. Until it holds, the moves that need the chain are
	 * 503 CHAIN_UNAVAILABLE. Checked again every CLUSTER_RECHECK_MS, and as a process starts
	 * (ProcessChain), so that a wrong list is told before the first settlement needs it.
	 */
	sameCluster(): Promise<void> {
		if (performance.now() - this.clusterCheckedAt < CLUSTER_RECHECK_MS) return Promise.resolve();
		// One check at a time, whatever number of moves wait on it.
		return (this.clusterCheck ??= this.checkCluster().finally(() => (this.clusterCheck = null)));
	}

	/**
	 * Which endpoints (in SOLANA_RPC_URL's order) the last cluster check found on the cluster, for
	 * what is read without a move: the slot, which leaves out the others' answers. A stale check
	 * is made again in the background, a failed one too once CLUSTER_RETRY_MS have passed (a move
	 * checks at once).
	 */
	endpointsOnCluster(): readonly boolean[] {
		if (performance.now() - this.clusterFailedAt >= CLUSTER_RETRY_MS) void this.sameCluster().catch(() => {});
		return this.onCluster;
	}

	private async checkCluster(): Promise<void> {
		// One that does not answer getGenesisHash (down, or an RPC proxy that refuses the method) is on no known cluster.
		const reads = await Promise.all(
			this.readers.map(reader =>
				reader.genesisHash().then(
					hash => (typeof hash === "string" && isBase58OfLength(hash, 32) ? { hash } : { hash: UNREADABLE, why: "no hash in the answer" }),
					(err: unknown) => ({ hash: UNREADABLE, why: readFailure(err) })
				)
			)
		);
		const hashes = reads.map(read => read.hash);
		const named = PUBLIC_CLUSTERS.get(this.cluster);
		this.onCluster = endpointsOnCluster(hashes, named);
		const onIt = this.onCluster.every(Boolean);
		const readings = reads.map((read, i) => `entry ${i + 1} ${read.hash}${"why" in read ? ` (${read.why})` : ""}`).join(", ");
		const wanted = named ? `${this.cluster} (genesis hash ${named})` : `one for every endpoint, and no public cluster (one must be named: ${[...PUBLIC_CLUSTERS.keys()].join(", ")})`;
		this.conditions.report("The cluster of SOLANA_RPC_URL", !onIt, `is not ${wanted}; moves that need the chain answer 503, and the slot counts only the endpoints on it, until it is`, readings);
		if (onIt) return void (this.clusterCheckedAt = performance.now());
		this.clusterFailedAt = performance.now();
		throw new ServiceError("CHAIN_UNAVAILABLE", `The endpoints of SOLANA_RPC_URL are not all on the cluster ${this.cluster}`, { reason: "RPC_WRONG_CLUSTER", genesisHashes: hashes });
	}

	/**
	 * What each holding can pay out (ChainReader.tokenAmounts), the least that any endpoint shows:
	 * one provider's word cannot raise it. Read in parts of MAX_ACCOUNTS_PER_READ, all at once, so
	 * that the amounts are of one moment as nearly as the endpoints allow: tokens moved from one
	 * holder to another between two reads would count under both.
	 */
	async tokenAmounts(holdings: readonly TokenHolding[]): Promise<bigint[]> {
		await this.sameCluster();
		const parts = [];
		for (let start = 0; start < holdings.length; start += MAX_ACCOUNTS_PER_READ) parts.push(holdings.slice(start, start + MAX_ACCOUNTS_PER_READ));
		const read = await Promise.all(parts.map(part => this.fromEach(reader => reader.tokenAmounts(part))));
		return read.flatMap(readings => readings[0].map((_, i) => readings.reduce((least, reading) => (reading[i] < least ? reading[i] : least), readings[0][i])));
	}

	private fromEach<T>(read: (reader: ChainReader) => Promise<T>): Promise<T[]> {
		return Promise.all(
			this.readers.map(async (reader, i) => {
				const endpoint = `SOLANA_RPC_URL entry ${i + 1}`;
				try {
					const answer = await read(reader);
					this.conditions.report(endpoint, false);
					return answer;
				} catch (err) {
					this.conditions.report(endpoint, true, "cannot be read; moves that need the chain answer 503 until it can", readFailure(err));
					throw err;
				}
			})
		);
	}
}
