/**
 * `npm run demo`: one payment from the sender's signature to `executed`, on this machine.
 * Starts a local Solana chain (litesvm behind the test JSON-RPC server), the embedded service,
 * a Cranker, and a scripted sender using the SDK, and prints each step.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { randomBytes } from "node:crypto";
import { loadConfig } from "../lib/config";
import { generateKeypair } from "../lib/ed25519";
import { sha256Hex } from "../lib/encoding";
import { creditAccountAddress } from "../lib/settlement";
import { loadCrankerConfig } from "../cranker/config";
import { loadOrCreateAuthorityKeypair } from "../lib/secrets";
import { createLogger } from "../cranker/log";
import { Cranker } from "../cranker/worker";
import { LocalKeypairSigner, SettlementClient } from "../sdk";
import { createNode, stopNode } from "../services";
import { LocalChain, LOCAL_CLUSTER } from "../devkit/local-chain";

const step = (n: number, text: string) => console.log(`\n[${n}] ${text}`);
const show = (label: string, value: unknown) => console.log(`    ${label.padEnd(22)} ${value}`);

async function main(): Promise<void> {
	const dir = fs.mkdtempSync(path.join(os.tmpdir(), "scs-demo-"));

	step(1, "Local Solana chain (litesvm) with a token mint and a funded Cranker");
	const chain = new LocalChain({ slotMs: 400 });
	const rpcUrl = await chain.start();
	const mint = chain.createMint(6);
	const crankerKeypair = generateKeypair();
	const keypairPath = path.join(dir, "cranker-keypair.json");
	fs.writeFileSync(keypairPath, JSON.stringify([...crankerKeypair.secretKey]), { mode: 0o600 });
	chain.fundLamports(crankerKeypair.publicKey);
	await chain.fundTokens(crankerKeypair.publicKey, mint, 1_000_000_000n);
	show("JSON-RPC", rpcUrl);
	show("mint", mint);
	show("Cranker", crankerKeypair.publicKey);

	step(2, "Embedded service (every service in one process, SQLite in a temp DATA_DIR)");
	const tin = "4000000002";
	const routeCommitment = sha256Hex(`demo route of ${tin}`);
	const seedFile = path.join(dir, "registry-seed.json");
	fs.writeFileSync(seedFile, JSON.stringify([{ tin, routeCommitment, routeVersion: 1, policyCommitment: sha256Hex("demo policy") }]));
	const workerApiKey = randomBytes(24).toString("hex");
	const config = loadConfig({ PORT: "0", DATA_DIR: path.join(dir, "data"), WORKER_API_KEYS: workerApiKey, REGISTRY_SEED_FILE: seedFile, SOLANA_RPC_URL: rpcUrl, SOLANA_CLUSTER: LOCAL_CLUSTER, LOG_LEVEL: "warn" });
	const broker = createNode(config, { logger: false });
	await broker.start();
	const port = (broker.getLocalService("api") as unknown as { server: { address(): { port: number } } }).server.address().port;
	const nodeUrl = `http://127.0.0.1:${port}`;
	show("gateway", nodeUrl);
	show("TIN", `${tin} → route ${routeCommitment.slice(0, 16)}…`);

	step(3, "Cranker: heartbeats with its liquidity, then leases work and settles it on chain");
	const crankerLog = createLogger({}, line => {
		const { message, intent, signature } = JSON.parse(line);
		console.log(`    cranker: ${message}${intent ? ` ${intent}` : ""}${signature ? ` ${signature}` : ""}`);
	});
	// The Cranker pays only on authorizations signed by this Node's authority key (printed at its start).
	const authority = loadOrCreateAuthorityKeypair(null, config.dataDir).value.publicKey;
	show("authority", authority);
	const crankerConfig = loadCrankerConfig(
		{ KEYPAIR_PATH: keypairPath, CRANKER_MINTS: mint, NODE_URL: nodeUrl, WORKER_API_KEY: workerApiKey, NODE_AUTHORITY_PUBKEY: authority, SOLANA_RPC_URL: rpcUrl, HEARTBEAT_INTERVAL_MS: "2000", POLL_INTERVAL_MS: "250", CRANKER_STATE_DIR: path.join(dir, "cranker") },
		[]
	);
	const cranker = await Cranker.create(crankerConfig, crankerLog);
	cranker.start();

	step(4, "Sender: the SDK checks readiness, resolves the TIN, signs the payment message (docs/signing.md §1) and submits");
	const client = new SettlementClient({ baseUrl: nodeUrl, solanaRpcUrl: rpcUrl });
	for (let tries = 0; !(await client.checkReadiness(mint)).canSettleNow; tries++) {
		if (tries > 50) throw new Error("no settlement network for the mint");
		await new Promise(resolve => setTimeout(resolve, 200));
	}
	const sender = LocalKeypairSigner.generate();
	const route = await client.resolveTin(tin);
	const signed = await client.signPayment(sender, {
		paymentId: `demo_${randomBytes(6).toString("hex")}`,
		recipientTin: tin,
		route,
		tokenMintAddress: mint,
		amount: "2500000",
		feeLimit: "5000",
		expiresAtSlot: chain.slot + 10_000
	});
	show("sender", sender.address);
	show("transactionCommitment", signed.transactionCommitment);
	const intent = await client.submit(signed);
	show("intent", `${intent.id} (${intent.receiverStatus})`);

	step(5, "Waiting for the intent to be executed");
	const done = await client.waitForStatus(intent.id, { timeoutMs: 60_000 });
	show("status", `${done.status} (${done.receiverStatus})`);
	show("on-chain signature", done.transactionSignature);

	step(6, "The SDK checks the settlement on chain: memo, mint, amount and credit account");
	const onChain = await client.confirmOnChain(done.transactionSignature!, signed);
	show("slot", onChain.slot);
	show("memo", onChain.memo);
	show("recipient credit", `${chain.tokenBalance(await creditAccountAddress(routeCommitment, mint))} base units`);

	await cranker.stop();
	await stopNode(broker);
	await chain.stop();
	fs.rmSync(dir, { recursive: true, force: true });
	console.log("\nDone: one payment went from signature to executed.");
}

main().catch(err => {
	console.error(`demo failed: ${(err as Error).message}`);
	process.exit(1);
});
