/**
 * A real cluster on one machine: a `nats-server` process on a free loopback port (with a temp store
 * dir) and Node processes running `dist/index.js` with SERVICES, TRANSPORTER and their own DATA_DIR.
 * Used by the cluster tests and by `npm run bench:cluster` (so it imports no service code).
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { BUS_GROUPS, busGroupServing, holdsCallKey, holdsWorkerKeys, natsAuthorization, type BusGroup } from "../lib/bus-groups";
import { newBusKeyring } from "../lib/bus-signatures";
import { loadOrCreateAuthorityKeypair } from "../lib/secrets";
import { freePort, spawnScript, waitFor, type ScriptProcess } from "./process";

const tempDir = (prefix: string) => fs.mkdtempSync(path.join(os.tmpdir(), prefix));

export const natsServerAvailable = spawnSync("nats-server", ["--version"]).status === 0;

const newPasswords = () => Object.fromEntries(Object.keys(BUS_GROUPS).map(group => [group, `p${randomBytes(16).toString("hex")}`])) as Record<BusGroup, string>;

export class NatsServer {
	private child: ChildProcess | null = null;
	readonly storeDir = tempDir("scs-nats-");
	/** A user per bus group, as k8s/20-nats.yaml has: the bus admits only the app, each group to its own subjects. */
	private passwords = newPasswords();
	/** A signing key pair per bus group, as the Secret holds them (lib/bus-signatures.ts). */
	readonly busKeys = newBusKeyring();

	/**
	 * `namespace`: the NAMESPACE of the processes it carries (the users' permissions name it);
	 * `maxPayload`: the largest message the server takes (NATS's default is 1 MB).
	 */
	constructor(
		readonly port: number,
		private readonly options: { namespace: string; maxPayload?: number }
	) {}

	get url(): string {
		return `nats://127.0.0.1:${this.port}`;
	}

	/** The server's process id while it runs (the cluster benchmark reads its CPU). */
	get pid(): number | undefined {
		return this.child?.pid;
	}

	/** New passwords for the next start (a rotation): clients holding the old ones are refused. */
	rotatePasswords(): void {
		this.passwords = newPasswords();
	}

	/** The environment a process of `group` signs in to the bus with, and signs its announcements with. */
	credentials(group: BusGroup): { NATS_USER: string; NATS_PASSWORD: string; BUS_SIGNING_KEY: string; BUS_PUBLIC_KEYS: string } {
		return { NATS_USER: group, NATS_PASSWORD: this.passwords[group], ...this.busKeys.env(group) };
	}

	async start(): Promise<void> {
		let output = "";
		const config = path.join(this.storeDir, "nats.conf");
		// The groups' users, as k8s/20-nats.yaml has them, and JetStream on, which k8s runs none of: the
		// permissions must keep it out of reach wherever a server runs it.
		const lines = [natsAuthorization(group => this.passwords[group], this.options.namespace), `jetstream { store_dir: "${this.storeDir}" }`];
		if (this.options.maxPayload) lines.push(`max_payload: ${this.options.maxPayload}`);
		fs.writeFileSync(config, `${lines.join("\n")}\n`);
		const args = ["-a", "127.0.0.1", "-p", String(this.port), "-c", config];
		this.child = spawn("nats-server", args, { stdio: ["ignore", "pipe", "pipe"] });
		this.child.stdout!.on("data", chunk => (output += chunk));
		this.child.stderr!.on("data", chunk => (output += chunk));
		await waitFor(() => output.includes("Server is ready"), 10_000, "nats-server", 50);
	}

	async stop(): Promise<void> {
		const child = this.child;
		if (!child || child.exitCode !== null) return;
		const exited = new Promise(resolve => child.once("exit", resolve));
		child.kill("SIGTERM");
		await exited;
		this.child = null;
	}
}

export class NodeProcess {
	private readonly process: ScriptProcess;
	port = 0;

	constructor(
		readonly name: string,
		/** The bus group it signs in as (lib/bus-groups.ts). */
		readonly group: BusGroup,
		root: string,
		private readonly env: Record<string, string>
	) {
		this.process = spawnScript(path.join(root, "dist/index.js"), env, [], name);
		// A port given is known; PORT 0 is the one the process announces (at info).
		this.port = Number(env.PORT ?? 0);
	}

	get child(): ChildProcess {
		return this.process.child;
	}

	get exited(): Promise<number | null> {
		return this.process.exited;
	}

	get log(): string {
		return this.process.output();
	}

	get url(): string {
		return `http://127.0.0.1:${this.port}`;
	}

	/** Waits for the port it announces (unless it was given one), then for /health/ready. */
	async ready(timeoutMs = 20_000): Promise<this> {
		await waitFor(() => {
			if (this.child.exitCode !== null) throw new Error(`${this.name} exited with ${this.child.exitCode}:\n${this.log}`);
			// The start-up summary: the gateway's port, or the health routes' without one (with
			// HEALTH_PORT a gateway announces its health routes first).
			const match = /(?:listening|health routes) on port (\d+):/.exec(this.log);
			if (match) this.port = Number(match[1]);
			return this.port > 0;
		}, timeoutMs, `${this.name} to announce its port`, 50);
		// HEALTH_PORT given: the probes' own port (a process without the gateway serves nothing else).
		const health = Number(this.env.HEALTH_PORT ?? 0) > 0 ? `http://127.0.0.1:${this.env.HEALTH_PORT}` : this.url;
		await waitFor(async () => (await fetch(`${health}/health/ready`).catch(() => null))?.status === 200, timeoutMs, `${this.name} ready`, 50);
		return this;
	}

