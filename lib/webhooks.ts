/**
 * Webhooks per the Standard Webhooks specification (standardwebhooks.com): the subscription
 * record and its views, the input schema, the signature, the retry schedule, which events a
 * subscription takes, and which addresses a delivery may reach (no private networks: SSRF).
 * Framework-free; the webhooks service owns the records, webhook-delivery sends them.
 */
import { createCipheriv, createDecipheriv, createHash, createHmac, hkdfSync, randomBytes, timingSafeEqual } from "node:crypto";
import { promises as dns, type LookupAddress } from "node:dns";
import net from "node:net";
import { Type, type Static } from "@sinclair/typebox";
import { canonicalJson } from "./encoding";
import { newId } from "./ids";
import { INTENT_EVENT_TYPE } from "./intents";
import { address, limit, tin } from "./schemas";
import { TIN_OPERATION_EVENT_TYPE } from "./tin-operations";
import { Address, Count, IsoTime, Nullable, StringEnum, Tin, named } from "./wire-formats";

export const WEBHOOK_EVENT_TYPES = [INTENT_EVENT_TYPE, TIN_OPERATION_EVENT_TYPE] as const;
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number];

/** The event log each type comes from (the outbox of its owner), each numbered on its own. */
export type WebhookStream = "intents" | "tin_operations";
export const STREAM_OF: Record<WebhookEventType, WebhookStream> = { [INTENT_EVENT_TYPE]: "intents", [TIN_OPERATION_EVENT_TYPE]: "tin_operations" };

/**
 * The stream of a subscription's failing event, or null when none is failing. Until that event is
 * delivered nothing else is sent to the subscription, so it waits for that stream's owner.
 */
export function failingStream(subscription: { retry: { eventType: string } | null }): WebhookStream | null {
	return subscription.retry ? (STREAM_OF[subscription.retry.eventType as WebhookEventType] ?? null) : null;
}

/** The store field holding a subscription's cursor in each stream: null when it does not take that stream. */
export const CURSOR_FIELD = { intents: "intentsCursor", tin_operations: "tinOperationsCursor" } as const satisfies Record<WebhookStream, string>;

type WebhookFilter = { senderWallet: string } | { tins: string[] };

/** Failures kept on a subscription for GET /webhooks/{id}: the most recent ones. */
export const MAX_FAILURES_KEPT = 20;
/** A failed attempt's error as kept (and a failed answer's body, of which no more is read). */
export const MAX_ERROR_CHARS = 200;
/**
 * GET /webhooks crosses the bus in pages of this many subscriptions: a view holds up to about
 * 15 KB (a long url, 100 TINs, 20 failures), and NATS refuses messages over 1 MB by default.
 * A page stays under half that (test/unit/webhooks.test.ts).
 */
export const WEBHOOK_LIST_PAGE = 25;
/** Longest wait between two attempts, however many failed. */
export const MAX_BACKOFF_MS = 60 * 60 * 1000;
/** TINs one filter may name. */
export const MAX_FILTER_TINS = 100;
export const MAX_URL_LENGTH = 2048;
const ID_PATTERN = /^wh_[0-9a-f]{32}$/;

// ---------------------------------------------------------------------------------------------
// The record and its views

interface WebhookFailure {
	at: string;
	webhookId: string;
	attempt: number;
	/** The HTTP status answered, null when none was (refused address, timeout, connection error). */
	status: number | null;
	error: string;
}

/** The failing streak: since its first failure, no event was delivered. */
interface WebhookRetry {
	webhookId: string;
	eventType: string;
	/** First failure of the streak: the retry window (WEBHOOK_RETRY_FOR_MS) runs from here. */
	firstFailureAt: string;
	/** Attempts of `webhookId` so far. */
	attempts: number;
	nextAttemptAt: string | null;
	lastError: string;
}

export interface WebhookRecord {
	id: string;
	url: string;
	eventTypes: WebhookEventType[];
	filter: WebhookFilter | null;
	/**
	 * The signing secret, sealed (sealSecret): answered once in the clear, at creation; only a
	 * holder of WEBHOOK_SECRETS_KEY opens it to sign. Records of earlier versions hold it as
	 * `whsec_<base64>`, sealed whenever it leaves the store.
	 */
	secret: string;
	createdAt: string;
	state: "enabled" | "disabled";
	/** Last event handled (delivered or not taken) per stream; null for a stream not subscribed. */
	intentsCursor: number | null;
	tinOperationsCursor: number | null;
	/**
	 * Compare-and-set field: every write goes from `version` to `version + 1`, so the holder of a
	 * lease is whoever wrote last; a write on a stale version (a lapsed lease) changes nothing.
	 */
	version: number;
	leasedBy: string | null;
	leaseExpiresAt: string | null;
	/**
	 * null: idle, taken by a delivery worker as soon as it is behind a stream. Set: not before this
	 * time, whether leased (its expiry) or waiting for a retry (the next attempt).
	 */
	notBefore: string | null;
	/**
	 * When its latest lease was granted (null: never, or stored before this field was). Idle
	 * subscriptions behind a stream are leased the least recently leased first, so that those always
	 * behind (slow receivers) take turns with the others instead of keeping every slot.
	 */
	lastLeasedAt?: string | null;
	delivered: number;
	/**
	 * Attempts put off because this process had no host lookup free; none is held against the
	 * receiver. Absent from subscriptions stored before these fields were.
	 */
	deferred?: number;
	lastDeferredAt?: string | null;
	retry: WebhookRetry | null;
	disabledAt: string | null;
	disabledReason: string | null;
	failures: WebhookFailure[];
}

