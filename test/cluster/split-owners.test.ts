/**
 * Owners split over two processes (brokers) on a real nats-server: a SPEC §7 answer of one owner
 * reaches the client through another owner with its own status and type. Moleculer rebuilds a
 * remote error as a plain Error, which the store boundary must not turn into a 500 (a 500 would
 * also count against the circuit breaker, so one Cranker could shut the route for everyone).
 */
import { natsServerAvailable } from "../../devkit/cluster";
import { newRoute, newWallet, signedHeartbeat, signedIntent, writeSeedFile } from "../helpers/fixtures";
import { crankerClient, httpClient, tempDir } from "../helpers/node";
import { startSplitNodes, type SplitNodes } from "../helpers/split-nodes";

// In CI a missing nats-server is a failure, not a skip (.ci/run installs it).
const describeWithNats = natsServerAvailable || process.env.CI ? describe : describe.skip;

describeWithNats("owners in two processes", () => {
	const route = newRoute();
	let nodes: SplitNodes;
	let url: string;

	beforeAll(async () => {
		const ownersDir = tempDir();
		nodes = await startSplitNodes({
			namespace: "split",
			env: { SWEEP_INTERVAL_MS: "200" },
			owners: { DATA_DIR: ownersDir, SERVICES: "mempool,crankers,tin,epochs,access", REGISTRY_SEED_FILE: writeSeedFile(ownersDir, [route]) },
			// payouts in a process of its own: mempool's refusal reaches it across the bus. The gateway as
			// k8s runs it, holding no key of the intake's: its calls for a Cranker prove the worker's key.
			others: [{ SERVICES: "payouts" }, { SERVICES: "verifier" }, { SERVICES: "receiver,network" }],
			gateway: { SERVICES: "api" },
			waitFor: ["mempool", "crankers", "payouts", "verifier", "tin", "receiver"]
		});
		url = nodes.url;
	}, 40_000);
	afterAll(() => nodes?.stop());

	test("a payout authorization asked by a Cranker that does not hold the lease is 403 NOT_LEASE_HOLDER, not 500", async () => {
		const [holder, other] = [newWallet(), newWallet()];
		for (const cranker of [holder, other]) expect((await crankerClient(url, cranker)("POST", "/crankers/heartbeat", signedHeartbeat(cranker))).status).toBe(200);
		const intent = await httpClient(url)("POST", "/intents", signedIntent(newWallet(), route));
		expect(intent.status).toBe(201);
		const lease = await crankerClient(url, holder)("PATCH", `/intents/${intent.body.id}/status`, { status: "CRANKER_LEASED", crankerPubkey: holder.address, expectedVersion: intent.body.stateVersion ?? 3 });
		expect(lease.status).toBe(200);
		const refused = await crankerClient(url, other)("POST", "/internal/settlement-authorizations/settlement", { workId: intent.body.id, crankerPubkey: other.address });
		expect(refused.status).toBe(403);
		expect(refused.body.type).toBe("NOT_LEASE_HOLDER");
	});
});
