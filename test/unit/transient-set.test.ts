import { spawnSync } from "node:child_process";
import { TransientSet } from "../../lib/transient-set";

test("holds what was added and not removed; a removal counts once, whatever its order", () => {
	const set = new TransientSet<string>();
	const remove = ["a", "b", "c", "d"].map(member => set.add(member));
	expect([...set].sort()).toEqual(["a", "b", "c", "d"]);
	remove[1]();
	remove[1]();
	expect([...set].sort()).toEqual(["a", "c", "d"]);
	// The first: the last entry takes its place, and can still be removed by its own function.
	remove[0]();
	remove[3]();
	expect([set.size, [...set]]).toEqual([1, ["c"]]);
	remove[2]();
	expect([set.size, [...set]]).toEqual([0, []]);
});

test("the same member twice is two entries, each removed by its own function", () => {
	const set = new TransientSet<string>();
	const first = set.add("x");
	set.add("x");
	first();
	expect([...set]).toEqual(["x"]);
});

test("a member removed while the set is iterated leaves the iteration whole", () => {
	const set = new TransientSet<number>();
	const removers = [1, 2, 3].map(member => set.add(member));
	const seen: number[] = [];
	for (const member of set) {
		seen.push(member);
		removers.forEach(remove => remove());
	}
	expect([seen, set.size]).toEqual([[1, 2, 3], 0]);
});

/**
 * What the set is for: members that come and go fast, amid garbage, as responses in flight do.
 * A child process runs the same churn through a Set and through a TransientSet, then reports how
 * much V8's young-generation collections moved to the old generation (--trace-gc-nvp's
 * `promoted`). The set starts in the old generation, as a service's long-lived set is (a full
 * collection first); each member lives for the next 10 of 6,000 rounds. A Set's discarded tables
 * keep removed members through young collections (see lib/transient-set.ts); a TransientSet does not.
 */
function promotedBytes(kind: "Set" | "TransientSet"): number {
	const script = `
		const { TransientSet } = require(${JSON.stringify(require.resolve("../../dist/lib/transient-set.js"))});
		const set = new ${kind}();
		const removers = [];
		globalThis.gc();
		for (let round = 0; round < 6000; round++) {
			const member = { parts: Array.from({ length: 40 }, (_, k) => ({ k, text: "part " + k + " of " + round })) };
			if (set instanceof Set) { set.add(member); removers.push(() => set.delete(member)); } else removers.push(set.add(member));
			if (removers.length > 10) removers.shift()();
			let garbage = [];
			for (let i = 0; i < 400; i++) garbage.push({ i, text: "garbage " + i });
		}`;
	// V8's defaults, whatever NODE_OPTIONS the tests run with.
	const run = spawnSync(process.execPath, ["--expose-gc", "--trace-gc-nvp", "-e", script], { encoding: "utf8", timeout: 60_000, env: { ...process.env, NODE_OPTIONS: "" } });
	expect([run.status, run.signal]).toEqual([0, null]);
	return [...run.stdout.matchAll(/ gc=s .* promoted=(\d+)/g)].reduce((sum, match) => sum + Number(match[1]), 0);
}

test("members removed from a TransientSet are not moved to the old generation, where a Set's are", () => {
	const bySet = promotedBytes("Set");
	const byTransientSet = promotedBytes("TransientSet");
	// Seen: 11.3 MB through a Set, 0.15 MB through a TransientSet (the young generation's first,
	// small collections).
	expect(bySet).toBeGreaterThan(2_000_000);
	expect(byTransientSet).toBeLessThan(bySet / 10);
});
