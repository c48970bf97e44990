/**
 * Webhooks over real HTTP: subscriptions through the real gateway, deliveries to a real receiver
 * (node:http) that verifies every one with the Standard Webhooks reference library; retries until
 * a 2xx, disabling past the retry window, a process killed (SIGKILL) during a delivery, two
 * delivery workers against one owner, and the SSRF rule at subscription and at delivery.
 */
import Database from "better-sqlite3";
import path from "node:path";
import { randomBytes } from "node:crypto";
import http, { type IncomingMessage } from "node:http";
import net, { type AddressInfo } from "node:net";
import type { ServiceBroker } from "moleculer";
import { Webhook } from "standardwebhooks";
import { NatsServer, groupSecrets, natsServerAvailable } from "../../devkit/cluster";
import { freePort, waitFor, type ScriptProcess } from "../../devkit/process";
import { BUS_GROUPS, busGroupServing, busNodeId } from "../../lib/bus-groups";
import { loadConfig } from "../../lib/config";
import type { GenesisRoute } from "../../lib/registry";
import { loadOrCreateAuthorityKeypair } from "../../lib/secrets";
import { createNode, stopNode } from "../../services";
import { newRoute, newWallet, signedIntent, signedTinOperation, writeSeedFile, type Wallet } from "../helpers/fixtures";
import { API_KEY, httpClient, spawnService, startNode, tempDir, worker, type Http, type TestNode } from "../helpers/node";

jest.setTimeout(60_000);

const INTENT = "intent.status_changed";
const OPERATION = "tin_operation.status_changed";

interface Received {
	path: string;
	webhookId: string;
	body: { type: string; timestamp: string; data: any };
	status: number;
}

/**
 * A webhook receiver: verifies every request with the subscription's secret (a request that does
 * not verify is recorded and fails the suite), answers what `answer` says, and records how many
 * requests of one subscription (path) were in flight at once.
 */
class Receiver {
	readonly received: Received[] = [];
	readonly unverified: string[] = [];
	readonly secrets = new Map<string, string>();
	readonly maxInFlight = new Map<string, number>();
	private readonly inFlight = new Map<string, number>();
	private server!: http.Server;
	/**
	 * The status to answer (after `delayMs`); "hold" to answer nothing until the connection goes;
	 * "trickle" to answer 500 and send its body a byte every 200 ms, never ending it.
	 */
	answer: (path: string, webhookId: string) => number | "hold" | "trickle" = () => 200;
	delayMs = 0;
	onHold: () => void = () => {};
	url = "";

	async start(): Promise<this> {
		this.server = http.createServer((req, res) => void this.handle(req, res));
		await new Promise<void>(resolve => this.server.listen(0, "127.0.0.1", resolve));
		this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
		return this;
	}

	stop(): Promise<void> {
		this.server.closeAllConnections();
		return new Promise(resolve => this.server.close(() => resolve()));
	}

	/** 2xx deliveries to `path`, in the order they came. */
	delivered(path: string): Received[] {
		return this.received.filter(r => r.path === path && r.status < 300);
	}

	private async handle(req: IncomingMessage, res: http.ServerResponse): Promise<void> {
		const path = req.url ?? "";
		const inFlight = (this.inFlight.get(path) ?? 0) + 1;
		this.inFlight.set(path, inFlight);
		this.maxInFlight.set(path, Math.max(this.maxInFlight.get(path) ?? 0, inFlight));
		let text = "";
		for await (const chunk of req) text += chunk;
		const webhookId = String(req.headers["webhook-id"]);
		try {
			const secret = this.secrets.get(path);
			if (!secret) throw new Error("no secret for this path");
			new Webhook(secret).verify(text, req.headers as Record<string, string>);
			if (req.headers["content-type"] !== "application/json" || req.method !== "POST") throw new Error(`${req.method} ${req.headers["content-type"]}`);
		} catch (err) {
			this.unverified.push(`${path} ${webhookId}: ${(err as Error).message}`);
		}
		const status = this.answer(path, webhookId);
		if (status === "hold") {
			this.onHold();
			return;
		}
		if (status === "trickle") {
			res.writeHead(500, { "content-type": "text/plain" }).write("slow ");
			const trickle = setInterval(() => res.write("x"), 200);
			res.on("close", () => clearInterval(trickle));
			return;
		}
		if (this.delayMs) await new Promise(resolve => setTimeout(resolve, this.delayMs));
		this.inFlight.set(path, (this.inFlight.get(path) ?? 1) - 1);
		this.received.push({ path, webhookId, body: JSON.parse(text), status });
		res.writeHead(status, { "content-type": "text/plain" }).end(status < 300 ? "ok" : "receiver says no");
	}
}

async function subscribe(http: Http, receiver: Receiver, path: string, body: Record<string, unknown>): Promise<{ id: string; secret: string; cursors: Record<string, number> }> {
	const created = await http("POST", "/webhooks", { url: receiver.url + path, ...body }, worker);
	expect(created.status).toBe(201);
	receiver.secrets.set(path, created.body.secret);
	return created.body;
}

