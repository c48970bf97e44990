/**
 * The Node reads the chain before it lets a submission go (SPEC §2.4, §2.5, §5): the real service
 * with SOLANA_RPC_URL on the local chain (litesvm), Crankers signing their requests, and real
 * settlement transactions, sent or kept back. SOLANA_RPC_URL lists two endpoints: one that passes
 * everything through unless told to lie (`liar`), then the chain itself.
 */
import { createKeyPairSignerFromBytes, createSolanaRpc, getBase64EncodedWireTransaction, getSignatureFromTransaction, type Address, type KeyPairSigner } from "@solana/kit";
import { getAddMemoInstruction } from "@solana-program/memo";
import { randomBytes } from "node:crypto";
import { decodeBase58, encodeBase58, sha256Hex } from "../../lib/encoding";
import type { GenesisRoute } from "../../lib/registry";
import { buildSettlementInstructions, MEMO_PROGRAM, registryMemo, settlementMemo, signInstructions, signMemoTransaction, signSettlementTransaction } from "../../lib/settlement";
import { newRoute, newWallet, signedHeartbeat, signedIntent, signedTinOperation, writeSeedFile, type Wallet } from "../helpers/fixtures";
import { startNode, tempDir, type TestNode } from "../helpers/node";
import { waitFor } from "../../devkit/process";
import { LocalChain, LOCAL_CLUSTER } from "../../devkit/local-chain";
import { startLyingRpc, type LyingRpc } from "../helpers/lying-rpc";
import { NodeChain } from "../../lib/chain";
import { ProcessChain } from "../../lib/process-chain";
import { PUBLIC_CLUSTERS } from "../../lib/clusters";

const VALIDITY_SLOTS = 20;
/** The Node's floor under a submission's life (BLOCKHASH_LIFETIME_BLOCKS), a little over the chain's validity here. */
const LIFETIME_BLOCKS = 25;
let chain: LocalChain;
let liar: LyingRpc;
let rpc: ReturnType<typeof createSolanaRpc>;
let node: TestNode;
let route: GenesisRoute;
let mint: Address;
const sender = newWallet();
const holder = newWallet();
const other = newWallet();
const submitter = newWallet();
const verifier = newWallet();

/** The wallet as a @solana/kit signer (64 bytes: seed, then public key). */
const kitSigner = (wallet: Wallet): Promise<KeyPairSigner> => createKeyPairSignerFromBytes(Uint8Array.from([...wallet.secretKey, ...decodeBase58(wallet.address)!]));

beforeAll(async () => {
	chain = new LocalChain({ slotMs: 50, blockhashValiditySlots: VALIDITY_SLOTS });
	rpc = createSolanaRpc(await chain.start());
	liar = await startLyingRpc(chain.url);
	mint = chain.createMint(6);
	for (const wallet of [holder, other, submitter]) {
		chain.fundLamports(wallet.address);
		await chain.fundTokens(wallet.address, mint, 10n ** 12n);
	}
	route = newRoute();
	const dataDir = tempDir();
	node = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]), SOLANA_RPC_URL: `${liar.url},${chain.url}`, SOLANA_CLUSTER: LOCAL_CLUSTER, SLOT_POLL_INTERVAL_MS: "200", LEASE_TTL_MS: "4000", BLOCKHASH_LIFETIME_BLOCKS: String(LIFETIME_BLOCKS) }, dataDir);
	for (const [wallet, roles] of [[holder, ["settlement"]], [other, ["settlement"]], [submitter, ["submitter"]], [verifier, ["verifier"]]] as const)
		expect((await node.as(wallet)("POST", "/crankers/heartbeat", signedHeartbeat(wallet, [...roles], { liquidity: [] }))).status).toBe(200);
});

afterAll(async () => {
	await node?.stop();
	await liar?.close();
	await chain?.stop();
});

/** A log for NodeChain: its warnings into `warnings`, its news (a condition ended) into `news`. */
const logInto = (warnings: string[], news: string[] = []) => ({ warn: (line: string) => void warnings.push(line), info: (line: string) => void news.push(line) });
const patch = (cranker: Wallet, id: string, body: Record<string, unknown>, on = node) => on.as(cranker)("PATCH", `/intents/${id}/status`, { crankerPubkey: cranker.address, ...body });
const authorize = (cranker: Wallet, workId: string, on = node) => on.as(cranker)("POST", "/internal/settlement-authorizations/settlement", { workId, crankerPubkey: cranker.address });
const workerView = async (id: string, on = node) => (await on.as(holder)("GET", `/intents/${id}`)).body;

/** A verified intent of `amount`, leased by `holder`, with its payout authorization. */
async function leased(amount = "1500000", on = node) {
	const { status, body } = await on.http("POST", "/intents", signedIntent(sender, route, { tokenMintAddress: mint, amount, expiresAtSlot: chain.slot + 1_000_000 }));
	expect(status).toBe(201);
	expect((await patch(holder, body.id, { status: "CRANKER_LEASED", expectedVersion: 3 }, on)).status).toBe(200);
	const authorization = await authorize(holder, body.id, on);
	expect(authorization.status).toBe(200);
	return { id: body.id as string, transactionCommitment: body.transactionCommitment as string, payoutNullifier: authorization.body.payoutNullifier as string };
}

/** The settlement transaction of the intent (amount as given), signed on the latest blockhash; sent only when asked. */
async function settlement(intent: { transactionCommitment: string; payoutNullifier: string }, amount: bigint, send: boolean) {
	const { signature, lastValidBlockHeight } = await signedSettlement(intent, amount, send);
	return { signature, lastValidBlockHeight };
}

