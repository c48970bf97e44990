/**
 * webhooks: owns the webhook subscriptions (docs/webhooks.md): the worker routes that create,
 * list, read and delete them, and the internal actions the delivery workers (webhook-delivery)
 * take a subscription's lease with and move its cursor with, each a compare-and-set on `version`.
 * The delivery state lives here, so a worker that dies loses nothing but its lease.
 */
import { promises as dns } from "node:dns";
import type { Context, ServiceSchema } from "moleculer";
import type { Config } from "../lib/config";
import { ServiceError } from "../lib/errors";
import type { Collection, ListQuery, StoredEvent, Where } from "../lib/store";
import {
	CURSOR_FIELD,
	MAX_FAILURES_KEPT,
	STREAM_OF,
	WEBHOOKS_COLLECTION,
	createWebhookParams,
	failingStream,
	filterProblem,
	isWebhookId,
	listWebhooksParams,
	newSecret,
	newWebhookId,
	nextAttemptAt,
	resolveTarget,
	toWebhookView,
	urlProblem,
	webhookRefParams,
	type CreatedWebhookSubscription,
	type WebhookEventType,
	type WebhookRecord,
	type WebhookStream,
	type WebhookSubscription
} from "../lib/webhooks";
import type { EventStream } from "../mixins/outbox.mixin";
import { storeMixin } from "../mixins/store.mixin";
import { internal } from "./internal";

/** The owner of each stream's events (mixins/outbox.mixin.ts), and its action names. */
export const EVENT_OWNER = { intents: "mempool", tin_operations: "tin" } as const satisfies Record<EventStream, string>;

/** Subscriptions one claim may lease; it reads a few times as many per question (due, behind each stream), as other workers may take some first. */
const CLAIM_MAX = 100;
const CLAIM_SLACK = 4;
/**
 * Due subscriptions read at a time: as many as the largest claim looks at, so that retries waiting
 * for an absent owner (due, and oldest first, all along) cost one read, not one per few of them.
 */
const DUE_PAGE = CLAIM_MAX * CLAIM_SLACK;

/** A delivery lease outlasts an attempt (WEBHOOK_TIMEOUT_MS) with room to record its outcome. */
const LEASE_ATTEMPTS = 3;

interface CreateRequest {
	url: string;
	eventTypes: WebhookEventType[];
	filter?: { senderWallet?: string; tins?: string[] };
}

/** What a delivery worker gets for a lease: the record (with its secret) and how long the lease lasts. */
export interface WebhookLease {
	subscription: WebhookRecord;
	leaseTtlMs: number;
}

const invalid = (field: string, message: string) => new ServiceError("VALIDATION_ERROR", message, [{ type: field, field, message }]);
const streamParam = { type: "enum", values: Object.keys(CURSOR_FIELD) };
const leaseParams = { id: { type: "string", max: 64 }, version: { type: "number", integer: true, min: 1 } };

