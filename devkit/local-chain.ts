/**
 * A local Solana chain for tests and the demo: litesvm (a real Solana VM, in process) behind a small
 * JSON-RPC server that implements just the methods our code calls, the way a validator answers
 * them. Slots advance on a timer and every slot gets a fresh blockhash that stays valid for
 * `blockhashValiditySlots`, so expiry is real. Faults can be injected per method.
 * Tests only (and `npm run demo`); never part of the service.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import {
	address,
	type ReadonlyUint8Array,
	getBase58Decoder,
	getCompiledTransactionMessageDecoder,
	getTransactionDecoder,
	lamports,
	none,
	type Address,
	type EncodedAccount
} from "@solana/kit";
import { AccountState, findAssociatedTokenPda, getMintEncoder, getMintSize, getTokenDecoder, getTokenEncoder, getTokenSize, TOKEN_PROGRAM_ADDRESS } from "@solana-program/token";
import { FailedTransactionMetadata, LiteSVM } from "litesvm";
import { ed25519 } from "@noble/curves/ed25519.js";
import { readSettlementTransaction } from "../lib/settlement";
import { encodeBase58 } from "../lib/encoding";

export type Fault = "http-500" | "rpc-error" | "hang";

interface Landed {
	signature: string;
	slot: number;
	wire: Uint8Array;
	memo: string | null;
	accounts: string[];
	logs: string[];
}

interface RpcError {
	code: number;
	message: string;
	data?: unknown;
}

class RpcFailure extends Error {
	constructor(readonly error: RpcError) {
		super(error.message);
	}
}

export interface LocalChainOptions {
	/** Milliseconds per slot (default 100). */
	slotMs?: number;
	/** How many slots a blockhash stays usable (default 150, as on Solana). */
	blockhashValiditySlots?: number;
}

const base58 = getBase58Decoder();
const toBase64 = (bytes: ReadonlyUint8Array) => Buffer.from(bytes).toString("base64");

/** A SOLANA_CLUSTER for a Node on a local chain: a name no public cluster's genesis hash is bound to. */
export const LOCAL_CLUSTER = "solana-localnet";

export class LocalChain {
	readonly svm = new LiteSVM().withBlockhashCheck(false);
	/** Method calls received, by method name (for assertions on what the clients did). */
	readonly calls = new Map<string, number>();
	/** The parameters of the last call of each method. */
	readonly lastParams = new Map<string, unknown[]>();
	url = "";
	/** Its own cluster, as a fresh local validator's: no public cluster's genesis hash. */
	readonly genesisHash = encodeBase58(ed25519.utils.randomSecretKey());
	private readonly slotMs: number;
	private readonly validity: number;
	private slotNumber: number;
	private readonly blockhashes = new Map<string, number>();
	private latest = "";
	private readonly landed = new Map<string, Landed>();
	private readonly byAccount = new Map<string, string[]>();
	private readonly faults = new Map<string, Fault[]>();
	private readonly delays = new Map<string, number[]>();
	/** How many slots a landed transaction waits before getTransaction answers it at `finalized` (0: at once). */
	finalitySlots = 0;
	private dropped = 0;
	/** Its genesis: the slot it starts at, which has no time (getBlockTime: null), as a real cluster's first blocks. */
	private readonly firstSlot: number;
	private readonly startedAtMs = Date.now();
	/** The first slot whose transactions it still shows (getFirstAvailableBlock); see keepHistoryFrom(). */
	private historyFrom = 0;
	private substitute: ((signature: string) => ReadonlyUint8Array | undefined) | null = null;
	/** What the dropped sends carried, for landDropped(). */
	private readonly droppedWires: string[] = [];
	private server: http.Server | null = null;
	private ticker: NodeJS.Timeout | null = null;

	constructor(options: LocalChainOptions = {}) {
		this.slotMs = options.slotMs ?? 100;
		this.validity = options.blockhashValiditySlots ?? 150;
		this.slotNumber = Number(this.svm.getClock().slot);
		this.firstSlot = this.slotNumber;
		this.newBlockhash();
	}

	async start(port = 0): Promise<string> {
		this.server = http.createServer((req, res) => void this.handle(req, res));
		await new Promise<void>(resolve => this.server!.listen(port, "127.0.0.1", resolve));
		this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
		this.ticker = setInterval(() => this.advance(1), this.slotMs);
		return this.url;
	}

	async stop(): Promise<void> {
		if (this.ticker) clearInterval(this.ticker);
		if (!this.server) return;
		this.server.closeAllConnections();
		await new Promise<void>(resolve => this.server!.close(() => resolve()));
		this.server = null;
	}

