/**
 * The webhooks service alone, on a real SQLite file: a broker with just this owner and two small
 * stand-ins for the event owners (mempool, tin) answering their latest event. Called as the
 * delivery workers call it: every lease and every holder's write is a compare-and-set on the
 * subscription's version, so two workers never hold one subscription, and a holder whose lease
 * lapsed, or whose subscription was deleted, changes nothing.
 */
import Database from "better-sqlite3";
import { ServiceBroker, type Context, type ServiceSchema } from "moleculer";
import { randomBytes } from "node:crypto";
import path from "node:path";
import { waitFor } from "../../devkit/process";
import { loadConfig } from "../../lib/config";
import { TIN_OPERATION_EVENT_TYPE } from "../../lib/tin-operations";
import { answerTag, headQuestion, holderWriteRequest, newNonce, holderWriteResult, openSecret, webhookKeys, type CreatedWebhookSubscription, type HolderWrite, type WebhookRecord, type StreamHeads, type WebhookKeys, type WebhookStream, type WebhookSubscription } from "../../lib/webhooks";
import { loadOrCreateWebhookSecretsKey } from "../../lib/secrets";
import type { Collection } from "../../lib/store";
import { webhooksService, type WebhookLease } from "../../services/webhooks.service";
import { sleep, tempDir } from "../helpers/node";

const INTENT_EVENTS = "intent.status_changed";

/**
 * An event owner as the webhooks owner asks it: its latest event's number, which a test moves,
 * tagged with the events key of `keys` (`tagged` false: as a rogue without the key would).
 */
function eventOwner(name: string, stream: WebhookStream, keys: WebhookKeys, latest: () => number, tagged = () => true): ServiceSchema {
	return {
		name,
		actions: {
			taggedHead: (ctx: Context<{ nonce: string }>) => {
				const key = tagged() ? keys.events : [randomBytes(32)];
				return { seq: latest(), tag: answerTag(key, headQuestion(stream, ctx.params.nonce), latest()) };
			}
		}
	};
}

/** The webhooks owner on `dataDir` (a new one unless given), with `env` over the test's settings. */
async function startWebhooks(env: Record<string, string> = {}, dataDir = tempDir()) {
	const logs: Record<WebhookStream, number> = { intents: 0, tin_operations: 0 };
	const broker = new ServiceBroker({ logger: false });
	// A lease lasts three attempts of WEBHOOK_TIMEOUT_MS: 3 s here, longer than any test's run of calls.
	const config = loadConfig({ DATA_DIR: dataDir, WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOK_TIMEOUT_MS: "1000", WEBHOOK_RETRY_BASE_MS: "200", ...env });
	/** WEBHOOK_SECRETS_KEY's keys, or DATA_DIR's: those of the other key holders. */
	const keys = webhookKeys(loadOrCreateWebhookSecretsKey(config.webhookSecretsKeys, dataDir).value);
	broker.createService(webhooksService(config));
	const honest = { intents: true };
	broker.createService(eventOwner("mempool", "intents", keys, () => logs.intents, () => honest.intents));
	broker.createService(eventOwner("tin", "tin_operations", keys, () => logs.tin_operations));
	await broker.start();
	// The check of the stored secrets' keys the owner starts with, done.
	await (broker.getLocalService("webhooks") as unknown as { sweeping?: Promise<void> }).sweeping;
	const holder = (lease: WebhookLease) => ({ id: lease.subscription.id, version: lease.subscription.version });
	/** A holder's write as a delivery worker makes it: proven with the key, its answer checked. */
	const write = async <T>(action: HolderWrite, params: object): Promise<T> => {
		const request = holderWriteRequest(keys, action, params);
		return holderWriteResult<T>(keys, action, request.nonce, await broker.call(`webhooks.${action}`, request));
	};
	return {
		broker,
		dataDir,
		honest,
		write,
		/** Each stream's latest event, as its owner answers it. */
		logs,
		create: (eventTypes: string[] = [INTENT_EVENTS]) => broker.call<CreatedWebhookSubscription, object>("webhooks.create", { url: "http://127.0.0.1:9/hook", eventTypes }),
		get: (id: string) => broker.call<WebhookSubscription, object>("webhooks.get", { id }),
		claim: (leasedBy: string, heads: StreamHeads, limit = 100) => broker.call<WebhookLease[], object>("webhooks.claim", { leasedBy, nonce: newNonce(), heads, limit }),
		advance: (lease: WebhookLease, seq: number, delivered = true) => write<number | null>("advance", { ...holder(lease), stream: "intents", seq, delivered }),
		fail: (lease: WebhookLease, seq: number, webhookId = `evt_intents_${seq + 1}`) =>
			write<{ disabled: boolean } | null>("fail", { ...holder(lease), stream: "intents", seq, webhookId, eventType: INTENT_EVENTS, status: 500, error: "HTTP 500" }),
		release: (lease: WebhookLease, deferMs?: number) => write<boolean>("release", { ...holder(lease), ...(deferMs ? { deferMs } : {}) })
	};
}

