/**
 * SettlementClient.confirmOnChain against real settlement transactions on the local chain (litesvm
 * over JSON-RPC), checked against the request the sender signed, never against what a service says.
 */
import {
	compileTransaction,
	createKeyPairSignerFromBytes,
	createSolanaRpc,
	createTransactionMessage,
	getAddressDecoder,
	getBase64EncodedWireTransaction,
	getTransactionEncoder,
	pipe,
	setTransactionMessageFeePayer,
	setTransactionMessageLifetimeUsingBlockhash,
	type Address,
	type KeyPairSigner,
	type SignatureBytes
} from "@solana/kit";
import { payoutNullifier } from "../../lib/canonical";
import { generateKeypair } from "../../lib/ed25519";
import { decodeBase58, encodeBase58, sha256Hex } from "../../lib/encoding";
import type { CreateIntentRequest } from "../../lib/intents";
import { signSettlementTransaction } from "../../lib/settlement";
import { LocalKeypairSigner, SettlementClient } from "../../sdk";
import { LocalChain } from "../../devkit/local-chain";
import { newRoute, uniqueId } from "../helpers/fixtures";
import { startLyingRpc } from "../helpers/lying-rpc";
import http from "node:http";
import type { AddressInfo } from "node:net";

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

const route = newRoute();

/** A payment a sender signed with the SDK, in a new mint. */
async function signedPayment(amount: string): Promise<CreateIntentRequest> {
	const mint = chain.createMint(6);
	await chain.fundTokens(cranker.address, mint, 10n ** 9n);
	const params = { paymentId: uniqueId(), recipientTin: route.tin, route: { ...route, policyCommitment: "00".repeat(32) }, tokenMintAddress: mint, amount, feeLimit: "5000", expiresAtSlot: chain.slot + 10_000 };
	return client.signPayment(LocalKeypairSigner.generate(), params);
}

/** Lands a settlement transaction; by default the settlement of `intent`, each field replaceable. */
async function landSettlement(intent: CreateIntentRequest, changes: { amount?: bigint; recipientRouteCommitment?: string; transactionCommitment?: string; payoutNullifier?: string; programId?: Address } = {}) {
	const rpc = createSolanaRpc(chain.url);
	const { value: lifetime } = await rpc.getLatestBlockhash().send();
	const params = {
		cranker,
		mint: intent.tokenMintAddress as Address,
		decimals: 6,
		amount: BigInt(intent.amount),
		recipientRouteCommitment: intent.recipientRouteCommitment,
		transactionCommitment: intent.transactionCommitment!,
		payoutNullifier: payoutNullifier(intent.senderWallet, intent.senderAuthorizationNonce),
		...changes
	};
	const { transaction } = await signSettlementTransaction(params, lifetime);
	return rpc.sendTransaction(getBase64EncodedWireTransaction(transaction), { encoding: "base64" }).send();
}