	get slot(): number {
		return this.slotNumber;
	}

	/** Moves the chain `slots` ahead, each with a new blockhash. */
	advance(slots: number): void {
		this.slotNumber += slots;
		this.svm.warpToSlot(BigInt(this.slotNumber));
		this.newBlockhash();
	}

	/**
	 * Shows no transaction of the slots before `slot`, as a validator with a limited ledger and no
	 * long-term storage does once it pruned them: their signatures are unknown to it (0: every one).
	 */
	keepHistoryFrom(slot: number): void {
		this.historyFrom = slot;
	}

	/** Unix seconds of `slot` (after the first): a slot's time apart from when the chain started, never ahead of now. */
	private blockTime(slot: number): number {
		return Math.floor(Math.min(Date.now(), this.startedAtMs + (slot - this.firstSlot) * this.slotMs) / 1000);
	}

	/** A landed transaction, unless pruned. */
	private kept(signature: string): Landed | undefined {
		const tx = this.landed.get(signature);
		return tx && tx.slot >= this.historyFrom ? tx : undefined;
	}

	/** The next `times` calls of `method` fail this way. */
	injectFault(method: string, fault: Fault, times = 1): void {
		this.faults.set(method, [...(this.faults.get(method) ?? []), ...Array<Fault>(times).fill(fault)]);
	}

	/** The next `times` calls of `method` are answered `ms` late (a slow endpoint, within its reader's timeout). */
	delayAnswers(method: string, ms: number, times = 1): void {
		this.delays.set(method, [...(this.delays.get(method) ?? []), ...Array<number>(times).fill(ms)]);
	}

	clearFaults(): void {
		this.faults.clear();
		this.delays.clear();
	}

	/**
	 * A lying RPC, for the readers' checks: getTransaction answers, for a signature asked, the wire
	 * transaction `substitute` gives instead (undefined: the truth); null stops the lies.
	 */
	lieAboutTransactions(substitute: ((signature: string) => ReadonlyUint8Array | undefined) | null): void {
		this.substitute = substitute;
	}

	/** A landed transaction's wire bytes. */
	wireOf(signature: string): ReadonlyUint8Array | undefined {
		return this.landed.get(signature)?.wire;
	}

	/** The next `count` sendTransaction calls answer a signature but the transaction never lands. */
	dropNextSends(count: number): void {
		this.dropped = count;
	}

	/**
	 * Lands what the dropped sends carried, as a leader that was only slow would: each as if sent
	 * now (one whose blockhash expired meanwhile, or that landed already, does not). Answers how many landed.
	 */
	landDropped(): number {
		const wires = this.droppedWires.splice(0);
		return wires.filter(encoded => {
			try {
				this.sendTransaction(encoded);
				return true;
			} catch {
				return false;
			}
		}).length;
	}

	/** Landed transactions whose memo ends with `:<suffix>` (a payout nullifier, a TIN route commitment). */
	landedWithMemoEnding(suffix: string): Landed[] {
		return [...this.landed.values()].filter(tx => tx.memo?.endsWith(`:${suffix}`));
	}

	transaction(signature: string): Landed | undefined {
		return this.landed.get(signature);
	}

	// --- accounts -------------------------------------------------------------------------------

	fundLamports(owner: string, amount = 10n ** 10n): void {
		this.svm.airdrop(address(owner), lamports(amount));
	}

	createMint(decimals = 6): Address {
		const mint = address(encodeBase58(ed25519.utils.randomSecretKey()));
		const data = getMintEncoder().encode({ mintAuthority: none(), supply: 10n ** 15n, decimals, isInitialized: true, freezeAuthority: none() });
		this.setAccount(mint, data, getMintSize());
		return mint;
	}

	/** Gives `owner` a token account of `mint` holding `amount`: its associated one unless `at` says another. */
	async fundTokens(owner: string, mint: Address, amount: bigint, { at, state = AccountState.Initialized }: { at?: Address; state?: AccountState } = {}): Promise<Address> {
		const account = at ?? (await findAssociatedTokenPda({ owner: address(owner), mint, tokenProgram: TOKEN_PROGRAM_ADDRESS }))[0];
		const data = getTokenEncoder().encode({
			mint,
			owner: address(owner),
			amount,
			delegate: none(),
			state,
			isNative: none(),
			delegatedAmount: 0n,
			closeAuthority: none()
		});
		this.setAccount(account, data, getTokenSize());
		return account;
	}

