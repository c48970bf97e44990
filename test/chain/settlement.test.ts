/**
 * The settlement transaction of SPEC §11 run for real: built and signed by lib/settlement, executed
 * by litesvm, read back through the local JSON-RPC server with @solana/kit.
 */
import {
	address,
	AccountRole,
	compressTransactionMessageUsingAddressLookupTables,
	createKeyPairSignerFromBytes,
	createSolanaRpc,
	getBase64EncodedWireTransaction,
	getSignatureFromTransaction,
	setTransactionMessageLifetimeUsingDurableNonce,
	signTransactionMessageWithSigners,
	type Instruction,
	type KeyPairSigner,
	type Nonce
} from "@solana/kit";
import { getAddMemoInstruction } from "@solana-program/memo";
import { findAssociatedTokenPda, getTransferCheckedInstructionDataEncoder, TOKEN_PROGRAM_ADDRESS } from "@solana-program/token";
import { generateKeypair } from "../../lib/ed25519";
import { sha256Hex } from "../../lib/encoding";
import {
	buildSettlementInstructions,
	creditAccountAddress,
	creditOwnerAddress,
	DEFAULT_SETTLEMENT_PROGRAM_ID,
	MEMO_PROGRAM,
	memoFieldHolds,
	readEncodedSettlementTransaction,
	readRegistrySubmission,
	readSettlement,
	registryMemo,
	settlementMemo,
	settlementMismatches,
	signSettlementTransaction,
	transactionMessageOf,
	type SettlementParams
} from "../../lib/settlement";
import { LocalChain } from "../../devkit/local-chain";

const routeCommitment = sha256Hex("route of 4000000002");
const transactionCommitment = sha256Hex("a transaction commitment");
const payoutNullifier = sha256Hex("sender:nonce");

let chain: LocalChain;
let rpc: ReturnType<typeof createSolanaRpc>;
let cranker: KeyPairSigner;

async function signerFor(keypair = generateKeypair()): Promise<KeyPairSigner> {
	return createKeyPairSignerFromBytes(keypair.secretKey);
}

beforeAll(async () => {
	chain = new LocalChain({ slotMs: 50, blockhashValiditySlots: 20 });
	rpc = createSolanaRpc(await chain.start());
	cranker = await signerFor();
	chain.fundLamports(cranker.address);
});

afterAll(() => chain.stop());

async function settle(params: Omit<SettlementParams, "cranker">) {
	const { value: lifetime } = await rpc.getLatestBlockhash().send();
	const { transaction, creditAccount } = await signSettlementTransaction({ cranker, ...params }, lifetime);
	const signature = await rpc.sendTransaction(getBase64EncodedWireTransaction(transaction), { encoding: "base64" }).send();
	expect(signature).toBe(getSignatureFromTransaction(transaction));
	return { signature, creditAccount };
}