/** The subscription as `GET /webhooks/{id}` shows it once its first failed attempt is recorded. */
function afterFirstFailure(http: Http, id: string, what: string): Promise<any> {
	return waitFor(
		async () => {
			const { body } = await http("GET", `/webhooks/${id}`, undefined, worker);
			return body.failures.length > 0 && body;
		},
		10_000,
		what
	);
}

const seqOf = (webhookId: string) => Number(webhookId.split("_").pop());

async function submitIntent(http: Http, sender: Wallet, route: GenesisRoute): Promise<string> {
	const created = await http("POST", "/intents", signedIntent(sender, route));
	expect(created.status).toBe(201);
	return created.body.id;
}

/** The value of a series of a Prometheus text, summed over the nodes. */
function sample(text: string, series: string): number {
	return text
		.split("\n")
		.filter(line => line.startsWith(series.replace(/\}$/, "")))
		.reduce((sum, line) => sum + Number(line.split(" ").pop()), 0);
}

describe("webhooks (one node, WEBHOOK_ALLOW_PRIVATE for a local receiver)", () => {
	const route = newRoute();
	const other = newRoute();
	const owner = newWallet();
	const tinRoute = newRoute({ ownerWallet: owner.address });
	const alice = newWallet();
	const bob = newWallet();
	let node: TestNode;
	let receiver: Receiver;

	beforeAll(async () => {
		const dir = tempDir();
		node = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dir, [route, other, tinRoute]), WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOK_RETRY_BASE_MS: "50" }, dir);
		receiver = await new Receiver().start();
	});
	afterAll(async () => {
		await node.stop();
		await receiver.stop();
	});
	afterEach(() => expect(receiver.unverified).toEqual([]));

	it("subscribes with 201 and the secret once; delivers from then on, in order, signed, once each", async () => {
		const before = await submitIntent(node.http, alice, route);
		const sub = await subscribe(node.http, receiver, "/all", { eventTypes: [INTENT, OPERATION] });
		expect(sub).toMatchObject({ id: expect.stringMatching(/^wh_[0-9a-f]{32}$/), secret: expect.stringMatching(/^whsec_/), state: "enabled", delivered: 0, retry: null, failures: [] });
		expect(Buffer.from(sub.secret.slice(6), "base64").length).toBeGreaterThanOrEqual(24);
		expect(sub.cursors.intents).toBeGreaterThanOrEqual(1);

		const ids = [await submitIntent(node.http, alice, route), await submitIntent(node.http, bob, other)];
		const operation = await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "update", tin: tinRoute.tin }));
		expect(operation.status).toBe(201);

		const delivered = await waitFor(() => receiver.delivered("/all").length >= 3 && receiver.delivered("/all"), 10_000, "three deliveries");
		const intents = delivered.filter(d => d.body.type === INTENT);
		expect(intents.map(d => d.body.data.view.id)).toEqual(ids);
		expect(intents.map(d => d.body.data.view.id)).not.toContain(before);
		// The id is the event's, one per event, in the order of its stream.
		expect(intents.map(d => d.webhookId)).toEqual([`evt_intents_${sub.cursors.intents + 1}`, `evt_intents_${sub.cursors.intents + 2}`]);
		expect(intents[0].body).toEqual({ type: INTENT, timestamp: expect.any(String), data: { previousState: null, state: "VERIFIED", view: expect.objectContaining({ id: ids[0], senderWallet: alice.address }) } });
		const [op] = delivered.filter(d => d.body.type === OPERATION);
		expect(op.webhookId).toMatch(/^evt_tin_operations_\d+$/);
		expect(op.body.data).toMatchObject({ previousState: null, state: "PENDING_VERIFICATION", view: { id: operation.body.id, tin: tinRoute.tin } });
		await new Promise(resolve => setTimeout(resolve, 500));
		expect(receiver.delivered("/all")).toHaveLength(3);

		const read = await node.http("GET", `/webhooks/${sub.id}`, undefined, worker);
		expect(read.status).toBe(200);
		expect(read.body).toMatchObject({ id: sub.id, state: "enabled", delivered: 3, retry: null, cursors: { intents: sub.cursors.intents + 2 } });
		expect(read.body).not.toHaveProperty("secret");
		const list = await node.http("GET", "/webhooks?limit=10", undefined, worker);
		expect(list.body.map((s: { id: string }) => s.id)).toContain(sub.id);
		expect(JSON.stringify([read.body, list.body])).not.toContain(sub.secret.slice(6));
	});

	it("takes only what the filter names: one sender's intents, or intents and operations of some TINs", async () => {
		const bySender = await subscribe(node.http, receiver, "/alice", { eventTypes: [INTENT], filter: { senderWallet: alice.address } });
		const byTin = await subscribe(node.http, receiver, "/tin", { eventTypes: [INTENT, OPERATION], filter: { tins: [tinRoute.tin] } });
		const aliceIntent = await submitIntent(node.http, alice, route);
		await submitIntent(node.http, bob, route);
		const toTin = await submitIntent(node.http, bob, tinRoute);
		const operation = await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "update", tin: tinRoute.tin }));
		await waitFor(() => receiver.delivered("/alice").length >= 1 && receiver.delivered("/tin").length >= 2, 10_000, "filtered deliveries");
		await new Promise(resolve => setTimeout(resolve, 500));
		expect(receiver.delivered("/alice").map(d => d.body.data.view.id)).toEqual([aliceIntent]);
		expect(receiver.delivered("/tin").map(d => d.body.data.view.id)).toEqual([toTin, operation.body.id]);
		// The cursor moved past what the filter left out, so no later pass reads those events again.
		const head = (await node.http("GET", `/webhooks/${bySender.id}`, undefined, worker)).body.cursors.intents;
		expect(head).toBe(bySender.cursors.intents + 3);
		expect((await node.http("GET", `/webhooks/${byTin.id}`, undefined, worker)).body.delivered).toBe(2);
	});

	it("a subscription whose filter takes none of the new events rests between leases: not leased, advanced and released at every event (a review's replay)", async () => {
		const nobody = newWallet();
		const idle = await subscribe(node.http, receiver, "/nobody", { eventTypes: [INTENT], filter: { senderWallet: nobody.address } });
		const writes = () => {
			const db = new Database(path.join(node.dataDir, "webhooks.sqlite"), { readonly: true });
			try {
				return (JSON.parse((db.prepare("SELECT doc FROM webhooks WHERE id = ?").get(idle.id) as { doc: string }).doc) as { version: number }).version;
			} finally {
				db.close();
			}
		};
		const before = writes();
		// Forty intents of others over two seconds or more, one at a time.
		const startedAt = Date.now();
		for (let i = 0; i < 40; i++) {
			await submitIntent(node.http, bob, route);
			await new Promise(resolve => setTimeout(resolve, 50));
		}
		const seconds = (Date.now() - startedAt) / 1000;
		const caughtUp = await waitFor(async () => {
			const read = (await node.http("GET", `/webhooks/${idle.id}`, undefined, worker)).body;
			return read.cursors.intents >= idle.cursors.intents + 40 && read;
		}, 10_000, "the cursor past the forty");
		expect(caughtUp).toMatchObject({ delivered: 0, deferred: 0 });
		// A rest a second at most, each of five writes at most (lease, advance, release; then a lease that
		// finds nothing new and its release), where every event cost three.
		const busy = writes() - before;
		expect(busy).toBeLessThanOrEqual(5 * Math.ceil(seconds + 2));
		// Once the events stop, it is left idle: a rest ends in one lease that finds nothing, then none.
		await new Promise(resolve => setTimeout(resolve, 2500));
		const settled = writes();
		await new Promise(resolve => setTimeout(resolve, 3000));
		expect(writes()).toBe(settled);
		expect(receiver.delivered("/nobody")).toHaveLength(0);
	});

	it("retries a failing receiver with backoff, the same webhook-id each time, then delivers every event once, in order", async () => {
		let failures = 3;
		receiver.answer = p => (p === "/flaky" && failures-- > 0 ? 500 : 200);
		const sub = await subscribe(node.http, receiver, "/flaky", { eventTypes: [INTENT] });
		const ids = [await submitIntent(node.http, alice, route), await submitIntent(node.http, alice, route), await submitIntent(node.http, bob, route)];
		await waitFor(() => receiver.delivered("/flaky").length >= 3, 15_000, "deliveries after the failures");
		await new Promise(resolve => setTimeout(resolve, 500));
		const requests = receiver.received.filter(r => r.path === "/flaky");
		const first = `evt_intents_${sub.cursors.intents + 1}`;
		expect(requests.map(r => [r.webhookId, r.status])).toEqual([
			[first, 500],
			[first, 500],
			[first, 500],
			[first, 200],
			[`evt_intents_${sub.cursors.intents + 2}`, 200],
			[`evt_intents_${sub.cursors.intents + 3}`, 200]
		]);
		expect(receiver.delivered("/flaky").map(d => d.body.data.view.id)).toEqual(ids);
		const read = (await node.http("GET", `/webhooks/${sub.id}`, undefined, worker)).body;
		expect(read).toMatchObject({ state: "enabled", delivered: 3, retry: null });
		expect(read.failures.map((f: { webhookId: string; attempt: number; status: number }) => [f.webhookId, f.attempt, f.status])).toEqual([
			[first, 1, 500],
			[first, 2, 500],
			[first, 3, 500]
		]);
		expect(read.failures[0].error).toMatch(/^HTTP 500: receiver says no$/);
		receiver.answer = () => 200;
	});

	it("counts deliveries and their lag in the Prometheus text", async () => {
		const text = await (await fetch(`${node.url}/metrics?format=prometheus`)).text();
		expect(sample(text, 'scs_webhook_deliveries_total{outcome="delivered"')).toBeGreaterThanOrEqual(9);
		expect(sample(text, 'scs_webhook_deliveries_total{outcome="failed"')).toBe(3);
		expect(sample(text, "scs_webhook_delivery_lag_seconds_count")).toBeGreaterThanOrEqual(9);
		expect(text).toMatch(/^# TYPE scs_webhook_delivery_lag_seconds histogram$/m);
	});

	it("deletes: 200 with the subscription as it was, then 404, and nothing more is delivered", async () => {
		const sub = await subscribe(node.http, receiver, "/deleted", { eventTypes: [INTENT] });
		const removed = await node.http("DELETE", `/webhooks/${sub.id}`, undefined, worker);
		expect(removed.status).toBe(200);
		expect(removed.body).toMatchObject({ id: sub.id });
		expect(removed.body).not.toHaveProperty("secret");
		expect((await node.http("GET", `/webhooks/${sub.id}`, undefined, worker)).status).toBe(404);
		expect((await node.http("DELETE", `/webhooks/${sub.id}`, undefined, worker)).status).toBe(404);
		expect((await node.http("GET", "/webhooks/wh_nope", undefined, worker)).status).toBe(404);
		await submitIntent(node.http, alice, route);
		await new Promise(resolve => setTimeout(resolve, 500));
		expect(receiver.received.filter(r => r.path === "/deleted")).toEqual([]);
	});

	it("refuses bad input with 422 naming the field, and answers 401 without a key, 403 with a wrong one", async () => {
		const url = `${receiver.url}/x`;
		const cases: [Record<string, unknown>, string][] = [
			[{ eventTypes: [INTENT] }, "url"],
			[{ url, eventTypes: [] }, "eventTypes"],
			[{ url, eventTypes: ["intent.created"] }, "eventTypes[0]"],
			[{ url, eventTypes: [INTENT, INTENT] }, "eventTypes"],
			[{ url, eventTypes: [INTENT], secret: "whsec_mine" }, "secret"],
			[{ url: "ftp://example.com/", eventTypes: [INTENT] }, "url"],
			[{ url: "http://user:pass@example.com/", eventTypes: [INTENT] }, "url"],
			[{ url: "not a url", eventTypes: [INTENT] }, "url"],
			// 2,000 characters as sent, 18,000 once percent-encoded as stored and requested (a review's replay: stored).
			[{ url: `http://1.1.1.1/${"€".repeat(2000)}`, eventTypes: [INTENT] }, "url"],
			[{ url, eventTypes: [INTENT], filter: {} }, "filter"],
			[{ url, eventTypes: [INTENT], filter: { senderWallet: alice.address, tins: [route.tin] } }, "filter"],
			[{ url, eventTypes: [INTENT, OPERATION], filter: { senderWallet: alice.address } }, "filter"],
			[{ url, eventTypes: [INTENT], filter: { senderWallet: "not-base58!" } }, "filter.senderWallet"],
			[{ url, eventTypes: [INTENT], filter: { tins: ["1234567890"] } }, "filter.tins"],
			// null is no value: it must not stand for "every TIN", nor store a filter that takes nothing.
			[{ url, eventTypes: [INTENT], filter: { tins: null } }, "filter"],
			[{ url, eventTypes: [INTENT], filter: { senderWallet: null } }, "filter"],
			[{ url, eventTypes: [INTENT], filter: { senderWallet: null, tins: null } }, "filter"]
		];
		for (const [body, field] of cases) {
			const answer = await node.http("POST", "/webhooks", body, worker);
			expect({ body, status: answer.status, type: answer.body.type }).toEqual({ body, status: 422, type: "VALIDATION_ERROR" });
			expect({ body, fields: answer.body.data.map((item: { field: string }) => item.field) }).toEqual({ body, fields: expect.arrayContaining([field]) });
		}
		// What GET answers, sent back: a null filter is none; a null member beside a set one is left out.
		const unfiltered = await node.http("POST", "/webhooks", { url, eventTypes: [INTENT], filter: null }, worker);
		expect({ status: unfiltered.status, filter: unfiltered.body.filter }).toEqual({ status: 201, filter: null });
		const byTin = await node.http("POST", "/webhooks", { url, eventTypes: [INTENT], filter: { senderWallet: null, tins: [route.tin] } }, worker);
		expect({ status: byTin.status, filter: byTin.body.filter }).toEqual({ status: 201, filter: { tins: [route.tin] } });
		for (const { body } of [unfiltered, byTin]) expect((await node.http("DELETE", `/webhooks/${body.id}`, undefined, worker)).status).toBe(200);
		const valid = { url, eventTypes: [INTENT] };
		expect((await node.http("POST", "/webhooks", valid)).status).toBe(401);
		expect((await node.http("POST", "/webhooks", valid, { "x-api-key": "wrong-key-0123456789" })).status).toBe(403);
		expect((await node.http("GET", "/webhooks")).status).toBe(401);
		expect((await node.http("GET", "/webhooks/wh_x", undefined, { "x-api-key": "wrong-key-0123456789" })).status).toBe(403);
		expect((await node.http("DELETE", "/webhooks/wh_x")).status).toBe(401);
	});
});

