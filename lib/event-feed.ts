/**
 * A gateway's view of the event logs (the outbox each owner keeps, lib/store OutboxEvent): one
 * reader per stream follows the log and hands each new event to every caught-up subscriber, so
 * a thousand listeners cost one read per notice, not a thousand. A subscriber that starts behind
 * (Last-Event-ID, or a record's current state) pages through the log itself until it reaches
 * the shared position, then joins it: no gap and no duplicate, whichever replica it reconnects to,
 * since every replica reads the same log. Pure: reading is injected.
 */
import type { EventPage, StoredEvent } from "./store/port";

/** How long a subscriber whose read brought it no further waits before reading again, and at most in all. */
const BEHIND_RETRY_MS = 50;
const BEHIND_LIMIT_MS = 10_000;
/**
 * Catch-up reads of the whole log in flight at once per feed, however many subscribers catch up: a
 * thousand streams resuming far back (or filtering out every event, so never waiting for their
 * client) read the owner's log a page or two at a time, not a thousand pages at a time. A record's
 * first page of its own events (read by subject) is read at once; its later ones take turns too.
 */
export const CATCH_UP_READS = 2;

/** Reads a log: committed events after `after` (of one record with `subject`), oldest first, and how far it saw. */
export type LogReader = (query: { after: number; subject?: string; limit: number }) => Promise<EventPage>;

/** A subscriber of one stream; `deliver` gets each event once, in order. */
export interface FeedSubscriber {
	/** Events of this record only (the log is read by subject while it catches up). */
	readonly subject?: string;
	/** The position after which it wants events (a Last-Event-ID, or the seq of the state it was shown). */
	position: number;
	/** False: stop (the subscriber closed); nothing more is delivered. Synchronous, so that order holds. */
	deliver(event: StoredEvent): boolean;
	/** Whether it closed: a catch-up read waiting for its turn is then not made. */
	closed?(): boolean;
	/** Between the pages it reads while catching up: waits until what it was sent has drained. */
	drained(): Promise<void>;
}

export class StreamFeed {
	/** The newest event handed to the caught-up subscribers (null: not read yet). */
	private position: number | null = null;
	/** Caught-up subscribers of every event, and of one record's, by subject. */
	private readonly everyone = new Set<FeedSubscriber>();
	private readonly bySubject = new Map<string, Set<FeedSubscriber>>();
	private reading: Promise<void> | null = null;
	private readAgain = false;
	/** Catch-up reads of the whole log in flight, and those waiting for a turn (from where they read). */
	private catchUpReads = 0;
	private readonly waitingToCatchUp: { after: number; subscriber: FeedSubscriber; turn(granted: boolean): void }[] = [];

	constructor(
		private readonly read: LogReader,
		private readonly latestSeq: () => Promise<number>,
		private readonly pageSize: number,
		private readonly onError: (err: unknown) => void,
		/** The shared reader read the log to its end: after failures, the owner answers again. */
		private readonly onFollowed: () => void,
		/** Each event the shared reader hands to caught-up subscribers, once (for its delay, say). */
		private readonly onLive: (event: StoredEvent) => void = () => {}
	) {}

	/**
	 * Where the log ends now: the shared reader's position while it follows the log; otherwise
	 * read from the owner (a position left by earlier subscribers would replay what came since as
	 * "now", and have the next reader page through all of it), even if it is behind that position:
	 * a restored log numbers its new events from its own end, and a reader kept past them would
	 * hand none to the streams that start now. A member behind the others (a MongoDB failover) can
	 * make "now" a moment early: a stream then starts with a few events again, never with a gap.
	 */
	async head(): Promise<number> {
		if (this.position === null || this.unfollowed) {
			const seq = await this.latestSeq();
			if (this.position === null || this.unfollowed) this.position = seq;
		}
		return this.position!;
	}

	/** Nobody caught up, and no read under way: the shared position is nobody's. */
	private get unfollowed(): boolean {
		return this.idle && this.reading === null;
	}

	private get idle(): boolean {
		return this.everyone.size === 0 && this.bySubject.size === 0;
	}

	/** New events may be committed: read them (once at a time; a notice during a read reads again). */
	wake(): void {
		if (this.position === null || this.idle) return;
		if (this.reading) {
			this.readAgain = true;
			return;
		}
		this.reading = this.follow()
			.then(this.onFollowed, this.onError)
			.finally(() => (this.reading = null));
	}

	private async follow(): Promise<void> {
		do {
			this.readAgain = false;
			for (;;) {
				const { events } = await this.read({ after: this.position!, limit: this.pageSize });
				for (const event of events) {
					this.position = event.seq;
					this.onLive(event);
					for (const subscriber of this.everyone) this.handOver(subscriber, event);
					for (const subscriber of this.bySubject.get(event.subject) ?? []) this.handOver(subscriber, event);
				}
				if (events.length < this.pageSize) break;
			}
		} while (this.readAgain);
	}

