/**
 * webhooks: owns the webhook subscriptions (docs/webhooks.md): the worker routes that create,
 * list, read and delete them, and the internal actions the delivery workers (webhook-delivery)
 * take a subscription's lease with and move its cursor with, each a compare-and-set on `version`.
 * The delivery state lives here, so a worker that dies loses nothing but its lease.
 */
import type { Context, Service, ServiceSchema } from "moleculer";
import type { Config } from "../lib/config";
import { ServiceError } from "../lib/errors";
import { listInPages, type Collection, type EventPage, type EventQuery, type StoredEvent, type Where } from "../lib/store";
import {
	CURSOR_FIELD,
	MAX_ERROR_CHARS,
	STREAM_OF,
	WEBHOOKS_COLLECTION,
	advanced,
	answerTag,
	createWebhookParams,
	failed,
	failingStream,
	filterProblem,
	isWebhookId,
	leasedUntil,
	headQuestion,
	holderWriteReply,
	isAnswerTag,
	isHolderWrite,
	leaseQuestion,
	newNonce,
	newWebhookRecord,
	released,
	resealed,
	sealedUnder,
	sealSecret,
	resolveTarget,
	subscriptionLookup,
	toWebhookView,
	urlProblem,
	webhookPageParams,
	webhookRefParams,
	type CreateWebhookRequest,
	type CreatedWebhookSubscription,
	type FailedAttempt,
	type HolderWrite,
	type StreamCursors,
	type StreamHeads,
	type WebhookRecord,
	type WebhookStream,
	type WebhookKeys,
	type WebhookSubscription
} from "../lib/webhooks";
import type { EventStream } from "../mixins/outbox.mixin";
import { storeMixin } from "../mixins/store.mixin";
import { internal, isServed, keyHoldersOnly, workersOnly } from "./internal";
import { loadWebhookKeys } from "./webhook-keys";

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

/** Under rotation (WEBHOOK_SECRETS_KEY lists earlier keys), how often the stored secrets are swept for re-sealing. */
const RESEAL_SWEEP_MS = 10 * 60_000;
/** Subscriptions read at a time by that sweep. */
const RESEAL_PAGE = 100;
/** At start, how often the cursors' check looks for the logs' owners, or tries again after a failure. */
const REWIND_RETRY_MS = 2000;

/**
 * What a delivery worker gets for a lease: the record (its secret sealed), how long the lease
 * lasts, and the leases key's tag over the worker's claim (its nonce) and the record.
 */
export interface WebhookLease {
	subscription: WebhookRecord;
	leaseTtlMs: number;
	tag: string;
}

interface WebhooksSettings {
	leaseTtlMs: number;
	webhooksMax: number;
	allowPrivate: boolean;
	retry: { baseMs: number; retryForMs: number };
}

interface WebhooksVars {
	webhooks: Collection<WebhookRecord>;
	/** WEBHOOK_SECRETS_KEY's: the signing secrets are stored, and leased, sealed with its sealing key. */
	keys: WebhookKeys;
	resealTimer?: NodeJS.Timeout;
	/** The latest sweep of the stored secrets (resealStored), settled when done. */
	sweeping?: Promise<void>;
	/** The start's check of the cursors against the logs' ends (rewindPastLogEnds), until it runs. */
	rewindTimer?: NodeJS.Timeout;
	rewinding?: Promise<void>;
	stoppingRewind?: boolean;
	/** This process's creations, one at a time through the limit's count (storeWithinLimit). */
	creations: Promise<unknown>;
}