describe("slow receivers", () => {
	it("do not hold up a quick one: nine subscriptions, eight of them answering in 1.5 s, and the ninth gets its event at once", async () => {
		const route = newRoute();
		const dir = tempDir();
		const node = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dir, [route]), WEBHOOK_ALLOW_PRIVATE: "true" }, dir);
		const slow = await new Receiver().start();
		const quick = await new Receiver().start();
		slow.delayMs = 1500;
		try {
			for (let i = 0; i < 8; i++) await subscribe(node.http, slow, `/slow${i}`, { eventTypes: [INTENT] });
			await subscribe(node.http, quick, "/quick", { eventTypes: [INTENT] });
			const sender = newWallet();
			// Two events: the slow ones are busy with the first while the second comes.
			await submitIntent(node.http, sender, route);
			await waitFor(() => quick.delivered("/quick").length >= 1 || null, 5000, "the first quick delivery");
			const second = Date.now();
			await submitIntent(node.http, sender, route);
			await waitFor(() => quick.delivered("/quick").length >= 2 || null, 5000, "the second quick delivery");
			expect(Date.now() - second).toBeLessThan(1000);
			await waitFor(() => Array.from({ length: 8 }, (_, i) => slow.delivered(`/slow${i}`).length).every(n => n === 2) || null, 15_000, "every slow delivery");
			expect(slow.unverified).toEqual([]);
			expect(quick.unverified).toEqual([]);
		} finally {
			await node.stop();
			await slow.stop();
			await quick.stop();
		}
	});
});

