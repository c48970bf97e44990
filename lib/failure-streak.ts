/**
 * What to log of a task that runs again and again (a sweep, a read of an owner's log) while
 * something it needs is down: the first failure of a streak, then a reminder at most every
 * `remindEveryMs` with how many failed since (at once when the failure says something new), and
 * one line when it works again. A streak of the same failure within `remindEveryMs` of the last
 * line is told with the next reminder. An owner down for an hour would otherwise write 3,600
 * identical warnings a second apart, and one that fails every other second a line a second; the
 * failures are still counted one by one in the metrics. Times are monotonic: a wall clock set
 * back would silence it.
 */
export class FailureStreak {
	/** Failures since the last success. */
	private inRow = 0;
	/** Failures since the last line told. */
	private sinceTold = 0;
	private startedAt = 0;
	private toldAt = -Infinity;
	/** The failure last told. */
	private told = "";
	/** The running streak was told, so its end is told too. */
	private streakTold = false;

	constructor(private readonly remindEveryMs = 60_000) {}

	/**
	 * A failure: the line to log, or null when the same failure was told less than `remindEveryMs`
	 * ago. That includes a streak that starts soon after the last one was told to have ended: a
	 * task failing on and off is told once per `remindEveryMs`, with its count, not twice per flap.
	 */
	failed(message: string, nowMs = performance.now()): string | null {
		if (++this.inRow === 1) this.startedAt = nowMs;
		this.sinceTold++;
		if (message === this.told && nowMs - this.toldAt < this.remindEveryMs) return null;
		let line = message;
		if (this.inRow >= this.sinceTold && this.inRow > 1) line = `${message} (still failing: ${this.inRow} times in a row over ${seconds(nowMs - this.startedAt)})`;
		else if (this.inRow < this.sinceTold) line = `${message} (failing on and off: ${this.sinceTold} times in ${seconds(nowMs - this.toldAt)})`;
		this.toldAt = nowMs;
		this.told = message;
		this.sinceTold = 0;
		this.streakTold = true;
		return line;
	}

	/** A success: the line to log when it ends a streak that was told, else null. */
	succeeded(nowMs = performance.now()): string | null {
		if (this.inRow === 0) return null;
		const line = this.streakTold ? `works again after ${this.inRow} failure${this.inRow === 1 ? "" : "s"} over ${seconds(nowMs - this.startedAt)}` : null;
		this.inRow = 0;
		this.streakTold = false;
		if (line) {
			this.toldAt = nowMs;
			this.sinceTold = 0;
		}
		return line;
	}
}

const seconds = (ms: number) => `${Math.round(ms / 1000)} s`;

/** Where ConditionStreaks tells: a condition's start and reminders as warnings, its end as news. */
export interface ConditionLog {
	warn(line: string): void;
	info(line: string): void;
}

/**
 * A FailureStreak per condition that holds or not at each look (an endpoint failing, another one
 * straying), told as `${condition} ${what}`: when it starts, as reminders, and when it ends. Keep
 * the conditions a bounded set, and `what` the same while nothing new happens; what changes at
 * every look (a slot, an error's name) goes in `detail`, shown but not compared, so that a
 * condition whose detail flaps is still told once a minute at most.
 */
export class ConditionStreaks {
	private readonly streaks = new Map<string, FailureStreak>();

	constructor(private readonly log: ConditionLog) {}

	report(condition: string, holds: boolean, what = "", detail = ""): void {
		let streak = this.streaks.get(condition);
		if (!holds) {
			const ended = streak?.succeeded();
			if (ended) this.log.info(`${condition} ${ended}`);
			return;
		}
		if (!streak) this.streaks.set(condition, (streak = new FailureStreak()));
		const line = streak.failed(what);
		if (line) this.log.warn(`${condition} ${line}${detail && ` (${detail})`}`);
	}
}
