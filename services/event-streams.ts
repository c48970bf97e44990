/**
 * The gateway's event streams (server-sent events), read from the owners' event logs through
 * lib/event-feed.ts, so that any gateway replica serves any stream and a client reconnecting
 * elsewhere with Last-Event-ID misses nothing:
 *   GET /intents/{id}/events (public): the intent's state, then each change; closes after a terminal state.
 *   GET /events (worker key): every intent and TIN operation event from Last-Event-ID or from now,
 *   filtered by `types` and `states`.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { Errors, type ServiceBroker } from "moleculer";
import { clientKey } from "../lib/client-key";
import type { Config } from "../lib/config";
import { OpenPerClient } from "../lib/connection-cap";
import { isUnanswered, ServiceError } from "../lib/errors";
import { StreamFeed, type FeedSubscriber } from "../lib/event-feed";
import { ConditionStreaks, FailureStreak } from "../lib/failure-streak";
import { INTENT_EVENT_TYPE, INTENT_STATES, TERMINAL_STATES, type IntentState, type PublicMempoolIntent } from "../lib/intents";
import { eventPage, type EventPage, type EventQuery, type StoredEvent } from "../lib/store";
import { TIN_OPERATION_EVENT_TYPE, TIN_OPERATION_STATES } from "../lib/tin-operations";
import { EVENT_PAGE, type EventStream } from "../mixins/outbox.mixin";
import { callServed, isServed } from "./internal";
import { eventStreamMetrics } from "./metrics";
import { onResponseGone } from "./response-gone";

/** The owner whose log each stream is. */
const OWNERS: Record<EventStream, string> = { intents: "mempool", tin_operations: "tin" };
const EVENT_TYPES: Record<EventStream, string> = { intents: INTENT_EVENT_TYPE, tin_operations: TIN_OPERATION_EVENT_TYPE };

/** A stream whose client reads slower than this much is cut off; it reconnects with Last-Event-ID. */
const MAX_BUFFERED_BYTES = 1 << 20;
/**
 * What all the streams of a process may hold unsent together: past it, those furthest behind are
 * cut off. Streams with different filters share no buffer, so a thousand slow readers could
 * otherwise hold a gigabyte, far past a gateway's memory.
 */
const MAX_BUFFERED_TOTAL_BYTES = 64 << 20;
/** A notice can be lost (a bus hiccup): the logs are read this often anyway while streams are open. */
const FALLBACK_READ_MS = 1000;
/** A stream writes at most once per this many ms: what came meanwhile leaves in one write. */
const FLUSH_WINDOW_MS = 25;
/** How long a client waits before reconnecting (the SSE `retry:` field), and after a 429. */
const RECONNECT_MS = 2000;

export const INTENT_STREAM_PARAMS = { $$strict: true, id: { type: "string", max: 64 } };
export const EVENT_STREAM_PARAMS = {
	$$strict: true,
	types: { type: "string", optional: true, max: 200, pattern: /^[a-z_.]+(,[a-z_.]+)*$/ },
	states: { type: "string", optional: true, max: 400, pattern: /^[A-Z_]+(,[A-Z_]+)*$/ }
};
/** The request header that resumes a stream: for GET /intents/{id}/events a sequence number, for GET /events `<intents>-<tin_operations>`. */
export const LAST_EVENT_ID = { name: "Last-Event-ID", in: "header" as const, required: false, description: "The `id` of the last event received: the stream resumes after it", schema: { type: "string", maxLength: 40 } };

type Request = IncomingMessage & { $params?: Record<string, unknown> };
type StreamAccess = "public" | "worker";

/** Queued events as one buffer; `parts` tells whether another stream's can be reused. */
interface Batch {
	parts: readonly Buffer[];
	bytes: Buffer;
}

function batchOf(parts: Buffer[], previous: Batch | null): Batch {
	if (previous && previous.parts.length === parts.length && previous.parts.every((part, i) => part === parts[i])) return previous;
	return { parts, bytes: parts.length === 1 ? parts[0] : Buffer.concat(parts) };
}

