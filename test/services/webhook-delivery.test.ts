/**
 * The webhook-delivery worker beside the real intents' owner (mempool) and subscriptions' owner
 * (webhooks), with the TIN operations' owner absent (still starting, or down): a small stand-in
 * for it, with its event log in memory, which a test removes and brings back. Delivery goes on for
 * the intents' stream, a failing event still holds back everything after it, and no pass calls an
 * owner that is not there (the broker would log a warning for every such call).
 */
import { promises as dnsPromises, type LookupAddress } from "node:dns";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { ServiceBroker, type ActionHandler, type ActionSchema, type Context, type Middleware, type Service, type ServiceSchema } from "moleculer";
import { waitFor } from "../../devkit/process";
import { loadConfig } from "../../lib/config";
import { requestDigest } from "../../lib/digest";
import type { StoredEvent } from "../../lib/store";
import { TIN_OPERATION_EVENT_TYPE } from "../../lib/tin-operations";
import { loadOrCreateWebhookSecretsKey } from "../../lib/secrets";
import { answerTag, deliveryLookup, eventsQuestion, headQuestion, webhookKeys, type KeyRing, type WebhookSubscription } from "../../lib/webhooks";
import { mempoolService } from "../../services/mempool.service";
import { webhookMetrics } from "../../services/metrics";
import { webhookDeliveryService } from "../../services/webhook-delivery.service";
import { webhooksService } from "../../services/webhooks.service";
import { newRoute, newWallet, signedIntent } from "../helpers/fixtures";
import { tempDir } from "../helpers/node";

/**
 * The calls each delivery pass makes to the subscriptions' owner: the heads it leases with, and
 * the leases given back. `leaseAsBefore`: the owner leases as a version before e3cbb8b did, a
 * retry whatever stream's owner the worker reaches (as if every head were there).
 */
function webhookCalls(heads: object[], releases: string[], leaseAsBefore: boolean): Middleware {
	return {
		localAction: (next: ActionHandler, action: ActionSchema) => (ctx: Context<{ heads?: Record<string, number>; id?: string }>) => {
			if (action.name === "webhooks.claim" && ctx.params.heads) {
				heads.push(ctx.params.heads);
				if (leaseAsBefore) ctx.params = { ...ctx.params, heads: { intents: 0, tin_operations: 0, ...ctx.params.heads } };
			}
			if (action.name === "webhooks.release") releases.push(ctx.params.id ?? "");
			return next.call(ctx.service as Service, ctx);
		}
	};
}

/**
 * How a stand-in TIN owner fails: `unreadable`, it answers its latest event but a read of its log
 * fails; `hung`, it does not answer its latest event until the test calls the `answers` it keeps.
 */
interface TinHealth {
	unreadable: boolean;
	hung?: { answers: (() => void)[] };
	/** An owner of a version before tagged event pages (a rolling update): it answers its latest event, and serves no taggedEvents. */
	untagged?: true;
}

/** A TIN owner as far as webhooks read it: its event log, its pages tagged with the deployment's events key. */
function tinOwner(log: StoredEvent[], eventsKey: KeyRing, health: TinHealth = { unreadable: false }): ServiceSchema {
	return {
		name: "tin",
		actions: {
			latestEvent: () => {
				const latest = log[log.length - 1] ?? null;
				return health.hung ? new Promise(resolve => health.hung!.answers.push(() => resolve(latest))) : latest;
			},
			taggedHead: (ctx: Context<{ nonce: string }>) => {
				const seq = log[log.length - 1]?.seq ?? 0;
				return { seq, tag: answerTag(eventsKey, headQuestion("tin_operations", ctx.params.nonce), seq) };
			},
			...(health.untagged
				? {}
				: {
						taggedEvents: (ctx: Context<{ after: number; limit: number; nonce: string }>) => {
							if (health.unreadable) throw new Error("the TIN store is unavailable");
							const events = log.filter(event => event.seq > ctx.params.after).slice(0, ctx.params.limit);
							return { events, tag: answerTag(eventsKey, eventsQuestion("tin_operations", ctx.params.after, ctx.params.limit, ctx.params.nonce), events) };
						}
					})
		}
	};
}