/** settlement(), with its wire transaction (base64). */
async function signedSettlement(intent: { transactionCommitment: string; payoutNullifier: string }, amount: bigint, send: boolean) {
	const { value: lifetime } = await rpc.getLatestBlockhash().send();
	const { transaction } = await signSettlementTransaction(
		{ cranker: await kitSigner(holder), mint, decimals: 6, amount, recipientRouteCommitment: route.routeCommitment, transactionCommitment: intent.transactionCommitment, payoutNullifier: intent.payoutNullifier },
		lifetime
	);
	const wire = getBase64EncodedWireTransaction(transaction);
	if (send) await rpc.sendTransaction(wire, { encoding: "base64" }).send();
	return { signature: getSignatureFromTransaction(transaction), lastValidBlockHeight: Number(lifetime.lastValidBlockHeight), wire };
}

const submit = (id: string, tx: { signature: string; lastValidBlockHeight: number }, on = node) =>
	patch(holder, id, { status: "SUBMITTED", expectedVersion: 4, transactionSignature: tx.signature, lastValidBlockHeight: tx.lastValidBlockHeight }, on);

/** Waits until the submission can no longer land by the Node's rule: past both the claim and its own floor. */
async function pastLanding(id: string) {
	const { lastValidBlockHeight, heightAtSubmission } = (await workerView(id)).submission;
	expect(heightAtSubmission).toEqual(expect.any(Number));
	const height = Math.max(lastValidBlockHeight, heightAtSubmission + LIFETIME_BLOCKS);
	await waitFor(() => chain.slot > height, 10_000, `the chain past height ${height}`, 20);
}

describe("CRANKER_LEASED → SUBMITTED: only while the intent has not expired", () => {
	it("refuses a report after expiresAtSlot by the slot read with it, however old the slot last polled (a review: up to 6 s and 15 slots behind)", async () => {
		const dataDir = tempDir();
		// The slot polled at start only: the report's own reading is what tells.
		const polledOnce = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]), SOLANA_RPC_URL: chain.url, SOLANA_CLUSTER: LOCAL_CLUSTER, SLOT_POLL_INTERVAL_MS: "600000", BLOCKHASH_LIFETIME_BLOCKS: String(LIFETIME_BLOCKS) }, dataDir);
		try {
			expect((await polledOnce.as(holder)("POST", "/crankers/heartbeat", signedHeartbeat(holder, ["settlement"], { liquidity: [] }))).status).toBe(200);
			const expiresAtSlot = chain.slot + 20;
			const { status, body } = await polledOnce.http("POST", "/intents", signedIntent(sender, route, { tokenMintAddress: mint, amount: "1500", expiresAtSlot }));
			expect(status).toBe(201);
			expect((await patch(holder, body.id, { status: "CRANKER_LEASED", expectedVersion: 3 }, polledOnce)).status).toBe(200);
			const authorization = await authorize(holder, body.id, polledOnce);
			expect(authorization.status).toBe(200);
			await waitFor(() => chain.slot > expiresAtSlot + 5, 10_000, `the chain past slot ${expiresAtSlot}`, 20);
			const { signature, lastValidBlockHeight } = await settlement({ transactionCommitment: body.transactionCommitment, payoutNullifier: authorization.body.payoutNullifier }, 1500n, false);
			const report = await patch(holder, body.id, { status: "SUBMITTED", expectedVersion: 4, transactionSignature: signature, lastValidBlockHeight }, polledOnce);
			expect(report).toMatchObject({ status: 409, body: { type: "INVALID_TRANSITION", data: { state: "REJECTED", rejectionReason: "EXPIRED" } } });
			expect((await workerView(body.id, polledOnce)).receiverStatus).toBe("REJECTED");
		} finally {
			await polledOnce.stop();
		}
	});
});

