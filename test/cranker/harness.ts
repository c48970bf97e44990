/**
 * What the Cranker tests share: a local chain (litesvm behind JSON-RPC), the real service with
 * SOLANA_RPC_URL pointing at it, funded Cranker keys, Crankers in process or as real processes,
 * and a sender paying through the SDK.
 */
import fs from "node:fs";
import path from "node:path";
import type { Address } from "@solana/kit";
import { generateKeypair } from "../../lib/ed25519";
import { loadOrCreateAuthorityKeypair } from "../../lib/secrets";
import { loadCrankerConfig } from "../../cranker/config";
import { createLogger } from "../../cranker/log";
import { Cranker } from "../../cranker/worker";
import { LocalKeypairSigner, SettlementClient } from "../../sdk";
import type { CreateIntentRequest, PublicMempoolIntent } from "../../lib/intents";
import { newRoute, uniqueId, writeSeedFile } from "../helpers/fixtures";
import { API_KEY, startNode, tempDir, worker, type TestNode } from "../helpers/node";
import { LocalChain, LOCAL_CLUSTER } from "../../devkit/local-chain";
import { spawnScript, type ScriptProcess } from "../../devkit/process";

export { waitFor } from "../../devkit/process";

export interface CrankerKey {
	address: string;
	file: string;
	/** The mint it holds, its CRANKER_MINTS. */
	mint: Address;
}

export class Harness {
	readonly chain = new LocalChain({ slotMs: 100, blockhashValiditySlots: 30 });
	readonly route = newRoute();
	readonly dir = tempDir("scs-cranker-");
	node!: TestNode;
	client!: SettlementClient;
	private readonly running: Cranker[] = [];
	private readonly children: ScriptProcess[] = [];

	async start(): Promise<void> {
		await this.chain.start();
		this.node = await startNode(this.nodeEnv());
		this.client = new SettlementClient({ baseUrl: this.node.url, solanaRpcUrl: this.chain.url });
	}

	/** Stops the Node and starts it again on the same port and DATA_DIR, as after a redeploy. */
	async restartNode(downForMs: number): Promise<void> {
		const { port } = new URL(this.node.url);
		await this.node.stop();
		await new Promise(resolve => setTimeout(resolve, downForMs));
		this.node = await startNode({ ...this.nodeEnv(), PORT: port }, this.node.dataDir);
	}

	private nodeEnv(): Record<string, string> {
		return {
			REGISTRY_SEED_FILE: writeSeedFile(this.dir, [this.route]),
			SOLANA_RPC_URL: this.chain.url,
			SOLANA_CLUSTER: LOCAL_CLUSTER,
			SLOT_POLL_INTERVAL_MS: "200",
			// Short, so a dead Cranker's lease lapses quickly; long enough that a live one on a loaded CI
			// machine reports SUBMITTED within it (2 s was not always: a second lease by the same rescuer).
			LEASE_TTL_MS: "5000",
			CRANKER_TTL_MS: "3000",
			// The chain here keeps blockhashes 30 slots: the Node's floor under a submission's life follows.
			BLOCKHASH_LIFETIME_BLOCKS: "40"
		};
	}

	async stop(): Promise<void> {
		for (const { child } of this.children) child.kill("SIGKILL");
		await Promise.all(this.running.map(cranker => cranker.stop()));
		await this.node.stop();
		await this.chain.stop();
	}

	/** A Cranker keypair file (Solana CLI format) whose owner holds SOL and `tokens` of `mint`. */
	async crankerKey(mint: Address, tokens = 10n ** 12n): Promise<CrankerKey> {
		const keypair = generateKeypair();
		const file = path.join(this.dir, `cranker-${keypair.publicKey}.json`);
		fs.writeFileSync(file, JSON.stringify([...keypair.secretKey]));
		this.chain.fundLamports(keypair.publicKey);
		await this.chain.fundTokens(keypair.publicKey, mint, tokens);
		return { address: keypair.publicKey, file, mint };
	}

	crankerEnv(key: CrankerKey, extra: Record<string, string> = {}): Record<string, string> {
		return {
			KEYPAIR_PATH: key.file,
			CRANKER_MINTS: key.mint,
			NODE_URL: this.node.url,
			WORKER_API_KEY: API_KEY,
			// The operator reads it from the Node's start-up log; here, from the key file the Node generated.
			NODE_AUTHORITY_PUBKEY: loadOrCreateAuthorityKeypair(null, this.node.dataDir).value.publicKey,
			SOLANA_RPC_URL: this.chain.url,
			POLL_INTERVAL_MS: "100",
			HEARTBEAT_INTERVAL_MS: "500",
			// Generous: on a loaded CI machine a 1 s timeout made a Cranker give back a lease it would have settled.
			RPC_TIMEOUT_MS: "5000",
			BLOCKHASH_LIFETIME_SLOTS: "151",
			CRANKER_STATE_DIR: path.join(this.dir, "cranker-state"),
			...extra
		};
	}

	/** A Cranker in this process (its log goes to `write`, or to the console with TEST_LOG=1). */
	async cranker(key: CrankerKey, roles = ["settlement"], extraEnv: Record<string, string> = {}, write: (line: string) => void = process.env.TEST_LOG ? console.log : () => {}): Promise<Cranker> {
		const config = loadCrankerConfig(this.crankerEnv(key, extraEnv), ["--roles", roles.join(",")]);
		const cranker = await Cranker.create(config, createLogger({ cranker: key.address.slice(0, 6) }, write));
		cranker.start();
		this.running.push(cranker);
		return cranker;
	}

	async stopCranker(cranker: Cranker): Promise<void> {
		this.running.splice(this.running.indexOf(cranker), 1);
		await cranker.stop();
	}

	/** `npm run cranker` as a real process (dist/cranker/index.js). */
	crankerProcess(env: Record<string, string>, args: string[] = []): ScriptProcess {
		const cranker = spawnScript(path.resolve("dist/cranker/index.js"), env, args, "cranker");
		this.children.push(cranker);
		return cranker;
	}

	/** A sender signs a payment to the harness route with the SDK and submits it: the record. */
	async pay(mint: Address, amount: string, overrides: { expiresAtSlot?: number; expiresAt?: Date } = {}): Promise<PublicMempoolIntent> {
		return (await this.signAndSubmit(mint, amount, overrides)).record;
	}

	/** As pay(), and the signed request too (what confirmOnChain checks a settlement against). */
	async signAndSubmit(mint: Address, amount: string, overrides: { expiresAtSlot?: number; expiresAt?: Date } = {}): Promise<{ signed: CreateIntentRequest; record: PublicMempoolIntent }> {
		const signer = LocalKeypairSigner.generate();
		const route = await this.client.resolveTin(this.route.tin);
		const intent = await this.client.signPayment(signer, {
			paymentId: uniqueId(),
			recipientTin: this.route.tin,
			route,
			tokenMintAddress: mint,
			amount,
			feeLimit: "5000",
			expiresAtSlot: overrides.expiresAtSlot ?? this.chain.slot + 100_000,
			...(overrides.expiresAt ? { expiresAt: overrides.expiresAt } : {})
		});
		return { signed: intent, record: await this.client.submit(intent) };
	}

	/** The worker view (lease, submission, history). */
	async record(id: string) {
		const { body } = await this.node.http("GET", `/intents/${id}`, undefined, worker);
		return body;
	}
}
