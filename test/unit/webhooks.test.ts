/**
 * lib/webhooks.ts: the signature against the Standard Webhooks reference library, the retry
 * schedule's bounds, the delivery state a lease holder's writes give, which addresses and URLs a
 * delivery may reach, the lookup that pins a connection to the checked addresses, and which events
 * a subscription takes.
 */
import { createHash, createHmac, randomBytes } from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import { Webhook } from "standardwebhooks";
import {
	MAX_BACKOFF_MS,
	MAX_ERROR_CHARS,
	MAX_FAILURES_KEPT,
	MAX_FILTER_TINS,
	MAX_URL_LENGTH,
	WEBHOOK_LIST_PAGE,
	advanced,
	backoffMs,
	failed,
	filterProblem,
	isPublicAddress,
	leasedUntil,
	limitedLookup,
	LookupBusyError,
	newSecret,
	answerTag,
	eventsQuestion,
	isAnswerTag,
	openSecret,
	resealed,
	sealedUnder,
	sealSecret,
	webhookKeys,
	newWebhookRecord,
	released,
	nextAttemptAt,
	payloadOf,
	pinnedLookup,
	resolveTarget,
	signPayload,
	takesEvent,
	toWebhookView,
	urlProblem,
	webhookHeaders,
	webhookIdOf
} from "../../lib/webhooks";
import { tinFromSequence } from "../../lib/tin";

