/**
 * The documentation in docs/ against the code. The worked examples are read out of the Markdown
 * (fenced blocks whose info string is `<lang> example:<name>`) and every byte, digest and signature
 * is recomputed with the code (lib/canonical, lib/payout, lib/http-signature, lib/merkle) and,
 * where it is cheap, with an independent implementation (node:crypto SHA-256, @noble/curves
 * ed25519). The route, error and state tables of docs/api.md are checked against the sources they
 * describe, the example registry seed against the registry loader, .env.example against the
 * variables the server and the Cranker read, and every relative link of README.md and docs/ against
 * the files and headings it points to. A doc that disagrees with the code fails here.
 */
import { createHash } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import Validator from "fastest-validator";
import { ed25519 } from "@noble/curves/ed25519.js";
import {
	buildHeartbeatMessage,
	buildPaymentMessage,
	buildPayoutMessage,
	buildThresholdAccessMessage,
	buildTinOperationMessage,
	type PaymentAuthorizationFields,
	type TinOperationFields
} from "../../lib/canonical";
import { CRANKER_ROUTES } from "../../lib/cranker-call";
import { loadConfig } from "../../lib/config";
import { createSigner, keypairFromSecretKey, verifySignature, type Keypair } from "../../lib/ed25519";
import { encodeBase58 } from "../../lib/encoding";
import { ERROR_STATUS } from "../../lib/errors";
import { keypairSigningKey, signRequest, verifyRequestSignature } from "../../lib/http-signature";
import { INTENT_STATES, PUBLIC_STATUS, TRANSITIONS, type LeasedIntentRecord } from "../../lib/intents";
import { EMPTY_ROOT, byId, merkleRoot } from "../../lib/merkle";
import { buildPayoutAuthorization, payoutAuthorizationProblem, type PayoutAuthorization } from "../../lib/payout";
import { parseRegistrySeed } from "../../lib/registry";
import { VALIDATION_MESSAGES, consumeNonceParams, createIntentParams, createTinOperationParams, heartbeatParams, updateStatusParams } from "../../lib/schemas";
import { isValidTin } from "../../lib/tin";
import { verifyPaymentAuthorization } from "../../lib/verification";
import { loadCrankerConfig } from "../../cranker/config";

const ROOT = path.resolve(__dirname, "../..");
const DOCS = path.join(ROOT, "docs");
const read = (file: string) => fs.readFileSync(path.join(ROOT, file), "utf8");
const docFiles = () => fs.readdirSync(DOCS).filter(name => name.endsWith(".md")).map(name => `docs/${name}`);

// ---------------------------------------------------------------------------------------------
// The examples, read out of the docs

/** Every fenced block marked `example:<name>`, by name: its exact content (without the final line feed before the fence). */
function loadExamples(): Map<string, string> {
	const examples = new Map<string, string>();
	for (const file of docFiles()) {
		for (const match of read(file).matchAll(/^```[\w-]* example:(\S+)\n([\s\S]*?)\n```$/gm)) {
			const [, name, content] = match;
			if (examples.has(name)) throw new Error(`example:${name} appears twice in docs/`);
			examples.set(name, content);
		}
	}
	return examples;
}

const EXAMPLES = loadExamples();

function example(name: string): string {
	const content = EXAMPLES.get(name);
	if (content === undefined) throw new Error(`docs/ has no block marked example:${name}`);
	return content;
}

const json = <T = Record<string, unknown>>(name: string): T => JSON.parse(example(name)) as T;

const sha256 = (data: string | Uint8Array) => createHash("sha256").update(data).digest();
const sha256Hex = (data: string | Uint8Array) => sha256(data).toString("hex");
const utf8 = (text: string) => new Uint8Array(Buffer.from(text, "utf8"));

interface DocKey {
	seed: string;
	publicKey: string;
}
type KeyName = "sender" | "cranker" | "authority" | "owner";
const KEYS = json<Record<KeyName, DocKey>>("keys");

