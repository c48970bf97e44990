/**
 * The Cranker against the real service and a real Solana VM (litesvm behind the local JSON-RPC
 * server): settlement end to end, racing Crankers, a Cranker killed mid-lease or after submitting,
 * injected RPC failures, an expired blockhash, an expired intent, SIGTERM, and the TIN roles.
 */
import Database from "better-sqlite3";
import path from "node:path";
import { createKeyPairSignerFromBytes, createSolanaRpc, getBase64EncodedWireTransaction, getSignatureFromTransaction, type Address } from "@solana/kit";
import { Chain } from "../../cranker/chain";
import { loadCrankerConfig } from "../../cranker/config";
import { SettlementJournal } from "../../cranker/journal";
import { createLogger } from "../../cranker/log";
import { NodeClient } from "../../cranker/node-client";
import { Settler } from "../../cranker/settler";
import { buildHeartbeatMessage, buildTinOperationMessage, payoutNullifier } from "../../lib/canonical";
import { createSigner } from "../../lib/ed25519";
import { keypairSigningKey } from "../../lib/http-signature";
import { sha256Hex } from "../../lib/encoding";
import { iso, newWallet, uniqueId } from "../helpers/fixtures";
import { worker } from "../helpers/node";
import { creditAccountAddress, signSettlementTransaction } from "../../lib/settlement";
import { itWithPromtool, promtoolCheck } from "../helpers/promtool";
import { Harness, waitFor } from "./harness";

const h = new Harness();
beforeAll(() => h.start());
afterAll(() => h.stop());

/** The chain's settlements of this intent (by its payout nullifier): must never be more than one. */
async function settlementsOf(id: string) {
	const record = await h.record(id);
	return h.chain.landedWithMemoEnding(payoutNullifier(record.senderWallet, record.senderAuthorizationNonce));
}

async function executed(id: string, timeoutMs = 20_000) {
	return waitFor(async () => {
		const intent = await h.client.getIntent(id);
		return intent.status === "executed" ? intent : null;
	}, timeoutMs, `intent ${id} executed`);
}

const states = (record: { history: { state: string }[] }) => record.history.map(entry => entry.state);

/** The worker view once the intent is in `state`. */
const recordIn = (id: string, state: string) =>
	waitFor(async () => {
		const record = await h.record(id);
		return record.receiverStatus === state ? record : null;
	}, 20_000, state);

/**
 * A settlement Cranker of its own key (holding `mint`), online by one signed heartbeat, driven
 * step by step through its Settler instead of its loops; its log lines kept.
 */
async function steppedCranker(mint: Address, extraEnv: Record<string, string> = {}) {
	// No argv: by default it reads the process's, which is jest's own command line here.
	const config = loadCrankerConfig(h.crankerEnv(await h.crankerKey(mint), extraEnv), []);
	const node = new NodeClient(config.nodeUrl, config.workerApiKey, keypairSigningKey(config.keypair));
	const heartbeat = async () => {
		const fields = { crankerPubkey: config.keypair.publicKey, roles: ["settlement"], liquidity: [], sentAt: new Date().toISOString() };
		await node.heartbeat({ ...fields, signature: createSigner(config.keypair)(buildHeartbeatMessage(fields)) });
	};
	await heartbeat();
	const signer = await createKeyPairSignerFromBytes(config.keypair.secretKey);
	const lines: string[] = [];
	const settler = new Settler(node, new Chain(config.solanaRpcUrl), signer, config, createLogger({}, line => lines.push(line)), () => false, await SettlementJournal.open(config.stateDir, signer.address));
	return { pubkey: config.keypair.publicKey, node, signer, lines, settler, heartbeat };
}

/** A new mint and a Cranker holding it, once its heartbeat has offered that liquidity (it then takes the mint's work). */
async function onlineCrankerForNewMint() {
	const mint = h.chain.createMint(6);
	const cranker = await h.cranker(await h.crankerKey(mint));
	await waitFor(async () => (await h.node.http("GET", "/settlement-networks")).body.some((n: { tokenMintAddress: string }) => n.tokenMintAddress === mint), 10_000, "liquidity");
	return { mint, cranker };
}