describe("signing (Standard Webhooks v1)", () => {
	const event = { type: "intent.status_changed", at: "2026-11-21T18:00:00.000Z", data: { previousState: null, state: "VERIFIED", view: { id: "int_1" } } };

	it("a new secret is whsec_ and the base64 of 32 random bytes, never twice the same", () => {
		const secret = newSecret();
		expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
		expect(Buffer.from(secret.slice(6), "base64")).toHaveLength(32);
		expect(newSecret()).not.toBe(secret);
	});

	it("a sealed secret opens with its key for its own subscription only (id, url, event types, filter); sealing twice changes nothing; a secret in the clear is refused", () => {
		const [key, secret] = [webhookKeys([randomBytes(32)]).sealing, newSecret()];
		const subscription = { id: "wh_1", url: "https://hooks.example.com/in", eventTypes: ["intent.status_changed" as const], filter: null };
		const sealed = sealSecret(secret, key, subscription);
		expect(sealed).toMatch(/^sealed_v1_[A-Za-z0-9+/]+=*$/);
		expect(sealSecret(secret, key, subscription)).not.toBe(sealed); // a fresh nonce each time
		expect(openSecret(sealed, key, subscription)).toBe(secret);
		expect(openSecret(sealed, key, { filter: null, eventTypes: ["intent.status_changed"], url: subscription.url, id: "wh_1" })).toBe(secret);
		expect(sealSecret(sealed, key, subscription)).toBe(sealed);
		expect(() => openSecret(secret, key, subscription)).toThrow();
		expect(() => openSecret(sealed, webhookKeys([randomBytes(32)]).sealing, subscription)).toThrow();
		// A lease naming another subscription, receiver, type set or filter: no secret to sign with.
		for (const other of [{ id: "wh_2" }, { url: "https://attacker.example/collect" }, { eventTypes: ["tin_operation.status_changed" as const] }, { filter: { tins: ["1234567897"] } }])
			expect(() => openSecret(sealed, key, { ...subscription, ...other })).toThrow();
		const bytes = Buffer.from(sealed.slice("sealed_v1_".length), "base64");
		bytes[20] ^= 1;
		expect(() => openSecret(`sealed_v1_${bytes.toString("base64")}`, key, subscription)).toThrow();
		for (const bad of ["", "sealed_v1_", "sealed_v1_AAAA", "plain"]) expect(() => openSecret(bad, key, subscription)).toThrow();
	});

	it("an answer's tag checks for that question (stream, cursor, nonce) and that answer only, and the three derived keys differ", () => {
		const keys = webhookKeys([randomBytes(32)]);
		expect(new Set([keys.sealing, keys.events, keys.leases].map(key => answerTag(key, {}, null))).size).toBe(3);
		const page = [event, { ...event, at: "2026-11-21T18:00:01.000Z" }];
		const question = eventsQuestion("intents", 7, 200, "nonce-of-this-read");
		const tag = answerTag(keys.events, question, page);
		expect(isAnswerTag(keys.events, eventsQuestion("intents", 7, 200, "nonce-of-this-read"), JSON.parse(JSON.stringify(page)), tag)).toBe(true);
		expect(isAnswerTag(keys.events, eventsQuestion("tin_operations", 7, 200, "nonce-of-this-read"), page, tag)).toBe(false);
		// A genuine page offered for another cursor (it would skip events, or repeat them), or for another read.
		expect(isAnswerTag(keys.events, eventsQuestion("intents", 3, 200, "nonce-of-this-read"), page, tag)).toBe(false);
		expect(isAnswerTag(keys.events, eventsQuestion("intents", 7, 200, "nonce-of-a-later-read"), page, tag)).toBe(false);
		expect(isAnswerTag(keys.events, question, [{ ...event, data: { ...event.data, state: "CONFIRMED" } }, page[1]], tag)).toBe(false);
		expect(isAnswerTag(keys.events, question, page.slice(1), tag)).toBe(false);
		expect(isAnswerTag(keys.leases, question, page, tag)).toBe(false);
		for (const bad of [undefined, "", 42, tag.slice(2)]) expect(isAnswerTag(keys.events, question, page, bad)).toBe(false);
	});

	it("under rotation the first key seals and tags, any opens and checks, and resealed moves a secret from an earlier key to the first, never from a next one", () => {
		const [older, newer] = [randomBytes(32), randomBytes(32)];
		// The three steps: the new key taken (next), then current with the old one earlier, then alone.
		const [before, taking, during, after] = [webhookKeys([older]), webhookKeys([older], [newer]), webhookKeys([newer, older]), webhookKeys([newer])];
		const subscription = { id: "wh_1", url: "https://hooks.example.com/in", eventTypes: ["intent.status_changed" as const], filter: null };
		const secret = newSecret();
		const sealedBefore = sealSecret(secret, before.sealing, subscription);
		expect(openSecret(sealedBefore, during.sealing, subscription)).toBe(secret);
		expect(() => openSecret(sealedBefore, after.sealing, subscription)).toThrow();
		expect(sealedUnder(sealedBefore, during, subscription)).toBe("earlier");
		const moved = resealed(sealedBefore, during, subscription)!;
		expect(openSecret(moved, after.sealing, subscription)).toBe(secret);
		expect(sealedUnder(moved, during, subscription)).toBe("current");
		// A process not rolled yet takes the new key's secret, and leaves it under the new key.
		expect(openSecret(moved, taking.sealing, subscription)).toBe(secret);
		expect(sealedUnder(moved, taking, subscription)).toBe("next");
		expect(resealed(moved, taking, subscription)).toBeNull();
		// Nothing to do: already under the first key, no earlier key, or not openable at all.
		expect(resealed(moved, during, subscription)).toBeNull();
		expect(resealed(sealedBefore, before, subscription)).toBeNull();
		const foreign = sealSecret(secret, webhookKeys([randomBytes(32)]).sealing, subscription);
		expect(resealed(foreign, during, subscription)).toBeNull();
		expect(sealedUnder(foreign, during, subscription)).toBe("none");
		expect(sealedUnder(secret, during, subscription)).toBe("clear");
		expect(during.fingerprint).toBe(after.fingerprint);
		expect(during.fingerprint).not.toBe(before.fingerprint);
		// What an operator computes from the key (k8s/README.md): the first 8 bytes of its SHA-256.
		expect(after.fingerprint).toBe(createHash("sha256").update(newer).digest("hex").slice(0, 16));
		// Tags: made under the first key; checked under any listed.
		const question = eventsQuestion("intents", 0, 10, "n");
		expect(isAnswerTag(taking.events, question, [], answerTag(after.events, question, []))).toBe(true);
		expect(isAnswerTag(during.events, question, [], answerTag(before.events, question, []))).toBe(true);
		expect(isAnswerTag(after.events, question, [], answerTag(during.events, question, []))).toBe(true);
		expect(isAnswerTag(before.events, question, [], answerTag(during.events, question, []))).toBe(false);
	});

	it("the reference library verifies every header set we send, and signs the same bytes", () => {
		const secret = newSecret();
		const body = payloadOf(event);
		const timestamp = Math.floor(Date.now() / 1000);
		const headers = webhookHeaders(secret, webhookIdOf("intents", 42), timestamp, body);
		expect(headers).toMatchObject({ "content-type": "application/json", "webhook-id": "evt_intents_42", "webhook-timestamp": String(timestamp) });
		const library = new Webhook(secret);
		expect(library.verify(body, headers)).toEqual({ type: event.type, timestamp: event.at, data: event.data });
		expect(library.sign("evt_intents_42", new Date(timestamp * 1000), body)).toBe(headers["webhook-signature"]);
	});

	it("is HMAC-SHA256 of id.timestamp.body keyed with the decoded secret, and nothing else verifies", () => {
		const secret = `whsec_${Buffer.alloc(24, 7).toString("base64")}`;
		const body = '{"a":1}';
		const expected = createHmac("sha256", Buffer.alloc(24, 7)).update(`evt_tin_operations_1.1700000000.${body}`).digest("base64");
		expect(signPayload(secret, "evt_tin_operations_1", 1700000000, body)).toBe(`v1,${expected}`);

		const timestamp = Math.floor(Date.now() / 1000);
		const headers = webhookHeaders(secret, "evt_intents_1", timestamp, body);
		const library = new Webhook(secret);
		expect(() => library.verify('{"a":2}', headers)).toThrow();
		expect(() => library.verify(body, { ...headers, "webhook-id": "evt_intents_2" })).toThrow();
		expect(() => library.verify(body, { ...headers, "webhook-timestamp": String(timestamp + 1) })).toThrow();
		expect(() => new Webhook(newSecret()).verify(body, headers)).toThrow();
		expect(() => signPayload("not-a-secret", "x", 1, body)).toThrow();
	});

	it("the body is { type, timestamp, data } of the event", () => {
		expect(JSON.parse(payloadOf(event))).toEqual({ type: event.type, timestamp: event.at, data: event.data });
	});

	it("the node:crypto verification of docs/webhooks.md accepts our deliveries and nothing altered", () => {
		const docs = fs.readFileSync(path.join(__dirname, "../../docs/webhooks.md"), "utf8");
		const code = /^```js example:webhooks\.verify\n([\s\S]*?)\n```$/m.exec(docs)?.[1];
		expect(code).toBeDefined();
		const verifyWebhook = new Function("require", `${code}\nreturn verifyWebhook;`)(require) as (secret: string, headers: Record<string, string>, body: string) => unknown;
		const secret = newSecret();
		const body = payloadOf(event);
		const headers = webhookHeaders(secret, "evt_intents_7", Math.floor(Date.now() / 1000), body);
		expect(verifyWebhook(secret, headers, body)).toEqual(JSON.parse(body));
		// Several signatures (a rotation): any valid v1 one does.
		expect(verifyWebhook(secret, { ...headers, "webhook-signature": `v1,AAAA ${headers["webhook-signature"]}` }, body)).toEqual(JSON.parse(body));
		expect(() => verifyWebhook(secret, headers, body.replace("VERIFIED", "REJECTED"))).toThrow(/signature/);
		expect(() => verifyWebhook(newSecret(), headers, body)).toThrow(/signature/);
		expect(() => verifyWebhook(secret, { ...headers, "webhook-id": "evt_intents_8" }, body)).toThrow(/signature/);
		const old = Math.floor(Date.now() / 1000) - 600;
		expect(() => verifyWebhook(secret, webhookHeaders(secret, "evt_intents_7", old, body), body)).toThrow(/timestamp/);
		const { "webhook-signature": _, ...unsigned } = headers;
		expect(() => verifyWebhook(secret, unsigned, body)).toThrow(/missing/);
	});
});