const ids = (leases: WebhookLease[]) => leases.map(lease => lease.subscription.id);
/** The same lease after the holder's write that gave it `version`. */
const renewed = (lease: WebhookLease, version: number): WebhookLease => ({ ...lease, subscription: { ...lease.subscription, version } });

describe("subscriptions and their leases", () => {
	let webhooks: Awaited<ReturnType<typeof startWebhooks>>;
	beforeEach(async () => (webhooks = await startWebhooks()));
	afterEach(() => webhooks.broker.stop());

	test("a subscription starts at each subscribed stream's latest event, takes no cursor in the others, and its secret is answered once", async () => {
		Object.assign(webhooks.logs, { intents: 7, tin_operations: 3 });
		const intentsOnly = await webhooks.create();
		const both = await webhooks.create([INTENT_EVENTS, TIN_OPERATION_EVENT_TYPE]);
		expect(intentsOnly).toMatchObject({ state: "enabled", cursors: { intents: 7 }, delivered: 0, retry: null, secret: expect.stringMatching(/^whsec_/) });
		expect(intentsOnly.cursors).not.toHaveProperty("tin_operations");
		expect(both.cursors).toEqual({ intents: 7, tin_operations: 3 });
		expect(await webhooks.get(intentsOnly.id)).not.toHaveProperty("secret");
	});

	test("a new subscription starts at the head its event owner vouched for; a head answered without the key is refused (503) and stores nothing", async () => {
		webhooks.logs.intents = 7;
		webhooks.honest.intents = false;
		await expect(webhooks.create()).rejects.toMatchObject({ type: "NOT_READY" });
		expect(await webhooks.broker.call("webhooks.page", { limit: 10 })).toEqual([]);
		webhooks.honest.intents = true;
		expect((await webhooks.create()).cursors).toEqual({ intents: 7 });
	});

	test("a lease carries the secret sealed: whoever calls claim on the bus reads no secret without WEBHOOK_SECRETS_KEY, and the store keeps it sealed", async () => {
		const created = await webhooks.create();
		Object.assign(webhooks.logs, { intents: 1 });
		const [lease] = await webhooks.claim("anyone-on-the-bus", { intents: 1 });
		const { secret } = lease.subscription;
		expect(secret).toMatch(/^sealed_v1_/);
		expect(secret).not.toContain(created.secret.slice("whsec_".length));
		const key = webhookKeys(loadOrCreateWebhookSecretsKey(null, webhooks.dataDir).value).sealing;
		expect(openSecret(secret, key, lease.subscription)).toBe(created.secret);
		expect(() => openSecret(secret, [randomBytes(32)], lease.subscription)).toThrow();
		// Bound to its subscription and its receiver: put in a lease for another url, it opens for nobody.
		expect(() => openSecret(secret, key, { ...lease.subscription, url: "https://attacker.example/collect" })).toThrow();
		const stored = new Database(path.join(webhooks.dataDir, "webhooks.sqlite"), { readonly: true });
		try {
			const text = JSON.stringify(stored.prepare("SELECT * FROM webhooks").all());
			expect(text).toContain(created.id);
			expect(text).not.toContain(created.secret.slice("whsec_".length));
		} finally {
			stored.close();
		}
	});

	test("a secret an earlier version stored in the clear is leased sealed, and stored sealed from then on", async () => {
		const created = await webhooks.create();
		const store = (webhooks.broker.getLocalService("webhooks") as unknown as { webhooks: Collection<WebhookRecord> }).webhooks;
		const stored = (await store.get(created.id))!;
		expect(await store.update(created.id, { version: stored.version }, { ...stored, secret: created.secret, version: stored.version + 1 })).toBe(true);
		Object.assign(webhooks.logs, { intents: 1 });
		const [lease] = await webhooks.claim("worker", { intents: 1 });
		expect(lease.subscription.secret).toMatch(/^sealed_v1_/);
		expect((await store.get(created.id))!.secret).toBe(lease.subscription.secret);
		expect(openSecret(lease.subscription.secret, webhookKeys(loadOrCreateWebhookSecretsKey(null, webhooks.dataDir).value).sealing, lease.subscription)).toBe(created.secret);
	});

	test("a write on a lease without a key holder's proof is refused: no process on the bus moves a cursor forward (skipping events) in a worker's name", async () => {
		const created = await webhooks.create();
		Object.assign(webhooks.logs, { intents: 9 });
		const [lease] = await webhooks.claim("worker", { intents: 9 });
		const params = { id: lease.subscription.id, version: lease.subscription.version, stream: "intents", seq: 4, delivered: false };
		const keys = webhookKeys(loadOrCreateWebhookSecretsKey(null, webhooks.dataDir).value);
		const proven = holderWriteRequest(keys, "advance", params);
		for (const forged of [
			{ ...params, nonce: "a-nonce-of-16-chars", proof: "AAAA" },
			{ ...proven, seq: 8 }, // a key holder's proof, for another write
			holderWriteRequest(webhookKeys([randomBytes(32)]), "advance", params)
		])
			await expect(webhooks.broker.call("webhooks.advance", forged)).rejects.toMatchObject({ type: "FORBIDDEN", data: { reason: "unproven" } });
		expect((await webhooks.get(created.id)).cursors).toEqual({ intents: 0 });
		// The proven write moves it, and its answer is the owner's own (tagged over the write's nonce).
		const reply = await webhooks.broker.call<{ result: number | null; tag: string }, object>("webhooks.advance", proven);
		expect(holderWriteResult(keys, "advance", proven.nonce, reply)).toBe(lease.subscription.version + 1);
		expect(() => holderWriteResult(keys, "advance", "another-nonce-of-16", reply)).toThrow(/does not check/);
		expect(() => holderWriteResult(keys, "advance", proven.nonce, { result: 99, tag: reply.tag })).toThrow(/does not check/);
		expect((await webhooks.get(created.id)).cursors).toEqual({ intents: 4 });
	});

	test("a holder's write behind the cursor is refused: a stale view cannot move the cursor back (the events between would be delivered again)", async () => {
		const created = await webhooks.create();
		Object.assign(webhooks.logs, { intents: 9 });
		const [lease] = await webhooks.claim("worker", { intents: 9 });
		const version = (await webhooks.advance(lease, 5))!;
		expect(await webhooks.advance(renewed(lease, version), 3)).toBeNull();
		expect(await webhooks.fail(renewed(lease, version), 2)).toBeNull();
		expect((await webhooks.get(created.id)).cursors).toEqual({ intents: 5 });
		expect(await webhooks.advance(renewed(lease, version), 5)).toBe(version + 1);
	});

	test("claim leases idle subscriptions behind a head, up to its limit; none twice, none not behind", async () => {
		webhooks.logs.intents = 7;
		const older = await webhooks.create();
		webhooks.logs.intents = 9;
		const newer = await webhooks.create();
		expect(await webhooks.claim("worker-1", { intents: 7 })).toEqual([]);
		const first = await webhooks.claim("worker-1", { intents: 12 }, 1);
		expect(first).toHaveLength(1);
		const [lease] = await webhooks.claim("worker-2", { intents: 12 });
		expect(lease).toMatchObject({ subscription: { leasedBy: "worker-2" }, leaseTtlMs: 3000 });
		expect([first[0].subscription.id, lease.subscription.id].sort()).toEqual([older.id, newer.id].sort());
		expect(await webhooks.claim("worker-3", { intents: 12 })).toEqual([]);
	});

	test("idle subscriptions behind take turns, the least recently leased first: ones far behind (slow receivers, say) cannot keep one near the head waiting", async () => {
		// Far behind, and leased already.
		const slow = [await webhooks.create(), await webhooks.create()];
		for (const lease of await webhooks.claim("worker", { intents: 100 }, 2)) {
			expect(await webhooks.advance(lease, 1)).not.toBeNull();
			expect(await webhooks.release(renewed(lease, lease.subscription.version + 1))).toBe(true);
		}
		webhooks.logs.intents = 95;
		const nearHead = await webhooks.create();
		// Behind by 5 against 99: its turn comes first all the same, never leased as it is.
		expect(ids(await webhooks.claim("worker", { intents: 100 }, 1))).toEqual([nearHead.id]);
		// Then the others by the time of their last lease, one at a time, round and round.
		const order: string[] = [];
		for (let round = 0; round < 4; round++) {
			await sleep(2);
			const [lease] = await webhooks.claim("worker", { intents: 100 }, 1);
			order.push(lease.subscription.id);
			expect(await webhooks.release(lease)).toBe(true);
		}
		expect(new Set(order.slice(0, 2))).toEqual(new Set(slow.map(s => s.id)));
		expect(order.slice(2)).toEqual(order.slice(0, 2));
	});

	test("claims racing on the same subscriptions lease each to exactly one worker", async () => {
		const created = await Promise.all(Array.from({ length: 12 }, () => webhooks.create()));
		const granted = await Promise.all(["a", "b", "c", "d"].map(worker => webhooks.claim(worker, { intents: 1 }, 12)));
		const leased = granted.flatMap(ids);
		expect(leased.sort()).toEqual(created.map(subscription => subscription.id).sort());
	});

	test("a lease given back deferred (no lookup slot) is due again only after deferMs: it cannot hold the others off, lease after lease", async () => {
		const deferred = [await webhooks.create(), await webhooks.create()];
		const waiting = await webhooks.create();
		const first = await webhooks.claim("worker", { intents: 5 }, 2);
		expect(ids(first)).toEqual(deferred.map(d => d.id));
		for (const lease of first) expect(await webhooks.release(lease, 60_000)).toBe(true);
		// The next pass takes the one not yet tried, not the two just given back.
		expect(ids(await webhooks.claim("worker", { intents: 5 }, 2))).toEqual([waiting.id]);
		expect(await webhooks.claim("other", { intents: 5 }, 2)).toEqual([]);
		// The operator sees each deferral on the subscription, and nothing held against its receiver.
		for (const { id } of deferred) expect(await webhooks.get(id)).toMatchObject({ deferred: 1, lastDeferredAt: expect.any(String), retry: null, failures: [] });
		expect(await webhooks.get(waiting.id)).toMatchObject({ deferred: 0, lastDeferredAt: null });
	});

	test("the holder's advance moves the cursor, counts the delivery and renews the lease; a write on a stale version changes nothing", async () => {
		const { id } = await webhooks.create();
		const [lease] = await webhooks.claim("worker", { intents: 5 });
		const version = await webhooks.advance(lease, 3);
		expect(version).toBe(lease.subscription.version + 1);
		const after = await webhooks.get(id);
		expect(after).toMatchObject({ cursors: { intents: 3 }, delivered: 1 });
		// The version the lease was granted at is stale now: every write on it is refused.
		expect(await webhooks.advance(lease, 5)).toBeNull();
		expect(await webhooks.fail(lease, 3)).toBeNull();
		expect(await webhooks.release(lease)).toBe(false);
		expect(await webhooks.get(id)).toEqual(after);
		// Still leased (renewed, not given up): no other worker takes it.
		expect(await webhooks.claim("other", { intents: 5 })).toEqual([]);
		expect(await webhooks.release(renewed(lease, version!))).toBe(true);
		expect(ids(await webhooks.claim("other", { intents: 5 }))).toEqual([id]);
	});

	test("of two writes racing on one version, one lands: the other is refused, whatever it was", async () => {
		const { id } = await webhooks.create();
		const [lease] = await webhooks.claim("worker", { intents: 5 });
		const answers = await Promise.all([webhooks.advance(lease, 3), webhooks.advance(lease, 4)]);
		expect(answers.filter(answer => answer !== null)).toEqual([lease.subscription.version + 1]);
		const landed = answers[0] !== null ? 3 : 4;
		expect(await webhooks.get(id)).toMatchObject({ cursors: { intents: landed }, delivered: 1 });
		// A failure and a release racing on the new version: one of them.
		const current = renewed(lease, lease.subscription.version + 1);
		const [failed, released] = await Promise.all([webhooks.fail(current, landed), webhooks.release(current)]);
		expect([failed !== null, released].filter(Boolean)).toHaveLength(1);
	});

	test("a deleted subscription refuses its holder's next write", async () => {
		const { id } = await webhooks.create();
		const [lease] = await webhooks.claim("worker", { intents: 1 });
		await webhooks.broker.call("webhooks.remove", { id });
		expect(await webhooks.advance(lease, 1)).toBeNull();
		expect(await webhooks.fail(lease, 0)).toBeNull();
	});

	test("a failure gives the lease up and schedules a retry, which waits for its stream's owner; attempts count per event", async () => {
		const { id } = await webhooks.create();
		const [lease] = await webhooks.claim("worker", { intents: 4 });
		const failedAt = Date.now();
		expect(await webhooks.fail(lease, 2)).toEqual({ disabled: false });
		const answeredAt = Date.now();
		const waiting = await webhooks.get(id);
		expect(waiting).toMatchObject({ cursors: { intents: 2 }, retry: { webhookId: "evt_intents_3", eventType: INTENT_EVENTS, attempts: 1, lastError: "HTTP 500" } });
		expect(waiting.failures).toEqual([expect.objectContaining({ webhookId: "evt_intents_3", attempt: 1, status: 500 })]);
		// Between half and all of WEBHOOK_RETRY_BASE_MS (200 ms) after the failure was recorded.
		const retryIn = Date.parse(waiting.retry!.nextAttemptAt!) - failedAt;
		expect(retryIn).toBeGreaterThanOrEqual(100);
		expect(retryIn).toBeLessThanOrEqual(answeredAt - failedAt + 200);
		expect(await webhooks.claim("worker", { intents: 4 })).toEqual([]);

		await sleep(retryIn + 20);
		// Due, but its event is the intents' stream's: a worker that cannot reach that owner leaves it.
		expect(await webhooks.claim("worker", { tin_operations: 0 })).toEqual([]);
		const [retry] = await webhooks.claim("worker", { intents: 4 });
		expect(retry.subscription).toMatchObject({ id, intentsCursor: 2 });
		expect(await webhooks.fail(retry, 2)).toEqual({ disabled: false });
		expect((await webhooks.get(id)).retry).toMatchObject({ webhookId: "evt_intents_3", attempts: 2, firstFailureAt: waiting.retry!.firstFailureAt });
	});
});

