/**
 * A set for members that come and go by the thousand a second (the responses in flight), kept in
 * an array instead of a Set or a Map. V8's hash tables keep the entries of a table they outgrew;
 * with members added and removed at that rate, such a discarded table, once in the old generation,
 * held every young member it had through the young-generation collections, which then moved them,
 * and all they point to, to the old generation: under load, most of every request (README,
 * "Garbage collection"). An array drops a removed member's reference at once. Pure.
 */
export class TransientSet<T> implements Iterable<T> {
	private readonly entries: { member: T; index: number }[] = [];

	get size(): number {
		return this.entries.length;
	}

	/** Adds `member`; the function returned removes it (once; later calls do nothing). */
	add(member: T): () => void {
		const entry = { member, index: this.entries.length };
		this.entries.push(entry);
		return () => {
			if (entry.index < 0) return;
			// The last entry takes the removed one's place: O(1), and the array holds no gap.
			const last = this.entries.pop()!;
			if (last !== entry) {
				this.entries[entry.index] = last;
				last.index = entry.index;
			}
			entry.index = -1;
		};
	}

	*[Symbol.iterator](): Iterator<T> {
		for (const { member } of [...this.entries]) yield member;
	}
}
