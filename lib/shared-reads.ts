/**
 * Reads that callers asking the same thing share: one in flight per key, and, when `keep` says
 * so, its answer kept for `keepMs` after it came (a landed transaction, say, which does not
 * change), so that a caller repeating a request does not repeat its reads: a Cranker sending the
 * same status report again and again, or many at once, would otherwise have the Node read every
 * RPC endpoint each time. A failed read is never kept. At most `maxKeys` answers are kept: past
 * it, those that lapsed go first, then all. Times are monotonic. Pure.
 */
export class SharedReads<T> {
	private readonly reads = new Map<string, { answer: Promise<T>; until: number }>();

	constructor(
		private readonly keepMs = 0,
		private readonly keep: (answer: T) => boolean = () => true,
		private readonly maxKeys = 10_000
	) {}

	/** `read()`'s answer for `key`: the one in flight or kept, else a new read. */
	get(key: string, read: () => Promise<T>): Promise<T> {
		const kept = this.reads.get(key);
		if (kept && kept.until > performance.now()) return kept.answer;
		if (this.reads.size >= this.maxKeys) this.makeRoom();
		const entry = { answer: read(), until: Infinity };
		this.reads.set(key, entry);
		// Never throws: it runs beside the caller's own handling, and a throw here would be unhandled.
		const settled = (answer?: T) => {
			let kept = false;
			try {
				kept = answer !== undefined && this.keepMs > 0 && this.keep(answer);
			} catch {
				// An answer `keep` cannot judge is not kept.
			}
			if (kept) entry.until = performance.now() + this.keepMs;
			else if (this.reads.get(key) === entry) this.reads.delete(key);
		};
		entry.answer.then(settled, () => settled());
		return entry.answer;
	}

	private makeRoom(): void {
		const now = performance.now();
		for (const [key, { until }] of this.reads) if (until <= now) this.reads.delete(key);
		if (this.reads.size >= this.maxKeys) this.reads.clear();
	}
}