export const WEBHOOKS_COLLECTION = {
	name: "webhooks",
	fields: { createdAt: "text", state: "text", notBefore: "text", lastLeasedAt: "text", version: "integer", intentsCursor: "integer", tinOperationsCursor: "integer" },
	// GET /webhooks (newest first); the delivery workers' two questions: which retries or lapsed
	// leases are due (by notBefore), which idle subscriptions are behind a stream (whose turn it is
	// first; the cursor is checked along the index, over at most WEBHOOKS_MAX subscriptions). The
	// two by cursor serve the previous version's claims while a rolling update on MongoDB runs both
	// (a version drops the plain indexes it does not declare, and its queries name theirs): drop
	// them in the release after this one.
	indexes: [["createdAt"], ["state", "notBefore"], ["state", "notBefore", "lastLeasedAt"], ["state", "notBefore", "intentsCursor"], ["state", "notBefore", "tinOperationsCursor"]]
} as const;

const WebhookEventTypeSchema = StringEnum(WEBHOOK_EVENT_TYPES);

const WebhookFilterSchema = Type.Union([
	Type.Object({ senderWallet: Address }, { additionalProperties: false, description: "Intent events of this sender" }),
	Type.Object({ tins: Type.Array(Tin, { minItems: 1, maxItems: MAX_FILTER_TINS }) }, { additionalProperties: false, description: "Intent events to these recipient TINs, and operations on these TINs" })
]);

const subscriptionFields = {
	id: Type.String({ description: "wh_ + 32 hex digits" }),
	url: Type.String({ maxLength: MAX_URL_LENGTH }),
	eventTypes: Type.Array(WebhookEventTypeSchema, { minItems: 1 }),
	filter: Nullable(WebhookFilterSchema),
	createdAt: IsoTime,
	state: StringEnum(["enabled", "disabled"] as const),
	cursors: Type.Object(
		{ intents: Type.Optional(Count), tin_operations: Type.Optional(Count) },
		{ additionalProperties: false, description: "The last event handled in each stream it takes (seq)" }
	),
	delivered: Count,
	deferred: Type.Integer({ minimum: 0, description: "Attempts put off, not made: the delivering process had no host lookup free (docs/webhooks.md)" }),
	lastDeferredAt: Nullable(IsoTime),
	retry: Nullable(
		Type.Object(
			{
				webhookId: Type.String(),
				eventType: Type.String(),
				firstFailureAt: IsoTime,
				attempts: Count,
				nextAttemptAt: Nullable(IsoTime),
				lastError: Type.String()
			},
			{ additionalProperties: false, description: "Failing since firstFailureAt: the event being retried; null while deliveries succeed" }
		)
	),
	disabledAt: Nullable(IsoTime),
	disabledReason: Nullable(Type.String()),
	failures: Type.Array(
		Type.Object(
			{ at: IsoTime, webhookId: Type.String(), attempt: Count, status: Nullable(Type.Integer({ minimum: 100, maximum: 599 })), error: Type.String() },
			{ additionalProperties: false }
		),
		{ maxItems: MAX_FAILURES_KEPT, description: "The most recent failed attempts, oldest first" }
	)
};

export const WebhookSubscriptionSchema = Type.Object(subscriptionFields, named("WebhookSubscription", "A subscription and its delivery state; never its secret"));
export type WebhookSubscription = Static<typeof WebhookSubscriptionSchema>;

export const CreatedWebhookSubscriptionSchema = Type.Object(
	{ ...subscriptionFields, secret: Type.String({ pattern: "^whsec_[A-Za-z0-9+/]+={0,2}$", description: "The signing secret: answered here only, never again" }) },
	named("CreatedWebhookSubscription")
);
export type CreatedWebhookSubscription = Static<typeof CreatedWebhookSubscriptionSchema>;

export function toWebhookView(record: WebhookRecord): WebhookSubscription {
	const cursors: WebhookSubscription["cursors"] = {};
	if (record.intentsCursor !== null) cursors.intents = record.intentsCursor;
	if (record.tinOperationsCursor !== null) cursors.tin_operations = record.tinOperationsCursor;
	return {
		id: record.id,
		url: record.url,
		eventTypes: record.eventTypes,
		filter: record.filter,
		createdAt: record.createdAt,
		state: record.state,
		cursors,
		delivered: record.delivered,
		deferred: record.deferred ?? 0,
		lastDeferredAt: record.lastDeferredAt ?? null,
		retry: record.retry,
		disabledAt: record.disabledAt,
		disabledReason: record.disabledReason,
		failures: record.failures
	};
}

export const newWebhookId = () => newId("wh");
export const isWebhookId = (id: string) => ID_PATTERN.test(id);

// ---------------------------------------------------------------------------------------------
// Input

