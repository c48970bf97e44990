/**
 * The settlement transaction of SPEC §11, built and read with @solana/kit and the
 * @solana-program clients. Browser-safe: the Cranker builds with it, the SDK checks with it.
 */
import { ed25519 } from "@noble/curves/ed25519.js";
import {
	address,
	appendTransactionMessageInstructions,
	createTransactionMessage,
	decompileTransactionMessage,
	getAddressEncoder,
	getBase58Encoder,
	getBase64Encoder,
	getCompiledTransactionMessageDecoder,
	getProgramDerivedAddress,
	getShortU16Decoder,
	getTransactionDecoder,
	pipe,
	setTransactionMessageFeePayerSigner,
	setTransactionMessageLifetimeUsingBlockhash,
	signTransactionMessageWithSigners,
	type Address,
	type Blockhash,
	type Instruction,
	type ReadonlyUint8Array,
	type TransactionSigner
} from "@solana/kit";
import { getAddMemoInstruction, getMemosFromInstructions, LEGACY_MEMO_PROGRAM_ADDRESS_V3 } from "@solana-program/memo";
import {
	findAssociatedTokenPda,
	getCreateAssociatedTokenIdempotentInstruction,
	getTransferCheckedInstruction,
	identifyTokenInstruction,
	parseTransferCheckedInstruction,
	TOKEN_PROGRAM_ADDRESS,
	TokenInstruction
} from "@solana-program/token";
import { payoutNullifier } from "./canonical";

/**
 * Used when SETTLEMENT_PROGRAM_ID is unset: the settlement program is not deployed yet (SPEC §11),
 * so the default is a fixed address with no program behind it, base58(SHA-256("Settlement
 * Coordination Settlement Program v1")). Only credit-owner PDAs are derived from it.
 */
export const DEFAULT_SETTLEMENT_PROGRAM_ID = address("fYLaYKAr6km8qvYZcegunAkAJjeRcmYQ7CcuoQRBKAD");

/** The SPL Memo program every validator (and litesvm) ships; RPC nodes index its memos. */
export const MEMO_PROGRAM = LEGACY_MEMO_PROGRAM_ADDRESS_V3;

const MEMO_PREFIX = "scs:v1:";

export function settlementMemo(transactionCommitment: string, payoutNullifier: string): string {
	return `${MEMO_PREFIX}${transactionCommitment}:${payoutNullifier}`;
}

/**
 * Whether an RPC `memo` field (`[136] scs:v1:…`, several memos joined by "; ") may carry `memo`:
 * any field holding its text, whatever the provider writes around it. A match too many costs a
 * read; a match missed would pay a second time.
 */
export function memoFieldHolds(memoField: string | null | undefined, memo: string): boolean {
	return !!memoField && memoField.includes(memo);
}

function hexBytes(hex: string): Uint8Array {
	if (!/^[0-9a-f]{64}$/.test(hex)) throw new Error("a route commitment is 64 lowercase hex characters");
	return Uint8Array.from(hex.match(/../g)!, byte => parseInt(byte, 16));
}

/** The credit owner: the PDA of the settlement program with seeds ["credit", commitment bytes]. */
export async function creditOwnerAddress(recipientRouteCommitment: string, programId: Address = DEFAULT_SETTLEMENT_PROGRAM_ID): Promise<Address> {
	const [pda] = await getProgramDerivedAddress({ programAddress: programId, seeds: ["credit", hexBytes(recipientRouteCommitment)] });
	return pda;
}

/** The associated token account of `owner` for `mint` (classic SPL Token). A derivation costs about 0.4 ms of CPU: keep what it gives. */
export async function associatedTokenAccount(owner: Address, mint: Address): Promise<Address> {
	return (await findAssociatedTokenPda({ owner, mint, tokenProgram: TOKEN_PROGRAM_ADDRESS }))[0];
}

