/**
 * Failed authentications per client in fixed one-minute windows (SPEC §10: worker routes answer
 * repeated failed authentication with 429). Memory is bounded: past `maxClients` the expired
 * windows go first, then the oldest.
 */
export class FailureThrottle {
	private readonly windows = new Map<string, { failures: number; resetAt: number }>();

	constructor(
		private readonly limit: number,
		private readonly windowMs = 60_000,
		private readonly maxClients = 10_000
	) {}

	/** How long `client` must wait before it may try again (ms); 0 when it may now. */
	retryAfterMs(client: string, nowMs: number): number {
		const window = this.windows.get(client);
		return window && window.resetAt > nowMs && window.failures >= this.limit ? window.resetAt - nowMs : 0;
	}

	fail(client: string, nowMs: number): void {
		let window = this.windows.get(client);
		if (!window || window.resetAt <= nowMs) {
			this.windows.delete(client);
			if (this.windows.size >= this.maxClients) this.evict(nowMs);
			window = { failures: 0, resetAt: nowMs + this.windowMs };
			this.windows.set(client, window);
		}
		window.failures++;
	}

	private evict(nowMs: number): void {
		for (const [client, window] of this.windows) if (window.resetAt <= nowMs) this.windows.delete(client);
		// Still full: drop the oldest windows (a Map iterates in insertion order).
		for (const client of this.windows.keys()) {
			if (this.windows.size < this.maxClients) break;
			this.windows.delete(client);
		}
	}
}
