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

/** `commitments` are lowercase hex, already in leaf order. */
export function merkleRoot(commitments: readonly string[]): string {
	if (!commitments.length) return EMPTY_ROOT;
	let level: Buffer[] = commitments.map(hex => sha256(LEAF, Buffer.from(hex, "hex")));
	while (level.length > 1) {
		const next: Buffer[] = [];
		for (let i = 0; i + 1 < level.length; i += 2) next.push(sha256(NODE, level[i], level[i + 1]));
		if (level.length % 2 === 1) next.push(level[level.length - 1]);
		level = next;
	}
	return level[0].toString("hex");
}

/** String order of `id`, as SPEC §8 sorts leaves (not locale order). */
export function byId<T extends { id: string }>(a: T, b: T): number {
	return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}
