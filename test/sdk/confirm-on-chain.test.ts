/** SettlementClient.confirmOnChain against real settlement transactions on the local chain (litesvm over JSON-RPC). */
import { createKeyPairSignerFromBytes, createSolanaRpc, getBase64EncodedWireTransaction, type KeyPairSigner } from "@solana/kit";
import { generateKeypair } from "../../lib/ed25519";
import { sha256Hex } from "../../lib/encoding";
import { signSettlementTransaction } from "../../lib/settlement";
import { SettlementClient } from "../../sdk";
import { LocalChain } from "../../devkit/local-chain";

let chain: LocalChain;
let client: SettlementClient;
let cranker: KeyPairSigner;

beforeAll(async () => {
	chain = new LocalChain({ slotMs: 50 });
	const rpcUrl = await chain.start();
	client = new SettlementClient({ baseUrl: "http://127.0.0.1:9", solanaRpcUrl: rpcUrl });
	cranker = await createKeyPairSignerFromBytes(generateKeypair().secretKey);
	chain.fundLamports(cranker.address);
});
afterAll(() => chain.stop());

async function landSettlement(amount: bigint, recipientRouteCommitment: string, transactionCommitment: string) {
	const mint = chain.createMint(6);
	await chain.fundTokens(cranker.address, mint, 10n ** 9n);
	const rpc = createSolanaRpc(chain.url);
	const { value: lifetime } = await rpc.getLatestBlockhash().send();
	const params = { cranker, mint, decimals: 6, amount, recipientRouteCommitment, transactionCommitment, payoutNullifier: sha256Hex(transactionCommitment) };
	const { transaction } = await signSettlementTransaction(params, lifetime);
	const signature = await rpc.sendTransaction(getBase64EncodedWireTransaction(transaction), { encoding: "base64" }).send();
	return { signature, mint };
}

describe("confirmOnChain", () => {
	const routeCommitment = sha256Hex("route");
	const transactionCommitment = sha256Hex("commitment");

	it("confirms a landed settlement whose memo and amount match the intent", async () => {
		const { signature, mint } = await landSettlement(4200n, routeCommitment, transactionCommitment);
		const expected = { transactionCommitment, amount: "4200", tokenMintAddress: mint, recipientRouteCommitment: routeCommitment };
		const confirmed = await client.confirmOnChain(signature, expected);
		expect(confirmed).toMatchObject({ signature, memo: `scs:v1:${transactionCommitment}:${sha256Hex(transactionCommitment)}` });
		expect(typeof confirmed.slot).toBe("bigint");
	});

	it("refuses a transaction that exists but is not this settlement", async () => {
		const { signature, mint } = await landSettlement(4200n, routeCommitment, transactionCommitment);
		const expected = { transactionCommitment, amount: "4200", tokenMintAddress: mint, recipientRouteCommitment: routeCommitment };
		await expect(client.confirmOnChain(signature, { ...expected, amount: "4201" })).rejects.toMatchObject({ type: "SETTLEMENT_MISMATCH", message: expect.stringContaining("expected 4201") });
		await expect(client.confirmOnChain(signature, { ...expected, transactionCommitment: sha256Hex("another intent") })).rejects.toMatchObject({ type: "SETTLEMENT_MISMATCH" });
		await expect(client.confirmOnChain(signature, { ...expected, recipientRouteCommitment: sha256Hex("another route") })).rejects.toMatchObject({ type: "SETTLEMENT_MISMATCH" });
	});

	it("says when the signature is not on chain, when the RPC fails, and when no RPC is configured", async () => {
		const unknown = "5".repeat(88);
		const expected = { transactionCommitment, amount: "1", tokenMintAddress: chain.createMint(), recipientRouteCommitment: routeCommitment };
		await expect(client.confirmOnChain(unknown, expected)).rejects.toMatchObject({ type: "NOT_ON_CHAIN" });
		chain.injectFault("getTransaction", "http-500");
		await expect(client.confirmOnChain(unknown, expected)).rejects.toMatchObject({ type: "NETWORK_ERROR" });
		await expect(new SettlementClient({ baseUrl: "http://127.0.0.1:9" }).confirmOnChain(unknown, expected)).rejects.toMatchObject({ type: "CONFIGURATION_ERROR" });
	});
});
