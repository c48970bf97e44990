/** The error catalogue of SPEC §7. */
import { ERROR_STATUS, ServiceError, isServiceError, rejectionError } from "../../lib/errors";

/** SPEC §7's table, copied type by type. */
const SPEC_TABLE: Record<string, number> = {
	VALIDATION_ERROR: 422,
	INVALID_MESSAGE: 400,
	INVALID_SIGNATURE: 400,
	EXPIRED: 400,
	UNSUPPORTED_FUNDING_MODE: 400,
	UNKNOWN_TIN: 422,
	ROUTE_MISMATCH: 422,
	NONCE_REUSED: 409,
	IDEMPOTENCY_CONFLICT: 409,
	VERSION_CONFLICT: 409,
	INVALID_TRANSITION: 409,
	LEASE_EXPIRED: 409,
	STALE_HEARTBEAT: 409,
	NOT_ON_CHAIN: 409,
	SUBMISSION_LIVE: 409,
	SETTLEMENT_MISMATCH: 422,
	UNSUPPORTED_MEDIA_TYPE: 415,
	UNAUTHORIZED: 401,
	FORBIDDEN: 403,
	NOT_LEASE_HOLDER: 403,
	CRANKER_NOT_ALLOWED: 403,
	NOT_OWNER: 403,
	NOT_FOUND: 404,
	PAYLOAD_TOO_LARGE: 413,
	RATE_LIMITED: 429,
	REGISTRY_INVALID: 503,
	VERIFIER_UNAVAILABLE: 503,
	NOT_READY: 503,
	CHAIN_UNAVAILABLE: 503,
	SHUTTING_DOWN: 503
};

describe("ERROR_STATUS", () => {
	it.each(Object.entries(SPEC_TABLE))("%s is %i as in SPEC §7", (type, status) => {
		expect(ERROR_STATUS[type as keyof typeof ERROR_STATUS]).toBe(status);
	});

	it("adds only the 422 EVIDENCE_INCONSISTENT of §2.5, the 500 INTERNAL_ERROR, the 409 LIMIT_REACHED of the webhook routes and the HTTP parser's 400, 408 and 431 (not in the SPEC)", () => {
		const extra = Object.keys(ERROR_STATUS).filter(type => !(type in SPEC_TABLE));
		expect(extra.sort()).toEqual(["BAD_REQUEST", "EVIDENCE_INCONSISTENT", "HEADERS_TOO_LARGE", "INTERNAL_ERROR", "LIMIT_REACHED", "REQUEST_TOO_SLOW"]);
		expect(ERROR_STATUS.LIMIT_REACHED).toBe(409);
		expect(ERROR_STATUS.EVIDENCE_INCONSISTENT).toBe(422);
	});
});

describe("ServiceError", () => {
	it("carries moleculer's error shape", () => {
		const err = new ServiceError("NOT_LEASE_HOLDER", "Another Cranker holds the lease", { id: "int_1" });
		expect(err).toBeInstanceOf(Error);
		expect(isServiceError(err)).toBe(true);
		expect({ name: err.name, message: err.message, code: err.code, type: err.type, data: err.data, retryable: err.retryable }).toEqual({
			name: "NotLeaseHolderError",
			message: "Another Cranker holds the lease",
			code: 403,
			type: "NOT_LEASE_HOLDER",
			data: { id: "int_1" },
			retryable: false
		});
	});

	it("names VALIDATION_ERROR ValidationError (no doubled suffix) and has no data when none is given", () => {
		const err = new ServiceError("VALIDATION_ERROR", "bad");
		expect(err.name).toBe("ValidationError");
		expect(err.data).toBeUndefined();
		expect(JSON.parse(JSON.stringify(err))).not.toHaveProperty("data");
		expect(new ServiceError("INTERNAL_ERROR", "x").name).toBe("InternalError");
	});

	it("isServiceError is false for other errors", () => {
		expect(isServiceError(new Error("x"))).toBe(false);
		expect(isServiceError({ type: "NOT_FOUND", code: 404 })).toBe(false);
	});
});

describe("rejectionError", () => {
	it("gives the reason's status, a fixed message and { id, paymentId }", () => {
		const err = rejectionError("ROUTE_MISMATCH", { id: "int_1", paymentId: "pay_12345678" });
		expect(err.code).toBe(422);
		expect(err.type).toBe("ROUTE_MISMATCH");
		expect(err.data).toEqual({ id: "int_1", paymentId: "pay_12345678" });
		expect(err.message).toBe("The recipient route does not match the TIN's active route");
	});

	it("appends the detail, so a replayed rejection reads the same as the first", () => {
		const a = rejectionError("EXPIRED", { id: "int_1", paymentId: "pay_12345678" }, "expiresAt has passed");
		const b = rejectionError("EXPIRED", { id: "int_1", paymentId: "pay_12345678" }, "expiresAt has passed");
		expect(a.message).toBe("The authorization has expired: expiresAt has passed");
		expect(b.message).toBe(a.message);
		expect(a.code).toBe(400);
	});

	it("NONCE_REUSED is a 409", () => {
		expect(rejectionError("NONCE_REUSED", { id: "i", paymentId: "p" }).code).toBe(409);
	});
});