/**
 * Writes the streams' queued events in rounds, at most one per FLUSH_WINDOW_MS. A write to a
 * socket costs a system call (on loopback the receiver's kernel work too) whatever it carries:
 * with a hundred busy streams, a write per event per stream was most of the gateway's work. The
 * first event after a quiet spell leaves at once; a busy log's wait for the next round. Streams
 * queued the same events (every firehose stream) write one shared buffer. After each round, the
 * streams furthest behind are cut off while all together hold more than the budget unsent.
 */
export class WriteRounds {
	private readonly queued = new Set<SseConnection>();
	private lastRound = 0;
	/**
	 * Bytes written to the streams and not yet taken by the kernel, each buffer once however many
	 * writes hold it (an event's frame, a round's batch, written to many streams), and how many
	 * writes hold each.
	 */
	private unsentBytes = 0;
	private readonly holders = new WeakMap<Buffer, number>();

	constructor(
		/** Every open stream: after each round they must hold no more than `budgetBytes` unsent together. */
		private readonly open: ReadonlySet<SseConnection> = new Set(),
		private readonly budgetBytes = MAX_BUFFERED_TOTAL_BYTES,
		/** After each round: how many streams it cut off for the budget (0: within it). */
		private readonly afterRound: (cut: number) => void = () => {}
	) {}

	queue(connection: SseConnection): void {
		if (this.queued.size === 0) {
			const wait = this.lastRound + FLUSH_WINDOW_MS - performance.now();
			if (wait > 0) setTimeout(() => this.run(), wait);
			else process.nextTick(() => this.run());
		}
		this.queued.add(connection);
	}

	private run(): void {
		this.lastRound = performance.now();
		const round = [...this.queued];
		this.queued.clear();
		let previous: Batch | null = null;
		for (const connection of round) {
			previous = connection.flush(previous) ?? previous;
			connection.endIfBehind();
		}
		// Once the writes went out: a response sends its writes on the next tick (corked till then),
		// and would count them as unsent until then, whether or not its client keeps up.
		setImmediate(() => this.holdWithinBudget());
	}

	/** A stream wrote `bytes`: they are held until the kernel takes them. */
	wrote(bytes: Buffer): void {
		const holders = this.holders.get(bytes) ?? 0;
		if (holders === 0) this.unsentBytes += bytes.length;
		this.holders.set(bytes, holders + 1);
	}

	/** The kernel took one write of `bytes`, or the stream that wrote them went. */
	taken(bytes: Buffer): void {
		const holders = this.holders.get(bytes)! - 1;
		if (holders === 0) this.unsentBytes -= bytes.length;
		this.holders.set(bytes, holders);
	}

	/**
	 * Over the budget, cuts off the streams furthest behind until the rest would fit. What a cut
	 * stream frees is counted as all it holds, though it may share some: the next round cuts more
	 * if that was too few. Only what open streams hold is theirs to free: bytes of streams no longer
	 * open (ended, going within RECONNECT_MS) go by themselves, and cutting healthy streams for them
	 * would free nothing. A stream holding nothing unsent is never cut.
	 */
	private holdWithinBudget(): void {
		let cut = 0;
		if (this.unsentBytes > this.budgetBytes) {
			let openHold = 0;
			for (const connection of this.open) openHold += connection.buffered;
			let left = Math.min(this.unsentBytes, openHold);
			for (const connection of [...this.open].sort((a, b) => b.buffered - a.buffered)) {
				if (left <= this.budgetBytes || connection.buffered === 0) break;
				left -= connection.buffered;
				connection.cut();
				cut++;
			}
		}
		this.afterRound(cut);
	}
}

/** One open SSE response. */
export class SseConnection {
	closed = false;
	private readonly closers: (() => void)[] = [];
	/** Events queued for the next write round. */
	private pending: Buffer[] = [];
	/** Writes not yet taken by the kernel, by their buffer (counted in the rounds' budget until then). */
	private readonly unsent = new Map<Buffer, number>();

	constructor(
		private readonly res: ServerResponse,
		private readonly rounds: WriteRounds
	) {
		res.writeHead(200, {
			"content-type": "text/event-stream; charset=utf-8",
			// A worker route's stream stays private (the gateway set that before): no shared cache keeps it.
			"cache-control": String(res.getHeader("cache-control") ?? "").includes("private") ? "private, no-store, no-transform" : "no-cache, no-transform",
			// nginx buffers responses unless told not to; a buffered stream is no stream.
			"x-accel-buffering": "no"
		});
		res.write(`retry: ${RECONNECT_MS}\n\n`);
		onResponseGone(res, () => {
			this.end();
			// Gone with its socket: what it had not sent no longer holds memory, whether or not its write callbacks come.
			for (const [bytes, writes] of this.unsent) for (let i = 0; i < writes; i++) this.rounds.taken(bytes);
			this.unsent.clear();
		});
	}

