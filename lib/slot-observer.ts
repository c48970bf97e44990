/**
 * The latest chain slot the Node has observed (SPEC §1), polled with `getSlot` from the endpoints
 * of SOLANA_RPC_URL when it is set. Without one, or before the first agreed answer, it reports
 * null and only the time checks apply. The slot is the only guard on the `expiresAtSlot` a sender
 * signed (nothing on chain refuses a settlement past it), so no single endpoint may move it either
 * way once three or more are listed: see `agreedSlot`.
 */

/** An endpoint this far from the agreed slot (about a minute of slots) is named in a warning. */
export const SLOT_DISAGREEMENT_WARNING = 150;

/**
 * The slot the endpoints' answers (in SOLANA_RPC_URL's order, null for none) agree on, or null.
 * With three or more endpoints: the lower median of the answers, once more than half of the
 * endpoints answered. The median lies between honest answers while liars are fewer than half of
 * them, so one endpoint answering too high cannot expire every intent, nor one lagging hold the
 * guard open; of two answers it takes the lower, since a slot too high sticks (slots only move
 * forward) where one too low only waits. One or two endpoints cannot outvote each other: the
 * first is believed, as a single endpoint always was.
 */
export function agreedSlot(answers: readonly (number | null)[]): number | null {
	if (answers.length < 3) return answers[0] ?? null;
	const answered = answers.filter((answer): answer is number => answer !== null).sort((a, b) => a - b);
	if (answered.length * 2 <= answers.length) return null;
	return answered[Math.floor((answered.length - 1) / 2)]!;
}

export class SlotObserver {
	private slot: number | null = null;
	private timer: NodeJS.Timeout | null = null;
	private running = false;
	/** The conditions told to `onError` and still lasting, so each warns once, not every poll. */
	private readonly lasting = new Set<string>();

	constructor(
		private readonly rpcUrls: readonly string[],
		private readonly intervalMs: number,
		private readonly onError: (message: string) => void = () => {}
	) {}

	latest(): number | null {
		return this.slot;
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
		const answers = await Promise.all(this.rpcUrls.map((url, i) => this.slotFrom(url, i)));
		const agreed = agreedSlot(answers);
		this.warn("quorum", agreed === null && answers.length >= 3, () => `Half or fewer of the ${answers.length} endpoints of SOLANA_RPC_URL answer getSlot; the slot stays at ${this.slot} until more do`);
		if (agreed === null) return;
		answers.forEach((answer, i) => {
			const strays = answer !== null && Math.abs(answer - agreed) > SLOT_DISAGREEMENT_WARNING;
			this.warn(`strays ${i}`, strays, () => `SOLANA_RPC_URL entry ${i + 1} answers slot ${answer}, ${answer! - agreed} from the agreed ${agreed}`);
		});
		// Slots only move forward: lagging endpoints must not reopen expired intents.
		if (this.slot === null || agreed > this.slot) this.slot = agreed;
	}

	/** An endpoint's slot, or null when it fails or answers anything but a slot. */
	private async slotFrom(url: string, place: number): Promise<number | null> {
		let slot: number | null = null;
		let failure: string | null = null;
		try {
			const response = await fetch(url, {
				method: "POST",
				headers: { "content-type": "application/json" },
				body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "getSlot", params: [{ commitment: "confirmed" }] }),
				signal: AbortSignal.timeout(Math.max(1000, this.intervalMs))
			});
			const { result } = (await response.json()) as { result?: unknown };
			if (Number.isSafeInteger(result) && (result as number) >= 0) slot = result as number;
		} catch (err) {
			failure = (err as Error).message;
		}
		const name = this.rpcUrls.length > 1 ? `SOLANA_RPC_URL entry ${place + 1}` : "SOLANA_RPC_URL";
		this.warn(`fails ${place}`, failure !== null, () => `getSlot from ${name} failed: ${failure}`);
		return slot;
	}

	/** Tells `onError` when a condition starts, not on every poll while it lasts. */
	private warn(condition: string, holds: boolean, message: () => string): void {
		if (!holds) this.lasting.delete(condition);
		else if (!this.lasting.has(condition)) {
			this.lasting.add(condition);
			this.onError(message());
		}
	}
}