/** The recipient's credit account: the credit owner's associated token account of the mint. */
export async function creditAccountAddress(recipientRouteCommitment: string, mint: Address, programId: Address = DEFAULT_SETTLEMENT_PROGRAM_ID): Promise<Address> {
	return associatedTokenAccount(await creditOwnerAddress(recipientRouteCommitment, programId), mint);
}

export interface SettlementParams {
	/** The Cranker: fee payer, payer of the credit account, and transfer authority. */
	cranker: TransactionSigner;
	mint: Address;
	decimals: number;
	amount: bigint;
	recipientRouteCommitment: string;
	transactionCommitment: string;
	payoutNullifier: string;
	programId?: Address;
}

/** The three instructions of SPEC §11, in order. */
export async function buildSettlementInstructions(params: SettlementParams): Promise<{ instructions: Instruction[]; creditAccount: Address }> {
	const { cranker, mint } = params;
	const creditOwner = await creditOwnerAddress(params.recipientRouteCommitment, params.programId);
	const creditAccount = await associatedTokenAccount(creditOwner, mint);
	const source = await associatedTokenAccount(cranker.address, mint);
	const instructions: Instruction[] = [
		getCreateAssociatedTokenIdempotentInstruction({ payer: cranker, ata: creditAccount, owner: creditOwner, mint }),
		getTransferCheckedInstruction({ source, mint, destination: creditAccount, authority: cranker, amount: params.amount, decimals: params.decimals }),
		getAddMemoInstruction({ memo: settlementMemo(params.transactionCommitment, params.payoutNullifier) }, { programAddress: MEMO_PROGRAM })
	];
	return { instructions, creditAccount };
}

/** The signed settlement transaction for a blockhash; its signature is known before it is sent. */
export async function signSettlementTransaction(params: SettlementParams, lifetime: Lifetime) {
	const { instructions, creditAccount } = await buildSettlementInstructions(params);
	return { transaction: await signInstructions(params.cranker, instructions, lifetime), creditAccount };
}

/** A transaction with one memo, signed by `payer`: how a submitter Cranker records a TIN operation on chain. */
export function signMemoTransaction(payer: TransactionSigner, memo: string, lifetime: Lifetime) {
	return signInstructions(payer, [getAddMemoInstruction({ memo }, { programAddress: MEMO_PROGRAM })], lifetime);
}

type Lifetime = { blockhash: Blockhash; lastValidBlockHeight: bigint };

/** The v0 message of `instructions`, paid by `feePayer`, living by a recent blockhash. */
export function transactionMessageOf(feePayer: TransactionSigner, instructions: Instruction[], lifetime: Lifetime) {
	return pipe(
		createTransactionMessage({ version: 0 }),
		m => setTransactionMessageFeePayerSigner(feePayer, m),
		m => setTransactionMessageLifetimeUsingBlockhash(lifetime, m),
		m => appendTransactionMessageInstructions(instructions, m)
	);
}

/** The same, signed by every signer it names. */
export function signInstructions(feePayer: TransactionSigner, instructions: Instruction[], lifetime: Lifetime) {
	return signTransactionMessageWithSigners(transactionMessageOf(feePayer, instructions, lifetime));
}

/**
 * What a transaction does to the expected settlement: why it is not exactly it, and whether it
 * touches it at all (a memo naming its nullifier or commitment, or a transfer to its credit account).
 */
export async function readSettlement(contents: SettlementContents, expected: ExpectedSettlement): Promise<{ mismatches: string[]; related: boolean }> {
	const creditAccount = await expectedCreditAccount(expected);
	const mismatches = mismatchesWith(contents, expected, creditAccount);
	const related =
		contents.unreadable !== undefined ||
		contents.memos.some(memo => memo.startsWith(`${MEMO_PREFIX}${expected.transactionCommitment}:`) || (!!expected.payoutNullifier && memo.startsWith(MEMO_PREFIX) && memo.endsWith(`:${expected.payoutNullifier}`))) ||
		contents.transfers.some(transfer => transfer.destination === creditAccount);
	return { mismatches, related };
}