describe("Cranker settling payments", () => {
	it("settles a payment from signature to executed, and the SDK confirms it on chain", async () => {
		const mint = h.chain.createMint(6);
		const cranker = await h.cranker(await h.crankerKey(mint));
		const { signed, record: submitted } = await h.signAndSubmit(mint, "1250000");
		const done = await executed(submitted.id);

		const route = await h.client.resolveTin(h.route.tin);
		const onChain = await h.client.confirmOnChain(done.transactionSignature!, signed);
		expect(onChain.memo).toMatch(/^scs:v1:[0-9a-f]{64}:[0-9a-f]{64}$/);
		expect(h.chain.tokenBalance(await creditAccountAddress(route.routeCommitment, mint))).toBe(1_250_000n);
		expect(await settlementsOf(done.id)).toHaveLength(1);
		expect(states(await h.record(done.id))).toEqual(["RECEIVED", "NODE_VERIFYING", "VERIFIED", "CRANKER_LEASED", "SUBMITTED", "CONFIRMED"]);
		await h.stopCranker(cranker);
	});

	it("two Crankers racing for the same intent: one lease, one settlement, the other is told it lost", async () => {
		const mint = h.chain.createMint(6);
		const settlers = await Promise.all([0, 1].map(async () => (await steppedCranker(mint)).settler));
		const intent = await h.pay(mint, "2500");
		const [work] = (await h.node.http("GET", "/intent-work?limit=500", undefined, worker)).body.filter((item: { intent: { id: string } }) => item.intent.id === intent.id);
		const results = await Promise.all(settlers.map(settler => settler.settle(work.intent)));
		expect(results.sort()).toEqual(["confirmed", "lost"]);
		expect(await settlementsOf(intent.id)).toHaveLength(1);
		expect((await h.client.getIntent(intent.id)).status).toBe("executed");
	});

	it("two Crankers polling the same work list settle each intent once", async () => {
		const mint = h.chain.createMint(6);
		const [a, b] = [await h.cranker(await h.crankerKey(mint)), await h.cranker(await h.crankerKey(mint))];
		const intents = await Promise.all(Array.from({ length: 8 }, (_, i) => h.pay(mint, String(1000 + i))));
		for (const intent of intents) await executed(intent.id, 30_000);
		for (const intent of intents) expect(await settlementsOf(intent.id)).toHaveLength(1);

		const route = await h.client.resolveTin(h.route.tin);
		const total = intents.reduce((sum, intent) => sum + BigInt(intent.amount), 0n);
		expect(h.chain.tokenBalance(await creditAccountAddress(route.routeCommitment, mint))).toBe(total);
		await Promise.all([h.stopCranker(a), h.stopCranker(b)]);
	});

	it("a Cranker killed mid-lease: the lease expires and another Cranker settles it once", async () => {
		const mint = h.chain.createMint(6);
		const doomed = await h.crankerKey(mint);
		// Its RPC hangs right after the lease, so it is killed holding the lease and nothing sent.
		h.chain.injectFault("getSignaturesForAddress", "hang", 1);
		const searchesBefore = h.chain.calls.get("getSignaturesForAddress") ?? 0;
		const process = h.crankerProcess(h.crankerEnv(doomed, { RPC_TIMEOUT_MS: "60000" }));
		const intent = await h.pay(mint, "777");
		await waitFor(async () => (await h.record(intent.id)).lease?.crankerPubkey === doomed.address, 20_000, "the doomed Cranker's lease");
		// Killed only once it hangs in the search: killed earlier, it would leave the hang to the rescuer.
		await waitFor(() => (h.chain.calls.get("getSignaturesForAddress") ?? 0) > searchesBefore, 20_000, "the doomed Cranker's hanging search");
		process.child.kill("SIGKILL");
		await process.exited;

		const rescuerKey = await h.crankerKey(mint);
		const rescuer = await h.cranker(rescuerKey);
		const done = await executed(intent.id);
		const record = await h.record(done.id);
		const leases = record.history.filter((entry: { state: string }) => entry.state === "CRANKER_LEASED").map((entry: { by: string }) => entry.by);
		expect(leases).toEqual([doomed.address, rescuerKey.address]);
		expect(record.history.at(-1)).toMatchObject({ state: "CONFIRMED", by: rescuerKey.address });
		expect(await settlementsOf(done.id)).toHaveLength(1);
		await h.stopCranker(rescuer);
	});

	it("a Cranker killed after submitting: the transaction never landed, so after its blockhash expired another Cranker settles it once", async () => {
		const mint = h.chain.createMint(6);
		const doomed = await h.crankerKey(mint);
		h.chain.dropNextSends(1000);
		const process = h.crankerProcess(h.crankerEnv(doomed));
		const intent = await h.pay(mint, "4242");
		const submitted = await recordIn(intent.id, "SUBMITTED");
		process.child.kill("SIGKILL");
		await process.exited;
		h.chain.dropNextSends(0);
		h.chain.advance(160); // past BLOCKHASH_LIFETIME_SLOTS after its submission slot

		const rescuer = await h.cranker(await h.crankerKey(mint));
		const done = await executed(intent.id, 30_000);
		expect(done.transactionSignature).not.toBe(submitted.submission.transactionSignature);
		expect(h.chain.transaction(submitted.submission.transactionSignature)).toBeUndefined();
		const record = await h.record(done.id);
		expect(record.history.some((entry: { state: string; reason?: string }) => entry.state === "VERIFIED" && entry.reason?.startsWith("DROPPED"))).toBe(true);
		expect(await settlementsOf(done.id)).toHaveLength(1);
		await h.stopCranker(rescuer);
	});

	it("stays online and settles when anyone opens token accounts of 65 mints of their own for it", async () => {
		const mint = h.chain.createMint(6);
		const key = await h.crankerKey(mint, 7_000_000n);
		// Token accounts cost their rent, paid by whoever opens them: the Node takes at most 64
		// liquidity entries, so a Cranker that reported every account it owns was refused its heartbeats.
		const junk = Array.from({ length: 65 }, () => h.chain.createMint(0));
		for (const other of junk) await h.chain.fundTokens(key.address, other, 10n ** 18n);
		const cranker = await h.cranker(key);
		const intent = await h.pay(mint, "1000");
		await executed(intent.id);
		// Its next heartbeats offer what its associated account of the mint holds, and nothing else.
		const liquidity = await waitFor(async () => {
			const offered = (await h.node.http("GET", "/network/overview")).body.liquidity;
			return offered[mint] === "6999000" ? offered : null;
		}, 10_000, "the liquidity after the payment");
		for (const other of junk) expect(liquidity).not.toHaveProperty(other);
		await h.stopCranker(cranker);
	});

	it("a payment counted twice (read after it landed, then taken off) is no balance below 0: its heartbeats stay accepted", async () => {
		const mint = h.chain.createMint(6);
		const key = await h.crankerKey(mint, 1500n);
		// Its confirmation waits one RPC timeout: the heartbeats meanwhile read the balance the payment left.
		h.chain.injectFault("getSignatureStatuses", "hang", 1);
		const cranker = await h.cranker(key);
		const overview = async () => (await h.node.http("GET", "/network/overview")).body.liquidity[mint];
		const intent = await h.pay(mint, "1000");
		await waitFor(async () => (await overview()) === "500", 10_000, "a heartbeat reading the balance after the payment");
		// From now on the balance cannot be read: heartbeats carry the last known one.
		h.chain.injectFault("getMultipleAccounts", "http-500", 1000);
		await executed(intent.id);
		await waitFor(async () => (await overview()) === "0", 10_000, "the last known balance, taken down to 0");
		await new Promise(resolve => setTimeout(resolve, 1500));
		expect(cranker.isOnline).toBe(true);
		h.chain.clearFaults();
		await h.stopCranker(cranker);
	});

	it("survives a Node restart: it keeps heartbeating and settles what is submitted afterwards", async () => {
		const mint = h.chain.createMint(6);
		const cranker = await h.cranker(await h.crankerKey(mint));
		const before = await h.pay(mint, "10");
		await executed(before.id);
		await h.restartNode(1500);
		const after = await h.pay(mint, "20");
		await executed(after.id);
		expect(await settlementsOf(after.id)).toHaveLength(1);
		await h.stopCranker(cranker);
	});

	it("survives injected RPC failures and a lost send, and still settles exactly once", async () => {
		const { mint, cranker } = await onlineCrankerForNewMint();
		h.chain.injectFault("getLatestBlockhash", "http-500", 2);
		h.chain.injectFault("getSignaturesForAddress", "rpc-error", 2);
		h.chain.injectFault("sendTransaction", "http-500", 1);
		h.chain.injectFault("getSignatureStatuses", "rpc-error", 3);
		h.chain.injectFault("getBlockHeight", "hang", 1);
		h.chain.dropNextSends(1); // the first send that gets through is lost; the re-broadcast of the same bytes lands
		const intent = await h.pay(mint, "31337");
		const done = await executed(intent.id, 30_000);
		expect(await settlementsOf(done.id)).toHaveLength(1);
		expect(h.chain.calls.get("sendTransaction")).toBeGreaterThan(1);
		await h.stopCranker(cranker);
	});

	it("rebuilds and resends only after the old blockhash can no longer land", async () => {
		const { mint, cranker } = await onlineCrankerForNewMint();
		h.chain.dropNextSends(1000);
		const intent = await h.pay(mint, "5");
		const first = await recordIn(intent.id, "SUBMITTED");
		await waitFor(async () => (await h.record(intent.id)).history.some((entry: { reason?: string }) => entry.reason?.startsWith("DROPPED")), 20_000, "DROPPED");
		// Its blockhash was fetched after `submission.slot` and lives 30 slots: dropped only once that has passed.
		expect(h.chain.slot).toBeGreaterThan(first.submission.slot + 30);
		h.chain.dropNextSends(0);
		const done = await executed(intent.id);
		expect(done.transactionSignature).not.toBe(first.submission.transactionSignature);
		expect(await settlementsOf(done.id)).toHaveLength(1);
		await h.stopCranker(cranker);
	});

	it("never settles an expired intent", async () => {
		const { mint, cranker } = await onlineCrankerForNewMint();
		// Every chain lookup before sending fails until the intent's slot has passed.
		h.chain.injectFault("getSignaturesForAddress", "http-500", 1000);
		const intent = await h.pay(mint, "900", { expiresAtSlot: h.chain.slot + 15 });
		const canceled = await waitFor(async () => {
			const current = await h.client.getIntent(intent.id);
			return current.status === "canceled" ? current : null;
		}, 20_000, "canceled");
		expect(canceled.rejectionReason).toBe("EXPIRED");
		h.chain.clearFaults();
		await new Promise(resolve => setTimeout(resolve, 1500));
		expect(await settlementsOf(intent.id)).toHaveLength(0);
		expect((await h.client.getIntent(intent.id)).status).toBe("canceled");
		await h.stopCranker(cranker);
	});

	it("takes no work while the Node checks settlements against another program than its SETTLEMENT_PROGRAM_ID, and offers no liquidity", async () => {
		// Its settlements would pay credit accounts of another program's address, which the Node never counts.
		const mint = h.chain.createMint(6);
		const lines: string[] = [];
		const otherProgram = newWallet().address;
		const cranker = await h.cranker(await h.crankerKey(mint), ["settlement"], { SETTLEMENT_PROGRAM_ID: otherProgram }, line => lines.push(line));
		await waitFor(() => lines.some(line => line.includes("another program than SETTLEMENT_PROGRAM_ID") && line.includes(otherProgram)), 10_000, "the Cranker told of the other program");
		const offered = async () => (await h.node.http("GET", "/settlement-networks")).body.some((n: { tokenMintAddress: string }) => n.tokenMintAddress === mint);
		await waitFor(async () => !(await offered()), 10_000, "its liquidity withdrawn");
		const intent = await h.pay(mint, "700");
		// Ten of its work rounds (POLL_INTERVAL_MS 100) and two heartbeats.
		await new Promise(resolve => setTimeout(resolve, 1_000));
		const record = await h.record(intent.id);
		expect(record.receiverStatus).toBe("VERIFIED");
		expect(states(record)).not.toContain("CRANKER_LEASED");
		expect(await offered()).toBe(false);
		await h.stopCranker(cranker);
	});

	it("withdraws its liquidity at once when the Node names another program: a heartbeat without it goes at the answer, not an interval later", async () => {
		const mint = h.chain.createMint(6);
		const lines: string[] = [];
		const key = await h.crankerKey(mint);
		/** The liquidity of the Cranker's latest accepted heartbeat, as the Node stored it. */
		const reported = () => {
			const db = new Database(path.join(h.node.dataDir, "crankers.sqlite"), { readonly: true });
			try {
				const row = db.prepare("SELECT doc FROM crankers WHERE id = ?").get(key.address) as { doc: string } | undefined;
				return row ? (JSON.parse(row.doc) as { liquidity: unknown[] }).liquidity : null;
			} finally {
				db.close();
			}
		};
		// Heartbeats a minute apart: only the one sent at once takes the liquidity back within seconds.
		const cranker = await h.cranker(key, ["settlement"], { SETTLEMENT_PROGRAM_ID: newWallet().address, HEARTBEAT_INTERVAL_MS: "60000" }, line => lines.push(line));
		await waitFor(() => lines.some(line => line.includes("another program than SETTLEMENT_PROGRAM_ID")), 10_000, "the Cranker told of the other program");
		await waitFor(() => reported()?.length === 0, 3_000, "a heartbeat without liquidity");
		expect(lines.filter(line => line.includes("heartbeat not accepted"))).toEqual([]);
		await h.stopCranker(cranker);
	});

	it("gives a lease back unsigned when the payout answer names another program than its SETTLEMENT_PROGRAM_ID (a Node redeployed with another one, before a heartbeat said so)", async () => {
		const mint = h.chain.createMint(6);
		const cranker = await steppedCranker(mint, { SETTLEMENT_PROGRAM_ID: newWallet().address });
		const intent = await h.pay(mint, "900");
		expect(await cranker.settler.settle(await h.record(intent.id))).toBe("released");
		expect(cranker.lines.some(line => line.includes("not SETTLEMENT_PROGRAM_ID"))).toBe(true);
		const record = await h.record(intent.id);
		expect(record.receiverStatus).toBe("VERIFIED");
		expect(states(record)).toContain("CRANKER_LEASED");
		expect(await settlementsOf(intent.id)).toHaveLength(0);
	});

	it("a SUBMITTED report whose chain reads outlast the lease it was sent under, renewed meanwhile, is told VERSION_CONFLICT (read again), not LEASE_EXPIRED", async () => {
		const mint = h.chain.createMint(6);
		const cranker = await steppedCranker(mint);
		const intent = await h.pay(mint, "800");
		const leased = await cranker.node.updateStatus(intent.id, { status: "CRANKER_LEASED", crankerPubkey: cranker.pubkey, expectedVersion: 3 });
		const { value: lifetime } = await createSolanaRpc(h.chain.url).getLatestBlockhash().send();
		// Sent with 1.3 s of the lease left; the Node's block height read takes 2.1 s (its reads time out at 2.5 s).
		await new Promise(resolve => setTimeout(resolve, Date.parse(leased.lease!.expiresAt) - Date.now() - 1300));
		// Online (CRANKER_TTL_MS is 3 s here) through the report and the renewal.
		await cranker.heartbeat();
		h.chain.delayAnswers("getBlockHeight", 2100);
		const heightReads = h.chain.calls.get("getBlockHeight") ?? 0;
		const report = cranker.node.updateStatus(intent.id, { status: "SUBMITTED", crankerPubkey: cranker.pubkey, expectedVersion: 4, transactionSignature: newWallet().sign("a transaction never sent"), lastValidBlockHeight: Number(lifetime.lastValidBlockHeight) });
		const refusal = report.then(() => null, (err: unknown) => err);
		// Renewed as soon as the report, its record read, waits for the chain.
		await waitFor(() => (h.chain.calls.get("getBlockHeight") ?? 0) > heightReads, 5_000, "the report reading the chain", 5);
		const renewed = await cranker.node.updateStatus(intent.id, { status: "CRANKER_LEASED", crankerPubkey: cranker.pubkey, expectedVersion: 4 });
		expect(Date.parse(renewed.lease!.expiresAt)).toBeGreaterThan(Date.parse(leased.lease!.expiresAt));
		expect(await refusal).toMatchObject({ type: "VERSION_CONFLICT" });
		expect((await h.record(intent.id)).receiverStatus).toBe("CRANKER_LEASED");
	});

	it("an orphan whose landed transaction is not its settlement is left for an operator, not read again at every orphan round", async () => {
		const mint = h.chain.createMint(6);
		// One that pays a wrong amount, reports it, and goes away.
		const careless = await steppedCranker(mint);
		const intent = await h.pay(mint, "3000");
		await careless.node.updateStatus(intent.id, { status: "CRANKER_LEASED", crankerPubkey: careless.pubkey, expectedVersion: 3 });
		const { payoutNullifier: nullifier } = await careless.node.payoutAuthorization(intent.id, careless.pubkey);
		const rpc = createSolanaRpc(h.chain.url);
		const { value: lifetime } = await rpc.getLatestBlockhash().send();
		const route = await h.client.resolveTin(h.route.tin);
		const { transaction } = await signSettlementTransaction(
			{ cranker: careless.signer, mint, decimals: 6, amount: 2999n, recipientRouteCommitment: route.routeCommitment, transactionCommitment: intent.transactionCommitment, payoutNullifier: nullifier },
			lifetime
		);
		const transactionSignature = getSignatureFromTransaction(transaction);
		await careless.node.updateStatus(intent.id, { status: "SUBMITTED", crankerPubkey: careless.pubkey, expectedVersion: 4, transactionSignature, lastValidBlockHeight: Number(lifetime.lastValidBlockHeight) });
		await rpc.sendTransaction(getBase64EncodedWireTransaction(transaction), { encoding: "base64" }).send();
		await waitFor(async () => Date.parse((await h.record(intent.id)).lease.expiresAt) < Date.now(), 15_000, "the careless Cranker's lease lapsed");

		// Another Cranker's orphan rounds: the first reads the transaction and says so once; the next ones leave it be.
		const rescuer = await steppedCranker(mint);
		const toldOf = () => rescuer.lines.filter(line => line.includes("not this settlement") && line.includes(intent.id)).length;
		await rescuer.settler.finishOrphans();
		expect(toldOf()).toBe(1);
		await rescuer.settler.finishOrphans();
		await rescuer.settler.finishOrphans();
		expect(toldOf()).toBe(1);
		expect((await h.record(intent.id)).receiverStatus).toBe("SUBMITTED");
	});
});