/** The keypair of a documented seed, built by the code (node:crypto) from the seed and noble's public key. */
function keypair(name: KeyName): Keypair {
	const seed = Buffer.from(KEYS[name].seed, "hex");
	return keypairFromSecretKey(new Uint8Array(Buffer.concat([seed, ed25519.getPublicKey(seed)])));
}

/** A message's documented length, digest and signature, checked with the code and with noble. */
function expectSigned(message: string, outputs: { messageLength: number; messageSha256: string; signature: string }, signer: KeyName): void {
	expect(Buffer.byteLength(message, "utf8")).toBe(outputs.messageLength);
	expect(sha256Hex(message)).toBe(outputs.messageSha256);
	expect(createSigner(keypair(signer))(message)).toBe(outputs.signature);
	expect(encodeBase58(ed25519.sign(utf8(message), Buffer.from(KEYS[signer].seed, "hex")))).toBe(outputs.signature);
	expect(verifySignature(KEYS[signer].publicKey, message, outputs.signature)).toBe(true);
}

/** The broker validates with fastest-validator configured this way (moleculer.config.ts). */
const validator = new Validator({ useNewCustomCheckerFunction: true, messages: VALIDATION_MESSAGES });
function expectValid(schema: object, body: unknown): void {
	expect(validator.compile(schema as never)(body as object)).toBe(true);
}

const SEED_FILE = "examples/registry-seed.json";

describe("the example keys (docs/signing.md)", () => {
	it.each(Object.keys(KEYS) as KeyName[])("%s: the public key is the seed's", name => {
		const seed = Buffer.from(KEYS[name].seed, "hex");
		expect(seed).toHaveLength(32);
		expect(encodeBase58(ed25519.getPublicKey(seed))).toBe(KEYS[name].publicKey);
		expect(keypair(name).publicKey).toBe(KEYS[name].publicKey);
	});
});

describe("1. payment authorization", () => {
	const inputs = json<PaymentAuthorizationFields>("payment.inputs");
	const message = example("payment.message");
	const outputs = json<{ messageLength: number; messageSha256: string; transactionCommitment: string; signature: string }>("payment.outputs");

	it("the message is buildPaymentMessage of the inputs, byte for byte", () => {
		expect(inputs.senderWallet).toBe(KEYS.sender.publicKey);
		expect(buildPaymentMessage(inputs).message).toBe(message);
		expect(message.split("\n")).toHaveLength(16);
	});

	it("the commitment is SHA-256 of the first fifteen lines, and the last line", () => {
		const lines = message.split("\n");
		expect(sha256Hex(lines.slice(0, 15).join("\n"))).toBe(outputs.transactionCommitment);
		expect(buildPaymentMessage(inputs).transactionCommitment).toBe(outputs.transactionCommitment);
		expect(lines[15]).toBe(`transactionCommitment: ${outputs.transactionCommitment}`);
	});

	it("the length, digest and sender's signature", () => {
		expectSigned(message, outputs, "sender");
	});

	it("the request body carries them, passes the schema and verifies against the seed's route", () => {
		const request = json("payment.request");
		expect(request).toEqual({ ...inputs, senderAuthorizationMessage: message, senderAuthorizationSignature: outputs.signature, transactionCommitment: outputs.transactionCommitment });
		expectValid(createIntentParams, request);
		const route = parseRegistrySeed(read(SEED_FILE)).find(entry => entry.tin === inputs.recipientTin) ?? null;
		expect(route).not.toBeNull();
		expect(route!.routeCommitment).toBe(sha256Hex(`example route of ${inputs.recipientTin}`));
		expect(verifyPaymentAuthorization(request as never, { nowMs: Date.parse(inputs.senderAuthorizationIssuedAt), latestSlot: null, route })).toEqual({ ok: true });
	});
});

