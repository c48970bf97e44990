/**
 * The one place environment variables are read. Every variable has a default that serves the
 * embedded mode; secrets left unset are generated into DATA_DIR on first start (see secrets.ts).
 */
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { address, type Address } from "@solana/kit";
import { BUS_GROUPS, holdsCallKey, holdsWorkerKeys, isBusGroup, mayServe, type BusGroup } from "./bus-groups";
import { busPublicKeys, busSigningKey, isKeyPairOf, type BusKeys } from "./bus-signatures";
import { isBase58OfLength } from "./encoding";
import { DEFAULT_SETTLEMENT_PROGRAM_ID } from "./settlement";
import { looksPublic, PUBLIC_CLUSTERS } from "./clusters";
import { mongoUrlWeakenings } from "./store/mongo-url";

export type StoreKind = "sqlite" | "mongodb";

export interface Config {
	port: number;
	/**
	 * HEALTH_PORT: the probes' own port (null: they use PORT). A flood that fills MAX_CONNECTIONS on
	 * PORT would otherwise fail them, and Kubernetes would restart a process that is only busy.
	 */
	healthPort: number | null;
	namespace: string;
	transporter: string | null;
	/** NATS credentials (the Secret's): the bus admits only the app's processes. */
	natsUser: string | null;
	natsPassword: string | null;
	/** The bus group this process belongs to (lib/bus-groups.ts): NATS_USER, with a transporter. */
	busGroup: BusGroup | null;
	/** BUS_ADMIT_UNGROUPED, for the roll from the one-user bus only: take nodes whose id names no group as peers. */
	busAdmitUngrouped: boolean;
	/** The bus's signing keys (lib/bus-signatures.ts), with a transporter: BUS_SIGNING_KEY, this group's private key, and BUS_PUBLIC_KEYS, every group's. */
	busKeys: BusKeys | null;
	/** BUS_ADMIT_UNSIGNED, for the roll to the version that signs its announcements only: take a grouped node's unsigned ones. */
	busAdmitUnsigned: boolean;
	/** Service names this process runs; null = all of them. */
	services: string[] | null;
	dataDir: string;
	mongoUrl: string | null;
	/**
	 * How long after its mark an epoch close waits before it sums what it archived: moves stamped
	 * before the mark may still be on their way to the store (MongoDB transactions retry for up to
	 * 8 s; replicas' clocks differ). 0 on SQLite, where a write is visible as soon as it is made.
	 */
	epochCloseSettleMs: number;
	/** MONGO_ALLOW_WEAK_DURABILITY: the operator accepts a MONGO_URL that weakens durability. */
	mongoAllowWeakDurability: boolean;
	store: StoreKind;
	/** Explicit worker API keys; empty = use (or generate) DATA_DIR/worker-api-keys. */
	workerApiKeys: string[];
	registrySeedFile: string | null;
	leaseTtlMs: number;
	crankerTtlMs: number;
	/** Chain reads of settlement Crankers' balances a process makes per second at most (services/crankers.service.ts). */
	liquidityReadsPerSecond: number;
	/** Operator pubkeys allowed to crank; empty = any. */
	crankerOperators: string[];
	nodeAuthorityKeypairPath: string | null;
	/**
	 * WEBHOOK_SECRETS_KEY (base64 of 32 bytes; under rotation a comma-separated list, the first
	 * current): seals the webhooks' signing secrets and tags the events they deliver; null = use (or
	 * generate) DATA_DIR/webhook-secrets-key.
	 */
	webhookSecretsKeys: Buffer[] | null;
	/** WEBHOOK_SECRETS_KEY_NEXT: keys taken but not yet used, the first step of a rotation (k8s/README.md). */
	webhookSecretsNextKeys: Buffer[];
	verifyTimeoutMs: number;
	/** VERIFY_THREADS: worker threads solving the ed25519 equation of intents; 0 = on the event loop. */
	verifyThreads: number;
	/** STORE_COMMIT_WINDOW_MS: SQLite group commit window (cut short by GROUP_COMMIT_WRITES); 0 = one commit per event-loop turn. */
	storeCommitWindowMs: number;
	/** INTAKE_WINDOW_MS: how long the gateway gathers submissions into one batch (cut short by INTAKE_BATCH_ENOUGH); 0 = one event-loop turn. */
	intakeWindowMs: number;
	rateLimitPerMin: number;
	/** TRUST_PROXY: whose `x-forwarded-for` names the client (lib/client-key.ts, proxyTrust). */
	trustProxy: boolean | string[];
	logLevel: string;
	/** CORS_ORIGINS: origins (scheme://host[:port]) whose browser apps may call the public routes; none by default. */
	corsOrigins: string[];
	/** LOG_FORMAT: `short` lines for a terminal, or `json`, one object per line. */
	logFormat: "short" | "json";
	/**
	 * SOLANA_RPC_URL: the JSON-RPC endpoints the Node reads the chain through, comma-separated
	 * (none: no chain checks). With several, a submission is let go or confirmed only on what every
	 * one shows (lib/chain.ts).
	 */
	solanaRpcUrls: string[];
	solanaCluster: string;
	/** How often the sweeps (verification, lease expiry, intent expiry) run. */
	sweepIntervalMs: number;
	/** How often the latest slot is polled from SOLANA_RPC_URL. */
	slotPollIntervalMs: number;
	/** An epoch closes by itself once it is this old. */
	epochDurationMs: number;
	/** Lets one Cranker both verify a TIN operation and commit its fee, and an owner verify its own (separation of duties off). */
	allowSingleCrankerTins: boolean;
	tinCreateFee: string;
	tinUpdateFee: string;
	/** Cranker records offline for longer than this are pruned. */
	crankerRetentionMs: number;
	/** The base URL Crankers call, behind a proxy: signed requests cover `@target-uri` (SPEC §6.1); null = http://<Host>. */
	publicBaseUrl: string | null;
	/** The settlement program whose credit-owner PDAs receive settlements (SPEC §11). */
	settlementProgramId: Address;
	/**
	 * Blocks after the height the Node read at a SUBMITTED report before it may take that submission
	 * for dead, whatever lastValidBlockHeight the Cranker claimed (Solana's 150, and as many again
	 * for an RPC view that lags).
	 */
	blockhashLifetimeBlocks: number;
	/** SPEC §10: the headers of a request must arrive within this, the whole request within the next. */
	headersTimeoutMs: number;
	requestTimeoutMs: number;
	/**
	 * KEEP_ALIVE_TIMEOUT_MS: how long an idle keep-alive connection is kept. Longer than the idle
	 * timeout of the proxies and clients that pool connections to the gateway (60 s is common):
	 * one that closes first races their next request on the connection, which then fails.
	 */
	keepAliveTimeoutMs: number;
	/**
	 * MAX_CONNECTIONS and MAX_CONNECTIONS_PER_CLIENT: open connections per gateway process, and per
	 * client in it (lib/connection-cap.ts; 0: no per-client limit). A connection past either is closed
	 * unanswered: each holds memory, an idle one for up to KEEP_ALIVE_TIMEOUT_MS, one whose client
	 * stopped reading its answer (the unsent rest) for up to SOCKET_TIMEOUT_MS.
	 */
	maxConnections: number;
	maxConnectionsPerClient: number;
	/** SOCKET_TIMEOUT_MS: a connection whose answer has not moved this long (its client stopped reading) is closed. */
	socketTimeoutMs: number;
	/** Failed authentications on worker routes one client may make per minute before it gets 429. */
	authFailuresPerMin: number;
	/** METRICS_API_KEY: when set, GET /metrics in Prometheus form takes `Authorization: Bearer <key>`; null = public. */
	metricsApiKey: string | null;
	/** EVENT_RETENTION_MS: events (the outbox of state changes) older than this are pruned. */
	eventRetentionMs: number;
	/** EVENT_HEARTBEAT_MS: the comment line every open event stream gets, so that proxies keep it open. */
	eventHeartbeatMs: number;
	/** EVENT_STREAMS_MAX and EVENT_STREAMS_PER_IP: open event streams per gateway process, and per client IP in it. */
	eventStreamsMax: number;
	eventStreamsPerIp: number;
	/** WEBHOOK_ALLOW_PRIVATE: webhook URLs may resolve to private, loopback and link-local addresses. */
	webhookAllowPrivate: boolean;
	/** WEBHOOK_RETRY_FOR_MS: how long a failing delivery is retried before its subscription is disabled. */
	webhookRetryForMs: number;
	/** WEBHOOK_RETRY_BASE_MS: the wait after a delivery's first failure, doubled after each next one (jittered, at most 1 h). */
	webhookRetryBaseMs: number;
	/** WEBHOOK_TIMEOUT_MS: one delivery attempt, from the DNS lookup to the answer's status; a delivery lease lasts three of them. */
	webhookTimeoutMs: number;
	/** WEBHOOKS_MAX: webhook subscriptions the deployment keeps; past it, POST /webhooks is 409 LIMIT_REACHED. */
	webhooksMax: number;
}