/** The memo a TIN registry submission carries until the registry program exists (SPEC §5 names no transaction). */
export function registryMemo(operationId: string, routeCommitment: string): string {
	return `scs:tin:v1:${operationId}:${routeCommitment}`;
}

export interface SettlementContents {
	memos: string[];
	/** Who paid for the transaction (and signed it first). */
	feePayer?: Address;
	/** Its TransferChecked instructions: what a settlement's must be is the mint, the credit account and the amount. */
	transfers: { mint: Address; destination: Address; amount: bigint }[];
	/** Whether it lives by a durable nonce: it never expires, so a settlement must not (SPEC §2.4). */
	durableNonce?: boolean;
	/**
	 * Why the transaction could not be read (one that loads accounts from address lookup tables,
	 * say, which a settlement never does): it is then no settlement, and it proves nothing else
	 * either, so it is taken as touching the settlement (nothing lets the intent go on its account).
	 */
	unreadable?: string;
	/**
	 * Set when the bytes were not shown to be the transaction asked for (an RPC that answered
	 * another, or bytes that are no transaction): nothing is known of that transaction, not even
	 * that it is something else.
	 */
	notShown?: true;
}

/** What a wire transaction does, as far as a settlement goes: its memos and its TransferChecked instructions. */
export function readSettlementTransaction(wireTransaction: ReadonlyUint8Array): SettlementContents {
	try {
		return readSettlementMessage(decodedTransaction(wireTransaction).compiled);
	} catch (err) {
		// Not decodable, accounts in lookup tables, or an instruction too short to parse (one that can only fail).
		return unreadable((err as Error).message);
	}
}

type CompiledMessage = Parameters<typeof decompileTransactionMessage>[0];

/** A reading that proves nothing, and why. */
const unreadable = (reason: string): SettlementContents => ({ memos: [], transfers: [], unreadable: reason });

/** A wire transaction's message, as signed and as compiled (throws when it is not a transaction). */
function decodedTransaction(wire: ReadonlyUint8Array): { messageBytes: ReadonlyUint8Array; compiled: CompiledMessage } {
	const { messageBytes } = getTransactionDecoder().decode(wire);
	return { messageBytes, compiled: getCompiledTransactionMessageDecoder().decode(messageBytes) };
}

/** What a compiled message does to a settlement; throws when an instruction cannot be parsed. */
function readSettlementMessage(compiled: CompiledMessage): SettlementContents {
	const message = decompileTransactionMessage(compiled);
	const { instructions } = message;
	const transfers = instructions
		.filter(ix => ix.programAddress === TOKEN_PROGRAM_ADDRESS && ix.data && identifyTokenInstruction(ix.data) === TokenInstruction.TransferChecked)
		.map(ix => {
			const { accounts, data } = parseTransferCheckedInstruction(ix as Parameters<typeof parseTransferCheckedInstruction>[0]);
			return { mint: accounts.mint.address, destination: accounts.destination.address, amount: data.amount };
		});
	return { memos: getMemosFromInstructions(instructions).map(m => m.memo), feePayer: message.feePayer.address, transfers, durableNonce: advancesNonce(instructions) };
}

/**
 * Whether the validator runs it on a durable nonce: Agave takes any first instruction to the System
 * program whose data starts with AdvanceNonceAccount's tag (4 as a little-endian u32), whatever its
 * accounts. Kit's isTransactionMessageWithDurableNonceLifetime also asks for its exact three
 * accounts, so one account more hid the nonce from the Node (a review).
 */
const advancesNonce = ([first]: readonly Instruction[]) => first?.programAddress === "11111111111111111111111111111111" && `${first.data?.slice(0, 4)}` === "4,0,0,0";

/** The same, from the base64 text an RPC `getTransaction` answers with `encoding: "base64"`. */
export function readEncodedSettlementTransaction(base64: string): SettlementContents {
	return readSettlementTransaction(getBase64Encoder().encode(base64));
}

