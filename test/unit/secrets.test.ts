/** Secrets of the embedded mode: generated once into DATA_DIR (mode 0600), then reused. */
import { ed25519 } from "@noble/curves/ed25519.js";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { generateKeypair } from "../../lib/ed25519";
import { encodeBase58 } from "../../lib/encoding";
import {
	AUTHORITY_KEYPAIR_FILE,
	WORKER_KEYS_FILE,
	createKeyChecker,
	loadOrCreateAuthorityKeypair,
	loadOrCreateWorkerKeys,
	readKeypairFile
} from "../../lib/secrets";

let dir: string;
beforeEach(() => {
	dir = fs.mkdtempSync(path.join(os.tmpdir(), "scs-secrets-"));
});
afterEach(() => {
	fs.rmSync(dir, { recursive: true, force: true });
});

const mode = (file: string) => fs.statSync(file).mode & 0o777;

/** The error message `fn` throws (fails the test when it throws nothing). */
function thrown(fn: () => unknown): string {
	try {
		fn();
	} catch (err) {
		return (err as Error).message;
	}
	throw new Error("expected an error");
}

describe("loadOrCreateWorkerKeys", () => {
	it("generates one key into DATA_DIR (mode 0600) on the first call and reuses it afterwards", () => {
		const dataDir = path.join(dir, "nested", "data");
		const first = loadOrCreateWorkerKeys([], dataDir);
		const file = path.join(dataDir, WORKER_KEYS_FILE);
		expect(first).toEqual({ value: [expect.any(String)], source: file, generated: true });
		expect(first.value[0].length).toBeGreaterThanOrEqual(32);
		expect(mode(file)).toBe(0o600);

		const second = loadOrCreateWorkerKeys([], dataDir);
		expect(second).toEqual({ value: first.value, source: file, generated: false });
	});

	it("generates a different key in another DATA_DIR", () => {
		const a = loadOrCreateWorkerKeys([], path.join(dir, "a")).value[0];
		const b = loadOrCreateWorkerKeys([], path.join(dir, "b")).value[0];
		expect(a).not.toBe(b);
	});

	it("reads several whitespace-separated keys from an existing file", () => {
		fs.writeFileSync(path.join(dir, WORKER_KEYS_FILE), "key-one\nkey-two  key-three\n");
		expect(loadOrCreateWorkerKeys([], dir)).toEqual({ value: ["key-one", "key-two", "key-three"], source: path.join(dir, WORKER_KEYS_FILE), generated: false });
	});

	it("refuses an existing empty key file", () => {
		fs.writeFileSync(path.join(dir, WORKER_KEYS_FILE), "\n \n");
		expect(() => loadOrCreateWorkerKeys([], dir)).toThrow(/holds no worker API key/);
	});

	it("honors explicit keys and writes nothing", () => {
		expect(loadOrCreateWorkerKeys(["k1", "k2"], dir)).toEqual({ value: ["k1", "k2"], source: "environment", generated: false });
		expect(fs.existsSync(path.join(dir, WORKER_KEYS_FILE))).toBe(false);
	});
});

describe("loadOrCreateAuthorityKeypair", () => {
	it("generates a keypair file (mode 0600) once and reuses it", () => {
		const first = loadOrCreateAuthorityKeypair(null, dir);
		const file = path.join(dir, AUTHORITY_KEYPAIR_FILE);
		expect(first.source).toBe(file);
		expect(first.generated).toBe(true);
		expect(mode(file)).toBe(0o600);
		const bytes = JSON.parse(fs.readFileSync(file, "utf8")) as number[];
		expect(bytes).toHaveLength(64);
		expect(encodeBase58(ed25519.getPublicKey(Uint8Array.from(bytes.slice(0, 32))))).toBe(first.value.publicKey);

		const second = loadOrCreateAuthorityKeypair(null, dir);
		expect(second.generated).toBe(false);
		expect(second.value.publicKey).toBe(first.value.publicKey);
		expect(Buffer.from(second.value.secretKey).equals(Buffer.from(first.value.secretKey))).toBe(true);
	});

	it("honors an explicit keypair path and writes nothing into DATA_DIR", () => {
		const keypair = generateKeypair();
		const file = path.join(dir, "explicit.json");
		fs.writeFileSync(file, JSON.stringify(Array.from(keypair.secretKey)));
		const loaded = loadOrCreateAuthorityKeypair(file, path.join(dir, "data"));
		expect(loaded).toEqual({ value: { publicKey: keypair.publicKey, secretKey: keypair.secretKey }, source: file, generated: false });
		expect(fs.existsSync(path.join(dir, "data", AUTHORITY_KEYPAIR_FILE))).toBe(false);
	});

	it("refuses an explicit path that does not exist", () => {
		expect(() => loadOrCreateAuthorityKeypair(path.join(dir, "missing.json"), dir)).toThrow(/cannot read keypair file/);
	});
});

