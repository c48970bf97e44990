/** The Cranker CLI: --help and --version answer at once, before any configuration is read; the server's key variable is read too. */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { generateKeypair } from "../../lib/ed25519";
import { loadCrankerConfig, parseCli } from "../../cranker/config";

const entry = path.resolve(__dirname, "../../dist/cranker/index.js");
const run = (...args: string[]) => spawnSync(process.execPath, [entry, ...args], { env: { PATH: process.env.PATH ?? "" }, encoding: "utf8", timeout: 10_000 });

test("--help prints the usage and every variable, with no configuration set, and exits 0", () => {
	const help = run("--help");
	expect(help.status).toBe(0);
	expect(help.stdout).toMatch(/^Usage: npm run cranker -- \[--roles/);
	for (const name of ["KEYPAIR_PATH", "NODE_URL", "WORKER_API_KEY", "WORKER_API_KEYS", "SOLANA_RPC_URL", "NODE_AUTHORITY_PUBKEY", "CRANKER_MINTS"]) expect(help.stdout).toContain(name);
	expect(run("-h").stdout).toBe(help.stdout);
});

test("--version prints the package's version", () => {
	const result = run("--version");
	expect(result.status).toBe(0);
	expect(result.stdout.trim()).toBe(require("../../package.json").version);
});

test("without configuration it says what is missing and exits 2", () => {
	const result = run();
	expect(result.status).toBe(2);
	expect(result.stderr).toMatch(/KEYPAIR_PATH is not set/);
});

test("the worker key is WORKER_API_KEY, or the first key of the server's WORKER_API_KEYS", () => {
	const keypairFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "cranker-cli-")), "keypair.json");
	fs.writeFileSync(keypairFile, JSON.stringify([...generateKeypair().secretKey]));
	const base = { KEYPAIR_PATH: keypairFile, CRANKER_MINTS: generateKeypair().publicKey, NODE_URL: "http://localhost:3000", SOLANA_RPC_URL: "http://localhost:8899", NODE_AUTHORITY_PUBKEY: generateKeypair().publicKey };
	const key = (env: Record<string, string>) => {
		try {
			return loadCrankerConfig({ ...base, ...env }, []).workerApiKey;
		} catch (err) {
			return (err as Error).message;
		}
	};
	expect(key({ WORKER_API_KEY: "single" })).toBe("single");
	expect(key({ WORKER_API_KEYS: " first , second" })).toBe("first");
	expect(key({ WORKER_API_KEY: "single", WORKER_API_KEYS: "first" })).toBe("single");
	expect(key({})).toMatch(/WORKER_API_KEY \(or WORKER_API_KEYS\) is not set/);
});

test("SOLANA_RPC_URL: of the Node's comma-separated list, the Cranker reads the first endpoint", () => {
	const keypairFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "cranker-cli-")), "keypair.json");
	fs.writeFileSync(keypairFile, JSON.stringify([...generateKeypair().secretKey]));
	const base = { KEYPAIR_PATH: keypairFile, CRANKER_MINTS: generateKeypair().publicKey, NODE_URL: "http://localhost:3000", WORKER_API_KEY: "single", NODE_AUTHORITY_PUBKEY: generateKeypair().publicKey };
	expect(loadCrankerConfig({ ...base, SOLANA_RPC_URL: " https://one.example/ , https://two.example" }, []).solanaRpcUrl).toBe("https://one.example");
	expect(loadCrankerConfig({ ...base, SOLANA_RPC_URL: "http://localhost:8899" }, []).solanaRpcUrl).toBe("http://localhost:8899");
	expect(() => loadCrankerConfig({ ...base, SOLANA_RPC_URL: " , " }, [])).toThrow(/SOLANA_RPC_URL is not set/);
	expect(() => loadCrankerConfig({ ...base, SOLANA_RPC_URL: "https://user:secret1@one.example" }, [])).toThrow(/^SOLANA_RPC_URL holds a user or password[^]*$/);
	expect(() => loadCrankerConfig({ ...base, SOLANA_RPC_URL: "https://user:secret1@one.example" }, [])).not.toThrow(/secret1/);
});

test("NODE_URL with a user or password is refused without echoing it: fetch refused each request with the URL in its error, which the Cranker logged (a review)", () => {
	const keypairFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "cranker-cli-")), "keypair.json");
	fs.writeFileSync(keypairFile, JSON.stringify([...generateKeypair().secretKey]));
	const base = { KEYPAIR_PATH: keypairFile, CRANKER_MINTS: generateKeypair().publicKey, WORKER_API_KEY: "single", NODE_AUTHORITY_PUBKEY: generateKeypair().publicKey, SOLANA_RPC_URL: "http://localhost:8899" };
	for (const nodeUrl of ["https://user:secret1@gateway.example", "https://:secret1@gateway.example"]) {
		expect(() => loadCrankerConfig({ ...base, NODE_URL: nodeUrl }, [])).toThrow(/^NODE_URL holds a user or password$/);
		expect(() => loadCrankerConfig({ ...base, NODE_URL: nodeUrl }, [])).not.toThrow(/secret1/);
	}
	expect(loadCrankerConfig({ ...base, NODE_URL: "https://gateway.example/" }, []).nodeUrl).toBe("https://gateway.example");
});

test("CRANKER_MINTS: required for the settlement role, distinct addresses, at most 64", () => {
	const keypairFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "cranker-cli-")), "keypair.json");
	fs.writeFileSync(keypairFile, JSON.stringify([...generateKeypair().secretKey]));
	const base = { KEYPAIR_PATH: keypairFile, NODE_URL: "http://localhost:3000", WORKER_API_KEY: "single", SOLANA_RPC_URL: "http://localhost:8899", NODE_AUTHORITY_PUBKEY: generateKeypair().publicKey };
	const mints = Array.from({ length: 65 }, () => generateKeypair().publicKey);
	const load = (CRANKER_MINTS: string, roles = "settlement") => loadCrankerConfig({ ...base, CRANKER_MINTS }, ["--roles", roles]).mints;
	expect(load(` ${mints[0]} ,${mints[1]}, `)).toEqual(mints.slice(0, 2));
	expect(load(mints.slice(0, 64).join(","))).toHaveLength(64);
	expect(() => load(mints.join(","))).toThrow(/^CRANKER_MINTS lists 65 mints; at most 64$/);
	expect(() => load(" , ")).toThrow(/^CRANKER_MINTS is not set/);
	expect(() => load(`${mints[0]},${mints[0]}`)).toThrow(/^CRANKER_MINTS names a mint twice$/);
	expect(() => load("not-a-mint")).toThrow(/^CRANKER_MINTS is not a base58 address: "not-a-mint"$/);
	// The TIN roles pay nothing out: they read and report no liquidity.
	expect(load("", "verifier,submitter")).toEqual([]);
});

test("the command line is parsed strictly: an unknown option or a stray argument exits 2 and names it", () => {
	const unknown = run("--rolez", "settlement");
	expect([unknown.status, unknown.stderr]).toEqual([2, expect.stringMatching(/--rolez/)]);
	const stray = run("settlement");
	expect([stray.status, stray.stderr]).toEqual([2, expect.stringMatching(/settlement/)]);
	expect(parseCli(["--roles=verifier,submitter,verifier"]).roles).toEqual(["verifier", "submitter"]);
	expect(parseCli([]).roles).toEqual(["settlement"]);
});