	/** Closed here, or ended or destroyed under it (a failure answered after it opened). */
	private get gone(): boolean {
		return this.closed || this.res.writableEnded || this.res.destroyed;
	}

	/**
	 * Queues one event (`data`: JSON text) for the next write round; false once the stream is
	 * closed (a reader lagging 1 MiB behind is closed at that round).
	 */
	send(event: string, data: string, id?: string): boolean {
		return this.sendFrame(Buffer.from(`${id !== undefined ? `id: ${id}\n` : ""}event: ${event}\ndata: ${data}\n\n`));
	}

	/** Queues one whole event, as `frame` built it (encoded once, shared by the streams at the same place). */
	sendFrame(frame: Buffer): boolean {
		if (this.gone) return false;
		if (this.pending.length === 0) this.rounds.queue(this);
		this.pending.push(frame);
		return true;
	}

	/** Writes what is queued, as `previous` if it is the same events; answers the batch written. */
	flush(previous: Batch | null = null): Batch | undefined {
		if (this.gone || this.pending.length === 0) return undefined;
		const batch = batchOf(this.pending, previous);
		this.pending = [];
		const { bytes } = batch;
		this.unsent.set(bytes, (this.unsent.get(bytes) ?? 0) + 1);
		this.rounds.wrote(bytes);
		this.res.write(bytes, () => this.taken(bytes));
		return batch;
	}

	/** The kernel took a write of `bytes` (or the stream went): it no longer counts against the rounds' budget. */
	private taken(bytes: Buffer): void {
		const writes = this.unsent.get(bytes);
		if (writes === undefined) return;
		if (writes === 1) this.unsent.delete(bytes);
		else this.unsent.set(bytes, writes - 1);
		this.rounds.taken(bytes);
	}

	/**
	 * A reader this far behind is cut off: it reconnects with Last-Event-ID. Ending the response
	 * would wait for it to take the bytes it is not reading, holding them and the socket for good
	 * after its stream stopped counting against the limits.
	 */
	endIfBehind(): void {
		if (this.buffered > MAX_BUFFERED_BYTES) this.cut();
	}

	/** Bytes written and not yet taken by the client (beyond what the kernel holds). */
	get buffered(): number {
		return this.res.writableLength;
	}

	/**
	 * Closed at once, what it holds unsent dropped: its client resumes with Last-Event-ID. A
	 * response queued behind another on its connection (pipelined) has no socket to destroy, and
	 * would hold its bytes until it had one: the connection goes.
	 */
	cut(): void {
		this.pending = [];
		if (!this.res.socket) this.res.req.socket.destroy();
		this.res.destroy();
		this.end();
	}

	/**
	 * For a stream whose id is its place in the logs (GET /events): that place, sent with each
	 * heartbeat. Events a filter leaves out move it on too, so a client resumes from there, not from
	 * its last event taken, which may be days back.
	 */
	resumeId?: () => string;

	/** Writes a heartbeat now, after what is queued (one write): a comment, and the resume id if any. */
	heartbeat(): void {
		if (this.gone) return;
		this.pending.push(Buffer.from(this.resumeId ? `: heartbeat\nid: ${this.resumeId()}\n\n` : ": heartbeat\n\n"));
		this.flush();
	}

	drained(): Promise<void> {
		this.flush();
		if (this.gone || !this.res.writableNeedDrain) return Promise.resolve();
		return new Promise(resolve => {
			const done = () => {
				this.res.off("drain", done);
				this.res.off("close", done);
				resolve();
			};
			this.res.on("drain", done);
			this.res.on("close", done);
		});
	}

	onceClosed(closer: () => void): void {
		if (this.closed) closer();
		else this.closers.push(closer);
	}