describe("retry schedule", () => {
	const BASE = 5000;

	it("waits between half and all of base × 2^(attempt−1), never more than an hour", () => {
		for (let attempt = 1; attempt <= 60; attempt++) {
			const ceiling = Math.min(MAX_BACKOFF_MS, BASE * 2 ** (attempt - 1));
			expect(backoffMs(attempt, BASE, () => 0)).toBe(Math.round(ceiling / 2));
			expect(backoffMs(attempt, BASE, () => 0.999999)).toBeLessThanOrEqual(ceiling);
			for (let i = 0; i < 20; i++) {
				const wait = backoffMs(attempt, BASE);
				expect(wait).toBeGreaterThanOrEqual(Math.round(ceiling / 2));
				expect(wait).toBeLessThanOrEqual(ceiling);
			}
		}
		expect(backoffMs(1, BASE, () => 0.5)).toBe(3750);
		expect(backoffMs(1000, BASE, () => 1)).toBe(MAX_BACKOFF_MS);
	});

	it("retries until the window from the streak's first failure ends, the last attempt at its end, then disables", () => {
		const first = 1_000_000;
		const day = 24 * 60 * 60 * 1000;
		expect(nextAttemptAt(first, first, 1, BASE, day, () => 1)).toBe(first + BASE);
		// Near the end: the next attempt is the window's end, not past it.
		expect(nextAttemptAt(first, first + day - 1000, 30, BASE, day, () => 1)).toBe(first + day);
		expect(nextAttemptAt(first, first + day, 31, BASE, day)).toBeNull();
		expect(nextAttemptAt(first, first + day + 1, 31, BASE, day)).toBeNull();
	});
});