export const createWebhookParams = {
	$$strict: true,
	url: { type: "string", min: 1, max: MAX_URL_LENGTH, description: "http or https, without credentials; must not reach a private address" },
	eventTypes: { type: "array", min: 1, max: WEBHOOK_EVENT_TYPES.length, unique: true, items: { type: "enum", values: [...WEBHOOK_EVENT_TYPES] } },
	filter: {
		type: "object",
		optional: true,
		strict: true,
		description: "One of senderWallet (intent events only) or tins",
		props: {
			senderWallet: { ...address(), optional: true },
			tins: { type: "array", optional: true, min: 1, max: MAX_FILTER_TINS, unique: true, items: tin() }
		}
	}
};

export const listWebhooksParams = { $$strict: true, limit: limit() };
/** The owner's list: a page, after the last subscription of the one before (newest first). */
export const webhookPageParams = {
	$$strict: true,
	limit: { type: "number", integer: true, min: 1, max: WEBHOOK_LIST_PAGE },
	after: { type: "object", optional: true, strict: true, props: { createdAt: "string", id: "string" } }
};
export const webhookRefParams = { $$strict: true, id: { type: "string", max: 64 } };

/** What is wrong with a filter for these event types, or null. */
export function filterProblem(eventTypes: readonly WebhookEventType[], filter: CreateWebhookRequest["filter"]): string | null {
	if (filter == null) return null;
	if ((filter.senderWallet == null) === (filter.tins == null)) return "A filter holds exactly one of senderWallet and tins.";
	if (filter.senderWallet != null && eventTypes.some(type => type !== INTENT_EVENT_TYPE)) return `A senderWallet filter takes only ${INTENT_EVENT_TYPE} events.`;
	return null;
}

/** Whether a subscription takes this event: its type, then its filter. */
export function takesEvent(subscription: Pick<WebhookRecord, "eventTypes" | "filter">, event: { type: string; data: Record<string, unknown> }): boolean {
	if (!(subscription.eventTypes as readonly string[]).includes(event.type)) return false;
	const { filter } = subscription;
	if (!filter) return true;
	const view = (event.data.view ?? {}) as { senderWallet?: unknown; recipientTin?: unknown; tin?: unknown };
	if ("senderWallet" in filter) return event.type === INTENT_EVENT_TYPE && view.senderWallet === filter.senderWallet;
	const tinOf = event.type === INTENT_EVENT_TYPE ? view.recipientTin : view.tin;
	return typeof tinOf === "string" && filter.tins.includes(tinOf);
}

// ---------------------------------------------------------------------------------------------
// Signing (Standard Webhooks: symmetric, v1)

const SECRET_PREFIX = "whsec_";

/** A new signing secret: 32 random bytes, `whsec_<base64>`. */
export function newSecret(): string {
	return SECRET_PREFIX + randomBytes(32).toString("base64");
}

/** Keys under rotation: the first seals and tags, and any of them opens and checks. */
export type KeyRing = readonly Buffer[];

function currentOf(keys: KeyRing): Buffer {
	const [current] = keys;
	if (!current) throw new Error("a key ring without a key");
	return current;
}

/**
 * The keys derived from WEBHOOK_SECRETS_KEY (HKDF-SHA256), held by the webhooks owners, the event
 * owners (mempool, tin) and the delivery workers, not by the gateway: one seals the signing
 * secrets, one tags the event pages and one the leases a delivery worker acts on.
 *
 * Under rotation each is a ring: the current key, then the earlier ones WEBHOOK_SECRETS_KEY lists
 * after it (still taken; the owners seal again under the current key what they sealed), then the
 * next ones of WEBHOOK_SECRETS_KEY_NEXT (taken, never sealed with, and never sealed away from: a
 * process not yet rolled to the new key leaves alone what the rolled ones sealed under it).
 */
export interface WebhookKeys {
	sealing: KeyRing;
	events: KeyRing;
	leases: KeyRing;
	/** How many keys after the first are earlier ones; the rest are next ones. */
	earlier: number;
	/**
	 * The current master key's fingerprint, for logs: the first 8 bytes of its SHA-256 in hex, which
	 * tell keys apart and reveal none (`printf %s <key> | base64 -d | sha256sum | cut -c1-16`).
	 */
	fingerprint: string;
}

export function webhookKeys(masters: KeyRing, next: readonly Buffer[] = []): WebhookKeys {
	const ring = [...masters, ...next];
	const derive = (info: string) => ring.map(master => Buffer.from(hkdfSync("sha256", master, Buffer.alloc(0), info, 32)));
	return {
		sealing: derive("scs webhook secrets v1"),
		events: derive("scs webhook events v1"),
		leases: derive("scs webhook leases v1"),
		earlier: masters.length - 1,
		fingerprint: createHash("sha256").update(currentOf(masters)).digest("hex").slice(0, 16)
	};
}

/** What a sealed secret is bound to: its subscription, the receiver and what it takes. */
export type SealedFor = Pick<WebhookRecord, "id" | "url" | "eventTypes" | "filter">;
const boundTo = ({ id, url, eventTypes, filter }: SealedFor) => Buffer.from(canonicalJson({ id, url, eventTypes, filter }));

const SEALED_PREFIX = "sealed_v1_";
const IV_BYTES = 12;
const TAG_BYTES = 16;