describe("SUBMITTED → VERIFIED (dropped): only once the transaction can no longer land", () => {
	it("refuses a drop while the blockhash is valid (409 SUBMISSION_LIVE) and issues no second authorization; accepts it once expired", async () => {
		const intent = await leased();
		const tx = await settlement(intent, 1_500_000n, false);
		expect((await submit(intent.id, tx)).status).toBe(200);

		const early = await patch(holder, intent.id, { status: "VERIFIED", expectedVersion: 5, reason: "dropped" });
		expect(early.body).toMatchObject({ code: 409, type: "SUBMISSION_LIVE", data: { status: "unknown", lastLandingHeight: expect.any(Number) } });
		expect((await workerView(intent.id)).receiverStatus).toBe("SUBMITTED");
		// No lease to hold, so no second payout authorization while the first transaction could land.
		expect((await patch(other, intent.id, { status: "CRANKER_LEASED", expectedVersion: 5 })).body).toMatchObject({ code: 409, type: "INVALID_TRANSITION" });
		expect((await authorize(holder, intent.id)).body).toMatchObject({ code: 409, type: "INVALID_TRANSITION" });

		await pastLanding(intent.id);
		const dropped = await patch(holder, intent.id, { status: "VERIFIED", expectedVersion: 5, reason: "dropped" });
		expect(dropped.body).toMatchObject({ receiverStatus: "VERIFIED", submission: null, lease: null });
	});

	it("refuses to let go a settlement a pruned ledger forgot (503 RPC_HISTORY_TOO_SHORT): a landed one is not taken for dropped, and paid again", async () => {
		const intent = await leased();
		const tx = await settlement(intent, 1_500_000n, true);
		expect((await submit(intent.id, tx)).status).toBe(200);
		const { slotAtSubmission } = (await workerView(intent.id)).submission;
		expect(slotAtSubmission).toBeGreaterThan(0);
		await pastLanding(intent.id);
		// Both endpoints now keep only the slots since the submission: the landed settlement is unknown to them.
		chain.keepHistoryFrom(slotAtSubmission + 1);
		try {
			for (const move of [{ status: "VERIFIED", reason: "dropped" }, { status: "REJECTED", reason: "gave up" }]) {
				const refused = await patch(holder, intent.id, { ...move, expectedVersion: 5 });
				expect(refused.body).toMatchObject({ code: 503, type: "CHAIN_UNAVAILABLE", data: { reason: "RPC_HISTORY_TOO_SHORT", firstAvailableSlot: slotAtSubmission + 1, slotAtSubmission: Math.max(0, slotAtSubmission - LIFETIME_BLOCKS) } });
			}
			expect((await workerView(intent.id)).receiverStatus).toBe("SUBMITTED");
			// A history that reaches back a blockhash lifetime before the report shows the landed settlement again.
			chain.keepHistoryFrom(Math.max(0, slotAtSubmission - LIFETIME_BLOCKS));
			expect((await patch(holder, intent.id, { status: "VERIFIED", expectedVersion: 5, reason: "dropped" })).body).toMatchObject({ code: 409, type: "SUBMISSION_LIVE", data: { status: "landed" } });
		} finally {
			chain.keepHistoryFrom(0);
		}
		expect((await patch(holder, intent.id, { status: "CONFIRMED", expectedVersion: 5, transactionSignature: tx.signature })).status).toBe(200);
	});

	it("refuses a drop of a transaction that landed, even once its blockhash expired", async () => {
		const intent = await leased();
		const tx = await settlement(intent, 1_500_000n, true);
		expect((await submit(intent.id, tx)).status).toBe(200);
		await pastLanding(intent.id);
		expect((await patch(holder, intent.id, { status: "VERIFIED", expectedVersion: 5, reason: "dropped" })).body).toMatchObject({ code: 409, type: "SUBMISSION_LIVE", data: { status: "landed" } });
		expect((await patch(holder, intent.id, { status: "CONFIRMED", expectedVersion: 5, transactionSignature: tx.signature })).status).toBe(200);
	});

	it("does not take a Cranker's lowered lastValidBlockHeight for proof: the Node's own reading at SUBMITTED sets a floor", async () => {
		const intent = await leased();
		const tx = await settlement(intent, 1_500_000n, false);
		// The claim: expired already at the next block. The real blockhash lives 20 blocks.
		expect((await submit(intent.id, { ...tx, lastValidBlockHeight: chain.slot })).status).toBe(200);
		const { heightAtSubmission } = (await workerView(intent.id)).submission;
		await waitFor(() => chain.slot > tx.lastValidBlockHeight - 5, 10_000, "the claim to pass", 20);
		const early = await patch(holder, intent.id, { status: "VERIFIED", expectedVersion: 5, reason: "dropped" });
		expect(early.body).toMatchObject({ code: 409, type: "SUBMISSION_LIVE", data: { lastLandingHeight: heightAtSubmission + LIFETIME_BLOCKS } });
		await pastLanding(intent.id);
		expect((await patch(holder, intent.id, { status: "VERIFIED", expectedVersion: 5, reason: "dropped" })).status).toBe(200);
	});

	it("refuses a lastValidBlockHeight beyond any blockhash valid now (422): it would keep the intent stuck", async () => {
		const intent = await leased();
		const tx = await settlement(intent, 1_500_000n, false);
		const answer = await submit(intent.id, { ...tx, lastValidBlockHeight: 2 ** 53 - 1 });
		expect(answer.body).toMatchObject({ code: 422, type: "VALIDATION_ERROR", data: [{ field: "lastValidBlockHeight" }] });
		expect((await workerView(intent.id)).receiverStatus).toBe("CRANKER_LEASED");
	});

	it("does not let a reported transaction that is not this settlement keep the intent stuck, nor pass for its proof", async () => {
		const intent = await leased();
		const { value: lifetime } = await rpc.getLatestBlockhash().send();
		const unrelated = await signMemoTransaction(await kitSigner(holder), "hello", lifetime);
		await rpc.sendTransaction(getBase64EncodedWireTransaction(unrelated), { encoding: "base64" }).send();
		expect((await submit(intent.id, { signature: getSignatureFromTransaction(unrelated), lastValidBlockHeight: Number(lifetime.lastValidBlockHeight) })).status).toBe(200);
		expect((await patch(holder, intent.id, { status: "CONFIRMED", expectedVersion: 5, transactionSignature: getSignatureFromTransaction(unrelated) })).body).toMatchObject({ code: 422, type: "SETTLEMENT_MISMATCH" });
		// It says nothing about whether the real settlement can still land: judged by the last landing height.
		expect((await patch(holder, intent.id, { status: "VERIFIED", expectedVersion: 5, reason: "dropped" })).body).toMatchObject({ code: 409, type: "SUBMISSION_LIVE", data: { status: "landed" } });
		await pastLanding(intent.id);
		expect((await patch(holder, intent.id, { status: "VERIFIED", expectedVersion: 5, reason: "dropped" })).status).toBe(200);
	});

	it("a report sent many times at once reads each endpoint as one, and a transaction an endpoint showed is not fetched again (a review)", async () => {
		const intent = await leased();
		const { value: lifetime } = await rpc.getLatestBlockhash().send();
		const unrelated = await signMemoTransaction(await kitSigner(holder), "nor this one", lifetime);
		await rpc.sendTransaction(getBase64EncodedWireTransaction(unrelated), { encoding: "base64" }).send();
		const transactionSignature = getSignatureFromTransaction(unrelated);
		expect((await submit(intent.id, { signature: transactionSignature, lastValidBlockHeight: Number(lifetime.lastValidBlockHeight) })).status).toBe(200);
		const mismatch = { code: 422, type: "SETTLEMENT_MISMATCH" };
		expect((await patch(holder, intent.id, { status: "CONFIRMED", expectedVersion: 5, transactionSignature })).body).toMatchObject(mismatch);
		const [fetched, statuses] = [liar.calls.get("getTransaction") ?? 0, liar.calls.get("getSignatureStatuses") ?? 0];
		// Six bodies of the same report (their fields in every order, each signed once), sent at once.
		const fields = [["status", "CONFIRMED"], ["expectedVersion", 5], ["transactionSignature", transactionSignature]] as const;
		const orders = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]].map(order => Object.fromEntries(order.map(i => fields[i])));
		const answers = await Promise.all(orders.map(body => patch(holder, intent.id, body)));
		expect(answers.map(answer => answer.body)).toEqual(orders.map(() => expect.objectContaining(mismatch)));
		expect((liar.calls.get("getTransaction") ?? 0) - fetched).toBe(0);
		expect((liar.calls.get("getSignatureStatuses") ?? 0) - statuses).toBeLessThan(orders.length);
	});

	it("answers 503 CHAIN_UNAVAILABLE when the chain cannot be read, and changes nothing", async () => {
		const intent = await leased();
		const tx = await settlement(intent, 1_500_000n, false);
		expect((await submit(intent.id, tx)).status).toBe(200);
		await pastLanding(intent.id);
		chain.injectFault("getBlockHeight", "http-500", 3);
		expect((await patch(holder, intent.id, { status: "VERIFIED", expectedVersion: 5, reason: "dropped" })).body).toMatchObject({ code: 503, type: "CHAIN_UNAVAILABLE" });
		chain.clearFaults();
		expect((await workerView(intent.id)).receiverStatus).toBe("SUBMITTED");
	});
});

