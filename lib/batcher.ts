/**
 * Items added within a window (`windowMs` after the first of a batch, or the rest of its
 * event-loop turn when 0), handled as one batch: one call carries them all, so a hop's fixed cost
 * (a broker call, a bus message and its answer, a worker thread's wake-up, a commit) is paid once
 * per batch instead of once per item. A batch holds at most `limits.items` items weighing at most
 * `limits.weight` together (an item heavier than that goes alone); the next item starts another.
 * A batch that reaches `limits.enough` items leaves at the end of that turn instead of waiting out
 * its window: the window is for moderate load, where few items come in each turn.
 */
export class Batcher<I, O> {
	private items: I[] = [];
	private weight = 0;
	/** The open batch's number and window: a batch handed over early leaves no window behind. */
	private batch = 0;
	private window: NodeJS.Timeout | undefined;
	private waiters: { resolve(out: O): void; reject(err: unknown): void }[] = [];

	constructor(
		/** Answers every item of a batch, in order; a rejection fails every item of the batch. */
		private readonly handle: (items: I[]) => Promise<O[]>,
		private readonly limits: { items: number; weight: number; windowMs: number; enough?: number }
	) {}

	add(item: I, weight = 0): Promise<O> {
		if (this.items.length && (this.items.length >= this.limits.items || this.weight + weight > this.limits.weight)) this.flush();
		if (!this.items.length) {
			const batch = ++this.batch;
			if (this.limits.windowMs > 0) this.window = setTimeout(() => this.flush(batch), this.limits.windowMs);
			else setImmediate(() => this.flush(batch));
		}
		this.weight += weight;
		if (this.items.length + 1 === this.limits.enough && this.limits.windowMs > 0) {
			const batch = this.batch;
			setImmediate(() => this.flush(batch));
		}
		return new Promise<O>((resolve, reject) => {
			this.items.push(item);
			this.waiters.push({ resolve, reject });
		});
	}

	private flush(batch = this.batch): void {
		const { items, waiters } = this;
		if (batch !== this.batch || !items.length) return;
		clearTimeout(this.window);
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
