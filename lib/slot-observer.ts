/**
 * The latest chain slot the Node has observed (SPEC §1), polled with `getSlot` from the endpoints
 * of SOLANA_RPC_URL when it is set. Without one, or before the first agreed answer, it reports
 * null and only the time checks apply. The slot is the only guard on the `expiresAtSlot` a sender
 * signed (nothing on chain refuses a settlement past it), so no single endpoint may move it either
 * way once three or more are listed: see `agreedSlot`. Nor may another cluster's: an endpoint's
 * answer counts only while it is on the named one (`onCluster`).
 */

import { ChainReader, readFailure } from "./chain";
import { ConditionStreaks, type ConditionLog } from "./failure-streak";

/** An endpoint this far from the agreed slot (about a minute of slots) is named in a warning. */
export const SLOT_DISAGREEMENT_WARNING = 150;

/**
 * The slot the endpoints' answers (in SOLANA_RPC_URL's order, null for none or one not fresh) agree on, or null.
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
	/** The endpoints polled: every one with three or more, the first alone with one or two (only its answer counts). */
	private readonly polled: readonly ChainReader[];
	/** Each polled endpoint's latest slot and when it came; null after a failure. */
	private readonly answers: ({ slot: number; atMs: number } | null)[];
	private readonly timers: (NodeJS.Timeout | undefined)[] = [];
	/** An answer older than this counts as none: a working endpoint answers within an interval and a timeout. */
	private readonly freshMs: number;
	/** Each start() and stop() begins a new run; only the polls of the current start's run schedule more. */
	private run = 0;
	/** Set once every endpoint's first answer is in: no agreement is judged on the first few alone. */
	private started = false;
	/** What goes wrong, told when it starts, as reminders while it lasts, and when it ends. */
	private readonly conditions: ConditionStreaks;

	constructor(
		rpcUrls: readonly string[],
		private readonly intervalMs: number,
		log: ConditionLog = { warn() {}, info() {} },
		/** Which endpoints, in SOLANA_RPC_URL's order, are on the named cluster (NodeChain.endpointsOnCluster): the others' answers count as none. */
		private readonly onCluster: () => readonly boolean[] = () => rpcUrls.map(() => true)
	) {
		this.conditions = new ConditionStreaks(log);
		const timeoutMs = Math.max(1000, intervalMs);
		this.polled = (rpcUrls.length < 3 ? rpcUrls.slice(0, 1) : rpcUrls).map(url => new ChainReader(url, timeoutMs));
		this.answers = this.polled.map(() => null);
		this.freshMs = 2 * intervalMs + timeoutMs;
	}

	latest(): number | null {
		return this.slot;
	}

	/** Resolves once every endpoint answered (or failed) once. */
	async start(): Promise<void> {
		if (!this.polled.length) return;
		const run = ++this.run;
		await Promise.all(this.polled.map((_, i) => this.poll(i)));
		// stop() came meanwhile: this run is over.
		if (run !== this.run) return;
		this.started = true;
		this.agree();
		this.polled.forEach((_, i) => this.schedule(i, run));
	}

	stop(): void {
		this.run++;
		this.started = false;
		for (const timer of this.timers) clearTimeout(timer);
	}

	private schedule(i: number, run: number): void {
		// stop() may have come while a poll was in flight, and a start() after it: a poll of an
		// earlier run schedules no other, or each endpoint would be polled twice.
		if (run !== this.run) return;
		this.timers[i] = setTimeout(() => void this.poll(i).finally(() => this.schedule(i, run)), this.intervalMs);
		this.timers[i].unref();
	}

	private async poll(i: number): Promise<void> {
		const slot = await this.slotFrom(i);
		this.answers[i] = slot === null ? null : { slot, atMs: performance.now() };
		if (this.started) this.agree();
	}

	private agree(): void {
		const freshSince = performance.now() - this.freshMs;
		// Another cluster's slot says nothing of this one's (the cluster's own warning tells it).
		const onCluster = this.onCluster();
		const answers = this.answers.map((answer, i) => (answer && answer.atMs >= freshSince && onCluster[i] ? answer.slot : null));
		const agreed = agreedSlot(answers);
		this.conditions.report("getSlot over SOLANA_RPC_URL", agreed === null && answers.length >= 3, `is answered by half or fewer of its ${answers.length} endpoints; the slot stays where it is until more answer`, `at ${this.slot}`);
		if (agreed === null) return;
		answers.forEach((answer, i) => {
			// One that did not answer is told as failing, not as back in line.
			if (answer === null) return;
			const strays = Math.abs(answer - agreed) > SLOT_DISAGREEMENT_WARNING;
			this.conditions.report(`The slot of SOLANA_RPC_URL entry ${i + 1}`, strays, `is more than ${SLOT_DISAGREEMENT_WARNING} from the agreed one`, `${answer} against ${agreed}`);
		});
		// Slots only move forward: lagging endpoints must not reopen expired intents.
		if (this.slot === null || agreed > this.slot) this.slot = agreed;
	}

	/** An endpoint's slot, or null when it fails or answers anything but a slot (told in fixed words: its own are not logged). */
	private async slotFrom(place: number): Promise<number | null> {
		let failure: string | null = null;
		let slot = 0;
		try {
			slot = Number(await this.polled[place]!.slot());
			if (!Number.isSafeInteger(slot)) failure = "no slot in the answer";
		} catch (err) {
			failure = readFailure(err);
		}
		const name = this.polled.length > 1 ? `SOLANA_RPC_URL entry ${place + 1}` : "SOLANA_RPC_URL";
		this.conditions.report(`getSlot from ${name}`, failure !== null, "failed", failure ?? "");
		return failure === null ? slot : null;
	}
}
