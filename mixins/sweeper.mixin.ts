/**
 * Runs a periodic sweep while the service runs: never two at once, errors logged and counted
 * (scs_sweep_failures_total) rather than thrown, and a sweep in progress finishes before the
 * service stops.
 */
import type { Service, ServiceSchema } from "moleculer";
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
			const tick = () => {
				running = sweep.call(this as unknown as S)
					.catch(err => {
						failures.inc(sweepLabel);
						this.logger.warn(`${name} sweep failed: ${(err as Error).message}`);
					})
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
