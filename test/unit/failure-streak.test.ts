/** lib/failure-streak.ts: a task failing again and again is told of once, then once a minute or when it says something new, then when it works again. */
import { FailureStreak } from "../../lib/failure-streak";

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
