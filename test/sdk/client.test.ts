/** The application SDK against the real service over HTTP (issue 4, SDK part). */
import { LocalKeypairSigner, SettlementClient, SettlementError, type PaymentParams } from "../../sdk";
import { generateKeypair, verifySignature } from "../../lib/ed25519";
import type { ActiveRoute, GenesisRoute } from "../../lib/registry";
import { MINT, newRoute, newWallet, signedHeartbeat, uniqueId, writeSeedFile } from "../helpers/fixtures";
import { startNode, tempDir, worker, type TestNode } from "../helpers/node";

let node: TestNode;
let route: GenesisRoute;
let client: SettlementClient;
const settler = newWallet();

beforeAll(async () => {
	route = newRoute();
	const dataDir = tempDir();
	node = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]) }, dataDir);
	client = new SettlementClient({ baseUrl: node.url });
});
afterAll(() => node.stop());

const payment = (resolved: ActiveRoute, overrides: Partial<PaymentParams> = {}): PaymentParams => ({
	paymentId: uniqueId(),
	recipientTin: route.tin,
	route: resolved,
	tokenMintAddress: MINT,
	amount: "1250",
	feeLimit: "5000",
	expiresAtSlot: 9_000_000,
	...overrides
});

describe("SettlementClient", () => {
	it("tells apart submitting (the service takes intents) from settling now (a Cranker offers liquidity in the mint)", async () => {
		expect(await client.checkReadiness()).toEqual({ canSubmit: true, canSettleNow: false });
		expect(await client.checkReadiness(MINT)).toEqual({ canSubmit: true, canSettleNow: false });
		expect((await node.as(settler)("POST", "/crankers/heartbeat", signedHeartbeat(settler))).status).toBe(200);
		const network = { network: "solana-devnet", tokenMintAddress: MINT, liquidity: "1000000000", crankersOnline: 1 };
		expect(await client.checkReadiness(MINT)).toEqual({ canSubmit: true, canSettleNow: true, network });
		expect(await client.checkReadiness()).toEqual({ canSubmit: true, canSettleNow: true, network });
		expect(await client.checkReadiness(newWallet().address)).toEqual({ canSubmit: true, canSettleNow: false });
		expect(await new SettlementClient({ baseUrl: "http://127.0.0.1:9" }).checkReadiness()).toEqual({ canSubmit: false, canSettleNow: false });
	});

	it("resolves a TIN, and refuses an unknown one with a typed error", async () => {
		expect(await client.resolveTin(route.tin)).toMatchObject({ tin: route.tin, routeCommitment: route.routeCommitment, routeVersion: 1 });
		await expect(client.resolveTin(newRoute().tin)).rejects.toMatchObject({ name: "SettlementError", type: "NOT_FOUND", code: 404 });
	});

	it("builds the exact SPEC §1 message that the signer signs and the service verifies", async () => {
		const signer = LocalKeypairSigner.generate();
		const resolved = await client.resolveTin(route.tin);
		const built = client.buildPaymentAuthorization(signer.address, payment(resolved, { paymentId: "pay_sdk_0001", nonce: "nonce_sdk_0123456789" }));
		expect(built.message.split("\n")).toHaveLength(16);
		expect(built.message).toContain(`recipientRouteCommitment: ${route.routeCommitment}`);
		expect(built.message.endsWith(`transactionCommitment: ${built.transactionCommitment}`)).toBe(true);

		const intent = await client.signPayment(signer, payment(resolved));
		expect(verifySignature(signer.address, intent.senderAuthorizationMessage, intent.senderAuthorizationSignature)).toBe(true);
		const submitted = await client.submit(intent);
		expect(submitted).toMatchObject({ status: "pending", receiverStatus: "VERIFIED", senderWallet: signer.address });
	});

	it("retries a submission lost on the network with the same body, and gets the one record", async () => {
		let calls = 0;
		// The first request reaches the service, but its answer is lost.
		const flaky: typeof fetch = async (input, init) => {
			calls++;
			const response = await fetch(input, init);
			if (calls === 1) throw new TypeError("socket hang up");
			return response;
		};
		const retrying = new SettlementClient({ baseUrl: node.url, fetch: flaky });
		const signer = LocalKeypairSigner.generate();
		const intent = await retrying.signPayment(signer, payment(await client.resolveTin(route.tin)));
		const record = await retrying.submit(intent);
		expect(calls).toBe(2);
		const listed = (await node.http("GET", "/intents?limit=500", undefined, worker)).body.filter((i: { paymentId: string }) => i.paymentId === intent.paymentId);
		expect(listed).toHaveLength(1);
		expect(listed[0].id).toBe(record.id);
	});

	it("in Node, retries a real network error (nothing listening) submitAttempts times: only a page can meet a CORS refusal", async () => {
		const calls: string[] = [];
		const counting: typeof fetch = (input, init) => {
			calls.push(`${init?.method ?? "GET"} ${new URL(String(input)).pathname}`);
			return fetch(input, init);
		};
		const unreachable = new SettlementClient({ baseUrl: "http://127.0.0.1:9", fetch: counting, submitAttempts: 3 });
		const intent = await unreachable.signPayment(LocalKeypairSigner.generate(), payment(await client.resolveTin(route.tin)));
		const error = await unreachable.submit(intent).catch(err => err);
		expect(error).toMatchObject({ name: "SettlementError", type: "NETWORK_ERROR", code: null, data: undefined });
		expect(error.message).toMatch(/^request to \/intents failed: fetch failed$/);
		expect(calls).toEqual(["POST /intents", "POST /intents", "POST /intents"]);
	});

	it("retries a 503 (a draining service) with the same body, but never a refusal such as a 4xx", async () => {
		const draining = await startNode();
		try {
			await (draining.broker.getLocalService("api") as unknown as { drain(): Promise<void> }).drain();
			const statuses: number[] = [];
			const counting: typeof fetch = async (input, init) => {
				const answer = await fetch(input, init);
				statuses.push(answer.status);
				return answer;
			};
			const drained = new SettlementClient({ baseUrl: draining.url, fetch: counting, submitAttempts: 3 });
			const intent = await drained.signPayment(LocalKeypairSigner.generate(), payment(await client.resolveTin(route.tin)));
			expect(await drained.submit(intent).catch(err => err)).toMatchObject({ name: "SettlementError", type: "SHUTTING_DOWN", code: 503 });
			expect(statuses).toEqual([503, 503, 503]);
		} finally {
			await draining.stop();
		}
		const refusals: number[] = [];
		const once = new SettlementClient({ baseUrl: node.url, submitAttempts: 3, fetch: async (input, init) => {
			const answer = await fetch(input, init);
			refusals.push(answer.status);
			return answer;
		} });
		const refused = await once.signPayment(LocalKeypairSigner.generate(), payment({ ...(await client.resolveTin(route.tin)), routeVersion: 7 }));
		await expect(once.submit(refused)).rejects.toMatchObject({ name: "SettlementError" });
		expect(refusals).toHaveLength(1);
	});

	it("waits for a 503's retry-after before the next attempt (NOT_READY: another body under the paymentId is not verified yet), at most 5 s", async () => {
		const attempts: number[] = [];
		let retryAfter = "1";
		const notReadyOnce: typeof fetch = async (input, init) => {
			attempts.push(Date.now());
			if (attempts.length % 2 === 1) return new Response(JSON.stringify({ name: "ServiceError", type: "NOT_READY", code: 503, message: "Another body under this paymentId is waiting for its verification; retry later" }), { status: 503, headers: { "retry-after": retryAfter } });
			return fetch(input, init);
		};
		const patient = new SettlementClient({ baseUrl: node.url, fetch: notReadyOnce, submitAttempts: 2 });
		const intent = await patient.signPayment(LocalKeypairSigner.generate(), payment(await client.resolveTin(route.tin)));
		expect(await patient.submit(intent)).toMatchObject({ paymentId: intent.paymentId, receiverStatus: "VERIFIED" });
		expect(attempts[1] - attempts[0]).toBeGreaterThanOrEqual(990);
		// A retry-after past the cap waits the cap, not an hour.
		retryAfter = "3600";
		const startedAt = Date.now();
		expect(await patient.submit(await patient.signPayment(LocalKeypairSigner.generate(), payment(await client.resolveTin(route.tin))))).toMatchObject({ receiverStatus: "VERIFIED" });
		expect(Date.now() - startedAt).toBeLessThan(7000);
	}, 15_000);

	it("throws the service's error type for a refused intent", async () => {
		const signer = LocalKeypairSigner.generate();
		const intent = await client.signPayment(signer, payment({ ...(await client.resolveTin(route.tin)), routeVersion: 7 }));
		const error = await client.submit(intent).catch(err => err);
		expect(error).toBeInstanceOf(SettlementError);
		expect(error).toMatchObject({ type: "ROUTE_MISMATCH", code: 422, data: { paymentId: intent.paymentId } });
	});

	it("waits for an intent to be executed, and times out with a typed error while it is pending", async () => {
		// A Solana CLI keypair (seed ‖ public key) signs as its own address.
		const keypair = generateKeypair();
		const signer = LocalKeypairSigner.fromSecretKey(keypair.secretKey);
		expect(signer.address).toBe(keypair.publicKey);
		// One put together from two keypairs would sign as another wallet than it names (a review).
		const mixed = Uint8Array.from([...keypair.secretKey.subarray(0, 32), ...generateKeypair().secretKey.subarray(32)]);
		expect(() => LocalKeypairSigner.fromSecretKey(mixed)).toThrow("the keypair's public key does not match its secret seed");
		const record = await client.submit(await client.signPayment(signer, payment(await client.resolveTin(route.tin))));
		await expect(client.waitForStatus(record.id, { timeoutMs: 300 })).rejects.toMatchObject({ type: "TIMEOUT" });

		const waiting = client.waitForStatus(record.id, { timeoutMs: 10_000 });
		await node.as(settler)("POST", "/crankers/heartbeat", signedHeartbeat(settler));
		const patch = (status: string, expectedVersion: number) =>
			node.as(settler)("PATCH", `/intents/${record.id}/status`, { status, crankerPubkey: settler.address, expectedVersion, transactionSignature: "5".repeat(87), lastValidBlockHeight: 1_000_000 });
		await patch("CRANKER_LEASED", 3);
		await patch("SUBMITTED", 4);
		await patch("CONFIRMED", 5);
		expect(await waiting).toMatchObject({ id: record.id, status: "executed", transactionSignature: "5".repeat(87) });
	});
});

describe("the SDK runs in a browser", () => {
	it("imports no Node-only module, directly or through lib/", () => {
		const fs = jest.requireActual<typeof import("node:fs")>("node:fs");
		const path = jest.requireActual<typeof import("node:path")>("node:path");
		const seen = new Set<string>();
		const nodeOnly: string[] = [];
		const visit = (file: string) => {
			if (seen.has(file)) return;
			seen.add(file);
			const source = fs.readFileSync(file, "utf8");
			// Runtime imports only: `import type` disappears from the compiled code.
			for (const [, specifier] of source.matchAll(/^import (?!type )[^;]*? from "([^"]+)";/gms)) {
				if (specifier.startsWith("node:") || ["fs", "path", "crypto", "os", "http"].includes(specifier)) nodeOnly.push(`${path.relative(process.cwd(), file)} → ${specifier}`);
				else if (specifier.startsWith(".")) visit(path.resolve(path.dirname(file), `${specifier}.ts`));
			}
		};
		visit(path.resolve(__dirname, "../../sdk/index.ts"));
		expect(seen.size).toBeGreaterThan(2);
		expect(nodeOnly).toEqual([]);
	});
});