	/**
	 * Ends the stream, its last bytes sent. A reader that has not taken them within RECONNECT_MS is
	 * cut off, as a lagging one is: the stream no longer counts against the limits.
	 */
	end(): void {
		if (this.closed) return;
		this.flush();
		this.closed = true;
		if (!this.res.writableEnded && !this.res.destroyed) this.res.end();
		if (!this.res.writableFinished && !this.res.destroyed) {
			const cutOff = setTimeout(() => this.res.writableFinished || this.res.destroy(), RECONNECT_MS).unref();
			this.res.once("close", () => clearTimeout(cutOff));
		}
		for (const closer of this.closers.splice(0)) closer();
	}
}

const badLastEventId = () =>
	new ServiceError("VALIDATION_ERROR", "Last-Event-ID is not an id this stream sent", [{ type: "lastEventId", field: "Last-Event-ID", message: "The Last-Event-ID header must be the id of an event of this stream." }]);
const prunedAfterLastEventId = () =>
	new ServiceError("VALIDATION_ERROR", "Events after this Last-Event-ID are no longer kept (EVENT_RETENTION_MS): follow the stream from now, and read the current state", [
		{ type: "lastEventId", field: "Last-Event-ID", message: "Some events after the Last-Event-ID were pruned; resuming from it would skip them." }
	]);

/** Header values are strings; a repeated header is refused rather than guessed at. */
function lastEventId(req: IncomingMessage, pattern: RegExp): string | null {
	const values = req.headersDistinct["last-event-id"];
	if (!values) return null;
	if (values.length !== 1 || !pattern.test(values[0])) throw badLastEventId();
	return values[0];
}

/** The client left before its stream opened: nothing to answer. */
class ClientGone extends Error {}

export const isClientGone = (err: unknown) => err instanceof ClientGone;

function list(raw: unknown): string[] | null {
	return typeof raw === "string" ? raw.split(",") : null;
}

export interface EventStreams {
	/** The owner of `stream` committed new events. */
	notify(stream: EventStream): void;
	serveIntent(req: Request, res: ServerResponse): Promise<void>;
	serveAll(req: Request, res: ServerResponse): Promise<void>;
	/** Ends every open stream (the gateway is draining): clients reconnect elsewhere. */
	closeAll(): void;
}