export function webhooksService(config: Config): ServiceSchema {
	let webhooks: Collection<WebhookRecord>;
	const leaseTtlMs = LEASE_ATTEMPTS * config.webhookTimeoutMs;
	const lookup = (host: string) => dns.lookup(host, { all: true, verbatim: true });

	async function mustGet(id: string): Promise<WebhookRecord> {
		const record = isWebhookId(id) ? await webhooks.get(id) : null;
		if (!record) throw new ServiceError("NOT_FOUND", `Webhook subscription ${id} not found`);
		return record;
	}

	/** Writes `next` (version + 1) over `current` if nobody wrote since; the new record, or null. */
	async function commit(current: WebhookRecord, next: Omit<WebhookRecord, "version">): Promise<WebhookRecord | null> {
		const written = { ...next, version: current.version + 1 };
		return (await webhooks.update(current.id, { version: current.version }, written)) ? written : null;
	}

	/** The record a lease holder writes on, or null when the lease is lost (someone wrote since) or the subscription is gone. */
	async function held(id: string, version: number): Promise<WebhookRecord | null> {
		const record = await webhooks.get(id);
		return record && record.version === version && record.state === "enabled" ? record : null;
	}

	/**
	 * Up to `wanted` subscriptions due now (a retry, or a lapsed lease), oldest first, that a worker
	 * reaching the streams of `heads` can deliver. A retry waits for its stream's owner: leased, it
	 * could only be given back, due again at once. Such retries are read past, so that however many
	 * wait, they cannot hide the others.
	 */
	async function dueFor(heads: Partial<Record<WebhookStream, number>>, nowMs: number, wanted: number): Promise<WebhookRecord[]> {
		const found: WebhookRecord[] = [];
		const where: Where = { state: "enabled", notBefore: { lte: new Date(nowMs).toISOString() } };
		for (let after: ListQuery["after"]; found.length < wanted; ) {
			const page = await webhooks.list({ where, orderBy: ["notBefore", "asc"], limit: DUE_PAGE, ...(after ? { after } : {}) });
			for (const candidate of page) {
				const failing = failingStream(candidate);
				if (!failing || heads[failing] !== undefined) found.push(candidate);
			}
			if (page.length < DUE_PAGE) break;
			const last = page[page.length - 1];
			after = { value: last.notBefore!, id: last.id }; // set: the query asks for notBefore ≤ now
		}
		return found.slice(0, wanted);
	}

	const leased = (nowMs: number, leasedBy: string) => {
		const leaseExpiresAt = new Date(nowMs + leaseTtlMs).toISOString();
		return { leasedBy, leaseExpiresAt, notBefore: leaseExpiresAt };
	};
	const unleased = (notBefore: string | null) => ({ leasedBy: null, leaseExpiresAt: null, notBefore });

	return {
		name: "webhooks",
		mixins: [
			storeMixin(config, "webhooks", async store => {
				webhooks = await store.collection<WebhookRecord>(WEBHOOKS_COLLECTION);
			})
		],

		actions: {
			/**
			 * POST /webhooks: a subscription delivering from now on (each stream's latest event is
			 * its cursor), answered with its secret, the only time the secret leaves the store.
			 */
			create: {
				params: createWebhookParams,
				async handler(ctx: Context<CreateRequest, { $statusCode?: number; $location?: string }>): Promise<CreatedWebhookSubscription> {
					const { url: raw, eventTypes, filter } = ctx.params;
					const badFilter = filterProblem(eventTypes, filter);
					if (badFilter) throw invalid("filter", badFilter);
					const badUrl = urlProblem(raw);
					if (badUrl) throw invalid("url", badUrl);
					const url = new URL(raw);
					// Checked again, after resolution, at every delivery (a name may resolve elsewhere later).
					const target = await resolveTarget(url, config.webhookAllowPrivate, lookup);
					if ("problem" in target) throw invalid("url", target.problem);

					const cursors: Record<WebhookStream, number | null> = { intents: null, tin_operations: null };
					for (const stream of new Set(eventTypes.map(type => STREAM_OF[type]))) {
						const latest = await ctx.call<StoredEvent | null, object>(`${EVENT_OWNER[stream]}.latestEvent`, {});
						cursors[stream] = latest?.seq ?? 0;
					}
					const record: WebhookRecord = {
						id: newWebhookId(),
						url: url.href,
						eventTypes,
						filter: filter?.senderWallet !== undefined ? { senderWallet: filter.senderWallet } : filter?.tins ? { tins: filter.tins } : null,
						secret: newSecret(),
						createdAt: new Date().toISOString(),
						state: "enabled",
						intentsCursor: cursors.intents,
						tinOperationsCursor: cursors.tin_operations,
						version: 1,
						...unleased(null),
						delivered: 0,
						retry: null,
						disabledAt: null,
						disabledReason: null,
						failures: []
					};
					const full = () => new ServiceError("LIMIT_REACHED", `This deployment keeps at most ${config.webhooksMax} webhook subscriptions (WEBHOOKS_MAX); delete one first`);
					// Full already: refused without storing anything.
					if ((await webhooks.count()) >= config.webhooksMax) throw full();
					// Stored, then counted: of creations racing on any number of owner replicas, the
					// last to count sees every one kept, so the kept never outnumber WEBHOOKS_MAX
					// (a race at the limit can refuse one more than needed, never admit one).
					if (!(await webhooks.insert(record))) throw new Error("a new webhook id was taken");
					if ((await webhooks.count()) > config.webhooksMax) {
						await webhooks.remove(record.id);
						throw full();
					}
					ctx.meta.$statusCode = 201;
					ctx.meta.$location = `/webhooks/${record.id}`;
					return { ...toWebhookView(record), secret: record.secret };
				}
			},

			/** GET /webhooks: newest first. */
			list: {
				params: listWebhooksParams,
				async handler(ctx: Context<{ limit: number }>): Promise<WebhookSubscription[]> {
					return (await webhooks.list({ orderBy: ["createdAt", "desc"], limit: ctx.params.limit })).map(toWebhookView);
				}
			},

			/** GET /webhooks/{id}: with its delivery state. */
			get: {
				params: webhookRefParams,
				async handler(ctx: Context<{ id: string }>): Promise<WebhookSubscription> {
					return toWebhookView(await mustGet(ctx.params.id));
				}
			},

			/** DELETE /webhooks/{id}: answers the subscription as it was; a delivery in flight loses its lease at its next write. */
			remove: {
				params: webhookRefParams,
				async handler(ctx: Context<{ id: string }>): Promise<WebhookSubscription> {
					const record = await mustGet(ctx.params.id);
					if (!(await webhooks.remove(record.id))) throw new ServiceError("NOT_FOUND", `Webhook subscription ${record.id} not found`);
					return toWebhookView(record);
				}
			},

			/**
			 * Internal, for the delivery workers: leases (to `leasedBy`) up to `limit` enabled
			 * subscriptions that have work: a retry that is due, a lease that lapsed (its holder died),
			 * or an idle one behind a stream's latest event (`heads`), the furthest behind first.
			 */
			claim: internal({
				params: {
					leasedBy: { type: "string", max: 200 },
					heads: { type: "object", props: { intents: { type: "number", integer: true, min: 0, optional: true }, tin_operations: { type: "number", integer: true, min: 0, optional: true } } },
					limit: { type: "number", integer: true, min: 1, max: CLAIM_MAX }
				},
				async handler(ctx: Context<{ leasedBy: string; heads: Partial<Record<WebhookStream, number>>; limit: number }>): Promise<WebhookLease[]> {
					const { leasedBy, heads, limit } = ctx.params;
					const nowMs = Date.now();
					const scan = limit * CLAIM_SLACK;
					const due = await dueFor(heads, nowMs, scan);
					const behind: WebhookRecord[] = [];
					for (const [stream, head] of Object.entries(heads) as [WebhookStream, number][]) {
						const field = CURSOR_FIELD[stream];
						const where: Where = { state: "enabled", notBefore: null, [field]: { lt: head } };
						behind.push(...(await webhooks.list({ where, orderBy: [field, "asc"], limit: scan })));
					}
					const granted: WebhookLease[] = [];
					const seen = new Set<string>();
					for (const candidate of [...due, ...behind]) {
						if (granted.length >= limit) break;
						if (seen.has(candidate.id)) continue;
						seen.add(candidate.id);
						// Another worker may have taken it since the list: then this write changes nothing.
						const taken = await commit(candidate, { ...candidate, ...leased(nowMs, leasedBy) });
						if (taken) granted.push({ subscription: taken, leaseTtlMs });
					}
					return granted;
				}
			}),

			/**
			 * Internal, by a lease holder: the events up to `seq` of `stream` are handled (the last one
			 * delivered when `delivered`); renews the lease. The new version, or null: lease lost.
			 */
			advance: internal({
				params: { ...leaseParams, stream: streamParam, seq: { type: "number", integer: true, min: 0 }, delivered: "boolean" },
				async handler(ctx: Context<{ id: string; version: number; stream: WebhookStream; seq: number; delivered: boolean }>): Promise<number | null> {
					const { id, version, stream, seq, delivered } = ctx.params;
					const record = await held(id, version);
					if (!record) return null;
					const next = { ...record, [CURSOR_FIELD[stream]]: seq, ...leased(Date.now(), record.leasedBy ?? "") };
					if (delivered) Object.assign(next, { delivered: record.delivered + 1, retry: null });
					return (await commit(record, next))?.version ?? null;
				}
			}),

			/**
			 * Internal, by a lease holder: the attempt at event `webhookId` failed (events up to `seq`
			 * of `stream` are handled). Schedules the next attempt and gives the lease up, or disables
			 * the subscription once the streak's retry window (WEBHOOK_RETRY_FOR_MS) is over.
			 */
			fail: internal({
				params: {
					...leaseParams,
					stream: streamParam,
					seq: { type: "number", integer: true, min: 0 },
					webhookId: { type: "string", max: 100 },
					eventType: { type: "string", max: 100 },
					status: { type: "number", integer: true, nullable: true },
					error: { type: "string", max: 1000 }
				},
				async handler(
					ctx: Context<{ id: string; version: number; stream: WebhookStream; seq: number; webhookId: string; eventType: string; status: number | null; error: string }>
				): Promise<{ disabled: boolean } | null> {
					const { id, version, stream, seq, webhookId, eventType, status, error } = ctx.params;
					const record = await held(id, version);
					if (!record) return null;
					const nowMs = Date.now();
					const at = new Date(nowMs).toISOString();
					// The streak goes on through other events: a receiver that never answers is disabled in time.
					const firstFailureAt = record.retry?.firstFailureAt ?? at;
					const attempt = record.retry?.webhookId === webhookId ? record.retry.attempts + 1 : 1;
					const nextMs = nextAttemptAt(Date.parse(firstFailureAt), nowMs, attempt, config.webhookRetryBaseMs, config.webhookRetryForMs);
					const nextAt = nextMs === null ? null : new Date(nextMs).toISOString();
					const next: WebhookRecord = {
						...record,
						[CURSOR_FIELD[stream]]: seq,
						...unleased(nextAt),
						retry: { webhookId, eventType, firstFailureAt, attempts: attempt, nextAttemptAt: nextAt, lastError: error },
						failures: [...record.failures, { at, webhookId, attempt, status, error }].slice(-MAX_FAILURES_KEPT)
					};
					if (nextAt === null)
						Object.assign(next, { state: "disabled", disabledAt: at, disabledReason: `Every attempt failed for ${config.webhookRetryForMs} ms (WEBHOOK_RETRY_FOR_MS) since ${firstFailureAt}` });
					return (await commit(record, next)) ? { disabled: nextAt === null } : null;
				}
			}),

			/** Internal, by a lease holder with nothing left to deliver (or stopping): gives the lease up. */
			release: internal({
				params: leaseParams,
				async handler(ctx: Context<{ id: string; version: number }>): Promise<boolean> {
					const record = await held(ctx.params.id, ctx.params.version);
					return !!record && !!(await commit(record, { ...record, ...unleased(record.retry?.nextAttemptAt ?? null) }));
				}
			})
		}
	};
}
