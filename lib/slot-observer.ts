/**
 * The latest chain slot the Node has observed (SPEC §1): polled with `getSlot` from the first
 * endpoint of SOLANA_RPC_URL when it is set. Without one, or before the first answer, it reports
 * null and only the time checks apply. One endpoint, not all: the slot is the only guard on the
 * `expiresAtSlot` a sender signed (nothing on chain refuses a settlement past it), and no rule over
 * several endpoints holds both ways. The highest would let one endpoint expire every intent; the
 * lowest would let one hold the guard open.
 */
export class SlotObserver {
	private slot: number | null = null;
	private timer: NodeJS.Timeout | null = null;
	private running = false;
	private failing = false;

	constructor(
		private readonly rpcUrl: string | null,
		private readonly intervalMs: number,
		private readonly onError: (message: string) => void = () => {}
	) {}

	latest(): number | null {
		return this.slot;
	}

	async start(): Promise<void> {
		if (!this.rpcUrl) return;
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
		try {
			const response = await fetch(this.rpcUrl!, {
				method: "POST",
				headers: { "content-type": "application/json" },
				body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "getSlot", params: [{ commitment: "confirmed" }] }),
				signal: AbortSignal.timeout(Math.max(1000, this.intervalMs))
			});
			const body = (await response.json()) as { result?: unknown };
			// Slots only move forward: a lagging RPC node must not reopen expired intents.
			if (Number.isSafeInteger(body.result) && (this.slot === null || (body.result as number) > this.slot)) this.slot = body.result as number;
			this.failing = false;
		} catch (err) {
			// Reported once per outage, not on every poll.
			if (!this.failing) this.onError(`getSlot from SOLANA_RPC_URL failed: ${(err as Error).message}`);
			this.failing = true;
		}
	}
}