describe("2. payout authorization", () => {
	const payment = json<PaymentAuthorizationFields>("payment.inputs");
	const inputs = json<{ workId: string; leasedAt: string; leaseExpiresAt: string; now: string }>("payout.inputs");
	const message = example("payout.message");
	const outputs = json<{ messageLength: number; messageSha256: string; payoutNullifier: string; signature: string }>("payout.outputs");
	const response = json<PayoutAuthorization>("payout.response");

	it("buildPayoutAuthorization of the leased intent of example 1 gives the documented answer", () => {
		const record = {
			id: inputs.workId,
			paymentId: payment.paymentId,
			transactionCommitment: buildPaymentMessage(payment).transactionCommitment,
			request: payment,
			lease: { crankerPubkey: KEYS.cranker.publicKey, leasedAt: inputs.leasedAt, expiresAt: inputs.leaseExpiresAt }
		} as unknown as LeasedIntentRecord;
		const authority = keypair("authority");
		const built = buildPayoutAuthorization(record, new Date(inputs.now), { publicKey: authority.publicKey, sign: createSigner(authority) });
		expect(built).toEqual(response);
	});

	it("the message is buildPayoutMessage of the answer's fields", () => {
		expect(buildPayoutMessage(response)).toBe(message);
		expect(response.authorizationMessage).toBe(message);
	});

	it("the nullifier is SHA-256 of senderWallet:nonce", () => {
		expect(sha256Hex(`${payment.senderWallet}:${payment.senderAuthorizationNonce}`)).toBe(outputs.payoutNullifier);
		expect(response.payoutNullifier).toBe(outputs.payoutNullifier);
	});

	it("the length, digest and authority's signature, and a Cranker accepts it", () => {
		expectSigned(message, outputs, "authority");
		expect(response.authorizationSignature).toBe(outputs.signature);
		expect(response.authorizationSigner).toBe(KEYS.authority.publicKey);
		const expected = { ...response, crankerPubkey: KEYS.cranker.publicKey };
		expect(payoutAuthorizationProblem(response, expected, KEYS.authority.publicKey, Date.parse(inputs.now))).toBeNull();
	});
});

describe("3. TIN operation", () => {
	const message = example("tin-operation.message");
	const request = json<TinOperationFields & { ownerSignature: string }>("tin-operation.request");

	it("the message is buildTinOperationMessage of the request, with the create's empty tin line", () => {
		expect(request.ownerWallet).toBe(KEYS.owner.publicKey);
		expect(buildTinOperationMessage(request)).toBe(message);
		expect(message.split("\n")).toContain("tin: ");
	});

	it("the length, digest and owner's signature; the body passes the schema", () => {
		expectSigned(message, json("tin-operation.outputs"), "owner");
		expect(request.ownerSignature).toBe(json("tin-operation.outputs").signature);
		expectValid(createTinOperationParams, request);
	});
});

describe("4. Cranker heartbeat", () => {
	const message = example("heartbeat.message");
	const request = json<{ crankerPubkey: string; roles: string[]; sentAt: string; signature: string }>("heartbeat.request");

	it("the message is buildHeartbeatMessage of the request", () => {
		expect(request.crankerPubkey).toBe(KEYS.cranker.publicKey);
		expect(buildHeartbeatMessage(request)).toBe(message);
	});

	it("the length, digest and Cranker's signature; the body passes the schema", () => {
		expectSigned(message, json("heartbeat.outputs"), "cranker");
		expect(request.signature).toBe(json("heartbeat.outputs").signature);
		expectValid(heartbeatParams, request);
	});
});

describe("5. threshold access", () => {
	const message = example("threshold-access.message");
	const request = json<{ wallet: string; nonce: string; issuedAt: string; signature: string }>("threshold-access.request");

	it("the message is buildThresholdAccessMessage of the request", () => {
		expect(request.wallet).toBe(KEYS.sender.publicKey);
		expect(buildThresholdAccessMessage(request)).toBe(message);
	});

	it("the length, digest and wallet's signature; the body passes the schema", () => {
		expectSigned(message, json("threshold-access.outputs"), "sender");
		expect(request.signature).toBe(json("threshold-access.outputs").signature);
		expectValid(consumeNonceParams, request);
	});
});

