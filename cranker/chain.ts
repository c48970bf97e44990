/**
 * The Cranker's view of Solana through JSON-RPC (@solana/kit): the shared reader (lib/chain.ts)
 * plus blockhashes, sending, the memo index and its mints. It answers in the terms the
 * settler decides with; RPC failures surface as thrown errors the settler retries.
 */
import {
	address,
	getBase64EncodedWireTransaction,
	isSolanaError,
	signature as toSignature,
	SOLANA_ERROR__JSON_RPC__SERVER_ERROR_SEND_TRANSACTION_PREFLIGHT_FAILURE,
	SOLANA_ERROR__TRANSACTION_ERROR__ALREADY_PROCESSED,
	SOLANA_ERROR__TRANSACTION_ERROR__BLOCKHASH_NOT_FOUND,
	SOLANA_ERROR__INSTRUCTION_ERROR__UNKNOWN,
	type Address,
	type Base64EncodedWireTransaction,
	type Blockhash,
	type Transaction
} from "@solana/kit";
import { getMintDecoder, getMintSize, TOKEN_PROGRAM_ADDRESS } from "@solana-program/token";
import { base64Bytes, ChainReader } from "../lib/chain";
import { memoFieldHolds } from "../lib/settlement";

export interface Lifetime {
	blockhash: Blockhash;
	lastValidBlockHeight: bigint;
}

/** How a send ended when the RPC answered. */
export type SendOutcome =
	| { kind: "sent" }
	/** Its blockhash is unknown or expired: this transaction can never land. */
	| { kind: "expired" }
	/** Already processed: it landed before (a resend). */
	| { kind: "already-landed" }
	/** The chain refused it (an instruction failed in preflight); it did not land. */
	| { kind: "refused"; detail: string };

/** Kit reports an instruction's failure with a code of the instruction-error domain (4615000–4615999). */
function isInstructionError(err: unknown): boolean {
	if (!isSolanaError(err)) return false;
	const code = err.context.__code as number;
	return code >= SOLANA_ERROR__INSTRUCTION_ERROR__UNKNOWN && code < SOLANA_ERROR__INSTRUCTION_ERROR__UNKNOWN + 1000;
}

/** A credit account's history too long to search: past the page cap, or past the time the lease allows. */
export class HistoryTooLongError extends Error {
	override name = "HistoryTooLongError";
}

/** How long the time an endpoint's history starts at is taken as read (it moves only as the ledger is pruned). */
const HISTORY_START_KEPT_MS = 60_000;

export class Chain extends ChainReader {
	private readonly decimals = new Map<string, number>();
	private historyStart: { at: number; readAt: number } | null = null;

	constructor(
		rpcUrl: string,
		timeoutMs?: number,
		/** Pages of 1,000 of a credit account's history since an intent was signed: a million within a day is past belief. */
		private readonly settlementSearchMaxPages = 1000
	) {
		super(rpcUrl, timeoutMs);
	}

	async latestBlockhash(): Promise<Lifetime> {
		const { value } = await this.rpc.getLatestBlockhash({ commitment: "confirmed" }).send(this.deadline);
		return value;
	}

	/** Sends with preflight, so a transaction the chain would refuse is refused here and never lands. */
	async send(transaction: Transaction): Promise<SendOutcome> {
		try {
			await this.rpc.sendTransaction(getBase64EncodedWireTransaction(transaction) as Base64EncodedWireTransaction, { encoding: "base64", preflightCommitment: "confirmed" }).send(this.deadline);
			return { kind: "sent" };
		} catch (err) {
			if (!isSolanaError(err, SOLANA_ERROR__JSON_RPC__SERVER_ERROR_SEND_TRANSACTION_PREFLIGHT_FAILURE)) throw err;
			const cause = err.cause;
			if (isSolanaError(cause, SOLANA_ERROR__TRANSACTION_ERROR__BLOCKHASH_NOT_FOUND)) return { kind: "expired" };
			if (isSolanaError(cause, SOLANA_ERROR__TRANSACTION_ERROR__ALREADY_PROCESSED)) return { kind: "already-landed" };
			if (isInstructionError(cause)) return { kind: "refused", detail: (cause as Error).message };
			throw err; // any other preflight answer: treat as unknown, the settler keeps watching the signature
		}
	}

