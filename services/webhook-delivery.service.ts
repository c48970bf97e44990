/**
 * webhook-delivery: stateless delivery workers (docs/webhooks.md); run as many as you like, in
 * any processes. A worker leases subscriptions from their owner (webhooks.claim, a compare-and-set
 * there), reads the events after a subscription's cursor from the streams' owners, POSTs those it
 * takes in order, signed per Standard Webhooks, and moves the cursor only after a 2xx. The lease
 * keeps two workers off one subscription; the durable cursor makes a crash cost a repeat at most
 * (at-least-once). Wakes on `events.appended` and on a periodic sweep, which also finds due retries
 * and the leases of workers that died.
 */
import { randomBytes } from "node:crypto";
import http from "node:http";
import https from "node:https";
import { performance } from "node:perf_hooks";
import type { Duplex } from "node:stream";
import type { Service, ServiceSchema } from "moleculer";
import type { Config } from "../lib/config";
import { FailureStreak } from "../lib/failure-streak";
import type { StoredEvent } from "../lib/store";
import { CURSOR_FIELD, MAX_ERROR_CHARS, STREAM_OF, deliveryLookup, eventsQuestion, failingStream, holderWriteRequest, holderWriteResult, isAnswerTag, leaseQuestion, newNonce, openSecret, payloadOf, pinnedLookup, resolveTarget, takesEvent, webhookHeaders, webhookIdOf, type HolderWrite, type StreamHeads, type WebhookKeys, type WebhookStream } from "../lib/webhooks";
import { EVENT_PAGE, type TaggedEvents } from "../mixins/outbox.mixin";
import { sweeperMixin } from "../mixins/sweeper.mixin";
import { callServed, isServed } from "./internal";
import { webhookMetrics } from "./metrics";
import { loadWebhookKeys } from "./webhook-keys";
import { EVENT_OWNER, type WebhookLease } from "./webhooks.service";

/**
 * Subscriptions one worker delivers at once (each in order, on its own): room for many slow
 * receivers (an attempt may take WEBHOOK_TIMEOUT_MS) beside the quick ones.
 */
const MAX_ACTIVE = 32;
/** A lease is given back after this many events or this long, so that a busy subscription cannot keep its slot while others wait. */
const SLICE_EVENTS = 100;
const SLICE_MS = 30_000;
/** How long a subscription whose lease sent nothing rests before it is leased again. */
const IDLE_REST_MS = 1000;
/**
 * An attempt starts only while the lease outlasts it by this much, or by the attempt's own time if
 * that is shorter (a lease lasts three attempts, so a renewed one always does): the clocks of the
 * owners that compare lease expiries may differ by up to that.
 */
const LEASE_MARGIN_MS = 5000;
/**
 * How long a pass waits for an owner's latest event (one indexed read) before it goes on without
 * that stream: a slow or hung owner must not hold the other stream's passes. The call itself runs
 * on, and the stream stays out of the passes until it has ended: at most the broker's
 * requestTimeout (moleculer.config.ts), which this relies on.
 */
const HEAD_WAIT_MS = 2000;
/** Notices of new events (up to one per stream every 5 ms) wake a worker at most this often. */
const NOTICE_COALESCE_MS = 20;
const USER_AGENT = "settlement-coordination-service-webhooks/1";

/** `deferred`: nothing was sent (this process was busy looking up other hosts); the receiver is not to blame. */
type Attempt = { ok: true } | { ok: false; status: number | null; error: string; deferred?: true };

/** Printable ASCII only, bounded: a receiver's answer ends up in GET /webhooks/{id}. */
const printable = (text: string) => text.replace(/[^\x20-\x7e]+/g, " ").trim().slice(0, MAX_ERROR_CHARS);

/**
 * One POST, within `timeoutMs` from the DNS lookup to the status line: the host's addresses are
 * checked (resolveTarget) and the connection goes to those only (pinnedLookup); no keep-alive, no
 * redirect followed, at most MAX_ERROR_CHARS of a failed answer read, nothing of a 2xx.
 */