/** A TIN operation's event, as its owner's log keeps it. */
const tinEvent = (seq: number): StoredEvent => ({ seq, subject: `op_${seq}`, type: TIN_OPERATION_EVENT_TYPE, at: new Date().toISOString(), data: { previousState: null, state: "RECEIVED", view: { tin: "1234567897" } } });

/** A receiver that records each delivery's event type, and answers 500 to TIN events while `failTin` (calling `onTinFailure`). */
async function startReceiver() {
	const received: string[] = [];
	const state: { failTin: boolean; onTinFailure?: () => void } = { failTin: false };
	const server = http.createServer((req, res) => {
		let body = "";
		req.on("data", chunk => (body += chunk));
		req.on("end", () => {
			const { type } = JSON.parse(body) as { type: string };
			received.push(type);
			const fail = state.failTin && type === TIN_OPERATION_EVENT_TYPE;
			if (fail) state.onTinFailure?.();
			res.writeHead(fail ? 500 : 204).end();
		});
	});
	await new Promise<void>(resolve => server.listen(0, "127.0.0.1", resolve));
	return { received, state, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, close: () => new Promise(resolve => server.close(resolve)) };
}

/** A broker with the owners up and the worker created once they are (its first pass then finds them). */
async function startWorker(tinLog: StoredEvent[] | null, { leaseAsBefore = false, tinHealth = { unreadable: false } as TinHealth, ownerTimeoutMs = 1000 } = {}) {
	const heads: object[] = [];
	const releases: string[] = [];
	const warnings: string[] = [];
	const consoleWarn = jest.spyOn(console, "warn").mockImplementation((...args: unknown[]) => void warnings.push(args.join(" ")));
	const broker = new ServiceBroker({ logger: { type: "Console", options: { level: "warn" } }, middlewares: [webhookCalls(heads, releases, leaseAsBefore)] });
	const config = loadConfig({ DATA_DIR: tempDir(), SWEEP_INTERVAL_MS: "20", WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOK_RETRY_BASE_MS: "2000", WEBHOOK_TIMEOUT_MS: "1000" });
	broker.createService(mempoolService(config));
	// The owner grants leases of 3 × its own WEBHOOK_TIMEOUT_MS.
	broker.createService(webhooksService({ ...config, webhookTimeoutMs: ownerTimeoutMs }));
	const eventsKey = webhookKeys(loadOrCreateWebhookSecretsKey(null, config.dataDir).value).events;
	let tin = tinLog ? broker.createService(tinOwner(tinLog, eventsKey, tinHealth)) : null;
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
		tinBack: () => void (tin = broker.createService(tinOwner(tinLog!, eventsKey))),
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

/** Runs `body` with a worker (as startWorker) and a receiver, and stops both after it, whatever happens. */
async function withWorker(
	tinLog: StoredEvent[] | null,
	options: Parameters<typeof startWorker>[1],
	body: (worker: Awaited<ReturnType<typeof startWorker>>, receiver: Awaited<ReturnType<typeof startReceiver>>) => Promise<void>
) {
	const worker = await startWorker(tinLog, options);
	const receiver = await startReceiver();
	try {
		await body(worker, receiver);
	} finally {
		await receiver.close();
		await worker.stop();
	}
}

/** The TIN stream first: its owner's absence must not hold the intents' stream back. */
const BOTH = ["tin_operation.status_changed", "intent.status_changed"];

test("a retry whose event was pruned, with nothing after it that the filter takes, waits for the next event it takes: not leased and given back again and again", async () => {
	const tinLog: StoredEvent[] = [];
	await withWorker(tinLog, {}, async (worker, receiver) => {
		const { id } = await worker.broker.call<{ id: string }, object>("webhooks.create", { url: receiver.url, eventTypes: [TIN_OPERATION_EVENT_TYPE], filter: { tins: ["1234567897"] } });
		const subscription = () => worker.broker.call<WebhookSubscription, object>("webhooks.get", { id });
		receiver.state.failTin = true;
		tinLog.push(tinEvent(1));
		await waitFor(async () => (await subscription()).retry !== null, 5000, "the first failure");
		const { retry } = await subscription();
		// An operation on another TIN, then retention prunes the failing event (never the newest).
		tinLog.push({ ...tinEvent(2), data: { previousState: null, state: "RECEIVED", view: { tin: "1111111116" } } });
		tinLog.shift();
		await waitFor(() => Date.now() > Date.parse(retry!.nextAttemptAt!) + 100, 5000, "the retry's time");
		await waitFor(async () => (await subscription()).retry?.nextAttemptAt === null, 3000, "the retry waiting for an event");
		const released = worker.releases.length;
		await worker.passes(3);
		expect(worker.releases.length - released).toBeLessThanOrEqual(1);
		// The streak runs on from its first failure: a receiver that never answers is still disabled in time.
		expect(await subscription()).toMatchObject({
			state: "enabled",
			retry: { webhookId: "evt_tin_operations_1", firstFailureAt: retry!.firstFailureAt, nextAttemptAt: null },
			cursors: { tin_operations: 2 },
			delivered: 0,
			failures: [{ webhookId: "evt_tin_operations_1" }]
		});
		expect(receiver.received).toEqual([TIN_OPERATION_EVENT_TYPE]);
		// Not skipped without a word: the pruned event is counted (and logged as an error).
		expect((await webhookMetrics(worker.broker).attempts.get()).values).toContainEqual(expect.objectContaining({ labels: { outcome: "missed" }, value: 1 }));
	});
});

test("events pruned before a subscription reached them are counted once, though the event after them fails and is retried (a review)", async () => {
	const tinLog: StoredEvent[] = [];
	await withWorker(tinLog, {}, async (worker, receiver) => {
		const { id } = await worker.broker.call<{ id: string }, object>("webhooks.create", { url: receiver.url, eventTypes: [TIN_OPERATION_EVENT_TYPE] });
		const subscription = () => worker.broker.call<WebhookSubscription, object>("webhooks.get", { id });
		receiver.state.failTin = true;
		tinLog.push(tinEvent(1));
		await waitFor(async () => (await subscription()).retry !== null, 5000, "the first failure");
		// Retention prunes the failing event; the next one fails too, attempt after attempt.
		tinLog.push(tinEvent(2));
		tinLog.shift();
		await waitFor(async () => (await subscription()).failures.length >= 3, 15_000, "two retries of the event after the gap");
		expect((await subscription()).failures.map(failure => failure.webhookId)).toEqual(["evt_tin_operations_1", "evt_tin_operations_2", "evt_tin_operations_2"]);
		expect((await webhookMetrics(worker.broker).attempts.get()).values).toContainEqual(expect.objectContaining({ labels: { outcome: "missed" }, value: 1 }));
	});
}, 20_000);

test("an owner granting leases too short for this worker's attempts (WEBHOOK_TIMEOUT_MS differing between processes): no attempt, and a warning", async () => {
	await withWorker(null, { ownerTimeoutMs: 300 }, async (worker, receiver) => {
		await worker.broker.call("webhooks.create", { url: receiver.url, eventTypes: ["intent.status_changed"] });
		await worker.newIntent();
		await waitFor(() => worker.warnings.some(line => line.includes("is WEBHOOK_TIMEOUT_MS the same in every process")), 5000, "the warning");
		// Its lease (900 ms) could lapse mid-attempt (1 s), and another worker send the same event.
		await worker.passes(3);
		expect(receiver.received).toEqual([]);
		// Told once, not at every lease.
		expect(worker.warnings.filter(line => line.includes("WEBHOOK_TIMEOUT_MS the same"))).toHaveLength(1);
	});
});

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

test("a delivery that finds every host lookup taken by hosts that never answer is deferred, not held against its receiver", async () => {
	// Two names whose DNS never answers hold the delivery pool's two lookups (as subscriptions of
	// hosts that stopped answering would), until the test lets them end.
	const realLookup = dnsPromises.lookup.bind(dnsPromises);
	const hanging: ((addresses: LookupAddress[]) => void)[] = [];
	const lookup = jest.spyOn(dnsPromises, "lookup").mockImplementation(((host: string, options: object) =>
		host.startsWith("hang") ? new Promise(resolve => hanging.push(resolve)) : realLookup(host, options)) as typeof dnsPromises.lookup);
	try {
		await withWorker(null, {}, async (worker, receiver) => {
			// By name: the receiver's host is looked up at each attempt.
			const { id } = await worker.broker.call<{ id: string }, object>("webhooks.create", { url: receiver.url.replace("127.0.0.1", "localhost"), eventTypes: ["intent.status_changed"] });
			const held = ["hang-1.example", "hang-2.example"].map(host => deliveryLookup(host).catch(() => undefined));
			await worker.newIntent();
			// Each attempt waits its WEBHOOK_TIMEOUT_MS (1 s) for a lookup, and is deferred.
			await new Promise(resolve => setTimeout(resolve, 2500));
			expect(receiver.received).toEqual([]);
			const subscription = () => worker.broker.call<WebhookSubscription, object>("webhooks.get", { id });
			const putOff = await subscription();
			expect(putOff).toMatchObject({ state: "enabled", retry: null, failures: [], delivered: 0, lastDeferredAt: expect.any(String) });
			expect(putOff.deferred).toBeGreaterThanOrEqual(1);
			// The slow lookups end: the next pass delivers it.
			for (const answer of hanging) answer([{ address: "93.184.215.14", family: 4 }]);
			await Promise.all(held);
			await waitFor(() => receiver.received.length === 1, 5000, "the deferred delivery");
			await waitFor(async () => (await subscription()).delivered === 1, 2000, "the delivery recorded");
			expect(await subscription()).toMatchObject({ retry: null, failures: [] });
		});
	} finally {
		lookup.mockRestore();
	}
});

test("with the TIN owner gone, a subscription to both streams still gets its intent events, and nothing calls the TIN owner", async () => {
	await withWorker([], {}, async (worker, receiver) => {
		await worker.broker.call("webhooks.create", { url: receiver.url, eventTypes: BOTH });
		await worker.tinGone();
		worker.warnings.length = 0;

		await worker.newIntent();
		await waitFor(() => receiver.received.length > 0, 5000, "the intent's webhook");
		expect(receiver.received).toEqual(["intent.status_changed"]);
		await worker.passes(3);
		expect(worker.warnings.filter(line => line.includes("tin."))).toEqual([]);
	});
});

test("a TIN owner that answers but cannot read its log holds the intents' stream back not at all, and its own for a lease", async () => {
	const tinLog = [tinEvent(1)];
	const tinHealth = { unreadable: true };
	await withWorker(tinLog, { tinHealth }, async (worker, receiver) => {
		const readFailures = () => worker.warnings.filter(line => line.includes("Reading the tin_operations events failed")).length;
		const { id } = await worker.broker.call<{ id: string }, object>("webhooks.create", { url: receiver.url, eventTypes: BOTH });
		tinLog.push(tinEvent(2));
		await worker.newIntent();
		await waitFor(() => receiver.received.length === 1, 5000, "the intent's webhook");
		expect(readFailures()).toBe(1);
		// Left out of the passes for a lease (3 s): the next intent's event goes at once, and nothing reads the TIN log meanwhile.
		await worker.newIntent();
		await waitFor(() => receiver.received.length === 2, 2000, "the next intent's webhook, well within the lease");
		await worker.passes(2);
		// Nor is the subscription leased for the TIN stream meanwhile (it would be given back at once, again and again).
		const released = worker.releases.length;
		await worker.passes(3);
		expect(worker.releases.length).toBe(released);
		expect(readFailures()).toBe(1);
		expect(receiver.received).toEqual(["intent.status_changed", "intent.status_changed"]);

		// Readable again: after that lease, the TIN event (the one after the subscription's start) goes.
		tinHealth.unreadable = false;
		await waitFor(() => receiver.received.length === 3, 8000, "the TIN event");
		expect(receiver.received[2]).toBe(TIN_OPERATION_EVENT_TYPE);
		// The worker records the delivery once the receiver's answer is in: after the receiver counted it.
		const record = () => worker.broker.call<{ delivered: number }, object>("webhooks.get", { id });
		await waitFor(async () => (await record()).delivered === 3, 2000, "the delivery recorded");
		expect(await record()).toMatchObject({ cursors: { tin_operations: 2, intents: 2 }, retry: null, delivered: 3 });
	});
});

test("a TIN owner of an earlier version (no tagged event pages, a rolling update) is left out of the passes: its stream's subscriptions are not leased and given back again and again", async () => {
	const tinLog = [tinEvent(1)];
	await withWorker(tinLog, { tinHealth: { unreadable: false, untagged: true } }, async (worker, receiver) => {
		await worker.broker.call("webhooks.create", { url: receiver.url, eventTypes: BOTH });
		tinLog.push(tinEvent(2));
		await worker.newIntent();
		await waitFor(() => receiver.received.length === 1, 5000, "the intent's webhook");
		const released = worker.releases.length;
		await worker.passes(5);
		expect(worker.releases.length).toBe(released);
		for (const head of worker.heads.slice(-5)) expect(head).toEqual({ intents: expect.any(Number) });
		expect(receiver.received).toEqual(["intent.status_changed"]);
	});
});

test("a TIN owner that does not answer holds one pass for 2 s, then none until it answers; the intents' events go", async () => {
	const hung = { answers: [] as (() => void)[] };
	const tinHealth: TinHealth = { unreadable: false, hung };
	await withWorker([tinEvent(1)], { tinHealth }, async (worker, receiver) => {
		const unanswered = () => worker.warnings.filter(line => line.includes("The tin_operations owner has not given its latest event")).length;
		await worker.broker.call("webhooks.create", { url: receiver.url, eventTypes: ["intent.status_changed"] });
		await worker.newIntent();
		// The pass that asked the hung owner waits 2 s for it, then goes on without its stream; the
		// next passes leave that stream out while the call is unanswered (this broker sets no timeout).
		await waitFor(() => receiver.received.length === 1, 5000, "the intent's webhook");
		expect(unanswered()).toBe(1);
		await worker.newIntent();
		await waitFor(() => receiver.received.length === 2, 5000, "the next intent's webhook");
		// No pass asked the hung owner again, so none waited for it: one call, one warning.
		await worker.passes(3);
		expect(unanswered()).toBe(1);
		for (const head of worker.heads.slice(-3)) expect(head).toEqual({ intents: 2 });
		expect(hung.answers).toHaveLength(1);

		// It answers at last, and is well again: the next passes ask it, and count its stream.
		tinHealth.hung = undefined;
		hung.answers[0]();
		await waitFor(() => worker.heads.some(head => "tin_operations" in head), 2000, "a pass with the TIN stream again");
		expect(worker.heads[worker.heads.length - 1]).toEqual({ intents: 2, tin_operations: 1 });
		expect(unanswered()).toBe(1);
	});
});

/**
 * A TIN event that the receiver refuses once, then its owner away (`away`: gone, by default) and an
 * intent's event in: past the retry's next attempt (1-2 s after the failure) and a few passes more,
 * nothing but that first attempt was sent. The retry as it stood when the owner left, and how many
 * leases were given back since.
 */
async function retryWhileItsOwnerIsAway(
	worker: Awaited<ReturnType<typeof startWorker>>,
	tinLog: StoredEvent[],
	receiver: Awaited<ReturnType<typeof startReceiver>>,
	away: () => Promise<void> = worker.tinGone
) {
	const { id } = await worker.broker.call<{ id: string }, object>("webhooks.create", { url: receiver.url, eventTypes: BOTH });
	const subscription = () => worker.broker.call<WebhookSubscription, object>("webhooks.get", { id });
	// The owner goes away as the receiver refuses: well before the retry is due (1-2 s later).
	let gone: Promise<void> | undefined;
	receiver.state.failTin = true;
	receiver.state.onTinFailure = () => void (gone ??= away());
	tinLog.push(tinEvent(1));
	await waitFor(async () => gone !== undefined && (await subscription()).retry !== null, 5000, "the TIN event's first failure");
	await gone;
	worker.warnings.length = 0;
	const { retry } = await subscription();
	expect(retry).toMatchObject({ eventType: TIN_OPERATION_EVENT_TYPE, attempts: 1 });
	const releasedBefore = worker.releases.length;

	await worker.newIntent();
	await waitFor(() => Date.now() > Date.parse(retry!.nextAttemptAt!) + 200, 5000, "the retry's time");
	await worker.passes(3);
	expect(receiver.received).toEqual([TIN_OPERATION_EVENT_TYPE]);
	return { subscription, retry, released: worker.releases.length - releasedBefore };
}

/** Once the receiver takes TIN events again and their log can be read: the retried TIN event, then the intent's, and the retry is over. */
async function bothGoInOrder(receiver: Awaited<ReturnType<typeof startReceiver>>, subscription: () => Promise<WebhookSubscription>) {
	await waitFor(() => receiver.received.length >= 3, 8000, "the retried TIN event, then the intent's");
	expect(receiver.received).toEqual([TIN_OPERATION_EVENT_TYPE, TIN_OPERATION_EVENT_TYPE, "intent.status_changed"]);
	// The worker records a delivery once the receiver has answered it: that write may come a moment after.
	const settled = await waitFor(async () => {
		const now = await subscription();
		return now.delivered >= 2 && now;
	}, 5000, "the deliveries recorded");
	expect(settled).toMatchObject({ retry: null, cursors: { tin_operations: 1 }, delivered: 2 });
}

test("a failing TIN event waits for its owner, and nothing after it is sent or leased meanwhile; then both go, in order", async () => {
	const tinLog: StoredEvent[] = [];
	await withWorker(tinLog, {}, async (worker, receiver) => {
		const { subscription, retry, released } = await retryWhileItsOwnerIsAway(worker, tinLog, receiver);
		expect(released).toBeLessThanOrEqual(1);
		expect((await subscription()).retry).toEqual(retry);
		expect(worker.warnings.filter(line => line.includes("tin."))).toEqual([]);

		receiver.state.failTin = false;
		worker.tinBack();
		await bothGoInOrder(receiver, subscription);
	});
});

test("leased by an owner of an earlier version while its owner is away, a failing TIN event is left to its lease, untouched", async () => {
	const tinLog: StoredEvent[] = [];
	await withWorker(tinLog, { leaseAsBefore: true }, async (worker, receiver) => {
		const { subscription, retry, released } = await retryWhileItsOwnerIsAway(worker, tinLog, receiver);
		// Leased once past its time, then held by that lease (3 s): not given back, so not leased again at once.
		expect(released).toBe(0);
		const now = await subscription();
		expect(now.retry).toEqual(retry);
		expect(now.cursors).toEqual({ intents: 0, tin_operations: 0 });
	});
});

test("a failing TIN event whose log cannot be read waits for it, with nothing after it sent; then both go, in order", async () => {
	const tinLog: StoredEvent[] = [];
	const tinHealth = { unreadable: false };
	await withWorker(tinLog, { tinHealth }, async (worker, receiver) => {
		const { subscription, retry, released } = await retryWhileItsOwnerIsAway(worker, tinLog, receiver, async () => void (tinHealth.unreadable = true));
		// Leased once it was due, to find the log unreadable: given back untouched, and not leased again during that lease.
		expect(released).toBe(1);
		expect((await subscription()).retry).toEqual(retry);

		receiver.state.failTin = false;
		tinHealth.unreadable = false;
		await bothGoInOrder(receiver, subscription);
	});
});