describe("readKeypairFile", () => {
	function write(content: string): string {
		const file = path.join(dir, "keypair.json");
		fs.writeFileSync(file, content);
		return file;
	}

	it("reads a Solana CLI keypair file", () => {
		const keypair = generateKeypair();
		expect(readKeypairFile(write(JSON.stringify(Array.from(keypair.secretKey)))).publicKey).toBe(keypair.publicKey);
	});

	const secretish = Array.from({ length: 64 }, (_v, i) => (i * 37 + 11) % 256);
	const malformed: [string, string, RegExp][] = [
		["63 bytes", JSON.stringify(secretish.slice(0, 63)), /not a Solana CLI keypair/],
		["65 bytes", JSON.stringify([...secretish, 1]), /not a Solana CLI keypair/],
		["a byte above 255", JSON.stringify([...secretish.slice(0, 63), 256]), /not a Solana CLI keypair/],
		["a negative byte", JSON.stringify([-1, ...secretish.slice(1)]), /not a Solana CLI keypair/],
		["a fractional byte", JSON.stringify([1.5, ...secretish.slice(1)]), /not a Solana CLI keypair/],
		["an object", JSON.stringify({ secretKey: secretish }), /not a Solana CLI keypair/],
		["a JSON string", JSON.stringify("4wBqpZM9xaSheZzJSMawUKKwhdpChKbZ5eu5ky4Vigw"), /not a Solana CLI keypair/],
		["mismatched halves", JSON.stringify([...generateKeypair().secretKey.subarray(0, 32), ...generateKeypair().secretKey.subarray(32)]), /does not match/]
	];
	it.each(malformed)("refuses %s with a message that does not contain the file content", (_label, content, pattern) => {
		const file = write(content);
		const message = thrown(() => readKeypairFile(file));
		expect(message).toMatch(pattern);
		expect(message).not.toContain(content);
		expect(message).not.toContain(content.slice(1, 20));
	});

	it("a file that is not JSON is refused without quoting its content", () => {
		const secret = "s3cr3tBase58SecretKeyMaterial";
		const message = thrown(() => readKeypairFile(write(secret)));
		expect(message).toMatch(/cannot read keypair file/);
		expect(message).not.toContain(secret.slice(0, 8));
	});

	it("refuses a file that is not JSON, naming the file", () => {
		const file = write("not json");
		expect(thrown(() => readKeypairFile(file))).toContain(`cannot read keypair file ${file}`);
	});
});

describe("createKeyChecker", () => {
	const check = createKeyChecker(["alpha-key-0123456789", "beta-key-9876543210"]);

	it("accepts each configured key", () => {
		expect(check("alpha-key-0123456789")).toBe(true);
		expect(check("beta-key-9876543210")).toBe(true);
	});

	it.each(["", "alpha-key-012345678", "alpha-key-01234567890", "ALPHA-KEY-0123456789", " alpha-key-0123456789", "gamma"])("refuses %p", candidate => {
		expect(check(candidate)).toBe(false);
	});

	it("with no keys, refuses everything", () => {
		expect(createKeyChecker([])("alpha-key-0123456789")).toBe(false);
		expect(createKeyChecker([])("")).toBe(false);
	});
});