/**
 * A signing secret as it is stored and as it crosses the bus: AES-256-GCM under the sealing key,
 * bound to its subscription (id, url, event types, filter), so that it opens for no other
 * subscription and no other receiver: a lease with another url is no use to a forger.
 * `sealed_v1_<base64 iv‖ciphertext‖tag>`. A secret already sealed is answered as it is.
 */
export function sealSecret(secret: string, keys: KeyRing, subscription: SealedFor): string {
	if (secret.startsWith(SEALED_PREFIX)) return secret;
	const iv = randomBytes(IV_BYTES);
	const cipher = createCipheriv("aes-256-gcm", currentOf(keys), iv).setAAD(boundTo(subscription));
	const sealed = Buffer.concat([iv, cipher.update(secret, "utf8"), cipher.final(), cipher.getAuthTag()]);
	return SEALED_PREFIX + sealed.toString("base64");
}

/**
 * The `whsec_` secret of a sealed one; throws when it does not open for `subscription` with any of
 * `keys`. A secret in the clear is refused too: the owners of this version lease only sealed ones,
 * so one in the clear comes from an owner of an earlier version (wait for it to be replaced) or
 * from whoever else answered in its name.
 */
export function openSecret(stored: string, keys: KeyRing, subscription: SealedFor): string {
	return opened(stored, keys, subscription).secret;
}

/** Under which of `keys` a stored secret opens: the current key, an earlier or a next one, none, or it is in the clear. */
export type SealedUnder = "current" | "earlier" | "next" | "none" | "clear";

export function sealedUnder(stored: string, keys: WebhookKeys, subscription: SealedFor): SealedUnder {
	if (!stored.startsWith(SEALED_PREFIX)) return "clear";
	try {
		const { key } = opened(stored, keys.sealing, subscription);
		return key === 0 ? "current" : key <= keys.earlier ? "earlier" : "next";
	} catch {
		return "none";
	}
}

/**
 * Under rotation: `stored` sealed again under the current key when it opens under an earlier one;
 * null when it needs nothing (or does not open at all, which is for its next reader to say).
 */
export function resealed(stored: string, keys: WebhookKeys, subscription: SealedFor): string | null {
	if (!keys.earlier || !stored.startsWith(SEALED_PREFIX)) return null;
	try {
		const { secret, key } = opened(stored, keys.sealing, subscription);
		return key > 0 && key <= keys.earlier ? sealSecret(secret, keys.sealing, subscription) : null;
	} catch {
		return null;
	}
}

/** The secret, and the index in `keys` of the key it opened under. */
function opened(stored: string, keys: KeyRing, subscription: SealedFor): { secret: string; key: number } {
	if (!stored.startsWith(SEALED_PREFIX)) throw new Error("not a sealed webhook secret");
	const sealed = Buffer.from(stored.slice(SEALED_PREFIX.length), "base64");
	if (sealed.length <= IV_BYTES + TAG_BYTES) throw new Error("a sealed webhook secret too short");
	for (const [i, key] of keys.entries()) {
		const decipher = createDecipheriv("aes-256-gcm", key, sealed.subarray(0, IV_BYTES)).setAAD(boundTo(subscription));
		decipher.setAuthTag(sealed.subarray(sealed.length - TAG_BYTES));
		try {
			return { secret: Buffer.concat([decipher.update(sealed.subarray(IV_BYTES, sealed.length - TAG_BYTES)), decipher.final()]).toString("utf8"), key: i };
		} catch (err) {
			if (i === keys.length - 1) throw err;
		}
	}
	throw new Error("no key to open a sealed webhook secret");
}

/**
 * The tag a key holder gives an answer another key holder acts on (HMAC-SHA256 under one of the
 * derived keys), over the question and the answer: a page of events, a lease, a log's head, the
 * result of a lease write. The question carries the asker's `nonce`, fresh each time, so that
 * neither a made-up answer nor a genuine one captured earlier (a stale lease, a page that would
 * repeat or skip events) passes for the answer to this question, whoever sends it in the owner's
 * name.
 */
export function answerTag(keys: KeyRing, question: Record<string, unknown>, answer: unknown): string {
	return tagUnder(currentOf(keys), canonicalJson({ question, answer })).toString("base64");
}

export function isAnswerTag(keys: KeyRing, question: Record<string, unknown>, answer: unknown, tag: unknown): boolean {
	const given = typeof tag === "string" ? Buffer.from(tag, "base64") : Buffer.alloc(0);
	const text = canonicalJson({ question, answer });
	return keys.some(key => {
		const expected = tagUnder(key, text);
		return given.length === expected.length && timingSafeEqual(given, expected);
	});
}

const tagUnder = (key: Buffer, text: string) => createHmac("sha256", key).update(text).digest();

/** The worker's question for a page of events (the whole log after `after`, at most `limit`), as the event owner tags it. */
export const eventsQuestion = (stream: WebhookStream, after: number, limit: number, nonce: string) => ({ stream, after, limit, nonce });

/** The webhooks owner's question for a stream's latest event number (a new subscription's cursor), as the event owner tags it. */
export const headQuestion = (stream: WebhookStream, nonce: string) => ({ stream, head: true, nonce });

