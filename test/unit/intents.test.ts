/** The intent state machine of SPEC §2.4/§3 and the two views of SPEC §2.2/§2.3. */
import { ServiceError } from "../../lib/errors";
import {
	restamped,
	EXPIRABLE_STATES,
	HISTORY_MAX,
	INTENT_STATES,
	PUBLIC_STATUS,
	TERMINAL_STATES,
	UNVERIFIED_STATES,
	TRANSITIONS,
	applyMove,
	decideStatusUpdate,
	fittingCount,
	isExpired,
	lastLandingHeight,
	leaseForPayout,
	rejectReplacedRoute,
	withChainEvidence,
	earliestLandingSlot,
	withSubmissionReading,
	rejectedAtVerification,
	statesOfStatus,
	toPublicView,
	toWorkerView,
	workItemWrapper,
	workPageViews,
	type IntentRecord,
	type IntentWorkItem,
	type IntentState,
	type StatusContext,
	type UpdateStatusRequest
} from "../../lib/intents";
import { CRANKER_A, CRANKER_B, NONCE, NOW, OTHER_TX_SIG, ROUTE_COMMITMENT, SENDER_SIGNATURE, TX_SIG, at, lease, record } from "./records";

const TTL = 60_000;
const allowed: StatusContext = { now: NOW, leaseTtlMs: TTL, crankerAllowed: true, latestSlot: null };
const notAllowed: StatusContext = { ...allowed, crankerAllowed: false };

function move(rec: IntentRecord, request: Omit<UpdateStatusRequest, "expectedVersion"> & { expectedVersion?: number }, context = allowed): IntentRecord {
	const decision = decideStatusUpdate(rec, { expectedVersion: rec.stateVersion, ...request }, context);
	if (decision.kind !== "move") throw new Error(`expected a move, got ${decision.kind}`);
	return decision.next;
}

/** The ServiceError `fn` throws (fails the test when it throws nothing or something else). */
function refusal(fn: () => unknown): ServiceError {
	try {
		fn();
	} catch (err) {
		expect(err).toBeInstanceOf(ServiceError);
		return err as ServiceError;
	}
	throw new Error("expected a refusal, but the update was accepted");
}

function expectRefusal(fn: () => unknown, type: string, code: number): ServiceError {
	const err = refusal(fn);
	expect({ type: err.type, code: err.code }).toEqual({ type, code });
	return err;
}

describe("decideStatusUpdate: the moves of the SPEC §2.4 table", () => {
	it("VERIFIED → CRANKER_LEASED: sets a lease for LEASE_TTL_MS, stateVersion +1, history by the Cranker", () => {
		const before = record("VERIFIED");
		const next = move(before, { status: "CRANKER_LEASED", crankerPubkey: CRANKER_A });
		expect(next.state).toBe("CRANKER_LEASED");
		expect(next.stateVersion).toBe(before.stateVersion + 1);
		expect(next.lease).toEqual({ crankerPubkey: CRANKER_A, leasedAt: NOW.toISOString(), expiresAt: at(TTL) });
		expect(next.leaseExpiresAt).toBe(at(TTL));
		expect(next.updatedAt).toBe(NOW.toISOString());
		expect(next.history).toEqual([...before.history, { state: "CRANKER_LEASED", at: NOW.toISOString(), by: CRANKER_A }]);
		expect(next.submission).toBeNull();
		// The input record is not mutated.
		expect(before.state).toBe("VERIFIED");
		expect(before.lease).toBeNull();
	});

	it("uses the leaseTtlMs it is given", () => {
		const next = move(record("VERIFIED"), { status: "CRANKER_LEASED", crankerPubkey: CRANKER_A }, { ...allowed, leaseTtlMs: 5_000 });
		expect(next.lease?.expiresAt).toBe(at(5_000));
	});

	it("CRANKER_LEASED → CRANKER_LEASED (renewal by the holder): lease end moves to now + TTL, stateVersion and history unchanged", () => {
		const before = record("CRANKER_LEASED");
		const next = move(before, { status: "CRANKER_LEASED", crankerPubkey: CRANKER_A });
		expect(next.state).toBe("CRANKER_LEASED");
		expect(next.stateVersion).toBe(before.stateVersion);
		expect(next.lease).toEqual({ crankerPubkey: CRANKER_A, leasedAt: before.lease!.leasedAt, expiresAt: at(TTL) });
		expect(next.leaseExpiresAt).toBe(at(TTL));
		expect(next.history).toEqual(before.history);
	});

	it("CRANKER_LEASED → VERIFIED (release by the holder): lease cleared, stateVersion +1", () => {
		const before = record("CRANKER_LEASED");
		const next = move(before, { status: "VERIFIED", crankerPubkey: CRANKER_A, reason: "no liquidity" });
		expect(next.state).toBe("VERIFIED");
		expect(next.stateVersion).toBe(before.stateVersion + 1);
		expect(next.lease).toBeNull();
		expect(next.leaseExpiresAt).toBeNull();
		expect(next.history.at(-1)).toEqual({ state: "VERIFIED", at: NOW.toISOString(), by: CRANKER_A, reason: "no liquidity" });
	});

	it("a release needs no reason", () => {
		const next = move(record("CRANKER_LEASED"), { status: "VERIFIED", crankerPubkey: CRANKER_A });
		expect(next.state).toBe("VERIFIED");
		expect(next.lease).toBeNull();
	});

	it("CRANKER_LEASED → SUBMITTED: records the submission, keeps the lease, stateVersion +1", () => {
		const before = record("CRANKER_LEASED");
		const next = move(before, { status: "SUBMITTED", crankerPubkey: CRANKER_A, transactionSignature: TX_SIG, slot: 1234, lastValidBlockHeight: 1400 });
		expect(next.state).toBe("SUBMITTED");
		expect(next.stateVersion).toBe(before.stateVersion + 1);
		expect(next.submission).toEqual({ transactionSignature: TX_SIG, submittedAt: NOW.toISOString(), slot: 1234, lastValidBlockHeight: 1400 });
		expect(next.lease).toEqual(before.lease);
		expect(next.history.at(-1)).toEqual({ state: "SUBMITTED", at: NOW.toISOString(), by: CRANKER_A });
	});

	it("CRANKER_LEASED → SUBMITTED without a slot stores no slot", () => {
		const next = move(record("CRANKER_LEASED"), { status: "SUBMITTED", crankerPubkey: CRANKER_A, transactionSignature: TX_SIG, lastValidBlockHeight: 1400 });
		expect(next.submission).toEqual({ transactionSignature: TX_SIG, submittedAt: NOW.toISOString(), lastValidBlockHeight: 1400 });
	});

	it("SUBMITTED → CONFIRMED with the same transactionSignature: keeps the submission, adds the slot, stateVersion +1", () => {
		const before = record("SUBMITTED");
		const next = move(before, { status: "CONFIRMED", crankerPubkey: CRANKER_A, transactionSignature: TX_SIG, slot: 99 });
		expect(next.state).toBe("CONFIRMED");
		expect(next.stateVersion).toBe(before.stateVersion + 1);
		expect(next.submission).toEqual({ ...before.submission, slot: 99 });
		expect(next.history.at(-1)).toEqual({ state: "CONFIRMED", at: NOW.toISOString(), by: CRANKER_A });
	});

	it("SUBMITTED → CONFIRMED with another transactionSignature is a 422", () => {
		const err = expectRefusal(
			() => move(record("SUBMITTED"), { status: "CONFIRMED", crankerPubkey: CRANKER_A, transactionSignature: OTHER_TX_SIG }),
			"VALIDATION_ERROR",
			422
		);
		expect(JSON.stringify(err.data)).toContain("transactionSignature");
	});

	it("SUBMITTED → VERIFIED (dropped): needs a reason; clears lease and submission, stateVersion +1", () => {
		const before = record("SUBMITTED");
		const next = move(before, { status: "VERIFIED", crankerPubkey: CRANKER_A, reason: "blockhash expired" });
		expect(next.state).toBe("VERIFIED");
		expect(next.stateVersion).toBe(before.stateVersion + 1);
		expect(next.lease).toBeNull();
		expect(next.leaseExpiresAt).toBeNull();
		expect(next.submission).toBeNull();
		expect(next.history.at(-1)).toEqual({ state: "VERIFIED", at: NOW.toISOString(), by: CRANKER_A, reason: "blockhash expired" });
	});

	it.each(["CRANKER_LEASED", "SUBMITTED"] as const)("%s → REJECTED by the holder with a reason: rejectionReason kept, stateVersion +1", from => {
		const before = record(from);
		const next = move(before, { status: "REJECTED", crankerPubkey: CRANKER_A, reason: "on-chain refusal" });
		expect(next.state).toBe("REJECTED");
		expect(next.stateVersion).toBe(before.stateVersion + 1);
		expect(next.rejectionReason).toBe("on-chain refusal");
		expect(next.history.at(-1)).toEqual({ state: "REJECTED", at: NOW.toISOString(), by: CRANKER_A, reason: "on-chain refusal" });
	});
});