describe("SUBMITTED → CONFIRMED: only a landed transaction that is exactly this settlement", () => {
	it("refuses a made-up transaction signature (409 NOT_ON_CHAIN)", async () => {
		const intent = await leased();
		const madeUp = { signature: encodeBase58(randomBytes(64)), lastValidBlockHeight: chain.slot + VALIDITY_SLOTS };
		expect((await submit(intent.id, madeUp)).status).toBe(200);
		const confirmed = await patch(holder, intent.id, { status: "CONFIRMED", expectedVersion: 5, transactionSignature: madeUp.signature });
		expect(confirmed.body).toMatchObject({ code: 409, type: "NOT_ON_CHAIN" });
		expect((await node.http("GET", `/intents/${intent.id}`)).body.status).toBe("pending");
	});

	it("refuses a real transaction with the wrong amount (422 SETTLEMENT_MISMATCH), and it cannot be rejected either: it landed", async () => {
		const intent = await leased("1500000");
		const tx = await settlement(intent, 1_499_999n, true);
		expect((await submit(intent.id, tx)).status).toBe(200);
		const confirmed = await patch(holder, intent.id, { status: "CONFIRMED", expectedVersion: 5, transactionSignature: tx.signature });
		expect(confirmed.body).toMatchObject({ code: 422, type: "SETTLEMENT_MISMATCH" });
		expect(JSON.stringify(confirmed.body.data.problems)).toContain("expected 1500000");
		const rejected = await patch(holder, intent.id, { status: "REJECTED", expectedVersion: 5, reason: "wrong amount" });
		expect(rejected.body).toMatchObject({ code: 409, type: "INVALID_TRANSITION" });
	});

	it("refuses one transfer carrying two intents' memos (422 SETTLEMENT_MISMATCH for each): one payment settles one intent", async () => {
		// Two intents of the same TIN, mint and amount; one transfer, and a memo for each (a review's replay: both were CONFIRMED).
		const [first, second] = [await leased(), await leased()];
		const { value: lifetime } = await rpc.getLatestBlockhash().send();
		const cranker = await kitSigner(holder);
		const { instructions } = await buildSettlementInstructions({ cranker, mint, decimals: 6, amount: 1_500_000n, recipientRouteCommitment: route.routeCommitment, transactionCommitment: first.transactionCommitment, payoutNullifier: first.payoutNullifier });
		instructions.push(getAddMemoInstruction({ memo: settlementMemo(second.transactionCommitment, second.payoutNullifier) }, { programAddress: MEMO_PROGRAM }));
		const transaction = await signInstructions(cranker, instructions, lifetime);
		await rpc.sendTransaction(getBase64EncodedWireTransaction(transaction), { encoding: "base64" }).send();
		const tx = { signature: getSignatureFromTransaction(transaction), lastValidBlockHeight: Number(lifetime.lastValidBlockHeight) };
		for (const intent of [first, second]) {
			expect((await submit(intent.id, tx)).status).toBe(200);
			const confirmed = await patch(holder, intent.id, { status: "CONFIRMED", expectedVersion: 5, transactionSignature: tx.signature });
			expect(confirmed.body).toMatchObject({ code: 422, type: "SETTLEMENT_MISMATCH" });
			expect(JSON.stringify(confirmed.body.data.problems)).toContain("1 other settlement memo");
			expect((await node.http("GET", `/intents/${intent.id}`)).body.status).toBe("pending");
		}
	});

	it("takes no RPC's word for which transaction a signature names: the real settlement answered for another landed signature is refused (422)", async () => {
		const intent = await leased();
		const real = await settlement(intent, 1_500_000n, true);
		const { value: lifetime } = await rpc.getLatestBlockhash().send();
		const unrelated = await signMemoTransaction(await kitSigner(holder), "not a settlement", lifetime);
		await rpc.sendTransaction(getBase64EncodedWireTransaction(unrelated), { encoding: "base64" }).send();
		const reported = { signature: getSignatureFromTransaction(unrelated), lastValidBlockHeight: Number(lifetime.lastValidBlockHeight) };
		expect((await submit(intent.id, reported)).status).toBe(200);
		chain.lieAboutTransactions(asked => (asked === reported.signature ? chain.wireOf(real.signature) : undefined));
		try {
			const confirmed = await patch(holder, intent.id, { status: "CONFIRMED", expectedVersion: 5, transactionSignature: reported.signature });
			expect(confirmed.body).toMatchObject({ code: 422, type: "SETTLEMENT_MISMATCH" });
			expect(JSON.stringify(confirmed.body.data.problems)).toContain("another transaction");
		} finally {
			chain.lieAboutTransactions(null);
		}
		expect((await workerView(intent.id)).receiverStatus).toBe("SUBMITTED");
	});

	it("accepts the real settlement, marked onChainChecked", async () => {
		const intent = await leased();
		const tx = await settlement(intent, 1_500_000n, true);
		expect((await submit(intent.id, tx)).status).toBe(200);
		const confirmed = await patch(holder, intent.id, { status: "CONFIRMED", expectedVersion: 5, transactionSignature: tx.signature });
		expect(confirmed.body).toMatchObject({ receiverStatus: "CONFIRMED", status: "executed", transactionSignature: tx.signature });
		expect(confirmed.body.history.at(-1)).toMatchObject({ state: "CONFIRMED", by: holder.address, onChainChecked: true });
	});
});