describe("delivery state", () => {
	const schedule = { baseMs: 1000, retryForMs: 60_000 };
	const created = new Date("2026-11-26T10:00:00.000Z");
	const subscription = () => ({ ...newWebhookRecord({ url: "https://hooks.example.com/in", eventTypes: ["intent.status_changed"] }, { intents: 7, tin_operations: null }, created), ...leasedUntil("worker", "2026-11-26T10:01:00.000Z") });
	const attempt = (webhookId: string) => ({ stream: "intents" as const, seq: 7, webhookId, eventType: "intent.status_changed", status: 500, error: "HTTP 500" });
	const at = (ms: number) => new Date(created.getTime() + ms);

	it("a new subscription is enabled, idle and unleased at version 1, at the given cursors, its filter one criterion or null", () => {
		const record = newWebhookRecord({ url: "https://hooks.example.com/in", eventTypes: ["intent.status_changed"], filter: { tins: ["1234567897"] } }, { intents: 7, tin_operations: null }, created);
		expect(record).toMatchObject({ state: "enabled", version: 1, leasedBy: null, leaseExpiresAt: null, notBefore: null, intentsCursor: 7, tinOperationsCursor: null, delivered: 0, retry: null, failures: [], filter: { tins: ["1234567897"] }, createdAt: created.toISOString() });
		expect(record.id).toMatch(/^wh_[0-9a-f]{32}$/);
		expect(record.secret).toMatch(/^whsec_/);
		expect(newWebhookRecord({ url: "https://x.example/", eventTypes: ["intent.status_changed"] }, { intents: 0, tin_operations: null }, created).filter).toBeNull();
	});

	it("a failure gives the lease up, schedules the next attempt, counts attempts per event and keeps the streak's start", () => {
		const first = failed(subscription(), attempt("evt_intents_8"), at(0), schedule);
		expect(first).toMatchObject({ leasedBy: null, leaseExpiresAt: null, intentsCursor: 7, retry: { webhookId: "evt_intents_8", attempts: 1, firstFailureAt: created.toISOString() } });
		expect(first.notBefore).toBe(first.retry!.nextAttemptAt);
		const again = failed(first, attempt("evt_intents_8"), at(2000), schedule);
		expect(again.retry).toMatchObject({ attempts: 2, firstFailureAt: created.toISOString() });
		// Another event failing carries the streak on: its first attempt, the same start.
		expect(failed(again, attempt("evt_intents_9"), at(4000), schedule).retry).toMatchObject({ webhookId: "evt_intents_9", attempts: 1, firstFailureAt: created.toISOString() });
	});

	it(`keeps the last ${MAX_FAILURES_KEPT} failures, and disables the subscription once the streak's window is over`, () => {
		let record = subscription();
		for (let i = 1; i <= MAX_FAILURES_KEPT + 2; i++) record = failed(record, attempt(`evt_intents_${i}`), at(i), schedule);
		expect(record.failures.map(failure => failure.webhookId)).toEqual(Array.from({ length: MAX_FAILURES_KEPT }, (_, i) => `evt_intents_${i + 3}`));
		expect(record.state).toBe("enabled");
		const last = failed(record, attempt("evt_intents_99"), at(schedule.retryForMs + 1), schedule);
		expect(last).toMatchObject({ state: "disabled", disabledAt: at(schedule.retryForMs + 1).toISOString(), notBefore: null, retry: { nextAttemptAt: null } });
		expect(last.disabledReason).toContain("WEBHOOK_RETRY_FOR_MS");
	});

	it("an advance moves the cursor and renews the lease; a delivery counts and ends the streak, a skip does neither", () => {
		const failing = { ...failed(subscription(), attempt("evt_intents_10"), at(0), schedule), ...leasedUntil("worker", "2026-11-26T10:02:00.000Z") };
		const skipped = advanced(failing, "intents", 9, false, "2026-11-26T10:03:00.000Z");
		expect(skipped).toMatchObject({ intentsCursor: 9, delivered: 0, retry: failing.retry, leasedBy: "worker", leaseExpiresAt: "2026-11-26T10:03:00.000Z", notBefore: "2026-11-26T10:03:00.000Z" });
		expect(advanced(failing, "intents", 8, true, "2026-11-26T10:03:00.000Z")).toMatchObject({ intentsCursor: 8, delivered: 1, retry: null });
	});

	it(`a page of GET /webhooks (${WEBHOOK_LIST_PAGE} of the largest views a client can cause) stays under half of NATS's 1 MB message limit`, () => {
		const url = `https://hooks.example.com/${"a".repeat(MAX_URL_LENGTH - 26)}`;
		const tins = Array.from({ length: MAX_FILTER_TINS }, (_, i) => tinFromSequence(100_000_000 + i));
		let record = newWebhookRecord({ url, eventTypes: ["intent.status_changed", "tin_operation.status_changed"], filter: { tins } }, { intents: Number.MAX_SAFE_INTEGER, tin_operations: Number.MAX_SAFE_INTEGER }, created);
		// Every kept error as long as allowed, of the character JSON doubles.
		for (let i = 0; i <= MAX_FAILURES_KEPT; i++) {
			const failing = { stream: "tin_operations" as const, seq: Number.MAX_SAFE_INTEGER - 1, webhookId: webhookIdOf("tin_operations", Number.MAX_SAFE_INTEGER - i), eventType: "tin_operation.status_changed", status: 599, error: '"'.repeat(MAX_ERROR_CHARS) };
			record = failed(record, failing, at(i), { baseMs: 1000, retryForMs: 1e12 });
		}
		const largest = Buffer.byteLength(JSON.stringify(toWebhookView(record)));
		expect(largest).toBeGreaterThan(14_000);
		expect(largest * WEBHOOK_LIST_PAGE).toBeLessThan(512 * 1024);
	});

	it("an advance past the retried event without delivering it (pruned from the log) leaves nothing due, and the streak runs on from its first failure", () => {
		const failing = { ...failed(subscription(), { ...attempt("evt_intents_10"), seq: 9 }, at(0), schedule), ...leasedUntil("worker", "2026-11-26T10:02:00.000Z") };
		expect(advanced(failing, "intents", 9, false, "2026-11-26T10:03:00.000Z").retry).toEqual(failing.retry);
		expect(advanced(failing, "tin_operations", 12, false, "2026-11-26T10:03:00.000Z").retry).toEqual(failing.retry);
		const passed = advanced(failing, "intents", 12, false, "2026-11-26T10:03:00.000Z");
		expect(passed).toMatchObject({ intentsCursor: 12, retry: { ...failing.retry, nextAttemptAt: null }, delivered: 0, failures: failing.failures });
		// Given back idle: leased again only once the stream has an event after its cursor.
		expect(released(passed, at(1))).toMatchObject({ notBefore: null, leasedBy: null });
		// The next event it takes fails: a first attempt of that event, in the same streak's window.
		const next = failed(released(passed, at(1)), { ...attempt("evt_intents_20"), seq: 19 }, at(schedule.retryForMs + 1), schedule);
		expect(next).toMatchObject({ state: "disabled", retry: { webhookId: "evt_intents_20", attempts: 1, firstFailureAt: failing.retry!.firstFailureAt } });
	});

	it("a subscription stored before deferred and lastDeferredAt were answers 0 and null, and counts from there", () => {
		const { deferred: _count, lastDeferredAt: _at, ...stored } = subscription();
		expect(toWebhookView(stored)).toMatchObject({ deferred: 0, lastDeferredAt: null });
		expect(released(stored, at(0), 1000)).toMatchObject({ deferred: 1, lastDeferredAt: at(0).toISOString() });
	});

	it("a release gives the lease up, due at its retry; a deferred one (no lookup slot) is due no sooner than deferMs, and counted", () => {
		expect(released(subscription(), at(0))).toMatchObject({ leasedBy: null, leaseExpiresAt: null, notBefore: null, deferred: 0, lastDeferredAt: null });
		const deferred = released(subscription(), at(0), 1000);
		expect(deferred).toMatchObject({ leasedBy: null, notBefore: at(1000).toISOString(), deferred: 1, lastDeferredAt: at(0).toISOString(), retry: null, failures: [] });
		// A retry due later than the deferral keeps its time; one due sooner waits for the deferral.
		const failing = { ...failed(subscription(), attempt("evt_intents_8"), at(0), schedule), ...leasedUntil("worker", "2026-11-26T10:02:00.000Z") };
		const retryAt = failing.retry!.nextAttemptAt!;
		expect(released(failing, at(0)).notBefore).toBe(retryAt);
		expect(released(failing, at(0), 1).notBefore).toBe(retryAt);
		expect(released(released(failing, at(0), 3_600_000), at(5), 3_600_000)).toMatchObject({ notBefore: at(3_600_005).toISOString(), deferred: 2, lastDeferredAt: at(5).toISOString(), retry: failing.retry });
	});
});

