/**
 * Secrets of the embedded mode: when WORKER_API_KEYS, NODE_AUTHORITY_KEYPAIR_PATH or
 * WEBHOOK_SECRETS_KEY is not set, one is generated into DATA_DIR on first start (mode 0600) and
 * reused afterwards. Callers log the file's path, never its content.
 */
import { randomBytes, timingSafeEqual, createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { isPlaceholder, placeholderError } from "./config";
import { generateKeypair, keypairFromSecretKey, type Keypair } from "./ed25519";

export const WORKER_KEYS_FILE = "worker-api-keys";
export const AUTHORITY_KEYPAIR_FILE = "node-authority-keypair.json";
export const WEBHOOK_SECRETS_KEY_FILE = "webhook-secrets-key";

export interface Loaded<T> {
	value: T;
	/** Where it came from: "environment", or the file path. */
	source: string;
	generated: boolean;
}

function writeSecretFile(file: string, content: string): boolean {
	fs.mkdirSync(path.dirname(file), { recursive: true });
	try {
		// "wx": two processes starting on one DATA_DIR never overwrite each other's secret.
		fs.writeFileSync(file, content, { mode: 0o600, flag: "wx" });
		return true;
	} catch (err) {
		if ((err as NodeJS.ErrnoException).code === "EEXIST") return false;
		throw err;
	}
}

export function loadOrCreateWorkerKeys(configured: string[], dataDir: string): Loaded<string[]> {
	if (configured.length) {
		// The example Secret applied as-is: a key anyone reading the repository knows.
		if (configured.some(isPlaceholder)) throw placeholderError("WORKER_API_KEYS");
		return { value: configured, source: "environment", generated: false };
	}
	const file = path.join(dataDir, WORKER_KEYS_FILE);
	const generated = writeSecretFile(file, `${randomBytes(32).toString("base64url")}\n`);
	const keys = fs.readFileSync(file, "utf8").split(/\s+/).filter(Boolean);
	if (!keys.length) throw new Error(`${file} holds no worker API key`);
	if (keys.some(isPlaceholder)) throw placeholderError(file);
	return { value: keys, source: file, generated };
}

export function readKeypairFile(file: string): Keypair {
	let text: string;
	try {
		text = fs.readFileSync(file, "utf8");
	} catch (err) {
		throw new Error(`cannot read keypair file ${file}: ${(err as NodeJS.ErrnoException).code ?? "unreadable"}`);
	}
	let bytes: unknown;
	try {
		bytes = JSON.parse(text);
	} catch {
		// JSON.parse quotes the start of its input in its message: never echo a secret file.
		throw new Error(`cannot read keypair file ${file}: not valid JSON`);
	}
	if (!Array.isArray(bytes) || bytes.length !== 64 || !bytes.every(b => Number.isInteger(b) && b >= 0 && b <= 255))
		throw new Error(`keypair file ${file} is not a Solana CLI keypair (a JSON array of 64 bytes)`);
	return keypairFromSecretKey(Uint8Array.from(bytes as number[]));
}

export function loadOrCreateAuthorityKeypair(configuredPath: string | null, dataDir: string): Loaded<Keypair> {
	if (configuredPath) return { value: readKeypairFile(configuredPath), source: configuredPath, generated: false };
	const file = path.join(dataDir, AUTHORITY_KEYPAIR_FILE);
	const generated = writeSecretFile(file, JSON.stringify(Array.from(generateKeypair().secretKey)));
	return { value: readKeypairFile(file), source: file, generated };
}

/** WEBHOOK_SECRETS_KEY's keys (the current one first), or the key generated into DATA_DIR on first start (base64 of 32 bytes). */
export function loadOrCreateWebhookSecretsKey(configured: readonly Buffer[] | null, dataDir: string): Loaded<readonly Buffer[]> {
	if (configured) return { value: configured, source: "environment", generated: false };
	const file = path.join(dataDir, WEBHOOK_SECRETS_KEY_FILE);
	const generated = writeSecretFile(file, `${randomBytes(32).toString("base64")}\n`);
	const key = Buffer.from(fs.readFileSync(file, "utf8").trim(), "base64");
	if (key.length !== 32) throw new Error(`${file} does not hold 32 bytes in base64`);
	return { value: [key], source: file, generated };
}

/** Constant-time membership test: hashing first gives equal-length inputs to timingSafeEqual. */
export function createKeyChecker(keys: readonly string[]): (candidate: string) => boolean {
	const digests = keys.map(k => createHash("sha256").update(k).digest());
	return candidate => {
		const digest = createHash("sha256").update(candidate).digest();
		let match = false;
		for (const known of digests) match = timingSafeEqual(known, digest) || match;
		return match;
	};
}