async function postWebhook(url: URL, headers: Record<string, string>, body: string, allowPrivate: boolean, timeoutMs: number): Promise<Attempt> {
	const timeout = AbortSignal.timeout(timeoutMs);
	const timedOut = `no answer within ${timeoutMs} ms`;
	// A lookup slot is waited for half the attempt's time at most (no slot: deferred, not failed),
	// so that a host that gets one has half of it at least to resolve and answer.
	const target = await resolveTarget(url, allowPrivate, host => deliveryLookup(host, { slot: AbortSignal.timeout(timeoutMs / 2), answer: timeout }));
	if ("busy" in target) return { ok: false, status: null, error: printable(target.problem), deferred: true };
	if ("problem" in target) return { ok: false, status: null, error: printable(target.problem) };
	return new Promise<Attempt>(resolve => {
		/** A failed answer's status and what was read of its body: what the attempt failed with, even if its body is then cut off. */
		let answer: { status: number; text: string } | null = null;
		const refusal = ({ status, text }: { status: number; text: string }): Attempt => {
			const redirect = status >= 300 && status < 400 ? " (redirects are not followed)" : "";
			return { ok: false, status: status >= 100 && status <= 599 ? status : null, error: printable(`HTTP ${status}${redirect}: ${text}`) };
		};
		const options = {
			method: "POST",
			headers: { ...headers, "content-length": String(Buffer.byteLength(body)), "user-agent": USER_AGENT },
			agent: false,
			lookup: pinnedLookup(target.addresses),
			signal: timeout
		};
		const request = (url.protocol === "https:" ? https : http).request(url, options, response => {
			const status = response.statusCode ?? 0;
			if (status >= 200 && status < 300) {
				response.destroy();
				return resolve({ ok: true });
			}
			const read = (answer = { status, text: "" });
			response.setEncoding("utf8");
			response.on("data", (chunk: string) => {
				read.text += chunk;
				if (read.text.length >= MAX_ERROR_CHARS) response.destroy();
			});
			response.on("error", () => {}); // a destroyed or timed-out answer: what was read is enough
			response.on("close", () => resolve(refusal(read)));
		});
		// After the status line (a body too slow to end, or cut off), the answer stands.
		request.on("error", (err: NodeJS.ErrnoException) =>
			resolve(answer ? refusal(answer) : { ok: false, status: null, error: timeout.aborted ? timedOut : printable(`request failed: ${err.code ?? err.message}`) })
		);
		// A switch of protocols (101) is no answer to a delivery, and would otherwise end in neither of the above.
		request.on("upgrade", (response: http.IncomingMessage, socket: Duplex) => {
			socket.destroy();
			resolve(refusal({ status: response.statusCode ?? 101, text: "a switch of protocols is not an answer" }));
		});
		// Whatever else ends the connection: an attempt always ends.
		request.on("close", () => resolve(answer ? refusal(answer) : { ok: false, status: null, error: "the connection closed without an answer" }));
		request.end(body);
	});
}

/** The streams a subscription takes, the one of its failing event first (that event is retried before any other). */
function streamsOf(subscription: WebhookLease["subscription"]): WebhookStream[] {
	const streams = [...new Set(subscription.eventTypes.map(type => STREAM_OF[type]))];
	const failing = failingStream(subscription);
	return failing ? [failing, ...streams.filter(stream => stream !== failing)] : streams;
}

interface DeliverySettings {
	/** WEBHOOK_TIMEOUT_MS: one attempt, from the DNS lookup to the status line. */
	attemptTimeoutMs: number;
	allowPrivate: boolean;
}