describe("6. Cranker request signature (RFC 9421)", () => {
	const inputs = json<{ method: string; url: string; created: number }>("http-signature.inputs");
	const body = example("http-signature.body");
	const base = example("http-signature.base");
	const headers = Object.fromEntries(
		example("http-signature.headers")
			.split("\n")
			.map(line => {
				const at = line.indexOf(": ");
				return [line.slice(0, at).toLowerCase(), line.slice(at + 2)];
			})
	);

	it("signRequest gives the documented headers", async () => {
		const signed = await signRequest({ method: inputs.method, url: inputs.url, body }, keypairSigningKey(keypair("cranker")), new Date(inputs.created * 1000));
		expect(signed).toEqual(headers);
	});

	it("Content-Digest is sha-256 of the body bytes, base64", () => {
		expect(headers["content-digest"]).toBe(`sha-256=:${sha256(body).toString("base64")}:`);
	});

	it("the signature base is the profile's lines, and the signature signs it", () => {
		expect(headers["signature-input"]).toBe(`sig1=("@method" "@target-uri" "content-digest");created=${inputs.created};keyid="${KEYS.cranker.publicKey}";alg="ed25519"`);
		const lines = [`"@method": ${inputs.method}`, `"@target-uri": ${inputs.url}`, `"content-digest": ${headers["content-digest"]}`, `"@signature-params": ${headers["signature-input"].slice("sig1=".length)}`];
		expect(base).toBe(lines.join("\n"));
		const signature = /^sig1=:([A-Za-z0-9+/=]+):$/.exec(headers["signature"])?.[1];
		expect(signature).toBeDefined();
		const bytes = new Uint8Array(Buffer.from(signature!, "base64"));
		expect(verifySignature(KEYS.cranker.publicKey, base, bytes)).toBe(true);
		expect(Buffer.from(ed25519.sign(utf8(base), Buffer.from(KEYS.cranker.seed, "hex"))).toString("base64")).toBe(signature);
	});

	it("the Node's check accepts the request at its created time; the body is a valid status update by the signer", async () => {
		const check = await verifyRequestSignature({ method: inputs.method, targetUri: inputs.url, headers, body: utf8(body) }, inputs.created * 1000);
		expect(check).toMatchObject({ ok: true, keyid: KEYS.cranker.publicKey, created: inputs.created });
		const update = JSON.parse(body) as { crankerPubkey: string };
		expect(update.crankerPubkey).toBe(KEYS.cranker.publicKey);
		const id = /\/intents\/([^/]+)\/status$/.exec(inputs.url)?.[1];
		expectValid(updateStatusParams, { ...update, id });
	});
});

describe("the epoch Merkle root (docs/merkle.md)", () => {
	const { intents } = json<{ intents: { id: string; transactionCommitment: string }[] }>("merkle.inputs");
	const outputs = json<{ leaves: { id: string; leaf: string }[]; levels: string[][]; root: string; emptyRoot: string }>("merkle.outputs");
	const sorted = [...intents].sort(byId);
	const hash = (...parts: Buffer[]) => sha256(Buffer.concat(parts));

	it("leaves in id order, SHA-256(0x00 ‖ commitment bytes)", () => {
		expect(outputs.leaves.map(leaf => leaf.id)).toEqual(sorted.map(intent => intent.id));
		expect(outputs.leaves.map(leaf => leaf.leaf)).toEqual(sorted.map(intent => hash(Buffer.from([0]), Buffer.from(intent.transactionCommitment, "hex")).toString("hex")));
	});

	it("the levels above the leaves pair left to right with 0x01 and carry an odd last node up", () => {
		let level: Buffer[] = outputs.leaves.map(leaf => Buffer.from(leaf.leaf, "hex"));
		const levels: string[][] = [];
		while (level.length > 1) {
			const next: Buffer[] = [];
			for (let i = 0; i + 1 < level.length; i += 2) next.push(hash(Buffer.from([1]), level[i], level[i + 1]));
			if (level.length % 2) next.push(level[level.length - 1]);
			level = next;
			if (level.length > 1) levels.push(level.map(node => node.toString("hex")));
		}
		expect(levels).toEqual(outputs.levels);
		expect(level[0].toString("hex")).toBe(outputs.root);
	});

	it("merkleRoot of the sorted commitments is the documented root; no leaves, 64 zeros", () => {
		expect(merkleRoot(sorted.map(intent => intent.transactionCommitment))).toBe(outputs.root);
		expect(outputs.emptyRoot).toBe(EMPTY_ROOT);
		expect(merkleRoot([])).toBe(outputs.emptyRoot);
	});
});

