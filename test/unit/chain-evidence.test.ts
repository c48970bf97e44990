/** What the chain must show before a submission goes (SPEC §2.4, §5), for every status and need. */
import { judgeChainEvidence, type ChainEvidence, type ChainObservation } from "../../lib/chain-evidence";
import { ServiceError } from "../../lib/errors";

const LAST_VALID = 1000;
/** A slot at or before the first at which the submission could land. */
const EARLIEST_SLOT = 700;
/**
 * What the Node saw; a transaction the chain has is read as this settlement (`[]`), a mismatch, or
 * unrelated. An endpoint that does not know the signature keeps its whole history unless told.
 */
const seen = (status: ChainObservation["status"], blockHeight: number, mismatches?: string[] | "unrelated"): ChainObservation => ({
	status,
	blockHeight,
	...(status === "unknown" ? { historyFrom: 0 } : {}),
	...(mismatches === "unrelated" ? { content: { mismatches: ["not this settlement"], related: false } } : mismatches ? { content: { mismatches, related: true } } : {})
});

function answer(need: ChainEvidence, observation: ChainObservation | null, lastValid: { height?: number } = { height: LAST_VALID }): string {
	try {
		return `ok:${judgeChainEvidence(need, observation && [observation], lastValid.height, EARLIEST_SLOT)}`;
	} catch (err) {
		expect(err).toBeInstanceOf(ServiceError);
		return `${(err as ServiceError).code} ${(err as ServiceError).type}`;
	}
}

