/**
 * Owners split over two processes (brokers) on a real nats-server: a SPEC §7 answer of one owner
 * reaches the client through another owner with its own status and type. Moleculer rebuilds a
 * remote error as a plain Error, which the store boundary must not turn into a 500 (a 500 would
 * also count against the circuit breaker, so one Cranker could shut the route for everyone).
 */
import type { ServiceBroker } from "moleculer";
import { loadConfig } from "../../lib/config";
import { createNode, stopNode } from "../../services";
import { NatsServer, natsServerAvailable } from "../../devkit/cluster";
import { freePort } from "../../devkit/process";
import { newRoute, newWallet, signedHeartbeat, signedIntent, writeSeedFile } from "../helpers/fixtures";
import { API_KEY, crankerClient, httpClient, tempDir } from "../helpers/node";

// In CI a missing nats-server is a failure, not a skip (.ci/run installs it).
const describeWithNats = natsServerAvailable || process.env.CI ? describe : describe.skip;

describeWithNats("owners in two processes", () => {
	const route = newRoute();
	let nats: NatsServer;
	let owners: ServiceBroker;
	let gateway: ServiceBroker;
	let url: string;

	beforeAll(async () => {
		nats = new NatsServer(await freePort());
		await nats.start();
		const shared = { TRANSPORTER: nats.url, NATS_USER: nats.user, NATS_PASSWORD: nats.password, NAMESPACE: `split${process.pid}`, LOG_LEVEL: "warn", SWEEP_INTERVAL_MS: "200", RATE_LIMIT_PER_MIN: "0" };
		const ownersDir = tempDir();
		owners = createNode(loadConfig({ ...shared, DATA_DIR: ownersDir, SERVICES: "receiver,verifier,mempool,crankers,tin,epochs,network,access", REGISTRY_SEED_FILE: writeSeedFile(ownersDir, [route]) }), { nodeID: `owners-${process.pid}`, logger: false, skipProcessEventRegistration: true });
		gateway = createNode(loadConfig({ ...shared, PORT: "0", DATA_DIR: tempDir(), WORKER_API_KEYS: API_KEY, SERVICES: "api,payouts" }), { nodeID: `gateway-${process.pid}`, logger: false, skipProcessEventRegistration: true });
		await owners.start();
		await gateway.start();
		await gateway.waitForServices(["mempool", "crankers", "receiver", "tin"], 15_000);
		url = `http://127.0.0.1:${(gateway.getLocalService("api") as unknown as { server: { address(): { port: number } } }).server.address().port}`;
	}, 40_000);
	afterAll(async () => {
		await gateway?.stop().catch(() => undefined);
		if (owners) await stopNode(owners);
		await nats?.stop();
	});

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
