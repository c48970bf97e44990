/**
 * The owner's side of an event log (lib/store's OutboxEvent: each state change and its event are
 * one write): the reads that SSE streams and webhook deliveries page through, the retention sweep,
 * and the `events.appended` notice, so that readers learn of new events without polling for them.
 */
import type { Context, Service, ServiceBroker, ServiceSchema } from "moleculer";
import { removeInBatches, type Collection, type Doc, type EventPage, type EventQuery, type StoredEvent } from "../lib/store";
import { eventMetrics, sweepMetrics } from "../services/metrics";
import { internal } from "../services/internal";
import { sweeperMixin } from "./sweeper.mixin";
import type { Config } from "../lib/config";
import { answerTag, eventsQuestion, headQuestion, type KeyRing } from "../lib/webhooks";
import { loadWebhookKeys } from "../services/webhook-keys";

/** The event logs: one per owning collection, each numbered on its own. */
export const EVENT_STREAMS = ["intents", "tin_operations"] as const;
export type EventStream = (typeof EVENT_STREAMS)[number];

/** Events per read: a page stays far below NATS's 1 MB message limit (an event is about 1 KB). */
export const EVENT_PAGE = 200;

const EVENT_QUERY_PARAMS = {
	after: { type: "number", integer: true, min: 0 },
	subject: { type: "string", max: 80, optional: true },
	limit: { type: "number", integer: true, min: 1, max: EVENT_PAGE }
} as const;

/** Events pruned per batch, and batches per sweep: the sweep's cost per run is bounded. */
const PRUNE_BATCH = 500;
const PRUNE_BATCHES_PER_SWEEP = 20;

/** How long notices of one stream are gathered into one: at full load, one message per window, not one per intent. */
const NOTICE_WINDOW_MS = 5;

/** The notice: `stream` has events newer than the last notice (read them with `<owner>.events`). */
export interface EventsAppended {
	stream: EventStream;
}

/**
 * Called after each committed write that carried an event: counts it, and broadcasts
 * `events.appended` for `stream` at most once per NOTICE_WINDOW_MS.
 */
export function eventNotifier(broker: ServiceBroker, stream: EventStream): () => void {
	let pending = false;
	const written = eventMetrics(broker);
	written.inc({ stream }, 0);
	return () => {
		written.inc({ stream });
		if (pending) return;
		pending = true;
		setTimeout(() => {
			pending = false;
			broker.broadcast("events.appended", { stream } satisfies EventsAppended);
		}, NOTICE_WINDOW_MS).unref();
	};
}

/** A page of events with the owner's tag (lib/webhooks.ts, answerTag), for the delivery workers. */
export interface TaggedEvents {
	events: StoredEvent[];
	tag: string;
}

/**
 * Actions `events`, `taggedEvents` and `latestEvent` (internal), and the retention sweep, over the
 * collection `log(this)` answers once the service's store is open.
 */
export function outboxMixin<S>(stream: EventStream, config: Config, log: (service: S) => Collection<Doc>): Partial<ServiceSchema> {
	const { eventRetentionMs: retentionMs, sweepIntervalMs } = config;
	let eventsKey: KeyRing | null = null;
	return {
		created(this: Service) {
			eventsKey = loadWebhookKeys(config, this.logger).events;
		},
		mixins: [
			sweeperMixin<S>(`${stream} event retention`, Math.max(sweepIntervalMs, 1000), async function (this: S) {
				const before = new Date(Date.now() - retentionMs).toISOString();
				const pruned = await removeInBatches(batch => log(this).pruneEvents(before, batch), PRUNE_BATCH, PRUNE_BATCHES_PER_SWEEP);
				if (pruned) sweepMetrics((this as unknown as Service).broker).inc({ sweep: `${stream}-event-retention`, result: "pruned" }, pruned);
			})
		],
		actions: {
			/** Internal: committed events after `after`, oldest first; of one record with `subject`. */
			events: internal({
				params: EVENT_QUERY_PARAMS,
				async handler(this: Service, ctx: Context<EventQuery>): Promise<StoredEvent[]> {
					return (await log(this as unknown as S).events(ctx.params)).events;
				}
			}),

			/**
			 * Internal, for the delivery workers: the events after `after`, tagged with the events key
			 * over the worker's question (its `nonce` included): what a worker signs, a key holder
			 * vouched for, as the answer to this very read.
			 */
			taggedEvents: internal({
				// No `subject`: a page filtered by whoever relays the question would skip events.
				params: { $$strict: true, after: EVENT_QUERY_PARAMS.after, limit: EVENT_QUERY_PARAMS.limit, nonce: { type: "string", min: 16, max: 64 } },
				async handler(this: Service, ctx: Context<{ after: number; limit: number; nonce: string }>): Promise<TaggedEvents> {
					const { after, limit, nonce } = ctx.params;
					const { events } = await log(this as unknown as S).events({ after, limit });
					return { events, tag: answerTag(eventsKey!, eventsQuestion(stream, after, limit, nonce), events) };
				}
			}),

			/**
			 * Internal: the same, and how far the read saw (EventPage.through), for a reader that skips
			 * ahead. Its own action: `events` answers as it did for readers of the previous version.
			 */
			eventPage: internal({
				params: EVENT_QUERY_PARAMS,
				handler(this: Service, ctx: Context<EventQuery>): Promise<EventPage> {
					return log(this as unknown as S).events(ctx.params);
				}
			}),

			/**
			 * Internal, for the webhooks owner: the number of the newest committed event (0 for none),
			 * tagged as `taggedEvents` is, so a new subscription starts where the log is, not where
			 * whoever answered in the owner's name said.
			 */
			taggedHead: internal({
				params: { $$strict: true, nonce: { type: "string", min: 16, max: 64 } },
				async handler(this: Service, ctx: Context<{ nonce: string }>): Promise<{ seq: number; tag: string }> {
					const seq = (await log(this as unknown as S).latestEvent())?.seq ?? 0;
					return { seq, tag: answerTag(eventsKey!, headQuestion(stream, ctx.params.nonce), seq) };
				}
			}),

			/** Internal: the newest committed event (of one record with `subject`), or null. */
			latestEvent: internal({
				params: { subject: { type: "string", max: 80, optional: true } },
				handler(this: Service, ctx: Context<{ subject?: string }>): Promise<StoredEvent | null> {
					return log(this as unknown as S).latestEvent(ctx.params.subject);
				}
			})
		}
	};
}