	tokenBalance(account: Address): bigint {
		const found = this.svm.getAccount(account);
		return found.exists ? getTokenDecoder().decode(found.data).amount : 0n;
	}

	private setAccount(at: Address, data: ReadonlyUint8Array, space: number): void {
		const account: EncodedAccount = {
			address: at,
			data: Uint8Array.from(data),
			executable: false,
			lamports: lamports(this.svm.minimumBalanceForRentExemption(BigInt(space))),
			programAddress: TOKEN_PROGRAM_ADDRESS,
			space: BigInt(space)
		};
		this.svm.setAccount(account);
	}

	private newBlockhash(): void {
		this.svm.expireBlockhash();
		this.latest = this.svm.latestBlockhash();
		this.blockhashes.set(this.latest, this.slotNumber + this.validity);
	}

	// --- JSON-RPC -------------------------------------------------------------------------------

	private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
		const chunks: Buffer[] = [];
		for await (const chunk of req) chunks.push(chunk as Buffer);
		let body: { id: unknown; method: string; params?: unknown[] };
		try {
			body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
		} catch {
			return this.reply(res, 400, { jsonrpc: "2.0", id: null, error: { code: -32700, message: "Parse error" } });
		}
		const { id, method } = body;
		this.calls.set(method, (this.calls.get(method) ?? 0) + 1);
		this.lastParams.set(method, body.params ?? []);
		const delay = this.delays.get(method)?.shift();
		if (delay) await new Promise(resolve => setTimeout(resolve, delay));
		const fault = this.faults.get(method)?.shift();
		if (fault === "hang") return; // the client's timeout is what answers
		if (fault === "http-500") return this.reply(res, 500, { jsonrpc: "2.0", id, error: { code: -32603, message: "Internal error (injected)" } });
		if (fault === "rpc-error") return this.reply(res, 200, { jsonrpc: "2.0", id, error: { code: -32005, message: "Node is unhealthy (injected)" } });
		try {
			const result = this.dispatch(method, body.params ?? []);
			this.reply(res, 200, { jsonrpc: "2.0", id, result });
		} catch (err) {
			const error = err instanceof RpcFailure ? err.error : { code: -32603, message: (err as Error).message };
			this.reply(res, 200, { jsonrpc: "2.0", id, error });
		}
	}

	private reply(res: http.ServerResponse, status: number, payload: unknown): void {
		res.writeHead(status, { "content-type": "application/json" });
		res.end(JSON.stringify(payload));
	}

	private context() {
		return { slot: this.slotNumber };
	}

	private dispatch(method: string, params: any[]): unknown {
		switch (method) {
			case "getGenesisHash":
				return this.genesisHash;
			case "getSlot":
			case "getBlockHeight":
				return this.slotNumber;
			// Its height is its slot: one block a slot, none skipped.
			case "getEpochInfo":
				return { absoluteSlot: this.slotNumber, blockHeight: this.slotNumber, epoch: 0, slotIndex: this.slotNumber, slotsInEpoch: 432_000, transactionCount: null };
			case "getFirstAvailableBlock":
				return this.historyFrom;
			case "getBlockTime":
				// The first blocks of a cluster predate block times: a full-history node answers null for them.
				return Number(params[0]) <= this.firstSlot ? null : this.blockTime(Number(params[0]));
			case "getLatestBlockhash":
				return { context: this.context(), value: { blockhash: this.latest, lastValidBlockHeight: this.blockhashes.get(this.latest) } };
			case "sendTransaction":
				return this.sendTransaction(String(params[0]));
			case "getSignatureStatuses":
				return {
					context: this.context(),
					value: (params[0] as string[]).map(signature => {
						const tx = this.kept(signature);
						return tx ? { slot: tx.slot, confirmations: null, err: null, status: { Ok: null }, confirmationStatus: "finalized" } : null;
					})
				};
			case "getTransaction":
				return this.getTransaction(String(params[0]), params[1]);
			case "getSignaturesForAddress": {
				const limit = Math.min(params[1]?.limit ?? 1000, 1000);
				const kept = (this.byAccount.get(String(params[0])) ?? []).filter(signature => this.kept(signature));
				return kept.slice(0, limit).map(signature => {
					const tx = this.landed.get(signature)!;
					return { signature, slot: tx.slot, err: null, memo: tx.memo ? `[${Buffer.byteLength(tx.memo)}] ${tx.memo}` : null, blockTime: null, confirmationStatus: "finalized" };
				});
			}
			case "getAccountInfo": {
				const found = this.svm.getAccount(address(String(params[0])));
				return { context: this.context(), value: found.exists ? this.accountJson(found) : null };
			}
			case "getMultipleAccounts": {
				const addresses = params[0] as unknown[];
				if (!Array.isArray(addresses) || addresses.length > 100) throw new RpcFailure({ code: -32602, message: "Invalid params: at most 100 addresses" });
				const slice = params[1]?.dataSlice as { offset: number; length: number } | undefined;
				const value = addresses.map(at => {
					const found = this.svm.getAccount(address(String(at)));
					if (!found.exists) return null;
					return this.accountJson(slice ? { ...found, data: found.data.slice(slice.offset, slice.offset + slice.length) } : found);
				});
				return { context: this.context(), value };
			}
			default:
				throw new RpcFailure({ code: -32601, message: `Method not found: ${method}` });
		}
	}

	private accountJson(account: EncodedAccount) {
		return {
			data: [toBase64(account.data), "base64"],
			executable: account.executable,
			lamports: Number(account.lamports),
			owner: account.programAddress,
			rentEpoch: 0,
			space: Number(account.space)
		};
	}

	private sendTransaction(encoded: string): string {
		const wire = new Uint8Array(Buffer.from(encoded, "base64"));
		const transaction = getTransactionDecoder().decode(wire);
		const firstSignature = Object.values(transaction.signatures)[0];
		if (!firstSignature) throw new RpcFailure({ code: -32602, message: "transaction is not signed" });
		const signature = base58.decode(firstSignature);
		if (this.dropped > 0) {
			this.dropped--;
			this.droppedWires.push(encoded);
			return signature; // accepted by the "leader", then lost: it never lands
		}
		const { lifetimeToken, staticAccounts } = getCompiledTransactionMessageDecoder().decode(transaction.messageBytes);
		const lastValid = this.blockhashes.get(lifetimeToken);
		if (lastValid === undefined || lastValid < this.slotNumber) throw this.preflightFailure("BlockhashNotFound", []);
		if (this.landed.has(signature)) throw this.preflightFailure("AlreadyProcessed", []);
		const outcome = this.svm.sendTransaction(transaction);
		if (outcome instanceof FailedTransactionMetadata) throw this.preflightFailure(transactionError(outcome.err()), outcome.meta().logs());
		const { memos } = readSettlementTransaction(wire);
		const landed: Landed = { signature, slot: this.slotNumber, wire, memo: memos[0] ?? null, accounts: staticAccounts.map(String), logs: outcome.logs() };
		this.landed.set(signature, landed);
		for (const account of landed.accounts) this.byAccount.set(account, [signature, ...(this.byAccount.get(account) ?? [])]);
		return signature;
	}

	private preflightFailure(err: unknown, logs: string[]): RpcFailure {
		return new RpcFailure({
			code: -32002,
			message: `Transaction simulation failed: ${JSON.stringify(err)}`,
			data: { err, logs, accounts: null, unitsConsumed: 0, returnData: null }
		});
	}

	private getTransaction(signature: string, config: { encoding?: string; commitment?: string } | undefined): unknown {
		if (config?.encoding !== "base64") throw new RpcFailure({ code: -32602, message: "this local chain serves getTransaction with encoding base64 only" });
		// The RPC's default commitment is finalized.
		const finalized = (config.commitment ?? "finalized") === "finalized";
		const landed = this.kept(signature);
		const tx = landed && (!finalized || landed.slot + this.finalitySlots <= this.slotNumber) ? landed : undefined;
		const wire = this.substitute?.(signature) ?? tx?.wire;
		if (!wire) return null;
		return {
			slot: tx?.slot ?? this.slotNumber,
			blockTime: null,
			version: 0,
			transaction: [toBase64(wire), "base64"],
			meta: {
				err: null,
				status: { Ok: null },
				fee: 5000,
				preBalances: [],
				postBalances: [],
				innerInstructions: [],
				logMessages: tx?.logs ?? [],
				preTokenBalances: [],
				postTokenBalances: [],
				rewards: [],
				loadedAddresses: { writable: [], readonly: [] },
				computeUnitsConsumed: 0
			}
		};
	}
}

/** A litesvm failure in the shape a validator's RPC reports it (`{ InstructionError: [index, error] }` or a name). */
function transactionError(err: ReturnType<FailedTransactionMetadata["err"]>): unknown {
	if (typeof err === "object" && "err" in err) {
		const inner = err.err();
		return { InstructionError: [err.index, typeof inner === "object" && "code" in inner ? { Custom: inner.code } : inner] };
	}
	return typeof err === "object" ? err.toString() : err;
}