/**
 * What an RPC answered to `getTransaction(signature)` (base64) does, once it is shown to be that
 * transaction: its first signature, the fee payer's, is `signature` and verifies over its message.
 * An RPC that answers another transaction, or one made up under this signature, gets an
 * unreadable reading, which proves nothing.
 */
/** The most a transaction's wire bytes can be: the network's packet size (PACKET_DATA_SIZE). */
const MAX_TRANSACTION_BYTES = 1232;

export function readFetchedSettlementTransaction(base64: string, signature: string): SettlementContents {
	const notShown = (reason: string): SettlementContents => ({ ...unreadable(reason), notShown: true });
	let decoded: ReturnType<typeof decodedTransaction>;
	let wire: ReadonlyUint8Array;
	try {
		wire = getBase64Encoder().encode(base64);
		// Its fee payer's signature proves nothing about size: a made-up transaction of megabytes would be kept as read.
		if (wire.length > MAX_TRANSACTION_BYTES) return notShown(`${wire.length} bytes, more than a Solana transaction holds (${MAX_TRANSACTION_BYTES})`);
		decoded = decodedTransaction(wire);
	} catch (err) {
		// Not base64, or not a transaction at all.
		return notShown((err as Error).message);
	}
	const problem = notTransactionOf(wire, decoded, signature);
	if (problem) return notShown(problem);
	try {
		return readSettlementMessage(decoded.compiled);
	} catch (err) {
		// That transaction, signed by its fee payer, with an instruction that cannot be parsed (or accounts in lookup tables).
		return unreadable((err as Error).message);
	}
}

/**
 * Why `wire` is not the transaction `signature` names (null when it is). Both read from the wire
 * itself: its first signature, and the fee payer as the message's first account (strictly
 * verified, as Solana does); an account listed twice, which no landed transaction has, is refused.
 */
function notTransactionOf(wire: ReadonlyUint8Array, { messageBytes, compiled }: ReturnType<typeof decodedTransaction>, signature: string): string | null {
	const [count, offset] = getShortU16Decoder().read(wire, 0);
	const { staticAccounts } = compiled;
	if (count < 1 || staticAccounts.length < 1) return `the RPC's transaction ${signature} has no fee payer's signature`;
	if (new Set(staticAccounts).size !== staticAccounts.length) return `the RPC's transaction ${signature} lists an account twice`;
	const first = Uint8Array.from(wire.slice(offset, offset + 64));
	const asked = getBase58Encoder().encode(signature);
	if (first.length !== asked.length || first.some((byte, i) => byte !== asked[i])) return `the RPC answered another transaction than ${signature}`;
	const feePayer = getAddressEncoder().encode(staticAccounts[0]!) as Uint8Array;
	if (!ed25519.verify(first, Uint8Array.from(messageBytes), feePayer, { zip215: false })) return `the RPC's transaction ${signature} is not signed by its fee payer`;
	return null;
}

export interface ExpectedSettlement {
	transactionCommitment: string;
	amount: string;
	tokenMintAddress: string;
	/** When known (the SDK got it from resolveTin), the transfer must credit this route's account. */
	recipientRouteCommitment?: string;
	/** When known (the Node, the Cranker), the memo must name exactly this nullifier. */
	payoutNullifier?: string;
	programId?: Address;
}

/** The settlement of an intent, in full, as the Node and a Cranker expect it: its route, and its nullifier. */
export function expectedSettlementOf(
	intent: { transactionCommitment: string; amount: string; tokenMintAddress: string; recipientRouteCommitment: string; senderWallet: string; senderAuthorizationNonce: string },
	programId: Address
): Required<ExpectedSettlement> {
	return {
		transactionCommitment: intent.transactionCommitment,
		amount: intent.amount,
		tokenMintAddress: intent.tokenMintAddress,
		recipientRouteCommitment: intent.recipientRouteCommitment,
		payoutNullifier: payoutNullifier(intent.senderWallet, intent.senderAuthorizationNonce),
		programId
	};
}

