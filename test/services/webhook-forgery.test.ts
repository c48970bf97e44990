/**
 * A process on the bus without WEBHOOK_SECRETS_KEY (a gateway pod, say) cannot have a delivery
 * worker sign what it wants with a subscription's secret. Three nodes on one bus (Moleculer's
 * in-memory transporter): the worker's, a node that answers owners' actions honestly (it holds the
 * key) and a rogue that answers some of them in the owners' name. Found by the review of 5ecaf59:
 * the worker signed whatever events, and whatever lease, the bus answered.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { randomBytes } from "node:crypto";
import { ServiceBroker, type Context, type ServiceSchema } from "moleculer";
import { waitFor } from "../../devkit/process";
import { loadConfig } from "../../lib/config";
import { INTENT_EVENT_TYPE } from "../../lib/intents";
import type { StoredEvent } from "../../lib/store";
import { eventPageTag, newWebhookRecord, sealSecret, signPayload, webhookKeys, type WebhookRecord } from "../../lib/webhooks";
import { webhookDeliveryService } from "../../services/webhook-delivery.service";
import { tempDir } from "../helpers/node";

const master = randomBytes(32);
const keys = webhookKeys(master);
const forged: StoredEvent = { seq: 1, subject: "int_forged", type: INTENT_EVENT_TYPE, at: new Date().toISOString(), data: { state: "CONFIRMED", view: { id: "int_forged", amount: "999999999999" } } };

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

/** The deliveries among `got` that check with `secret`: what the subscriber takes as the Node's word. */
const signedWith = (secret: string, got: { headers: http.IncomingHttpHeaders; body: string }[]) =>
	got.filter(({ headers, body }) => headers["webhook-signature"] === signPayload(secret, String(headers["webhook-id"]), Number(headers["webhook-timestamp"]), body));

/** A subscriptions' owner answering one lease of `subscription`, and the holder's writes. */
function subscriptionsOwner(subscription: WebhookRecord): ServiceSchema {
	let leased = false;
	return {
		name: "webhooks",
		actions: {
			claim: () => (leased ? [] : ((leased = true), [{ subscription, leaseTtlMs: 30_000 }])),
			advance: (ctx: Context<{ version: number }>) => ctx.params.version + 1,
			fail: () => null,
			release: () => true
		}
	};
}

/** An intents' owner whose log is `[forged]`, its pages tagged with `tagKey` (a rogue has none: a made-up tag). */
function intentsOwner(tagKey: Buffer | null): ServiceSchema {
	return {
		name: "mempool",
		actions: {
			latestEvent: () => forged,
			taggedEvents: (ctx: Context<{ after: number }>) => {
				const events = ctx.params.after < 1 ? [forged] : [];
				return { events, tag: tagKey ? eventPageTag(tagKey, "intents", ctx.params.after, events) : randomBytes(32).toString("base64") };
			}
		}
	};
}

async function onOneBus(services: ServiceSchema[]) {
	const namespace = `forgery${process.pid}${Math.floor(Math.random() * 1e6)}`;
	const worker = new ServiceBroker({ logger: false, nodeID: "intake", namespace, transporter: "Fake" });
	const other = new ServiceBroker({ logger: false, nodeID: "other", namespace, transporter: "Fake" });
	for (const service of services) other.createService(service);
	worker.createService(webhookDeliveryService(loadConfig({ DATA_DIR: tempDir(), SWEEP_INTERVAL_MS: "50", WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOK_SECRETS_KEY: master.toString("base64") })));
	await other.start();
	await worker.start();
	return { stop: () => Promise.all([worker.stop(), other.stop()]) };
}

/** A subscription as its owner stores it and leases it: the secret sealed for it. */
function subscriptionOf(url: string): { record: WebhookRecord; secret: string } {
	const record = newWebhookRecord({ url, eventTypes: [INTENT_EVENT_TYPE] }, { intents: 0, tin_operations: null }, new Date());
	return { record: { ...record, secret: sealSecret(record.secret, keys.sealing, record) }, secret: record.secret };
}

test("events the rogue answers in the intents' owner's name are not signed; the same events from a key holder are (the test can fail)", async () => {
	const victim = await receiver();
	try {
		for (const [tagKey, expected] of [
			[null, 0],
			[keys.events, 1]
		] as const) {
			const { record, secret } = subscriptionOf(victim.url);
			const bus = await onOneBus([subscriptionsOwner(record), intentsOwner(tagKey)]);
			try {
				if (expected) await waitFor(() => victim.got.length > 0, 5000, "the delivery");
				else await new Promise(resolve => setTimeout(resolve, 1500));
				expect(signedWith(secret, victim.got).map(delivery => JSON.parse(delivery.body).data.view.amount)).toEqual(expected ? ["999999999999"] : []);
			} finally {
				await bus.stop();
			}
		}
	} finally {
		victim.close();
	}
});

test("a lease the rogue makes of a victim's sealed secret, pointed at its own receiver, gets nothing signed; the owner's own lease does (the test can fail)", async () => {
	const [victim, attacker] = [await receiver(), await receiver()];
	try {
		const { record, secret } = subscriptionOf(victim.url);
		for (const [lease, expected] of [
			// The sealed secret as the real webhooks.claim answers any caller, in a lease of the rogue's making.
			[{ ...record, url: attacker.url }, 0],
			[record, 1]
		] as const) {
			const bus = await onOneBus([subscriptionsOwner(lease), intentsOwner(keys.events)]);
			try {
				if (expected) await waitFor(() => victim.got.length > 0, 5000, "the delivery");
				else await new Promise(resolve => setTimeout(resolve, 1500));
				expect(signedWith(secret, attacker.got)).toEqual([]);
				expect(signedWith(secret, victim.got)).toHaveLength(expected);
			} finally {
				await bus.stop();
			}
		}
	} finally {
		victim.close();
		attacker.close();
	}
});