/** The worker's claim, as the webhooks owner tags each lease it answers (with its length, `leaseTtlMs`). */
export const leaseQuestion = (leasedBy: string, nonce: string) => ({ leasedBy, nonce });

/** A fresh nonce for a question (128 random bits). */
export const newNonce = () => randomBytes(16).toString("base64url");

/** The writes a lease holder makes on its subscription (the webhooks owner's actions). */
export type HolderWrite = "advance" | "fail" | "release";

/**
 * A lease holder's write as it goes to the webhooks owner: with a fresh nonce, and the proof that
 * a key holder made it (a tag under the leases key over the write and its params), so that no
 * process on the bus moves a cursor, fails an event or gives a lease back in a worker's name.
 */
export function holderWriteRequest<P extends object>(keys: WebhookKeys, write: HolderWrite, params: P): P & { nonce: string; proof: string } {
	const question = { ...params, nonce: newNonce() };
	return { ...question, proof: answerTag(keys.leases, { write }, question) };
}

/** Whether a write's params (its nonce included) carry a key holder's proof. */
export function isHolderWrite(keys: WebhookKeys, write: HolderWrite, params: Record<string, unknown>): boolean {
	const { proof, ...question } = params;
	return isAnswerTag(keys.leases, { write }, question, proof);
}

/** The owner's answer to a holder's write, tagged over its nonce: a worker acts only on the owner's own answer. */
export const holderWriteReply = <T>(keys: WebhookKeys, write: HolderWrite, nonce: string, result: T) => ({ result, tag: answerTag(keys.leases, { write, nonce }, result) });

/** The result of a holder's write from the owner's answer; throws when a key holder did not make it. */
export function holderWriteResult<T>(keys: WebhookKeys, write: HolderWrite, nonce: string, reply: { result?: T; tag?: unknown } | null | undefined): T {
	if (!reply || !isAnswerTag(keys.leases, { write, nonce }, reply.result ?? null, reply.tag)) throw new Error(`the answer to webhooks.${write} does not check with this process's WEBHOOK_SECRETS_KEY`);
	return reply.result as T;
}

/** `v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`, keyed with the secret's bytes. */
export function signPayload(secret: string, webhookId: string, timestampS: number, body: string): string {
	if (!secret.startsWith(SECRET_PREFIX)) throw new Error("a webhook secret starts with whsec_");
	const key = Buffer.from(secret.slice(SECRET_PREFIX.length), "base64");
	return `v1,${createHmac("sha256", key).update(`${webhookId}.${timestampS}.${body}`).digest("base64")}`;
}

/** Stable per event: every retry of it, to every subscription, carries the same id (receivers dedupe on it). */
export const webhookIdOf = (stream: WebhookStream, seq: number) => `evt_${stream}_${seq}`;
const seqOfWebhookId = (webhookId: string) => Number(webhookId.slice(webhookId.lastIndexOf("_") + 1));

/** The body of a delivery: Standard Webhooks' `{ type, timestamp, data }`, timestamp being the event's. */
export const payloadOf = (event: { type: string; at: string; data: Record<string, unknown> }) => JSON.stringify({ type: event.type, timestamp: event.at, data: event.data });

export function webhookHeaders(secret: string, webhookId: string, timestampS: number, body: string): Record<string, string> {
	return {
		"content-type": "application/json",
		"webhook-id": webhookId,
		"webhook-timestamp": String(timestampS),
		"webhook-signature": signPayload(secret, webhookId, timestampS, body)
	};
}

// ---------------------------------------------------------------------------------------------
// Retries

/**
 * The wait before attempt `attempt + 1` after `attempt` failures: base × 2^(attempt−1), at most
 * MAX_BACKOFF_MS, then jittered to between half and all of it, so subscriptions failing together
 * (one receiver down) do not retry in step.
 */
export function backoffMs(attempt: number, baseMs: number, random: () => number = Math.random): number {
	const ceiling = Math.min(MAX_BACKOFF_MS, baseMs * 2 ** Math.min(Math.max(attempt - 1, 0), 40));
	return Math.round(ceiling / 2 + (ceiling / 2) * random());
}

/**
 * After a failed attempt: when to try again, or null to disable the subscription. The retry
 * window runs `retryForMs` from the streak's first failure; the last attempt falls at its end.
 */
export function nextAttemptAt(firstFailureMs: number, nowMs: number, attempt: number, baseMs: number, retryForMs: number, random?: () => number): number | null {
	const end = firstFailureMs + retryForMs;
	if (nowMs >= end) return null;
	return Math.min(nowMs + backoffMs(attempt, baseMs, random), end);
}

// ---------------------------------------------------------------------------------------------
// Delivery state: each change gives the next record; the owner writes it with version + 1, a
// compare-and-set on the version it read (services/webhooks.service.ts).

export type StreamCursors = Record<WebhookStream, number | null>;

/** Each stream's latest event, of the streams whose owner a delivery worker reaches now. */
export type StreamHeads = Partial<Record<WebhookStream, number>>;

/** POST /webhooks (createWebhookParams). */
export interface CreateWebhookRequest {
	url: string;
	eventTypes: WebhookEventType[];
	/** null is taken as absent: the gateway drops null members (services/json-body.ts), a caller over the broker may not. */
	filter?: { senderWallet?: string | null; tins?: string[] | null } | null;
}