describe("SUBMITTED → REJECTED frees the nonce: only on a failure on chain, or once the transaction can no longer land", () => {
	it("refuses while the transaction may land (409 SUBMISSION_LIVE), accepts once its blockhash expired", async () => {
		const intent = await leased();
		const tx = await settlement(intent, 1_500_000n, false);
		expect((await submit(intent.id, tx)).status).toBe(200);
		expect((await patch(holder, intent.id, { status: "REJECTED", expectedVersion: 5, reason: "gave up" })).body).toMatchObject({ code: 409, type: "SUBMISSION_LIVE" });
		await pastLanding(intent.id);
		expect((await patch(holder, intent.id, { status: "REJECTED", expectedVersion: 5, reason: "gave up" })).body).toMatchObject({ receiverStatus: "REJECTED", rejectionReason: "gave up" });
	});
});

describe("several RPC endpoints: one that lies or lags delays an exit, never makes one", () => {
	afterEach(() => {
		liar.honest();
		liar.down = false;
	});

	it("an endpoint hiding a landed settlement lets no drop or rejection through; it is confirmed once every endpoint shows it", async () => {
		const intent = await leased();
		const tx = await settlement(intent, 1_500_000n, true);
		expect((await submit(intent.id, tx)).status).toBe(200);
		liar.lie("getSignatureStatuses", () => ({ context: { slot: chain.slot }, value: [null] }));
		liar.lie("getTransaction", () => null);
		await pastLanding(intent.id);
		// The first endpoint alone would have let the intent go back to VERIFIED: a second payment.
		expect((await patch(holder, intent.id, { status: "VERIFIED", expectedVersion: 5, reason: "dropped" })).body).toMatchObject({ code: 409, type: "SUBMISSION_LIVE", data: { status: "landed" } });
		expect((await patch(holder, intent.id, { status: "REJECTED", expectedVersion: 5, reason: "gave up" })).body).toMatchObject({ code: 409, type: "INVALID_TRANSITION" });
		expect((await patch(holder, intent.id, { status: "CONFIRMED", expectedVersion: 5, transactionSignature: tx.signature })).body).toMatchObject({ code: 409, type: "NOT_ON_CHAIN" });
		expect((await workerView(intent.id)).receiverStatus).toBe("SUBMITTED");
		liar.honest();
		expect((await patch(holder, intent.id, { status: "CONFIRMED", expectedVersion: 5, transactionSignature: tx.signature })).body).toMatchObject({ receiverStatus: "CONFIRMED" });
	});

	it("an endpoint answering a settlement that never landed, signed by the Cranker, is no confirmation", async () => {
		const intent = await leased();
		const kept = await signedSettlement(intent, 1_500_000n, false);
		expect((await submit(intent.id, kept)).status).toBe(200);
		liar.lie("getSignatureStatuses", () => ({ context: { slot: chain.slot }, value: [{ slot: chain.slot - 1, confirmations: null, err: null, status: { Ok: null }, confirmationStatus: "confirmed" }] }));
		liar.lie("getTransaction", () => ({ slot: chain.slot - 1, blockTime: null, version: "legacy", transaction: [kept.wire, "base64"], meta: { err: null, status: { Ok: null }, fee: 5000, preBalances: [], postBalances: [], innerInstructions: [], logMessages: [], preTokenBalances: [], postTokenBalances: [], rewards: [], loadedAddresses: { writable: [], readonly: [] } } }));
		expect((await patch(holder, intent.id, { status: "CONFIRMED", expectedVersion: 5, transactionSignature: kept.signature })).body).toMatchObject({ code: 409, type: "NOT_ON_CHAIN" });
		expect((await workerView(intent.id)).receiverStatus).toBe("SUBMITTED");
	});

	it("a submission's height is the highest any endpoint shows: one lagging behind cannot make it expire early", async () => {
		const intent = await leased();
		const tx = await settlement(intent, 1_500_000n, false);
		liar.lie("getBlockHeight", (_, truth) => Number(truth) - (LIFETIME_BLOCKS - 5));
		const heightBefore = Number(await rpc.getBlockHeight().send());
		expect((await submit(intent.id, tx)).status).toBe(200);
		expect((await workerView(intent.id)).submission.heightAtSubmission).toBeGreaterThanOrEqual(heightBefore);
	});

	it("a height made up high is not believed: endpoints more than a blockhash lifetime apart are 503 at SUBMITTED, and change nothing", async () => {
		const intent = await leased();
		const tx = await settlement(intent, 1_500_000n, false);
		for (const madeUp of [10 ** 15, "x", -5]) {
			liar.lie("getBlockHeight", () => madeUp);
			expect((await submit(intent.id, tx)).body).toMatchObject({ code: 503, type: "CHAIN_UNAVAILABLE" });
			expect((await workerView(intent.id)).receiverStatus).toBe("CRANKER_LEASED");
		}
		// Within a lifetime of the others, the highest is believed: a lie there delays a drop by a lifetime at most.
		liar.lie("getBlockHeight", (_, truth) => Number(truth) + LIFETIME_BLOCKS - 5);
		expect((await submit(intent.id, tx)).status).toBe(200);
	});

	it("tells the operator which endpoint disagrees or fails, by its place in the list, never by its URL", async () => {
		const warnings: string[] = [];
		const both = new NodeChain([liar.url, chain.url], LOCAL_CLUSTER, logInto(warnings));
		const landed = await settlement(await leased(), 1_500_000n, true);
		const touches = async () => ({ mismatches: [], related: true });
		liar.lie("getSignatureStatuses", () => ({ context: { slot: chain.slot }, value: [null] }));
		expect((await both.observe(landed.signature, touches)).map(o => o.status)).toEqual(["unknown", "landed"]);
		// Once may be an endpoint catching up with a landing; twice in a row is told.
		expect(warnings).toEqual([]);
		expect((await both.observe(landed.signature, touches)).map(o => o.status)).toEqual(["unknown", "landed"]);
		expect(warnings).toEqual([`The endpoints of SOLANA_RPC_URL disagree on transaction ${landed.signature} again: entry 1 unknown, entry 2 landed`]);
		liar.honest();
		expect((await both.observe(landed.signature, touches)).map(o => o.status)).toEqual(["landed", "landed"]);
		liar.lie("getSignatureStatuses", () => ({ context: { slot: chain.slot }, value: [null] }));
		expect((await both.observe(landed.signature, touches)).map(o => o.status)).toEqual(["unknown", "landed"]);
		expect(warnings).toHaveLength(1);
		liar.down = true;
		await expect(both.blockHeights()).rejects.toThrow();
		await expect(both.blockHeights()).rejects.toThrow();
		expect(warnings.slice(1)).toEqual([expect.stringMatching(/^SOLANA_RPC_URL entry 1 cannot be read; moves that need the chain answer 503 until it can \(HTTP 500\)$/)]);
		expect(warnings.join("\n")).not.toContain(liar.url);
	});

	it("an endpoint that cannot be read is 503 CHAIN_UNAVAILABLE, and changes nothing", async () => {
		const intent = await leased();
		const tx = await settlement(intent, 1_500_000n, false);
		expect((await submit(intent.id, tx)).status).toBe(200);
		await pastLanding(intent.id);
		liar.down = true;
		expect((await patch(holder, intent.id, { status: "VERIFIED", expectedVersion: 5, reason: "dropped" })).body).toMatchObject({ code: 503, type: "CHAIN_UNAVAILABLE" });
		expect((await workerView(intent.id)).receiverStatus).toBe("SUBMITTED");
		liar.down = false;
		expect((await patch(holder, intent.id, { status: "VERIFIED", expectedVersion: 5, reason: "dropped" })).status).toBe(200);
	});
});