/** A configuration the process cannot start with: a message for the operator, so no stack trace. */
export class ConfigError extends Error {
	override name = "ConfigError";

	constructor(message: string) {
		super(message);
		this.stack = `${this.name}: ${message}`;
	}
}

type Env = Record<string, string | undefined>;

/** The least BLOCKHASH_LIFETIME_BLOCKS on a public cluster (local chains in tests live shorter). */
const PUBLIC_CLUSTER_MIN_LIFETIME_BLOCKS = 200;

/**
 * A network name; one that looks like a public cluster's must be exactly one of theirs
 * (lib/clusters.ts). With SOLANA_RPC_URL it must be given: the endpoints are checked against it,
 * and a Node upgraded from when it was a label (solana-devnet unless set) must not find its
 * settlements refused at run time for a default it never chose.
 */
function clusterName(env: Env, key: string, rpcUrls: readonly string[]): string {
	const given = text(env, key);
	if (given === null && rpcUrls.length)
		throw new ConfigError(
			`${key} must be set with SOLANA_RPC_URL: ${[...PUBLIC_CLUSTERS.keys()].join(", ")} for a public cluster (its genesis hash is checked), or a name of your own for another (solana-localnet; then only that the endpoints agree)`
		);
	const name = given ?? "solana-devnet";
	if (looksPublic(name)) throw new ConfigError(`${key} "${name}" looks like a public cluster's name but is none of ${[...PUBLIC_CLUSTERS.keys()].join(", ")}: the Node checks its RPC endpoints against those only`);
	return name;
}

