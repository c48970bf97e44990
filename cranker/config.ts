/** The Cranker's configuration: environment variables and `--roles`, read once at start. */
import fs from "node:fs";
import { parseArgs } from "node:util";
import { address, type Address } from "@solana/kit";
import { keypairFromSecretKey, type Keypair } from "../lib/ed25519";
import { MAX_LIQUIDITY_ENTRIES } from "../lib/schemas";
import { DEFAULT_SETTLEMENT_PROGRAM_ID } from "../lib/settlement";

/** Solana's blockhashes live 150 blocks; a shorter setting could declare a live transaction dropped. */
const MIN_BLOCKHASH_LIFETIME_SLOTS = 151;

export const CRANKER_ROLES = ["settlement", "verifier", "submitter"] as const;
export type CrankerRole = (typeof CRANKER_ROLES)[number];

export interface CrankerConfig {
	keypair: Keypair;
	nodeUrl: string;
	workerApiKey: string;
	solanaRpcUrl: string;
	roles: CrankerRole[];
	/**
	 * CRANKER_MINTS: the mints a settlement Cranker pays out in, from its associated token account
	 * of each. Only these are read and reported: anyone may open token accounts for any owner.
	 */
	mints: Address[];
	settlementProgramId: Address;
	/** The Node's authority key: a payout authorization signed by any other is refused. */
	nodeAuthorityPubkey: string;
	pollIntervalMs: number;
	rpcTimeoutMs: number;
	/** Must stay well under the Node's CRANKER_TTL_MS (30 s by default). */
	heartbeatIntervalMs: number;
	/**
	 * How many slots after its submission slot a transaction's blockhash has certainly expired
	 * (Solana's is 150 blocks; twice that leaves room for slot/height drift). Another Cranker's
	 * SUBMITTED intent whose lease lapsed is reported dropped only after this.
	 */
	blockhashLifetimeSlots: number;
	tinCreateFee: string;
	tinUpdateFee: string;
	/** Where the Cranker keeps its settlement journal (journal.ts): a disk that outlives the process. */
	stateDir: string;
	/** GET /metrics and GET /health on this port (0: a free one); null: not served. */
	metricsPort: number | null;
	/** The address the metrics server binds: this machine only by default (it has no auth); 0.0.0.0 in a pod, for Prometheus. */
	metricsHost: string;
}

/** A configuration the Cranker cannot start with: printed as a message, exit code 2. */
export class CrankerConfigError extends Error {
	override name = "CrankerConfigError";
}

type Env = Record<string, string | undefined>;

function required(env: Env, key: string): string {
	const value = env[key]?.trim();
	if (!value) throw new CrankerConfigError(`${key} is not set`);
	return value;
}

function integer(env: Env, key: string, fallback: number, min: number): number {
	const raw = env[key]?.trim();
	if (!raw) return fallback;
	const value = Number(raw);
	if (!Number.isSafeInteger(value) || value < min) throw new CrankerConfigError(`${key} must be an integer ≥ ${min}, got "${raw}"`);
	return value;
}

/** A TCP port (0: any free one); null when unset. */
function optionalPort(env: Env, key: string): number | null {
	if (!env[key]?.trim()) return null;
	const port = integer(env, key, 0, 0);
	if (port > 65_535) throw new CrankerConfigError(`${key} must be a port 0–65535, got "${port}"`);
	return port;
}

/** A URL without a user or password: fetch would put them in its errors, which the Cranker logs. */
function url(env: Env, key: string, credentialsHint = ""): string {
	const value = required(env, key);
	let parsed: URL;
	try {
		parsed = new URL(value);
	} catch {
		throw new CrankerConfigError(`${key} is not a URL`);
	}
	if (parsed.username || parsed.password) throw new CrankerConfigError(`${key} holds a user or password${credentialsHint}`);
	return value.replace(/\/+$/, "");
}

/** SOLANA_RPC_URL: of the Node's comma-separated list, the first endpoint, so that one .env serves both. */
function rpcUrl(env: Env): string {
	return url({ SOLANA_RPC_URL: env.SOLANA_RPC_URL?.split(",").map(entry => entry.trim()).find(Boolean) }, "SOLANA_RPC_URL", " (put a provider's key in its path or query)");
}