// ---------------------------------------------------------------------------------------------
// docs/api.md against the sources it describes

describe("docs/api.md", () => {
	const api = read("docs/api.md");
	const lines = api.split("\n");
	const source = read("services/api.service.ts");

	/** The `METHOD /path` entries of a route table of the gateway's source (on one line or several), paths in {param} form. */
	function routesOf(table: string): Map<string, string> {
		const block = new RegExp(`const ${table}[^=]*=\\s*\\{([\\s\\S]*?)\\};`).exec(source)?.[1];
		if (!block) throw new Error(`${table} not found in services/api.service.ts`);
		return new Map([...block.matchAll(/"([A-Z]+ \/[^"]*)":\s*"([^"]+)"/g)].map(([, route, action]) => [route.replace(/:(\w+)/g, "{$1}"), action]));
	}

	// The server-sent event routes have tables of their own.
	const publicRoutes = new Map([...routesOf("PUBLIC_ROUTES"), ...routesOf("PUBLIC_STREAM_ROUTES")]);
	// The Cranker routes are lib/cranker-call.ts's table, spread into WORKER_ROUTES.
	const signedRoutes = new Map(Object.entries(CRANKER_ROUTES).map(([route, action]) => [route.replace(/:(\w+)/g, "{$1}"), action]));
	const workerRoutes = new Map([...routesOf("WORKER_ROUTES"), ...signedRoutes, ...routesOf("WORKER_STREAM_ROUTES")]);
	const healthRoutes = [.../const HEALTH_ROUTES = \[([^\]]*)\]/.exec(source)![1].matchAll(/"([A-Z]+ \/[^"]*)"/g)].map(([, route]) => route);
	const signedActions = new Set(signedRoutes.values());

	/** The cells of the "Routes at a glance" row of a route. */
	const row = (route: string) => lines.find(line => line.startsWith(`| \`${route}\` |`))?.split(" | ");

	it("found the gateway's route tables", () => {
		expect(publicRoutes.size).toBeGreaterThan(10);
		expect(workerRoutes.size).toBeGreaterThan(10);
		expect(healthRoutes).toEqual(["GET /health/live", "GET /health/ready"]);
		expect(publicRoutes.get("GET /intents/{id}/events")).toBe("api.intentEvents");
		expect(workerRoutes.get("GET /events")).toBe("api.events");
		expect(signedActions.size).toBe(9);
	});

	it("lists every route with its access", () => {
		for (const route of healthRoutes) expect(row(route)?.[1]).toMatch(/^public/);
		for (const route of publicRoutes.keys()) expect({ route, access: row(route)?.[1] }).toEqual({ route, access: expect.stringMatching(/^public/) });
		for (const [route, action] of workerRoutes) {
			const access = signedActions.has(action) ? "worker, signed" : "worker";
			expect({ route, access: row(route)?.[1] }).toEqual({ route, access });
		}
		const documented = lines.filter(line => /^\| `[A-Z]+ \/[^`]*` \|/.test(line)).map(line => /^\| `([^`]+)`/.exec(line)![1]);
		expect(documented.sort()).toEqual([...healthRoutes, ...publicRoutes.keys(), ...workerRoutes.keys()].sort());
	});

	it("lists every error type of lib/errors.ts with its status, and no other", () => {
		const rows = new Map(lines.flatMap(line => {
			const match = /^\| `([A-Z_]+)` \| (\d{3}) \|/.exec(line);
			return match ? [[match[1], Number(match[2])] as const] : [];
		}));
		expect(Object.fromEntries(rows)).toEqual(ERROR_STATUS);
	});

	it("lists every intent state with its public status (PUBLIC_STATUS)", () => {
		const rows = new Map(lines.flatMap(line => {
			const match = /^\| `([A-Z_]+)` \| `(pending|canceled|executed)` \|/.exec(line);
			return match ? [[match[1], match[2]] as const] : [];
		}));
		expect(Object.fromEntries(rows)).toEqual(Object.fromEntries(INTENT_STATES.map(state => [state, PUBLIC_STATUS[state]])));
	});

	it("lists exactly the moves a Cranker may request (TRANSITIONS by cranker)", () => {
		const section = /\n### Cranker moves[\s\S]*?(?=\n### )/.exec(api)?.[0] ?? "";
		const rows = section.split("\n").flatMap(line => {
			const match = /^\| `([A-Z_]+)` → `([A-Z_]+)` \|/.exec(line);
			return match ? [`${match[1]} → ${match[2]}`] : [];
		});
		expect(rows.sort()).toEqual(TRANSITIONS.filter(t => t.by === "cranker").map(t => `${t.from} → ${t.to}`).sort());
	});
});