export function eventStreams(broker: ServiceBroker, config: Config, clientIp: (req: IncomingMessage) => string): EventStreams {
	const metrics = eventStreamMetrics(broker);
	// Its own module in the log: the broker's is kept a level quieter (moleculer.config.ts).
	const logger = broker.getLogger("event-streams");
	/** Where the owner's log of `stream` ends now (0: empty). */
	const ownerHead = async (stream: EventStream) => (await callServed<StoredEvent | null>(broker, `${OWNERS[stream]}.latestEvent`, {}))?.seq ?? 0;
	/**
	 * A page of the owner's log, and how far the read saw. An owner of the previous version (a rolling
	 * update) tells only the events: how far is its head, read just before.
	 */
	const readPage = async (stream: EventStream, query: EventQuery): Promise<EventPage> => {
		if (isServed(broker, `${OWNERS[stream]}.eventPage`)) return callServed<EventPage>(broker, `${OWNERS[stream]}.eventPage`, query);
		const head = await ownerHead(stream);
		return eventPage(await callServed<StoredEvent[]>(broker, `${OWNERS[stream]}.events`, query), query, head);
	};
	const feeds = Object.fromEntries(
		(Object.keys(OWNERS) as EventStream[]).map(stream => {
			// The shared reader retries each FALLBACK_READ_MS while its owner is down: told once a minute, and when it reads again.
			const streak = new FailureStreak();
			return [
				stream,
				new StreamFeed(
					query => readPage(stream, query),
					() => ownerHead(stream),
					EVENT_PAGE,
					err => {
						metrics.readFailures.inc({ stream });
						const line = streak.failed(`Reading the ${stream} event log failed: ${(err as Error).message}`);
						if (line) logger.warn(line);
					},
					() => {
						const recovered = streak.succeeded();
						if (recovered) logger.info(`Reading the ${stream} event log ${recovered}`);
					},
					// Events as they come, once each: a replay after Last-Event-ID is late by design.
					event => metrics.lag.observe(Math.max(0, Date.now() - Date.parse(event.at)) / 1000)
				)
			];
		})
	) as Record<EventStream, StreamFeed>;
	const open = new Set<SseConnection>();
	// Over the budget, every round cuts: told as it starts, once a minute while it lasts, and as it ends.
	const budget = new ConditionStreaks(logger);
	const rounds = new WriteRounds(open, MAX_BUFFERED_TOTAL_BYTES, cut =>
		budget.report("Event streams:", cut > 0, `the streams held more than ${MAX_BUFFERED_TOTAL_BYTES / 2 ** 20} MiB unsent together; those furthest behind are cut off`)
	);
	/** Streams open per access (public and worker: anonymous streams cannot use up the Crankers' room) and per client. */
	const budgets: Record<StreamAccess, { open: number; perClient: OpenPerClient }> = { public: { open: 0, perClient: new OpenPerClient() }, worker: { open: 0, perClient: new OpenPerClient() } };
	let timers: NodeJS.Timeout[] = [];
	let closing = false;
	// The broker's validator: the same rules and messages as every action's params.
	const validator = broker.validator!;
	const validate = { intent: validator.compile(INTENT_STREAM_PARAMS), all: validator.compile(EVENT_STREAM_PARAMS) };

	function check(compiled: (params: Record<string, unknown>) => unknown, params: Record<string, unknown>): void {
		const result = compiled(params);
		if (result !== true) throw new Errors.ValidationError("Parameters validation error!", "VALIDATION_ERROR", result as object);
	}

	/**
	 * An intent with no event yet (not verified: its first event is its verdict) may be removed
	 * instead (a forgery found by the verification sweep), with no event to end its stream: its
	 * stream checks every heartbeat that it is still there, until its first event.
	 */
	function watchUnverified(connection: SseConnection, id: string): void {
		const timer = setInterval(async () => {
			const latest = await callServed<StoredEvent | null>(broker, "mempool.latestEvent", { subject: id }).catch(() => undefined);
			if (latest) return clearInterval(timer);
			if (latest === null) await callServed(broker, "mempool.view", { id }).catch((err: { type?: string }) => err.type === "NOT_FOUND" && connection.end());
		}, config.eventHeartbeatMs).unref();
		connection.onceClosed(() => clearInterval(timer));
	}

	function wakeAll(): void {
		for (const feed of Object.values(feeds)) feed.wake();
	}

	/**
	 * 429 past the limits (per client and per process, for its access), 503 while shutting down.
	 * Checked as a request comes, before it costs the owners a read, and again as its stream opens.
	 */
	function assertRoom(res: ServerResponse, access: StreamAccess, client: string): void {
		if (closing) throw new ServiceError("SHUTTING_DOWN", "The service is shutting down; retry on another instance");
		const budget = budgets[access];
		if (budget.open >= config.eventStreamsMax || budget.perClient.held(client) >= config.eventStreamsPerIp) {
			res.setHeader("Retry-After", String(RECONNECT_MS / 1000));
			throw new ServiceError("RATE_LIMITED", budget.open >= config.eventStreamsMax ? "This gateway has as many event streams open as it serves; retry later or elsewhere" : "Too many event streams open from this address");
		}
	}

	/**
	 * Opens a stream within the limits (per client and per process, for its access), or refuses it
	 * with 429. `client` was taken when the request came, before any await: a socket closed since
	 * has no address, and its stream would never see its close.
	 */
	function connect(res: ServerResponse, route: string, access: StreamAccess, client: string): SseConnection {
		if (res.destroyed || res.writableEnded || res.req.socket.destroyed) throw new ClientGone();
		assertRoom(res, access, client);
		const budget = budgets[access];
		const connection = new SseConnection(res, rounds);
		// Ended as it opened (its socket gone): it must not count, its closer would run before it did.
		if (connection.closed) throw new ClientGone();
		connection.onceClosed(() => {
			open.delete(connection);
			budget.open--;
			budget.perClient.release(client);
			metrics.open.dec({ route });
			if (open.size === 0) {
				for (const timer of timers) clearInterval(timer);
				timers = [];
			}
		});
		open.add(connection);
		budget.open++;
		budget.perClient.add(client);
		metrics.open.inc({ route });
		if (timers.length === 0)
			timers = [
				setInterval(() => {
					for (const stream of open) stream.heartbeat();
				}, config.eventHeartbeatMs).unref(),
				setInterval(wakeAll, FALLBACK_READ_MS).unref()
			];
		return connection;
	}

	/**
	 * Follows `feed` for `subscriber` until the connection closes. A failure once the stream is open
	 * (an owner that cannot be read) ends the stream: its client resumes with Last-Event-ID.
	 */
	async function follow(feed: StreamFeed, connection: SseConnection, subscriber: FeedSubscriber): Promise<void> {
		try {
			await feed.subscribe(subscriber);
		} catch (err) {
			logger.warn(`An event stream failed while catching up, and was closed: ${(err as Error).message}`);
			connection.end();
		}
		// Also when it closed while catching up, after its last delivery.
		connection.onceClosed(() => feed.leave(subscriber));
	}

	// Each event's `data` is serialized once, however many streams send it.
	const views = new WeakMap<StoredEvent, string>();
	const bodies = new WeakMap<StoredEvent, string>();
	const cached = (cache: WeakMap<StoredEvent, string>, event: StoredEvent, build: () => unknown) => {
		let text = cache.get(event);
		if (text === undefined) cache.set(event, (text = JSON.stringify(build())));
		return text;
	};
	const viewOf = (event: StoredEvent) => cached(views, event, () => event.data.view);
	const bodyOf = (event: StoredEvent) => cached(bodies, event, () => ({ seq: event.seq, type: event.type, subject: event.subject, at: event.at, ...event.data }));
	// The worker stream's whole event, by its id (the positions in both logs): the streams that
	// follow both logs live send the same. Compared as numbers: this runs once per event per stream.
	const frames = new WeakMap<StoredEvent, { intents: number; tinOperations: number; frame: Buffer }>();
	const frameOf = (event: StoredEvent, positions: Record<EventStream, number>) => {
		const known = frames.get(event);
		if (known && known.intents === positions.intents && known.tinOperations === positions.tin_operations) return known.frame;
		const frame = Buffer.from(`id: ${positions.intents}-${positions.tin_operations}\nevent: ${event.type}\ndata: ${bodyOf(event)}\n\n`);
		frames.set(event, { intents: positions.intents, tinOperations: positions.tin_operations, frame });
		return frame;
	};


	return {
		notify(stream) {
			feeds[stream].wake();
		},

		async serveIntent(req, res) {
			// The path's id and the query, as for every route: anything else is refused (strict).
			const params: Record<string, unknown> = { ...(req.$params ?? {}) };
			check(validate.intent, params);
			const id = params.id as string;
			const resumeAt = lastEventId(req, /^\d{1,15}$/);
			const client = clientKey(clientIp(req));
			assertRoom(res, "public", client);
			// The current state: the intent's newest event, or (not verified yet, or its events pruned) its
			// view. The view is read either way: a record gone with its events kept (a migration removed
			// it) is 404, as GET /intents/{id} answers, and its events are shown to no one.
			const [latest, view] = await Promise.all([callServed<StoredEvent | null>(broker, "mempool.latestEvent", { subject: id }), callServed<PublicMempoolIntent>(broker, "mempool.view", { id })]);
			const isTerminal = (state: unknown) => TERMINAL_STATES.includes(state as IntentState);
			// Past the end of the log: no event of this stream has that id, and none would follow it.
			if (resumeAt !== null && Number(resumeAt) > 0 && Number(resumeAt) > (latest ? latest.seq : await ownerHead("intents"))) throw badLastEventId();
			// Resumed after its last change, a terminal one, or after the view of a terminal intent
			// with no event (id 0): nothing will ever follow. 204 tells an EventSource to stop reconnecting.
			if (resumeAt !== null && Number(resumeAt) === (latest ? latest.seq : 0) && isTerminal(latest ? latest.data.state : view.receiverStatus))
				return void res.writeHead(204).end();
			const connection = connect(res, "/intents/:id/events", "public", client);
			let position = resumeAt !== null ? Number(resumeAt) : 0;
			if (!latest) watchUnverified(connection, id);
			// The current state first, unless the client resumes after an event it has: also when it
			// resumes an intent with no event (not verified yet, or its events pruned), whose state
			// only the view tells, and whose stream ends at once if that state is terminal.
			if (resumeAt === null || !latest) {
				const state = latest ? latest.data.state : view.receiverStatus;
				if (latest) connection.send("status", viewOf(latest), String(latest.seq));
				// A terminal view carries id 0, which no event has: resumed from it, the answer is the 204 above.
				else connection.send("status", JSON.stringify(view), isTerminal(state) ? "0" : undefined);
				if (latest) position = latest.seq;
				if (isTerminal(state)) return connection.end();
			}
			await follow(feeds.intents, connection, {
				subject: id,
				position,
				deliver(event) {
					if (!connection.send("status", viewOf(event), String(event.seq))) return false;
					if (!isTerminal(event.data.state)) return true;
					connection.end();
					return false;
				},
				drained: () => connection.drained(),
				// Its later pages wait for a turn: a client gone meanwhile gives its turn up.
				closed: () => connection.closed
			});
		},

		async serveAll(req, res) {
			const query: Record<string, unknown> = { ...(req.$params ?? {}) };
			check(validate.all, query);
			const types = list(query.types) ?? Object.values(EVENT_TYPES);
			const states = list(query.states);
			const unknownType = types.find(type => !Object.values(EVENT_TYPES).includes(type));
			const knownStates: readonly string[] = [...INTENT_STATES, ...TIN_OPERATION_STATES];
			const unknownState = states?.find(state => !knownStates.includes(state));
			if (unknownType !== undefined || unknownState !== undefined)
				throw new ServiceError("VALIDATION_ERROR", `Unknown ${unknownType !== undefined ? "event type" : "state"} ${unknownType ?? unknownState}`, [
					{ type: "enumValue", field: unknownType !== undefined ? "types" : "states", message: unknownType !== undefined ? `The 'types' field takes ${Object.values(EVENT_TYPES).join(", ")}.` : "The 'states' field takes intent and TIN operation states." }
				]);
			const resumeAt = lastEventId(req, /^\d{1,15}-\d{1,15}$/);
			const client = clientKey(clientIp(req));
			assertRoom(res, "worker", client);
			const streams = (Object.keys(EVENT_TYPES) as EventStream[]).filter(stream => types.includes(EVENT_TYPES[stream]));
			const positions: Record<EventStream, number> = resumeAt !== null ? { intents: Number(resumeAt.split("-")[0]), tin_operations: Number(resumeAt.split("-")[1]) } : { intents: 0, tin_operations: 0 };
			// From now: where each log ends as the stream opens. Resumed: never past where a log ends
			// (asked of the owner: this replica's reader may be a moment behind another's), a log the
			// filter leaves out too, since its part of the id is sent back in every id; but an owner of
			// such a log that cannot answer now does not hold the stream up.
			if (resumeAt === null) {
				for (const stream of streams) positions[stream] = await feeds[stream].head();
			} else {
				for (const stream of Object.keys(positions) as EventStream[]) {
					if (positions[stream] === 0) continue;
					const head = await ownerHead(stream).catch((err: unknown) => (!streams.includes(stream) && isUnanswered(err) ? Infinity : Promise.reject(err)));
					if (positions[stream] > head) throw badLastEventId();
				}
				// A log numbers its events without a hole: a first event kept past the next number means
				// those between were pruned, and a stream resumed there would skip them without a word. An
				// owner that cannot be read now is left to the stream's own first read (which checks the same).
				for (const stream of streams) {
					const first = (await readPage(stream, { after: positions[stream], limit: 1 }).catch(() => null))?.events[0];
					if (first && first.seq > positions[stream] + 1) throw prunedAfterLastEventId();
				}
			}
			const connection = connect(res, "/events", "worker", client);
			// Where the stream starts, before any event: a client that drops before its first one
			// resumes from here, not from a new "now" that would skip what came meanwhile.
			connection.resumeId = () => `${positions.intents}-${positions.tin_operations}`;
			connection.sendFrame(Buffer.from(`id: ${connection.resumeId()}\n\n`));
			const wanted = states && new Set(states);
			await Promise.all(
				streams.map(stream => {
					const subscriber: FeedSubscriber = {
						position: positions[stream],
						deliver(event) {
							positions[stream] = event.seq;
							if (wanted && !wanted.has(event.data.state as string)) return !connection.closed;
							return connection.sendFrame(frameOf(event, positions));
						},
						closed: () => connection.closed,
						drained: () => connection.drained()
					};
					return follow(feeds[stream], connection, subscriber);
				})
			);
		},

		closeAll() {
			closing = true;
			for (const connection of open) connection.end();
		}
	};
}