describe("addresses a delivery may reach", () => {
	it.each([
		"127.0.0.1",
		"127.255.255.254",
		"0.0.0.0",
		"10.0.0.1",
		"10.255.255.255",
		"172.16.0.1",
		"172.31.255.255",
		"192.168.1.1",
		"169.254.169.254",
		"168.63.129.16",
		"100.64.0.1",
		"100.127.255.255",
		"192.0.0.8",
		"192.0.2.1",
		"198.18.0.1",
		"198.51.100.7",
		"203.0.113.9",
		"224.0.0.1",
		"239.255.255.250",
		"240.0.0.1",
		"255.255.255.255",
		"::",
		"::1",
		"::ffff:127.0.0.1",
		"::ffff:10.0.0.1",
		"::ffff:169.254.169.254",
		"::ffff:7f00:1",
		"::127.0.0.1",
		"64:ff9b::a00:1",
		"64:ff9b::a9fe:a9fe",
		"64:ff9b::7f00:1",
		"64:ff9b::192.168.1.1",
		"64:ff9b:1::808:808",
		"fc00::1",
		"fd12:3456::1",
		"fe80::1",
		"fe80::1%eth0",
		"fec0::1",
		"ff02::1",
		"2001:db8::1",
		"2001::1",
		"2002:7f00:1::1",
		"3fff::1",
		"localhost",
		"example.com",
		""
	])("refuses %s", ip => {
		expect(isPublicAddress(ip)).toBe(false);
	});

	it.each(["8.8.8.8", "1.1.1.1", "93.184.215.14", "172.32.0.1", "100.128.0.1", "::ffff:8.8.8.8", "64:ff9b::808:808", "64:ff9b::8.8.8.8", "2606:4700:4700::1111", "2a00:1450:4001:80b::200e"])("admits %s (a public IPv4 address behind NAT64's well-known prefix too: DNS64 networks reach IPv4-only receivers through it)", ip => {
		expect(isPublicAddress(ip)).toBe(true);
	});
});