type Lease = Pick<WebhookRecord, "leasedBy" | "leaseExpiresAt" | "notBefore">;

/** Held by `leasedBy` until `leaseExpiresAt`; due again then, should its holder die. */
export const leasedUntil = (leasedBy: string, leaseExpiresAt: string): Lease => ({ leasedBy, leaseExpiresAt, notBefore: leaseExpiresAt });

/** Held by nobody: idle (notBefore null), or waiting for a retry at `notBefore`. */
export const unleased = (notBefore: string | null): Lease => ({ leasedBy: null, leaseExpiresAt: null, notBefore });

/** A new subscription, enabled and idle, delivering what its streams log after `cursors` (null: a stream it does not take). */
export function newWebhookRecord(request: CreateWebhookRequest, cursors: StreamCursors, now: Date): WebhookRecord {
	const { url, eventTypes, filter } = request;
	return {
		id: newWebhookId(),
		url,
		eventTypes,
		filter: filter?.senderWallet != null ? { senderWallet: filter.senderWallet } : filter?.tins != null ? { tins: filter.tins } : null,
		secret: newSecret(),
		createdAt: now.toISOString(),
		state: "enabled",
		intentsCursor: cursors.intents,
		tinOperationsCursor: cursors.tin_operations,
		version: 1,
		...unleased(null),
		lastLeasedAt: null,
		delivered: 0,
		deferred: 0,
		lastDeferredAt: null,
		retry: null,
		disabledAt: null,
		disabledReason: null,
		failures: []
	};
}

/**
 * The events of `stream` up to `seq` are handled (the last one delivered when `delivered`), and the
 * lease runs on. A holder that moves past the event being retried without delivering it found it
 * gone from the log (pruned): the streak goes on, from its first failure, but nothing is due until
 * the next event the subscription takes (`nextAttemptAt` null). Left due, it would be leased and
 * given back again and again with nothing to attempt.
 */
export function advanced(record: WebhookRecord, stream: WebhookStream, seq: number, delivered: boolean, leaseExpiresAt: string): WebhookRecord {
	const next = { ...record, [CURSOR_FIELD[stream]]: seq, ...leasedUntil(record.leasedBy ?? "", leaseExpiresAt) };
	if (delivered) return { ...next, delivered: record.delivered + 1, retry: null };
	const retried = record.retry && failingStream(record) === stream ? seqOfWebhookId(record.retry.webhookId) : null;
	return retried !== null && seq >= retried ? { ...next, retry: { ...record.retry!, nextAttemptAt: null } } : next;
}

/**
 * Given up by its holder, due again at its retry if it has one. `deferMs`: the holder could not
 * make its attempt (no host lookup free), so the subscription is also due no sooner than that.
 * `restMs`: its lease found nothing the subscription takes, so it is due no sooner than that.
 */
export function released(record: WebhookRecord, now: Date, deferMs?: number, restMs?: number): WebhookRecord {
	const retryAt = record.retry?.nextAttemptAt ?? null;
	const waitMs = deferMs || restMs;
	if (!waitMs) return { ...record, ...unleased(retryAt) };
	const waitedTo = new Date(now.getTime() + waitMs).toISOString();
	const given = { ...record, ...unleased(retryAt !== null && retryAt > waitedTo ? retryAt : waitedTo) };
	// Only an attempt not made is a deferral (shown in the subscription's view); a rest is not.
	return deferMs ? { ...given, deferred: (record.deferred ?? 0) + 1, lastDeferredAt: now.toISOString() } : given;
}

export interface FailedAttempt {
	stream: WebhookStream;
	/** Events of `stream` up to here are handled; the failing one is next. */
	seq: number;
	webhookId: string;
	eventType: string;
	status: number | null;
	error: string;
}

/**
 * After a failed attempt: the lease given up, the next attempt scheduled, or the subscription
 * disabled once the streak's retry window is over. The streak goes on through other events, so a
 * receiver that never answers is disabled in time.
 */
export function failed(record: WebhookRecord, attempt: FailedAttempt, now: Date, schedule: { baseMs: number; retryForMs: number }): WebhookRecord {
	const at = now.toISOString();
	const firstFailureAt = record.retry?.firstFailureAt ?? at;
	const attempts = record.retry?.webhookId === attempt.webhookId ? record.retry.attempts + 1 : 1;
	const nextMs = nextAttemptAt(Date.parse(firstFailureAt), now.getTime(), attempts, schedule.baseMs, schedule.retryForMs);
	const nextAt = nextMs === null ? null : new Date(nextMs).toISOString();
	const next: WebhookRecord = {
		...record,
		[CURSOR_FIELD[attempt.stream]]: attempt.seq,
		...unleased(nextAt),
		retry: { webhookId: attempt.webhookId, eventType: attempt.eventType, firstFailureAt, attempts, nextAttemptAt: nextAt, lastError: attempt.error },
		failures: [...record.failures, { at, webhookId: attempt.webhookId, attempt: attempts, status: attempt.status, error: attempt.error }].slice(-MAX_FAILURES_KEPT)
	};
	if (nextAt !== null) return next;
	return { ...next, state: "disabled", disabledAt: at, disabledReason: `Every attempt failed for ${schedule.retryForMs} ms (WEBHOOK_RETRY_FOR_MS) since ${firstFailureAt}` };
}