// ---------------------------------------------------------------------------------------------
// The example registry seed and .env.example

describe("examples/registry-seed.json", () => {
	it("parses with the registry loader, with Luhn-valid TINs", () => {
		const routes = parseRegistrySeed(read(SEED_FILE));
		expect(routes.length).toBeGreaterThan(0);
		for (const route of routes) expect(isValidTin(route.tin)).toBe(true);
		expect(routes.find(route => route.ownerWallet)?.ownerWallet).toBe(KEYS.owner.publicKey);
	});

	it("is the file REGISTRY_SEED_FILE names in the docs' start command", () => {
		const command = `REGISTRY_SEED_FILE=${SEED_FILE} npm start`;
		expect(read("docs/api.md")).toContain(command);
		expect(read("docs/README.md")).toContain(command);
		expect(loadConfig({ REGISTRY_SEED_FILE: SEED_FILE }).registrySeedFile).toBe(SEED_FILE);
	});
});

describe(".env.example", () => {
	/** Names read by a config module: helper(env, "NAME", …), env.NAME, env["NAME"]. */
	function variablesRead(file: string): Set<string> {
		const text = read(file);
		return new Set([
			...[...text.matchAll(/\b\w+\(\s*env\s*,\s*"([A-Z][A-Z0-9_]*)"/g)].map(match => match[1]),
			...[...text.matchAll(/\benv\.([A-Z][A-Z0-9_]*)\b/g)].map(match => match[1]),
			...[...text.matchAll(/\benv\[\s*"([A-Z][A-Z0-9_]*)"\s*\]/g)].map(match => match[1])
		]);
	}

	const content = read(".env.example");
	const [serverPart, crankerPart] = content.split(/^# Cranker \(npm run cranker.*$/m);
	/** `NAME=value` lines, commented out or not. */
	const entries = (text: string) => [...text.matchAll(/^#?([A-Z][A-Z0-9_]*)=(.*)$/gm)].map(([, name, value]) => ({ name, value }));
	const server = variablesRead("lib/config.ts");
	const cranker = variablesRead("cranker/config.ts");

	it("found the variables of both config modules", () => {
		expect(crankerPart).toBeDefined();
		expect([...server]).toEqual(expect.arrayContaining(["PORT", "DATA_DIR", "WORKER_API_KEYS", "MONGO_URL", "NATS_PASSWORD"]));
		expect([...cranker]).toEqual(expect.arrayContaining(["KEYPAIR_PATH", "NODE_URL", "SETTLEMENT_PROGRAM_ID", "BLOCKHASH_LIFETIME_SLOTS"]));
	});

	it("lists every variable the server and the Cranker read, in their sections, and no other", () => {
		expect(new Set(entries(serverPart).map(entry => entry.name))).toEqual(server);
		expect(new Set(entries(crankerPart).map(entry => entry.name))).toEqual(cranker);
	});

	it("gives the server's defaults: setting each documented value changes nothing", () => {
		const defaults = loadConfig({});
		for (const { name, value } of entries(serverPart).filter(entry => entry.value !== "")) {
			expect({ name, config: loadConfig({ [name]: value }) }).toEqual({ name, config: defaults });
		}
	});

	it("gives the Cranker's defaults: setting each documented value changes nothing", () => {
		const dir = fs.mkdtempSync(path.join(os.tmpdir(), "scs-docs-"));
		try {
			const keypairPath = path.join(dir, "keypair.json");
			fs.writeFileSync(keypairPath, JSON.stringify([...keypair("cranker").secretKey]));
			const required = { KEYPAIR_PATH: keypairPath, CRANKER_MINTS: KEYS.authority.publicKey, NODE_URL: "http://127.0.0.1:3000", WORKER_API_KEY: "key", NODE_AUTHORITY_PUBKEY: KEYS.authority.publicKey, SOLANA_RPC_URL: "http://127.0.0.1:8899" };
			const defaults = loadCrankerConfig(required, []);
			for (const { name, value } of entries(crankerPart).filter(entry => entry.value !== "")) {
				expect({ name, config: loadCrankerConfig({ ...required, [name]: value }, []) }).toEqual({ name, config: defaults });
			}
		} finally {
			fs.rmSync(dir, { recursive: true, force: true });
		}
	});
});

// ---------------------------------------------------------------------------------------------
// Links

describe("links of README.md and docs/", () => {
	/** GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered. */
	function anchors(markdown: string): Set<string> {
		const seen = new Map<string, number>();
		const out = new Set<string>();
		for (const line of withoutFences(markdown).split("\n")) {
			const heading = /^#{1,6}\s+(.*?)\s*#*$/.exec(line)?.[1];
			if (heading === undefined) continue;
			const slug = heading
				.replace(/\[([^\]]*)\]\([^)]*\)/g, "$1")
				.toLowerCase()
				.replace(/[^\p{L}\p{N}\s_-]/gu, "")
				.replace(/\s/g, "-");
			const count = seen.get(slug) ?? 0;
			seen.set(slug, count + 1);
			out.add(count ? `${slug}-${count}` : slug);
		}
		return out;
	}

	/** Markdown without fenced blocks, whose `#` lines are no headings. */
	function withoutFences(markdown: string): string {
		return markdown.replace(/^```[\s\S]*?^```$/gm, "");
	}

	/** Markdown without fenced blocks and inline code, whose brackets are no links. */
	function withoutCode(markdown: string): string {
		return withoutFences(markdown).replace(/`[^`\n]*`/g, "");
	}

	const files = ["README.md", ...docFiles()];

	it("README.md cites nothing outside the repository", () => {
		const readme = read("README.md");
		expect(readme).not.toMatch(/\.\.\/shared|SPEC\.md|DESIGN\.md|SPEC §/);
	});

	it.each(files)("%s: every relative link reaches a file, and its anchor a heading", file => {
		const broken: string[] = [];
		for (const [, target] of withoutCode(read(file)).matchAll(/\]\(([^)\s]+)\)/g)) {
			if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue;
			const [pathPart, fragment] = target.split("#");
			const resolved = pathPart ? path.join(path.dirname(path.join(ROOT, file)), pathPart) : path.join(ROOT, file);
			if (!resolved.startsWith(ROOT + path.sep) && resolved !== ROOT) broken.push(`${target} (outside the repository)`);
			else if (!fs.existsSync(resolved)) broken.push(`${target} (no such file)`);
			else if (fragment && resolved.endsWith(".md") && !anchors(fs.readFileSync(resolved, "utf8")).has(fragment)) broken.push(`${target} (no such heading)`);
		}
		expect(broken).toEqual([]);
	});
});