	private handOver(subscriber: FeedSubscriber, event: StoredEvent): void {
		// It may have read past the shared position while catching up.
		if (event.seq <= subscriber.position) return;
		subscriber.position = event.seq;
		if (!subscriber.deliver(event)) this.leave(subscriber);
	}

	/**
	 * Delivers to `subscriber` every event after its position, then every new one, until it answers
	 * false or leaves. Catching up, it reads the log itself; it joins the shared reader once it has
	 * everything up to the reader's position (checked and joined in one synchronous step).
	 */
	async subscribe(subscriber: FeedSubscriber): Promise<void> {
		await this.head();
		let behindSince: number | null = null;
		for (let pages = 0; ; pages++) {
			const from = subscriber.position;
			// A record's first page is read at once; its later ones (a record whose events a Cranker's
			// lease rounds made many), the whole log's and a read asked again take turns.
			const takesTurns = subscriber.subject === undefined || pages > 0 || behindSince !== null;
			const page = await this.readBehind({ after: from, limit: this.pageSize, ...(subscriber.subject !== undefined ? { subject: subscriber.subject } : {}) }, subscriber, takesTurns);
			if (!page) return;
			const { events, through } = page;
			// The whole log has no hole in its numbers: one here is events pruned while this subscriber
			// caught up. It fails, so that its stream ends rather than skips them without a word.
			if (subscriber.subject === undefined && events.length && events[0].seq > from + 1) throw new Error(`The events after ${from} were pruned while the stream caught up`);
			for (const event of events) {
				subscriber.position = event.seq;
				if (!subscriber.deliver(event)) return;
			}
			await subscriber.drained();
			// Every event of the subject up to `through` was in the read: none is skipped. (Not the head
			// read before it: a read answered by a member behind it could miss some, a failover say.)
			subscriber.position = Math.max(subscriber.position, through);
			if (subscriber.position >= this.position!) {
				if (subscriber.subject === undefined) this.everyone.add(subscriber);
				else {
					let subscribers = this.bySubject.get(subscriber.subject);
					if (!subscribers) this.bySubject.set(subscriber.subject, (subscribers = new Set()));
					subscribers.add(subscriber);
				}
				return;
			}
			// Read from a member behind the shared position (a failover under way): wait before asking
			// again, for a while; then the stream fails, and its client resumes (with Last-Event-ID).
			if (subscriber.position !== from) behindSince = null;
			else if ((behindSince ??= Date.now()) + BEHIND_LIMIT_MS < Date.now()) throw new Error("The event log read stays behind the position this gateway follows");
			else await new Promise(resolve => setTimeout(resolve, BEHIND_RETRY_MS));
		}
	}

	/**
	 * A subscriber's own read. One that `takesTurns` (of the whole log, a record's page after its
	 * first, or one asked again after a read came back behind: a failover, when every stream asks
	 * again every BEHIND_RETRY_MS) is one of at most CATCH_UP_READS at once, each ending one handing
	 * its turn on; a record's first page, of its few events, is read at once. Null: the subscriber
	 * closed while it waited, and nothing was read.
	 */
	private async readBehind(query: Parameters<LogReader>[0], subscriber: FeedSubscriber, takesTurns: boolean): Promise<EventPage | null> {
		if (!takesTurns) return this.read(query);
		if (this.catchUpReads < CATCH_UP_READS) this.catchUpReads++;
		else if (!(await new Promise<boolean>(turn => this.waitingToCatchUp.push({ after: query.after, subscriber, turn })))) return null;
		try {
			return subscriber.closed?.() ? null : await this.read(query);
		} finally {
			this.handOnCatchUpTurn();
		}
	}

	/**
	 * The turn goes to the waiting subscriber nearest the shared position, which joins within a read
	 * or a few, so the queue shrinks. Served in order of arrival, each would fall behind again while
	 * all the others read, and under a busy log none might ever join. Those that closed while they
	 * waited leave the queue first, with no turn: however far behind, they hold nothing for long.
	 */
	private handOnCatchUpTurn(): void {
		const waiting = this.waitingToCatchUp;
		for (let i = waiting.length - 1; i >= 0; i--) if (waiting[i].subscriber.closed?.()) waiting.splice(i, 1)[0].turn(false);
		if (waiting.length === 0) {
			this.catchUpReads--;
			return;
		}
		let nearest = 0;
		for (let i = 1; i < waiting.length; i++) if (waiting[i].after > waiting[nearest].after) nearest = i;
		waiting.splice(nearest, 1)[0].turn(true);
	}

	leave(subscriber: FeedSubscriber): void {
		if (subscriber.subject === undefined) this.everyone.delete(subscriber);
		else {
			const subscribers = this.bySubject.get(subscriber.subject);
			subscribers?.delete(subscriber);
			if (subscribers?.size === 0) this.bySubject.delete(subscriber.subject);
		}
	}
}
