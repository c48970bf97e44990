/** Observation routes over HTTP (SPEC §8): /metrics (JSON and Prometheus), /network/overview, /settlement-networks. */
import { encodeBase58 } from "../../lib/encoding";
import type { GenesisRoute } from "../../lib/registry";
import { MINT, newRoute, newWallet, signedHeartbeat, signedIntent, writeSeedFile } from "../helpers/fixtures";
import { startNode, tempDir, type TestNode } from "../helpers/node";

const OTHER_MINT = encodeBase58(new Uint8Array(32).fill(9));
const SIG = "5".repeat(87);
const sender = newWallet();
const settler = newWallet();
const settler2 = newWallet();
const verifierOnly = newWallet();

let node: TestNode;
let route: GenesisRoute;

beforeAll(async () => {
	route = newRoute();
	const dataDir = tempDir();
	node = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]), SOLANA_CLUSTER: "solana-localnet" }, dataDir);
	const beat = (wallet: typeof settler, roles: string[], liquidity: { tokenMintAddress: string; available: string }[]) =>
		node.as(wallet)("POST", "/crankers/heartbeat", signedHeartbeat(wallet, roles, { liquidity }));
	expect((await beat(settler, ["settlement"], [{ tokenMintAddress: MINT, available: "1000" }, { tokenMintAddress: OTHER_MINT, available: "0" }])).status).toBe(200);
	expect((await beat(settler2, ["settlement", "submitter"], [{ tokenMintAddress: MINT, available: "18446744073709551615" }])).status).toBe(200);
	expect((await beat(verifierOnly, ["verifier"], [{ tokenMintAddress: OTHER_MINT, available: "500" }])).status).toBe(200);

	// One settled intent, one leased, one verified, one rejected.
	const ids: string[] = [];
	for (let i = 0; i < 3; i++) ids.push((await node.http("POST", "/intents", signedIntent(sender, route, { amount: "30" }))).body.id);
	// Refused at verification: a signed body for a route version that is not active (kept, REJECTED)…
	await node.http("POST", "/intents", signedIntent(sender, { ...route, routeVersion: 2 }));
	// …and a body its sender did not sign (no record at all, only a count).
	await node.http("POST", "/intents", { ...signedIntent(sender, route), senderAuthorizationSignature: newWallet().sign("x") });
	const patch = (id: string, status: string, expectedVersion: number) =>
		node.as(settler)("PATCH", `/intents/${id}/status`, { status, crankerPubkey: settler.address, expectedVersion, transactionSignature: SIG, lastValidBlockHeight: 1_000_000 });
	await patch(ids[0], "CRANKER_LEASED", 3);
	await patch(ids[0], "SUBMITTED", 4);
	await patch(ids[0], "CONFIRMED", 5);
	await patch(ids[1], "CRANKER_LEASED", 3);
});
afterAll(() => node.stop());

describe("GET /metrics", () => {
	it("answers MetricsResponse in JSON", async () => {
		const { status, body } = await node.http("GET", "/metrics");
		expect(status).toBe(200);
		expect(body).toEqual({
			uptimeSeconds: expect.any(Number),
			startedAt: expect.any(String),
			intents: { RECEIVED: 0, NODE_VERIFYING: 0, VERIFIED: 1, CRANKER_LEASED: 1, SUBMITTED: 0, CONFIRMED: 1, REJECTED: 1 },
			settled: { count: 1, volume: { [MINT]: "30" } },
			verification: { verified: 3, rejected: 1, unrecorded: 1, p50Ms: expect.any(Number), p99Ms: expect.any(Number) },
			leases: { active: 1, expired: 0 }
		});
		expect(body.verification.p99Ms).toBeGreaterThanOrEqual(body.verification.p50Ms);
		expect(body.verification.p50Ms).toBeGreaterThan(0);
	});

	it("answers the same figures as Prometheus text on ?format=prometheus or accept: text/plain", async () => {
		for (const [path, headers] of [["/metrics?format=prometheus", {}], ["/metrics", { accept: "text/plain" }]] as const) {
			const response = await fetch(node.url + path, { headers });
			expect(response.status).toBe(200);
			expect(response.headers.get("content-type")).toMatch(/^text\/plain/);
			const text = await response.text();
			expect(text).toContain('scs_intents{state="CONFIRMED"} 1');
			expect(text).toContain("scs_settled_intents_total 1");
			expect(text).toContain(`scs_settled_volume_base_units_total{mint="${MINT}"} 30`);
			expect(text).toContain('scs_intent_verdicts_total{verdict="rejected"} 1');
			// The receiver's own figures, labelled with its process.
			expect(text).toMatch(/^scs_verifications_total\{outcome="unrecorded",node="[^"]+"\} 1$/m);
			expect(text).toMatch(/^scs_verification_duration_seconds_count\{node="[^"]+"\} 4$/m);
			expect(text).toContain("# TYPE scs_leases_active gauge");
			expect(text).toContain("# TYPE scs_verification_duration_seconds histogram");
		}
		expect((await node.http("GET", "/metrics?format=xml")).status).toBe(422);
	});
});

describe("GET /network/overview", () => {
	it("aggregates Crankers, liquidity, intents and the epoch", async () => {
		const { status, body } = await node.http("GET", "/network/overview");
		expect(status).toBe(200);
		expect(body).toEqual({
			crankers: { online: 3, total: 3, byRole: { settlement: 2, verifier: 1, submitter: 1 } },
			// 1,000 + the u64 maximum: a figure is an amount, and says no more than that maximum (SPEC §0).
			liquidity: { [MINT]: "18446744073709551615", [OTHER_MINT]: "0" },
			intents: { pending: 2, executed: 1, canceled: 1 },
			epoch: { epoch: 1, startedAt: expect.any(String), intents: { received: 4, executed: 1, canceled: 1 }, volume: { [MINT]: "30" } }
		});
	});
});

describe("GET /settlement-networks", () => {
	it("lists each mint an online settlement Cranker offers liquidity in", async () => {
		const { status, body } = await node.http("GET", "/settlement-networks");
		expect(status).toBe(200);
		expect(body).toEqual([{ network: "solana-localnet", tokenMintAddress: MINT, ready: true, liquidity: "18446744073709551615", crankersOnline: 2 }]);
	});

	it("answers 503 REGISTRY_INVALID when the registry cannot be read", async () => {
		const dataDir = tempDir();
		const broken = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dataDir, [newRoute()]) }, dataDir);
		try {
			await broken.broker.destroyService(broken.broker.getLocalService("tin")!);
			const { status, body } = await broken.http("GET", "/settlement-networks");
			expect(status).toBe(503);
			expect(body).toMatchObject({ code: 503, type: "REGISTRY_INVALID" });
		} finally {
			await broken.stop();
		}
	});
});
