/**
 * GET /webhooks with the subscriptions' owner in another process, over a real nats-server whose
 * message limit is smaller than the whole list: the gateway joins the owner's pages. In one
 * message, a worker-key holder's long urls and TIN filters made the list fail once it outgrew the
 * bus's limit (NATS's default is 1 MB).
 */
import { tinFromSequence } from "../../lib/tin";
import { MAX_FILTER_TINS, MAX_URL_LENGTH, WEBHOOK_LIST_PAGE } from "../../lib/webhooks";
import { natsServerAvailable } from "../../devkit/cluster";
import { newRoute, writeSeedFile } from "../helpers/fixtures";
import { httpClient, tempDir, worker, type Http } from "../helpers/node";
import { startSplitNodes, type SplitNodes } from "../helpers/split-nodes";

// In CI a missing nats-server is a failure, not a skip (.ci/run installs it).
const describeWithNats = natsServerAvailable || process.env.CI ? describe : describe.skip;
const NATS_MAX_PAYLOAD = 128 * 1024;
const SUBSCRIPTIONS = 60;

describeWithNats("GET /webhooks across the bus", () => {
	let nodes: SplitNodes;
	let http: Http;

	beforeAll(async () => {
		const ownersDir = tempDir();
		nodes = await startSplitNodes({
			namespace: "whlist",
			natsMaxPayload: NATS_MAX_PAYLOAD,
			owners: { DATA_DIR: ownersDir, SERVICES: "mempool,crankers,tin,webhooks", REGISTRY_SEED_FILE: writeSeedFile(ownersDir, [newRoute()]), WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOKS_MAX: String(SUBSCRIPTIONS) },
			gateway: { SERVICES: "api" },
			waitFor: ["webhooks", "mempool", "tin"]
		});
		http = httpClient(nodes.url);
	}, 40_000);
	afterAll(() => nodes?.stop());

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