describe("decideStatusUpdate: required fields (422, checked last)", () => {
	const cases: [string, IntentState, UpdateStatusRequest["status"], "transactionSignature" | "reason" | "lastValidBlockHeight"][] = [
		["SUBMITTED without transactionSignature", "CRANKER_LEASED", "SUBMITTED", "transactionSignature"],
		["CONFIRMED without transactionSignature", "SUBMITTED", "CONFIRMED", "transactionSignature"],
		["SUBMITTED → VERIFIED without reason", "SUBMITTED", "VERIFIED", "reason"],
		["CRANKER_LEASED → REJECTED without reason", "CRANKER_LEASED", "REJECTED", "reason"],
		["SUBMITTED → REJECTED without reason", "SUBMITTED", "REJECTED", "reason"]
	];
	it.each(cases)("%s → VALIDATION_ERROR naming the field", (_label, from, to, field) => {
		const err = expectRefusal(() => move(record(from), { status: to, crankerPubkey: CRANKER_A }), "VALIDATION_ERROR", 422);
		expect(err.data).toEqual([expect.objectContaining({ type: "required", field })]);
	});

	it("SUBMITTED without lastValidBlockHeight → VALIDATION_ERROR naming it (the Node needs it to tell when the transaction can no longer land)", () => {
		const err = expectRefusal(() => move(record("CRANKER_LEASED"), { status: "SUBMITTED", crankerPubkey: CRANKER_A, transactionSignature: TX_SIG }), "VALIDATION_ERROR", 422);
		expect(err.data).toEqual([expect.objectContaining({ type: "required", field: "lastValidBlockHeight" })]);
	});
});

