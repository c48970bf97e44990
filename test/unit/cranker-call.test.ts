/**
 * lib/cranker-call: what an owner accepts as the request a Cranker signed for the call it is
 * asked to run: the route (method and path, behind PUBLIC_BASE_URL when set), and exactly the
 * signed body's members with the path's parameters; and the shape of what came over the bus.
 */
import { asCrankerRequest, crankerRouteOf, unsignedParamsProblem, verifyCrankerRequest, type CrankerRequest } from "../../lib/cranker-call";
import { crankerCallMeta, newWallet } from "../helpers/fixtures";

const cranker = newWallet();
const STATUS_ROUTE = crankerRouteOf("mempool.updateStatus")!;
const params = { id: "int_1", status: "CRANKER_LEASED", crankerPubkey: cranker.address, expectedVersion: 3 };

const requestFor = (targetUri: string, body: unknown, method = "PATCH"): CrankerRequest => ({ method, targetUri, headers: {}, body: Buffer.from(JSON.stringify(body)).toString("base64") });
const { id: _id, ...body } = params;

describe("unsignedParamsProblem", () => {
	test("the signed route and body are the call: null", () => {
		expect(unsignedParamsProblem(requestFor("http://node:3000/intents/int_1/status", body), STATUS_ROUTE, params, null)).toBeNull();
		// Members in another order, an id escaped in the path: the same call.
		const reordered = { expectedVersion: 3, crankerPubkey: cranker.address, status: "CRANKER_LEASED" };
		expect(unsignedParamsProblem(requestFor("http://node:3000/intents/int%5F1/status", reordered), STATUS_ROUTE, params, null)).toBeNull();
	});

	test.each([
		["another id in the path", "http://node:3000/intents/int_2/status", body, "PATCH"],
		["another route", "http://node:3000/tin-operations/int_1/verified", body, "PATCH"],
		["another method", "http://node:3000/intents/int_1/status", body, "POST"],
		["a query", "http://node:3000/intents/int_1/status?x=1", body, "PATCH"],
		["a trailing slash", "http://node:3000/intents/int_1/status/", body, "PATCH"],
		["a path that is not a URI's", "/intents/int_1/status", body, "PATCH"],
		["an undecodable path parameter", "http://node:3000/intents/%E0%A4%A/status", body, "PATCH"],
		["another status in the body", "http://node:3000/intents/int_1/status", { ...body, status: "REJECTED" }, "PATCH"],
		["a member fewer", "http://node:3000/intents/int_1/status", { status: "CRANKER_LEASED", crankerPubkey: cranker.address }, "PATCH"],
		["a member more", "http://node:3000/intents/int_1/status", { ...body, reason: "x" }, "PATCH"],
		["a body that is a list", "http://node:3000/intents/int_1/status", [body], "PATCH"]
	])("%s: refused", (_case, targetUri, signedBody, method) => {
		expect(unsignedParamsProblem(requestFor(targetUri, signedBody, method), STATUS_ROUTE, params, null)).toEqual(expect.any(String));
	});

	test("null members are no value, as the gateway reads them: the call without them is the signed one", () => {
		const { expectedVersion: _version, ...rest } = params;
		expect(unsignedParamsProblem(requestFor("http://node:3000/intents/int_1/status", { ...body, reason: null }), STATUS_ROUTE, params, null)).toBeNull();
		expect(unsignedParamsProblem(requestFor("http://node:3000/intents/int_1/status", { ...body, expectedVersion: null }), STATUS_ROUTE, rest, null)).toBeNull();
	});

	test("a body that is not JSON: refused", () => {
		const request = { ...requestFor("http://node:3000/intents/int_1/status", body), body: Buffer.from("{not json").toString("base64") };
		expect(unsignedParamsProblem(request, STATUS_ROUTE, params, null)).toBe("the signed body is not a JSON object the gateway takes");
	});

	test("with PUBLIC_BASE_URL, only a URI behind it is this Node's", () => {
		const base = "https://node.example/api";
		expect(unsignedParamsProblem(requestFor(`${base}/intents/int_1/status`, body), STATUS_ROUTE, params, base)).toBeNull();
		for (const other of ["https://staging.example/api/intents/int_1/status", "https://node.example/intents/int_1/status", "https://node.example/apix/intents/int_1/status"])
			expect(unsignedParamsProblem(requestFor(other, body), STATUS_ROUTE, params, base)).toBe("the signed URI is not this Node's");
	});
});

describe("what comes over the bus", () => {
	test("asCrankerRequest keeps the signed parts and refuses any other shape", async () => {
		const { crankerRequest } = await crankerCallMeta(cranker, "mempool.updateStatus", params);
		expect(asCrankerRequest({ ...crankerRequest, extra: 1 })).toStrictEqual(crankerRequest);
		for (const value of [null, "x", { ...crankerRequest, headers: { signature: "sig1=:x:" } }, { ...crankerRequest, body: 1 }, { ...crankerRequest, targetUri: "x".repeat(2 << 20) }])
			expect(asCrankerRequest(value)).toBeNull();
	});

	test("verifyCrankerRequest: the signer must be the crankerPubkey the call names", async () => {
		const { crankerRequest } = await crankerCallMeta(cranker, "mempool.updateStatus", params);
		await expect(verifyCrankerRequest(crankerRequest, cranker.address, Date.now())).resolves.toMatchObject({ ok: true, keyid: cranker.address });
		await expect(verifyCrankerRequest(crankerRequest, newWallet().address, Date.now())).rejects.toMatchObject({ type: "FORBIDDEN", data: { reason: "keyid-mismatch" } });
		await expect(verifyCrankerRequest({ ...crankerRequest, headers: {} }, cranker.address, Date.now())).rejects.toMatchObject({ type: "UNAUTHORIZED", data: { reason: "missing" } });
		await expect(verifyCrankerRequest(crankerRequest, cranker.address, Date.now() + 120_000)).rejects.toMatchObject({ type: "FORBIDDEN", data: { reason: "stale" } });
	});
});
