/**
 * The SDK as the npm package an app installs (issue 11): `npm pack` in sdk/ (its prepack runs
 * sdk/build.mjs), the tarball installed into a scratch project, imported from ESM and from CJS,
 * type-checked as a consumer would (node16 and bundler resolution), and weighed.
 */
import { ed25519 } from "@noble/curves/ed25519.js";
import { execFile } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { gzipSync } from "node:zlib";
import { buildPaymentMessage, type PaymentAuthorizationFields } from "../../lib/canonical";
import { decodeBase58 } from "../../lib/encoding";
import { tempDir } from "../helpers/node";

const run = promisify(execFile);
const root = path.resolve(__dirname, "../..");
const sdk = path.join(root, "sdk");
const PACKAGE = "@settlement-coordination/sdk";

/**
 * Budgets, with room over today's figures (the package's files ~245 KB unpacked, ESM bundle ~13 KB
 * gzip, 3 KB of it the checks of every field signed and every answer acted on, and the bound on a
 * Solana RPC answer (lib/rpc-transport.ts); most of the files
 * are the declarations, twice, .d.ts and .d.mts, lib/intents.ts's whole, its state machine's
 * documented functions included, which is why they grow with it): a jump means a dependency or a
 * lib/ module got inlined. The files are counted unpacked:
 * the tarball's own size jumps by kilobytes when a few bytes move its twin declaration files
 * (.d.ts and .d.mts) in or out of the compressor's reach of each other.
 */
const PACKAGE_FILES_BUDGET = 252 * 1024;
const ESM_GZIP_BUDGET = 13.75 * 1024;

let scratch: string;
let tarball: string;
let installed: string;

beforeAll(async () => {
	scratch = tempDir("scs-sdk-package-");
	await run("npm", ["pack", "--pack-destination", scratch, "--silent"], { cwd: sdk });
	tarball = path.join(scratch, fs.readdirSync(scratch).find(file => file.endsWith(".tgz"))!);
	fs.writeFileSync(path.join(scratch, "package.json"), JSON.stringify({ name: "sdk-consumer", private: true }));
	// The npm cache holds every dependency after the root's npm ci; CI also reaches the registry.
	await run("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error", tarball], { cwd: scratch });
	installed = path.join(scratch, "node_modules", PACKAGE);
}, 90_000);

const ROUTE = { tin: "1234567897", routeCommitment: "a".repeat(64), routeVersion: 3, policyCommitment: "b".repeat(64) };

/** A consumer that signs a payment with a fresh key and prints what it got, in either module system. */
function consumer(kind: "esm" | "cjs"): string {
	const load = kind === "esm" ? `import { LocalKeypairSigner, SettlementClient, SettlementError } from "${PACKAGE}";` : `const { LocalKeypairSigner, SettlementClient, SettlementError } = require("${PACKAGE}");`;
	return `${load}
const client = new SettlementClient({ baseUrl: "http://127.0.0.1:9" });
const signer = LocalKeypairSigner.generate();
client
	.signPayment(signer, { paymentId: "pay_package_${kind}", recipientTin: "${ROUTE.tin}", route: ${JSON.stringify(ROUTE)}, tokenMintAddress: "US517G5965aydkZ46HS38QLi7UQiSojurfbQfKCELFx", amount: "1250", feeLimit: "5000", expiresAtSlot: 9000000 })
	.then(intent => client.resolveTin("${ROUTE.tin}").catch(error => console.log(JSON.stringify({ intent, error: { isSettlementError: error instanceof SettlementError, type: error.type } }))));
`;
}