describe("decideStatusUpdate: refusals in the SPEC order", () => {
	it("VERSION_CONFLICT comes first (even with a bad move and a Cranker that is not allowed)", () => {
		const rec = record("VERIFIED");
		const err = expectRefusal(
			() => decideStatusUpdate(rec, { status: "CONFIRMED", crankerPubkey: CRANKER_B, expectedVersion: rec.stateVersion - 1 }, notAllowed),
			"VERSION_CONFLICT",
			409
		);
		expect(err.data).toEqual({ stateVersion: rec.stateVersion, state: "VERIFIED" });
	});

	it("VERSION_CONFLICT also for an expectedVersion ahead of the record", () => {
		const rec = record("VERIFIED");
		expectRefusal(
			() => decideStatusUpdate(rec, { status: "CRANKER_LEASED", crankerPubkey: CRANKER_A, expectedVersion: rec.stateVersion + 1 }, allowed),
			"VERSION_CONFLICT",
			409
		);
	});

	it("INVALID_TRANSITION before CRANKER_NOT_ALLOWED", () => {
		expectRefusal(() => move(record("VERIFIED"), { status: "SUBMITTED", crankerPubkey: CRANKER_B, transactionSignature: TX_SIG }, notAllowed), "INVALID_TRANSITION", 409);
	});

	it("CRANKER_NOT_ALLOWED before NOT_LEASE_HOLDER", () => {
		expectRefusal(() => move(record("CRANKER_LEASED"), { status: "SUBMITTED", crankerPubkey: CRANKER_B }, notAllowed), "CRANKER_NOT_ALLOWED", 403);
	});

	it("CRANKER_NOT_ALLOWED for a lease by a Cranker that is offline or lacks the role", () => {
		expectRefusal(() => move(record("VERIFIED"), { status: "CRANKER_LEASED", crankerPubkey: CRANKER_A }, notAllowed), "CRANKER_NOT_ALLOWED", 403);
	});

	it("NOT_LEASE_HOLDER before LEASE_EXPIRED", () => {
		const rec = record("CRANKER_LEASED", { lease: lease(CRANKER_A, -1_000) });
		expectRefusal(() => move(rec, { status: "SUBMITTED", crankerPubkey: CRANKER_B }), "NOT_LEASE_HOLDER", 403);
	});

	it("LEASE_EXPIRED before the missing-field 422", () => {
		const rec = record("CRANKER_LEASED", { lease: lease(CRANKER_A, -1_000) });
		expectRefusal(() => move(rec, { status: "SUBMITTED", crankerPubkey: CRANKER_A }), "LEASE_EXPIRED", 409);
	});

	it("with a live lease the same request reaches the 422", () => {
		expectRefusal(() => move(record("CRANKER_LEASED"), { status: "SUBMITTED", crankerPubkey: CRANKER_A }), "VALIDATION_ERROR", 422);
	});

	it.each([
		["renew", { status: "CRANKER_LEASED" }],
		["release", { status: "VERIFIED" }],
		["submit", { status: "SUBMITTED", transactionSignature: TX_SIG }],
		["reject", { status: "REJECTED", reason: "x" }]
	] as const)("only the lease holder may %s a leased intent", (_verb, request) => {
		expectRefusal(() => move(record("CRANKER_LEASED"), { crankerPubkey: CRANKER_B, ...request }), "NOT_LEASE_HOLDER", 403);
	});

	it.each([
		["renew", { status: "CRANKER_LEASED" }],
		["release", { status: "VERIFIED" }],
		["submit", { status: "SUBMITTED", transactionSignature: TX_SIG }],
		["reject", { status: "REJECTED", reason: "x" }]
	] as const)("the former holder cannot %s once the lease has expired", (_verb, request) => {
		const rec = record("CRANKER_LEASED", { lease: lease(CRANKER_A, -1) });
		expectRefusal(() => move(rec, { crankerPubkey: CRANKER_A, ...request }), "LEASE_EXPIRED", 409);
	});

	it("a lease with 1 ms left is still live", () => {
		const rec = record("CRANKER_LEASED", { lease: lease(CRANKER_A, 1) });
		expect(move(rec, { status: "SUBMITTED", crankerPubkey: CRANKER_A, transactionSignature: TX_SIG, lastValidBlockHeight: 1400 }).state).toBe("SUBMITTED");
	});

	it("an intent leased by A cannot be leased by B (VERSION_CONFLICT with the old version, NOT_LEASE_HOLDER with the new one)", () => {
		const verified = record("VERIFIED");
		const leasedByA = move(verified, { status: "CRANKER_LEASED", crankerPubkey: CRANKER_A });
		expectRefusal(
			() => decideStatusUpdate(leasedByA, { status: "CRANKER_LEASED", crankerPubkey: CRANKER_B, expectedVersion: verified.stateVersion }, allowed),
			"VERSION_CONFLICT",
			409
		);
		expectRefusal(() => move(leasedByA, { status: "CRANKER_LEASED", crankerPubkey: CRANKER_B }), "NOT_LEASE_HOLDER", 403);
	});

	const invalid: [IntentState, IntentState][] = [
		["RECEIVED", "NODE_VERIFYING"],
		["RECEIVED", "CRANKER_LEASED"],
		["NODE_VERIFYING", "VERIFIED"],
		["VERIFIED", "VERIFIED"],
		["VERIFIED", "SUBMITTED"],
		["VERIFIED", "CONFIRMED"],
		["VERIFIED", "REJECTED"],
		["CRANKER_LEASED", "CONFIRMED"],
		["SUBMITTED", "SUBMITTED"],
		["SUBMITTED", "CRANKER_LEASED"],
		["CONFIRMED", "VERIFIED"],
		["CONFIRMED", "REJECTED"],
		["REJECTED", "VERIFIED"],
		["REJECTED", "CRANKER_LEASED"]
	];
	it.each(invalid)("%s → %s by a Cranker is INVALID_TRANSITION", (from, to) => {
		expectRefusal(() => move(record(from), { status: to, crankerPubkey: CRANKER_A, transactionSignature: TX_SIG, reason: "x" }), "INVALID_TRANSITION", 409);
	});
});

describe("decideStatusUpdate: a SUBMITTED intent whose lease has expired", () => {
	const lapsed = () => record("SUBMITTED", { lease: lease(CRANKER_A, -1_000) });

	it("another allowed Cranker may confirm it", () => {
		const next = move(lapsed(), { status: "CONFIRMED", crankerPubkey: CRANKER_B, transactionSignature: TX_SIG });
		expect(next.state).toBe("CONFIRMED");
		expect(next.history.at(-1)?.by).toBe(CRANKER_B);
	});

	it("another allowed Cranker may report it dropped, which returns it for another try", () => {
		expect(move(lapsed(), { status: "VERIFIED", crankerPubkey: CRANKER_B, reason: "dropped" }).state).toBe("VERIFIED");
	});

	it("but only the holder may reject it, which cancels the payment for good (SPEC §2.4; a rival's REJECTED was taken)", () => {
		expectRefusal(() => move(lapsed(), { status: "REJECTED", crankerPubkey: CRANKER_B, reason: "griefing" }), "NOT_LEASE_HOLDER", 403);
		expect(move(lapsed(), { status: "REJECTED", crankerPubkey: CRANKER_A, reason: "refused on chain" }).state).toBe("REJECTED");
	});

	it("but not while the holder's lease is live", () => {
		expectRefusal(() => move(record("SUBMITTED"), { status: "CONFIRMED", crankerPubkey: CRANKER_B, transactionSignature: TX_SIG }), "NOT_LEASE_HOLDER", 403);
	});

	it("nor by a Cranker that is not allowed", () => {
		expectRefusal(() => move(lapsed(), { status: "CONFIRMED", crankerPubkey: CRANKER_B, transactionSignature: TX_SIG }, notAllowed), "CRANKER_NOT_ALLOWED", 403);
	});

	it("the holder itself may still confirm it after its lease has lapsed", () => {
		expect(move(lapsed(), { status: "CONFIRMED", crankerPubkey: CRANKER_A, transactionSignature: TX_SIG }).state).toBe("CONFIRMED");
	});

	it("another Cranker must still name the submitted transactionSignature", () => {
		expectRefusal(() => move(lapsed(), { status: "CONFIRMED", crankerPubkey: CRANKER_B, transactionSignature: OTHER_TX_SIG }), "VALIDATION_ERROR", 422);
	});
});