// ---------------------------------------------------------------------------------------------
// Where a delivery may go (SSRF)

/** Special-purpose ranges (IANA registries); an IPv4-mapped IPv6 address is checked against the IPv4 ones. */
const SPECIAL = new net.BlockList();
for (const [prefix, bits] of [
	["0.0.0.0", 8], // "this network", unspecified
	["10.0.0.0", 8],
	["100.64.0.0", 10], // CGNAT
	["127.0.0.0", 8],
	["169.254.0.0", 16], // link-local, cloud metadata
	["172.16.0.0", 12],
	["192.0.0.0", 24],
	["192.0.2.0", 24],
	["192.88.99.0", 24],
	["192.168.0.0", 16],
	["198.18.0.0", 15],
	["198.51.100.0", 24],
	["203.0.113.0", 24],
	["224.0.0.0", 4], // multicast
	["240.0.0.0", 4], // reserved, broadcast
	["168.63.129.16", 32] // Azure's host endpoint (metadata, DNS, health): public-range, yet the host's own
] as const)
	SPECIAL.addSubnet(prefix, bits, "ipv4");
// Inside global unicast (2000::/3): Teredo, ORCHID and the like, documentation, 6to4 (which embeds IPv4).
for (const [prefix, bits] of [["2001::", 23], ["2001:db8::", 32], ["2002::", 16], ["3fff::", 20]] as const) SPECIAL.addSubnet(prefix, bits, "ipv6");

/** IPv6 outside global unicast is never public: unspecified, loopback, unique-local, link-local, multicast, NAT64, … */
const GLOBAL_UNICAST = new net.BlockList();
GLOBAL_UNICAST.addSubnet("2000::", 3, "ipv6");
const IPV4_MAPPED = new net.BlockList();
IPV4_MAPPED.addSubnet("::ffff:0:0", 96, "ipv6");
/** NAT64's well-known prefix (RFC 6052): DNS64 networks reach IPv4-only hosts at the IPv4 address in its last 32 bits. */
const NAT64_WELL_KNOWN = new net.BlockList();
NAT64_WELL_KNOWN.addSubnet("64:ff9b::", 96, "ipv6");

/** The IPv4 address in the last 32 bits of an IPv6 one. */
function embeddedIpv4(ip: string): string {
	const last = new net.SocketAddress({ address: ip, family: "ipv6" }).address.split(":").slice(-2);
	const [high, low] = last.map(group => parseInt(group || "0", 16));
	return [high >> 8, high & 255, low >> 8, low & 255].join(".");
}

/**
 * Whether a delivery may connect to this IP address (anything that is not an address: no). A
 * NAT64 prefix of a network's own (inside global unicast) is not known here: such a network
 * blocks private destinations at its egress (docs/webhooks.md).
 */
export function isPublicAddress(ip: string): boolean {
	const family = net.isIP(ip);
	if (family === 4) return !SPECIAL.check(ip, "ipv4");
	if (family !== 6 || ip.includes("%")) return false;
	if (IPV4_MAPPED.check(ip, "ipv6")) return !SPECIAL.check(ip, "ipv6");
	if (NAT64_WELL_KNOWN.check(ip, "ipv6")) return !SPECIAL.check(embeddedIpv4(ip), "ipv4");
	return GLOBAL_UNICAST.check(ip, "ipv6") && !SPECIAL.check(ip, "ipv6");
}

/** The URL's host as an address or a name (URL keeps IPv6 literals in brackets). */
const hostOf = (url: URL) => url.hostname.replace(/^\[(.*)\]$/, "$1");

/** What is wrong with a webhook URL's form, or null (where it resolves is checked by resolveTarget). */
export function urlProblem(raw: string): string | null {
	let url: URL;
	try {
		url = new URL(raw);
	} catch {
		return "The url must be an absolute http or https URL.";
	}
	if (url.protocol !== "http:" && url.protocol !== "https:") return "The url must be http or https.";
	if (url.username || url.password) return "The url must not hold credentials.";
	if (url.hash) return "The url must not hold a fragment.";
	if (!hostOf(url)) return "The url must name a host.";
	// What is stored and requested is the parsed form, which percent-encodes: up to nine characters for one.
	if (url.href.length > MAX_URL_LENGTH) return `The url must be at most ${MAX_URL_LENGTH} characters once percent-encoded.`;
	return null;
}

type Lookup = (hostname: string) => Promise<LookupAddress[]>;

/** How long a caller waits for a slot to look up a webhook host, and then for the answer. */
export const LOOKUP_TIMEOUT_MS = 5000;

/** Nothing was looked up: every slot of the pool stayed taken while the caller waited. */
export class LookupBusyError extends Error {
	readonly code = "EBUSY";
}

/**
 * A lookup its caller may stop waiting for: `slot` aborts the wait for a slot, `answer` any wait.
 * Given up before it had a slot, nothing is looked up (LookupBusyError); after, ETIMEOUT.
 */
export type LimitedLookup = (hostname: string, signals?: { slot?: AbortSignal; answer?: AbortSignal }) => Promise<LookupAddress[]>;

