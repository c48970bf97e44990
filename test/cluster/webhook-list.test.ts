/**
 * GET /webhooks with the subscriptions' owner in another process, over a real nats-server whose
 * message limit is smaller than the whole list: the gateway joins the owner's pages. In one
 * message, a worker-key holder's long urls and TIN filters made the list fail once it outgrew the
 * bus's limit (NATS's default is 1 MB).
 */
import type { ServiceBroker } from "moleculer";
import { loadConfig } from "../../lib/config";
import { tinFromSequence } from "../../lib/tin";
import { MAX_FILTER_TINS, MAX_URL_LENGTH, WEBHOOK_LIST_PAGE } from "../../lib/webhooks";
import { createNode, stopNode } from "../../services";
import { NatsServer, natsServerAvailable } from "../../devkit/cluster";
import { freePort } from "../../devkit/process";
import { newRoute, writeSeedFile } from "../helpers/fixtures";
import { API_KEY, httpClient, tempDir, worker, type Http } from "../helpers/node";

// In CI a missing nats-server is a failure, not a skip (.ci/run installs it).
const describeWithNats = natsServerAvailable || process.env.CI ? describe : describe.skip;
const NATS_MAX_PAYLOAD = 128 * 1024;
const SUBSCRIPTIONS = 60;

describeWithNats("GET /webhooks across the bus", () => {
	let nats: NatsServer;
	let owners: ServiceBroker;
	let gateway: ServiceBroker;
	let http: Http;

	beforeAll(async () => {
		nats = new NatsServer(await freePort(), NATS_MAX_PAYLOAD);
		await nats.start();
		const shared = { TRANSPORTER: nats.url, NATS_USER: nats.user, NATS_PASSWORD: nats.password, NAMESPACE: `whlist${process.pid}`, LOG_LEVEL: "warn", RATE_LIMIT_PER_MIN: "0" };
		const ownersDir = tempDir();
		owners = createNode(
			loadConfig({ ...shared, DATA_DIR: ownersDir, SERVICES: "mempool,crankers,tin,webhooks", REGISTRY_SEED_FILE: writeSeedFile(ownersDir, [newRoute()]), WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOKS_MAX: String(SUBSCRIPTIONS) }),
			{ nodeID: `owners-${process.pid}`, logger: false, skipProcessEventRegistration: true }
		);
		gateway = createNode(loadConfig({ ...shared, PORT: "0", DATA_DIR: tempDir(), WORKER_API_KEYS: API_KEY, SERVICES: "api" }), { nodeID: `gateway-${process.pid}`, logger: false, skipProcessEventRegistration: true });
		await owners.start();
		await gateway.start();
		await gateway.waitForServices(["webhooks", "mempool", "tin"], 15_000);
		http = httpClient(`http://127.0.0.1:${(gateway.getLocalService("api") as unknown as { server: { address(): { port: number } } }).server.address().port}`);
	}, 40_000);
	afterAll(async () => {
		await gateway?.stop().catch(() => undefined);
		if (owners) await stopNode(owners);
		await nats?.stop();
	});

	test("joins the owner's pages: every subscription once, newest first, in a list larger than one message may be", async () => {
		const tins = Array.from({ length: MAX_FILTER_TINS }, (_, i) => tinFromSequence(200_000_000 + i));
		const created: string[] = [];
		for (let i = 0; i < SUBSCRIPTIONS; i++) {
			const url = `http://127.0.0.1:9/${i}/`.padEnd(MAX_URL_LENGTH, "a");
			const answer = await http("POST", "/webhooks", { url, eventTypes: ["tin_operation.status_changed"], filter: { tins } }, worker);
			expect(answer.status).toBe(201);
			created.push(answer.body.id);
		}
		const list = await http("GET", "/webhooks?limit=500", undefined, worker);
		expect(list.status).toBe(200);
		expect(JSON.stringify(list.body).length).toBeGreaterThan(1.5 * NATS_MAX_PAYLOAD);
		expect(list.body.map((subscription: { id: string }) => subscription.id)).toEqual([...created].reverse());
		expect(list.body.every((subscription: object) => !("secret" in subscription))).toBe(true);

		// A limit that ends inside a page, and one at a page's end.
		for (const limit of [WEBHOOK_LIST_PAGE + 7, 2 * WEBHOOK_LIST_PAGE]) {
			const some = await http("GET", `/webhooks?limit=${limit}`, undefined, worker);
			expect(some.body.map((subscription: { id: string }) => subscription.id)).toEqual([...created].reverse().slice(0, limit));
		}
	});
});