describe("decideStatusUpdate: idempotent replay", () => {
	it("re-sending a successful lease answers replay, with no second transition", () => {
		const verified = record("VERIFIED");
		const request: UpdateStatusRequest = { status: "CRANKER_LEASED", crankerPubkey: CRANKER_A, expectedVersion: verified.stateVersion };
		const leased = move(verified, request);
		expect(decideStatusUpdate(leased, request, allowed)).toEqual({ kind: "replay" });
		// Even once the Cranker is no longer allowed: the update already happened.
		expect(decideStatusUpdate(leased, request, notAllowed)).toEqual({ kind: "replay" });
	});

	it("re-sending a successful submission (same signature) answers replay", () => {
		const leased = record("CRANKER_LEASED");
		const request: UpdateStatusRequest = { status: "SUBMITTED", crankerPubkey: CRANKER_A, expectedVersion: leased.stateVersion, transactionSignature: TX_SIG, lastValidBlockHeight: 1400 };
		expect(decideStatusUpdate(move(leased, request), request, allowed)).toEqual({ kind: "replay" });
	});

	it("the same submission with another transactionSignature is a VERSION_CONFLICT", () => {
		const leased = record("CRANKER_LEASED");
		const submitted = move(leased, { status: "SUBMITTED", crankerPubkey: CRANKER_A, transactionSignature: TX_SIG, lastValidBlockHeight: 1400 });
		expectRefusal(
			() => decideStatusUpdate(submitted, { status: "SUBMITTED", crankerPubkey: CRANKER_A, expectedVersion: leased.stateVersion, transactionSignature: OTHER_TX_SIG }, allowed),
			"VERSION_CONFLICT",
			409
		);
	});

	it("re-sending a confirmation answers replay", () => {
		const submitted = record("SUBMITTED");
		const request: UpdateStatusRequest = { status: "CONFIRMED", crankerPubkey: CRANKER_A, expectedVersion: submitted.stateVersion, transactionSignature: TX_SIG };
		expect(decideStatusUpdate(move(submitted, request), request, allowed)).toEqual({ kind: "replay" });
	});

	it("re-sending a release answers replay", () => {
		const leased = record("CRANKER_LEASED");
		const request: UpdateStatusRequest = { status: "VERIFIED", crankerPubkey: CRANKER_A, expectedVersion: leased.stateVersion };
		expect(decideStatusUpdate(move(leased, request), request, allowed)).toEqual({ kind: "replay" });
	});

	it("the same request from another Cranker is not a replay", () => {
		const verified = record("VERIFIED");
		const leased = move(verified, { status: "CRANKER_LEASED", crankerPubkey: CRANKER_A });
		expectRefusal(
			() => decideStatusUpdate(leased, { status: "CRANKER_LEASED", crankerPubkey: CRANKER_B, expectedVersion: verified.stateVersion }, allowed),
			"VERSION_CONFLICT",
			409
		);
	});

	it("is no replay once the intent has left the state the update produced", () => {
		const leased = record("CRANKER_LEASED");
		const submitRequest: UpdateStatusRequest = { status: "SUBMITTED", crankerPubkey: CRANKER_A, expectedVersion: leased.stateVersion, transactionSignature: TX_SIG, lastValidBlockHeight: 1400 };
		const confirmed = move(move(leased, submitRequest), { status: "CONFIRMED", crankerPubkey: CRANKER_A, transactionSignature: TX_SIG });
		expectRefusal(() => decideStatusUpdate(confirmed, submitRequest, allowed), "VERSION_CONFLICT", 409);
	});

	it("a state reached by the node (lease expiry) is no replay of the Cranker's earlier release", () => {
		// CRANKER_LEASED → VERIFIED by the node, not by CRANKER_A.
		const leased = record("CRANKER_LEASED");
		const released = applyMove(leased, "lease-lapse", "VERIFIED", NOW.toISOString(), { lease: null, reason: "LEASE_EXPIRED" });
		expectRefusal(
			() => decideStatusUpdate(released, { status: "VERIFIED", crankerPubkey: CRANKER_A, expectedVersion: leased.stateVersion }, allowed),
			"VERSION_CONFLICT",
			409
		);
	});

	it("re-sending a successful SUBMITTED → REJECTED (reason only, no transactionSignature) is a replay", () => {
		const submitted = record("SUBMITTED");
		const request: UpdateStatusRequest = { status: "REJECTED", crankerPubkey: CRANKER_A, expectedVersion: submitted.stateVersion, reason: "on-chain refusal" };
		const rejected = move(submitted, request);
		expect(decideStatusUpdate(rejected, request, allowed)).toEqual({ kind: "replay" });
	});

	// Same bug, the other way round: the dropped report may name the dropped transaction, but the
	// move clears the submission, so the re-sent report no longer matches.
	it("re-sending a successful SUBMITTED → VERIFIED (dropped) that named its transactionSignature is a replay", () => {
		const submitted = record("SUBMITTED");
		const request: UpdateStatusRequest = {
			status: "VERIFIED",
			crankerPubkey: CRANKER_A,
			expectedVersion: submitted.stateVersion,
			transactionSignature: TX_SIG,
			reason: "dropped"
		};
		const dropped = move(submitted, request);
		expect(decideStatusUpdate(dropped, request, allowed)).toEqual({ kind: "replay" });
	});
});

describe("TRANSITIONS", () => {
	const canMove = (from: IntentState, to: IntentState, by: "node" | "cranker") => TRANSITIONS.some(t => t.from === from && t.to === to && t.by === by);
	const crankerMoves = TRANSITIONS.filter(t => t.by === "cranker").map(t => `${t.from}>${t.to}`);

	it("the Cranker moves are exactly the rows of the SPEC §2.4 table", () => {
		expect(new Set(crankerMoves)).toEqual(
			new Set([
				"VERIFIED>CRANKER_LEASED",
				"CRANKER_LEASED>CRANKER_LEASED",
				"CRANKER_LEASED>VERIFIED",
				"CRANKER_LEASED>SUBMITTED",
				"SUBMITTED>CONFIRMED",
				"SUBMITTED>VERIFIED",
				"CRANKER_LEASED>REJECTED",
				"SUBMITTED>REJECTED"
			])
		);
	});

	it("nothing moves out of CONFIRMED or REJECTED, for anyone", () => {
		expect(TRANSITIONS.filter(t => t.from === "CONFIRMED" || t.from === "REJECTED")).toEqual([]);
		for (const from of ["CONFIRMED", "REJECTED"] as const)
			for (const to of INTENT_STATES) for (const by of ["node", "cranker"] as const) expect(canMove(from, to, by)).toBe(false);
	});

	it("a SUBMITTED intent is never moved by the node (its transaction may still land)", () => {
		expect(TRANSITIONS.filter(t => t.from === "SUBMITTED" && t.by === "node")).toEqual([]);
	});

	it("nothing but the node's verification leaves RECEIVED or NODE_VERIFYING", () => {
		for (const to of INTENT_STATES) {
			expect(canMove("RECEIVED", to, "cranker")).toBe(false);
			expect(canMove("NODE_VERIFYING", to, "cranker")).toBe(false);
		}
		expect(canMove("RECEIVED", "NODE_VERIFYING", "node")).toBe(true);
		expect(canMove("NODE_VERIFYING", "VERIFIED", "node")).toBe(true);
	});

	it("canMove distinguishes the actor", () => {
		expect(canMove("VERIFIED", "CRANKER_LEASED", "cranker")).toBe(true);
		expect(canMove("VERIFIED", "CRANKER_LEASED", "node")).toBe(false);
	});
});