	async signal(signal: NodeJS.Signals): Promise<number | null> {
		if (this.child.exitCode === null) this.child.kill(signal);
		return this.exited;
	}
}

export interface ClusterOptions {
	verifiers: number;
	seedFile: string;
	workerApiKey: string;
	mongoUrl?: string;
	/** The NATS server's message limit, when a test wants a smaller one than the default 1 MB. */
	natsMaxPayload?: number;
	/** The directory holding dist/ (the repository root). */
	root?: string;
	/**
	 * LOG_LEVEL of the processes (info): a benchmark runs them at warn, without a line per request,
	 * as bench:intents does, and start() then gives each process its port.
	 */
	logLevel?: string;
}

/**
 * The secrets k8s gives a process of `group` beside its bus credentials (k8s/4*.yaml): the
 * intake's and owners' key (WEBHOOK_SECRETS_KEY) to those two groups, the worker keys to every
 * group but the verifiers.
 */
export function groupSecrets(group: BusGroup, secrets: { webhookSecretsKey: string; workerApiKeys: string }): Record<string, string> {
	return { ...(holdsCallKey(group) ? { WEBHOOK_SECRETS_KEY: secrets.webhookSecretsKey } : {}), ...(holdsWorkerKeys(group) ? { WORKER_API_KEYS: secrets.workerApiKeys } : {}) };
}

/** NATS + owners + verifiers + a gateway (api, receiver, network), each its own process. */
export class Cluster {
	readonly namespace = `t${process.pid}${Math.floor(Math.random() * 1e6)}`;
	readonly dir = tempDir("scs-cluster-");
	nats!: NatsServer;
	owners!: NodeProcess;
	verifiers: NodeProcess[] = [];
	gateway!: NodeProcess;
	private readonly all: NodeProcess[] = [];
	/** One authority key for every process, as k8s/43-owners.yaml mounts it: payouts replicas must share it. */
	private readonly authorityKeyFile = loadOrCreateAuthorityKeypair(null, this.dir).source;
	/** One webhook secrets key for every process, as the owners and intake share it (k8s/README.md, "The Secret"). */
	private readonly webhookSecretsKey = randomBytes(32).toString("base64");

	constructor(private readonly options: ClusterOptions) {}

	async start(): Promise<void> {
		this.nats = new NatsServer(await freePort(), { namespace: this.namespace, maxPayload: this.options.natsMaxPayload });
		await this.nats.start();
		// Below info the processes do not announce their ports: they are given theirs.
		const port = async (): Promise<Record<string, string>> => (this.options.logLevel && this.options.logLevel !== "info" ? { PORT: String(await freePort()) } : {});
		this.owners = this.node("owners", { SERVICES: "mempool,payouts,crankers,tin,epochs,access,webhooks", REGISTRY_SEED_FILE: this.options.seedFile, ...(await port()) });
		await this.owners.ready();
		// As k8s/42-verifier.yaml runs them: a core each, verifying on the event loop.
		for (let i = 0; i < this.options.verifiers; i++) this.verifiers.push(this.node(`verifier-${i}`, { SERVICES: "verifier", VERIFY_THREADS: "0", ...(await port()) }));
		await Promise.all(this.verifiers.map(verifier => verifier.ready()));
		this.gateway = await this.node("gateway", { SERVICES: "api,receiver,network", ...(await port()) }).ready();
	}

	/** A process of the cluster, with its own DATA_DIR and a free port, signed in as the bus group of its SERVICES. */
	node(name: string, env: Record<string, string> & { SERVICES: string }): NodeProcess {
		const dataDir = path.join(this.dir, `${name}-${this.all.length}`);
		fs.mkdirSync(dataDir);
		const group = busGroupServing(env.SERVICES.split(","));
		const process_ = new NodeProcess(name, group, this.options.root ?? process.cwd(), {
			PORT: "0",
			NAMESPACE: this.namespace,
			TRANSPORTER: this.nats.url,
			...this.nats.credentials(group),
			DATA_DIR: dataDir,
			NODE_AUTHORITY_KEYPAIR_PATH: this.authorityKeyFile,
			...groupSecrets(group, { webhookSecretsKey: this.webhookSecretsKey, workerApiKeys: this.options.workerApiKey }),
			RATE_LIMIT_PER_MIN: "0",
			SWEEP_INTERVAL_MS: "500",
			VERIFY_TIMEOUT_MS: "2000",
			LOG_LEVEL: this.options.logLevel ?? "info", // the processes announce their ports at info
			...(this.options.mongoUrl ? { MONGO_URL: this.options.mongoUrl } : {}),
			...env
		});
		this.all.push(process_);
		return process_;
	}

	async stop(): Promise<void> {
		await Promise.all(this.all.map(p => p.signal("SIGKILL")));
		await this.nats?.stop();
	}
}