describe("webhook URLs", () => {
	it("takes http and https only, without credentials or fragment", () => {
		expect(urlProblem("https://hooks.example.com/in?x=1")).toBeNull();
		expect(urlProblem("http://hooks.example.com:8080/")).toBeNull();
		expect(urlProblem("ftp://hooks.example.com/")).toMatch(/http or https/);
		expect(urlProblem("file:///etc/passwd")).toMatch(/http or https/);
		expect(urlProblem("javascript:alert(1)")).toMatch(/http or https/);
		expect(urlProblem("hooks.example.com/in")).toMatch(/absolute/);
		expect(urlProblem("https://user:pass@hooks.example.com/")).toMatch(/credentials/);
		expect(urlProblem("https://user@hooks.example.com/")).toMatch(/credentials/);
		expect(urlProblem("https://hooks.example.com/#frag")).toMatch(/fragment/);
		expect(urlProblem(`https://hooks.example.com/${"€".repeat(300)}`)).toMatch(/percent-encoded/);
		expect(urlProblem(`https://hooks.example.com/${"€".repeat(200)}`)).toBeNull();
	});

	const resolvesTo = (...addresses: string[]) => async () => addresses.map(address => ({ address, family: address.includes(":") ? 6 : 4 }));

	it("checks a literal as it is (any spelling the URL parser takes) and a name after resolution, every address", async () => {
		const never = async () => {
			throw new Error("a literal is not looked up");
		};
		for (const url of ["http://127.0.0.1/", "http://2130706433/", "http://0x7f.1/", "http://0177.0.0.1/", "http://[::1]/", "http://[::ffff:127.0.0.1]/", "http://169.254.169.254/latest/meta-data/"])
			expect({ url, result: await resolveTarget(new URL(url), false, never) }).toEqual({ url, result: { problem: expect.stringMatching(/non-public/) } });
		expect(await resolveTarget(new URL("https://8.8.8.8/"), false, never)).toEqual({ addresses: [{ address: "8.8.8.8", family: 4 }] });

		expect(await resolveTarget(new URL("https://hooks.example.com/"), false, resolvesTo("93.184.215.14"))).toEqual({ addresses: [{ address: "93.184.215.14", family: 4 }] });
		// One private address among public ones: refused whole, the connection could go there. The
		// addresses are not told: a worker-key holder would map the deployment's internal names with them.
		const rebound = (await resolveTarget(new URL("https://rebind.example.com/"), false, resolvesTo("93.184.215.14", "10.0.0.5"))) as { problem: string };
		expect(rebound.problem).toMatch(/non-public/);
		expect(rebound.problem).not.toMatch(/10\.0\.0\.5|93\.184/);
		// A name that does not exist is refused as one that resolves to a private address: the answer
		// does not tell a worker-key holder which internal names exist.
		const nxdomain = async () => {
			throw Object.assign(new Error("not found"), { code: "ENOTFOUND" });
		};
		const serverFailure = async () => {
			throw Object.assign(new Error("server failure"), { code: "EAI_AGAIN" });
		};
		for (const [host, lookup] of [["nowhere.invalid", nxdomain], ["broken.internal", serverFailure], ["hooks.example.com", resolvesTo()]] as const)
			expect(await resolveTarget(new URL(`https://${host}/`), false, lookup)).toEqual({ problem: rebound.problem.replace("rebind.example.com", host) });
		// Where private addresses are allowed there is nothing to hide.
		expect(await resolveTarget(new URL("https://nowhere.invalid/"), true, nxdomain)).toEqual({ problem: "The host nowhere.invalid does not resolve (ENOTFOUND)." });
		expect(await resolveTarget(new URL("https://hooks.example.com/"), true, resolvesTo())).toEqual({ problem: "The host hooks.example.com does not resolve." });
		// WEBHOOK_ALLOW_PRIVATE: resolved, not refused.
		expect(await resolveTarget(new URL("http://localhost/"), true, resolvesTo("127.0.0.1"))).toEqual({ addresses: [{ address: "127.0.0.1", family: 4 }] });
	});

	it("a resolver that never answers holds at most a pool's lookups, and each caller gets its answer within its limit", async () => {
		// A name whose DNS never answers: the system lookup holds a libuv thread until the system gives up.
		const started: string[] = [];
		const hanging: ((addresses: { address: string; family: number }[]) => void)[] = [];
		const slow = (host: string) => {
			started.push(host);
			return new Promise<{ address: string; family: number }[]>(resolve => hanging.push(resolve));
		};
		const lookup = limitedLookup(slow, 2, 100);
		const callers = ["a", "b", "c", "d"].map(host => lookup(host).then(
			() => "answered",
			(err: { code?: string }) => err.code
		));
		// The two running get no answer in time; the two queued never got a slot, and are told so.
		expect(await Promise.all(callers)).toEqual(["ETIMEOUT", "ETIMEOUT", "EBUSY", "EBUSY"]);
		// The queued ones gave up without starting: two lookups ever held, not four.
		expect(started).toEqual(["a", "b"]);
		// A slot frees when its lookup ends, however late: the next caller is served.
		const next = lookup("e");
		await new Promise(resolve => setTimeout(resolve, 20));
		expect(started).toEqual(["a", "b"]);
		hanging[0]([{ address: "93.184.215.14", family: 4 }]);
		await new Promise(resolve => setTimeout(resolve, 20));
		expect(started).toEqual(["a", "b", "e"]);
		hanging[2]([{ address: "93.184.215.14", family: 4 }]);
		expect(await next).toEqual([{ address: "93.184.215.14", family: 4 }]);
		// A lookup that throws at once fails its caller and frees its slot.
		const throwing = limitedLookup(() => {
			throw Object.assign(new Error("bad name"), { code: "EINVAL" });
		}, 1, 50);
		for (let i = 0; i < 2; i++) await expect(throwing("x")).rejects.toMatchObject({ code: "EINVAL" });
		// Through resolveTarget, a refusal that says why.
		const stuck = limitedLookup(() => new Promise(() => {}), 1, 50);
		const [unanswered, waiting] = await Promise.all([resolveTarget(new URL("https://slow.example.com/"), false, stuck), resolveTarget(new URL("https://hooks.example.com/"), false, stuck)]);
		expect(unanswered).toEqual({ problem: expect.stringMatching(/^The host slow\.example\.com does not resolve, or reaches a private/) });
		// Where private addresses are allowed, the code is told (a pool of its own: the one above stays held).
		expect(await resolveTarget(new URL("https://slow.example.com/"), true, limitedLookup(() => new Promise(() => {}), 1, 50))).toEqual({ problem: "The host slow.example.com does not resolve (ETIMEOUT)." });
		// Not blamed on a host that was never looked up.
		expect(waiting).toEqual({ problem: "The host hooks.example.com was not looked up: every lookup slot (1) was taken by other lookups.", busy: true });
		// The resolver's own EBUSY is the host's failure, not the pool's: only the pool's marker defers.
		const resolverBusy = async () => {
			throw Object.assign(new Error("busy"), { code: "EBUSY" });
		};
		expect(await resolveTarget(new URL("https://hooks.example.com/"), true, limitedLookup(resolverBusy, 1, 50))).toEqual({ problem: "The host hooks.example.com does not resolve (EBUSY)." });

		// A caller's own signals (a delivery attempt's): given up waiting for a slot, nothing starts
		// (EBUSY); given up while its lookup runs, ETIMEOUT.
		const tried: string[] = [];
		const ends: (() => void)[] = [];
		const pool = limitedLookup(name => (tried.push(name), new Promise(resolve => ends.push(() => resolve([])))), 1, 10_000);
		const attempt = new AbortController();
		const running = pool("first", { slot: attempt.signal, answer: attempt.signal }).catch((err: { code?: string }) => err.code);
		const queued = pool("second", { slot: attempt.signal, answer: attempt.signal }).catch((err: { code?: string }) => err.code);
		attempt.abort();
		expect([await running, await queued]).toEqual(["ETIMEOUT", "EBUSY"]);
		expect(tried).toEqual(["first"]);
		await expect(pool("third", { slot: AbortSignal.abort() })).rejects.toBeInstanceOf(LookupBusyError);
		expect(tried).toEqual(["first"]);
		// Its whole time over while it waited for a slot: nothing looked up, and the slot goes to the next.
		const over = new AbortController();
		const late = pool("fourth", { answer: over.signal }).catch((err: { code?: string }) => err.code);
		const fifth = pool("fifth");
		over.abort();
		expect(await late).toBe("EBUSY");
		ends[0]();
		await new Promise(resolve => setTimeout(resolve, 10));
		expect(tried).toEqual(["first", "fifth"]);
		ends[1]();
		expect(await fifth).toEqual([]);
	});

	it("the pinned lookup answers the checked addresses only: a request to a name connects there, whatever the DNS says", async () => {
		const lookup = pinnedLookup([
			{ address: "127.0.0.1", family: 4 },
			{ address: "::1", family: 6 }
		]);
		const one = await new Promise(resolve => lookup("anything.example", {}, (err, address, family) => resolve({ err, address, family })));
		expect(one).toEqual({ err: null, address: "127.0.0.1", family: 4 });
		const all = await new Promise(resolve => lookup("anything.example", { all: true }, (err, address) => resolve({ err, address })));
		expect(all).toEqual({ err: null, address: [{ address: "127.0.0.1", family: 4 }, { address: "::1", family: 6 }] });

		const server = http.createServer((req, res) => res.end(req.headers.host));
		await new Promise<void>(resolve => server.listen(0, "127.0.0.1", resolve));
		try {
			const { port } = server.address() as AddressInfo;
			const answer = await new Promise<string>((resolve, reject) => {
				const request = http.request(`http://no-such-host.invalid:${port}/`, { lookup: pinnedLookup([{ address: "127.0.0.1", family: 4 }]), agent: false }, response => {
					let text = "";
					response.on("data", chunk => (text += chunk)).on("end", () => resolve(text));
				});
				request.on("error", reject).end();
			});
			expect(answer).toBe(`no-such-host.invalid:${port}`);
		} finally {
			server.close();
		}
	});
});

