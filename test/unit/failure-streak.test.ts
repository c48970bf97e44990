/** lib/failure-streak.ts: a task failing again and again is told of once, then once a minute or when it says something new, then when it works again. */
import { ConditionStreaks, FailureStreak } from "../../lib/failure-streak";

test("the first failure is told, the next ones within a minute are not, then a reminder with the count and the span", () => {
	const streak = new FailureStreak(60_000);
	expect(streak.failed("sweep failed: owner down", 0)).toBe("sweep failed: owner down");
	for (let s = 1; s < 60; s++) expect(streak.failed("sweep failed: owner down", s * 1000)).toBeNull();
	expect(streak.failed("sweep failed: owner down", 60_000)).toBe("sweep failed: owner down (still failing: 61 times in a row over 60 s)");
	expect(streak.failed("sweep failed: owner down", 61_000)).toBeNull();
	expect(streak.succeeded(90_500)).toBe("works again after 62 failures over 91 s");
});

test("a failure that says something new is told at once, with the streak so far", () => {
	const streak = new FailureStreak(60_000);
	streak.failed("sweep failed: owner down", 0);
	expect(streak.failed("sweep failed: owner down", 1000)).toBeNull();
	expect(streak.failed("sweep failed: disk full", 2000)).toBe("sweep failed: disk full (still failing: 3 times in a row over 2 s)");
	expect(streak.failed("sweep failed: disk full", 3000)).toBeNull();
});

test("a success outside a streak says nothing; a new streak is told from its start", () => {
	const streak = new FailureStreak(60_000);
	expect(streak.succeeded(0)).toBeNull();
	streak.failed("a", 1000);
	expect(streak.succeeded(1500)).toBe("works again after 1 failure over 1 s");
	expect(streak.succeeded(2000)).toBeNull();
	expect(streak.failed("b", 3000)).toBe("b");
	expect(streak.failed("b", 4000)).toBeNull();
});

test("a task failing on and off is told once a minute with its count, not at every flap", () => {
	const streak = new FailureStreak(60_000);
	expect(streak.failed("owner down", 0)).toBe("owner down");
	expect(streak.succeeded(1000)).toBe("works again after 1 failure over 1 s");
	// Failing again for the same reason within the minute: neither the failure nor its end is told.
	const lines: (string | null)[] = [];
	for (let s = 2; s < 61; s += 2) lines.push(streak.failed("owner down", s * 1000), streak.succeeded(s * 1000 + 1000));
	expect(lines.filter(line => line !== null)).toEqual([]);
	// A minute after the last line: told, with the count since it, and then its end.
	expect(streak.failed("owner down", 61_000)).toBe("owner down (failing on and off: 31 times in 60 s)");
	expect(streak.succeeded(62_000)).toBe("works again after 1 failure over 1 s");
	// Something new is told at once.
	expect(streak.failed("disk full", 63_000)).toBe("disk full");
});

test("a quiet streak that goes on is told as a streak at the next reminder", () => {
	const streak = new FailureStreak(60_000);
	streak.failed("owner down", 0);
	streak.succeeded(1000);
	for (let s = 2; s < 61; s++) expect(streak.failed("owner down", s * 1000)).toBeNull();
	expect(streak.failed("owner down", 61_000)).toBe("owner down (still failing: 60 times in a row over 59 s)");
	expect(streak.succeeded(62_000)).toBe("works again after 60 failures over 60 s");
});

test("a streak long after a told one starts afresh: no count carried over from it", () => {
	const streak = new FailureStreak(60_000);
	streak.failed("owner down", 0);
	for (let s = 1; s < 5; s++) streak.failed("owner down", s * 1000);
	expect(streak.succeeded(5000)).toBe("works again after 5 failures over 5 s");
	expect(streak.failed("owner down", 3_605_000)).toBe("owner down");
});

describe("ConditionStreaks", () => {
	it("warns when a condition starts, not when only its detail changes, and tells its end at info, per condition", () => {
		const warn: string[] = [];
		const info: string[] = [];
		const conditions = new ConditionStreaks({ warn: line => void warn.push(line), info: line => void info.push(line) });
		conditions.report("entry 1", true, "failed", "TimeoutError");
		conditions.report("entry 1", true, "failed", "HTTP 429");
		conditions.report("entry 2", true, "failed", "TypeError");
		conditions.report("entry 1", false);
		conditions.report("entry 2", false);
		conditions.report("entry 2", false);
		expect(warn).toEqual(["entry 1 failed (TimeoutError)", "entry 2 failed (TypeError)"]);
		expect(info).toEqual([expect.stringMatching(/^entry 1 works again after 2 failures over \d+ s$/), expect.stringMatching(/^entry 2 works again after 1 failure over \d+ s$/)]);
	});
});
