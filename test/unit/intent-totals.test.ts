/** Running totals (lib/intent-totals.ts): every stored change applied as "remove before, add after". */
import { IntentTotals } from "../../lib/intent-totals";
import type { IntentRecord, IntentState } from "../../lib/intents";
import { MINT, record } from "./records";

const at = (r: IntentRecord, state: IntentState, extra: Partial<IntentRecord> = {}): IntentRecord => ({ ...r, state, ...extra });

describe("IntentTotals", () => {
	it("follows an intent from insert to settlement and archiving", () => {
		const totals = new IntentTotals();
		const received = at(record("VERIFIED"), "RECEIVED");
		totals.apply(null, received);
		expect(totals.snapshot().live.RECEIVED).toBe(1);

		const verified = at(received, "VERIFIED");
		totals.apply(received, verified);
		const confirmed = at(verified, "CONFIRMED");
		totals.apply(verified, confirmed);
		expect(totals.snapshot()).toMatchObject({
			live: { RECEIVED: 0, VERIFIED: 0, CONFIRMED: 1 },
			liveVolume: { [MINT]: confirmed.request.amount },
			settled: { count: 1, volume: { [MINT]: confirmed.request.amount } }
		});

		totals.apply(confirmed, { ...confirmed, archivedIn: 1 });
		const snapshot = totals.snapshot();
		expect(snapshot.live.CONFIRMED).toBe(0);
		expect(snapshot.liveVolume).toEqual({});
		expect(snapshot.settled).toEqual({ count: 1, volume: { [MINT]: confirmed.request.amount } });
	});

	it("sums u64 amounts without losing precision", () => {
		const totals = new IntentTotals();
		const big = at(record("VERIFIED"), "CONFIRMED", { request: { ...record("VERIFIED").request, amount: "18446744073709551615" } });
		totals.apply(null, big);
		totals.apply(null, { ...big, id: "int_other" });
		expect(totals.snapshot().settled.volume[MINT]).toBe("36893488147419103230");
	});

	it("counts archived rejections out of the live totals only", () => {
		const totals = new IntentTotals();
		const rejected = at(record("VERIFIED"), "REJECTED");
		totals.apply(null, rejected);
		totals.apply(rejected, { ...rejected, archivedIn: 2 });
		expect(totals.snapshot()).toMatchObject({ live: { REJECTED: 0 }, settled: { count: 0, volume: {} } });
	});
});
