/**
 * Identifiers the service creates (SPEC §0: opaque and unguessable): a prefix, then the 32 hex
 * digits of a UUIDv7 (RFC 9562 §5.7): 48 bits of Unix time in milliseconds, then 74 random bits.
 * Time first, so that new records go at the end of every index on their id instead of at random
 * places in it: an intent's insert dirtied one more page per index, and cost about a quarter
 * more, with random ids. 74 bits from the CSPRNG keep an id unguessable, and the time it shows
 * is the record's own `createdAt`, which its views show anyway.
 */
import { randomFillSync } from "node:crypto";

/** Random bytes drawn in blocks: one CSPRNG call per id cost more than the rest of the id. */
const pool = Buffer.alloc(4096);
let taken = pool.length;

function randomBytes10(): Buffer {
	if (taken + 10 > pool.length) {
		randomFillSync(pool);
		taken = 0;
	}
	taken += 10;
	return pool.subarray(taken - 10, taken);
}

/** `<prefix>_` and a UUIDv7's 32 hex digits, at `nowMs`. */
export function newId(prefix: string, nowMs = Date.now()): string {
	const bytes = Buffer.allocUnsafe(16);
	bytes.writeUIntBE(nowMs, 0, 6);
	randomBytes10().copy(bytes, 6);
	bytes[6] = 0x70 | (bytes[6] & 0x0f); // version 7
	bytes[8] = 0x80 | (bytes[8] & 0x3f); // variant 0b10
	return `${prefix}_${bytes.toString("hex")}`;
}
