/** Environment configuration: the SPEC's defaults and refusal of bad values. */
import { generateKeyPairSync } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import type { BusGroup } from "../../lib/bus-groups";
import { newBusKeyring } from "../../lib/bus-signatures";
import { ConfigError, loadConfig } from "../../lib/config";
import { newWallet } from "../helpers/fixtures";
import { loadOrCreateWorkerKeys } from "../../lib/secrets";

/** Signing keys for the processes on the bus (BUS_SIGNING_KEY, BUS_PUBLIC_KEYS). */
const ring = newBusKeyring();

describe("loadConfig defaults (empty environment)", () => {
	const config = loadConfig({});

	it("uses the SPEC defaults", () => {
		expect(config.port).toBe(3000);
		expect(config.leaseTtlMs).toBe(60_000);
		expect(config.crankerTtlMs).toBe(30_000);
		expect(config.verifyTimeoutMs).toBe(5000);
		expect(config.rateLimitPerMin).toBe(600);
		expect(config.solanaCluster).toBe("solana-devnet");
	});

	it("serves the embedded mode: SQLite in ./data, no transporter, every service, no explicit secrets", () => {
		expect(config).toMatchObject({
			store: "sqlite",
			mongoUrl: null,
			transporter: null,
			services: null,
			dataDir: path.resolve("./data"),
			workerApiKeys: [],
			crankerOperators: [],
			registrySeedFile: null,
			nodeAuthorityKeypairPath: null,
			solanaRpcUrls: [],
			trustProxy: false,
			logLevel: "info",
			namespace: ""
		});
	});

	it("treats blank values as unset", () => {
		expect(loadConfig({ PORT: "  ", SOLANA_CLUSTER: "" })).toMatchObject({ port: 3000, solanaCluster: "solana-devnet" });
	});

	it("reads process.env when called without an argument", () => {
		const saved = process.env.LEASE_TTL_MS;
		process.env.LEASE_TTL_MS = "1234";
		try {
			expect(loadConfig().leaseTtlMs).toBe(1234);
		} finally {
			if (saved === undefined) delete process.env.LEASE_TTL_MS;
			else process.env.LEASE_TTL_MS = saved;
		}
	});
});