describe("judgeChainEvidence", () => {
	it("landed (CONFIRMED, TIN finalized): only a confirmed success with exactly the expected content", () => {
		expect(answer("landed", seen("landed", 900, []))).toBe("ok:true");
		expect(answer("landed", seen("landed", 900, ["transferred 1, expected 2"]))).toBe("422 SETTLEMENT_MISMATCH");
		expect(answer("landed", seen("landed", 900, "unrelated"))).toBe("422 SETTLEMENT_MISMATCH");
		expect(answer("landed", seen("landed", 900))).toBe("422 SETTLEMENT_MISMATCH");
		expect(answer("landed", seen("failed", 900))).toBe("422 SETTLEMENT_MISMATCH");
		expect(answer("landed", seen("unknown", 900))).toBe("409 NOT_ON_CHAIN");
		expect(answer("landed", seen("pending", 900))).toBe("409 NOT_ON_CHAIN");
		expect(answer("landed", seen("unknown", 2000))).toBe("409 NOT_ON_CHAIN");
		// Listed as landed, no transaction given yet (a backend a moment behind): not on chain yet, not refused for good (a review).
		const notGiven: ChainObservation = { status: "landed", blockHeight: 900, content: { mismatches: ["the endpoint gives no transaction for it yet"], related: true, notGiven: true } };
		expect(answer("landed", notGiven)).toBe("409 NOT_ON_CHAIN");
		// Nor does it let a submission go: it may be this settlement.
		expect(answer("cannot-land", { ...notGiven, blockHeight: 2000 })).toBe("409 SUBMISSION_LIVE");
		// No chain configured: recorded on the signed Cranker's word, marked unchecked.
		expect(answer("landed", null)).toBe("ok:false");
	});

	it("cannot-land (dropped): only once past lastValidBlockHeight with the signature unknown, or failed", () => {
		expect(answer("cannot-land", seen("unknown", LAST_VALID + 1))).toBe("ok:true");
		expect(answer("cannot-land", seen("unknown", LAST_VALID))).toBe("409 SUBMISSION_LIVE");
		expect(answer("cannot-land", seen("pending", LAST_VALID + 50))).toBe("409 SUBMISSION_LIVE");
		expect(answer("cannot-land", seen("landed", LAST_VALID + 50, []))).toBe("409 SUBMISSION_LIVE");
		// A failure moved nothing; past its last landing height it cannot land on any fork (a review: it stayed SUBMITTED for good once only its absent holder could reject it).
		expect(answer("cannot-land", seen("failed", LAST_VALID + 50, []))).toBe("ok:true");
		expect(answer("cannot-land", seen("failed", LAST_VALID, []))).toBe("409 SUBMISSION_LIVE");
		// A reported signature whose transaction does not touch this settlement proves nothing about it:
		// judged as an unknown one, by the last landing height.
		expect(answer("cannot-land", seen("landed", LAST_VALID, "unrelated"))).toBe("409 SUBMISSION_LIVE");
		expect(answer("cannot-land", seen("landed", LAST_VALID + 1, "unrelated"))).toBe("ok:true");
		expect(answer("cannot-land", seen("failed", LAST_VALID + 1, "unrelated"))).toBe("ok:true");
		// A submission recorded without its lastValidBlockHeight can never be proven dead.
		expect(answer("cannot-land", seen("unknown", 10 ** 9), {})).toBe("409 SUBMISSION_LIVE");
		expect(answer("cannot-land", null)).toBe("503 CHAIN_UNAVAILABLE");
	});

	it("failed-or-cannot-land (REJECTED from SUBMITTED): a failure on chain, or a transaction that can no longer land", () => {
		expect(answer("failed-or-cannot-land", seen("failed", 10, []))).toBe("ok:true");
		expect(answer("failed-or-cannot-land", seen("failed", 10, ["transferred 1, expected 2"]))).toBe("ok:true");
		expect(answer("failed-or-cannot-land", seen("failed", LAST_VALID, "unrelated"))).toBe("409 SUBMISSION_LIVE");
		expect(answer("failed-or-cannot-land", seen("landed", LAST_VALID + 1, "unrelated"))).toBe("ok:true");
		// Money moved for this settlement, even the wrong amount: an operator's case, never a rejection.
		expect(answer("failed-or-cannot-land", seen("landed", LAST_VALID + 1, ["transferred 1, expected 2"]))).toBe("409 INVALID_TRANSITION");
		expect(answer("failed-or-cannot-land", seen("unknown", LAST_VALID + 1))).toBe("ok:true");
		expect(answer("failed-or-cannot-land", seen("unknown", LAST_VALID))).toBe("409 SUBMISSION_LIVE");
		expect(answer("failed-or-cannot-land", seen("pending", LAST_VALID + 1))).toBe("409 SUBMISSION_LIVE");
		expect(answer("failed-or-cannot-land", seen("landed", LAST_VALID + 1, []))).toBe("409 INVALID_TRANSITION");
		expect(answer("failed-or-cannot-land", null)).toBe("503 CHAIN_UNAVAILABLE");
	});

	it("a signature the chain does not know lets a submission go only while the endpoint's history reaches back to its earliest landing slot", () => {
		const pruned = (historyFrom?: number): ChainObservation => ({ status: "unknown", blockHeight: LAST_VALID + 1, ...(historyFrom !== undefined ? { historyFrom } : {}) });
		for (const need of ["cannot-land", "failed-or-cannot-land"] as const) {
			expect(answer(need, pruned(EARLIEST_SLOT))).toBe("ok:true");
			// A ledger pruned past it has forgotten a landed settlement too: taking it for dropped would pay the intent again.
			expect(answer(need, pruned(EARLIEST_SLOT + 1))).toBe("503 CHAIN_UNAVAILABLE");
			expect(answer(need, pruned())).toBe("503 CHAIN_UNAVAILABLE");
			// Still within its landing height, it is live whatever the history.
			expect(answer(need, { ...pruned(EARLIEST_SLOT + 1), blockHeight: LAST_VALID })).toBe("409 SUBMISSION_LIVE");
			// A failure the chain knows needs no history.
			expect(answer(need, seen("failed", LAST_VALID + 1, []))).toBe("ok:true");
		}
		let refusal: unknown;
		try {
			judgeChainEvidence("cannot-land", [pruned(EARLIEST_SLOT + 1)], LAST_VALID, EARLIEST_SLOT);
		} catch (err) {
			refusal = err;
		}
		expect(refusal).toMatchObject({ data: { reason: "RPC_HISTORY_TOO_SHORT", firstAvailableSlot: EARLIEST_SLOT + 1, slotAtSubmission: EARLIEST_SLOT } });
		// Reported while no chain was configured, a submission has no reading to compare with: nothing can be shown.
		expect(() => judgeChainEvidence("cannot-land", [pruned(0)], LAST_VALID, undefined)).toThrow(expect.objectContaining({ type: "CHAIN_UNAVAILABLE", data: { reason: "NO_SUBMISSION_READING" } }));
	});

	it("several RPC endpoints: the evidence holds only when every one bears it out; the first that does not gives the refusal", () => {
		const judge = (need: ChainEvidence, ...observations: ChainObservation[]) => {
			try {
				return `ok:${judgeChainEvidence(need, observations, LAST_VALID, EARLIEST_SLOT)}`;
			} catch (err) {
				return `${(err as ServiceError).code} ${(err as ServiceError).type}`;
			}
		};
		const landed = seen("landed", LAST_VALID + 5, []);
		const hidden = seen("unknown", LAST_VALID + 5);
		// One endpoint hides a landed settlement: no drop, no rejection, in either order.
		for (const need of ["cannot-land", "failed-or-cannot-land"] as const) {
			expect(judge(need, hidden, hidden)).toBe("ok:true");
			expect(judge(need, hidden, landed)).not.toMatch(/^ok/);
			expect(judge(need, landed, hidden)).not.toMatch(/^ok/);
		}
		// One endpoint shows a settlement the other does not have: not confirmed, in either order.
		expect(judge("landed", landed, landed)).toBe("ok:true");
		expect(judge("landed", landed, hidden)).toBe("409 NOT_ON_CHAIN");
		expect(judge("landed", hidden, landed)).toBe("409 NOT_ON_CHAIN");
		// One endpoint ahead of the other: the expiry must show on both.
		expect(judge("cannot-land", seen("unknown", LAST_VALID + 5), seen("unknown", LAST_VALID))).toBe("409 SUBMISSION_LIVE");
		expect(judge("cannot-land")).toBe("503 CHAIN_UNAVAILABLE");
	});
});