describe("the state lists derive from the table", () => {
	it("terminal: the states no move leaves", () => {
		expect([...TERMINAL_STATES].sort()).toEqual(["CONFIRMED", "REJECTED"]);
	});

	it("expirable: the states the node expires from, never SUBMITTED (its transaction may still land) nor before a verdict (it may be a forgery's)", () => {
		expect([...EXPIRABLE_STATES].sort()).toEqual(["CRANKER_LEASED", "VERIFIED"]);
		expect(EXPIRABLE_STATES).not.toContain("SUBMITTED");
		for (const state of UNVERIFIED_STATES) expectRefusal(() => applyMove(record(state), "expiry", "REJECTED", NOW.toISOString()), "INVALID_TRANSITION", 409);
	});

	it("the node's own moves go through the table too: a move it does not list is INVALID_TRANSITION", () => {
		expectRefusal(() => applyMove(record("SUBMITTED"), "expiry", "REJECTED", NOW.toISOString()), "INVALID_TRANSITION", 409);
		expectRefusal(() => applyMove(record("SUBMITTED"), "lease-lapse", "VERIFIED", NOW.toISOString()), "INVALID_TRANSITION", 409);
		expectRefusal(() => applyMove(record("VERIFIED"), "lease-lapse", "VERIFIED", NOW.toISOString()), "INVALID_TRANSITION", 409);
		expectRefusal(() => applyMove(record("RECEIVED"), "verdict", "VERIFIED", NOW.toISOString()), "INVALID_TRANSITION", 409);
	});
});

describe("decideStatusUpdate: expiry and the chain", () => {
	const past = { expiresAt: at(-1) };

	it.each(["VERIFIED", "CRANKER_LEASED"] as const)("an expired %s intent is expired (REJECTED/EXPIRED) before anything else is decided", state => {
		const decision = decideStatusUpdate(record(state, past), { status: "CRANKER_LEASED", crankerPubkey: CRANKER_A, expectedVersion: 999 }, allowed);
		expect(decision.kind).toBe("expire");
		if (decision.kind !== "expire") return;
		expect(decision.next).toMatchObject({ state: "REJECTED", rejectionReason: "EXPIRED" });
		expect(decision.next.history.at(-1)).toMatchObject({ state: "REJECTED", reason: "EXPIRED" });
	});

	it("a SUBMITTED intent past its expiry is not expired: its transaction may have landed, and CONFIRMED is still taken", () => {
		const decision = decideStatusUpdate(record("SUBMITTED", { ...past, expiresAtSlot: 10 }), { status: "CONFIRMED", crankerPubkey: CRANKER_A, expectedVersion: 5, transactionSignature: TX_SIG }, { ...allowed, latestSlot: 20 });
		expect(decision).toMatchObject({ kind: "move", next: { state: "CONFIRMED" }, chainCheck: { need: "landed" } });
	});

	it("asks the chain for exactly the moves out of SUBMITTED", () => {
		const checkOf = (rec: IntentRecord, request: Omit<UpdateStatusRequest, "expectedVersion">) => {
			const decision = decideStatusUpdate(rec, { expectedVersion: rec.stateVersion, ...request }, allowed);
			return decision.kind === "move" ? decision.chainCheck?.need : decision.kind;
		};
		expect(checkOf(record("SUBMITTED"), { status: "CONFIRMED", crankerPubkey: CRANKER_A, transactionSignature: TX_SIG })).toBe("landed");
		expect(checkOf(record("SUBMITTED"), { status: "VERIFIED", crankerPubkey: CRANKER_A, reason: "dropped" })).toBe("cannot-land");
		expect(checkOf(record("SUBMITTED"), { status: "REJECTED", crankerPubkey: CRANKER_A, reason: "failed" })).toBe("failed-or-cannot-land");
		expect(checkOf(record("CRANKER_LEASED"), { status: "REJECTED", crankerPubkey: CRANKER_A, reason: "no liquidity" })).toBeUndefined();
		expect(checkOf(record("CRANKER_LEASED"), { status: "SUBMITTED", crankerPubkey: CRANKER_A, transactionSignature: TX_SIG, lastValidBlockHeight: 9 })).toBeUndefined();
	});

	it("without a chain a CONFIRMED is recorded as the Cranker's word (onChainChecked: false), a drop is 503", () => {
		const confirm = decideStatusUpdate(record("SUBMITTED"), { status: "CONFIRMED", crankerPubkey: CRANKER_A, expectedVersion: 5, transactionSignature: TX_SIG }, allowed);
		if (confirm.kind !== "move" || !confirm.chainCheck) throw new Error("expected a chain-checked move");
		expect(withChainEvidence({ next: confirm.next, chainCheck: confirm.chainCheck }, null, 300).history.at(-1)).toMatchObject({ state: "CONFIRMED", onChainChecked: false });
		const landed = withChainEvidence({ next: confirm.next, chainCheck: confirm.chainCheck }, [{ blockHeight: 10, status: "landed", content: { mismatches: [], related: true } }], 300);
		expect(landed.history.at(-1)).toMatchObject({ state: "CONFIRMED", onChainChecked: true });

		const drop = decideStatusUpdate(record("SUBMITTED"), { status: "VERIFIED", crankerPubkey: CRANKER_A, expectedVersion: 5, reason: "dropped" }, allowed);
		if (drop.kind !== "move" || !drop.chainCheck) throw new Error("expected a chain-checked move");
		expectRefusal(() => withChainEvidence({ next: drop.next, chainCheck: drop.chainCheck! }, null, 300), "CHAIN_UNAVAILABLE", 503);
	});
});

describe("lastLandingHeight: the Cranker's lastValidBlockHeight is a claim", () => {
	const submission = { transactionSignature: TX_SIG, submittedAt: NOW.toISOString() };

	it("never ends earlier than a blockhash fetched when the Node took the report could live", () => {
		expect(lastLandingHeight({ ...submission, lastValidBlockHeight: 1000, heightAtSubmission: 900 }, 300)).toBe(1200);
		expect(lastLandingHeight({ ...submission, lastValidBlockHeight: 1500, heightAtSubmission: 900 }, 300)).toBe(1500);
		// Without the Node's own reading (no chain then), only the claim is known; without either, nothing.
		expect(lastLandingHeight({ ...submission, lastValidBlockHeight: 1000 }, 300)).toBe(1000);
		expect(lastLandingHeight(submission, 300)).toBeUndefined();
	});

	it("a drop claimed past a lowered lastValidBlockHeight is still refused while a real blockhash could live", () => {
		const lied = record("SUBMITTED", { submission: { ...submission, lastValidBlockHeight: 901, heightAtSubmission: 900 } });
		const drop = decideStatusUpdate(lied, { status: "VERIFIED", crankerPubkey: CRANKER_A, expectedVersion: 5, reason: "dropped" }, allowed);
		if (drop.kind !== "move" || !drop.chainCheck) throw new Error("expected a chain-checked move");
		const err = expectRefusal(() => withChainEvidence({ next: drop.next, chainCheck: drop.chainCheck! }, [{ blockHeight: 1000, status: "unknown", historyFrom: 0 }], 300), "SUBMISSION_LIVE", 409);
		expect(err.data).toMatchObject({ lastLandingHeight: 1200 });
		expect(withChainEvidence({ next: drop.next, chainCheck: drop.chainCheck }, [{ blockHeight: 1201, status: "unknown", historyFrom: 0 }], 300).state).toBe("VERIFIED");
	});
});