/**
 * Creates a subscription and fails `times` attempts, each at the next event (so each is a first
 * attempt), claiming each retry once it is due.
 */
async function startAndFail(webhooks: Awaited<ReturnType<typeof startWebhooks>>, times: number) {
	const created = await webhooks.create();
	for (let seq = 0; seq < times; seq++) {
		const lease = await waitForLease(webhooks);
		await webhooks.fail(lease, seq);
	}
	return created;
}

function waitForLease(webhooks: Awaited<ReturnType<typeof startWebhooks>>): Promise<WebhookLease> {
	return waitFor(async () => (await webhooks.claim("worker", { intents: 100 }))[0], 2000, "a due retry's lease", 5);
}

test("a lapsed lease (its holder died) is leased again, and the first holder's writes are refused", async () => {
	// Leases of 300 ms.
	const webhooks = await startWebhooks({ WEBHOOK_TIMEOUT_MS: "100" });
	try {
		const { id } = await webhooks.create();
		const [first] = await webhooks.claim("died", { intents: 1 });
		expect(await webhooks.claim("alive", {})).toEqual([]);
		await sleep(350);
		// Due again whatever the heads: a lapsed lease is work whether or not the streams moved.
		const [second] = await webhooks.claim("alive", {});
		expect(second.subscription).toMatchObject({ id, leasedBy: "alive" });
		expect(await webhooks.advance(first, 1)).toBeNull();
		expect(await webhooks.advance(second, 1)).toBe(second.subscription.version + 1);
	} finally {
		await webhooks.broker.stop();
	}
});

