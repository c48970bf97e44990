/**
 * The latest chain slot the Node has observed (SPEC §1): polled with `getSlot` from each RPC
 * endpoint of SOLANA_RPC_URL. Without one, or before the first answer, it reports null and only
 * the time checks apply. With several it reports the lowest slot among those that answered: a
 * slot expires intents, and one endpoint that runs ahead (or lies) must not expire them early.
 */
export class SlotObserver {
	/** Each endpoint's highest slot so far, null until it answered. */
	private readonly slots: (number | null)[];
	private readonly failing: boolean[];
	private timer: NodeJS.Timeout | null = null;
	private running = false;

	constructor(
		private readonly rpcUrls: readonly string[],
		private readonly intervalMs: number,
		private readonly onError: (message: string) => void = () => {}
	) {
		this.slots = rpcUrls.map(() => null);
		this.failing = rpcUrls.map(() => false);
	}

	latest(): number | null {
		const known = this.slots.filter(slot => slot !== null);
		return known.length ? Math.min(...known) : null;
	}

	async start(): Promise<void> {
		if (!this.rpcUrls.length) return;
		this.running = true;
		await this.poll();
		const schedule = () => {
			// stop() may have come while a poll was in flight (the first one included).
			if (!this.running) return;
			this.timer = setTimeout(() => void this.poll().finally(schedule), this.intervalMs);
			this.timer.unref();
		};
		schedule();
	}

	stop(): void {
		this.running = false;
		if (this.timer) clearTimeout(this.timer);
		this.timer = null;
	}

	private async poll(): Promise<void> {
		await Promise.all(this.rpcUrls.map((url, i) => this.pollOne(url, i)));
	}

	private async pollOne(url: string, i: number): Promise<void> {
		try {
			const response = await fetch(url, {
				method: "POST",
				headers: { "content-type": "application/json" },
				body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "getSlot", params: [{ commitment: "confirmed" }] }),
				signal: AbortSignal.timeout(Math.max(1000, this.intervalMs))
			});
			const body = (await response.json()) as { result?: unknown };
			const slot = this.slots[i];
			// Slots only move forward: a lagging RPC node must not reopen expired intents.
			if (Number.isSafeInteger(body.result) && (slot === null || (body.result as number) > slot)) this.slots[i] = body.result as number;
			this.failing[i] = false;
		} catch (err) {
			// Reported once per outage, not on every poll; the URL is not (it may carry an API key).
			const which = this.rpcUrls.length > 1 ? ` (entry ${i + 1})` : "";
			if (!this.failing[i]) this.onError(`getSlot from SOLANA_RPC_URL${which} failed: ${(err as Error).message}`);
			this.failing[i] = true;
		}
	}
}
