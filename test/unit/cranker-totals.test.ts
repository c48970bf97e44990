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
			// Only settlement Crankers offer liquidity, and only in a mint they hold some of.
			mints: { M1: { liquidity: "25", crankersOnline: 1 }, M2: { liquidity: "0", crankersOnline: 0 } }
		});
	});

	it("counts as offering a mint only the Crankers that hold some of it", () => {
		const totals = new CrankerTotals(ROLES);
		const holding = (available: string) => [{ tokenMintAddress: "M1", available }];
		totals.seen(beat("A", 0, ["settlement"], holding("40")));
		totals.seen(beat("B", 1, ["settlement"], holding("0")));
		expect(totals.snapshot().mints).toEqual({ M1: { liquidity: "40", crankersOnline: 1 } });
		// A paid out all it had: the mint is still reported, by Crankers that cannot pay in it.
		totals.seen(beat("A", 2, ["settlement"], holding("0")));
		expect(totals.snapshot().mints).toEqual({ M1: { liquidity: "0", crankersOnline: 0 } });
		totals.seen(beat("B", 3, ["settlement"], holding("5")));
		expect(totals.snapshot().mints).toEqual({ M1: { liquidity: "5", crankersOnline: 1 } });
		totals.expire(at(3));
		expect(totals.snapshot().mints).toEqual({});
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

	it("keeps exact u64 sums past 2^53, tells a sum past u64 as the u64 maximum, and stays bounded over many heartbeats", () => {
		const totals = new CrankerTotals(ROLES);
		const third = [{ tokenMintAddress: "M1", available: "6148914691236517205" }];
		const max = [{ tokenMintAddress: "M2", available: "18446744073709551615" }];
		for (let s = 0; s < 5000; s++) {
			totals.seen(beat(`C${s % 3}`, s, ["settlement"], [...third, ...max]));
			totals.expire(at(s - 10));
		}
		expect(totals.snapshot().mints.M1).toEqual({ liquidity: "18446744073709551615", crankersOnline: 3 });
		// Three times the maximum: an amount can say no more (SPEC §0), the sum underneath stays exact.
		expect(totals.snapshot().mints.M2).toEqual({ liquidity: "18446744073709551615", crankersOnline: 3 });
		// Only the heartbeats of the last 10 s wait to expire: 10 of them.
		expect((totals as unknown as { dueToExpire: { size: number } }).dueToExpire.size).toBe(10);
		totals.expire(at(5000));
		expect(totals.snapshot().mints).toEqual({});
	});

	it("a heartbeat read again from the store, or an older one, changes nothing", () => {
		const totals = new CrankerTotals(ROLES);
		const latest = beat("A", 5, ["settlement"], [{ tokenMintAddress: "M1", available: "7" }]);
		totals.seen(latest);
		totals.seen(latest);
		totals.seen(beat("A", 3, ["verifier"], [{ tokenMintAddress: "M1", available: "1" }]));
		expect(totals.snapshot()).toEqual({ online: 1, byRole: { settlement: 1, verifier: 0, submitter: 0 }, mints: { M1: { liquidity: "7", crankersOnline: 1 } } });
	});

	it("the same heartbeat bound to a later reading counts with it, not with an earlier one, and falls silent at its own time", () => {
		const totals = new CrankerTotals(ROLES);
		const read = (seconds: number, available: string) => ({ ...beat("A", 5, ["settlement"], [{ tokenMintAddress: "M1", available }]), boundAt: seconds });
		totals.seen(beat("A", 5, ["settlement"], [{ tokenMintAddress: "M1", available: "0" }]));
		totals.seen(read(7, "40"));
		expect(totals.snapshot().mints).toEqual({ M1: { liquidity: "40", crankersOnline: 1 } });
		totals.seen(read(9, "3"));
		// A binding to an earlier reading, folded in late, does not bring the 40 back.
		totals.seen(read(8, "40"));
		totals.seen(read(9, "3"));
		expect(totals.snapshot()).toEqual({ online: 1, byRole: { settlement: 1, verifier: 0, submitter: 0 }, mints: { M1: { liquidity: "3", crankersOnline: 1 } } });
		totals.expire(at(5));
		expect(totals.snapshot()).toEqual({ online: 0, byRole: { settlement: 0, verifier: 0, submitter: 0 }, mints: {} });
	});

	it("a heartbeat another replica stamped earlier, read after newer ones, still falls silent at its own time", () => {
		const totals = new CrankerTotals(ROLES);
		totals.seen(beat("A", 10));
		totals.seen(beat("B", 11));
		// C's heartbeat, stamped at 2 s by another replica, is read only now (a write that retried).
		totals.seen(beat("C", 2, ["verifier"], []));
		totals.expire(at(2));
		expect(totals.snapshot()).toEqual({ online: 2, byRole: { settlement: 2, verifier: 0, submitter: 0 }, mints: { M1: { liquidity: "20", crankersOnline: 2 } } });
		totals.expire(at(10));
		expect(totals.online).toBe(1);
	});

	it("expires heartbeats in time order, whatever order they were read in", () => {
		const totals = new CrankerTotals(ROLES);
		// 200 Crankers, each beating once, read in a shuffled order (a fixed one: the test must not vary).
		const seconds = Array.from({ length: 200 }, (_, i) => (i * 73) % 200);
		for (const s of seconds) totals.seen(beat(`C${s}`, s));
		for (let cutoff = 0; cutoff < 200; cutoff += 7) {
			totals.expire(at(cutoff));
			expect(totals.online).toBe(199 - cutoff);
		}
	});
});