describe("Cranker process", () => {
	it("refuses to start without KEYPAIR_PATH, or with an unreadable or malformed keypair: a message and exit code 2, no stack trace", async () => {
		const key = await h.crankerKey(h.chain.createMint());
		const cases: [Record<string, string>, RegExp][] = [
			[{ KEYPAIR_PATH: "" }, /KEYPAIR_PATH is not set/],
			[{ KEYPAIR_PATH: "/nonexistent/key.json" }, /cannot be read \(ENOENT\)/],
			[{ KEYPAIR_PATH: __filename }, /is not JSON/],
			[{ NODE_URL: "" }, /NODE_URL is not set/],
			// Without the Node's authority key it could not tell a forged payout authorization.
			[{ NODE_AUTHORITY_PUBKEY: "" }, /NODE_AUTHORITY_PUBKEY is not set/],
			[{ CRANKER_METRICS_PORT: "70000" }, /CRANKER_METRICS_PORT must be a port 0–65535/]
		];
		for (const [env, message] of cases) {
			const run = h.crankerProcess({ ...h.crankerEnv(key), ...env });
			expect(await run.exited).toBe(2);
			expect(run.output()).toMatch(message);
			expect(run.output()).not.toMatch(/\n\s+at /);
		}
		const badRoles = h.crankerProcess(h.crankerEnv(key), ["--roles", "settlement,miner"]);
		expect(await badRoles.exited).toBe(2);
		expect(badRoles.output()).toMatch(/--roles takes/);
	});

	it("warns of a mint in CRANKER_MINTS that is not on its chain, and still settles in the others", async () => {
		const mint = h.chain.createMint(6);
		const key = await h.crankerKey(mint);
		const elsewhere = newWallet().address;
		const run = h.crankerProcess(h.crankerEnv(key, { CRANKER_MINTS: `${mint},${elsewhere}` }));
		await waitFor(() => run.output().includes(`CRANKER_MINTS: ${elsewhere} does not exist on this chain`), 10_000, "the warning");
		expect(run.output()).not.toContain(`CRANKER_MINTS: ${mint}`);
		await executed((await h.pay(mint, "77")).id);
		run.child.kill("SIGTERM");
		expect(await run.exited).toBe(0);
	});

	it("on SIGTERM gives back the lease it holds and exits 0, and never prints its key", async () => {
		const mint = h.chain.createMint(6);
		const key = await h.crankerKey(mint);
		h.chain.injectFault("getSignaturesForAddress", "hang", 1);
		const run = h.crankerProcess(h.crankerEnv(key, { RPC_TIMEOUT_MS: "1000" }));
		const intent = await h.pay(mint, "64");
		await recordIn(intent.id, "CRANKER_LEASED");
		run.child.kill("SIGTERM");
		expect(await run.exited).toBe(0);
		const record = await h.record(intent.id);
		expect(record.receiverStatus).toBe("VERIFIED");
		expect(record.history.at(-1)).toMatchObject({ state: "VERIFIED", by: key.address });
		expect(await settlementsOf(intent.id)).toHaveLength(0);
		const secret = JSON.stringify(JSON.parse(require("node:fs").readFileSync(key.file, "utf8")));
		expect(run.output()).not.toContain(secret.slice(1, 40));
		expect(run.output()).toContain("SIGTERM");
	});
});