/**
 * The failures recorded for `url` after its first failed attempt: on a node of its own, with 1 s
 * attempts and the retry far off, a subscription to intents and one intent.
 */
async function firstFailures(url: string): Promise<unknown[]> {
	const route = newRoute();
	const dir = tempDir();
	const node = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dir, [route]), WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOK_TIMEOUT_MS: "1000", WEBHOOK_RETRY_BASE_MS: "600000" }, dir);
	try {
		const created = await node.http("POST", "/webhooks", { url, eventTypes: [INTENT] }, worker);
		expect(created.status).toBe(201);
		await submitIntent(node.http, newWallet(), route);
		return (await afterFirstFailure(node.http, created.body.id, "the failed attempt")).failures;
	} finally {
		await node.stop();
	}
}

describe("a receiver that answers 500 and never ends its body", () => {
	it("is recorded with its status and what was read of its body, the attempt ended at WEBHOOK_TIMEOUT_MS", async () => {
		const receiver = await new Receiver().start();
		receiver.answer = () => "trickle";
		try {
			// Not "no answer within 1000 ms": the receiver answered, and its answer was a 500.
			expect(await firstFailures(`${receiver.url}/trickle`)).toEqual([expect.objectContaining({ attempt: 1, status: 500, error: expect.stringMatching(/^HTTP 500: slow x+$/) })]);
		} finally {
			await receiver.stop();
		}
	});
});