function text(env: Env, key: string): string | null {
	const value = env[key]?.trim();
	return value ? value : null;
}

function list(env: Env, key: string): string[] {
	return (text(env, key) ?? "")
		.split(",")
		.map(s => s.trim())
		.filter(Boolean);
}

/**
 * CRANKER_OPERATORS: Cranker public keys (base58 of 32 bytes). Set, it must name one at least: an
 * empty list admits every key, so a value that lists none (",") is a mistake, not that choice.
 */
function crankerOperators(env: Env): string[] {
	const keys = list(env, "CRANKER_OPERATORS");
	if (text(env, "CRANKER_OPERATORS") !== null && !keys.length) throw new ConfigError("CRANKER_OPERATORS is set but names no key; unset it to admit every Cranker key");
	const bad = keys.find(key => !isBase58OfLength(key, 32));
	if (bad !== undefined) throw new ConfigError(`CRANKER_OPERATORS: "${bad.slice(0, 64)}" is not a Cranker public key (base58 of 32 bytes)`);
	return keys;
}

function integer(env: Env, key: string, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER): number {
	const raw = text(env, key);
	if (raw == null) return fallback;
	if (!/^\d+$/.test(raw) || Number(raw) < min || Number(raw) > max || !Number.isSafeInteger(Number(raw)))
		throw new ConfigError(`${key} must be an integer ≥ ${min}${max < Number.MAX_SAFE_INTEGER ? ` and ≤ ${max}` : ""}, got "${raw}"`);
	return Number(raw);
}

function healthPort(env: Env, gatewayPort: number): number | null {
	if (text(env, "HEALTH_PORT") == null) return null;
	const port = integer(env, "HEALTH_PORT", 0, 0, 65_535);
	if (port !== 0 && port === gatewayPort) throw new ConfigError("HEALTH_PORT must differ from PORT, or be unset for the probes to use PORT");
	return port;
}

function flag(env: Env, key: string): boolean {
	const raw = text(env, key);
	if (raw == null) return false;
	if (!["true", "false", "1", "0"].includes(raw)) throw new ConfigError(`${key} must be true or false, got "${raw}"`);
	return raw === "true" || raw === "1";
}

/**
 * The gateway's connections and the event streams they carry, checked together: a stream holds a
 * connection, so its limits must bite before the connection limits (a 429 its client understands,
 * not a connection closed unanswered). Behind TRUST_PROXY=true no peer is counted per client.
 */