describe("Cranker metrics", () => {
	itWithPromtool("serves /health and Prometheus /metrics on CRANKER_METRICS_PORT: promtool passes and its settlement counters move", async () => {
		const mint = h.chain.createMint(6);
		// No CRANKER_METRICS_HOST: the unauthenticated server binds this machine only unless told otherwise.
		const run = h.crankerProcess(h.crankerEnv(await h.crankerKey(mint), { CRANKER_METRICS_PORT: "0" }));
		const port = Number((await waitFor(() => /"message":"metrics and health served".*"port":(\d+)/.exec(run.output()), 10_000, "the metrics port"))[1]);
		expect(run.output()).toMatch(/"message":"metrics and health served".*"host":"127\.0\.0\.1"/);
		const intent = await h.pay(mint, "4200");
		await executed(intent.id);

		const health = await fetch(`http://127.0.0.1:${port}/health`);
		expect(health.status).toBe(200);
		expect(await health.json()).toEqual({ status: "live", online: true });
		const response = await fetch(`http://127.0.0.1:${port}/metrics`);
		expect(response.status).toBe(200);
		expect(response.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
		const text = await response.text();
		const value = (series: string) => Number(text.split("\n").find(line => line.startsWith(`${series} `))?.slice(series.length + 1));
		expect(value("scs_cranker_leases_total")).toBeGreaterThanOrEqual(1);
		expect(value("scs_cranker_settlements_submitted_total")).toBeGreaterThanOrEqual(1);
		expect(value('scs_cranker_settlements_finished_total{outcome="confirmed"}')).toBeGreaterThanOrEqual(1);
		expect(value('scs_cranker_heartbeats_total{result="accepted"}')).toBeGreaterThanOrEqual(1);
		expect(value('scs_cranker_node_requests_total{method="PATCH",route="/intents/:id/status",status="200"}')).toBeGreaterThanOrEqual(3);
		expect(value('scs_cranker_node_request_duration_seconds_count{method="POST",route="/internal/settlement-authorizations/settlement"}')).toBeGreaterThanOrEqual(1);
		expect(value("process_cpu_user_seconds_total")).toBeGreaterThan(0);
		expect(text).not.toContain(intent.id);
		const { status, output } = promtoolCheck(text);
		expect(output).toBe("");
		expect(status).toBe(0);

		run.child.kill("SIGTERM");
		expect(await run.exited).toBe(0);
	});
});

describe("Cranker following the Node's event stream", () => {
	/** The Node's open GET /events streams (scs_event_streams_open). */
	async function eventStreamsOpen(): Promise<number> {
		const { body } = await h.node.http("GET", "/metrics?format=prometheus");
		const line = (body as string).split("\n").find(l => l.startsWith("scs_event_streams_open{") && l.includes('route="/events"'));
		return line ? Number(line.split(" ").at(-1)) : 0;
	}

	it("with POLL_INTERVAL_MS at 60 s still takes a new intent within seconds, also one made VERIFIED while a Node restart had cut the stream (resumed with Last-Event-ID)", async () => {
		const mint = h.chain.createMint(6);
		const run = h.crankerProcess(h.crankerEnv(await h.crankerKey(mint), { POLL_INTERVAL_MS: "60000", CRANKER_METRICS_PORT: "0" }));
		const port = Number((await waitFor(() => /"message":"metrics and health served".*"port":(\d+)/.exec(run.output()), 10_000, "the metrics port"))[1]);
		const online = async () => ((await (await fetch(`http://127.0.0.1:${port}/health`)).json()) as { online: boolean }).online;
		const following = () => run.output().match(/"message":"following the Node's event stream"/g)?.length ?? 0;
		await waitFor(async () => following() === 1 && (await online()), 10_000, "the Cranker online and following the stream");
		// Its polls so far happened before this intent existed; the next is a minute away.
		const first = await h.pay(mint, "700");
		const startedAt = Date.now();
		await executed(first.id, 10_000);
		expect(Date.now() - startedAt).toBeLessThan(5000);

		// Down long enough for its reconnections to back off (2 s, then 4 s, then 8 s): up again and
		// online while its stream is still down, the next intent's VERIFIED event reaches it only
		// through the replay after its Last-Event-ID.
		await h.restartNode(7000);
		await waitFor(online, 10_000, "the Cranker online again");
		const second = await h.pay(mint, "800");
		expect(await eventStreamsOpen()).toBe(0);
		expect(following()).toBe(1);
		await executed(second.id, 20_000);
		expect(following()).toBe(2);
		expect(run.output()).toMatch(/"message":"following the Node's event stream".*"resumedAfter":"\d+-\d+"/);
		expect(run.output()).toMatch(/"message":"event stream down; polling every POLL_INTERVAL_MS until it is back"/);
		expect(await settlementsOf(second.id)).toHaveLength(1);

		// stop() closes the stream too: a clean exit.
		run.child.kill("SIGTERM");
		expect(await run.exited).toBe(0);
	}, 60_000);
});

describe("Cranker TIN roles", () => {
	it("a verifier and a submitter (two Crankers, separation of duties) take a TIN create from PENDING_VERIFICATION to FINALIZED", async () => {
		const mint = h.chain.createMint(6);
		const verifier = await h.cranker(await h.crankerKey(mint), ["verifier"]);
		const submitterKey = await h.crankerKey(mint);
		const submitter = await h.cranker(submitterKey, ["submitter"]);
		const owner = newWallet();
		const body = {
			operationId: uniqueId("op"),
			intentType: "create" as const,
			ownerWallet: owner.address,
			routeCommitment: sha256Hex(uniqueId()),
			policyCommitment: sha256Hex(uniqueId()),
			issuedAt: iso(-1000),
			expiresAt: iso(3600_000)
		};
		const created = await h.node.http("POST", "/tin-operations", { ...body, ownerSignature: owner.sign(buildTinOperationMessage(body)) });
		expect(created.status).toBe(201);
		const finalized = await waitFor(async () => {
			const { body: op } = await h.node.http("GET", `/tin-operations/${created.body.id}`, undefined, worker);
			return op.status === "FINALIZED" ? op : null;
		}, 20_000, "FINALIZED");
		expect(finalized).toMatchObject({ intentType: "create", routeVersion: 1 });
		expect(h.chain.landedWithMemoEnding(body.routeCommitment).map(tx => tx.memo)).toEqual([`scs:tin:v1:${body.operationId}:${body.routeCommitment}`]);
		const { body: route } = await h.node.http("GET", `/registry/tins/${finalized.tin}`);
		expect(route).toMatchObject({ routeCommitment: body.routeCommitment, routeVersion: 1, active: true });
		await Promise.all([h.stopCranker(verifier), h.stopCranker(submitter)]);
	});
});