describe("a retry streak", () => {
	let webhooks: Awaited<ReturnType<typeof startWebhooks>>;
	// Retried within a millisecond (lib/webhooks.ts failed() is unit-tested for the rest of a streak).
	beforeEach(async () => (webhooks = await startWebhooks({ WEBHOOK_RETRY_BASE_MS: "1" })));
	afterEach(() => webhooks.broker.stop());

	test("a delivered event ends the retry streak", async () => {
		const { id } = await startAndFail(webhooks, 1);
		const retry = await waitForLease(webhooks);
		await webhooks.advance(retry, 1);
		expect(await webhooks.get(id)).toMatchObject({ retry: null, delivered: 1, cursors: { intents: 1 } });
	});
});

describe("past WEBHOOK_RETRY_FOR_MS", () => {
	test("the subscription is disabled with its reason, and is never leased again", async () => {
		const webhooks = await startWebhooks({ WEBHOOK_RETRY_FOR_MS: "150", WEBHOOK_RETRY_BASE_MS: "1" });
		try {
			const { id } = await startAndFail(webhooks, 1);
			await sleep(170);
			const [last] = await webhooks.claim("worker", { intents: 100 });
			expect(await webhooks.fail(last, 0)).toEqual({ disabled: true });
			expect(await webhooks.get(id)).toMatchObject({ state: "disabled", disabledReason: expect.stringContaining("WEBHOOK_RETRY_FOR_MS"), retry: { attempts: 2, nextAttemptAt: null } });
			expect(await webhooks.advance(renewed(last, last.subscription.version + 1), 1)).toBeNull();
			expect(await webhooks.claim("worker", { intents: 100 })).toEqual([]);
		} finally {
			await webhooks.broker.stop();
		}
	});
});

