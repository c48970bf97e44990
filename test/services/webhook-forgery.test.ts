/**
 * A process on the bus without WEBHOOK_SECRETS_KEY (a gateway pod, say) cannot have a delivery
 * worker sign what it wants with a subscription's secret, nor sign again what the owners vouched
 * for once. Two nodes on one bus (Moleculer's in-memory transporter): the worker's, and one that
 * answers the owners' actions, honestly (it holds the key) or as a rogue. Found by the reviews of
 * 5ecaf59 and 7c77d02: the worker signed whatever lease and events the bus answered, then genuine
 * ones captured earlier.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { randomBytes } from "node:crypto";
import { ServiceBroker, type Context, type ServiceSchema } from "moleculer";
import { waitFor } from "../../devkit/process";
import { loadConfig } from "../../lib/config";
import { INTENT_EVENT_TYPE } from "../../lib/intents";
import type { StoredEvent } from "../../lib/store";
import { answerTag, eventsQuestion, holderWriteReply, leaseQuestion, newWebhookRecord, sealSecret, signPayload, webhookKeys, type WebhookRecord } from "../../lib/webhooks";
import { mempoolService } from "../../services/mempool.service";
import { webhookDeliveryService } from "../../services/webhook-delivery.service";
import { tempDir } from "../helpers/node";

const master = randomBytes(32);
const keys = webhookKeys([master]);
const event: StoredEvent = { seq: 1, subject: "int_1", type: INTENT_EVENT_TYPE, at: new Date().toISOString(), data: { state: "CONFIRMED", view: { id: "int_1", amount: "999999999999" } } };

/** A receiver that keeps what it is sent. */
async function receiver() {
	const got: { headers: http.IncomingHttpHeaders; body: string }[] = [];
	const server = http.createServer((req, res) => {
		let body = "";
		req.on("data", chunk => (body += chunk));
		req.on("end", () => {
			got.push({ headers: req.headers, body });
			res.writeHead(204).end();
		});
	});
	await new Promise<void>(resolve => server.listen(0, "127.0.0.1", resolve));
	return { got, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/in`, close: () => server.close() };
}

/** How the node answering in the owners' name makes its answers: with the key, or as a rogue. */
interface Answers {
	/** The lease's tag for a claim: a key holder's, or what the rogue has. */
	leaseTag(question: ReturnType<typeof leaseQuestion>, lease: { subscription: WebhookRecord; leaseTtlMs: number }): string | undefined;
	/** A page's tag for a read. */
	pageTag(question: ReturnType<typeof eventsQuestion>, events: StoredEvent[]): string | undefined;
}

const honest: Answers = {
	leaseTag: (question, lease) => answerTag(keys.leases, question, lease),
	pageTag: (question, events) => answerTag(keys.events, question, events)
};

/** The owners' actions a worker calls, answering one lease of `subscription` (of `leaseTtlMs`) and a log of one event. */
function owners(subscription: WebhookRecord, answers: Answers, leaseTtlMs = 30_000): ServiceSchema[] {
	let leased = false;
	return [
		{
			name: "webhooks",
			actions: {
				claim: (ctx: Context<{ leasedBy: string; nonce: string }>) => {
					if (leased) return [];
					leased = true;
					const lease = { subscription: { ...subscription, leasedBy: ctx.params.leasedBy }, leaseTtlMs: 30_000 };
					return [{ ...lease, leaseTtlMs, tag: answers.leaseTag(leaseQuestion(ctx.params.leasedBy, ctx.params.nonce), lease) }];
				},
				advance: (ctx: Context<{ version: number; nonce: string }>) => holderWriteReply(keys, "advance", ctx.params.nonce, ctx.params.version + 1),
				fail: (ctx: Context<{ nonce: string }>) => holderWriteReply(keys, "fail", ctx.params.nonce, null),
				release: (ctx: Context<{ nonce: string }>) => holderWriteReply(keys, "release", ctx.params.nonce, true)
			}
		},
		{
			name: "mempool",
			actions: {
				latestEvent: () => event,
				taggedEvents: (ctx: Context<{ after: number; limit: number; nonce: string }>) => {
					const events = ctx.params.after < 1 ? [event] : [];
					return { events, tag: answers.pageTag(eventsQuestion("intents", ctx.params.after, ctx.params.limit, ctx.params.nonce), events) };
				}
			}
		}
	];
}

/** The deliveries among `got` that check with `secret`: what the subscriber takes as the Node's word. */
const signedWith = (secret: string, got: { headers: http.IncomingHttpHeaders; body: string }[]) =>
	got.filter(({ headers, body }) => headers["webhook-signature"] === signPayload(secret, String(headers["webhook-id"]), Number(headers["webhook-timestamp"]), body));

/** Runs a worker beside `services` until it delivered to `victim` or 1.5 s passed; answers what `victim` got signed with `secret`. */
async function deliveredWith(services: ServiceSchema[], victim: Awaited<ReturnType<typeof receiver>>, secret: string, expectDelivery: boolean) {
	const namespace = `forgery${process.pid}${Math.floor(Math.random() * 1e6)}`;
	const worker = new ServiceBroker({ logger: false, nodeID: "intake", namespace, transporter: "Fake" });
	const other = new ServiceBroker({ logger: false, nodeID: "other", namespace, transporter: "Fake" });
	for (const service of services) other.createService(service);
	worker.createService(webhookDeliveryService(loadConfig({ DATA_DIR: tempDir(), SWEEP_INTERVAL_MS: "50", WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOK_SECRETS_KEY: master.toString("base64") })));
	await other.start();
	await worker.start();
	const before = victim.got.length;
	try {
		if (expectDelivery) await waitFor(() => victim.got.length > before, 5000, "the delivery");
		else await new Promise(resolve => setTimeout(resolve, 1500));
		return signedWith(secret, victim.got.slice(before)).map(delivery => JSON.parse(delivery.body).data.view.amount);
	} finally {
		await Promise.all([worker.stop(), other.stop()]);
	}
}

/** A subscription as its owner stores it and leases it: the secret sealed for it. */
function subscriptionOf(url: string): { record: WebhookRecord; secret: string } {
	const record = newWebhookRecord({ url, eventTypes: [INTENT_EVENT_TYPE] }, { intents: 0, tin_operations: null }, new Date());
	return { record: { ...record, secret: sealSecret(record.secret, keys.sealing, record) }, secret: record.secret };
}

let victim: Awaited<ReturnType<typeof receiver>>;
beforeAll(async () => (victim = await receiver()));
afterAll(() => victim.close());

test("control: from key holders, the worker delivers (so the refusals below can fail)", async () => {
	const { record, secret } = subscriptionOf(victim.url);
	expect(await deliveredWith(owners(record, honest), victim, secret, true)).toEqual(["999999999999"]);
});

test("events a rogue answers in the event owner's name, without the key, are not signed", async () => {
	const { record, secret } = subscriptionOf(victim.url);
	expect(await deliveredWith(owners(record, { ...honest, pageTag: () => randomBytes(32).toString("base64") }), victim, secret, false)).toEqual([]);
});

test("a lease a rogue answers without the key is not acted on, however genuine its record (sealed secret, URL)", async () => {
	const { record, secret } = subscriptionOf(victim.url);
	expect(await deliveredWith(owners(record, { ...honest, leaseTag: () => undefined }), victim, secret, false)).toEqual([]);
});

test("genuine answers captured earlier pass for no other read: a page or a lease tagged for another nonce is refused", async () => {
	const { record, secret } = subscriptionOf(victim.url);
	const captured = { nonce: "an-earlier-read-nonce" };
	const replaying: Answers = {
		leaseTag: (question, lease) => answerTag(keys.leases, { ...question, ...captured }, lease),
		pageTag: (question, events) => answerTag(keys.events, { ...question, ...captured }, events)
	};
	expect(await deliveredWith(owners(record, { ...honest, pageTag: replaying.pageTag }), victim, secret, false)).toEqual([]);
	expect(await deliveredWith(owners(record, { ...honest, leaseTag: replaying.leaseTag }), victim, secret, false)).toEqual([]);
});

test("a genuine lease relayed with another length (which would let the worker sign past its lease, beside the next holder) is not acted on", async () => {
	const { record, secret } = subscriptionOf(victim.url);
	expect(await deliveredWith(owners(record, honest, 1e9), victim, secret, false)).toEqual([]);
});

test("an event owner answers a tagged read of its whole log only: no subject filter a relay could add to skip events", async () => {
	const broker = new ServiceBroker({ logger: false });
	broker.createService(mempoolService(loadConfig({ DATA_DIR: tempDir(), WEBHOOK_SECRETS_KEY: master.toString("base64") })));
	await broker.start();
	try {
		const read = { after: 0, limit: 10, nonce: "a-nonce-of-16-chars" };
		expect(await broker.call("mempool.taggedEvents", read)).toEqual({ events: [], tag: answerTag(keys.events, eventsQuestion("intents", 0, 10, read.nonce), []) });
		await expect(broker.call("mempool.taggedEvents", { ...read, subject: "int_5" })).rejects.toMatchObject({ type: "VALIDATION_ERROR" });
	} finally {
		await broker.stop();
	}
});