interface DeliveryVars {
	/** This worker as a lease holder: its node and a tag of this start. */
	worker: string;
	metrics: ReturnType<typeof webhookMetrics>;
	/** The deliveries running, by subscription. */
	active: Map<string, Promise<void>>;
	pass: Promise<void> | null;
	/** A notice came during the running pass: another follows it. */
	again: boolean;
	stopping: boolean;
	noticed: NodeJS.Timeout | null;
	/** Latest-event calls a pass stopped waiting for (HEAD_WAIT_MS): their stream is left out until they answer. */
	asking: Set<WebhookStream>;
	/**
	 * Streams whose log a delivery could not read, until when (performance.now()) this worker leaves
	 * them out, as if their owner were away: a read asks the owner for its log, not for one
	 * subscription's part of it, so its failure is the owner's. One failure costs every subscription
	 * of the stream a lease's wait on this worker (a second owner replica may have served the read),
	 * against a failed read and a warning per subscription and pass while the owner stays broken.
	 */
	unreadableUntil: Map<WebhookStream, number>;
	/** Leases too short for an attempt: told once a minute, not at every lease. */
	shortLeases: FailureStreak;
	/** WEBHOOK_SECRETS_KEY's: open the sealed signing secret of each lease, check the event pages' tags. */
	keys: WebhookKeys;
	/** Leases and event pages this worker's key does not vouch for: told once a minute. */
	unvouched: FailureStreak;
}

interface DeliveryMethods {
	unreadable(stream: WebhookStream): boolean;
	heads(): Promise<StreamHeads>;
	claim(): Promise<void>;
	wake(): Promise<void>;
	deliver(lease: WebhookLease, leasedAt: number, reached: StreamHeads): Promise<void>;
}

type DeliveryThis = Service<DeliverySettings> & DeliveryVars & DeliveryMethods;