interface WebhooksMethods {
	mustGet(id: string): Promise<WebhookRecord>;
	/** Writes `next` (version + 1) over `current` if nobody wrote since; the new record, or null. */
	commit(current: WebhookRecord, next: WebhookRecord): Promise<WebhookRecord | null>;
	held(id: string, version: number, progress?: { stream: WebhookStream; seq: number }): Promise<WebhookRecord | null>;
	subscribe(ctx: Context, request: CreateWebhookRequest): Promise<WebhookRecord>;
	storeWithinLimit(record: WebhookRecord): Promise<void>;
	/** storeWithinLimit's check, in its turn. */
	storeCounted(record: WebhookRecord): Promise<void>;
	dueFor(heads: StreamHeads, nowMs: number, wanted: number): Promise<WebhookRecord[]>;
	behind(heads: StreamHeads, wanted: number): Promise<WebhookRecord[]>;
	lease(candidates: WebhookRecord[], claim: { leasedBy: string; nonce: string }, nowMs: number, limit: number): Promise<WebhookLease[]>;
	leaseExpiry(nowMs: number): string;
	resealStored(): Promise<void>;
	logHeads(): Promise<Record<WebhookStream, number>>;
	logEndAt(stream: WebhookStream, time: string, head: number): Promise<number>;
	rewindPastLogEnds(): Promise<void>;
}

type WebhooksThis = Service<WebhooksSettings> & WebhooksVars & WebhooksMethods;

const invalid = (field: string, message: string) => new ServiceError("VALIDATION_ERROR", message, [{ type: field, field, message }]);
const streamParam = { type: "enum", values: Object.keys(CURSOR_FIELD) };
/** A lease holder's write: its subscription and version, and a key holder's proof (lib/webhooks.ts, holderWriteRequest). */
const leaseParams = { id: { type: "string", max: 64 }, version: { type: "number", integer: true, min: 1 }, nonce: { type: "string", min: 16, max: 64 }, proof: { type: "string", max: 64 } };
const HOLDER_WRITES: readonly HolderWrite[] = ["advance", "fail", "release"];