function connectionLimits(env: Env, trustProxy: Config["trustProxy"]): Pick<Config, "maxConnections" | "maxConnectionsPerClient" | "socketTimeoutMs" | "eventHeartbeatMs" | "eventStreamsMax" | "eventStreamsPerIp"> {
	const limits = {
		maxConnections: integer(env, "MAX_CONNECTIONS", 4096, 1),
		maxConnectionsPerClient: integer(env, "MAX_CONNECTIONS_PER_CLIENT", 256, 0),
		socketTimeoutMs: integer(env, "SOCKET_TIMEOUT_MS", 30_000, 1000),
		eventHeartbeatMs: integer(env, "EVENT_HEARTBEAT_MS", 15_000, 10),
		eventStreamsMax: integer(env, "EVENT_STREAMS_MAX", 1000, 1),
		eventStreamsPerIp: integer(env, "EVENT_STREAMS_PER_IP", 20, 1)
	};
	// Twice: the public route and the worker route count their streams apart.
	if (2 * limits.eventStreamsMax >= limits.maxConnections)
		throw new ConfigError(`MAX_CONNECTIONS (${limits.maxConnections}) must be above twice EVENT_STREAMS_MAX (${limits.eventStreamsMax}): each stream holds a connection, on each of the two stream routes`);
	if (limits.maxConnectionsPerClient > 0 && trustProxy !== true && 2 * limits.eventStreamsPerIp >= limits.maxConnectionsPerClient)
		throw new ConfigError(`MAX_CONNECTIONS_PER_CLIENT (${limits.maxConnectionsPerClient}) must be above twice EVENT_STREAMS_PER_IP (${limits.eventStreamsPerIp}), or 0: each stream holds a connection, on each of the two stream routes`);
	return limits;
}

/** TRUST_PROXY: true or false (as flag), or the proxies' addresses and CIDR ranges, comma-separated. */
function trustedProxies(env: Env, key: string): boolean | string[] {
	const raw = text(env, key);
	if (raw == null || ["true", "false", "1", "0"].includes(raw)) return flag(env, key);
	const entries = raw.split(",").map(entry => entry.trim());
	const isRange = (entry: string) => {
		const [address, prefix, ...rest] = entry.split("/");
		const bits = net.isIPv4(address ?? "") ? 32 : net.isIPv6(address ?? "") ? 128 : 0;
		return bits > 0 && rest.length === 0 && (prefix === undefined || (/^\d{1,3}$/.test(prefix) && Number(prefix) <= bits));
	};
	const bad = entries.find(entry => !isRange(entry));
	if (bad !== undefined) throw new ConfigError(`${key} must be true, false or the proxies' addresses or CIDR ranges, comma-separated; "${bad}" is none`);
	return entries;
}

const LOG_LEVELS = ["fatal", "error", "warn", "info", "debug", "trace"] as const;

function oneOf<T extends string>(env: Env, key: string, values: readonly T[], fallback: T): T {
	const raw = text(env, key);
	if (raw == null) return fallback;
	if (!(values as readonly string[]).includes(raw)) throw new ConfigError(`${key} must be one of ${values.join(", ")}, got "${raw}"`);
	return raw as T;
}

function baseUrl(env: Env, key: string): string | null {
	const raw = text(env, key);
	if (raw == null) return null;
	// Never echoed: a value refused for its credentials or query may carry a secret.
	let url: URL;
	try {
		url = new URL(raw);
	} catch {
		throw new ConfigError(`${key} must be an absolute http(s) URL`);
	}
	if (!["http:", "https:"].includes(url.protocol) || url.search || url.hash || url.username || url.password) throw new ConfigError(`${key} must be an http(s) URL without query, fragment or credentials`);
	return raw.replace(/\/+$/, "");
}

function base58Address(env: Env, key: string, fallback: string): string {
	const raw = text(env, key);
	if (raw == null) return fallback;
	if (!isBase58OfLength(raw, 32)) throw new ConfigError(`${key} must be a base58 address (32 bytes), got "${raw}"`);
	return raw;
}

/**
 * With a transporter, the process signs its announcements with its group's key, and checks the
 * others' against theirs (lib/bus-signatures.ts). The keys never go into a message.
 */
function busKeys(env: Env, group: BusGroup | null): Config["busKeys"] {
	if (group === null) return null;
	const signingText = text(env, "BUS_SIGNING_KEY");
	const publicText = text(env, "BUS_PUBLIC_KEYS");
	if (signingText === null || publicText === null)
		throw new ConfigError('BUS_SIGNING_KEY (this group\'s ed25519 private key) and BUS_PUBLIC_KEYS (every group\'s public key) are required with TRANSPORTER (k8s/README.md, "The Secret")');
	if (isPlaceholder(signingText)) throw placeholderError("BUS_SIGNING_KEY");
	if (isPlaceholder(publicText)) throw placeholderError("BUS_PUBLIC_KEYS");
	const signing = busSigningKey(signingText);
	if (!signing) throw new ConfigError("BUS_SIGNING_KEY must be an ed25519 private key, base64 of its PKCS#8 DER (openssl genpkey -algorithm ed25519 -outform DER | openssl base64 -A)");
	const groups = busPublicKeys(publicText);
	if (typeof groups === "string") throw new ConfigError(`BUS_PUBLIC_KEYS: ${groups}`);
	if (!isKeyPairOf(signing, groups[group])) throw new ConfigError(`BUS_SIGNING_KEY is not the private key of a public key of the ${group} group in BUS_PUBLIC_KEYS`);
	return { signing, groups };
}