function checkedAddress(key: string, value: string): Address {
	try {
		return address(value);
	} catch {
		throw new CrankerConfigError(`${key} is not a base58 address: "${value}"`);
	}
}

/**
 * CRANKER_MINTS, required for the settlement role: a comma-separated list of distinct mint
 * addresses, at most 64. Reading every token account the Cranker owns instead let anyone who opened
 * 65 of them for it have its heartbeats refused.
 */
function settlementMints(env: Env, roles: readonly CrankerRole[]): Address[] {
	const listed = (env.CRANKER_MINTS ?? "").split(",").map(entry => entry.trim()).filter(Boolean);
	if (!roles.includes("settlement")) return [];
	if (!listed.length) throw new CrankerConfigError("CRANKER_MINTS is not set: the settlement role needs the mints it pays out in (comma-separated addresses)");
	if (listed.length > MAX_LIQUIDITY_ENTRIES) throw new CrankerConfigError(`CRANKER_MINTS lists ${listed.length} mints; at most ${MAX_LIQUIDITY_ENTRIES}`);
	if (new Set(listed).size !== listed.length) throw new CrankerConfigError("CRANKER_MINTS names a mint twice");
	return listed.map(mint => checkedAddress("CRANKER_MINTS", mint));
}

/** A Solana CLI keypair file: a JSON array of 64 bytes (seed, then public key). */
export function loadKeypairFile(file: string): Keypair {
	let raw: string;
	try {
		raw = fs.readFileSync(file, "utf8");
	} catch (err) {
		throw new CrankerConfigError(`KEYPAIR_PATH ${file} cannot be read (${(err as NodeJS.ErrnoException).code ?? "error"})`);
	}
	let bytes: unknown;
	try {
		bytes = JSON.parse(raw);
	} catch {
		throw new CrankerConfigError(`KEYPAIR_PATH ${file} is not JSON (expected the Solana CLI format: an array of 64 numbers)`);
	}
	if (!Array.isArray(bytes) || bytes.length !== 64 || !bytes.every(b => Number.isInteger(b) && b >= 0 && b <= 255))
		throw new CrankerConfigError(`KEYPAIR_PATH ${file} is not a Solana CLI keypair (an array of 64 numbers 0–255)`);
	try {
		return keypairFromSecretKey(Uint8Array.from(bytes));
	} catch {
		throw new CrankerConfigError(`KEYPAIR_PATH ${file}: its public key does not match its secret key`);
	}
}

/** `--roles a,b`: the Cranker's roles (settlement when not given). */
function parseRoles(value: string | undefined): CrankerRole[] {
	if (value === undefined) return ["settlement"];
	const roles = value.split(",").map(role => role.trim()).filter(Boolean);
	const unknown = roles.filter(role => !(CRANKER_ROLES as readonly string[]).includes(role));
	if (!roles.length || unknown.length) throw new CrankerConfigError(`--roles takes a comma-separated list of ${CRANKER_ROLES.join(", ")}; got "${value}"`);
	return [...new Set(roles)] as CrankerRole[];
}

export interface CrankerCli {
	help: boolean;
	version: boolean;
	roles: CrankerRole[];
}

/** The command line, with node:util's parser: an unknown option or a stray argument is a configuration error. */
export function parseCli(argv: readonly string[]): CrankerCli {
	let values: { roles?: string; help?: boolean; version?: boolean };
	try {
		({ values } = parseArgs({ args: [...argv], options: { roles: { type: "string" }, help: { type: "boolean", short: "h" }, version: { type: "boolean" } }, strict: true, allowPositionals: false }));
	} catch (err) {
		throw new CrankerConfigError(`${(err as Error).message} (npm run cranker -- --help)`);
	}
	// --help and --version answer whatever else the line holds.
	if (values.help || values.version) return { help: values.help ?? false, version: values.version ?? false, roles: [] };
	return { help: false, version: false, roles: parseRoles(values.roles) };
}

/**
 * The worker API key: WORKER_API_KEY, or the server's own variable name WORKER_API_KEYS (its first
 * key), so that one .env serves both.
 */