describe("a receiver that switches protocols (101)", () => {
	it("fails the attempt with that status: it never holds the delivery", async () => {
		const switching = net.createServer(socket => {
			socket.on("error", () => {});
			socket.once("data", () => socket.write("HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n"));
		});
		await new Promise<void>(resolve => switching.listen(0, "127.0.0.1", resolve));
		try {
			const failures = await firstFailures(`http://127.0.0.1:${(switching.address() as AddressInfo).port}/switch`);
			expect(failures).toEqual([expect.objectContaining({ attempt: 1, status: 101, error: "HTTP 101: a switch of protocols is not an answer" })]);
		} finally {
			switching.close();
		}
	});
});

describe("WEBHOOKS_MAX", () => {
	it("keeps at most that many subscriptions, five asked for at once: 409 LIMIT_REACHED past it, room again after a delete", async () => {
		const dir = tempDir();
		// A long commit window: the five creations' writes share commit groups, as under load.
		const node = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dir, [newRoute()]), WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOKS_MAX: "3", STORE_COMMIT_WINDOW_MS: "200" }, dir);
		try {
			const create = (i: number) => node.http("POST", "/webhooks", { url: `http://127.0.0.1:9/hook${i}`, eventTypes: [INTENT] }, worker);
			const answers = await Promise.all([0, 1, 2, 3, 4].map(create));
			expect(answers.map(answer => answer.status).sort()).toEqual([201, 201, 201, 409, 409]);
			for (const refused of answers.filter(answer => answer.status === 409)) expect(refused.body).toMatchObject({ type: "LIMIT_REACHED" });
			const kept = await node.http("GET", "/webhooks", undefined, worker);
			expect(kept.body).toHaveLength(3);
			expect((await node.http("DELETE", `/webhooks/${kept.body[0].id}`, undefined, worker)).status).toBe(200);
			expect((await create(5)).status).toBe(201);
			expect((await create(6)).status).toBe(409);
		} finally {
			await node.stop();
		}
	});
});