describe("withSubmissionReading", () => {
	it("records the Node's reading, and refuses a lastValidBlockHeight no blockhash valid now can have", () => {
		const submitted = move(record("CRANKER_LEASED"), { status: "SUBMITTED", crankerPubkey: CRANKER_A, transactionSignature: TX_SIG, lastValidBlockHeight: 1300 });
		expect(withSubmissionReading(submitted, { heights: [1000], slots: [1100] }, 300).submission).toMatchObject({ lastValidBlockHeight: 1300, heightAtSubmission: 1000 });
		const err = expectRefusal(() => withSubmissionReading(submitted, { heights: [999], slots: [1100] }, 300), "VALIDATION_ERROR", 422);
		expect(err.data).toEqual([expect.objectContaining({ field: "lastValidBlockHeight" })]);
	});

	it("with several RPC endpoints: the highest height, unless they are more than a blockhash lifetime apart (503)", () => {
		const submitted = move(record("CRANKER_LEASED"), { status: "SUBMITTED", crankerPubkey: CRANKER_A, transactionSignature: TX_SIG, lastValidBlockHeight: 1300 });
		expect(withSubmissionReading(submitted, { heights: [990, 1000], slots: [1100] }, 300).submission).toMatchObject({ heightAtSubmission: 1000 });
		expect(withSubmissionReading(submitted, { heights: [1000, 700], slots: [1100] }, 300).submission).toMatchObject({ heightAtSubmission: 1000 });
		// One endpoint's height made up high would keep the submission live for good.
		expect(expectRefusal(() => withSubmissionReading(submitted, { heights: [1000, 10 ** 15], slots: [1100] }, 300), "CHAIN_UNAVAILABLE", 503).data).toEqual({ reason: "RPC_DISAGREEMENT", heights: [1000, 10 ** 15] });
		expectRefusal(() => withSubmissionReading(submitted, { heights: [1000, 699], slots: [1100] }, 300), "CHAIN_UNAVAILABLE", 503);
		// A height that is no number would compare false with everything: a submission never shown dead.
		expectRefusal(() => withSubmissionReading(submitted, { heights: [1000, Number.NaN], slots: [1100] }, 300), "CHAIN_UNAVAILABLE", 503);
	});

	it("records the lowest slot of the endpoints: one made up high cannot pass a pruned ledger off as a whole history", () => {
		const submitted = move(record("CRANKER_LEASED"), { status: "SUBMITTED", crankerPubkey: CRANKER_A, transactionSignature: TX_SIG, lastValidBlockHeight: 1300 });
		expect(withSubmissionReading(submitted, { heights: [1000, 1000], slots: [1100, 1390] }, 300).submission).toMatchObject({ slotAtSubmission: 1100 });
		// One made up low would keep every drop waiting for a history no endpoint has: not believed.
		expect(expectRefusal(() => withSubmissionReading(submitted, { heights: [1000, 1000], slots: [1100, 0] }, 300), "CHAIN_UNAVAILABLE", 503).data).toEqual({ reason: "RPC_DISAGREEMENT", slots: [1100, 0] });
		expectRefusal(() => withSubmissionReading(submitted, { heights: [1000], slots: [Number.NaN] }, 300), "CHAIN_UNAVAILABLE", 503);
	});
});

describe("earliestLandingSlot: what a drop needs the chain's history to reach back to", () => {
	const submission = { transactionSignature: TX_SIG, submittedAt: NOW.toISOString(), heightAtSubmission: 900 };

	it("a blockhash lifetime before the Node's slot at the report, or the Cranker's slot if lower", () => {
		expect(earliestLandingSlot({ ...submission, slotAtSubmission: 1100 }, 300)).toBe(800);
		expect(earliestLandingSlot({ ...submission, slotAtSubmission: 1100, slot: 750 }, 300)).toBe(750);
		expect(earliestLandingSlot({ ...submission, slotAtSubmission: 1100, slot: 5000 }, 300)).toBe(800);
		// A lease holder's made-up slot 0 reaches back a day and some, no further.
		expect(earliestLandingSlot({ ...submission, slotAtSubmission: 1_000_000, slot: 0 }, 300)).toBe(750_000);
		// Stored before the Node read the slot: the block height then, never above it.
		expect(earliestLandingSlot(submission, 300)).toBe(600);
		expect(earliestLandingSlot({ transactionSignature: TX_SIG, submittedAt: NOW.toISOString() }, 300)).toBeUndefined();
	});
});

describe("leaseForPayout: the lease rules of SPEC §2.5, in order", () => {
	it("answers the holder's live lease", () => {
		expect(leaseForPayout(record("CRANKER_LEASED"), CRANKER_A, NOW.getTime(), null)).toEqual(record("CRANKER_LEASED").lease);
	});

	it("refuses: not leased 409, another holder 403, lapsed lease 409, expired intent 422", () => {
		expectRefusal(() => leaseForPayout(record("VERIFIED"), CRANKER_A, NOW.getTime(), null), "INVALID_TRANSITION", 409);
		expectRefusal(() => leaseForPayout(record("SUBMITTED"), CRANKER_A, NOW.getTime(), null), "INVALID_TRANSITION", 409);
		expectRefusal(() => leaseForPayout(record("CRANKER_LEASED", { lease: lease(CRANKER_A, -1) }), CRANKER_B, NOW.getTime(), null), "NOT_LEASE_HOLDER", 403);
		expectRefusal(() => leaseForPayout(record("CRANKER_LEASED", { lease: lease(CRANKER_A, -1) }), CRANKER_A, NOW.getTime(), null), "LEASE_EXPIRED", 409);
		const err = expectRefusal(() => leaseForPayout(record("CRANKER_LEASED", { expiresAt: at(-1) }), CRANKER_A, NOW.getTime(), null), "EVIDENCE_INCONSISTENT", 422);
		expect(err.data).toEqual({ reason: "EXPIRED" });
	});
});