/** A 256-bit key, base64 (or base64url): `openssl rand -base64 32`. */
/** Keys of 32 bytes in base64, comma-separated under rotation: the first is current, the others still accepted. */
function keyRing256(env: Env, key: string): Buffer[] | null {
	const raw = list(env, key);
	if (!raw.length) return null;
	if (raw.some(isPlaceholder)) throw placeholderError(key);
	const keys = raw.map(value => (/^[A-Za-z0-9+/_-]{43}=?$/.test(value) ? Buffer.from(value, "base64") : null));
	// The values themselves never go into the messages.
	if (keys.some(bytes => bytes?.length !== 32)) throw new ConfigError(`${key} must be 32 random bytes in base64 (openssl rand -base64 32), or under rotation a comma-separated list of such keys, the current one first`);
	const valid = keys as Buffer[];
	if (new Set(valid.map(bytes => bytes.toString("hex"))).size !== valid.length) throw new ConfigError(`${key} lists a key twice`);
	return valid;
}

/** WEBHOOK_SECRETS_KEY_NEXT: none of `current`, WEBHOOK_SECRETS_KEY's keys. */
function nextKeys(env: Env, current: readonly Buffer[] | null): Buffer[] {
	const next = keyRing256(env, "WEBHOOK_SECRETS_KEY_NEXT") ?? [];
	const listed = new Set((current ?? []).map(key => key.toString("hex")));
	if (next.some(key => listed.has(key.toString("hex")))) throw new ConfigError("WEBHOOK_SECRETS_KEY_NEXT lists a key WEBHOOK_SECRETS_KEY lists too");
	return next;
}

/** A secret sent in an HTTP header: visible ASCII without spaces, long enough not to be guessed. */
const HEADER_SECRET = /^[\x21-\x7e]{16,}$/;

function headerSecret(env: Env, key: string): string | null {
	const raw = text(env, key);
	// The value itself never goes into the message.
	if (raw !== null && !HEADER_SECRET.test(raw)) throw new ConfigError(`${key} must be at least 16 visible ASCII characters without spaces`);
	if (raw !== null && isPlaceholder(raw)) throw placeholderError(key);
	return raw;
}

/**
 * WORKER_API_KEYS: every process that reads them refuses the example Secret's placeholder, and
 * none may be short: on the bus each is also the key of the gateway's proofs (services/bus-guard.ts).
 */
function workerApiKeys(env: Env): string[] {
	const keys = list(env, "WORKER_API_KEYS");
	if (keys.some(isPlaceholder)) throw placeholderError("WORKER_API_KEYS");
	// No key goes into the message.
	if (keys.some(key => !HEADER_SECRET.test(key))) throw new ConfigError("WORKER_API_KEYS must each be at least 16 visible ASCII characters without spaces (openssl rand -hex 32)");
	return keys;
}

/** The example Secret's values (k8s/secret/settlement-secrets.example.yaml) all start so: one applied as-is is not a secret. */
export function isPlaceholder(value: string): boolean {
	return /^placeholder/i.test(value);
}

/** The refusal of a placeholder; like every secret's, it never repeats the value. */
export function placeholderError(key: string): ConfigError {
	return new ConfigError(`${key} holds a placeholder of the example Secret: set a real value (k8s/README.md, "The Secret")`);
}

/** MONGO_URL, refused when it weakens durability (see mongoUrlWeakenings) unless the operator says so. */
function durableMongoUrl(env: Env): string | null {
	const url = text(env, "MONGO_URL");
	// Blank (a Secret filled from an unset shell variable, say), it would have meant SQLite: each
	// owner replica on a store of its own, which a start-up check of peers can miss (a review).
	if (url === null && env.MONGO_URL !== undefined)
		throw new ConfigError("MONGO_URL is set but blank: unset it for the embedded SQLite store, or give the MongoDB URL");
	if (url !== null && /[/:]placeholder/i.test(url)) throw placeholderError("MONGO_URL");
	if (url === null || flag(env, "MONGO_ALLOW_WEAK_DURABILITY")) return url;
	const problems = mongoUrlWeakenings(url);
	if (problems.length)
		throw new ConfigError(`MONGO_URL weakens durability: ${problems.join("; ")}. Remove those options, or set MONGO_ALLOW_WEAK_DURABILITY=true to accept the risk`);
	return url;
}