describe("a receiver failing past WEBHOOK_RETRY_FOR_MS", () => {
	it("disables the subscription; its failures stay readable, and nothing more is sent", async () => {
		const route = newRoute();
		const dir = tempDir();
		const node = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dir, [route]), WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOK_RETRY_BASE_MS: "20", WEBHOOK_RETRY_FOR_MS: "1500" }, dir);
		const receiver = await new Receiver().start();
		receiver.answer = () => 503;
		try {
			const sub = await subscribe(node.http, receiver, "/down", { eventTypes: [INTENT] });
			await submitIntent(node.http, newWallet(), route);
			const disabled = await waitFor(
				async () => {
					const read = (await node.http("GET", `/webhooks/${sub.id}`, undefined, worker)).body;
					return read.state === "disabled" && read;
				},
				15_000,
				"the subscription to be disabled"
			);
			const webhookId = `evt_intents_${sub.cursors.intents + 1}`;
			expect(disabled).toMatchObject({ delivered: 0, disabledAt: expect.any(String), disabledReason: expect.stringMatching(/WEBHOOK_RETRY_FOR_MS/), cursors: { intents: sub.cursors.intents } });
			expect(disabled.retry).toMatchObject({ webhookId, eventType: INTENT, nextAttemptAt: null, lastError: "HTTP 503: receiver says no" });
			expect(disabled.retry.attempts).toBeGreaterThanOrEqual(3);
			expect(disabled.failures.length).toBe(Math.min(disabled.retry.attempts, 20));
			expect(disabled.failures.every((f: { webhookId: string; status: number }) => f.webhookId === webhookId && f.status === 503)).toBe(true);
			// The last attempt came at the end of the window, not before it.
			expect(Date.parse(disabled.disabledAt) - Date.parse(disabled.retry.firstFailureAt)).toBeGreaterThanOrEqual(1500);
			expect(receiver.unverified).toEqual([]);

			const sent = receiver.received.length;
			expect(sent).toBe(disabled.retry.attempts);
			await submitIntent(node.http, newWallet(), route);
			await new Promise(resolve => setTimeout(resolve, 600));
			expect(receiver.received.length).toBe(sent);
			const text = await (await fetch(`${node.url}/metrics?format=prometheus`)).text();
			expect(sample(text, 'scs_webhook_deliveries_total{outcome="disabled"')).toBe(1);
			expect(sample(text, 'scs_webhook_deliveries_total{outcome="delivered"')).toBe(0);
		} finally {
			await node.stop();
			await receiver.stop();
		}
	});
});

describe("a store restored from a backup", () => {
	it("a log restored behind a subscription's cursor (its subscriptions copied later than the log: a review): at start the cursor goes back to where the restored log ended, and the events logged since are delivered", async () => {
		const route = newRoute();
		const dir = tempDir();
		const seed = writeSeedFile(dir, [route]);
		const receiver = await new Receiver().start();
		let node: TestNode | null = await startNode({ REGISTRY_SEED_FILE: seed, WEBHOOK_ALLOW_PRIVATE: "true" }, dir);
		try {
			const sub = await subscribe(node.http, receiver, "/restored", { eventTypes: [INTENT] });
			for (let i = 0; i < 3; i++) await submitIntent(node.http, newWallet(), route);
			await waitFor(() => receiver.delivered("/restored").length === 3, 10_000, "three deliveries");
			await node.stop();
			node = null;
			// The log as a backup had it, its events past the subscription's first gone, its cursor kept;
			// then one event logged after the restore, before the owners' check ran (a sweep's, say: a review).
			const first = sub.cursors.intents + 1;
			const db = new Database(path.join(dir, "mempool.sqlite"));
			try {
				expect(db.prepare("DELETE FROM intents__events WHERE seq > ?").run(first).changes).toBe(2);
				db.prepare("UPDATE intents__events SET at = ? WHERE seq = ?").run(new Date().toISOString(), first);
			} finally {
				db.close();
			}
			node = await startNode({ REGISTRY_SEED_FILE: seed, WEBHOOK_ALLOW_PRIVATE: "true" }, dir);
			await waitFor(() => receiver.delivered("/restored").filter(d => d.webhookId === `evt_intents_${first}`).length === 2, 10_000, "the event logged after the restore");
			const after = await submitIntent(node.http, newWallet(), route);
			const delivered = await waitFor(() => receiver.delivered("/restored").find(d => d.body.data.view.id === after), 10_000, "the event after the start");
			expect(delivered.webhookId).toBe(`evt_intents_${first + 1}`);
			expect(receiver.delivered("/restored")).toHaveLength(5);
		} finally {
			await node?.stop();
			await receiver.stop();
		}
	});
});

