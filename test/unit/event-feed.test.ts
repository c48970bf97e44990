/**
 * lib/event-feed.ts: subscribers that join while the log grows, from any position, get every
 * event after it exactly once and in order, whether they caught up alone or through the shared
 * reader, and the shared reader reads once per notice however many subscribers there are.
 */
import { CATCH_UP_READS, StreamFeed, type FeedSubscriber } from "../../lib/event-feed";
import { eventPage, type EventPage, type StoredEvent } from "../../lib/store";

/** A read of `log` as a store answers it: the events after `after`, and how far the read saw. */
function pageOf(log: StoredEvent[], after: number, limit: number, subject?: string): EventPage {
	return eventPage(log.filter(e => e.seq > after && (subject === undefined || e.subject === subject)).slice(0, limit), { after, limit }, log.length);
}

/** An event log whose reads answer a turn later, so that appends and reads interleave. */
class Log {
	readonly events: StoredEvent[] = [];
	reads = 0;

	append(subject: string): void {
		this.events.push({ seq: this.events.length + 1, subject, type: "t", at: new Date().toISOString(), data: { n: this.events.length + 1 } });
	}

	read = async ({ after, subject, limit }: { after: number; subject?: string; limit: number }) => {
		this.reads++;
		// The log is read at once, and the answer takes a while to come back (as over the bus),
		// longer for some: the shared reader and a catching-up subscriber overtake each other.
		const page = pageOf(this.events, after, limit, subject);
		for (let turns = this.reads % 4; turns >= 0; turns--) await new Promise(resolve => setImmediate(resolve));
		return page;
	};

	latest = async () => this.events.length;
}

/** A log whose next read, once `holdNext` is set, is taken at once and answered only when `held` is called. */
class HeldLog {
	readonly events: StoredEvent[] = [];
	holdNext = false;
	held: (() => void) | null = null;

	append(): void {
		this.events.push({ seq: this.events.length + 1, subject: "a", type: "t", at: new Date().toISOString(), data: {} });
	}

	read = async ({ after, limit }: { after: number; limit: number }) => {
		const page = pageOf(this.events, after, limit);
		if (this.holdNext) {
			this.holdNext = false;
			await new Promise<void>(resolve => (this.held = resolve));
		}
		return page;
	};

	latest = async () => this.events.length;
}

/** A feed of `log`, in pages of `pageSize`, that fails the test on a read error. */
function feedOf(log: { read: Log["read"] | HeldLog["read"]; latest: () => Promise<number> }, pageSize = 10): StreamFeed {
	return new StreamFeed(
		log.read,
		log.latest,
		pageSize,
		err => {
			throw err;
		},
		() => {}
	);
}

/** A held log of 3 events, and a subscriber caught up with them through its feed. */
async function followedHeldLog() {
	const log = new HeldLog();
	const feed = feedOf(log);
	for (let i = 0; i < 3; i++) log.append();
	const live = collector(3);
	await feed.subscribe(live);
	return { log, feed, live };
}

function collector(position: number, subject?: string) {
	const received: number[] = [];
	const subscriber: FeedSubscriber & { received: number[] } = {
		subject,
		position,
		received,
		deliver: event => (received.push(event.seq), true),
		drained: () => Promise.resolve()
	};
	return subscriber;
}

const tick = () => new Promise(resolve => setImmediate(resolve));

/** Waits (a few seconds at most) until `done`, however slow the machine. */
async function until(done: () => boolean): Promise<void> {
	for (const deadline = Date.now() + 5000; !done() && Date.now() < deadline; ) await new Promise(resolve => setTimeout(resolve, 5));
}