	/**
	 * Successful transactions touching `account` that carry `memo` (a settlement's), with the slot
	 * each landed in, newest first,
	 * paging back through the account's history down to `since` (unix seconds; a flood of other
	 * transactions cannot hide one). An RPC that pages on past `settlementSearchMaxPages` is not
	 * believed: the search fails rather than run forever. It fails too when a page would start
	 * after `until` (performance.now()): the caller's lease would lapse before it ends. With
	 * `minContextSlot`, a backend that has not reached that slot refuses instead of answering from behind.
	 */
	async findSettlements(account: Address, memo: string, since: number, until = Infinity, minContextSlot?: bigint): Promise<{ signature: string; slot: number }[]> {
		const found: { signature: string; slot: number }[] = [];
		let before: ReturnType<typeof toSignature> | undefined;
		for (let pages = 0; pages < this.settlementSearchMaxPages; pages++) {
			if (pages > 0 && performance.now() > until) throw new HistoryTooLongError(`the history of ${account} since the intent was signed is longer than this Cranker can read in time (${pages * 1000} transactions read)`);
			const page = await this.rpc.getSignaturesForAddress(account, { limit: 1000, commitment: "confirmed", ...(before ? { before } : {}), ...(minContextSlot !== undefined ? { minContextSlot } : {}) }).send(this.deadline);
			found.push(...page.filter(entry => !entry.err && memoFieldHolds(entry.memo, memo)).map(entry => ({ signature: entry.signature, slot: Number(entry.slot) })));
			const oldest = page[page.length - 1];
			if (page.length < 1000 || (oldest.blockTime !== null && Number(oldest.blockTime) < since)) return found;
			before = oldest.signature;
		}
		throw new HistoryTooLongError(`the RPC lists more than ${this.settlementSearchMaxPages * 1000} transactions of ${account} since the intent was signed`);
	}

	/**
	 * When the endpoint's history starts (unix seconds): the time of its first available block, read
	 * at most once a minute. A search back past it finds nothing there, whatever landed. A block
	 * without a time is from before Solana kept them (a full-history node's first is near genesis):
	 * that history reaches back further than any payment, so 0.
	 */
	async historyStartsAt(): Promise<number> {
		if (this.historyStart && performance.now() - this.historyStart.readAt < HISTORY_START_KEPT_MS) return this.historyStart.at;
		const slot = await this.firstAvailableSlot();
		const time: unknown = await this.blockTime(slot);
		if (time !== null && typeof time !== "bigint" && typeof time !== "number") throw new Error(`the RPC answered no time for its first available block (${slot})`);
		this.historyStart = { at: time === null ? 0 : Number(time), readAt: performance.now() };
		return this.historyStart.at;
	}

	/**
	 * What is wrong with each of `mints` on this chain, for the operator: missing (often another
	 * cluster's mint), or not a classic SPL Token mint. Empty when every one is a mint it can pay in.
	 */
	async mintProblems(mints: readonly Address[]): Promise<string[]> {
		// A mint's bytes and one more, enough to tell a mint by its size, whatever else an address holds.
		const value = await this.accounts(mints, { offset: 0, length: getMintSize() + 1 });
		return mints.flatMap((mint, i) => {
			const account = value[i];
			if (!account) return [`${mint} does not exist on this chain (is SOLANA_RPC_URL on the Node's cluster?)`];
			if (account.owner !== TOKEN_PROGRAM_ADDRESS) return [`${mint} is not a classic SPL Token mint (another program owns it)`];
			const data = base64Bytes(account.data[0]);
			if (data.length !== getMintSize()) return [`${mint} is an SPL Token account but not a mint`];
			return getMintDecoder().decode(data).isInitialized ? [] : [`${mint} is a mint not initialized yet`];
		});
	}

	async mintDecimals(mint: string): Promise<number> {
		const known = this.decimals.get(mint);
		if (known !== undefined) return known;
		const { value } = await this.rpc.getAccountInfo(address(mint), { encoding: "base64", commitment: "confirmed" }).send(this.deadline);
		if (!value) throw new Error(`mint ${mint} does not exist on chain`);
		const { decimals } = getMintDecoder().decode(base64Bytes(value.data[0]));
		this.decimals.set(mint, decimals);
		return decimals;
	}
}