describe("which events a subscription takes", () => {
	const intent = (senderWallet: string, recipientTin: string) => ({ type: "intent.status_changed", data: { view: { senderWallet, recipientTin } } });
	const operation = (tin: string) => ({ type: "tin_operation.status_changed", data: { view: { tin } } });

	it("by type, then by sender or by TIN (an intent's recipient, an operation's own)", () => {
		const both = { eventTypes: ["intent.status_changed", "tin_operation.status_changed"] as const };
		expect(takesEvent({ ...both, eventTypes: [...both.eventTypes], filter: null }, intent("A", "1000000008"))).toBe(true);
		expect(takesEvent({ eventTypes: ["tin_operation.status_changed"], filter: null }, intent("A", "1000000008"))).toBe(false);
		expect(takesEvent({ eventTypes: ["intent.status_changed"], filter: { senderWallet: "A" } }, intent("A", "1"))).toBe(true);
		expect(takesEvent({ eventTypes: ["intent.status_changed"], filter: { senderWallet: "A" } }, intent("B", "1"))).toBe(false);
		const byTin = { eventTypes: [...both.eventTypes], filter: { tins: ["1000000008"] } };
		expect(takesEvent(byTin, intent("A", "1000000008"))).toBe(true);
		expect(takesEvent(byTin, intent("A", "1000000016"))).toBe(false);
		expect(takesEvent(byTin, operation("1000000008"))).toBe(true);
		expect(takesEvent(byTin, operation("1000000016"))).toBe(false);
		expect(takesEvent(byTin, { type: "tin_operation.status_changed", data: {} })).toBe(false);
	});

	it("a filter holds one criterion; senderWallet only for intent events", () => {
		expect(filterProblem(["intent.status_changed"], undefined)).toBeNull();
		expect(filterProblem(["intent.status_changed"], { senderWallet: "A" })).toBeNull();
		expect(filterProblem(["intent.status_changed", "tin_operation.status_changed"], { tins: ["1000000008"] })).toBeNull();
		expect(filterProblem(["intent.status_changed"], {})).toMatch(/exactly one/);
		expect(filterProblem(["intent.status_changed"], null)).toBeNull();
		expect(filterProblem(["intent.status_changed"], { tins: null })).toMatch(/exactly one/);
		expect(filterProblem(["intent.status_changed"], { senderWallet: null })).toMatch(/exactly one/);
		expect(filterProblem(["intent.status_changed"], { senderWallet: null, tins: ["1000000008"] })).toBeNull();
		expect(filterProblem(["intent.status_changed"], { senderWallet: "A", tins: ["1000000008"] })).toMatch(/exactly one/);
		expect(filterProblem(["intent.status_changed", "tin_operation.status_changed"], { senderWallet: "A" })).toMatch(/senderWallet/);
	});
});
