/**
 * refusalOf: any failure of one submission's call becomes that submission's answer, so that one
 * member of a batch never fails the others (some may be stored already).
 */
import { Errors } from "moleculer";
import { refusalOf } from "../../lib/intake";
import { ServiceError } from "../../lib/errors";

test("an error of the catalogue is answered as itself, this process's or rebuilt from another's", () => {
	expect(refusalOf(new ServiceError("IDEMPOTENCY_CONFLICT", "another body", { paymentId: "p" }))).toEqual({ refused: { type: "IDEMPOTENCY_CONFLICT", message: "another body", data: { paymentId: "p" } } });
	expect(refusalOf(Object.assign(new Error("no verifier"), { type: "VERIFIER_UNAVAILABLE" }))).toEqual({ refused: { type: "VERIFIER_UNAVAILABLE", message: "no verifier" } });
});

test("a call the bus did not answer is NOT_READY: a retry of the same body is safe", () => {
	for (const err of [new Errors.RequestTimeoutError({ action: "mempool.receive", nodeID: "owners-1" }), new Errors.ServiceNotAvailableError({ action: "mempool.receive" })])
		expect(refusalOf(err)).toEqual({ refused: { type: "NOT_READY", message: "The service is not ready to answer this request" } });
});

test("anything else is a bare INTERNAL_ERROR: its cause goes to the logger, never into the answer", () => {
	const logged: unknown[] = [];
	const cause = Object.assign(new Error("SQLITE_FULL: database or disk is full at /var/lib/scs/store.sqlite"), { code: "SQLITE_FULL" });
	for (const err of [cause, new Errors.MoleculerServerError("a handler failed", 500, "HANDLER_FAILED"), undefined, "thrown text"]) expect(refusalOf(err, failure => logged.push(failure))).toEqual({ refused: { type: "INTERNAL_ERROR", message: "Internal error" } });
	expect(logged).toEqual([cause, expect.any(Errors.MoleculerServerError), undefined, "thrown text"]);
});
