/**
 * The epoch Merkle root of SPEC §8: leaves are the executed intents' transactionCommitments in
 * `id` order; leaf = SHA-256(0x00 ‖ 32 commitment bytes), node = SHA-256(0x01 ‖ left ‖ right); a
 * level with an odd count carries its last node up unchanged; no leaves → 64 zeros.
 */
import { createHash } from "node:crypto";

export const EMPTY_ROOT = "0".repeat(64);
const LEAF = Buffer.from([0x00]);
const NODE = Buffer.from([0x01]);

const sha256 = (...parts: Buffer[]) => createHash("sha256").update(Buffer.concat(parts)).digest();

/**
 * The root built leaf by leaf, in leaf order, holding one subtree per level at most: an epoch of
 * millions of leaves is read in pages, never held whole.
 */
export class MerkleRootBuilder {
	/** The complete subtrees so far, of strictly decreasing height (the binary digits of the count). */
	private readonly subtrees: { height: number; hash: Buffer }[] = [];

	/** `commitment`: lowercase hex, the next leaf. */
	push(commitment: string): void {
		let node = { height: 0, hash: sha256(LEAF, Buffer.from(commitment, "hex")) };
		for (let last = this.subtrees.at(-1); last && last.height === node.height; last = this.subtrees.at(-1)) {
			this.subtrees.pop();
			node = { height: node.height + 1, hash: sha256(NODE, last.hash, node.hash) };
		}
		this.subtrees.push(node);
	}

	/**
	 * The subtrees joined from the right: a level's odd last node, carried up unchanged, meets the
	 * next larger subtree exactly where the level-by-level construction pairs it.
	 */
	root(): string {
		if (!this.subtrees.length) return EMPTY_ROOT;
		let hash = this.subtrees[this.subtrees.length - 1].hash;
		for (let i = this.subtrees.length - 2; i >= 0; i--) hash = sha256(NODE, this.subtrees[i].hash, hash);
		return hash.toString("hex");
	}
}

/** `commitments` are lowercase hex, already in leaf order. */
export function merkleRoot(commitments: readonly string[]): string {
	const builder = new MerkleRootBuilder();
	for (const commitment of commitments) builder.push(commitment);
	return builder.root();
}

/** String order of `id`, as SPEC §8 sorts leaves (not locale order). */
export function byId<T extends { id: string }>(a: T, b: T): number {
	return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}
