/** The running Cranker figures behind the observation routes (lib/cranker-totals.ts). */
import { CrankerTotals, type CrankerContribution } from "../../lib/cranker-totals";

const ROLES = ["settlement", "verifier", "submitter"];
const at = (s: number) => new Date(Date.UTC(2026, 10, 22, 12, 0, s)).toISOString();
const beat = (crankerPubkey: string, seconds: number, roles = ["settlement"], liquidity: CrankerContribution["liquidity"] = [{ tokenMintAddress: "M1", available: "10" }]): CrankerContribution => ({
	crankerPubkey,
	roles,
	liquidity,
	lastSeenAt: at(seconds)
});

describe("CrankerTotals", () => {
	it("counts each online Cranker once, by its latest heartbeat", () => {
		const totals = new CrankerTotals(ROLES);
		totals.seen(beat("A", 0));
		totals.seen(beat("A", 1, ["settlement", "verifier"], [{ tokenMintAddress: "M1", available: "25" }, { tokenMintAddress: "M2", available: "0" }]));
		totals.seen(beat("B", 2, ["verifier"], [{ tokenMintAddress: "M1", available: "99" }]));
		expect(totals.snapshot()).toEqual({
			online: 2,
			byRole: { settlement: 1, verifier: 2, submitter: 0 },
			// Only settlement Crankers offer liquidity.
			mints: { M1: { liquidity: "25", crankersOnline: 1 }, M2: { liquidity: "0", crankersOnline: 1 } }
		});
	});

	it("drops a Cranker whose last heartbeat is at or before the cutoff, not one that beat again since", () => {
		const totals = new CrankerTotals(ROLES);
		totals.seen(beat("A", 0));
		totals.seen(beat("B", 1));
		totals.seen(beat("A", 5));
		totals.expire(at(1));
		expect(totals.snapshot()).toEqual({ online: 1, byRole: { settlement: 1, verifier: 0, submitter: 0 }, mints: { M1: { liquidity: "10", crankersOnline: 1 } } });
		totals.expire(at(5));
		expect(totals.snapshot()).toEqual({ online: 0, byRole: { settlement: 0, verifier: 0, submitter: 0 }, mints: {} });
	});

	it("keeps exact u64 sums past 2^53 and stays bounded over many heartbeats", () => {
		const totals = new CrankerTotals(ROLES);
		const big = [{ tokenMintAddress: "M1", available: "18446744073709551615" }];
		for (let s = 0; s < 5000; s++) {
			totals.seen(beat(`C${s % 3}`, s, ["settlement"], big));
			totals.expire(at(s - 10));
		}
		expect(totals.snapshot().mints.M1).toEqual({ liquidity: (3n * 18446744073709551615n).toString(), crankersOnline: 3 });
		expect((totals as unknown as { arrivals: unknown[] }).arrivals.length).toBeLessThan(2100);
	});

	it("a heartbeat read again from the store, or an older one, changes nothing", () => {
		const totals = new CrankerTotals(ROLES);
		const latest = beat("A", 5, ["settlement"], [{ tokenMintAddress: "M1", available: "7" }]);
		totals.seen(latest);
		totals.seen(latest);
		totals.seen(beat("A", 3, ["verifier"], [{ tokenMintAddress: "M1", available: "1" }]));
		expect(totals.snapshot()).toEqual({ online: 1, byRole: { settlement: 1, verifier: 0, submitter: 0 }, mints: { M1: { liquidity: "7", crankersOnline: 1 } } });
	});
});