/**
 * Why the transaction is not the settlement expected (empty when it is): exactly one memo of
 * this commitment and no other settlement's memo, and a TransferChecked of exactly the amount of
 * the mint to the credit account.
 */
export async function settlementMismatches(contents: SettlementContents, expected: ExpectedSettlement): Promise<string[]> {
	// Unreadable contents are refused as such, whatever the expected addresses are.
	return mismatchesWith(contents, expected, contents.unreadable === undefined ? await expectedCreditAccount(expected) : null);
}

/** The credit account the settlement must pay; null when the route commitment is not known (the transfer is then matched by mint only). */
function expectedCreditAccount(expected: ExpectedSettlement): Promise<Address> | null {
	return expected.recipientRouteCommitment ? creditAccountAddress(expected.recipientRouteCommitment, address(expected.tokenMintAddress), expected.programId) : null;
}

function mismatchesWith(contents: SettlementContents, expected: ExpectedSettlement, creditAccount: Address | null): string[] {
	if (contents.unreadable !== undefined) return [`the transaction could not be read (${contents.unreadable})`];
	const problems: string[] = [];
	if (contents.durableNonce) problems.push("the transaction lives by a durable nonce: a settlement expires with its blockhash");
	const settlementMemos = contents.memos.filter(memo => memo.startsWith(MEMO_PREFIX));
	const memos = settlementMemos.filter(memo => memo.startsWith(`${MEMO_PREFIX}${expected.transactionCommitment}:`));
	if (memos.length !== 1) problems.push(`expected one memo for transactionCommitment ${expected.transactionCommitment}, found ${memos.length}`);
	else if (expected.payoutNullifier && memos[0] !== settlementMemo(expected.transactionCommitment, expected.payoutNullifier))
		problems.push(`the memo does not name payoutNullifier ${expected.payoutNullifier}`);
	// One transfer settles one intent: with another intent's memo beside it, the same payment
	// (same TIN, mint and amount) would be taken for both.
	else if (settlementMemos.length > 1) problems.push(`the transaction also carries ${settlementMemos.length - 1} other settlement memo(s): one transaction settles one intent`);
	const transfers = contents.transfers.filter(t => t.mint === expected.tokenMintAddress && (!creditAccount || t.destination === creditAccount));
	if (transfers.length !== 1) problems.push(`expected one TransferChecked of mint ${expected.tokenMintAddress}${creditAccount ? ` to ${creditAccount}` : ""}, found ${transfers.length}`);
	else if (transfers[0].amount !== BigInt(expected.amount)) problems.push(`transferred ${transfers[0].amount}, expected ${expected.amount}`);
	return problems;
}

/**
 * Why the transaction is not the registry submission of this operation (empty when it is): one
 * memo naming it, in a transaction its submitter paid for, not a memo anyone else wrote, on a
 * recent blockhash: one on a durable nonce could be held back and landed any time after the
 * operation's expiry, putting a route its owner gave up live again.
 */
export function readRegistrySubmission(contents: SettlementContents, operationId: string, routeCommitment: string, submittedBy: string): { mismatches: string[]; related: boolean } {
	if (contents.unreadable !== undefined) return { mismatches: [`the transaction could not be read (${contents.unreadable})`], related: true };
	const expected = registryMemo(operationId, routeCommitment);
	const found = contents.memos.filter(memo => memo === expected).length;
	const mismatches = found === 1 ? [] : [`expected one memo "${expected}", found ${found}`];
	if (contents.feePayer !== submittedBy) mismatches.push(`paid for by ${contents.feePayer ?? "no one"}, not by the submitter ${submittedBy}`);
	if (contents.durableNonce) mismatches.push("the transaction lives by a durable nonce: a registry submission expires with its blockhash");
	return { mismatches, related: found > 0 };
}
