/**
 * What to log of a task that runs again and again (a sweep, a read of an owner's log) while
 * something it needs is down: the first failure of a streak, then a reminder at most every
 * `remindEveryMs` with how many failed since (at once when the failure says something new), and
 * one line when it works again. An owner down for an hour would otherwise write 3,600 identical
 * warnings a second apart; the failures are still counted one by one in the metrics.
 */
export class FailureStreak {
	private failures = 0;
	private startedAt = 0;
	private toldAt = 0;
	private told = "";

	constructor(private readonly remindEveryMs = 60_000) {}

	/** A failure: the line to log, or null when the streak was told of less than `remindEveryMs` ago. */
	failed(message: string, nowMs = Date.now()): string | null {
		this.failures++;
		if (this.failures === 1) {
			this.startedAt = this.toldAt = nowMs;
			this.told = message;
			return message;
		}
		if (message === this.told && nowMs - this.toldAt < this.remindEveryMs) return null;
		this.toldAt = nowMs;
		this.told = message;
		return `${message} (still failing: ${this.failures} times in a row over ${seconds(nowMs - this.startedAt)})`;
	}

	/** A success: the line to log when it ends a streak, else null. */
	succeeded(nowMs = Date.now()): string | null {
		if (this.failures === 0) return null;
		const line = `works again after ${this.failures} failure${this.failures === 1 ? "" : "s"} over ${seconds(nowMs - this.startedAt)}`;
		this.failures = 0;
		return line;
	}
}

const seconds = (ms: number) => `${Math.round(ms / 1000)} s`;