/** NATS server URLs (comma-separated), checked here so that a bad one is reported without the credentials added later. */
function natsUrls(env: Env, key: string): string | null {
	const raw = text(env, key);
	if (raw === null) return null;
	for (const part of raw.split(",")) {
		let url: URL | null = null;
		try {
			url = new URL(part.trim());
		} catch {
			// reported below
		}
		if (!url || !["nats:", "tls:"].includes(url.protocol) || !url.hostname) throw new ConfigError(`${key} must be nats://host:port URLs, comma-separated`);
		if (url.username || url.password) throw new ConfigError(`${key} must not hold credentials: set NATS_USER and NATS_PASSWORD`);
	}
	return raw;
}

/** Origins, comma-separated, each exactly scheme://host[:port] as a browser sends it in `origin`. */
function origins(env: Env, key: string): string[] {
	return list(env, key).map(raw => {
		let url: URL | null = null;
		try {
			url = new URL(raw);
		} catch {
			// reported below
		}
		if (!url || !["http:", "https:"].includes(url.protocol) || url.origin !== raw) throw new ConfigError(`${key} takes origins such as https://app.example.com (no path, no trailing slash), got "${raw}"`);
		return raw;
	});
}

/** At most this many RPC endpoints: each one is read on every exit from SUBMITTED. */
const MAX_RPC_URLS = 5;

/**
 * http(s) URLs, comma-separated, none twice. An RPC URL often carries its provider's API key, so
 * an error names the entry by its place in the list, never by its text; and one with a user or
 * password is refused, as fetch would refuse it with the URL in its error.
 */
function rpcUrls(env: Env, key: string): string[] {
	const urls = list(env, key);
	if (urls.length > MAX_RPC_URLS) throw new ConfigError(`${key} lists ${urls.length} URLs; at most ${MAX_RPC_URLS}`);
	const seen = new Set<string>();
	urls.forEach((raw, i) => {
		const url = URL.canParse(raw) ? new URL(raw) : null;
		if (!url || !["http:", "https:"].includes(url.protocol)) throw new ConfigError(`${key}: entry ${i + 1} is not an http(s) URL`);
		if (url.username || url.password) throw new ConfigError(`${key}: entry ${i + 1} holds a user or password (put a provider's key in its path or query)`);
		if (seen.has(url.href)) throw new ConfigError(`${key}: entry ${i + 1} repeats an earlier one`);
		seen.add(url.href);
	});
	return urls;
}

/** A credential that goes into a URL as it is (letters, digits, "-", ".", "_", "~"). */
function urlSafe(env: Env, key: string): string | null {
	const raw = text(env, key);
	if (raw !== null && !/^[A-Za-z0-9._~-]+$/.test(raw)) throw new ConfigError(`${key} may hold only letters, digits and - . _ ~`);
	return raw;
}

/** A password of the same alphabet, refused when it is the example Secret's placeholder. */
function secretUrlSafe(env: Env, key: string): string | null {
	const raw = urlSafe(env, key);
	if (raw !== null && isPlaceholder(raw)) throw placeholderError(key);
	return raw;
}

/**
 * With a transporter, each replica would generate a secret of its own into its DATA_DIR: the
 * gateways would each take other worker keys, and the payouts replicas would sign with keys the
 * Crankers do not know. So a process that runs those services must be given them.
 */
