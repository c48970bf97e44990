/**
 * Runs a periodic sweep while the service runs: never two at once, errors counted
 * (scs_sweep_failures_total) and logged rather than thrown, and a sweep in progress finishes before
 * the service stops. A sweep failing again and again (an owner it calls is down) is logged when it
 * starts failing, once a minute while it goes on, and when it works again (lib/failure-streak.ts).
 */
import type { Service, ServiceSchema } from "moleculer";
import { FailureStreak } from "../lib/failure-streak";
import { sweepFailureMetrics } from "../services/metrics";

/** `sweep` runs as the service (`this`). */
export function sweeperMixin<S = Service>(name: string, intervalMs: number, sweep: (this: S) => Promise<unknown>): Partial<ServiceSchema> {
	let timer: NodeJS.Timeout | null = null;
	let running: Promise<unknown> = Promise.resolve();
	let stopping = false;
	return {
		started(this: Service) {
			stopping = false;
			const failures = sweepFailureMetrics(this.broker);
			const sweepLabel = { sweep: name.replace(/ /g, "-") };
			// Present from the start at 0, so that rate() sees the first failure.
			failures.inc(sweepLabel, 0);
			const streak = new FailureStreak();
			const tick = () => {
				running = sweep.call(this as unknown as S)
					.then(
						() => {
							const recovered = streak.succeeded();
							if (recovered) this.logger.info(`${name} sweep ${recovered}`);
						},
						err => {
							failures.inc(sweepLabel);
							const line = streak.failed(`${name} sweep failed: ${(err as Error).message}`);
							if (line) this.logger.warn(line);
						}
					)
					.finally(() => {
						if (!stopping) timer = setTimeout(tick, intervalMs);
					});
			};
			timer = setTimeout(tick, intervalMs);
		},
		async stopped() {
			stopping = true;
			if (timer) clearTimeout(timer);
			await running;
		}
	};
}
