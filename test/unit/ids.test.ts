import { newId } from "../../lib/ids";

test("an id is the prefix and a UUIDv7's 32 hex digits: the time in milliseconds first, then 74 random bits", () => {
	const at = Date.UTC(2026, 10, 25, 20, 0, 0, 123);
	const id = newId("int", at);
	expect(id).toMatch(/^int_[0-9a-f]{12}7[0-9a-f]{3}[89ab][0-9a-f]{15}$/);
	expect(parseInt(id.slice(4, 16), 16)).toBe(at);
});

test("ids sort by their time, and none repeats", () => {
	const ids = Array.from({ length: 100_000 }, (_, i) => newId("top", 1_700_000_000_000 + Math.floor(i / 1000)));
	expect(new Set(ids).size).toBe(ids.length);
	const times = ids.map(id => id.slice(4, 16));
	expect([...times].sort()).toStrictEqual(times);
	// The random part: every hex digit takes every value across ids of one millisecond.
	const sameMs = ids.slice(0, 1000).map(id => id.slice(-15));
	for (let position = 0; position < 15; position++) expect(new Set(sameMs.map(r => r[position])).size).toBe(16);
});
