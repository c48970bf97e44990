/**
 * The webhook-delivery worker beside the real intents' owner (mempool) and subscriptions' owner
 * (webhooks), with the TIN operations' owner absent (still starting, or down): a small stand-in
 * for it, with its event log in memory, which a test removes and brings back. Delivery goes on for
 * the intents' stream, a failing event still holds back everything after it, and no pass calls an
 * owner that is not there (the broker would log a warning for every such call).
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { ServiceBroker, type ActionHandler, type ActionSchema, type Context, type Middleware, type Service, type ServiceSchema } from "moleculer";
import { waitFor } from "../../devkit/process";
import { loadConfig } from "../../lib/config";
import { requestDigest } from "../../lib/digest";
import type { StoredEvent } from "../../lib/store";
import { TIN_OPERATION_EVENT_TYPE } from "../../lib/tin-operations";
import type { WebhookSubscription } from "../../lib/webhooks";
import { mempoolService } from "../../services/mempool.service";
import { webhookDeliveryService } from "../../services/webhook-delivery.service";
import { webhooksService } from "../../services/webhooks.service";
import { newRoute, newWallet, signedIntent } from "../helpers/fixtures";
import { tempDir } from "../helpers/node";

/** The calls each delivery pass makes to the subscriptions' owner: the heads it leases with, and the leases given back. */
function webhookCalls(heads: object[], releases: string[]): Middleware {
	return {
		localAction: (next: ActionHandler, action: ActionSchema) => (ctx: Context<{ heads?: object; id?: string }>) => {
			if (action.name === "webhooks.claim" && ctx.params.heads) heads.push(ctx.params.heads);
			if (action.name === "webhooks.release") releases.push(ctx.params.id ?? "");
			return next.call(ctx.service as Service, ctx);
		}
	};
}

/** A TIN owner as far as webhooks read it: its event log. */
function tinOwner(log: StoredEvent[]): ServiceSchema {
	return {
		name: "tin",
		actions: {
			latestEvent: () => log[log.length - 1] ?? null,
			events: (ctx: Context<{ after: number; limit: number }>) => log.filter(event => event.seq > ctx.params.after).slice(0, ctx.params.limit)
		}
	};
}

/** A receiver that records each delivery's event type, and answers 500 to TIN events while `failTin`. */
async function startReceiver() {
	const received: string[] = [];
	const state = { failTin: false };
	const server = http.createServer((req, res) => {
		let body = "";
		req.on("data", chunk => (body += chunk));
		req.on("end", () => {
			const { type } = JSON.parse(body) as { type: string };
			received.push(type);
			res.writeHead(state.failTin && type === TIN_OPERATION_EVENT_TYPE ? 500 : 204).end();
		});
	});
	await new Promise<void>(resolve => server.listen(0, "127.0.0.1", resolve));
	return { received, state, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, close: () => new Promise(resolve => server.close(resolve)) };
}

/** A broker with the owners up and the worker created once they are (its first pass then finds them). */
async function startWorker(tinLog: StoredEvent[] | null) {
	const heads: object[] = [];
	const releases: string[] = [];
	const warnings: string[] = [];
	const consoleWarn = jest.spyOn(console, "warn").mockImplementation((...args: unknown[]) => void warnings.push(args.join(" ")));
	const broker = new ServiceBroker({ logger: { type: "Console", options: { level: "warn" } }, middlewares: [webhookCalls(heads, releases)] });
	const config = loadConfig({ DATA_DIR: tempDir(), SWEEP_INTERVAL_MS: "20", WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOK_RETRY_BASE_MS: "400", WEBHOOK_TIMEOUT_MS: "1000" });
	broker.createService(mempoolService(config));
	broker.createService(webhooksService(config));
	let tin = tinLog ? broker.createService(tinOwner(tinLog)) : null;
	await broker.start();
	broker.createService(webhookDeliveryService(config));
	await broker.waitForServices(["webhook-delivery"]);
	return {
		broker,
		heads,
		releases,
		warnings,
		tinGone: async () => {
			await broker.destroyService(tin!);
			tin = null;
		},
		tinBack: () => void (tin = broker.createService(tinOwner(tinLog!))),
		/** Waits for `count` more delivery passes. */
		passes: async (count: number) => {
			const from = heads.length;
			await waitFor(() => heads.length >= from + count, 5000, `${count} more delivery passes`);
		},
		newIntent: () => {
			const request = signedIntent(newWallet(), newRoute());
			return broker.call("mempool.receive", { request, epoch: 1, requestDigest: requestDigest(request), verdict: { ok: true, verifiedBy: "verifier@test" } });
		},
		stop: async () => {
			await broker.stop();
			consoleWarn.mockRestore();
		}
	};
}