describe("confirmOnChain", () => {
	it("confirms the settlement of the payment the sender signed", async () => {
		const intent = await signedPayment("4200");
		const signature = await landSettlement(intent);
		const confirmed = await client.confirmOnChain(signature, intent);
		expect(confirmed).toMatchObject({ signature, memo: `scs:v1:${intent.transactionCommitment}:${payoutNullifier(intent.senderWallet, intent.senderAuthorizationNonce)}` });
		expect(typeof confirmed.slot).toBe("bigint");
	});

	it("reads the chain with the global fetch, not the client's fetch option, which may carry what is meant for the service (a review)", async () => {
		const intent = await signedPayment("4300");
		const signature = await landSettlement(intent);
		const asked: string[] = [];
		const fetch: typeof globalThis.fetch = (input, init) => {
			asked.push(String(input));
			return globalThis.fetch(input, init);
		};
		await new SettlementClient({ baseUrl: "http://127.0.0.1:9", solanaRpcUrl: chain.url, fetch }).confirmOnChain(signature, intent);
		expect(asked).toEqual([]);
	});

	it("refuses a landed transaction that is not this payment's settlement: another amount, route, payment or nullifier", async () => {
		const intent = await signedPayment("4200");
		for (const changes of [
			{ amount: 4201n },
			{ recipientRouteCommitment: sha256Hex("another route") },
			{ transactionCommitment: sha256Hex("another payment") },
			{ payoutNullifier: sha256Hex("another nullifier") }
		]) {
			const signature = await landSettlement(intent, changes);
			await expect(client.confirmOnChain(signature, intent)).rejects.toMatchObject({ type: "SETTLEMENT_MISMATCH" });
		}
	});

	it("takes nothing from a service's record: a settlement to another program's credit account fails even when the record names that program", async () => {
		const intent = await signedPayment("4200");
		const program = encodeBase58(new Uint8Array(32).fill(5)) as Address;
		const signature = await landSettlement(intent, { programId: program });
		// As an app that spread the service's record (with a programId of its choosing) into the call would.
		const spread = { ...intent, programId: program, recipientRouteCommitment: intent.recipientRouteCommitment } as CreateIntentRequest;
		await expect(client.confirmOnChain(signature, spread)).rejects.toMatchObject({ type: "SETTLEMENT_MISMATCH" });
	});

	it("reads at confirmed unless told finalized; a settlement not final yet is NOT_FINALIZED, then confirmed once it is", async () => {
		const intent = await signedPayment("4200");
		const signature = await landSettlement(intent);
		const commitmentAsked = () => (chain.lastParams.get("getTransaction")?.[1] as { commitment?: string }).commitment;
		chain.finalitySlots = 10;
		try {
			await client.confirmOnChain(signature, intent);
			expect(commitmentAsked()).toBe("confirmed");
			await expect(client.confirmOnChain(signature, intent, { commitment: "finalized" })).rejects.toMatchObject({ type: "NOT_FINALIZED" });
			// A transaction that does not settle the payment is said at once, not worth waiting for.
			const wrong = await landSettlement(intent, { amount: 4201n });
			await expect(client.confirmOnChain(wrong, intent, { commitment: "finalized" })).rejects.toMatchObject({ type: "SETTLEMENT_MISMATCH" });
			chain.advance(10);
			await expect(client.confirmOnChain(signature, intent, { commitment: "finalized" })).resolves.toMatchObject({ signature });
			// @solana/kit leaves out the RPC's own default, finalized.
			expect(commitmentAsked() ?? "finalized").toBe("finalized");
		} finally {
			chain.finalitySlots = 0;
		}
		await expect(client.confirmOnChain("5".repeat(88), intent, { commitment: "finalized" })).rejects.toMatchObject({ type: "NOT_ON_CHAIN" });
		await expect(client.confirmOnChain(signature, intent, { commitment: "processed" as "confirmed" })).rejects.toMatchObject({ type: "VALIDATION_ERROR" });
	});

	it("takes nothing from the RPC it can check: a transaction answered for another signature, or made up under it, is no proof", async () => {
		const intent = await signedPayment("4200");
		const settlement = await landSettlement(intent);
		const other = await landSettlement(await signedPayment("1"));
		const wire = chain.wireOf(settlement)!;
		try {
			// The real settlement of this payment, answered for another transaction's signature.
			chain.lieAboutTransactions(asked => (asked === other ? wire : undefined));
			await expect(client.confirmOnChain(other, intent)).rejects.toMatchObject({ type: "SETTLEMENT_MISMATCH", data: { problems: [expect.stringContaining("another transaction")] } });
			// The same transaction with the other signature written over its own: it no longer verifies.
			const forged = Uint8Array.from(wire);
			forged.set(decodeBase58(other)!, 1);
			chain.lieAboutTransactions(asked => (asked === other ? forged : undefined));
			await expect(client.confirmOnChain(other, intent)).rejects.toMatchObject({ type: "SETTLEMENT_MISMATCH", data: { problems: [expect.stringContaining("not signed by its fee payer")] } });
		} finally {
			chain.lieAboutTransactions(null);
		}
		await expect(client.confirmOnChain(settlement, intent)).resolves.toMatchObject({ signature: settlement });
	});

	it("a transaction answered without its status (meta: null) is not shown on chain: not settled, nor failed", async () => {
		const intent = await signedPayment("4300");
		const settlement = await landSettlement(intent);
		const rpc = await startLyingRpc(chain.url);
		try {
			const lied = new SettlementClient({ baseUrl: "http://127.0.0.1:9", solanaRpcUrl: rpc.url });
			rpc.lie("getTransaction", (_params, truth) => truth && { ...(truth as object), meta: null });
			await expect(lied.confirmOnChain(settlement, intent)).rejects.toMatchObject({ type: "NOT_ON_CHAIN" });
			await expect(lied.confirmOnChain(settlement, intent, { commitment: "finalized" })).rejects.toMatchObject({ type: "NOT_ON_CHAIN" });
			// A status without its err says nothing either.
			rpc.lie("getTransaction", (_params, truth) => truth && { ...(truth as object), meta: {} });
			await expect(lied.confirmOnChain(settlement, intent)).rejects.toMatchObject({ type: "NOT_ON_CHAIN" });
			rpc.honest();
			await expect(lied.confirmOnChain(settlement, intent)).resolves.toMatchObject({ signature: settlement });
		} finally {
			await rpc.close();
		}
	});

	it("reads at most 1 MiB of an RPC answer, and answers of another shape are typed errors, not TypeErrors (a review's replays)", async () => {
		const intent = await signedPayment("4350");
		const settlement = await landSettlement(intent);
		const rpc = await startLyingRpc(chain.url);
		try {
			const lied = new SettlementClient({ baseUrl: "http://127.0.0.1:9", solanaRpcUrl: rpc.url });
			// The settlement itself, padded with 3 MB of log lines: kit would have read and parsed it all.
			rpc.lie("getTransaction", (_params, truth) => truth && { ...(truth as { meta: object }), meta: { ...(truth as { meta: object }).meta, logMessages: Array(300_000).fill("0123456789") } });
			await expect(lied.confirmOnChain(settlement, intent)).rejects.toMatchObject({ type: "INVALID_ANSWER", message: expect.stringContaining("passed 1048576 bytes") });
			rpc.lie("getTransaction", (_params, truth) => truth && { ...(truth as object), transaction: null });
			await expect(lied.confirmOnChain(settlement, intent)).rejects.toMatchObject({ type: "INVALID_ANSWER" });
			rpc.honest();
			await expect(lied.confirmOnChain(settlement, intent)).resolves.toMatchObject({ signature: settlement, memo: `scs:v1:${intent.transactionCommitment}:${payoutNullifier(intent.senderWallet, intent.senderAuthorizationNonce)}` });
			// A service's view without its signature, passed on as the README does.
			await expect(lied.confirmOnChain(undefined as unknown as string, intent)).rejects.toMatchObject({ type: "VALIDATION_ERROR" });
			await expect(lied.confirmOnChain(5 as unknown as string, intent)).rejects.toMatchObject({ type: "VALIDATION_ERROR" });
		} finally {
			await rpc.close();
		}
	});

	it("verifies the fee payer's signature strictly: a small-order key with its trivial signature, which lenient checks pass for any message, is no proof", async () => {
		const intent = await signedPayment("4200");
		// The identity point as the fee payer, and R = identity, S = 0 as its signature.
		const identity = new Uint8Array(32);
		identity[0] = 1;
		const trivial = new Uint8Array(64);
		trivial[0] = 1;
		const { value: lifetime } = await createSolanaRpc(chain.url).getLatestBlockhash().send();
		const message = pipe(
			createTransactionMessage({ version: 0 }),
			m => setTransactionMessageFeePayer(getAddressDecoder().decode(identity), m),
			m => setTransactionMessageLifetimeUsingBlockhash(lifetime, m)
		);
		const compiled = compileTransaction(message);
		const wire = getTransactionEncoder().encode({ ...compiled, signatures: { [getAddressDecoder().decode(identity)]: trivial as SignatureBytes } });
		const asked = encodeBase58(trivial);
		chain.lieAboutTransactions(signature => (signature === asked ? wire : undefined));
		try {
			await expect(client.confirmOnChain(asked, intent)).rejects.toMatchObject({ type: "SETTLEMENT_MISMATCH", data: { problems: [expect.stringContaining("not signed by its fee payer")] } });
		} finally {
			chain.lieAboutTransactions(null);
		}
	});

	it("abandons a read of an RPC that never answers after requestTimeoutMs", async () => {
		const silent = http.createServer(() => {});
		await new Promise<void>(resolve => silent.listen(0, "127.0.0.1", resolve));
		try {
			const intent = await signedPayment("4400");
			const waiting = new SettlementClient({ baseUrl: "http://127.0.0.1:9", solanaRpcUrl: `http://127.0.0.1:${(silent.address() as AddressInfo).port}`, requestTimeoutMs: 300 });
			await expect(waiting.confirmOnChain(encodeBase58(new Uint8Array(64).fill(7)), intent)).rejects.toMatchObject({ type: "NETWORK_ERROR" });
		} finally {
			silent.closeAllConnections();
			await new Promise(resolve => silent.close(resolve));
		}
	});

	it("says when the signature is not on chain, when the RPC fails, and when no RPC is configured", async () => {
		const unknown = "5".repeat(88);
		const intent = await signedPayment("1");
		await expect(client.confirmOnChain(unknown, intent)).rejects.toMatchObject({ type: "NOT_ON_CHAIN" });
		chain.injectFault("getTransaction", "http-500");
		await expect(client.confirmOnChain(unknown, intent)).rejects.toMatchObject({ type: "NETWORK_ERROR" });
		await expect(new SettlementClient({ baseUrl: "http://127.0.0.1:9" }).confirmOnChain(unknown, intent)).rejects.toMatchObject({ type: "CONFIGURATION_ERROR" });
		await expect(client.confirmOnChain("not a signature", intent)).rejects.toMatchObject({ type: "VALIDATION_ERROR" });
	});
});
