/**
 * The figures the observation routes report about intents (SPEC §8), kept by the store as a tally
 * of the intents collection: each record contributes what `intentTally` gives for it, and the store
 * updates the sums in the same atomic write as the record. So every replica reads the same figures
 * from the store, in time independent of how many intents there are.
 */
import { INTENT_STATES, type IntentRecord, type IntentState } from "./intents";

export interface TotalsSnapshot {
	/** Live (not archived) intents per state. */
	live: Record<IntentState, number>;
	/** Executed amount per mint of the live CONFIRMED intents: what the next epoch close archives. */
	liveVolume: Record<string, string>;
	/** Every CONFIRMED intent, archived ones included. */
	settled: { count: number; volume: Record<string, string> };
	/** Verdicts of verification stored on records (bodies refused without a record are not here). */
	verdicts: { verified: number; rejected: number };
	/** Leases the expiry sweep returned. */
	lapsedLeases: number;
}

/**
 * What one record adds to the tally. The verdict and the lapsed-lease count are set by the Node's
 * own moves only (a Cranker chooses the reason it gives, so history reasons cannot be counted).
 */
export function intentTally(record: IntentRecord): Record<string, bigint> {
	const tally: Record<string, bigint> = {};
	const live = record.archivedIn === undefined || record.archivedIn === null;
	if (live) tally[`live:${record.state}`] = 1n;
	if (record.state === "CONFIRMED") {
		const { tokenMintAddress: mint, amount } = record.request;
		tally.settled = 1n;
		tally[`settledVolume:${mint}`] = BigInt(amount);
		if (live) tally[`liveVolume:${mint}`] = BigInt(amount);
	}
	if (record.verdict === "VERIFIED") tally.verified = 1n;
	if (record.verdict === "REJECTED") tally.rejected = 1n;
	if (record.lapsedLeases) tally.lapsedLeases = BigInt(record.lapsedLeases);
	return tally;
}

/**
 * The tally keys some figures need, by prefix: the live counts, and with them the live volume per
 * mint. The settled volume has a key for every mint ever settled, which routes that do not report
 * it should not read.
 */
export const LIVE_COUNTS = ["live:"] as const;
export const LIVE_FIGURES = ["live:", "liveVolume:"] as const;

/** Reads the figures back from the collection's tally (or the part of it read: the others are 0). */
export function totalsFromTally(tally: Readonly<Record<string, bigint>>): TotalsSnapshot {
	const live = Object.fromEntries(INTENT_STATES.map(state => [state, Number(tally[`live:${state}`] ?? 0n)])) as Record<IntentState, number>;
	const amounts = (prefix: string) =>
		Object.fromEntries(
			Object.entries(tally)
				.filter(([key, sum]) => key.startsWith(prefix) && sum !== 0n)
				.map(([key, sum]) => [key.slice(prefix.length), sum.toString()])
		);
	return {
		live,
		liveVolume: amounts("liveVolume:"),
		settled: { count: Number(tally.settled ?? 0n), volume: amounts("settledVolume:") },
		verdicts: { verified: Number(tally.verified ?? 0n), rejected: Number(tally.rejected ?? 0n) },
		lapsedLeases: Number(tally.lapsedLeases ?? 0n)
	};
}