function withSharedSecrets(config: Config): Config {
	if (!config.transporter) return config;
	const runs = (name: string) => !config.services || config.services.includes(name);
	const workerKeysHeld = config.busGroup !== null && holdsWorkerKeys(config.busGroup);
	if (workerKeysHeld && !config.workerApiKeys.length)
		throw new ConfigError(
			"WORKER_API_KEYS is required with TRANSPORTER for the gateway, intake and owners groups: the gateway admits workers with them and proves its calls for a worker with the worker's key, which the intake and the owners check (replicas would each generate other keys)"
		);
	if (!workerKeysHeld && config.busGroup && config.workerApiKeys.length)
		throw new ConfigError(`WORKER_API_KEYS must not be given to the bus group ${config.busGroup}: with them its bus credentials could act for a worker`);
	if (runs("payouts") && !config.nodeAuthorityKeypairPath)
		throw new ConfigError("NODE_AUTHORITY_KEYPAIR_PATH is required with TRANSPORTER for a process that runs payouts: replicas would each generate another authority key");
	const holdsKey = config.busGroup !== null && holdsCallKey(config.busGroup);
	if (!holdsKey && config.busGroup && (config.webhookSecretsKeys || config.webhookSecretsNextKeys.length))
		throw new ConfigError(`WEBHOOK_SECRETS_KEY${config.webhookSecretsKeys ? "" : "_NEXT"} must not be given to the bus group ${config.busGroup}: it proves the calls only the intake and the owners may make`);
	if (holdsKey && !config.webhookSecretsKeys)
		throw new ConfigError(
			"WEBHOOK_SECRETS_KEY is required with TRANSPORTER for the intake and owners groups: the owners seal the webhooks' signing secrets and tag their events with it, the delivery workers check and open them, and both prove with it their calls to the actions that change state"
		);
	return config;
}

/**
 * On the bus a process signs in as its group's user, and may run only that group's services: NATS
 * lets it read only its own group's subjects, and the other nodes believe only those services of it.
 */
function busGroup(env: Env, transporter: string | null, services: string[]): BusGroup | null {
	if (!transporter) return null;
	const user = urlSafe(env, "NATS_USER");
	const groups = Object.keys(BUS_GROUPS).join(", ");
	if (user === null || !isBusGroup(user)) throw new ConfigError(`NATS_USER must name this process's bus group with TRANSPORTER: one of ${groups} (docs/security.md, "The bus")`);
	const foreign = services.filter(name => !mayServe(user, name));
	if (!services.length || foreign.length)
		throw new ConfigError(`SERVICES must list services of the bus group ${user} (${BUS_GROUPS[user].join(", ")}) with TRANSPORTER${foreign.length ? `; not ${foreign.join(", ")}` : ""}`);
	// Moleculer's subjects start with `MOL-<namespace>`, one token of NATS's permissions.
	if (/[.*>\s]/.test(text(env, "NAMESPACE") ?? "")) throw new ConfigError("NAMESPACE may not hold dots, spaces, * or > with TRANSPORTER: it is a token of the bus's subjects");
	return user;
}