test("claim reads past retries waiting for an absent owner: however many, they do not hide a due retry on the other stream", async () => {
	// More waiting than one read of due subscriptions holds (400): the claim reads on past them.
	const WAITING = 401;
	// Leases that outlast the claims of them all.
	const webhooks = await startWebhooks({ WEBHOOK_RETRY_BASE_MS: "1", WEBHOOK_TIMEOUT_MS: "10000", WEBHOOKS_MAX: String(WAITING + 1) });
	try {
		for (let i = 0; i < WAITING; i++) await webhooks.create([TIN_OPERATION_EVENT_TYPE]);
		const other = await webhooks.create();
		// Every one leased (as if both streams had an event) and failed: the TIN ones first, so that they are due first.
		const leases: WebhookLease[] = [];
		for (let batch: WebhookLease[]; (batch = await webhooks.claim("test", { intents: 1, tin_operations: 1 })).length; ) leases.push(...batch);
		expect(leases).toHaveLength(WAITING + 1);
		for (const lease of leases)
			if (lease.subscription.id !== other.id)
				await webhooks.write("fail", { id: lease.subscription.id, version: lease.subscription.version, stream: "tin_operations", seq: 0, webhookId: "evt_tin_operations_1", eventType: TIN_OPERATION_EVENT_TYPE, status: 500, error: "HTTP 500" });
		await sleep(20);
		await webhooks.fail(leases.find(lease => lease.subscription.id === other.id)!, 0);
		await sleep(20);

		// A worker that reaches only the intents' owner, with room for one.
		expect(ids(await webhooks.claim("worker", { intents: 1 }, 1))).toEqual([other.id]);
	} finally {
		await webhooks.broker.stop();
	}
});

