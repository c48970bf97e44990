/**
 * A set for members that come and go by the thousand a second (the responses in flight), kept in
 * an array instead of a Set or a Map. A V8 hash table it outgrew keeps its entries; in the old
 * generation, such a discarded table held the young members it still had through the
 * young-generation collections, which then moved them, and all they point to, to the old
 * generation: under load, most of every request (docs/performance.md, "Garbage collection"). An array drops a
 * removed member's reference at once. Pure.
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

	/** The members as they were when the iteration began: removing one meanwhile changes nothing. */
	*[Symbol.iterator](): Iterator<T> {
		for (const { member } of [...this.entries]) yield member;
	}
}