function workerKey(env: Env): string {
	const single = env.WORKER_API_KEY?.trim();
	if (single) return single;
	const first = env.WORKER_API_KEYS?.split(",").map(key => key.trim()).find(Boolean);
	if (first) return first;
	throw new CrankerConfigError("WORKER_API_KEY (or WORKER_API_KEYS) is not set");
}

/** `--help`: what the Cranker reads, answered before anything is loaded. */
export const USAGE = `Usage: npm run cranker -- [--roles settlement,verifier,submitter] [--help] [--version]

The Cranker leases work from a Settlement Coordination Service and settles it on Solana.
Environment (defaults in brackets; the full list with comments is .env.example):
  KEYPAIR_PATH              the Cranker's Solana keypair file (required)
  NODE_URL                  the Node's gateway, e.g. http://localhost:3000 (required)
  WORKER_API_KEY            a worker API key; WORKER_API_KEYS (the server's name) is read too (required)
  SOLANA_RPC_URL            the chain's JSON-RPC; of the Node's comma-separated list, the first (required)
  NODE_AUTHORITY_PUBKEY     the Node's authority public key, from its start-up log (required)
  CRANKER_MINTS             the mints it pays out in, comma-separated, at most 64 (required for role settlement)
  SETTLEMENT_PROGRAM_ID     the settlement program [the service's default]
  POLL_INTERVAL_MS          work polling [1000]; at least 5 s apart while the Node's event stream is up
  HEARTBEAT_INTERVAL_MS     heartbeats [10000]
  RPC_TIMEOUT_MS            each RPC call [10000]
  BLOCKHASH_LIFETIME_SLOTS  how long a submission may still land [300]
  TIN_CREATE_FEE / TIN_UPDATE_FEE  the fees a submitter commits [50000 / 10000]
  CRANKER_STATE_DIR         its settlement journal (role settlement); keep it across restarts [./data/cranker]
  CRANKER_METRICS_PORT      serve GET /metrics (Prometheus) and GET /health on this port; 0 = a free one [off]
  CRANKER_METRICS_HOST      the address that server binds; 0.0.0.0 in a pod, for Prometheus [127.0.0.1]
Exit codes: 0 after a clean stop (SIGTERM/SIGINT), 2 for a configuration it cannot start with, 1 when its
settlement journal is unreadable, or held or taken by another process.
`;

export function loadCrankerConfig(env: Env = process.env, argv: readonly string[] = process.argv.slice(2)): CrankerConfig {
	const keypair = loadKeypairFile(required(env, "KEYPAIR_PATH"));
	const programId = env.SETTLEMENT_PROGRAM_ID?.trim();
	const { roles } = parseCli(argv);
	return {
		keypair,
		nodeUrl: url(env, "NODE_URL"),
		workerApiKey: workerKey(env),
		solanaRpcUrl: rpcUrl(env),
		roles,
		mints: settlementMints(env, roles),
		settlementProgramId: programId ? checkedAddress("SETTLEMENT_PROGRAM_ID", programId) : DEFAULT_SETTLEMENT_PROGRAM_ID,
		nodeAuthorityPubkey: checkedAddress("NODE_AUTHORITY_PUBKEY", required(env, "NODE_AUTHORITY_PUBKEY")),
		pollIntervalMs: integer(env, "POLL_INTERVAL_MS", 1000, 10),
		rpcTimeoutMs: integer(env, "RPC_TIMEOUT_MS", 10_000, 10),
		heartbeatIntervalMs: integer(env, "HEARTBEAT_INTERVAL_MS", 10_000, 100),
		blockhashLifetimeSlots: integer(env, "BLOCKHASH_LIFETIME_SLOTS", 300, MIN_BLOCKHASH_LIFETIME_SLOTS),
		tinCreateFee: String(integer(env, "TIN_CREATE_FEE", 50_000, 0)),
		tinUpdateFee: String(integer(env, "TIN_UPDATE_FEE", 10_000, 0)),
		stateDir: env.CRANKER_STATE_DIR?.trim() || "./data/cranker",
		metricsPort: optionalPort(env, "CRANKER_METRICS_PORT"),
		// Unauthenticated: reachable from other machines only when the operator says so.
		metricsHost: env.CRANKER_METRICS_HOST?.trim() || "127.0.0.1"
	};
}