/** The TIN stream first: its owner's absence must not hold the intents' stream back. */
const BOTH = ["tin_operation.status_changed", "intent.status_changed"];

test("a pass leases with the heads of the owners that are up, and calls none that is not", async () => {
	const worker = await startWorker(null);
	try {
		await worker.passes(3);
		for (const head of worker.heads) expect(head).toEqual({ intents: 0 });
		expect(worker.warnings.filter(line => line.includes("tin."))).toEqual([]);
	} finally {
		await worker.stop();
	}
});

test("with the TIN owner gone, a subscription to both streams still gets its intent events, and nothing calls the TIN owner", async () => {
	const worker = await startWorker([]);
	const receiver = await startReceiver();
	try {
		await worker.broker.call("webhooks.create", { url: receiver.url, eventTypes: BOTH });
		await worker.tinGone();
		worker.warnings.length = 0;

		await worker.newIntent();
		await waitFor(() => receiver.received.length > 0, 5000, "the intent's webhook");
		expect(receiver.received).toEqual(["intent.status_changed"]);
		await worker.passes(3);
		expect(worker.warnings.filter(line => line.includes("tin."))).toEqual([]);
	} finally {
		await receiver.close();
		await worker.stop();
	}
});

test("a failing TIN event waits for its owner, and nothing after it is sent or leased meanwhile; then both go, in order", async () => {
	const tinLog: StoredEvent[] = [];
	const worker = await startWorker(tinLog);
	const receiver = await startReceiver();
	try {
		const { id } = await worker.broker.call<{ id: string }, object>("webhooks.create", { url: receiver.url, eventTypes: BOTH });
		const subscription = () => worker.broker.call<WebhookSubscription, object>("webhooks.get", { id });
		receiver.state.failTin = true;
		tinLog.push({ seq: 1, subject: "op_1", type: TIN_OPERATION_EVENT_TYPE, at: new Date().toISOString(), data: { previousState: null, state: "RECEIVED", view: { tin: "1234567897" } } });
		await waitFor(async () => (await subscription()).retry !== null, 5000, "the TIN event's first failure");
		await worker.tinGone();
		worker.warnings.length = 0;
		const releasedBefore = worker.releases.length;

		await worker.newIntent();
		// Passes past the retry's next attempt (200-400 ms after the failure): not leased while its owner is away.
		const nextAttemptAt = Date.parse((await subscription()).retry!.nextAttemptAt!);
		await waitFor(() => Date.now() > nextAttemptAt + 200, 5000, "the retry's time");
		await worker.passes(3);
		expect(receiver.received).toEqual([TIN_OPERATION_EVENT_TYPE]);
		expect(worker.releases.length - releasedBefore).toBeLessThanOrEqual(1);
		expect((await subscription()).retry).toMatchObject({ eventType: TIN_OPERATION_EVENT_TYPE, attempts: 1 });
		expect(worker.warnings.filter(line => line.includes("tin."))).toEqual([]);

		receiver.state.failTin = false;
		worker.tinBack();
		await waitFor(() => receiver.received.length >= 3, 5000, "the retried TIN event, then the intent's");
		expect(receiver.received).toEqual([TIN_OPERATION_EVENT_TYPE, TIN_OPERATION_EVENT_TYPE, "intent.status_changed"]);
		expect(await subscription()).toMatchObject({ retry: null, cursors: { tin_operations: 1 }, delivered: 2 });
	} finally {
		await receiver.close();
		await worker.stop();
	}
});