/**
 * `lookup`, at most `inFlight` at once. A caller waits at most `timeoutMs` for a slot and then at
 * most `timeoutMs` for the answer, less if its signals abort first. The system resolver runs on
 * libuv's thread pool (4 threads, shared with file and zlib work) and cannot be cancelled: a host
 * whose DNS never answers holds its thread until the system gives up. A slot is freed when the
 * lookup ends, not when its caller stops waiting, so slow names hold at most `inFlight` threads,
 * however many requests name them.
 */
export function limitedLookup(lookup: Lookup, inFlight: number, timeoutMs: number): LimitedLookup {
	let running = 0;
	const queue: (() => void)[] = [];
	return (host, { slot, answer } = {}) =>
		new Promise((resolve, reject) => {
			let timer: NodeJS.Timeout | undefined;
			const stopWaiting = () => {
				clearTimeout(timer);
				for (const signal of [slot, answer]) signal?.removeEventListener("abort", busy);
				answer?.removeEventListener("abort", late);
			};
			const busy = () => {
				stopWaiting();
				const queued = queue.indexOf(start);
				if (queued >= 0) queue.splice(queued, 1);
				reject(new LookupBusyError(`every lookup slot (${inFlight}) was taken by other lookups`));
			};
			const late = () => {
				stopWaiting();
				reject(Object.assign(new Error("no answer in time"), { code: "ETIMEOUT" }));
			};
			const start = () => {
				stopWaiting();
				running++;
				timer = setTimeout(late, timeoutMs).unref();
				answer?.addEventListener("abort", late, { once: true });
				// Through a promise: a lookup that throws at once fails its caller, and still frees its slot.
				Promise.resolve(host)
					.then(lookup)
					.then(resolve, reject)
					.finally(() => {
						stopWaiting();
						running--;
						queue.shift()?.();
					});
			};
			// A caller that stops waiting before it has a slot (either signal) started nothing.
			if (slot?.aborted || answer?.aborted) return busy();
			if (running < inFlight) return start();
			timer = setTimeout(busy, timeoutMs).unref();
			for (const signal of [slot, answer]) signal?.addEventListener("abort", busy, { once: true });
			queue.push(start);
		});
}

const systemResolver: Lookup = host => dns.lookup(host, { all: true, verbatim: true });

/**
 * The system resolver, every address of a name in the order it gives them, within the limits
 * above: what resolveTarget checks in production. Subscriptions and deliveries have a pool each
 * (1 and 2 of libuv's 4 threads at most), so that names sent to POST /webhooks that never resolve
 * do not hold up the deliveries.
 */
export const subscriptionLookup: LimitedLookup = limitedLookup(systemResolver, 1, LOOKUP_TIMEOUT_MS);
export const deliveryLookup: LimitedLookup = limitedLookup(systemResolver, 2, LOOKUP_TIMEOUT_MS);

/**
 * The addresses a delivery to `url` may connect to, or why none: an address literal is checked as
 * it is, a name after resolution, and every address it resolves to must be public (an answer
 * mixing one private address in is refused whole). allowPrivate (WEBHOOK_ALLOW_PRIVATE) skips the check.
 */
export async function resolveTarget(url: URL, allowPrivate: boolean, lookup: Lookup): Promise<{ addresses: LookupAddress[] } | { problem: string; busy?: true }> {
	const host = hostOf(url);
	const family = net.isIP(host);
	if (family) return allowPrivate || isPublicAddress(host) ? { addresses: [{ address: host, family }] } : { problem: "The url reaches a private, loopback, link-local or otherwise non-public address." };
	// A name that does not exist and one that resolves to a private address are refused alike, and
	// the addresses are not told: either would map the deployment's internal names for the caller.
	const notPublic = { problem: `The host ${host} does not resolve, or reaches a private, loopback, link-local or otherwise non-public address (which of the two is not told).` };
	let addresses: LookupAddress[];
	try {
		addresses = await lookup(host);
	} catch (err) {
		// Not the host's fault: this process is busy looking up others.
		if (err instanceof LookupBusyError) return { problem: `The host ${host} was not looked up: ${err.message}.`, busy: true };
		// Whatever failed (no such name, a zone that does not answer): told apart, the codes would map internal zones too.
		if (!allowPrivate) return notPublic;
		return { problem: `The host ${host} does not resolve (${(err as { code?: string }).code ?? "lookup failed"}).` };
	}
	if (!addresses.length) return allowPrivate ? { problem: `The host ${host} does not resolve.` } : notPublic;
	if (!allowPrivate && addresses.some(({ address: ip }) => !isPublicAddress(ip))) return notPublic;
	return { addresses };
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * A `lookup` for http.request that answers only `addresses` (those resolveTarget checked), so the
 * connection goes where the check looked, whatever the DNS answers by then (no rebinding).
 * With `all` (Node's happy eyeballs) every checked address, else the first.
 */
export function pinnedLookup(addresses: readonly LookupAddress[]) {
	return (_hostname: string, options: { all?: boolean }, callback: LookupCallback): void => {
		if (options.all) callback(null, addresses.map(({ address: ip, family }) => ({ address: ip, family })));
		else callback(null, addresses[0].address, addresses[0].family);
	};
}
