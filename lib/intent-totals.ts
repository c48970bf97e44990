/**
 * Running totals of the intents a mempool holds, so the observation routes answer from counters
 * instead of scanning every record on each request. Each stored change is applied as "remove the
 * old record's contribution, add the new one's", which keeps every kind of change (insert,
 * transition, archiving) right with one rule.
 */
import { INTENT_STATES, type IntentRecord, type IntentState } from "./intents";

export interface TotalsSnapshot {
	/** Live (not archived) intents per state. */
	live: Record<IntentState, number>;
	/** Executed amount per mint of the live CONFIRMED intents: what the next epoch close archives. */
	liveVolume: Record<string, string>;
	/** Every CONFIRMED intent, archived ones included. */
	settled: { count: number; volume: Record<string, string> };
}

export class IntentTotals {
	private readonly live = new Map<IntentState, number>(INTENT_STATES.map(state => [state, 0]));
	private readonly liveVolume = new Map<string, bigint>();
	private settledCount = 0;
	private readonly settledVolume = new Map<string, bigint>();

	/** Accounts for a stored change: `before` is what was replaced (null for an insert). */
	apply(before: IntentRecord | null, after: IntentRecord | null): void {
		if (before) this.add(before, -1);
		if (after) this.add(after, 1);
	}

	snapshot(): TotalsSnapshot {
		const amounts = (map: Map<string, bigint>) => Object.fromEntries([...map].filter(([, total]) => total !== 0n).map(([mint, total]) => [mint, total.toString()]));
		return {
			live: Object.fromEntries(this.live) as Record<IntentState, number>,
			liveVolume: amounts(this.liveVolume),
			settled: { count: this.settledCount, volume: amounts(this.settledVolume) }
		};
	}

	private add(record: IntentRecord, sign: 1 | -1): void {
		const live = record.archivedIn === undefined || record.archivedIn === null;
		if (live) this.live.set(record.state, (this.live.get(record.state) ?? 0) + sign);
		if (record.state !== "CONFIRMED") return;
		const { tokenMintAddress: mint, amount } = record.request;
		const delta = BigInt(amount) * BigInt(sign);
		this.settledCount += sign;
		this.settledVolume.set(mint, (this.settledVolume.get(mint) ?? 0n) + delta);
		if (live) this.liveVolume.set(mint, (this.liveVolume.get(mint) ?? 0n) + delta);
	}
}