export function webhooksService(config: Config): ServiceSchema<WebhooksSettings, WebhooksMethods, WebhooksVars, WebhooksThis> {
	return {
		name: "webhooks",
		settings: {
			leaseTtlMs: LEASE_ATTEMPTS * config.webhookTimeoutMs,
			webhooksMax: config.webhooksMax,
			allowPrivate: config.webhookAllowPrivate,
			retry: { baseMs: config.webhookRetryBaseMs, retryForMs: config.webhookRetryForMs }
		},
		// A holder's write is made only with a key holder's proof, and answered tagged: nothing else on
		// the bus moves a cursor in a worker's name, nor tells a worker it still holds a lease.
		hooks: {
			before: Object.fromEntries(
				HOLDER_WRITES.map(write => [
					write,
					function (this: WebhooksThis, ctx: Context<Record<string, unknown>>) {
						if (!isHolderWrite(this.keys, write, ctx.params)) throw new ServiceError("FORBIDDEN", "A lease holder's write carries a key holder's proof", { reason: "unproven" });
					}
				])
			),
			after: Object.fromEntries(
				HOLDER_WRITES.map(write => [
					write,
					function (this: WebhooksThis, ctx: Context<{ nonce: string }>, result: unknown) {
						return holderWriteReply(this.keys, write, ctx.params.nonce, result);
					}
				])
			)
		},
		mixins: [
			storeMixin<WebhooksThis>(config, "webhooks", async function (this: WebhooksThis, store) {
				this.webhooks = await store.collection<WebhookRecord>(WEBHOOKS_COLLECTION);
			})
		],

		actions: {
			/**
			 * POST /webhooks: a subscription delivering from now on (each stream's latest event is
			 * its cursor), answered with its secret, the only time the secret leaves the store.
			 */
			create: workersOnly({
				params: createWebhookParams,
				async handler(this: WebhooksThis, ctx: Context<CreateWebhookRequest, { $statusCode?: number; $location?: string }>): Promise<CreatedWebhookSubscription> {
					const record = await this.subscribe(ctx, ctx.params);
					ctx.meta.$statusCode = 201;
					ctx.meta.$location = `/webhooks/${record.id}`;
					return { ...toWebhookView(record), secret: record.secret };
				}
			}),

			/** A page of GET /webhooks (api.webhookList joins them): newest first, after `after`. */
			page: workersOnly(internal({
				params: webhookPageParams,
				async handler(this: WebhooksThis, ctx: Context<{ limit: number; after?: { createdAt: string; id: string } }>): Promise<WebhookSubscription[]> {
					const { limit, after } = ctx.params;
					const page = await this.webhooks.list({ orderBy: ["createdAt", "desc"], limit, ...(after ? { after: { value: after.createdAt, id: after.id } } : {}) });
					return page.map(toWebhookView);
				}
			})),

			/** GET /webhooks/{id}: with its delivery state. */
			get: workersOnly({
				params: webhookRefParams,
				async handler(this: WebhooksThis, ctx: Context<{ id: string }>): Promise<WebhookSubscription> {
					return toWebhookView(await this.mustGet(ctx.params.id));
				}
			}),

			/** DELETE /webhooks/{id}: answers the subscription as it was; a delivery in flight loses its lease at its next write. */
			remove: workersOnly({
				params: webhookRefParams,
				async handler(this: WebhooksThis, ctx: Context<{ id: string }>): Promise<WebhookSubscription> {
					const record = await this.mustGet(ctx.params.id);
					if (!(await this.webhooks.remove(record.id))) throw new ServiceError("NOT_FOUND", `Webhook subscription ${record.id} not found`);
					return toWebhookView(record);
				}
			}),

			/**
			 * Internal, for the delivery workers: leases (to `leasedBy`) up to `limit` enabled
			 * subscriptions that have work: a retry that is due, a lease that lapsed (its holder died),
			 * or an idle one behind a stream's latest event (`heads`), the least recently leased first.
			 */
			claim: keyHoldersOnly({
				params: {
					leasedBy: { type: "string", max: 200 },
					/** Fresh at each claim: the leases are tagged over it. */
					nonce: { type: "string", min: 16, max: 64 },
					heads: { type: "object", props: { intents: { type: "number", integer: true, min: 0, optional: true }, tin_operations: { type: "number", integer: true, min: 0, optional: true } } },
					limit: { type: "number", integer: true, min: 1, max: CLAIM_MAX }
				},
				async handler(this: WebhooksThis, ctx: Context<{ leasedBy: string; nonce: string; heads: StreamHeads; limit: number }>): Promise<WebhookLease[]> {
					const { leasedBy, nonce, heads, limit } = ctx.params;
					const nowMs = Date.now();
					const scan = limit * CLAIM_SLACK;
					const candidates = [...(await this.dueFor(heads, nowMs, scan)), ...(await this.behind(heads, scan))];
					return this.lease(candidates, { leasedBy, nonce }, nowMs, limit);
				}
			}),

			/**
			 * Internal, by a lease holder: the events up to `seq` of `stream` are handled (the last one
			 * delivered when `delivered`); renews the lease. The new version, or null: lease lost.
			 */
			advance: keyHoldersOnly({
				params: { ...leaseParams, stream: streamParam, seq: { type: "number", integer: true, min: 0 }, delivered: "boolean" },
				async handler(this: WebhooksThis, ctx: Context<{ id: string; version: number; stream: WebhookStream; seq: number; delivered: boolean }>): Promise<number | null> {
					const { id, version, stream, seq, delivered } = ctx.params;
					const record = await this.held(id, version, { stream, seq });
					if (!record) return null;
					return (await this.commit(record, advanced(record, stream, seq, delivered, this.leaseExpiry(Date.now()))))?.version ?? null;
				}
			}),

			/**
			 * Internal, by a lease holder: the attempt at event `webhookId` failed (events up to `seq`
			 * of `stream` are handled). Schedules the next attempt and gives the lease up, or disables
			 * the subscription once the streak's retry window (WEBHOOK_RETRY_FOR_MS) is over.
			 */
			fail: keyHoldersOnly({
				params: {
					...leaseParams,
					stream: streamParam,
					seq: { type: "number", integer: true, min: 0 },
					webhookId: { type: "string", max: 100 },
					eventType: { type: "string", max: 100 },
					status: { type: "number", integer: true, nullable: true },
					error: { type: "string", max: MAX_ERROR_CHARS }
				},
				async handler(this: WebhooksThis, ctx: Context<FailedAttempt & { id: string; version: number; nonce: string; proof: string }>): Promise<{ disabled: boolean } | null> {
					const { id, version, nonce: _nonce, proof: _proof, ...attempt } = ctx.params;
					const record = await this.held(id, version, attempt);
					if (!record) return null;
					const written = await this.commit(record, failed(record, attempt, new Date(), this.settings.retry));
					return written ? { disabled: written.state === "disabled" } : null;
				}
			}),

			/**
			 * Internal, by a lease holder with nothing left to deliver (or stopping): gives the lease up.
			 * `deferMs`: an attempt it could not make; `restMs`: its lease found nothing the
			 * subscription takes. Either way the subscription is due again no sooner.
			 */
			release: keyHoldersOnly({
				params: { ...leaseParams, deferMs: { type: "number", integer: true, min: 1, max: 3_600_000, optional: true }, restMs: { type: "number", integer: true, min: 1, max: 60_000, optional: true } },
				async handler(this: WebhooksThis, ctx: Context<{ id: string; version: number; deferMs?: number; restMs?: number }>): Promise<boolean> {
					const record = await this.held(ctx.params.id, ctx.params.version);
					if (!record) return false;
					return !!(await this.commit(record, released(record, new Date(), ctx.params.deferMs, ctx.params.restMs)));
				}
			})
		},

		methods: {
			async mustGet(this: WebhooksThis, id) {
				const record = isWebhookId(id) ? await this.webhooks.get(id) : null;
				if (!record) throw new ServiceError("NOT_FOUND", `Webhook subscription ${id} not found`);
				return record;
			},

			async commit(this: WebhooksThis, current, next) {
				// A secret an earlier version stored in the clear is stored sealed from its next write on,
				// and one sealed under an earlier key (under rotation) sealed again under the current one.
				const secret = resealed(next.secret, this.keys, next) ?? sealSecret(next.secret, this.keys.sealing, next);
				const written = { ...next, secret, version: current.version + 1 };
				return (await this.webhooks.update(current.id, { version: current.version }, written)) ? written : null;
			},

			/**
			 * The record a lease holder writes on, or null when the lease is lost (someone wrote since),
			 * the subscription is gone, or the holder reports `progress` behind the cursor: it acts on a
			 * stale view, and its write would deliver the events between again.
			 */
			async held(this: WebhooksThis, id, version, progress) {
				const record = await this.webhooks.get(id);
				if (!record || record.version !== version || record.state !== "enabled") return null;
				return progress && progress.seq < (record[CURSOR_FIELD[progress.stream]] ?? 0) ? null : record;
			},

			/** Checks a request, takes each subscribed stream's latest event as its cursor, and stores the new subscription. */
			async subscribe(this: WebhooksThis, ctx, request) {
				const badFilter = filterProblem(request.eventTypes, request.filter);
				if (badFilter) throw invalid("filter", badFilter);
				const badUrl = urlProblem(request.url);
				if (badUrl) throw invalid("url", badUrl);
				const url = new URL(request.url);
				// Checked again, after resolution, at every delivery (a name may resolve elsewhere later).
				const target = await resolveTarget(url, this.settings.allowPrivate, subscriptionLookup);
				// Busy with other lookups: nothing is wrong with the url, and the client may try again.
				if ("busy" in target) throw new ServiceError("NOT_READY", target.problem);
				if ("problem" in target) throw invalid("url", target.problem);
				const cursors: StreamCursors = { intents: null, tin_operations: null };
				for (const stream of new Set(request.eventTypes.map(type => STREAM_OF[type]))) {
					const nonce = newNonce();
					const head = await ctx.call<{ seq: number; tag: string }, object>(`${EVENT_OWNER[stream]}.taggedHead`, { nonce });
					if (!isAnswerTag(this.keys.events, headQuestion(stream, nonce), head.seq, head.tag))
						throw new ServiceError("NOT_READY", `The ${stream} log's head does not check with this process's WEBHOOK_SECRETS_KEY; is it the same in every process that runs webhooks, mempool or tin?`);
					cursors[stream] = head.seq;
				}
				const record = newWebhookRecord({ ...request, url: url.href }, cursors, new Date());
				await this.storeWithinLimit({ ...record, secret: sealSecret(record.secret, this.keys.sealing, record) });
				return record;
			},

			/**
			 * Stores a new subscription unless the deployment keeps WEBHOOKS_MAX already (409 LIMIT_REACHED).
			 * A process's creations take turns: counts answer only what is committed, so creations of
			 * one commit group would each count the others and all withdraw.
			 */
			storeWithinLimit(this: WebhooksThis, record) {
				const turn = this.creations.then(() => this.storeCounted(record));
				this.creations = turn.catch(() => {});
				return turn;
			},

			async storeCounted(this: WebhooksThis, record) {
				const max = this.settings.webhooksMax;
				const full = () => new ServiceError("LIMIT_REACHED", `This deployment keeps at most ${max} webhook subscriptions (WEBHOOKS_MAX); delete one first`);
				// Full already: refused without storing anything.
				if ((await this.webhooks.count()) >= max) throw full();
				// Stored, then counted: of creations racing on any number of owner replicas, the
				// last to count sees every one kept, so the kept never outnumber WEBHOOKS_MAX
				// (a race at the limit can refuse one more than needed, never admit one).
				if (!(await this.webhooks.insert(record))) throw new Error("a new webhook id was taken");
				if ((await this.webhooks.count()) > max) {
					await this.webhooks.remove(record.id);
					throw full();
				}
			},

			/**
			 * Up to `wanted` subscriptions due now (a retry, or a lapsed lease), oldest first, that a
			 * worker reaching the streams of `heads` can deliver. A retry waits for its stream's owner:
			 * leased, it could only be given back, due again at once. Such retries are read past, so
			 * that however many wait, they cannot hide the others.
			 */
			async dueFor(this: WebhooksThis, heads, nowMs, wanted) {
				const found: WebhookRecord[] = [];
				const where: Where = { state: "enabled", notBefore: { lte: new Date(nowMs).toISOString() } };
				for await (const candidate of listInPages(this.webhooks, { where, orderBy: ["notBefore", "asc"] }, DUE_PAGE)) {
					const failing = failingStream(candidate);
					if (!failing || heads[failing] !== undefined) found.push(candidate);
					if (found.length === wanted) break;
				}
				return found;
			},

			/**
			 * Up to `wanted` idle subscriptions behind each stream's head, the least recently leased
			 * first (never leased before all): furthest behind first would hand every freed slot to
			 * receivers that stay behind because they answer slowly, while one near the head waited
			 * for all of them to catch up.
			 */
			async behind(this: WebhooksThis, heads, wanted) {
				const found: WebhookRecord[] = [];
				for (const [stream, head] of Object.entries(heads) as [WebhookStream, number][]) {
					const where: Where = { state: "enabled", notBefore: null, [CURSOR_FIELD[stream]]: { lt: head } };
					found.push(...(await this.webhooks.list({ where, orderBy: ["lastLeasedAt", "asc"], limit: wanted })));
				}
				// As the index orders them: null first, then by time, then by id.
				const turn = (record: WebhookRecord) => `${record.lastLeasedAt ?? ""} ${record.id}`;
				return found.sort((a, b) => (turn(a) < turn(b) ? -1 : turn(a) > turn(b) ? 1 : 0));
			},

			/** Leases the candidates in order, each once, up to `limit`; one another worker took since it was read is skipped. */
			async lease(this: WebhooksThis, candidates, claim, nowMs, limit) {
				const granted: WebhookLease[] = [];
				const seen = new Set<string>();
				const lease = leasedUntil(claim.leasedBy, this.leaseExpiry(nowMs));
				for (const candidate of candidates) {
					if (granted.length >= limit) break;
					if (seen.has(candidate.id)) continue;
					seen.add(candidate.id);
					const taken = await this.commit(candidate, { ...candidate, ...lease, lastLeasedAt: new Date(nowMs).toISOString() });
					if (!taken) continue;
					// Written sealed (commit), so it leaves the store sealed; tagged for this claim, its length included.
					const terms = { subscription: taken, leaseTtlMs: this.settings.leaseTtlMs };
					granted.push({ ...terms, tag: answerTag(this.keys.leases, leaseQuestion(claim.leasedBy, claim.nonce), terms) });
				}
				return granted;
			},

			leaseExpiry(this: WebhooksThis, nowMs) {
				return new Date(nowMs + this.settings.leaseTtlMs).toISOString();
			},

			/**
			 * Checks under which key each stored secret is sealed, and seals again under the current
			 * key those sealed under an earlier one (or stored in the clear by an old version), so that
			 * the earlier key can go. A subscription under lease, or whose lease lapsed within a lease's
			 * length (another replica's clock may run behind), is left to its holder's next write
			 * (commit re-seals), which this write would cut short; the next sweep takes what is left.
			 * Secrets no listed key opens are named in a warning: their deliveries fail.
			 */
			async resealStored(this: WebhooksThis) {
				const counts = { resealed: 0, left: 0 };
				const unopened: string[] = [];
				const leasedSince = new Date(Date.now() - this.settings.leaseTtlMs).toISOString();
				for await (const record of listInPages(this.webhooks, { orderBy: ["createdAt", "asc"] }, RESEAL_PAGE)) {
					const under = sealedUnder(record.secret, this.keys, record);
					if (under === "none") unopened.push(record.id);
					if (under !== "earlier" && under !== "clear") continue;
					const leased = record.leaseExpiresAt !== null && record.leaseExpiresAt > leasedSince;
					if (!leased && (await this.commit(record, record))) counts.resealed++;
					else counts.left++;
				}
				const current = `the current WEBHOOK_SECRETS_KEY (fingerprint ${this.keys.fingerprint})`;
				if (unopened.length)
					this.logger.warn(
						`${unopened.length} stored webhook signing secrets open under none of WEBHOOK_SECRETS_KEY's keys (${unopened.slice(0, 5).join(", ")}${unopened.length > 5 ? ", …" : ""}): their deliveries fail until the key they were sealed under is listed again`
					);
				if (counts.resealed || counts.left)
					this.logger.info(
						`${counts.resealed} webhook signing secrets sealed again under ${current}; ${counts.left} under lease still wait (under an earlier key, or in the clear): their holders' next writes${this.keys.earlier ? ", or the next sweep," : ""} take them`
					);
				else if (this.keys.earlier && !unopened.length) this.logger.info(`Every stored webhook signing secret is sealed under ${current}. Once every owner runs this key list, a sweep that began after that and logs this line says the earlier keys may go.`);
			},

			/** Each stream's latest event, as its owner reads it now. */
			async logHeads(this: WebhooksThis) {
				const heads = { intents: 0, tin_operations: 0 };
				for (const stream of Object.keys(EVENT_OWNER) as WebhookStream[]) heads[stream] = (await this.broker.call<StoredEvent | null, object>(`${EVENT_OWNER[stream]}.latestEvent`, {}))?.seq ?? 0;
				return heads;
			},

			/**
			 * Where `stream`'s log stood at `time`: the number of its last event logged then or before,
			 * every later one being logged after (a binary search, a page of one event per step).
			 */
			async logEndAt(this: WebhooksThis, stream, time, head) {
				let [low, high] = [0, head];
				while (low < high) {
					const middle = Math.floor((low + high) / 2);
					const [next] = (await this.broker.call<EventPage, EventQuery>(`${EVENT_OWNER[stream]}.eventPage`, { after: middle, limit: 1 })).events;
					if (!next || next.at > time) high = middle;
					else low = middle + 1;
				}
				return low;
			},

			/**
			 * At start: a subscription whose cursor is past its log's end, which only a restore makes
			 * (the subscriptions copied later than the log: k8s/README.md, Backups). It would wait,
			 * unleased, until the log grew past its cursor, and never be sent the new events numbered
			 * below it. Its cursor goes back to where the restored log ended: the last event logged
			 * before the subscription was last leased (or made), since every event logged after the
			 * restore came later than that. A cursor is compared with a head read after it, so one that a
			 * delivery moved on meanwhile is not taken for such.
			 */
			async rewindPastLogEnds(this: WebhooksThis) {
				let rewound = 0;
				for await (const listed of listInPages(this.webhooks, { orderBy: ["createdAt", "asc"] }, RESEAL_PAGE)) {
					let record: WebhookRecord | null = listed;
					// A few rounds: a delivery may write the subscription meanwhile (its lease, a retry).
					for (let round = 0; record && round < 3; round++) {
						const heads = await this.logHeads();
						const past = (Object.keys(CURSOR_FIELD) as WebhookStream[]).filter(stream => (record![CURSOR_FIELD[stream]] ?? 0) > heads[stream]);
						if (!past.length) break;
						const since = record.lastLeasedAt && record.lastLeasedAt > record.createdAt ? record.lastLeasedAt : record.createdAt;
						let next: WebhookRecord = record;
						for (const stream of past) next = { ...next, [CURSOR_FIELD[stream]]: await this.logEndAt(stream, since, heads[stream]) };
						if (await this.commit(record, next)) {
							rewound++;
							break;
						}
						record = await this.webhooks.get(record.id);
					}
				}
				if (rewound)
					this.logger.warn(`${rewound} webhook subscriptions had a cursor past their log's end (a store restored from a backup): moved back to where the restored log ended. New events go out under webhook-ids their receivers may have handled before the restore.`);
			}
		} satisfies WebhooksMethods & ThisType<WebhooksThis>,

		created(this: WebhooksThis) {
			this.keys = loadWebhookKeys(config, this.logger);
			this.creations = Promise.resolve();
		},

		/** A check of the stored secrets after start (readiness does not wait for it); under rotation (earlier keys listed), again every RESEAL_SWEEP_MS. */
		started(this: WebhooksThis) {
			const sweep = () => void (this.sweeping = this.resealStored().catch(err => this.logger.warn(`Checking the webhook signing secrets' keys failed; the next sweep tries again: ${(err as Error).message}`)));
			sweep();
			if (this.keys.earlier) this.resealTimer = setInterval(sweep, RESEAL_SWEEP_MS).unref();
			// Once the logs' owners answer (they may start after this service, or elsewhere), and again after a failure, until done.
			const rewind = () => {
				if (this.stoppingRewind) return;
				if (!Object.values(EVENT_OWNER).every(owner => isServed(this.broker, `${owner}.latestEvent`) && isServed(this.broker, `${owner}.eventPage`))) return void (this.rewindTimer = setTimeout(rewind, REWIND_RETRY_MS).unref());
				this.rewinding = this.rewindPastLogEnds().catch(err => {
					this.logger.warn(`Checking the webhook cursors against the logs' ends failed; trying again: ${(err as Error).message}`);
					this.rewindTimer = setTimeout(rewind, REWIND_RETRY_MS).unref();
				});
			};
			rewind();
		},

		/** Before the store closes (its mixin stops after this): no sweep is cut short. */
		async stopped(this: WebhooksThis) {
			clearInterval(this.resealTimer);
			this.stoppingRewind = true;
			clearTimeout(this.rewindTimer);
			await Promise.all([this.sweeping, this.rewinding]);
		}
	};
}