describe("SSRF: without WEBHOOK_ALLOW_PRIVATE", () => {
	let node: TestNode;
	beforeAll(async () => {
		node = await startNode();
	});
	afterAll(() => node.stop());

	it.each([
		"http://127.0.0.1/hook",
		"http://127.1:8080/",
		"http://2130706433/",
		"http://10.1.2.3/",
		"http://172.20.0.1/",
		"http://192.168.0.10/",
		"http://100.64.0.1/",
		"http://169.254.169.254/latest/meta-data/",
		"http://0.0.0.0/",
		"http://[::1]/",
		"http://[::]/",
		"http://[::ffff:127.0.0.1]/",
		"http://[fd00::1]/",
		"http://[fe80::1]/",
		"http://224.0.0.1/",
		"http://localhost:9/hook",
		"https://localhost/"
	])("refuses %s with 422 naming url", async url => {
		const answer = await node.http("POST", "/webhooks", { url, eventTypes: [INTENT] }, worker);
		expect(answer.status).toBe(422);
		expect(answer.body).toMatchObject({ type: "VALIDATION_ERROR", data: [{ field: "url", message: expect.stringMatching(/non-public/) }] });
	});

	it("checks again at every delivery: a subscription made while private addresses were allowed is refused once they are not", async () => {
		const route = newRoute();
		const dir = tempDir();
		const seed = writeSeedFile(dir, [route]);
		const receiver = await new Receiver().start();
		let allowing: TestNode | null = await startNode({ REGISTRY_SEED_FILE: seed, WEBHOOK_ALLOW_PRIVATE: "true" }, dir);
		let strict: TestNode | null = null;
		try {
			// localhost: a name, so the refusal is of what it resolves to, at the delivery.
			const port = new URL(receiver.url).port;
			const created = await allowing.http("POST", "/webhooks", { url: `http://localhost:${port}/rebound`, eventTypes: [INTENT] }, worker);
			expect(created.status).toBe(201);
			receiver.secrets.set("/rebound", created.body.secret);
			await allowing.stop();
			allowing = null;
			strict = await startNode({ REGISTRY_SEED_FILE: seed, WEBHOOK_RETRY_BASE_MS: "50" }, dir);
			await submitIntent(strict.http, newWallet(), route);
			const read = await afterFirstFailure(strict.http, created.body.id, "a refused delivery");
			expect(read.failures[0]).toMatchObject({ status: null, error: expect.stringMatching(/non-public/) });
			expect(receiver.received).toEqual([]);
		} finally {
			await allowing?.stop();
			await strict?.stop();
			await receiver.stop();
		}
	});
});

// In CI a missing nats-server is a failure, not a skip (.ci/run installs it).
const describeWithNats = natsServerAvailable || process.env.CI ? describe : describe.skip;
if (!natsServerAvailable) console.warn("Webhook tests with two delivery workers NOT RUN: nats-server is not installed.");

describeWithNats("two delivery workers against one owner, over NATS", () => {
	const namespace = `wh${process.pid}${Math.floor(Math.random() * 1e6)}`;
	const brokers: ServiceBroker[] = [];
	let nats: NatsServer;
	const authorityKeyFile = loadOrCreateAuthorityKeypair(null, tempDir()).source;
	const webhookSecretsKey = randomBytes(32).toString("base64");

	/** A broker of this test's cluster, on the real bus: what crosses it is serialized as in production. */
	async function broker(name: string, env: Record<string, string> & { SERVICES: string }): Promise<ServiceBroker> {
		const group = busGroupServing(env.SERVICES.split(","));
		const config = loadConfig({
			PORT: "0",
			NAMESPACE: namespace,
			TRANSPORTER: nats.url,
			...nats.credentials(group),
			NODE_AUTHORITY_KEYPAIR_PATH: authorityKeyFile,
			...groupSecrets(group, { webhookSecretsKey, workerApiKeys: API_KEY }),
			RATE_LIMIT_PER_MIN: "0",
			SWEEP_INTERVAL_MS: "200",
			LOG_LEVEL: "warn",
			WEBHOOK_ALLOW_PRIVATE: "true",
			...env
		});
		const started = createNode(config, { nodeID: busNodeId(group, name), logger: false, skipProcessEventRegistration: true });
		await started.start();
		brokers.push(started);
		return started;
	}
	beforeAll(async () => {
		nats = new NatsServer(await freePort(), { namespace });
		await nats.start();
	});
	afterAll(async () => {
		for (const started of brokers.reverse()) await stopNode(started);
		await nats?.stop();
	});

	it("never deliver one subscription's events concurrently, and deliver each event once", async () => {
		const route = newRoute();
		const dir = tempDir();
		// The deployment's groups (k8s/4*.yaml), the delivery workers two intake processes.
		await broker("owners", { DATA_DIR: dir, REGISTRY_SEED_FILE: writeSeedFile(dir, [route]), SERVICES: BUS_GROUPS.owners.join(",") });
		await broker("verifier", { DATA_DIR: tempDir(), SERVICES: "verifier" });
		const gateway = await broker("gateway", { DATA_DIR: tempDir(), SERVICES: "api,receiver,network" });
		const workers = [await broker("worker-a", { DATA_DIR: tempDir(), SERVICES: "webhook-delivery" }), await broker("worker-b", { DATA_DIR: tempDir(), SERVICES: "webhook-delivery" })];
		const api = gateway.getLocalService("api") as unknown as { server: { address(): AddressInfo } };
		const client = httpClient(`http://127.0.0.1:${api.server.address().port}`);
		const receiver = await new Receiver().start();
		receiver.delayMs = 20;
		try {
			// More subscriptions than one worker delivers at once (32): both must take some.
			const paths = Array.from({ length: 40 }, (_, i) => `/sub-${i}`);
			for (const p of paths) await subscribe(client, receiver, p, { eventTypes: [INTENT] });
			const senders = Array.from({ length: 4 }, () => newWallet());
			const ids: string[] = [];
			for (let i = 0; i < 12; i++) ids.push(await submitIntent(client, senders[i % 4], route));
			await waitFor(() => paths.every(p => receiver.delivered(p).length >= ids.length), 30_000, "every event to every subscription", 200);
			await new Promise(resolve => setTimeout(resolve, 500));
			for (const p of paths) {
				expect({ p, maxInFlight: receiver.maxInFlight.get(p) }).toEqual({ p, maxInFlight: 1 });
				expect({ p, ids: receiver.delivered(p).map(d => d.body.data.view.id) }).toEqual({ p, ids });
				const seqs = receiver.delivered(p).map(d => seqOf(d.webhookId));
				expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
			}
			expect(receiver.unverified).toEqual([]);
			// Both workers delivered: the exclusion was tested, not a lone worker.
			for (const w of workers) {
				const [family] = (await gateway.call("metrics.snapshot", { names: ["scs_webhook_deliveries_total"] }, { nodeID: w.nodeID })) as { values: { value: number; labels: { outcome: string } }[] }[];
				const delivered = family.values.find(v => v.labels.outcome === "delivered")?.value ?? 0;
				expect({ worker: w.nodeID, delivered: delivered > 0 }).toEqual({ worker: w.nodeID, delivered: true });
			}
		} finally {
			await receiver.stop();
		}
	});
});