describe("every endpoint must be on the cluster SOLANA_CLUSTER names", () => {
	const devnet = PUBLIC_CLUSTERS.get("solana-devnet")!;
	const stops: (() => void)[] = [];
	afterEach(() => {
		for (const stop of stops.splice(0)) stop();
		liar.honest();
	});

	/** A ProcessChain polling every 20 ms, started as a service would start it, and stopped after the test. */
	async function startedChain(rpcUrls: string[], cluster: string, warnings: string[] = []): Promise<ProcessChain> {
		const shared = new ProcessChain(rpcUrls, cluster, 20, logInto(warnings));
		const user = {};
		await shared.start(user);
		stops.push(() => shared.stop(user));
		return shared;
	}

	it("an endpoint of another cluster holds every move back (503 RPC_WRONG_CLUSTER) until it is on the same one, and is told once", async () => {
		const warnings: string[] = [];
		const news: string[] = [];
		const both = new NodeChain([liar.url, chain.url], LOCAL_CLUSTER, logInto(warnings, news));
		const landed = await settlement(await leased(), 1_500_000n, true);
		const touches = async () => ({ mismatches: [], related: true });
		liar.lie("getGenesisHash", () => devnet);
		const wrongCluster = { type: "CHAIN_UNAVAILABLE", data: { reason: "RPC_WRONG_CLUSTER", genesisHashes: [devnet, chain.genesisHash] } };
		await expect(both.blockHeights()).rejects.toMatchObject(wrongCluster);
		await expect(both.observe(landed.signature, touches)).rejects.toMatchObject(wrongCluster);
		// An answer that is no hash is named as such, never echoed.
		liar.lie("getGenesisHash", () => "x".repeat(5000));
		await expect(both.blockHeights()).rejects.toMatchObject({ data: { genesisHashes: ["unreadable", chain.genesisHash] } });
		liar.honest();
		expect((await both.observe(landed.signature, touches)).map(o => o.status)).toEqual(["landed", "landed"]);
		// Told when it starts, not at every move (a reminder at most once a minute); its end is news.
		expect(warnings).toEqual([`The cluster of SOLANA_RPC_URL is not one for every endpoint, and no public cluster (one must be named: solana-mainnet, solana-devnet, solana-testnet); moves that need the chain answer 503, and the slot counts only the endpoints on it, until it is (entry 1 ${devnet}, entry 2 ${chain.genesisHash})`]);
		expect(news).toEqual([expect.stringMatching(/^The cluster of SOLANA_RPC_URL works again after 3 failures over \d+ s$/)]);
	});

	it("endpoints on the public cluster named are taken, and read for it once, not at every move; a name that is no public one is no key into their list", async () => {
		liar.lie("getGenesisHash", () => devnet);
		const onDevnet = new NodeChain([liar.url], "solana-devnet", logInto([]));
		const before = liar.calls.get("getGenesisHash") ?? 0;
		for (let i = 0; i < 3; i++) expect(await onDevnet.blockHeights()).toHaveLength(1);
		expect((liar.calls.get("getGenesisHash") ?? 0) - before).toBe(1);
		liar.honest();
		expect(await new NodeChain([chain.url], "constructor", logInto([])).blockHeights()).toHaveLength(1);
	});

	it("a public cluster under another SOLANA_CLUSTER name is no cluster (503 RPC_WRONG_CLUSTER): named otherwise, mainnet would escape BLOCKHASH_LIFETIME_BLOCKS' floor", async () => {
		const mainnet = PUBLIC_CLUSTERS.get("solana-mainnet")!;
		liar.lie("getGenesisHash", () => mainnet);
		const warnings: string[] = [];
		const renamed = new NodeChain([liar.url], "prod", logInto(warnings));
		await expect(renamed.blockHeights()).rejects.toMatchObject({ type: "CHAIN_UNAVAILABLE", data: { reason: "RPC_WRONG_CLUSTER", genesisHashes: [mainnet] } });
		expect(warnings).toEqual([expect.stringContaining("and no public cluster (one must be named: solana-mainnet, solana-devnet, solana-testnet)")]);
		liar.honest();
	});

	it("an endpoint that moves to another cluster after the check is found at the next one, ten minutes on", async () => {
		liar.lie("getGenesisHash", () => devnet);
		const onDevnet = new NodeChain([liar.url], "solana-devnet", logInto([]));
		expect(await onDevnet.blockHeights()).toHaveLength(1);
		// Its provider points it at mainnet: trusted for the rest of the ten minutes, not read again.
		liar.lie("getGenesisHash", () => PUBLIC_CLUSTERS.get("solana-mainnet"));
		const reads = liar.calls.get("getGenesisHash") ?? 0;
		expect(await onDevnet.blockHeights()).toHaveLength(1);
		expect(liar.calls.get("getGenesisHash") ?? 0).toBe(reads);
		const now = performance.now.bind(performance);
		const later = jest.spyOn(performance, "now").mockImplementation(() => now() + 10 * 60_000);
		try {
			await expect(onDevnet.blockHeights()).rejects.toMatchObject({ type: "CHAIN_UNAVAILABLE", data: { reason: "RPC_WRONG_CLUSTER", genesisHashes: [PUBLIC_CLUSTERS.get("solana-mainnet")] } });
			expect(liar.calls.get("getGenesisHash") ?? 0).toBe(reads + 1);
		} finally {
			later.mockRestore();
		}
	});

	it("a Node whose SOLANA_CLUSTER names a public cluster its endpoints are not on takes no SUBMITTED report (503), and changes nothing", async () => {
		const dataDir = tempDir();
		const readsBefore = chain.calls.get("getGenesisHash") ?? 0;
		const devnetNode = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]), SOLANA_RPC_URL: chain.url, SOLANA_CLUSTER: "solana-devnet" }, dataDir);
		try {
			// Checked as it starts, so that the operator is told before any settlement needs it.
			await waitFor(() => (chain.calls.get("getGenesisHash") ?? 0) > readsBefore, 5_000, "the cluster check at start", 20);
			expect((await devnetNode.as(holder)("POST", "/crankers/heartbeat", signedHeartbeat(holder, ["settlement"], { liquidity: [] }))).status).toBe(200);
			const intent = await leased("1500000", devnetNode);
			const tx = await settlement(intent, 1_500_000n, false);
			expect((await submit(intent.id, tx, devnetNode)).body).toMatchObject({ code: 503, type: "CHAIN_UNAVAILABLE", data: { reason: "RPC_WRONG_CLUSTER", genesisHashes: [chain.genesisHash] } });
			expect((await workerView(intent.id, devnetNode)).receiverStatus).toBe("CRANKER_LEASED");
			// Nor is its slot believed: another cluster's says nothing of the expiresAtSlot a sender
			// signed for this one. An intent two seconds past the local chain's slot is judged by its
			// time alone there, and refused EXPIRED by a Node on the right cluster (polling every 200 ms).
			const pastSlot = { expiresAtSlot: chain.slot - 20 };
			expect((await devnetNode.http("POST", "/intents", signedIntent(newWallet(), route, pastSlot))).status).toBe(201);
			expect((await node.http("POST", "/intents", signedIntent(newWallet(), route, pastSlot))).body).toMatchObject({ type: "EXPIRED" });
		} finally {
			await devnetNode.stop();
		}
	});

	it("the slot moves only while the endpoints are on the cluster named, and again once they are", async () => {
		liar.lie("getGenesisHash", () => PUBLIC_CLUSTERS.get("solana-mainnet"));
		const genesisReads = liar.calls.get("getGenesisHash") ?? 0;
		const warnings: string[] = [];
		const shared = await startedChain([liar.url], "solana-devnet", warnings);
		const polled = liar.calls.get("getSlot") ?? 0;
		await waitFor(() => (liar.calls.get("getSlot") ?? 0) >= polled + 5, 5_000, "more slot polls", 10);
		expect(shared.slots.latest()).toBeNull();
		expect(warnings).toEqual([expect.stringMatching(/^The cluster of SOLANA_RPC_URL is not solana-devnet .*the slot counts only the endpoints on it/)]);
		// Tried again every few seconds, not at every poll.
		expect((liar.calls.get("getGenesisHash") ?? 0) - genesisReads).toBe(1);
		liar.lie("getGenesisHash", () => devnet);
		await waitFor(() => shared.slots.latest() !== null, 10_000, "the slot once on the cluster", 20);
	});

	it("of three endpoints, one on another cluster holds every move back but not the slot: the other two agree on it", async () => {
		liar.lie("getGenesisHash", () => devnet);
		liar.lie("getSlot", () => 10 ** 9);
		const shared = await startedChain([chain.url, liar.url, chain.url], LOCAL_CLUSTER);
		await expect(shared.reads!.blockHeights()).rejects.toMatchObject({ data: { reason: "RPC_WRONG_CLUSTER" } });
		const from = chain.slot;
		await waitFor(() => (shared.slots.latest() ?? 0) > from + 2, 5_000, "the slot moving on", 10);
		expect(shared.slots.latest()).toBeLessThan(10 ** 9);
	});

	it("one process reads its endpoints once, whichever of the mempool, the verifier and the TIN service it runs", async () => {
		const counted = await startLyingRpc(chain.url);
		const dataDir = tempDir();
		// Slots polled once a minute: only the polls of the start are counted.
		const one = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]), SOLANA_RPC_URL: counted.url, SOLANA_CLUSTER: LOCAL_CLUSTER, SLOT_POLL_INTERVAL_MS: "60000" }, dataDir);
		try {
			expect(counted.calls.get("getGenesisHash")).toBe(1);
			expect(counted.calls.get("getSlot")).toBe(1);
		} finally {
			await one.stop();
			await counted.close();
		}
	});
});