describe("the packed SDK", () => {
	it("ships its builds, declarations, README and LICENSE, and nothing that points outside the package", async () => {
		const { stdout } = await run("tar", ["-tzf", tarball]);
		const files = stdout.trim().split("\n").sort();
		for (const file of ["package/package.json", "package/README.md", "package/LICENSE", "package/dist/index.mjs", "package/dist/index.cjs", "package/dist/types/sdk/index.d.ts", "package/dist/types/sdk/index.d.mts", "package/index.d.ts"]) expect(files).toContain(file);
		expect(files.filter(file => !/^package\/(package\.json|README\.md|LICENSE|index\.d\.ts|dist\/.*)$/.test(file))).toEqual([]);
		expect(fs.readFileSync(path.join(installed, "LICENSE"), "utf8")).toBe(fs.readFileSync(path.join(root, "LICENSE"), "utf8"));

		// Relative specifiers stay inside dist: no "../lib" of the repository is needed at run time or for types.
		for (const file of fs.readdirSync(path.join(installed, "dist"), { recursive: true }).map(String).filter(f => /\.(mjs|cjs|d\.ts|d\.mts)$/.test(f))) {
			const absolute = path.join(installed, "dist", file);
			for (const [, specifier] of fs.readFileSync(absolute, "utf8").matchAll(/(?:from\s*|require\(\s*|import\(\s*)["'](\.[^"']*)["']/g)) {
				expect(path.resolve(path.dirname(absolute), specifier).startsWith(path.join(installed, "dist") + path.sep)).toBe(true);
			}
		}
	});

	it("declares the root's versions of its runtime dependencies", () => {
		const rootPackage = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8"));
		const sdkPackage = JSON.parse(fs.readFileSync(path.join(installed, "package.json"), "utf8"));
		for (const [name, version] of Object.entries(sdkPackage.dependencies)) expect([name, version]).toEqual([name, rootPackage.dependencies[name]]);
		expect(sdkPackage).toMatchObject({ name: PACKAGE, version: "0.1.0", license: "Apache-2.0", sideEffects: false });
	});

	it.each(["esm", "cjs"] as const)("signs a payment from %s that verifies with @noble/curves, as the service's message", async kind => {
		const file = path.join(scratch, kind === "esm" ? "consumer.mjs" : "consumer.cjs");
		fs.writeFileSync(file, consumer(kind));
		const { stdout } = await run(process.execPath, [file], { cwd: scratch });
		const { intent, error } = JSON.parse(stdout);
		const message = new TextEncoder().encode(intent.senderAuthorizationMessage);
		expect(ed25519.verify(decodeBase58(intent.senderAuthorizationSignature)!, message, decodeBase58(intent.senderWallet)!)).toBe(true);
		// The bundled lib/canonical builds exactly what the repository's does.
		const fields = Object.fromEntries(Object.entries(intent).filter(([key]) => !["senderAuthorizationMessage", "senderAuthorizationSignature", "transactionCommitment"].includes(key))) as unknown as PaymentAuthorizationFields;
		expect(buildPaymentMessage(fields)).toEqual({ message: intent.senderAuthorizationMessage, transactionCommitment: intent.transactionCommitment });
		expect(intent).toMatchObject({ paymentId: `pay_package_${kind}`, recipientRouteVersion: 3 });
		expect(error).toEqual({ isSettlementError: true, type: "NETWORK_ERROR" });
	});

	it("type-checks an app against its declarations: node16 (ESM and CJS files), bundler and node10 resolution", async () => {
		const usage = `import { LocalKeypairSigner, SettlementClient, SettlementError, type ActiveRoute, type PublicMempoolIntent, type Signer } from "${PACKAGE}";
export async function pay(route: ActiveRoute): Promise<PublicMempoolIntent> {
	const client = new SettlementClient({ baseUrl: "https://settlement.example.com", submitAttempts: 2 });
	const signer: Signer = LocalKeypairSigner.generate();
	const intent = await client.signPayment(signer, { paymentId: "pay_1", recipientTin: route.tin, route, tokenMintAddress: "mint", amount: "1", feeLimit: "5000", expiresAtSlot: 1 });
	const message: string = intent.senderAuthorizationMessage;
	// @ts-expect-error amounts are decimal strings: the declarations are real types, not any
	await client.signPayment(signer, { paymentId: "pay_2", recipientTin: route.tin, route, tokenMintAddress: "mint", amount: 1, feeLimit: "5000", expiresAtSlot: 1 });
	try {
		return await client.submit(intent);
	} catch (err) {
		if (err instanceof SettlementError && err.type === "NETWORK_ERROR") throw new Error(message);
		throw err;
	}
}
`;
		const project = path.join(scratch, "typecheck");
		fs.mkdirSync(project, { recursive: true });
		fs.writeFileSync(path.join(project, "usage.ts"), usage); // CJS under node16: the `require` types
		fs.writeFileSync(path.join(project, "usage.mts"), usage); // ESM under node16: the `import` types
		// node16 with skipLibCheck off, so that our declarations (both flavours) are checked too: the
		// errors that count are those in our files (@solana/kit's own declarations want Node's types,
		// which a browser app lacks). The other two check resolution; @ts-expect-error proves real types.
		const compilerOptions = { strict: true, noEmit: true, target: "ES2022", lib: ["ES2022", "DOM"], types: [], skipLibCheck: true };
		const configs = {
			"tsconfig.node16.json": { compilerOptions: { ...compilerOptions, module: "node16", moduleResolution: "node16", skipLibCheck: false }, files: ["usage.ts", "usage.mts"] },
			"tsconfig.bundler.json": { compilerOptions: { ...compilerOptions, module: "esnext", moduleResolution: "bundler" }, files: ["usage.ts"] },
			// Resolvers that ignore `exports` (TypeScript's default with module commonjs) find the root index.d.ts.
			"tsconfig.node10.json": { compilerOptions: { ...compilerOptions, module: "commonjs", moduleResolution: "node10" }, files: ["usage.ts"] }
		};
		const tsc = path.join(root, "node_modules/typescript/bin/tsc");
		const results = await Promise.all(
			Object.entries(configs).map(async ([name, config]) => {
				fs.writeFileSync(path.join(project, name), JSON.stringify(config));
				// tsc prints its errors on stdout, one "file(line,col): error …" line each.
				const { stdout } = await run(process.execPath, [tsc, "-p", name], { cwd: project }).catch((err: { stdout: string }) => err);
				return { config: name, errors: stdout.split("\n").filter(line => /^error TS|^(usage\.m?ts|[^(]*node_modules\/@settlement-coordination\/sdk\/)[^(]*\(\d+,\d+\): error/.test(line)) };
			})
		);
		expect(results).toEqual(Object.keys(configs).map(config => ({ config, errors: [] })));
	}, 90_000);

	it("stays within its size budget", async () => {
		// `tar -tzv` lists each file's size in its third column.
		const { stdout } = await run("tar", ["-tzvf", tarball]);
		const packageBytes = stdout.split("\n").filter(Boolean).reduce((sum, line) => sum + Number(line.trim().split(/\s+/)[2]), 0);
		const esm = fs.readFileSync(path.join(installed, "dist/index.mjs"));
		const esmGzip = gzipSync(esm, { level: 9 }).length;
		console.log(`SDK package: files ${packageBytes} B unpacked (budget ${PACKAGE_FILES_BUDGET}), tarball ${fs.statSync(tarball).size} B; dist/index.mjs ${esm.length} B, gzip ${esmGzip} B (budget ${ESM_GZIP_BUDGET})`);
		expect(packageBytes).toBeGreaterThan(esm.length);
		expect(packageBytes).toBeLessThan(PACKAGE_FILES_BUDGET);
		expect(esmGzip).toBeLessThan(ESM_GZIP_BUDGET);
	});
});

afterAll(() => {
	if (scratch) fs.rmSync(scratch, { recursive: true, force: true });
});