describe("settlement transaction", () => {
	it("derives the credit owner from the settlement program and the route commitment, off the ed25519 curve", async () => {
		const owner = await creditOwnerAddress(routeCommitment);
		expect(owner).toBe(await creditOwnerAddress(routeCommitment, DEFAULT_SETTLEMENT_PROGRAM_ID));
		expect(owner).not.toBe(await creditOwnerAddress(sha256Hex("another route")));
		const [ata] = await findAssociatedTokenPda({ owner, mint: address("So11111111111111111111111111111111111111112"), tokenProgram: TOKEN_PROGRAM_ADDRESS });
		expect(await creditAccountAddress(routeCommitment, address("So11111111111111111111111111111111111111112"))).toBe(ata);
		await expect(creditOwnerAddress("XYZ")).rejects.toThrow("64 lowercase hex");
	});

	it("creates the credit account, moves exactly the amount and carries the memo", async () => {
		const mint = chain.createMint(6);
		const source = await chain.fundTokens(cranker.address, mint, 1_000_000n);
		const { signature, creditAccount } = await settle({ mint, decimals: 6, amount: 250_000n, recipientRouteCommitment: routeCommitment, transactionCommitment, payoutNullifier });

		expect(chain.tokenBalance(source)).toBe(750_000n);
		expect(chain.tokenBalance(creditAccount)).toBe(250_000n);
		expect(creditAccount).toBe(await creditAccountAddress(routeCommitment, mint));

		const fetched = await rpc.getTransaction(signature, { encoding: "base64", maxSupportedTransactionVersion: 0, commitment: "confirmed" }).send();
		const contents = readEncodedSettlementTransaction(fetched!.transaction[0]);
		expect(contents.memos).toEqual([settlementMemo(transactionCommitment, payoutNullifier)]);
		expect(contents.transfers).toEqual([{ mint, destination: creditAccount, amount: 250_000n }]);
		const expected = { transactionCommitment, amount: "250000", tokenMintAddress: mint, recipientRouteCommitment: routeCommitment };
		expect(await settlementMismatches(contents, expected)).toEqual([]);
		expect(await settlementMismatches(contents, { ...expected, amount: "250001" })).toEqual(["transferred 250000, expected 250001"]);
		expect(await settlementMismatches(contents, { ...expected, transactionCommitment: sha256Hex("other") })).toHaveLength(1);
		expect(await settlementMismatches(contents, { ...expected, recipientRouteCommitment: sha256Hex("other route") })).toHaveLength(1);
		// With the nullifier known (the Node, the Cranker), the memo must name exactly it.
		expect(await settlementMismatches(contents, { ...expected, payoutNullifier })).toEqual([]);
		expect(await settlementMismatches(contents, { ...expected, payoutNullifier: sha256Hex("another nullifier") })).toHaveLength(1);
		// Another intent's memo beside it (a review's replay): the one transfer would settle both.
		const twoMemos = { ...contents, memos: [...contents.memos, settlementMemo(sha256Hex("another intent"), sha256Hex("its nullifier"))] };
		expect(await settlementMismatches(twoMemos, { ...expected, payoutNullifier })).toEqual(["the transaction also carries 1 other settlement memo(s): one transaction settles one intent"]);
		expect(await settlementMismatches({ ...contents, memos: [...contents.memos, "a note that is no settlement"] }, { ...expected, payoutNullifier })).toEqual([]);
		// Whether a transaction touches the settlement at all: what tells a wrong payment from an unrelated one.
		expect(await readSettlement(contents, { ...expected, payoutNullifier })).toEqual({ mismatches: [], related: true });
		expect(await readSettlement(contents, { ...expected, amount: "1" })).toMatchObject({ related: true });
		expect(await readSettlement({ memos: ["hello"], transfers: [] }, { ...expected, payoutNullifier })).toMatchObject({ related: false });
		expect(await readSettlement({ memos: [], transfers: contents.transfers }, { ...expected, payoutNullifier })).toMatchObject({ related: true });
		expect(await readSettlement({ memos: [settlementMemo(sha256Hex("x"), payoutNullifier)], transfers: [] }, { ...expected, payoutNullifier })).toMatchObject({ related: true });

		// The RPC's memo index finds it by the credit account, the way a Cranker checks the nullifier.
		const history = await rpc.getSignaturesForAddress(creditAccount).send();
		expect(history.map(h => h.signature)).toEqual([signature]);
		expect(memoFieldHolds(history[0].memo, settlementMemo(expected.transactionCommitment, payoutNullifier))).toBe(true);
		expect(memoFieldHolds(history[0].memo, settlementMemo(expected.transactionCommitment, sha256Hex("another nullifier")))).toBe(false);
		expect(memoFieldHolds(`[3] abc; ${history[0].memo}`, settlementMemo(expected.transactionCommitment, payoutNullifier))).toBe(true);
	});

	it("a transaction that loads accounts from an address lookup table is unreadable: no settlement, and taken as touching it (a review: it made every read of the chain a 503)", async () => {
		const mint = chain.createMint(6);
		const params = { cranker, mint, decimals: 6, amount: 250_000n, recipientRouteCommitment: routeCommitment, transactionCommitment, payoutNullifier };
		const { instructions, creditAccount } = await buildSettlementInstructions(params);
		const { value: lifetime } = await rpc.getLatestBlockhash().send();
		const lookupTable = address("AddressLookupTab1e1111111111111111111111111");
		const transaction = await signTransactionMessageWithSigners(compressTransactionMessageUsingAddressLookupTables(transactionMessageOf(cranker, instructions, lifetime), { [lookupTable]: [creditAccount] }));
		const contents = readEncodedSettlementTransaction(getBase64EncodedWireTransaction(transaction));
		expect(contents).toMatchObject({ memos: [], transfers: [], unreadable: expect.any(String) });
		const expected = { transactionCommitment, amount: "250000", tokenMintAddress: mint, recipientRouteCommitment: routeCommitment, payoutNullifier };
		expect(await settlementMismatches(contents, expected)).toEqual([expect.stringMatching(/^the transaction could not be read/)]);
		expect(await readSettlement(contents, expected)).toMatchObject({ related: true });
		expect(readRegistrySubmission(contents, "top_1", routeCommitment, "submitter")).toMatchObject({ related: true, mismatches: [expect.stringMatching(/could not be read/)] });
	});

	/** The wire bytes (base64) of `instructions` signed by the Cranker, on a recent blockhash or a durable nonce. */
	async function wire(instructions: Instruction[], durableNonce = false) {
		const { value: lifetime } = await rpc.getLatestBlockhash().send();
		const message = transactionMessageOf(cranker, instructions, lifetime);
		const nonce = { nonce: lifetime.blockhash as string as Nonce, nonceAccountAddress: (await signerFor()).address, nonceAuthorityAddress: cranker.address };
		return getBase64EncodedWireTransaction(await signTransactionMessageWithSigners(durableNonce ? setTransactionMessageLifetimeUsingDurableNonce(nonce, message) : message));
	}

	it("a settlement on a durable nonce is refused: it never expires, so the Node could never prove it can no longer land (a review)", async () => {
		const mint = chain.createMint(6);
		const params = { cranker, mint, decimals: 6, amount: 250_000n, recipientRouteCommitment: routeCommitment, transactionCommitment, payoutNullifier };
		const { instructions } = await buildSettlementInstructions(params);
		const expected = { transactionCommitment, amount: "250000", tokenMintAddress: mint, recipientRouteCommitment: routeCommitment, payoutNullifier };
		const onNonce = readEncodedSettlementTransaction(await wire(instructions, true));
		expect(onNonce).toMatchObject({ durableNonce: true, memos: [settlementMemo(transactionCommitment, payoutNullifier)] });
		expect(await settlementMismatches(onNonce, expected)).toEqual(["the transaction lives by a durable nonce: a settlement expires with its blockhash"]);
		const onBlockhash = readEncodedSettlementTransaction(await wire(instructions));
		expect(onBlockhash.durableNonce).toBe(false);
		expect(await settlementMismatches(onBlockhash, expected)).toEqual([]);
	});

	it("a registry submission on a durable nonce is refused: held back, it could put a route live long after its operation expired (a review)", async () => {
		const memo = registryMemo("top_1", routeCommitment);
		const instructions = [getAddMemoInstruction({ memo }, { programAddress: MEMO_PROGRAM })];
		const onNonce = readEncodedSettlementTransaction(await wire(instructions, true));
		expect(onNonce).toMatchObject({ durableNonce: true, memos: [memo] });
		expect(readRegistrySubmission(onNonce, "top_1", routeCommitment, cranker.address)).toEqual({ mismatches: ["the transaction lives by a durable nonce: a registry submission expires with its blockhash"], related: true });
		expect(readRegistrySubmission(readEncodedSettlementTransaction(await wire(instructions)), "top_1", routeCommitment, cranker.address)).toEqual({ mismatches: [], related: true });
	});

	it("a durable nonce that kit's shape check misses is refused too: the validator only asks for the System program and AdvanceNonceAccount's tag first (a review)", async () => {
		const mint = chain.createMint(6);
		const { instructions } = await buildSettlementInstructions({ cranker, mint, decimals: 6, amount: 250_000n, recipientRouteCommitment: routeCommitment, transactionCommitment, payoutNullifier });
		const expected = { transactionCommitment, amount: "250000", tokenMintAddress: mint, recipientRouteCommitment: routeCommitment, payoutNullifier };
		const registry = [getAddMemoInstruction({ memo: registryMemo("top_1", routeCommitment) }, { programAddress: MEMO_PROGRAM })];
		const nonceAccount = (await signerFor()).address;
		const sysvar = address("SysvarRecentB1ockHashes11111111111111111111");
		const advance = (accounts: Instruction["accounts"], data = [4, 0, 0, 0]): Instruction => ({ programAddress: address("11111111111111111111111111111111"), accounts, data: new Uint8Array(data) });
		const exact = [{ address: nonceAccount, role: AccountRole.WRITABLE }, { address: sysvar, role: AccountRole.READONLY }, { address: cranker.address, role: AccountRole.READONLY_SIGNER }];
		const loose = {
			"a fourth account": advance([...exact, { address: mint, role: AccountRole.READONLY }]),
			"the sysvar writable": advance([exact[0], { address: sysvar, role: AccountRole.WRITABLE }, exact[2]]),
			"a byte after the tag": advance(exact, [4, 0, 0, 0, 0])
		};
		const { value: lifetime } = await rpc.getLatestBlockhash().send();
		const read = async (rest: Instruction[], first: Instruction) => readEncodedSettlementTransaction(getBase64EncodedWireTransaction(await signTransactionMessageWithSigners(transactionMessageOf(cranker, [first, ...rest], lifetime))));
		for (const [shape, first] of Object.entries(loose)) {
			const settlement = await read(instructions, first);
			expect({ shape, durableNonce: settlement.durableNonce }).toEqual({ shape, durableNonce: true });
			expect(await settlementMismatches(settlement, expected)).toEqual(["the transaction lives by a durable nonce: a settlement expires with its blockhash"]);
			expect(readRegistrySubmission(await read(registry, first), "top_1", routeCommitment, cranker.address).mismatches).toEqual(["the transaction lives by a durable nonce: a registry submission expires with its blockhash"]);
		}
		// Another System instruction first (a transfer, tag 2) is no nonce.
		expect((await read(instructions, advance(exact, [2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]))).durableNonce).toBe(false);
	});

	it("a TransferChecked too short to parse (one that can only fail) makes the transaction unreadable, not a thrown error (a review: every read of the chain was a 503)", async () => {
		const data = getTransferCheckedInstructionDataEncoder().encode({ amount: 1n, decimals: 6 });
		const short: Instruction = { programAddress: TOKEN_PROGRAM_ADDRESS, accounts: [], data };
		const contents = readEncodedSettlementTransaction(await wire([short]));
		expect(contents).toMatchObject({ memos: [], transfers: [], unreadable: expect.any(String) });
		expect(await readSettlement(contents, { transactionCommitment, amount: "1", tokenMintAddress: cranker.address, recipientRouteCommitment: routeCommitment })).toMatchObject({ related: true });
	});

	it("pays into an existing credit account (the create is idempotent)", async () => {
		const mint = chain.createMint(2);
		await chain.fundTokens(cranker.address, mint, 1_000n);
		const first = await settle({ mint, decimals: 2, amount: 100n, recipientRouteCommitment: routeCommitment, transactionCommitment, payoutNullifier: sha256Hex("n1") });
		await settle({ mint, decimals: 2, amount: 50n, recipientRouteCommitment: routeCommitment, transactionCommitment, payoutNullifier: sha256Hex("n2") });
		expect(chain.tokenBalance(first.creditAccount)).toBe(150n);
	});

	it("is refused by the chain when the Cranker lacks the tokens, and nothing lands", async () => {
		const mint = chain.createMint(6);
		await chain.fundTokens(cranker.address, mint, 10n);
		const attempt = settle({ mint, decimals: 6, amount: 11n, recipientRouteCommitment: routeCommitment, transactionCommitment, payoutNullifier: sha256Hex("n3") });
		await expect(attempt).rejects.toThrow(/simulation failed/i);
		expect(chain.tokenBalance(await creditAccountAddress(routeCommitment, mint))).toBe(0n);
	});

	it("refuses a transaction whose blockhash has expired, and one sent twice", async () => {
		const mint = chain.createMint(6);
		await chain.fundTokens(cranker.address, mint, 100n);
		const { value: lifetime } = await rpc.getLatestBlockhash().send();
		const params = { cranker, mint, decimals: 6, amount: 1n, recipientRouteCommitment: routeCommitment, transactionCommitment, payoutNullifier: sha256Hex("n4") };
		const { transaction } = await signSettlementTransaction(params, lifetime);
		const wire = getBase64EncodedWireTransaction(transaction);
		await rpc.sendTransaction(wire, { encoding: "base64" }).send();
		await expect(rpc.sendTransaction(wire, { encoding: "base64" }).send()).rejects.toMatchObject({ cause: { message: expect.stringMatching(/already been processed/) } });

		const stale = await signSettlementTransaction({ ...params, amount: 2n }, lifetime);
		chain.advance(21);
		await expect(rpc.sendTransaction(getBase64EncodedWireTransaction(stale.transaction), { encoding: "base64" }).send()).rejects.toMatchObject({
			cause: { message: expect.stringMatching(/blockhash/i) }
		});
	});
});