describe("TIN finalized: the registry transaction must have landed (SPEC §5)", () => {
	async function submittedOperation() {
		const request = signedTinOperation(newWallet(), { intentType: "create" });
		const created = await node.http("POST", "/tin-operations", request);
		expect(created.status).toBe(201);
		const stage = (cranker: Wallet, name: string, body: Record<string, unknown> = {}) =>
			node.as(cranker)("POST", `/tin-operations/${created.body.id}/${name}`, { crankerPubkey: cranker.address, ...body });
		expect((await stage(verifier, "verified")).status).toBe(200);
		expect((await stage(submitter, "fee-committed", { feeAmount: "50000" })).status).toBe(200);
		return { request, stage };
	}

	async function memoTransaction(memo: string, payer: Wallet = submitter) {
		const { value: lifetime } = await rpc.getLatestBlockhash().send();
		const transaction = await signMemoTransaction(await kitSigner(payer), memo, lifetime);
		await rpc.sendTransaction(getBase64EncodedWireTransaction(transaction), { encoding: "base64" }).send();
		return getSignatureFromTransaction(transaction);
	}

	it("refuses a made-up transaction (409 NOT_ON_CHAIN) and one with another memo (422), and finalizes on the real one", async () => {
		const { stage } = await submittedOperation();
		const madeUp = encodeBase58(randomBytes(64));
		expect((await stage(submitter, "submitted", { transactionSignature: madeUp })).status).toBe(200);
		expect((await stage(submitter, "finalized", { transactionSignature: madeUp })).body).toMatchObject({ code: 409, type: "NOT_ON_CHAIN" });

		const second = await submittedOperation();
		const wrong = await memoTransaction(registryMemo(second.request.operationId, sha256Hex("another route")));
		expect((await second.stage(submitter, "submitted", { transactionSignature: wrong })).status).toBe(200);
		expect((await second.stage(submitter, "finalized", { transactionSignature: wrong })).body).toMatchObject({ code: 422, type: "SETTLEMENT_MISMATCH" });

		// The right memo in a transaction someone else paid for: not the submitter's submission.
		const fourth = await submittedOperation();
		const foreign = await memoTransaction(registryMemo(fourth.request.operationId, fourth.request.routeCommitment), other);
		expect((await fourth.stage(submitter, "submitted", { transactionSignature: foreign })).status).toBe(200);
		expect((await fourth.stage(submitter, "finalized", { transactionSignature: foreign })).body).toMatchObject({ code: 422, type: "SETTLEMENT_MISMATCH", data: { problems: [expect.stringMatching(/not by the submitter/)] } });

		const third = await submittedOperation();
		const real = await memoTransaction(registryMemo(third.request.operationId, third.request.routeCommitment));
		expect((await third.stage(submitter, "submitted", { transactionSignature: real })).status).toBe(200);
		const finalized = await third.stage(submitter, "finalized", { transactionSignature: real });
		expect(finalized.body).toMatchObject({ status: "FINALIZED", routeVersion: 1 });
		expect(finalized.body.history.at(-1)).toMatchObject({ status: "FINALIZED", onChainChecked: true });
	});
});