describe("loadConfig values", () => {
	it("reads integers", () => {
		expect(
			loadConfig({ PORT: "8080", LEASE_TTL_MS: "15000", CRANKER_TTL_MS: "10000", VERIFY_TIMEOUT_MS: "250", RATE_LIMIT_PER_MIN: "0" })
		).toMatchObject({ port: 8080, leaseTtlMs: 15_000, crankerTtlMs: 10_000, verifyTimeoutMs: 250, rateLimitPerMin: 0 });
	});

	it("keeps idle connections 65 s by default, and takes KEEP_ALIVE_TIMEOUT_MS from 1 s to an hour only", () => {
		expect(loadConfig({}).keepAliveTimeoutMs).toBe(65_000);
		expect(loadConfig({ KEEP_ALIVE_TIMEOUT_MS: "620000" }).keepAliveTimeoutMs).toBe(620_000);
		expect(() => loadConfig({ KEEP_ALIVE_TIMEOUT_MS: "999" })).toThrow(/KEEP_ALIVE_TIMEOUT_MS must be an integer ≥ 1000 and ≤ 3600000/);
		expect(() => loadConfig({ KEEP_ALIVE_TIMEOUT_MS: "3600001" })).toThrow(/KEEP_ALIVE_TIMEOUT_MS must be an integer ≥ 1000 and ≤ 3600000/);
	});

	it("takes 4,096 connections per process, 256 per client and a 30 s socket timeout by default; 0 lifts the client limit, never the process's", () => {
		expect(loadConfig({})).toMatchObject({ maxConnections: 4096, maxConnectionsPerClient: 256, socketTimeoutMs: 30_000 });
		expect(loadConfig({ MAX_CONNECTIONS: "2500", MAX_CONNECTIONS_PER_CLIENT: "0" })).toMatchObject({ maxConnections: 2500, maxConnectionsPerClient: 0 });
		expect(() => loadConfig({ MAX_CONNECTIONS: "0" })).toThrow(/MAX_CONNECTIONS must be an integer ≥ 1/);
		expect(() => loadConfig({ MAX_CONNECTIONS_PER_CLIENT: "-1" })).toThrow(/MAX_CONNECTIONS_PER_CLIENT must be an integer ≥ 0/);
		expect(() => loadConfig({ SOCKET_TIMEOUT_MS: "999" })).toThrow(/SOCKET_TIMEOUT_MS must be an integer ≥ 1000/);
	});

	it("refuses stream limits the connection limits would cut short", () => {
		// Each stream holds a connection, on each of the two stream routes: past the connection limit it is closed unanswered, not refused with a 429.
		expect(() => loadConfig({ MAX_CONNECTIONS: "2000" })).toThrow(/MAX_CONNECTIONS \(2000\) must be above twice EVENT_STREAMS_MAX \(1000\)/);
		expect(() => loadConfig({ MAX_CONNECTIONS_PER_CLIENT: "40" })).toThrow(/MAX_CONNECTIONS_PER_CLIENT \(40\) must be above twice EVENT_STREAMS_PER_IP \(20\), or 0/);
		expect(loadConfig({ MAX_CONNECTIONS_PER_CLIENT: "41" }).maxConnectionsPerClient).toBe(41);
		expect(loadConfig({ MAX_CONNECTIONS_PER_CLIENT: "0", EVENT_STREAMS_PER_IP: "500" }).eventStreamsPerIp).toBe(500);
		// Behind TRUST_PROXY=true no peer is counted per client: nothing to cut short.
		expect(loadConfig({ MAX_CONNECTIONS_PER_CLIENT: "40", TRUST_PROXY: "true" }).maxConnectionsPerClient).toBe(40);
	});

	it("serves the probes on PORT unless HEALTH_PORT names another port", () => {
		expect(loadConfig({}).healthPort).toBeNull();
		expect(loadConfig({ HEALTH_PORT: "3001" }).healthPort).toBe(3001);
		expect(loadConfig({ PORT: "0", HEALTH_PORT: "0" }).healthPort).toBe(0);
		expect(() => loadConfig({ HEALTH_PORT: "3000" })).toThrow(/HEALTH_PORT must differ from PORT/);
		expect(() => loadConfig({ PORT: "8080", HEALTH_PORT: "8080" })).toThrow(/HEALTH_PORT must differ from PORT/);
		expect(() => loadConfig({ HEALTH_PORT: "65536" })).toThrow(/HEALTH_PORT must be an integer ≥ 0 and ≤ 65535/);
		expect(() => loadConfig({ PORT: "65536" })).toThrow(/PORT must be an integer ≥ 0 and ≤ 65535/);
	});

	it("accepts PORT 0 (any free port)", () => {
		expect(loadConfig({ PORT: "0" }).port).toBe(0);
	});

	it("parses comma-separated lists, trimming and dropping empty items", () => {
		const [k1, k2, k3] = ["worker-key-one-0001", "worker-key-two-0002", "worker-key-three-03"];
		const [a, b] = [newWallet().address, newWallet().address];
		const config = loadConfig({ WORKER_API_KEYS: ` ${k1}, ${k2} ,,${k3} `, CRANKER_OPERATORS: ` ${a},,${b} `, SERVICES: "api,mempool" });
		expect(config.workerApiKeys).toEqual([k1, k2, k3]);
		expect(config.crankerOperators).toEqual([a, b]);
		expect(config.services).toEqual(["api", "mempool"]);
	});

	it("refuses CRANKER_OPERATORS that names no key (which would admit every key: a review) or an entry that is no public key", () => {
		expect(() => loadConfig({ CRANKER_OPERATORS: "," })).toThrow(/names no key/);
		expect(() => loadConfig({ CRANKER_OPERATORS: ` , ,` })).toThrow(/names no key/);
		expect(() => loadConfig({ CRANKER_OPERATORS: `${newWallet().address},not-a-key` })).toThrow(/"not-a-key" is not a Cranker public key/);
		expect(loadConfig({ CRANKER_OPERATORS: "  " }).crankerOperators).toEqual([]);
	});

	it("refuses a worker key that is short or the example Secret's placeholder, in every process, without echoing it", () => {
		for (const bad of ["short-key", "worker key with spaces 0001", "PLACEHOLDER-replace-with-openssl-rand-hex-32"]) {
			expect(() => loadConfig({ WORKER_API_KEYS: `good-worker-key-00001,${bad}` })).toThrow(/WORKER_API_KEYS/);
			try {
				loadConfig({ WORKER_API_KEYS: bad });
			} catch (err) {
				expect((err as Error).message).not.toContain(bad);
			}
		}
	});

	it("an empty SERVICES list means every service", () => {
		expect(loadConfig({ SERVICES: " , " }).services).toBeNull();
	});

	it("with TRANSPORTER, refuses to let replicas generate their own worker keys or authority key", () => {
		const onBus = (group: BusGroup) => ({ TRANSPORTER: "nats://localhost:4222", NATS_USER: group, ...ring.env(group) });
		const workerKeys = { WORKER_API_KEYS: "a-worker-key-of-24-chars" };
		// The gateway admits workers with them; the intake and the owners check its proofs of a worker's calls.
		for (const [group, services] of [["gateway", "api"], ["intake", "receiver"], ["owners", "epochs"]] as const)
			expect(() => loadConfig({ ...onBus(group), SERVICES: services })).toThrow(/WORKER_API_KEYS is required with TRANSPORTER for the gateway, intake and owners groups/);
		// A verifier may not hold them: its bus credentials would act for a worker.
		expect(() => loadConfig({ ...onBus("verifier"), SERVICES: "verifier", ...workerKeys })).toThrow(/WORKER_API_KEYS must not be given to the bus group verifier/);
		expect(() => loadConfig({ ...onBus("owners"), SERVICES: "payouts", ...workerKeys })).toThrow(/NODE_AUTHORITY_KEYPAIR_PATH is required with TRANSPORTER/);
		expect(loadConfig({ ...onBus("verifier"), SERVICES: "verifier" })).toMatchObject({ services: ["verifier"], busGroup: "verifier" });
		// Nor may the gateway or a verifier hold the key that proves the intake's and owners' calls.
		expect(() => loadConfig({ ...onBus("gateway"), SERVICES: "api", ...workerKeys, WEBHOOK_SECRETS_KEY: "q".repeat(43) + "=" })).toThrow(/WEBHOOK_SECRETS_KEY must not be given to the bus group/);
		expect(() => loadConfig({ ...onBus("verifier"), SERVICES: "verifier", WEBHOOK_SECRETS_KEY: "q".repeat(43) + "=" })).toThrow(/WEBHOOK_SECRETS_KEY must not be given to the bus group/);
		// Every intake and owners process: they seal, tag and open with it, and prove their calls on the bus.
		for (const [group, services] of [["owners", "webhooks"], ["intake", "receiver,webhook-delivery"], ["intake", "receiver"], ["owners", "mempool"], ["owners", "epochs"]] as const)
			expect(() => loadConfig({ ...onBus(group), SERVICES: services, ...workerKeys, NODE_AUTHORITY_KEYPAIR_PATH: "/k" })).toThrow(/WEBHOOK_SECRETS_KEY is required with TRANSPORTER/);
		const key = "q".repeat(43) + "=";
		expect(loadConfig({ ...onBus("owners"), SERVICES: "webhooks", ...workerKeys, WEBHOOK_SECRETS_KEY: key }).webhookSecretsKeys).toEqual([Buffer.from(key, "base64")]);
		// Under rotation, a list: the current key first. Each must be a key, and none listed twice; no value is echoed.
		const next = "r".repeat(43) + "=";
		expect(loadConfig({ ...onBus("owners"), SERVICES: "webhooks", ...workerKeys, WEBHOOK_SECRETS_KEY: `${next}, ${key}` }).webhookSecretsKeys).toEqual([Buffer.from(next, "base64"), Buffer.from(key, "base64")]);
		for (const bad of [`${next},${next}`, `${next},short`, `${next},`.repeat(2) + "x"]) {
			const error = (() => {
				try {
					loadConfig({ ...onBus("owners"), SERVICES: "webhooks", ...workerKeys, WEBHOOK_SECRETS_KEY: bad });
				} catch (err) {
					return (err as Error).message;
				}
				return "accepted";
			})();
			expect(error).toMatch(/WEBHOOK_SECRETS_KEY (lists a key twice|must be 32 random bytes)/);
			expect(error).not.toContain(next);
		}
		// The first step of a rotation: a key taken, not yet used; none of the current list, and for the key holders only.
		expect(loadConfig({ ...onBus("owners"), SERVICES: "webhooks", ...workerKeys, WEBHOOK_SECRETS_KEY: key, WEBHOOK_SECRETS_KEY_NEXT: next }).webhookSecretsNextKeys).toEqual([Buffer.from(next, "base64")]);
		expect(() => loadConfig({ ...onBus("owners"), SERVICES: "webhooks", ...workerKeys, WEBHOOK_SECRETS_KEY: key, WEBHOOK_SECRETS_KEY_NEXT: key })).toThrow(/WEBHOOK_SECRETS_KEY_NEXT lists a key WEBHOOK_SECRETS_KEY lists too/);
		expect(() => loadConfig({ ...onBus("gateway"), SERVICES: "api", ...workerKeys, WEBHOOK_SECRETS_KEY_NEXT: next })).toThrow(/WEBHOOK_SECRETS_KEY_NEXT must not be given to the bus group gateway/);
		// One process, no transporter: it generates both into DATA_DIR, as before.
		expect(loadConfig({})).toMatchObject({ transporter: null, workerApiKeys: [], nodeAuthorityKeypairPath: null, busGroup: null });
	});

	it("with TRANSPORTER, NATS_USER names the process's bus group, and SERVICES only that group's services", () => {
		const bus = { TRANSPORTER: "nats://localhost:4222" };
		for (const user of [undefined, "scs", "Owners", "__proto__"]) expect(() => loadConfig({ ...bus, ...(user ? { NATS_USER: user } : {}), SERVICES: "verifier" })).toThrow(/NATS_USER must name this process's bus group/);
		// The internet-facing gateway may not run an owner or a verifier; every service needs a list.
		expect(() => loadConfig({ ...bus, NATS_USER: "gateway", SERVICES: "api,mempool", WORKER_API_KEYS: "a-worker-key-of-24-chars" })).toThrow(/SERVICES must list services of the bus group gateway \(api\) with TRANSPORTER; not mempool/);
		expect(() => loadConfig({ ...bus, NATS_USER: "verifier", SERVICES: "" })).toThrow(/SERVICES must list services of the bus group verifier/);
		expect(() => loadConfig({ ...bus, NATS_USER: "verifier", SERVICES: "verifier", NAMESPACE: "a.b" })).toThrow(/NAMESPACE may not hold dots/);
		expect(loadConfig({ ...bus, NATS_USER: "intake", ...ring.env("intake"), SERVICES: "api,receiver,network,webhook-delivery", WORKER_API_KEYS: "a-worker-key-of-24-chars", WEBHOOK_SECRETS_KEY: "q".repeat(43) + "=" }).busGroup).toBe("intake");
	});

	it("with TRANSPORTER, the process's group's signing key and every group's public key, which match; never echoed", () => {
		const verifier = { TRANSPORTER: "nats://localhost:4222", NATS_USER: "verifier", SERVICES: "verifier" };
		const { BUS_SIGNING_KEY, BUS_PUBLIC_KEYS } = ring.env("verifier");
		expect(loadConfig({ ...verifier, BUS_SIGNING_KEY, BUS_PUBLIC_KEYS }).busKeys).toEqual({ signing: expect.anything(), groups: expect.objectContaining({ gateway: expect.anything(), owners: expect.anything() }) });
		expect(() => loadConfig(verifier)).toThrow(/BUS_SIGNING_KEY .* and BUS_PUBLIC_KEYS .* are required with TRANSPORTER/);
		// A rotation lists a group's old key and its new one: a process signing with either is taken.
		const next = newBusKeyring().env("verifier");
		const rotating = `${BUS_PUBLIC_KEYS},${next.BUS_PUBLIC_KEYS.split(",").find(entry => entry.startsWith("verifier:"))}`;
		expect(loadConfig({ ...verifier, BUS_SIGNING_KEY: next.BUS_SIGNING_KEY, BUS_PUBLIC_KEYS: rotating }).busKeys!.groups.verifier).toHaveLength(2);
		expect(loadConfig({ ...verifier, BUS_SIGNING_KEY, BUS_PUBLIC_KEYS: rotating }).busKeys!.groups.verifier).toHaveLength(2);
		const cases: [Record<string, string>, RegExp][] = [
			[{ BUS_SIGNING_KEY: ring.env("owners").BUS_SIGNING_KEY, BUS_PUBLIC_KEYS }, /BUS_SIGNING_KEY is not the private key of a public key of the verifier group/],
			[{ BUS_SIGNING_KEY, BUS_PUBLIC_KEYS: newBusKeyring().env("verifier").BUS_PUBLIC_KEYS }, /BUS_SIGNING_KEY is not the private key of a public key of the verifier group/],
			[{ BUS_SIGNING_KEY: Buffer.from("not a key").toString("base64"), BUS_PUBLIC_KEYS }, /BUS_SIGNING_KEY must be an ed25519 private key/],
			[{ BUS_SIGNING_KEY: generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey.export({ format: "der", type: "pkcs8" }).toString("base64"), BUS_PUBLIC_KEYS }, /BUS_SIGNING_KEY must be an ed25519 private key/],
			[{ BUS_SIGNING_KEY, BUS_PUBLIC_KEYS: BUS_PUBLIC_KEYS.split(",").slice(1).join(",") }, /BUS_PUBLIC_KEYS: it lacks the key of gateway/],

			[{ BUS_SIGNING_KEY, BUS_PUBLIC_KEYS: BUS_PUBLIC_KEYS.replace("owners:", "others:") }, /BUS_PUBLIC_KEYS: each entry is <group>:<base64 public key>/],
			[{ BUS_SIGNING_KEY, BUS_PUBLIC_KEYS: BUS_PUBLIC_KEYS.replace(/owners:[^,]*/, "owners:AAAA") }, /BUS_PUBLIC_KEYS: owners's key is not a public key/],
			[{ BUS_SIGNING_KEY: "PLACEHOLDER-replace-with-a-key", BUS_PUBLIC_KEYS }, /BUS_SIGNING_KEY/]
		];
		for (const [keys, message] of cases) {
			expect(() => loadConfig({ ...verifier, ...keys })).toThrow(message);
			try {
				loadConfig({ ...verifier, ...keys });
			} catch (err) {
				expect((err as Error).message).not.toContain(keys.BUS_SIGNING_KEY);
			}
		}
	});

	it("WEBHOOK_SECRETS_KEY must be 32 bytes in base64, and is never echoed", () => {
		for (const bad of ["c2hvcnQ=", "q".repeat(44), `${"q".repeat(42)}!=`, "PLACEHOLDER-replace-with-openssl-rand-base64-32"]) {
			expect(() => loadConfig({ WEBHOOK_SECRETS_KEY: bad })).toThrow(/WEBHOOK_SECRETS_KEY/);
			try {
				loadConfig({ WEBHOOK_SECRETS_KEY: bad });
			} catch (err) {
				expect((err as Error).message).not.toContain(bad);
			}
		}
	});

	it("MONGO_URL selects the mongodb store", () => {
		expect(loadConfig({ MONGO_URL: "mongodb://localhost:27017/scs" })).toMatchObject({ store: "mongodb", mongoUrl: "mongodb://localhost:27017/scs" });
	});

	it("refuses a SOLANA_CLUSTER that looks like a public cluster's name but is none: no genesis hash would be checked for it", () => {
		for (const name of ["solana-mainnet-beta", "mainnet", "Solana-Devnet", "testnet"])
			expect(() => loadConfig({ SOLANA_CLUSTER: name })).toThrow(`SOLANA_CLUSTER "${name}" looks like a public cluster's name but is none of solana-mainnet, solana-devnet, solana-testnet`);
		for (const name of ["solana-mainnet", "solana-devnet", "solana-testnet", "solana-localnet", "constructor"]) expect(loadConfig({ SOLANA_CLUSTER: name }).solanaCluster).toBe(name);
	});

	it("on a public cluster, refuses a BLOCKHASH_LIFETIME_BLOCKS under 200: a Cranker's low lastValidBlockHeight would decide when a live transaction is dead", () => {
		for (const cluster of ["solana-mainnet", "solana-devnet"]) {
			expect(() => loadConfig({ SOLANA_RPC_URL: "https://rpc.example", SOLANA_CLUSTER: cluster, BLOCKHASH_LIFETIME_BLOCKS: "150" })).toThrow("BLOCKHASH_LIFETIME_BLOCKS must be an integer ≥ 200");
			expect(loadConfig({ SOLANA_RPC_URL: "https://rpc.example", SOLANA_CLUSTER: cluster, BLOCKHASH_LIFETIME_BLOCKS: "200" }).blockhashLifetimeBlocks).toBe(200);
		}
		// A local chain of its own (tests) may keep its blockhashes for less.
		expect(loadConfig({ SOLANA_RPC_URL: "http://127.0.0.1:8899", SOLANA_CLUSTER: "solana-localnet", BLOCKHASH_LIFETIME_BLOCKS: "25" }).blockhashLifetimeBlocks).toBe(25);
	});

	it("wants SOLANA_CLUSTER named with SOLANA_RPC_URL: the endpoints are checked against it, and its old default would refuse a mainnet Node's settlements at run time", () => {
		expect(() => loadConfig({ SOLANA_RPC_URL: "https://rpc.example/key" })).toThrow(/^SOLANA_CLUSTER must be set with SOLANA_RPC_URL/);
		expect(loadConfig({ SOLANA_RPC_URL: "https://rpc.example/key", SOLANA_CLUSTER: "solana-mainnet" }).solanaCluster).toBe("solana-mainnet");
		expect(loadConfig({}).solanaCluster).toBe("solana-devnet");
		// A list with no URL in it is no chain: nothing to check a name against.
		expect(loadConfig({ SOLANA_RPC_URL: " , " })).toMatchObject({ solanaRpcUrls: [], solanaCluster: "solana-devnet" });
	});

	it("reads strings and paths", () => {
		const config = loadConfig({
			DATA_DIR: "/var/lib/scs",
			SOLANA_RPC_URL: "http://127.0.0.1:8899",
			SOLANA_CLUSTER: "solana-mainnet",
			REGISTRY_SEED_FILE: "/etc/scs/seed.json",
			NODE_AUTHORITY_KEYPAIR_PATH: "/etc/scs/authority.json",
			WEBHOOK_SECRETS_KEY: "q".repeat(43) + "=",
			WORKER_API_KEYS: "a-worker-key-of-24-chars",
			TRANSPORTER: "nats://localhost:4222",
			NATS_USER: "owners",
			...ring.env("owners"),
			SERVICES: "payouts"
		});
		expect(config).toMatchObject({
			dataDir: "/var/lib/scs",
			solanaRpcUrls: ["http://127.0.0.1:8899"],
			solanaCluster: "solana-mainnet",
			registrySeedFile: "/etc/scs/seed.json",
			nodeAuthorityKeypairPath: "/etc/scs/authority.json",
			transporter: "nats://localhost:4222"
		});
	});

	it.each([
		["true", true],
		["1", true],
		["false", false],
		["0", false]
	])("TRUST_PROXY=%s → %p", (raw, expected) => {
		expect(loadConfig({ TRUST_PROXY: raw }).trustProxy).toBe(expected);
	});

	it("SOLANA_RPC_URL may list several http(s) endpoints; a bad one is named by its place, never by its text (it may carry an API key)", () => {
		const two = "https://rpc.one.example/?api-key=k1, https://rpc.two.example/k2";
		expect(loadConfig({ SOLANA_RPC_URL: two, SOLANA_CLUSTER: "solana-devnet" }).solanaRpcUrls).toEqual(["https://rpc.one.example/?api-key=k1", "https://rpc.two.example/k2"]);
		for (const [value, error] of [
			["https://rpc.one.example/?api-key=secret1,ftp://rpc.two.example/secret2", /^SOLANA_RPC_URL: entry 2 is not an http\(s\) URL$/],
			["secret1", /^SOLANA_RPC_URL: entry 1 is not an http\(s\) URL$/],
			["https://rpc.one.example/secret1,https://rpc.one.example/secret1", /^SOLANA_RPC_URL: entry 2 repeats an earlier one$/],
			["https://RPC.one.example,https://rpc.one.example/", /^SOLANA_RPC_URL: entry 2 repeats an earlier one$/],
			["https://user:secret1@rpc.one.example", /^SOLANA_RPC_URL: entry 1 holds a user or password/],
			[Array.from({ length: 6 }, (_, i) => `https://rpc${i}.example/secret`).join(","), /^SOLANA_RPC_URL lists 6 URLs; at most 5$/]
		] as const) {
			expect(() => loadConfig({ SOLANA_RPC_URL: value })).toThrow(ConfigError);
			expect(() => loadConfig({ SOLANA_RPC_URL: value })).toThrow(error);
			expect(() => loadConfig({ SOLANA_RPC_URL: value })).not.toThrow(/secret/);
		}
	});

	it("PUBLIC_BASE_URL is an http(s) URL without credentials (a password alone too), query or fragment; a refused one is never echoed", () => {
		expect(loadConfig({ PUBLIC_BASE_URL: "https://node.example/api/" }).publicBaseUrl).toBe("https://node.example/api");
		for (const value of ["https://:secret1@node.example", "https://user:secret1@node.example", "https://node.example/?key=secret1", "https://node.example/#secret1", "ftp://node.example/secret1", "secret1"]) {
			expect(() => loadConfig({ PUBLIC_BASE_URL: value })).toThrow(/^PUBLIC_BASE_URL must be an (absolute )?http\(s\) URL/);
			expect(() => loadConfig({ PUBLIC_BASE_URL: value })).not.toThrow(/secret/);
		}
	});

	it("EVENT_RETENTION_MS must be longer than WEBHOOK_RETRY_FOR_MS: a webhook still retrying an event would find it pruned, and skip it", () => {
		expect(loadConfig({ EVENT_RETENTION_MS: "200", WEBHOOK_RETRY_FOR_MS: "199" })).toMatchObject({ eventRetentionMs: 200, webhookRetryForMs: 199 });
		expect(() => loadConfig({ EVENT_RETENTION_MS: "200", WEBHOOK_RETRY_FOR_MS: "200" })).toThrow(/^EVENT_RETENTION_MS must be longer than WEBHOOK_RETRY_FOR_MS/);
		expect(() => loadConfig({ WEBHOOK_RETRY_FOR_MS: String(30 * 24 * 60 * 60 * 1000) })).toThrow(ConfigError);
		expect(() => loadConfig({ EVENT_RETENTION_MS: String(12 * 60 * 60 * 1000) })).toThrow(ConfigError);
	});

	it("TRUST_PROXY may list the proxies' addresses and CIDR ranges", () => {
		expect(loadConfig({ TRUST_PROXY: "10.0.0.0/8, 192.168.1.7,fd00::/8" }).trustProxy).toEqual(["10.0.0.0/8", "192.168.1.7", "fd00::/8"]);
	});
});

describe("loadConfig refusals", () => {
	it.each([
		["PORT", "-1"],
		["PORT", "3000.5"],
		["PORT", "3e3"],
		["PORT", "abc"],
		["PORT", "0x10"],
		["LEASE_TTL_MS", "0"],
		["LEASE_TTL_MS", "sixty"],
		["CRANKER_TTL_MS", "0"],
		["LIQUIDITY_READS_PER_SECOND", "0"],
		["BLOCKHASH_LIFETIME_BLOCKS", "0"],
		["VERIFY_TIMEOUT_MS", "0"],
		["RATE_LIMIT_PER_MIN", "-5"],
		["RATE_LIMIT_PER_MIN", "10/min"],
		["SWEEP_INTERVAL_MS", "9"],
		["SLOT_POLL_INTERVAL_MS", "5"],
		["LEASE_TTL_MS", "99999999999999999999"]
	])("%s=%p is a ConfigError naming the variable", (key, value) => {
		expect(() => loadConfig({ [key]: value })).toThrow(ConfigError);
		expect(() => loadConfig({ [key]: value })).toThrow(new RegExp(`^${key} must be an integer`));
	});

	it.each(["yes", "no", "TRUE", "on", "2", "10.0.0.0/33", "10.0.0.1/", "10.0.0.0/8/8", "fd00::/129", "10.0.0.0/08x", "10.0.0.1,"])("TRUST_PROXY=%p is a ConfigError", value => {
		expect(() => loadConfig({ TRUST_PROXY: value })).toThrow(ConfigError);
		expect(() => loadConfig({ TRUST_PROXY: value })).toThrow(/TRUST_PROXY must be true, false or the proxies' addresses or CIDR ranges/);
	});

	it("ConfigError is an Error named ConfigError", () => {
		let caught: unknown;
		try {
			loadConfig({ PORT: "x" });
		} catch (err) {
			caught = err;
		}
		expect(caught).toBeInstanceOf(Error);
		expect((caught as Error).name).toBe("ConfigError");
	});
});

describe("LOG_LEVEL", () => {
	it("accepts Moleculer's levels and refuses anything else with a ConfigError naming the variable", () => {
		for (const level of ["fatal", "error", "warn", "info", "debug", "trace"]) expect(loadConfig({ LOG_LEVEL: level }).logLevel).toBe(level);
		expect(() => loadConfig({ LOG_LEVEL: "bogus" })).toThrow(ConfigError);
		expect(() => loadConfig({ LOG_LEVEL: "bogus" })).toThrow(/LOG_LEVEL/);
	});
});

describe("the example Secret's placeholders (k8s/secret/settlement-secrets.example.yaml)", () => {
	const placeholder = "PLACEHOLDER-replace-with-openssl-rand-hex-32";
	const refusal = (run: () => unknown): Error => {
		try {
			run();
		} catch (err) {
			return err as Error;
		}
		throw new Error("not refused");
	};

	it("METRICS_API_KEY: a ConfigError that names the variable and never repeats the value", () => {
		const error = refusal(() => loadConfig({ METRICS_API_KEY: placeholder }));
		expect(error).toBeInstanceOf(ConfigError);
		expect(error.message).toMatch(/^METRICS_API_KEY holds a placeholder of the example Secret/);
		expect(error.message).not.toContain("replace-with");
		expect(loadConfig({ METRICS_API_KEY: "a-real-metrics-key-0123456789" }).metricsApiKey).toBe("a-real-metrics-key-0123456789");
	});

	it("NATS_PASSWORD and MONGO_URL: the example Secret's values are refused without repeating them (a review: they were taken as real)", () => {
		const examples = {
			NATS_PASSWORD: "PLACEHOLDERnThenOpensslRandHex32",
			MONGO_URL: "mongodb://PLACEHOLDER-app-user:PLACEHOLDER-app-password@mongodb-0.mongodb.settlement.svc.cluster.local:27017/settlement?replicaSet=rs0&authSource=admin"
		};
		for (const [key, value] of Object.entries(examples)) {
			const error = refusal(() => loadConfig({ [key]: value }));
			expect(error).toBeInstanceOf(ConfigError);
			expect(error.message).toMatch(new RegExp(`^${key} holds a placeholder of the example Secret`));
			expect(error.message).not.toContain("PLACEHOLDER");
		}
		expect(loadConfig({ NATS_PASSWORD: "n0123456789abcdef" }).natsPassword).toBe("n0123456789abcdef");
		expect(loadConfig({ MONGO_URL: "mongodb://app:secret@db-0:27017,db-1:27017/settlement?replicaSet=rs0" }).store).toBe("mongodb");
	});

	it("MONGO_URL set but blank is refused, not taken for the embedded SQLite store (a review: two owner replicas each on a store of their own)", () => {
		for (const blank of ["", "  "]) {
			const error = refusal(() => loadConfig({ MONGO_URL: blank }));
			expect(error).toBeInstanceOf(ConfigError);
			expect(error.message).toMatch(/^MONGO_URL is set but blank/);
		}
		expect(loadConfig({}).store).toBe("sqlite");
	});

	it("WORKER_API_KEYS: refused when any key is one, from the environment or the key file; the value is never repeated", () => {
		const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "scs-config-"));
		for (const keys of [[placeholder], ["a-real-worker-key-0123456789", "placeholder-lower-case-too-0123"]]) {
			const error = refusal(() => loadOrCreateWorkerKeys(keys, dataDir));
			expect(error).toBeInstanceOf(ConfigError);
			expect(error.message).toMatch(/^WORKER_API_KEYS holds a placeholder of the example Secret/);
			expect(error.message).not.toContain("replace-with");
		}
		fs.writeFileSync(path.join(dataDir, "worker-api-keys"), `${placeholder}\n`);
		const fromFile = refusal(() => loadOrCreateWorkerKeys([], dataDir));
		expect(fromFile).toBeInstanceOf(ConfigError);
		expect(fromFile.message).not.toContain("replace-with");
		expect(loadOrCreateWorkerKeys(["a-real-worker-key-0123456789"], dataDir).value).toEqual(["a-real-worker-key-0123456789"]);
	});
});