describe("a process killed (SIGKILL) during a delivery", () => {
	it("delivers the event after the restart, from the durable cursor; the secret is never logged", async () => {
		const dir = tempDir();
		const route = newRoute();
		const env = {
			DATA_DIR: dir,
			WORKER_API_KEYS: API_KEY,
			REGISTRY_SEED_FILE: writeSeedFile(dir, [route]),
			LOG_LEVEL: "debug",
			RATE_LIMIT_PER_MIN: "0",
			SWEEP_INTERVAL_MS: "200",
			WEBHOOK_ALLOW_PRIVATE: "true",
			WEBHOOK_TIMEOUT_MS: "2000",
			WEBHOOK_RETRY_BASE_MS: "50"
		};
		const receiver = await new Receiver().start();
		const held = new Promise<void>(resolve => (receiver.onHold = resolve));
		receiver.answer = () => "hold";
		let first: { proc: ScriptProcess; url: string } | null = await spawnService(env);
		let second: { proc: ScriptProcess; url: string } | null = null;
		try {
			const sub = await subscribe(httpClient(first.url), receiver, "/crash", { eventTypes: [INTENT] });
			const id = await submitIntent(httpClient(first.url), newWallet(), route);
			await held;
			first.proc.child.kill("SIGKILL");
			await first.proc.exited;
			const firstLog = first.proc.output();
			first = null;
			receiver.answer = () => 200;

			second = await spawnService(env);
			// Once the dead worker's lease lapses (3 × WEBHOOK_TIMEOUT_MS), a worker of the new process takes it.
			const [delivery] = await waitFor(() => receiver.delivered("/crash").length > 0 && receiver.delivered("/crash"), 20_000, "the delivery after the restart");
			expect(delivery).toMatchObject({ webhookId: `evt_intents_${sub.cursors.intents + 1}`, body: { data: { view: { id } } } });
			const read = await waitFor(
				async () => {
					const body = (await httpClient(second!.url)("GET", `/webhooks/${sub.id}`, undefined, worker)).body;
					return body.delivered === 1 && body;
				},
				5000,
				"the cursor to move"
			);
			expect(read).toMatchObject({ cursors: { intents: sub.cursors.intents + 1 }, retry: null, failures: [] });
			await new Promise(resolve => setTimeout(resolve, 500));
			expect(receiver.delivered("/crash")).toHaveLength(1);
			expect(receiver.unverified).toEqual([]);
			// Debug logs of both processes: the requests, the calls, the deliveries; never the secret.
			const logs = firstLog + second.proc.output();
			expect(logs).toMatch(/POST \/webhooks 201/);
			expect(logs).not.toContain(sub.secret.slice("whsec_".length));
		} finally {
			first?.proc.child.kill("SIGKILL");
			if (second) {
				second.proc.child.kill("SIGTERM");
				await second.proc.exited;
			}
			await receiver.stop();
		}
	});
});