describe("rejectReplacedRoute: a leased intent whose signed route a newer version replaced", () => {
	const leased = record("CRANKER_LEASED");
	const signed = leased.request.recipientRouteVersion;

	it("is REJECTED (ROUTE_MISMATCH) by the node once a newer version is live", () => {
		const next = rejectReplacedRoute(leased, signed + 1, at(0))!;
		expect(next).toMatchObject({ state: "REJECTED", stateVersion: leased.stateVersion + 1, rejectionReason: "ROUTE_MISMATCH", nonceKey: null });
		expect(next.history.at(-1)).toEqual({ state: "REJECTED", at: at(0), reason: "ROUTE_MISMATCH" });
	});

	it("is left as it is while its version is the live one, or newer (a registry behind), or it is not leased", () => {
		expect(rejectReplacedRoute(leased, signed, at(0))).toBeNull();
		expect(rejectReplacedRoute(leased, signed - 1, at(0))).toBeNull();
		for (const state of ["VERIFIED", "SUBMITTED", "CONFIRMED", "REJECTED"] as const) expect(rejectReplacedRoute(record(state), signed + 1, at(0))).toBeNull();
	});
});

describe("applyMove", () => {
	it("appends a history entry with by and reason, and bumps stateVersion", () => {
		const rec = record("VERIFIED");
		const next = applyMove(rec, "expiry", "REJECTED", NOW.toISOString(), { reason: "EXPIRED", rejectionReason: "EXPIRED" });
		expect(next.stateVersion).toBe(rec.stateVersion + 1);
		expect(next.history).toHaveLength(rec.history.length + 1);
		expect(next.history.at(-1)).toEqual({ state: "REJECTED", at: NOW.toISOString(), reason: "EXPIRED" });
		expect(next.rejectionReason).toBe("EXPIRED");
		expect(rec.history).toHaveLength(3);
	});

	it("keeps the first three history entries and the latest, up to HISTORY_MAX, and counts those it leaves out", () => {
		let rec = record("VERIFIED");
		for (let i = 0; rec.history.length < HISTORY_MAX; i++) rec = applyMove(rec, i % 2 ? "release" : "lease", i % 2 ? "VERIFIED" : "CRANKER_LEASED", at(i), { lease: i % 2 ? null : lease(CRANKER_A, 10_000) });
		expect(rec.historyOmitted).toBeUndefined();
		const next = applyMove(rec, "release", "VERIFIED", at(999), { lease: null });
		expect(next.history).toHaveLength(HISTORY_MAX);
		expect(next.history.slice(0, 3)).toEqual(rec.history.slice(0, 3));
		expect(next.history.slice(3, -1)).toEqual(rec.history.slice(4));
		expect(next.history.at(-1)).toEqual({ state: "VERIFIED", at: at(999) });
		expect(next.historyOmitted).toBe(1);
		expect(applyMove(next, "lease", "CRANKER_LEASED", at(1000), { lease: lease(CRANKER_A, 10_000) }).historyOmitted).toBe(2);
		expect(toWorkerView(next).historyOmitted).toBe(1);
		expect("historyOmitted" in toWorkerView(rec)).toBe(false);
	});

	it("keeps leaseExpiresAt in step with the lease", () => {
		const leased = applyMove(record("VERIFIED"), "lease", "CRANKER_LEASED", NOW.toISOString(), { lease: lease(CRANKER_A, 10_000) });
		expect(leased.leaseExpiresAt).toBe(at(10_000));
		expect(applyMove(leased, "release", "VERIFIED", NOW.toISOString(), { lease: null }).leaseExpiresAt).toBeNull();
	});
});

describe("isExpired / rejectedAtVerification / statuses", () => {
	const expiresAtMs = Date.parse(record("VERIFIED").expiresAt);

	it("is expired at and after expiresAt, not before", () => {
		const rec = record("VERIFIED");
		expect(isExpired(rec, expiresAtMs - 1, null)).toBe(false);
		expect(isExpired(rec, expiresAtMs, null)).toBe(true);
	});

	it("is expired once the latest slot reaches expiresAtSlot; a null slot is ignored", () => {
		const rec = record("VERIFIED");
		expect(isExpired(rec, NOW.getTime(), rec.expiresAtSlot - 1)).toBe(false);
		expect(isExpired(rec, NOW.getTime(), rec.expiresAtSlot)).toBe(true);
		expect(isExpired(rec, NOW.getTime(), null)).toBe(false);
		expect(isExpired({ ...rec, expiresAtSlot: 0 }, NOW.getTime(), 0)).toBe(true);
	});

	it("rejectedAtVerification tells a verification refusal from a later rejection", () => {
		expect(rejectedAtVerification(record("REJECTED"))).toBe(true);
		expect(rejectedAtVerification(move(record("CRANKER_LEASED"), { status: "REJECTED", crankerPubkey: CRANKER_A, reason: "x" }))).toBe(false);
		expect(rejectedAtVerification(record("VERIFIED"))).toBe(false);
	});

	it("maps states to public statuses as SPEC §3 says", () => {
		expect(PUBLIC_STATUS).toEqual({
			RECEIVED: "pending",
			NODE_VERIFYING: "pending",
			VERIFIED: "pending",
			CRANKER_LEASED: "pending",
			SUBMITTED: "pending",
			CONFIRMED: "executed",
			REJECTED: "canceled"
		});
		expect(statesOfStatus("pending")).toEqual(["RECEIVED", "NODE_VERIFYING", "VERIFIED", "CRANKER_LEASED", "SUBMITTED"]);
		expect(statesOfStatus("executed")).toEqual(["CONFIRMED"]);
		expect(statesOfStatus("canceled")).toEqual(["REJECTED"]);
		expect(statesOfStatus("SUBMITTED")).toEqual(["SUBMITTED"]);
		expect(statesOfStatus("nonsense")).toEqual([]);
	});
});

