/** The intent figures as a store tally (lib/intent-totals.ts): what each record adds, and reading the sums back. */
import { intentTally, totalsFromTally } from "../../lib/intent-totals";
import type { IntentRecord, IntentState } from "../../lib/intents";
import { addTally } from "../../lib/store/port";
import { MINT, record } from "./records";

const at = (r: IntentRecord, state: IntentState, extra: Partial<IntentRecord> = {}): IntentRecord => ({ ...r, state, history: [...r.history, { state, at: r.updatedAt }], ...extra });

/** Sums records as the store does: plus each record written, minus each record replaced. */
function sums(changes: [before: IntentRecord | null, after: IntentRecord | null][]) {
	const total = new Map<string, bigint>();
	for (const [before, after] of changes) {
		if (before) addTally(total, intentTally(before), -1n);
		if (after) addTally(total, intentTally(after), 1n);
	}
	return totalsFromTally(Object.fromEntries(total));
}

describe("intent tally", () => {
	const received: IntentRecord = { ...record("VERIFIED"), state: "RECEIVED", history: [{ state: "RECEIVED", at: "t0" }] };

	it("follows an intent from insert to settlement and archiving", () => {
		const verifying = at(received, "NODE_VERIFYING");
		const verified = at(verifying, "VERIFIED", { verdict: "VERIFIED" });
		const confirmed = at(verified, "CONFIRMED");
		const figures = sums([
			[null, received],
			[received, verifying],
			[verifying, verified],
			[verified, confirmed]
		]);
		expect(figures).toMatchObject({
			live: { RECEIVED: 0, VERIFIED: 0, CONFIRMED: 1 },
			liveVolume: { [MINT]: confirmed.request.amount },
			settled: { count: 1, volume: { [MINT]: confirmed.request.amount } },
			verdicts: { verified: 1, rejected: 0 }
		});
		const archived = sums([[null, { ...confirmed, archivedIn: 1 }]]);
		expect(archived.live.CONFIRMED).toBe(0);
		expect(archived.liveVolume).toEqual({});
		expect(archived.settled).toEqual({ count: 1, volume: { [MINT]: confirmed.request.amount } });
	});

	it("sums u64 amounts without losing precision", () => {
		const big = at(received, "CONFIRMED", { request: { ...received.request, amount: "18446744073709551615" } });
		expect(sums([[null, big], [null, { ...big, id: "int_other" }]]).settled.volume[MINT]).toBe("36893488147419103230");
	});

	it("counts a verification rejection, archived or not, and each lease the sweep returned", () => {
		const rejected = at(at(received, "NODE_VERIFYING"), "REJECTED", { archivedIn: 2, verdict: "REJECTED" });
		expect(sums([[null, rejected]])).toMatchObject({ live: { REJECTED: 0 }, settled: { count: 0, volume: {} }, verdicts: { verified: 0, rejected: 1 } });
		expect(sums([[null, { ...received, lapsedLeases: 1 }], [null, { ...received, id: "x", lapsedLeases: 2 }]]).lapsedLeases).toBe(3);
	});

	it("counts neither an expiry during verification as a verdict nor a Cranker's release that says LEASE_EXPIRED as a lapse", () => {
		const expired = at(at(received, "NODE_VERIFYING"), "REJECTED", { rejectionReason: "EXPIRED" });
		const released = { ...received, history: [{ state: "CRANKER_LEASED" as const, at: "b" }, { state: "VERIFIED" as const, at: "c", reason: "LEASE_EXPIRED", by: "cranker" }] };
		expect(sums([[null, expired], [null, { ...released, id: "y" }]])).toMatchObject({ verdicts: { verified: 0, rejected: 0 }, lapsedLeases: 0 });
	});
});