describe("StreamFeed", () => {
	it("gives every subscriber each event after its position once, in order, while the log grows", async () => {
		const log = new Log();
		const feed = feedOf(log, 3);
		for (let i = 0; i < 5; i++) log.append(`s${i % 2}`);
		const subscribers = Array.from({ length: 60 }, (_, i) => collector(i % 7, i % 3 === 0 ? undefined : `s${i % 2}`));
		const starts = new Map(subscribers.map(s => [s, s.position]));
		const joins: Promise<void>[] = [];
		for (let round = 0; round < 120; round++) {
			log.append(`s${round % 2}`);
			if (round % 3 === 0) log.append("s0");
			feed.wake();
			// Each joins at another point, while the shared reader is reading.
			if (round % 2 === 0 && round / 2 < subscribers.length) joins.push(feed.subscribe(subscribers[round / 2]));
			await tick();
		}
		await Promise.all(joins);
		// The last events: read by the shared reader.
		const expected = (subscriber: ReturnType<typeof collector>) => log.events.filter(e => e.seq > starts.get(subscriber)! && (subscriber.subject === undefined || e.subject === subscriber.subject)).map(e => e.seq);
		feed.wake();
		await until(() => subscribers.every(subscriber => subscriber.received.length >= expected(subscriber).length));
		// Time for any duplicate to arrive too.
		await new Promise(resolve => setTimeout(resolve, 50));
		for (const subscriber of subscribers) expect(subscriber.received).toEqual(expected(subscriber));
	});

	/**
	 * Fifty subscribers resuming from the start of a log of 100 events of `subject` (ten pages each):
	 * the most reads at once among those `counted`, and whether each still got every event.
	 */
	async function catchUpsAtOnce(subject: string | undefined, counted: (query: Parameters<Log["read"]>[0]) => boolean) {
		const log = new Log();
		for (let i = 0; i < 100; i++) log.append(subject ?? "s");
		let inFlight = 0;
		let most = 0;
		const feed = feedOf({
			read: async (query: Parameters<Log["read"]>[0]) => {
				if (!counted(query)) return log.read(query);
				most = Math.max(most, ++inFlight);
				try {
					return await log.read(query);
				} finally {
					inFlight--;
				}
			},
			latest: log.latest
		});
		const subscribers = Array.from({ length: 50 }, () => collector(0, subject));
		await Promise.all(subscribers.map(subscriber => feed.subscribe(subscriber)));
		return { most, everyEvent: subscribers.every(subscriber => JSON.stringify(subscriber.received) === JSON.stringify(log.events.map(e => e.seq))) };
	}

	it("subscribers catching up read the log at most CATCH_UP_READS pages at a time however many they are, and each still gets every event", async () => {
		expect(await catchUpsAtOnce(undefined, () => true)).toEqual({ most: CATCH_UP_READS, everyEvent: true });
	});

	it("a record's first page is read at once, its later pages take turns: a record whose events a Cranker's lease rounds made many costs no more at once", async () => {
		// Every subscriber resumes from the start: a read after it is one of its later pages.
		expect(await catchUpsAtOnce("one-intent", query => query.after > 0)).toEqual({ most: CATCH_UP_READS, everyEvent: true });
	});

	it("subscribers catching up a log that grows as they read all join: the turn goes to the one nearest the shared position", async () => {
		const log = new Log();
		for (let i = 0; i < 50; i++) log.append("s");
		const live = collector(50);
		let catchUpReads = 0;
		let feed!: StreamFeed;
		// Each catch-up read (one from behind the live subscriber) sees one more event committed, as a
		// busy log does: served in order of arrival, twenty subscribers would each fall further
		// behind between two of their reads than a page takes them, for ever. Past 5,000 reads the log
		// stops growing, so that a test of that order still ends.
		const growing = {
			read: async (query: Parameters<Log["read"]>[0]) => {
				const page = await log.read(query);
				if (query.after < live.position && ++catchUpReads < 5000) {
					log.append("s");
					feed.wake();
				}
				return page;
			},
			latest: log.latest
		};
		feed = feedOf(growing);
		await feed.subscribe(live);
		const subscribers = Array.from({ length: 20 }, () => collector(0));
		await Promise.all(subscribers.map(subscriber => feed.subscribe(subscriber)));
		expect(catchUpReads).toBeLessThan(5000);
		feed.wake();
		await until(() => subscribers.every(subscriber => subscriber.received.length === log.events.length));
		for (const subscriber of subscribers) expect(subscriber.received).toEqual(log.events.map(e => e.seq));
	});

	it("a catch-up read whose subscriber closed while it waited for its turn is not made, and the turn goes on", async () => {
		const log = new Log();
		for (let i = 0; i < 30; i++) log.append("s");
		const reads: number[] = [];
		const feed = feedOf({ read: (query: Parameters<Log["read"]>[0]) => (reads.push(query.after), log.read(query)), latest: log.latest });
		// Last to ask, so it waits for a turn; closed, from a place no other subscriber reads from.
		const staying = [collector(0), collector(0), collector(0)];
		const gone = { ...collector(5), closed: () => true };
		await Promise.all([...staying, gone].map(subscriber => feed.subscribe(subscriber)));
		expect(reads).not.toContain(5);
		expect(gone.received).toEqual([]);
		for (const subscriber of staying) expect(subscriber.received).toEqual(log.events.map(e => e.seq));
	});

	it("a waiter whose stream closed leaves the queue at the next hand-off, with no turn, however far behind the others", async () => {
		const log = new Log();
		for (let i = 0; i < 30; i++) log.append("s");
		// Every read is held until the test lets it go.
		const held: (() => void)[] = [];
		const feed = feedOf({ read: async (query: Parameters<Log["read"]>[0]) => (await new Promise<void>(go => held.push(go)), log.read(query)), latest: log.latest });
		void feed.subscribe(collector(0));
		void feed.subscribe(collector(0));
		await until(() => held.length === CATCH_UP_READS);
		// Queued: one near the end, and one at the start whose stream then closes.
		void feed.subscribe(collector(20));
		let closed = false;
		let farLeft = false;
		void feed.subscribe({ ...collector(0), closed: () => closed }).then(() => (farLeft = true));
		await tick();
		expect(held).toHaveLength(CATCH_UP_READS);
		closed = true;
		// One read ends: the closed waiter leaves at once, and the near one reads (held too).
		held.shift()!();
		await until(() => farLeft && held.length === CATCH_UP_READS);
		expect(farLeft).toBe(true);
		for (const go of held.splice(0)) go();
	});

	it("a subscriber of the whole log that finds events before its next pruned fails, rather than skip them; one of a record's events does not", async () => {
		const log = new Log();
		for (let i = 0; i < 10; i++) log.append(i % 2 ? "a" : "b");
		// Events 1–4 pruned: what is kept starts at 5.
		const kept = { read: (query: Parameters<Log["read"]>[0]) => log.read(query).then(page => ({ ...page, events: page.events.filter(e => e.seq > 4) })), latest: log.latest };
		await expect(feedOf(kept).subscribe(collector(2))).rejects.toThrow(/pruned/);
		const fromKept = collector(4);
		await feedOf(kept).subscribe(fromKept);
		expect(fromKept.received).toEqual([5, 6, 7, 8, 9, 10]);
		// A record's events have gaps anyway (the other records' events lie between).
		const ofA = collector(2, "a");
		await feedOf(kept).subscribe(ofA);
		expect(ofA.received).toEqual([6, 8, 10]);
	});

	it("a subscriber whose catch-up read is overtaken by the shared reader reads again: nothing falls between", async () => {
		const { log, feed, live } = await followedHeldLog();
		// B's read sees events 1–3, and its answer is slow to come back…
		const late = collector(0);
		log.holdNext = true;
		const joined = feed.subscribe(late);
		await tick();
		expect(log.held).not.toBeNull();
		// …while 4 and 5 are committed and handed to the caught-up subscribers.
		log.append();
		log.append();
		feed.wake();
		await until(() => live.received.length === 2);
		expect(live.received).toEqual([4, 5]);
		log.held!();
		await joined;
		log.append();
		feed.wake();
		await until(() => late.received.length >= 6 && live.received.length >= 3);
		expect(late.received).toEqual([1, 2, 3, 4, 5, 6]);
		expect(live.received).toEqual([4, 5, 6]);
	});

	it("a subscriber that caught up past the shared reader's read in flight gets those events once", async () => {
		const { log, feed, live } = await followedHeldLog();
		// The shared reader reads 4 and 5, and its answer is slow to come back…
		log.append();
		log.append();
		log.holdNext = true;
		feed.wake();
		await tick();
		expect(log.held).not.toBeNull();
		// …while a new subscriber reads 1–5 itself and joins.
		const late = collector(0);
		await feed.subscribe(late);
		expect(late.received).toEqual([1, 2, 3, 4, 5]);
		log.held!();
		await until(() => live.received.length === 2);
		await tick();
		expect(live.received).toEqual([4, 5]);
		expect(late.received).toEqual([1, 2, 3, 4, 5]);
	});

	it("a subscriber whose catch-up read is answered by a member behind the head skips nothing (a MongoDB failover)", async () => {
		const log = new Log();
		for (let i = 0; i < 6; i++) log.append(i % 2 ? "b" : "a");
		// The head is read where the log has 6 events; the first catch-up reads, elsewhere, see only 3.
		let staleReads = 2;
		const read = log.read;
		log.read = async query => (staleReads-- > 0 ? pageOf(log.events.slice(0, 3), query.after, query.limit, query.subject) : read(query));
		const feed = feedOf(log);
		const late = collector(0, "a");
		await feed.subscribe(late);
		expect(late.received).toEqual([1, 3, 5]);
		log.append("a");
		feed.wake();
		await until(() => late.received.length === 4);
		expect(late.received).toEqual([1, 3, 5, 7]);
	});

	it("subscribers of one record each, whose reads come back behind the live position (a failover), ask again at most CATCH_UP_READS at a time", async () => {
		const log = new Log();
		for (let i = 0; i < 20; i++) log.append(`s${i}`);
		// Each subject's first two reads are answered by a member that has none of the events yet.
		const reads = new Map<string, number>();
		let againInFlight = 0;
		let mostAgain = 0;
		const feed = feedOf({
			read: async (query: Parameters<Log["read"]>[0]) => {
				const n = (reads.get(query.subject!) ?? 0) + 1;
				reads.set(query.subject!, n);
				if (n > 1) mostAgain = Math.max(mostAgain, ++againInFlight);
				await tick();
				if (n > 1) againInFlight--;
				return n <= 2 ? pageOf([], query.after, query.limit, query.subject) : log.read(query);
			},
			latest: log.latest
		});
		const subscribers = Array.from({ length: 20 }, (_, i) => collector(0, `s${i}`));
		await Promise.all(subscribers.map(subscriber => feed.subscribe(subscriber)));
		expect(mostAgain).toBe(CATCH_UP_READS);
		subscribers.forEach((subscriber, i) => expect(subscriber.received).toEqual([i + 1]));
	});

	it("a subscriber whose reads stay behind the shared position fails after 10 s, so that its stream ends and its client resumes", async () => {
		jest.useFakeTimers({ doNotFake: ["setImmediate", "nextTick"] });
		try {
			const log = new Log();
			for (let i = 0; i < 3; i++) log.append("a");
			// Every read is answered by a member that has only the first event (a restore, say).
			log.read = async query => pageOf(log.events.slice(0, 1), query.after, query.limit, query.subject);
			const outcome = feedOf(log).subscribe(collector(0)).then(
				() => "joined",
				(err: Error) => err.message
			);
			await jest.advanceTimersByTimeAsync(9_000);
			expect(await Promise.race([outcome, Promise.resolve("still reading")])).toBe("still reading");
			await jest.advanceTimersByTimeAsync(2_000);
			expect(await outcome).toMatch(/stays behind/);
		} finally {
			jest.useRealTimers();
		}
	});

	it("reads once per notice for any number of caught-up subscribers, and stops delivering to one that leaves", async () => {
		const log = new Log();
		const feed = feedOf(log);
		const subscribers = Array.from({ length: 100 }, () => collector(0));
		await Promise.all(subscribers.map(s => feed.subscribe(s)));
		log.reads = 0;
		log.append("a");
		log.append("b");
		feed.wake();
		await until(() => subscribers.every(s => s.received.length === 2));
		expect(log.reads).toBe(1);
		for (const subscriber of subscribers) expect(subscriber.received).toEqual([1, 2]);
		feed.leave(subscribers[0]);
		log.append("c");
		feed.wake();
		await until(() => subscribers[1].received.length === 3);
		expect(subscribers[0].received).toEqual([1, 2]);
		expect(subscribers[1].received).toEqual([1, 2, 3]);
	});

	it("once nobody follows the log, now is where the log ends, not where its last follower left it", async () => {
		const log = new Log();
		const feed = feedOf(log);
		const first = collector(await feed.head());
		await feed.subscribe(first);
		feed.leave(first);
		for (let i = 0; i < 500; i++) log.append("a");
		log.reads = 0;
		const now = await feed.head();
		expect(now).toBe(500);
		const next = collector(now);
		await feed.subscribe(next);
		log.append("b");
		feed.wake();
		await until(() => next.received.length === 1);
		expect(next.received).toEqual([501]);
		// One read to catch up, one by the shared reader: none through the 500 before.
		expect(log.reads).toBe(2);
	});

	it("once nobody follows the log, now is where the log ends even behind where its last follower left it (a restored backup)", async () => {
		const log = new Log();
		const feed = feedOf(log);
		for (let i = 0; i < 50; i++) log.append("a");
		const first = collector(await feed.head());
		await feed.subscribe(first);
		feed.leave(first);
		// Restored from a backup of 20 events: the next one is 21.
		log.events.length = 20;
		expect(await feed.head()).toBe(20);
		const next = collector(await feed.head());
		await feed.subscribe(next);
		log.append("b");
		feed.wake();
		await until(() => next.received.length === 1);
		expect(next.received).toEqual([21]);
	});

	it("drops a subscriber whose delivery answers false", async () => {
		const log = new Log();
		const feed = feedOf(log);
		const received: number[] = [];
		await feed.subscribe({ position: 0, deliver: event => (received.push(event.seq), false), drained: () => Promise.resolve() });
		log.append("a");
		log.append("b");
		feed.wake();
		await until(() => received.length >= 1);
		// Had it stayed, the second would follow in the same read.
		await tick();
		expect(received).toEqual([1]);
	});
});