describe("views", () => {
	const PUBLIC_KEYS = [
		"id",
		"paymentId",
		"status",
		"receiverStatus",
		"recipientTin",
		"tokenMintAddress",
		"amount",
		"feeLimit",
		"senderWallet",
		"expiresAt",
		"expiresAtSlot",
		"transactionCommitment",
		"createdAt",
		"updatedAt",
		"epoch"
	];

	it.each(INTENT_STATES)("the public view of a %s intent has no signature, nonce, route commitment or lease", state => {
		const view = toPublicView(record(state));
		const text = JSON.stringify(view);
		expect(text).not.toContain(SENDER_SIGNATURE);
		expect(text).not.toContain(NONCE);
		expect(text).not.toContain(ROUTE_COMMITMENT);
		expect(text).not.toContain(CRANKER_A);
		for (const key of ["senderAuthorizationSignature", "senderAuthorizationNonce", "senderAuthorizationMessage", "recipientRouteCommitment", "lease", "submission", "history", "stateVersion", "request"])
			expect(view).not.toHaveProperty(key);
		expect(Object.keys(view).filter(k => !PUBLIC_KEYS.includes(k)).sort()).toEqual(
			state === "CONFIRMED" ? ["transactionSignature"] : state === "REJECTED" ? ["rejectionReason"] : []
		);
	});

	it("the public view reads its fields from the record", () => {
		const rec = record("CONFIRMED");
		expect(toPublicView(rec)).toEqual({
			id: "int_kat_0001",
			paymentId: "pay_kat_0001",
			status: "executed",
			receiverStatus: "CONFIRMED",
			recipientTin: "1234567897",
			tokenMintAddress: rec.request.tokenMintAddress,
			amount: "1500000",
			feeLimit: "5000",
			senderWallet: rec.senderWallet,
			expiresAt: rec.request.senderAuthorizationExpiresAt,
			expiresAtSlot: 345678901,
			transactionCommitment: rec.transactionCommitment,
			createdAt: rec.createdAt,
			updatedAt: rec.updatedAt,
			transactionSignature: TX_SIG,
			epoch: 1
		});
	});

	it("transactionSignature appears only once CONFIRMED, rejectionReason only once REJECTED", () => {
		expect(toPublicView(record("SUBMITTED"))).not.toHaveProperty("transactionSignature");
		expect(toPublicView(record("REJECTED")).rejectionReason).toBe("INVALID_SIGNATURE");
		expect(toPublicView(record("VERIFIED", { rejectionReason: "stale" }))).not.toHaveProperty("rejectionReason");
	});

	it("the worker view carries the whole request, stateVersion, lease, submission and history", () => {
		const rec = record("SUBMITTED");
		const view = toWorkerView(rec);
		expect(view).toMatchObject({ ...rec.request, ...toPublicView(rec) });
		expect(view.senderAuthorizationSignature).toBe(SENDER_SIGNATURE);
		expect(view.senderAuthorizationNonce).toBe(NONCE);
		expect(view.recipientRouteCommitment).toBe(ROUTE_COMMITMENT);
		expect(view.lease).toEqual(rec.lease);
		expect(view.lease?.crankerPubkey).toBe(CRANKER_A);
		expect(view.submission).toEqual(rec.submission);
		expect(view.history).toEqual(rec.history);
		expect(view.stateVersion).toBe(rec.stateVersion);
		expect(view.status).toBe("pending");
		expect(view.expiresAt).toBe(rec.request.senderAuthorizationExpiresAt);
	});

	it("the worker view shows a null lease as null", () => {
		const view = toWorkerView(record("VERIFIED"));
		expect(view).toHaveProperty("lease", null);
		expect(view).toHaveProperty("submission", null);
	});
});

describe("restamped: a move carries the time it is stored at", () => {
	it("takes the new time for updatedAt and the entry the move added, and keeps everything else", () => {
		const current = record("CRANKER_LEASED");
		const next = applyMove(current, "submit", "SUBMITTED", "2026-01-01T00:00:00.000Z", { onChainChecked: false });
		const stored = restamped(current, next, "2026-01-01T00:00:02.500Z");
		expect(stored.updatedAt).toBe("2026-01-01T00:00:02.500Z");
		expect(stored.history.at(-1)).toEqual({ ...next.history.at(-1), at: "2026-01-01T00:00:02.500Z" });
		expect(stored.history.slice(0, -1)).toEqual(current.history);
		expect({ ...stored, updatedAt: next.updatedAt, history: next.history }).toEqual(next);
	});

	it("restamps the added entry of a full history too, where the move dropped the oldest and the length stayed", () => {
		let current = record("VERIFIED");
		while (current.history.length < HISTORY_MAX || current.state !== "VERIFIED")
			current = current.state === "VERIFIED" ? applyMove(current, "lease", "CRANKER_LEASED", at(0), { lease: lease(CRANKER_A, 10_000) }) : applyMove(current, "release", "VERIFIED", at(0), { lease: null });
		const next = applyMove(current, "lease", "CRANKER_LEASED", "2026-01-01T00:00:00.000Z", { lease: lease(CRANKER_A, 10_000) });
		expect(next.history).toHaveLength(current.history.length);
		expect(restamped(current, next, "2026-01-01T00:00:02.500Z").history.at(-1)?.at).toBe("2026-01-01T00:00:02.500Z");
	});

	it("leaves a record that did not move as it is", () => {
		const current = record("VERIFIED");
		expect(restamped(current, { ...current }, "2030-01-01T00:00:00.000Z")).toEqual(current);
	});
});

describe("GET /intent-work pages (workPageViews)", () => {
	const views = [toWorkerView(record("VERIFIED")), toWorkerView({ ...record("VERIFIED"), id: "int_second", createdAt: "2026-01-01T00:00:09.000Z" })];

	test("a page of texts gives its views, its lease length and its cursor as they are", () => {
		const texts = views.map(view => JSON.stringify(view));
		const last = { createdAt: views[1].createdAt, id: views[1].id };
		expect(workPageViews({ intents: texts, leaseTtlMs: 1500, last })).toEqual({ views: texts, leaseTtlMs: 1500, last, cut: false });
		expect(workPageViews({ intents: texts, leaseTtlMs: 1500, last, cut: true }).cut).toBe(true);
	});

	test("a page of whole items (a mempool of the previous version) gives the same: views, lease length, and the last item as the cursor", () => {
		const items: IntentWorkItem[] = views.map(intent => ({ intent, leaseTtlMs: 1500 }));
		const page = workPageViews(items);
		expect(page).toEqual({ views: views.map(view => JSON.stringify(view)), leaseTtlMs: 1500, last: { createdAt: views[1].createdAt, id: views[1].id }, cut: false });
		// Wrapped again, the views are the items the old mempool answered.
		const { before, after } = workItemWrapper(page.leaseTtlMs!);
		expect(page.views.map(view => JSON.parse(before + view + after) as unknown)).toEqual(items);
	});

	test("an empty page of either form has no lease length and no cursor", () => {
		expect(workPageViews([])).toEqual({ views: [], leaseTtlMs: null, last: null, cut: false });
		expect(workPageViews({ intents: [], leaseTtlMs: 1500, last: null })).toEqual({ views: [], leaseTtlMs: 1500, last: null, cut: false });
	});

	test("fittingCount: the views, from the first, within the byte budget; always at least one, so a page moves on", () => {
		expect(fittingCount([4, 4, 4], 8)).toBe(2);
		expect(fittingCount([4, 4, 4], 12)).toBe(3);
		expect(fittingCount([20, 1], 8)).toBe(1);
		expect(fittingCount([], 8)).toBe(0);
	});
});
