/**
 * The contract checker of the HTTP suites (test/helpers/contract.ts) fed answers that break the
 * OpenAPI document: each must be reported, or the suites' "every answer matches the contract"
 * would pass whatever the gateway sends.
 */
import { contractViolation, type ContractOptions } from "../helpers/contract";

const answer = (method: string, path: string, status: number, body: unknown, headers: Record<string, string> = {}, options?: ContractOptions) =>
	contractViolation(
		{ method, path, status, headers: new Headers({ "content-type": "application/json; charset=utf-8", ...headers }), text: typeof body === "string" ? body : JSON.stringify(body) },
		options
	);

const error = (status: number, type: string, name = "Error") => ({ name, message: "m", code: status, type });

describe("contractViolation", () => {
	it("passes answers the document describes (the control for every case below)", () => {
		expect(answer("GET", "/health/live", 200, { status: "live" })).toBeNull();
		expect(answer("GET", "/intents/int_x", 404, error(404, "NOT_FOUND"))).toBeNull();
		expect(answer("GET", "/no/such/route", 404, error(404, "NOT_FOUND"))).toBeNull();
		expect(answer("GET", "/epoch/status", 503, error(503, "NOT_READY"), { "retry-after": "1" })).toBeNull();
		expect(answer("GET", "/no/such/route", 503, error(503, "SHUTTING_DOWN"), { "retry-after": "1" })).toBeNull();
		expect(answer("OPTIONS", "/intents", 204, "")).toBeNull();
	});

	it("reports a status the operation does not declare", () => {
		expect(answer("GET", "/health/live", 418, error(418, "TEAPOT"))).toMatch(/status 418 is not declared for GET \/health\/live/);
		expect(answer("GET", "/no/such/route", 400, error(400, "VALIDATION_ERROR"))).toMatch(/400 to a path or method the document has no operation for/);
	});

	it("reports a content type the answer does not declare", () => {
		expect(contractViolation({ method: "GET", path: "/health/live", status: 200, headers: new Headers({ "content-type": "text/html" }), text: "<p>live</p>" })).toMatch(/content-type text\/html is not declared/);
		expect(contractViolation({ method: "GET", path: "/no/such/route", status: 404, headers: new Headers({ "content-type": "text/plain" }), text: "Not found" })).toMatch(/instead of application\/json/);
	});

	it("reports a body its schema refuses, or one that is not JSON", () => {
		expect(answer("GET", "/health/live", 200, { status: "dead" })).toMatch(/body/);
		expect(answer("GET", "/health/live", 200, "not json")).toMatch(/not JSON/);
		expect(answer("GET", "/intents/int_x", 404, { message: "m", code: 404 })).toMatch(/body/);
	});

	it("reports an error type that does not go with its status, routed or not", () => {
		expect(answer("GET", "/intents/int_x", 404, error(404, "FORBIDDEN"))).toMatch(/body/);
		expect(answer("GET", "/no/such/route", 404, error(404, "FORBIDDEN"))).toMatch(/type FORBIDDEN with status 404 \(expected NOT_FOUND\)/);
		expect(answer("POST", "/no/such/route", 413, error(413, "NOT_FOUND"))).toMatch(/expected PAYLOAD_TOO_LARGE/);
		expect(answer("GET", "/no/such/route", 503, error(503, "INTERNAL_ERROR"), { "retry-after": "1" })).toMatch(/expected NOT_READY or SHUTTING_DOWN/);
		expect(answer("GET", "/no/such/route", 404, { ...error(404, "NOT_FOUND"), code: 400 })).toMatch(/code is not the status 404/);
	});

	it("reports a declared header that is missing or malformed: Location on 201, Retry-After on 429 and 503", () => {
		// Checked before the body: a missing Location is named even though this body is no intent.
		expect(answer("POST", "/intents", 201, {})).toMatch(/declares the header Location, which did not come/);
		expect(answer("POST", "/intents", 201, {}, { location: "/intents/int_x" })).not.toMatch(/Location/);
		expect(answer("POST", "/intents", 429, error(429, "RATE_LIMITED"))).toMatch(/Retry-After, which did not come/);
		expect(answer("GET", "/epoch/status", 503, error(503, "NOT_READY"))).toMatch(/Retry-After, which did not come/);
		expect(answer("GET", "/epoch/status", 503, error(503, "NOT_READY"), { "retry-after": "soon" })).toMatch(/header Retry-After/);
		expect(answer("GET", "/no/such/route", 503, error(503, "SHUTTING_DOWN"))).toMatch(/without Retry-After/);
	});

	it("reports a 500 unless the test opts in, though every operation declares INTERNAL_ERROR", () => {
		const crash = error(500, "INTERNAL_ERROR", "InternalError");
		expect(answer("GET", "/epoch/status", 500, crash)).toMatch(/unexpected 500/);
		expect(answer("GET", "/no/such/route", 500, crash)).toMatch(/unexpected 500/);
		expect(answer("GET", "/epoch/status", 500, crash, {}, { allowInternalError: true })).toBeNull();
	});
});