export function loadConfig(env: Env = process.env): Config {
	const mongoUrl = durableMongoUrl(env);
	const services = list(env, "SERVICES");
	const verifyTimeoutMs = integer(env, "VERIFY_TIMEOUT_MS", 5000, 1);
	const transporter = natsUrls(env, "TRANSPORTER");
	const group = busGroup(env, transporter, services);
	const webhookSecretsKeys = keyRing256(env, "WEBHOOK_SECRETS_KEY");
	const solanaRpcUrls = rpcUrls(env, "SOLANA_RPC_URL");
	const solanaCluster = clusterName(env, "SOLANA_CLUSTER", solanaRpcUrls);
	const trustProxy = trustedProxies(env, "TRUST_PROXY");
	const port = integer(env, "PORT", 3000, 0, 65_535);
	const eventRetentionMs = integer(env, "EVENT_RETENTION_MS", 7 * 24 * 60 * 60 * 1000, 1);
	const webhookRetryForMs = integer(env, "WEBHOOK_RETRY_FOR_MS", 24 * 60 * 60 * 1000, 1);
	// A webhook retries an event for WEBHOOK_RETRY_FOR_MS from its first failure: pruned sooner, it would be skipped.
	if (eventRetentionMs <= webhookRetryForMs) throw new ConfigError("EVENT_RETENTION_MS must be longer than WEBHOOK_RETRY_FOR_MS: a webhook still retrying an event would find it pruned");
	return withSharedSecrets({
		port,
		healthPort: healthPort(env, port),
		namespace: text(env, "NAMESPACE") ?? "",
		transporter,
		natsUser: urlSafe(env, "NATS_USER"),
		natsPassword: secretUrlSafe(env, "NATS_PASSWORD"),
		busGroup: group,
		busKeys: busKeys(env, group),
		busAdmitUngrouped: flag(env, "BUS_ADMIT_UNGROUPED"),
		busAdmitUnsigned: flag(env, "BUS_ADMIT_UNSIGNED"),
		services: services.length ? services : null,
		dataDir: path.resolve(text(env, "DATA_DIR") ?? "./data"),
		mongoUrl,
		mongoAllowWeakDurability: flag(env, "MONGO_ALLOW_WEAK_DURABILITY"),
		epochCloseSettleMs: integer(env, "EPOCH_CLOSE_SETTLE_MS", mongoUrl ? 10_000 : 0, 0),
		store: mongoUrl ? "mongodb" : "sqlite",
		workerApiKeys: workerApiKeys(env),
		registrySeedFile: text(env, "REGISTRY_SEED_FILE"),
		leaseTtlMs: integer(env, "LEASE_TTL_MS", 60_000, 1),
		crankerTtlMs: integer(env, "CRANKER_TTL_MS", 30_000, 1),
		liquidityReadsPerSecond: integer(env, "LIQUIDITY_READS_PER_SECOND", 50, 1),
		crankerOperators: crankerOperators(env),
		nodeAuthorityKeypairPath: text(env, "NODE_AUTHORITY_KEYPAIR_PATH"),
		webhookSecretsKeys,
		webhookSecretsNextKeys: nextKeys(env, webhookSecretsKeys),
		verifyTimeoutMs,
		// One core for the event loop, the others for verification; at least one thread.
		verifyThreads: integer(env, "VERIFY_THREADS", Math.max(1, os.availableParallelism() - 1), 0),
		storeCommitWindowMs: integer(env, "STORE_COMMIT_WINDOW_MS", 2, 0),
		intakeWindowMs: integer(env, "INTAKE_WINDOW_MS", 2, 0),
		rateLimitPerMin: integer(env, "RATE_LIMIT_PER_MIN", 600, 0),
		trustProxy,
		logLevel: oneOf(env, "LOG_LEVEL", LOG_LEVELS, "info"),
		logFormat: oneOf(env, "LOG_FORMAT", ["short", "json"] as const, "short"),
		corsOrigins: origins(env, "CORS_ORIGINS"),
		solanaRpcUrls,
		solanaCluster,
		sweepIntervalMs: integer(env, "SWEEP_INTERVAL_MS", 1000, 10),
		slotPollIntervalMs: integer(env, "SLOT_POLL_INTERVAL_MS", 2000, 10),
		epochDurationMs: integer(env, "EPOCH_DURATION_MS", 7 * 60 * 60 * 1000, 1),
		allowSingleCrankerTins: flag(env, "ALLOW_SINGLE_CRANKER_TINS"),
		tinCreateFee: String(integer(env, "TIN_CREATE_FEE", 50_000, 0)),
		tinUpdateFee: String(integer(env, "TIN_UPDATE_FEE", 10_000, 0)),
		crankerRetentionMs: integer(env, "CRANKER_RETENTION_MS", 24 * 60 * 60 * 1000, 1),
		publicBaseUrl: baseUrl(env, "PUBLIC_BASE_URL"),
		settlementProgramId: address(base58Address(env, "SETTLEMENT_PROGRAM_ID", DEFAULT_SETTLEMENT_PROGRAM_ID)),
		// Below Solana's 150 blocks (and the few a Cranker's blockhash may be ahead of the Node's confirmed
		// height), a Cranker's low lastValidBlockHeight would decide alone when a live transaction is dead.
		blockhashLifetimeBlocks: integer(env, "BLOCKHASH_LIFETIME_BLOCKS", 300, PUBLIC_CLUSTERS.has(solanaCluster) ? PUBLIC_CLUSTER_MIN_LIFETIME_BLOCKS : 1),
		headersTimeoutMs: integer(env, "HEADERS_TIMEOUT_MS", 10_000, 1),
		requestTimeoutMs: integer(env, "REQUEST_TIMEOUT_MS", 30_000, 1),
		// At most an hour: no pool keeps connections longer, and an idle one holds a socket for nothing.
		keepAliveTimeoutMs: integer(env, "KEEP_ALIVE_TIMEOUT_MS", 65_000, 1000, 3_600_000),
		authFailuresPerMin: integer(env, "AUTH_FAILURES_PER_MIN", 20, 1),
		metricsApiKey: headerSecret(env, "METRICS_API_KEY"),
		eventRetentionMs,
		...connectionLimits(env, trustProxy),
		webhookAllowPrivate: flag(env, "WEBHOOK_ALLOW_PRIVATE"),
		webhookRetryForMs,
		webhookRetryBaseMs: integer(env, "WEBHOOK_RETRY_BASE_MS", 5000, 1),
		webhookTimeoutMs: integer(env, "WEBHOOK_TIMEOUT_MS", 10_000, 100),
		webhooksMax: integer(env, "WEBHOOKS_MAX", 100, 1)
	});
}