test("WEBHOOK_SECRETS_KEY rotation: with the new key first, the stored secrets are sealed again under it (a leased one by its holder's next write); an owner not rolled yet leaves them there; then the new key alone opens every one", async () => {
	const [oldKey, newKey] = [randomBytes(32).toString("base64"), randomBytes(32).toString("base64")];
	const onlyNew = webhookKeys([Buffer.from(newKey, "base64")]).sealing;
	const storeOf = (webhooks: Awaited<ReturnType<typeof startWebhooks>>) => (webhooks.broker.getLocalService("webhooks") as unknown as { webhooks: Collection<WebhookRecord> }).webhooks;
	// Leases of 30 s: they outlast every restart here.
	const start = (keys: Record<string, string>, dataDir?: string) => startWebhooks({ WEBHOOK_TIMEOUT_MS: "10000", ...keys }, dataDir);

	const before = await start({ WEBHOOK_SECRETS_KEY: oldKey });
	const dataDir = before.dataDir;
	const leased = await before.create();
	before.logs.intents = 1;
	const [lease] = await before.claim("worker", { intents: 1 });
	expect(lease.subscription.id).toBe(leased.id);
	const idle = await before.create();
	await before.broker.stop();

	// The second step: the new key first, the old one still taken. The sweep at start re-seals
	// the idle subscription; the leased one waits for its holder, whose write it would cut short.
	const during = await start({ WEBHOOK_SECRETS_KEY: `${newKey},${oldKey}` }, dataDir);
	try {
		const store = storeOf(during);
		const idleRecord = (await store.get(idle.id))!;
		expect(openSecret(idleRecord.secret, onlyNew, idleRecord)).toBe(idle.secret);
		const stillOld = (await store.get(leased.id))!.secret;
		expect(() => openSecret(stillOld, onlyNew, lease.subscription)).toThrow();
		// The holder's write, proven under the old key (a worker not rolled yet), is taken, and re-seals.
		const oldHolder = webhookKeys([Buffer.from(oldKey, "base64")]);
		const request = holderWriteRequest(oldHolder, "advance", { id: lease.subscription.id, version: lease.subscription.version, stream: "intents", seq: 1, delivered: true });
		const both = webhookKeys([Buffer.from(newKey, "base64"), Buffer.from(oldKey, "base64")]);
		const version = holderWriteResult<number>(both, "advance", request.nonce, await during.broker.call("webhooks.advance", request));
		const leasedRecord = (await store.get(leased.id))!;
		expect(openSecret(leasedRecord.secret, onlyNew, leasedRecord)).toBe(leased.secret);
		// Given back, as a worker stopping for the roll does.
		const release = holderWriteRequest(both, "release", { id: leased.id, version });
		expect(holderWriteResult(both, "release", release.nonce, await during.broker.call("webhooks.release", release))).toBe(true);
	} finally {
		await during.broker.stop();
	}

	// An owner still on the first step (the old key current, the new one next) while the others
	// roll: its sweep and its leases leave what is sealed under the new key there.
	const notYetRolled = await start({ WEBHOOK_SECRETS_KEY: oldKey, WEBHOOK_SECRETS_KEY_NEXT: newKey }, dataDir);
	try {
		notYetRolled.logs.intents = 2;
		const leases = await notYetRolled.claim("worker", { intents: 2 });
		expect(ids(leases).sort()).toEqual([leased.id, idle.id].sort());
		for (const { subscription } of leases) expect(openSecret(subscription.secret, onlyNew, subscription)).toBe(subscription.id === idle.id ? idle.secret : leased.secret);
		for (const taken of leases) expect(await notYetRolled.release(taken)).toBe(true);
	} finally {
		await notYetRolled.broker.stop();
	}

	// The third step: the old key gone. Every lease opens with the new key.
	const after = await start({ WEBHOOK_SECRETS_KEY: newKey }, dataDir);
	try {
		after.logs.intents = 3;
		const leases = await after.claim("worker", { intents: 3 });
		expect(ids(leases).sort()).toEqual([leased.id, idle.id].sort());
		for (const { subscription } of leases) expect(openSecret(subscription.secret, onlyNew, subscription)).toBe(subscription.id === idle.id ? idle.secret : leased.secret);
	} finally {
		await after.broker.stop();
	}
});

