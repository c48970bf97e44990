/**
 * Items added during one event-loop turn, handled as one batch at its end: one call carries
 * them all, so a hop's fixed cost (a broker call, a bus message and its answer) is paid once per
 * batch instead of once per item. A batch holds at most `limits.items` items weighing at most
 * `limits.weight` together (an item heavier than that goes alone); the next item starts another.
 */
export class TurnBatch<I, O> {
	private items: I[] = [];
	private weight = 0;
	private waiters: { resolve(out: O): void; reject(err: unknown): void }[] = [];

	constructor(
		/** Answers every item of a batch, in order; a rejection fails every item of the batch. */
		private readonly handle: (items: I[]) => Promise<O[]>,
		private readonly limits: { items: number; weight: number }
	) {}

	add(item: I, weight = 0): Promise<O> {
		if (this.items.length && (this.items.length >= this.limits.items || this.weight + weight > this.limits.weight)) this.flush();
		if (!this.items.length) setImmediate(() => this.flush());
		this.weight += weight;
		return new Promise<O>((resolve, reject) => {
			this.items.push(item);
			this.waiters.push({ resolve, reject });
		});
	}

	private flush(): void {
		const { items, waiters } = this;
		if (!items.length) return;
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
