/**
 * When an open batch closes: `windowMs` after its first item, or at the end of the event-loop
 * turn it reached `enough` items in (the window is for moderate load, where few items come in
 * each turn), or at the end of its first turn when `windowMs` is 0. The intake's Batcher and
 * SQLite's group commit both batch by it. The owner closes a batch itself too (a full one, a
 * commit on close) and says so with `closed()`: its timer goes, and a closing scheduled for one
 * batch never closes the next.
 */
export class BatchWindow {
	/** Whether a batch is open. */
	open = false;
	/** The open batch's number, items and timer. */
	private batch = 0;
	private items = 0;
	private timer: NodeJS.Timeout | undefined;

	constructor(
		private readonly windowMs: number,
		private readonly enough: number,
		private readonly close: () => void
	) {}

	/** One more item in the open batch; the first opens one. */
	add(): void {
		if (!this.open) {
			this.open = true;
			this.items = 0;
			const batch = ++this.batch;
			if (this.windowMs > 0) this.timer = setTimeout(() => this.closeIfOpen(batch), this.windowMs);
			else setImmediate(() => this.closeIfOpen(batch));
		}
		if (++this.items === this.enough && this.windowMs > 0) {
			const batch = this.batch;
			setImmediate(() => this.closeIfOpen(batch));
		}
	}

	/** The owner closed the open batch. */
	closed(): void {
		this.open = false;
		clearTimeout(this.timer);
	}

	private closeIfOpen(batch: number): void {
		if (this.open && this.batch === batch) this.close();
	}
}

/**
 * Items added within one BatchWindow, handled as one batch: one call carries them all, so a hop's
 * fixed cost (a broker call, a bus message and its answer, a worker thread's wake-up, a commit) is
 * paid once per batch instead of once per item. A batch holds at most `limits.items` items
 * weighing at most `limits.weight` together (an item heavier than that goes alone); the next item
 * starts another. One that reaches `limits.enough` items leaves at the end of that turn.
 */
export class Batcher<I, O> {
	private items: I[] = [];
	private weight = 0;
	private waiters: { resolve(out: O): void; reject(err: unknown): void }[] = [];
	private readonly window: BatchWindow;

	constructor(
		/** Answers every item of a batch, in order; a rejection fails every item of the batch. */
		private readonly handle: (items: I[]) => Promise<O[]>,
		private readonly limits: { items: number; weight: number; windowMs: number; enough?: number }
	) {
		this.window = new BatchWindow(limits.windowMs, limits.enough ?? Infinity, () => this.flush());
	}

	add(item: I, weight = 0): Promise<O> {
		if (this.items.length && (this.items.length >= this.limits.items || this.weight + weight > this.limits.weight)) this.flush();
		this.window.add();
		this.weight += weight;
		return new Promise<O>((resolve, reject) => {
			this.items.push(item);
			this.waiters.push({ resolve, reject });
		});
	}

	private flush(): void {
		const { items, waiters } = this;
		this.window.closed();
		this.items = [];
		this.waiters = [];
		this.weight = 0;
		let answered: Promise<O[]>;
		try {
			answered = this.handle(items);
		} catch (err) {
			answered = Promise.reject(err);
		}
		answered.then(
			outs => waiters.forEach((waiter, i) => (i < outs.length ? waiter.resolve(outs[i]) : waiter.reject(new Error("a batch was answered short")))),
			err => waiters.forEach(waiter => waiter.reject(err))
		);
	}
}