test("a stored secret that no listed key opens (the old key dropped too soon, or mistyped) is named in a warning, and no sweep calls the rotation done", async () => {
	const [oldKey, newKey, mistyped] = [0, 1, 2].map(() => randomBytes(32).toString("base64"));
	const before = await startWebhooks({ WEBHOOK_SECRETS_KEY: oldKey });
	const created = await before.create();
	await before.broker.stop();
	for (const keys of [newKey, `${newKey},${mistyped}`]) {
		const after = await startWebhooks({ WEBHOOK_SECRETS_KEY: keys }, before.dataDir);
		try {
			const service = after.broker.getLocalService("webhooks") as unknown as { logger: Record<"warn" | "info", (message: string) => void>; resealStored(): Promise<void> };
			const said: string[] = [];
			service.logger.warn = message => void said.push(`warn: ${message}`);
			service.logger.info = message => void said.push(`info: ${message}`);
			await service.resealStored();
			expect(said).toEqual([expect.stringMatching(new RegExp(`^warn: 1 stored webhook signing secrets open under none of WEBHOOK_SECRETS_KEY's keys \\(${created.id}\\)`))]);
		} finally {
			await after.broker.stop();
		}
	}
});

test("the rotation's sweep leaves a lease that lapsed less than a lease's length ago (another replica's clock may run behind) to the next sweep", async () => {
	const [oldKey, newKey] = [randomBytes(32).toString("base64"), randomBytes(32).toString("base64")];
	const onlyNew = webhookKeys([Buffer.from(newKey, "base64")]).sealing;
	// Leases of 1.5 s.
	const before = await startWebhooks({ WEBHOOK_SECRETS_KEY: oldKey, WEBHOOK_TIMEOUT_MS: "500" });
	const created = await before.create();
	before.logs.intents = 1;
	const [lease] = await before.claim("worker", { intents: 1 });
	await before.broker.stop();
	await waitFor(() => Date.parse(lease.subscription.leaseExpiresAt!) < Date.now(), 5000, "the lease to lapse");

	const during = await startWebhooks({ WEBHOOK_SECRETS_KEY: `${newKey},${oldKey}`, WEBHOOK_TIMEOUT_MS: "500" }, before.dataDir);
	try {
		const service = during.broker.getLocalService("webhooks") as unknown as { webhooks: Collection<WebhookRecord>; resealStored(): Promise<void> };
		const stored = async () => (await service.webhooks.get(created.id))!;
		const kept = await stored();
		expect(() => openSecret(kept.secret, onlyNew, kept)).toThrow();
		// A lease's length after it lapsed, the next sweep takes it.
		await waitFor(() => Date.parse(lease.subscription.leaseExpiresAt!) + 1500 < Date.now(), 5000, "a lease's length past the lapse");
		await service.resealStored();
		const moved = await stored();
		expect(openSecret(moved.secret, onlyNew, moved)).toBe(created.secret);
	} finally {
		await during.broker.stop();
	}
});
