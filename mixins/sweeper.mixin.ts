/**
 * Runs a periodic sweep while the service runs: never two at once, errors logged rather than
 * thrown, and a sweep in progress finishes before the service stops.
 */
import type { Service, ServiceSchema } from "moleculer";

export function sweeperMixin(name: string, intervalMs: number, sweep: () => Promise<unknown>): Partial<ServiceSchema> {
	let timer: NodeJS.Timeout | null = null;
	let running: Promise<unknown> = Promise.resolve();
	let stopping = false;
	return {
		started(this: Service) {
			stopping = false;
			const tick = () => {
				running = sweep()
					.catch(err => this.logger.warn(`${name} sweep failed: ${(err as Error).message}`))
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