export function webhookDeliveryService(config: Config): ServiceSchema<DeliverySettings, DeliveryMethods, DeliveryVars, DeliveryThis> {
	return {
		name: "webhook-delivery",
		settings: { attemptTimeoutMs: config.webhookTimeoutMs, allowPrivate: config.webhookAllowPrivate },
		mixins: [
			sweeperMixin<DeliveryThis>("webhook delivery", config.sweepIntervalMs, function (this: DeliveryThis) {
				return this.wake();
			})
		],

		events: {
			/** New events in a stream: deliver them now rather than at the next sweep. */
			"events.appended"(this: DeliveryThis) {
				if (this.noticed || this.stopping) return;
				this.noticed = setTimeout(() => {
					this.noticed = null;
					this.wake().catch(err => this.logger.debug(`Webhook delivery pass failed; the sweep retries: ${(err as Error).message}`));
				}, NOTICE_COALESCE_MS);
			}
		},

		methods: {
			unreadable(this: DeliveryThis, stream) {
				return (this.unreadableUntil.get(stream) ?? 0) > performance.now();
			},

			/**
			 * Each stream's latest event, of the streams whose owner answers now (the others wait for a
			 * later pass). An owner not served yet (still starting, or down) is not asked: the broker
			 * would log a warning for every pass until it is. Nor is one whose log could not be read a
			 * moment ago, or one still asked from an earlier pass.
			 */
			async heads(this: DeliveryThis) {
				const found: StreamHeads = {};
				await Promise.all(
					(Object.keys(EVENT_OWNER) as WebhookStream[]).map(async stream => {
						const action = `${EVENT_OWNER[stream]}.latestEvent`;
						// An owner of an earlier version serves no tagged pages: its stream's subscriptions, leased, would only be given back.
						if (!isServed(this.broker, action) || !isServed(this.broker, `${EVENT_OWNER[stream]}.taggedEvents`) || this.unreadable(stream) || this.asking.has(stream)) return;
						// A failure leaves the stream out of this pass only: the owner may be one of two replicas, or back at once.
						const answer = this.broker.call<StoredEvent | null, object>(action, {}).then(
							latest => latest?.seq ?? 0,
							() => undefined
						);
						let waited: NodeJS.Timeout | undefined;
						const seq = await Promise.race([answer, new Promise<"late">(resolve => (waited = setTimeout(resolve, HEAD_WAIT_MS, "late")))]);
						clearTimeout(waited);
						if (seq === "late") {
							this.logger.warn(`The ${stream} owner has not given its latest event in ${HEAD_WAIT_MS} ms; webhooks of that stream wait until it does`);
							this.asking.add(stream);
							void answer.finally(() => this.asking.delete(stream));
						} else if (seq !== undefined) found[stream] = seq;
					})
				);
				return found;
			},

			/** Leases what has work, as far as there is room, and starts delivering each. */
			async claim(this: DeliveryThis) {
				const room = MAX_ACTIVE - this.active.size;
				if (room <= 0 || this.stopping) return;
				const streamHeads = await this.heads();
				const leasedAt = performance.now();
				const nonce = newNonce();
				const leases = await callServed<WebhookLease[]>(this.broker, "webhooks.claim", { leasedBy: this.worker, nonce, heads: streamHeads, limit: room });
				for (const lease of leases) {
					// Acted on only when a key holder made it (its length included), for this claim and this worker.
					const { subscription, leaseTtlMs } = lease;
					if (!isAnswerTag(this.keys.leases, leaseQuestion(this.worker, nonce), { subscription, leaseTtlMs }, lease.tag) || subscription.leasedBy !== this.worker) {
						const line = this.unvouched.failed("A webhook lease does not check with this process's WEBHOOK_SECRETS_KEY, so it is left to lapse; is the key the same in every process that runs webhooks or webhook-delivery?");
						if (line) this.logger.error(line);
						continue;
					}
					const { id } = lease.subscription;
					const delivery = this.deliver(lease, leasedAt, streamHeads)
						.catch(err => this.logger.warn(`Webhook ${id}: delivery stopped, resumed once its lease lapses: ${(err as Error).message}`))
						.finally(() => {
							// A delivery whose lease lapsed while a call hung may end after this worker leased the
							// subscription again: the newer delivery keeps its place (MAX_ACTIVE, the wait on stop).
							if (this.active.get(id) === delivery) this.active.delete(id);
							if (!this.stopping) this.wake().catch(() => {});
						});
					this.active.set(id, delivery);
				}
			},

			/** A pass now, or right after the one running: a notice that comes during a pass is not lost. */
			wake(this: DeliveryThis) {
				if (this.pass) {
					this.again = true;
					return this.pass;
				}
				this.pass = (async () => {
					do {
						this.again = false;
						await this.claim();
					} while (this.again && !this.stopping);
				})().finally(() => (this.pass = null));
				return this.pass;
			},

			/**
			 * Delivers one leased subscription until it is caught up, an attempt fails, the lease is lost,
			 * the log of its failing event cannot be read or the worker stops; from the streams whose
			 * owner answered this pass (`reached`: heads).
			 */
			async deliver(this: DeliveryThis, { subscription, leaseTtlMs }, leasedAt, reached) {
				const { broker, logger, metrics } = this;
				const { attemptTimeoutMs, allowPrivate } = this.settings;
				const leaseNeeded = attemptTimeoutMs + Math.min(LEASE_MARGIN_MS, attemptTimeoutMs);
				const { id } = subscription;
				const url = new URL(subscription.url);
				let version = subscription.version;
				// Counted from before the claim was asked: the owner's expiry can only be later.
				let leaseEnds = leasedAt + leaseTtlMs;
				/** A write on the lease, proven to the owner and answered by it (throws on an answer it did not make: the lease then lapses). */
				const write = async <T>(action: HolderWrite, params: object): Promise<T> => {
					const request = holderWriteRequest(this.keys, action, params);
					return holderWriteResult<T>(this.keys, action, request.nonce, await broker.call(`webhooks.${action}`, request));
				};
				/** Records progress (and renews the lease); false when the lease is lost. */
				const advance = async (stream: WebhookStream, seq: number, delivered: boolean): Promise<boolean> => {
					const asked = performance.now();
					const next = await write<number | null>("advance", { id, version, stream, seq, delivered });
					if (next === null) return false;
					version = next;
					leaseEnds = asked + leaseTtlMs;
					return true;
				};

				/** A stream whose owner answered this pass, is still served, and could read its log a moment ago. */
				const readable = (stream: WebhookStream) => reached[stream] !== undefined && !this.unreadable(stream) && isServed(broker, `${EVENT_OWNER[stream]}.taggedEvents`);
				// A failing event goes first and nothing passes it. Its stream not readable (an owner of an
				// earlier version leases it all the same, or its owner left or failed a read since the claim):
				// the lease is left to lapse, untouched. Given back, an owner of an earlier version would lease
				// it again at once.
				const failing = failingStream(subscription);
				if (failing && !readable(failing)) return;
				let secret: string;
				try {
					secret = openSecret(subscription.secret, this.keys.sealing, subscription);
				} catch {
					// Another key than the owners' (a misconfigured replica), or a lease the owners did not make
					// (another url, say): nothing is signed, so nothing is sent; the lease lapses.
					const line = this.unvouched.failed(`Webhook ${id}: its signing secret does not open for its subscription with this process's WEBHOOK_SECRETS_KEY, so nothing is sent; is the key the same in every process that runs webhooks, mempool, tin or webhook-delivery?`);
					if (line) logger.error(line);
					return;
				}

				const sliceEnds = performance.now() + SLICE_MS;
				let sent = 0;
				/** Whether this lease passed over events the subscription does not take. */
				let skipped = false;
				const sliceOver = () => sent >= SLICE_EVENTS || performance.now() > sliceEnds;
				outer: for (const stream of streamsOf(subscription)) {
					// An owner away (down, or a TIN owner still starting): that stream waits, and the subscription
					// is leased for it again once the owner is back; the other stream goes on (no event of the
					// waiting stream is failing: that case returned above).
					if (!readable(stream)) continue;
					let cursor = subscription[CURSOR_FIELD[stream]] ?? 0;
					let recorded = cursor;
					for (let more = true; more && !this.stopping && !sliceOver(); ) {
						let page: StoredEvent[];
						try {
							const nonce = newNonce();
							const tagged = await broker.call<TaggedEvents, object>(`${EVENT_OWNER[stream]}.taggedEvents`, { after: cursor, limit: EVENT_PAGE, nonce });
							// Signed only when a key holder vouched for them as the answer to this read, not for
							// whatever answered in the owner's name; and only events after the cursor, in order.
							if (!isAnswerTag(this.keys.events, eventsQuestion(stream, cursor, EVENT_PAGE, nonce), tagged.events, tagged.tag))
								throw new Error("the page's tag does not check with this process's WEBHOOK_SECRETS_KEY; is it the same in every process that runs mempool, tin or webhook-delivery?");
							if (!tagged.events.every((event, i) => event.seq > (i ? tagged.events[i - 1]!.seq : cursor))) throw new Error("the page's events are not in order after the cursor");
							page = tagged.events;
						} catch (err) {
							// Left out for a lease, as if its owner were away: no subscription is leased for this
							// stream meanwhile (each would be given back at once, to be leased again).
							if (!this.unreadable(stream)) logger.warn(`Reading the ${stream} events failed; webhooks of that stream wait ${leaseTtlMs} ms: ${(err as Error).message}`);
							this.unreadableUntil.set(stream, performance.now() + leaseTtlMs);
							// The failing event's stream: nothing else may go before it.
							if (stream === failing) break outer;
							break;
						}
						more = page.length === EVENT_PAGE;
						// A log has no holes: what lies between the cursor and the page was pruned before this
						// subscription reached it (a backlog older than EVENT_RETENTION_MS), and cannot be sent.
						// The cursor moves past the gap, so that a retry does not count it again.
						const missed = page.length ? page[0].seq - cursor - 1 : 0;
						if (missed > 0) {
							metrics.attempts.inc({ outcome: "missed" }, missed);
							logger.error(`Webhook ${id}: ${missed} event(s) of the ${stream} log after ${cursor}, whatever its filter takes, were pruned (EVENT_RETENTION_MS) before it reached them`);
							cursor = page[0].seq - 1;
						}
						for (const event of page) {
							if (this.stopping || sliceOver()) {
								more = false;
								break;
							}
							if (!takesEvent(subscription, event)) {
								cursor = event.seq;
								skipped = true;
								continue;
							}
							// Never an attempt the lease might not outlast: its next holder could be sending the same event.
							if (leaseEnds - performance.now() < leaseNeeded) {
								if (!(await advance(stream, cursor, false))) return;
								recorded = cursor;
								if (leaseEnds - performance.now() < leaseNeeded) {
									// Renewed and still short: the owner grants shorter leases than this worker's
									// attempts need (WEBHOOK_TIMEOUT_MS differs between processes). Left to lapse.
									const line = this.shortLeases.failed(`Webhook leases of ${leaseTtlMs} ms cannot hold an attempt of ${attemptTimeoutMs} ms with its margin, so nothing is sent; is WEBHOOK_TIMEOUT_MS the same in every process?`);
									if (line) logger.warn(line);
									return;
								}
							}
							const webhookId = webhookIdOf(stream, event.seq);
							const body = payloadOf(event);
							const result = await postWebhook(url, webhookHeaders(secret, webhookId, Math.floor(Date.now() / 1000), body), body, allowPrivate, attemptTimeoutMs);
							if (!result.ok && result.deferred) {
								// No attempt: given back with its progress, not held against the receiver, and due again
								// after an attempt's time, behind the subscriptions due before it (not at the next pass,
								// ahead of them all).
								metrics.attempts.inc({ outcome: "deferred" });
								if (cursor > recorded && !(await advance(stream, cursor, false))) return;
								return void (await write("release", { id, version, deferMs: attemptTimeoutMs }));
							}
							if (!result.ok) {
								const failed = await write<{ disabled: boolean } | null>("fail", {
									id,
									version,
									stream,
									seq: cursor,
									webhookId,
									eventType: event.type,
									status: result.status,
									error: result.error
								});
								metrics.attempts.inc({ outcome: failed?.disabled ? "disabled" : "failed" });
								if (failed?.disabled) logger.warn(`Webhook ${id} disabled: its deliveries failed for longer than WEBHOOK_RETRY_FOR_MS (last: ${result.error})`);
								return; // the lease went with the failure: the retry is the owner's schedule
							}
							sent++;
							metrics.attempts.inc({ outcome: "delivered" });
							metrics.lag.observe(Math.max(0, Date.now() - Date.parse(event.at)) / 1000);
							if (!(await advance(stream, event.seq, true))) return;
							cursor = recorded = event.seq;
						}
						// Events it does not take: the cursor moves past them, so no later pass reads them again.
						if (cursor > recorded) {
							if (!(await advance(stream, cursor, false))) return;
							recorded = cursor;
						}
					}
				}
				// A lease that only passed over events (a filter that takes none of the new ones) rests the
				// subscription a moment: leased again at once, at every event, each of up to WEBHOOKS_MAX such
				// subscriptions cost the owner three writes per event. A matching event then waits up to
				// IDLE_REST_MS more. The lease after the rest finds nothing new, or passes over more: a lease
				// that read nothing gives the subscription back idle, so a quiet one is not leased again.
				await write("release", { id, version, ...(sent === 0 && skipped ? { restMs: IDLE_REST_MS } : {}) });
			}
		} satisfies DeliveryMethods & ThisType<DeliveryThis>,

		created(this: DeliveryThis) {
			this.metrics = webhookMetrics(this.broker);
			this.active = new Map();
			this.pass = null;
			this.again = false;
			this.stopping = false;
			this.noticed = null;
			this.asking = new Set();
			this.unreadableUntil = new Map();
			this.shortLeases = new FailureStreak();
			this.unvouched = new FailureStreak();
			this.keys = loadWebhookKeys(config, this.logger);
		},

		started(this: DeliveryThis) {
			this.stopping = false;
			this.worker = `${this.broker.nodeID}/${randomBytes(4).toString("hex")}`;
		},

		/** Attempts in flight finish (each within WEBHOOK_TIMEOUT_MS); their subscriptions are released for another worker. */
		async stopped(this: DeliveryThis) {
			this.stopping = true;
			if (this.noticed) clearTimeout(this.noticed);
			await this.pass?.catch(() => {});
			await Promise.all(this.active.values());
		}
	};
}
