/** Failed authentications per client (lib/auth-throttle.ts): SPEC §10's 429 for worker routes. */
import { FailureThrottle } from "../../lib/auth-throttle";

describe("FailureThrottle", () => {
	it("lets a client fail `limit` times, then makes it wait until its window ends", () => {
		const throttle = new FailureThrottle(3, 60_000);
		for (let i = 0; i < 3; i++) {
			expect(throttle.retryAfterMs("a", 1000)).toBe(0);
			throttle.fail("a", 1000);
		}
		expect(throttle.retryAfterMs("a", 1000)).toBe(60_000);
		expect(throttle.retryAfterMs("a", 31_000)).toBe(30_000);
		expect(throttle.retryAfterMs("b", 31_000)).toBe(0);
		expect(throttle.retryAfterMs("a", 61_000)).toBe(0);
		// A new window starts from zero.
		throttle.fail("a", 61_000);
		expect(throttle.retryAfterMs("a", 61_000)).toBe(0);
	});

	it("holds at most maxClients windows: expired ones go first, then the oldest", () => {
		const throttle = new FailureThrottle(1, 1000, 3);
		throttle.fail("old", 0);
		throttle.fail("a", 500);
		throttle.fail("b", 600);
		throttle.fail("c", 1200); // "old" has expired: evicted first
		expect(throttle.retryAfterMs("a", 1200)).toBe(300);
		throttle.fail("d", 1300); // full of live windows: the oldest ("a") goes
		expect(throttle.retryAfterMs("a", 1300)).toBe(0);
		expect(throttle.retryAfterMs("b", 1300)).toBe(300);
		expect(throttle.retryAfterMs("d", 1300)).toBe(1000);
	});
});
