/**
 * POST /intents and the intent reads over HTTP against the real gateway: acceptance, idempotency,
 * every rejection of SPEC §1 in order, schema refusals that store nothing, and load.
 */
import http from "node:http";
import { MINT, iso, newRoute, newWallet, signedIntent, writeSeedFile, type Wallet } from "../helpers/fixtures";
import { startNode, worker, type TestNode } from "../helpers/node";
import type { GenesisRoute } from "../../lib/registry";

let node: TestNode;
let route: GenesisRoute;
let wallet: Wallet;

beforeAll(async () => {
	route = newRoute();
	wallet = newWallet();
	const dataDir = (await import("../helpers/node")).tempDir();
	node = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]) }, dataDir);
});
afterAll(() => node?.stop());

/** fetch refuses a GET with a body; a client may still send one. */
function getWithBody(url: string, body: string): Promise<number> {
	return new Promise((resolve, reject) => {
		const req = http.request(url, { method: "GET", headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) } }, res => {
			res.resume();
			resolve(res.statusCode ?? 0);
		});
		req.on("error", reject);
		req.end(body);
	});
}

async function totalIntents(): Promise<number> {
	const { body } = await node.http("POST", "/", { include: ["counts"] });
	return Object.values(body.counts as Record<string, number>).reduce((a, b) => a + b, 0);
}

describe("POST /intents accepts a signed intent", () => {
	it("verifies it and answers 201 with the public view", async () => {
		const request = signedIntent(wallet, route);
		const { status, body, headers } = await node.http("POST", "/intents", request);
		expect(status).toBe(201);
		expect(headers.get("location")).toBe(`/intents/${body.id}`);
		expect(body).toMatchObject({
			paymentId: request.paymentId,
			status: "pending",
			receiverStatus: "VERIFIED",
			recipientTin: route.tin,
			tokenMintAddress: MINT,
			amount: request.amount,
			feeLimit: request.feeLimit,
			senderWallet: wallet.address,
			expiresAt: request.senderAuthorizationExpiresAt,
			expiresAtSlot: request.expiresAtSlot,
			transactionCommitment: request.transactionCommitment,
			epoch: 1
		});
		expect(body.id).toMatch(/^int_[0-9a-f]{32}$/);
		for (const secret of ["senderAuthorizationSignature", "senderAuthorizationNonce", "recipientRouteCommitment", "lease", "senderAuthorizationMessage"])
			expect(body).not.toHaveProperty(secret);
	});

	it("serves the public view to anyone and the worker view with a worker key", async () => {
		const request = signedIntent(wallet, route);
		const { body: created } = await node.http("POST", "/intents", request);
		const pub = await node.http("GET", `/intents/${created.id}`);
		expect(pub.status).toBe(200);
		expect(pub.body).toEqual(created);
		const wrongKey = await node.http("GET", `/intents/${created.id}`, undefined, { "x-api-key": "not-the-key" });
		expect(wrongKey.body).toEqual(created);

		const full = await node.http("GET", `/intents/${created.id}`, undefined, worker);
		expect(full.status).toBe(200);
		expect(full.body).toMatchObject({ ...created, ...request, stateVersion: 3, lease: null, submission: null });
		expect(full.body.history.map((h: { state: string }) => h.state)).toEqual(["RECEIVED", "NODE_VERIFYING", "VERIFIED"]);
		// A shared cache in front (a CDN, a proxy's cache) keeps no worker's view, nor serves one view for the other (a review).
		expect(full.headers.get("cache-control")).toBe("private, no-store");
		for (const answer of [pub, full]) expect(answer.headers.get("vary")).toMatch(/\bX-Api-Key\b/i);
		expect(pub.headers.get("cache-control")).toBeNull();
		// Nor a worker route's answer, a refusal included.
		for (const [key, status] of [[worker, 200], [{}, 401]] as const) {
			const list = await node.http("GET", "/intent-work?limit=5", undefined, key);
			expect(list.status).toBe(status);
			expect(list.headers.get("cache-control")).toBe("private, no-store");
		}
	});

	it("answers 404 NOT_FOUND for an unknown id", async () => {
		const { status, body } = await node.http("GET", "/intents/int_doesnotexist");
		expect(status).toBe(404);
		expect(body).toMatchObject({ code: 404, type: "NOT_FOUND" });
	});
});

describe("idempotency on paymentId", () => {
	it("answers 200 with the same record for the same body, whatever the key order", async () => {
		const request = signedIntent(wallet, route);
		const first = await node.http("POST", "/intents", request);
		const reordered = Object.fromEntries(Object.entries(request).reverse());
		const again = await node.http("POST", "/intents", reordered);
		expect(again.status).toBe(200);
		expect(again.body).toEqual(first.body);
	});

	it("refuses a different body under the same paymentId with 409 and changes nothing", async () => {
		const request = signedIntent(wallet, route);
		const first = await node.http("POST", "/intents", request);
		const before = await totalIntents();
		const other = signedIntent(wallet, route, { paymentId: request.paymentId, amount: "2" });
		const { status, body } = await node.http("POST", "/intents", other);
		expect(status).toBe(409);
		expect(body).toMatchObject({ type: "IDEMPOTENCY_CONFLICT", code: 409 });
		// Whoever guesses a paymentId learns nothing of the intent behind it.
		expect(body.data).toEqual({ paymentId: request.paymentId });
		expect(await totalIntents()).toBe(before);
		expect((await node.http("GET", `/intents/${first.body.id}`)).body.amount).toBe(request.amount);
	});

	it("keeps one record when the same submission races itself", async () => {
		const request = signedIntent(wallet, route);
		const answers = await Promise.all(Array.from({ length: 8 }, () => node.http("POST", "/intents", request)));
		expect(new Set(answers.map(a => a.body.id)).size).toBe(1);
		expect(answers.filter(a => a.status === 201)).toHaveLength(1);
		expect(answers.every(a => a.status === 200 || a.status === 201)).toBe(true);
	});
});

describe("verification refusals (SPEC §1), in order", () => {
	const other = newWallet();
	type Case = [string, () => ReturnType<typeof signedIntent>, number, string];
	// SPEC §2.1: only a signer holds a paymentId. These leave no record and no lasting row.
	const unrecorded: Case[] = [
		["a field changed after signing", () => signedIntent(wallet, route, {}, { amount: "999" }), 400, "INVALID_MESSAGE"],
		["a message that is not the canonical one", () => { const r = signedIntent(wallet, route); return { ...r, senderAuthorizationMessage: `${r.senderAuthorizationMessage}\n` }; }, 400, "INVALID_MESSAGE"],
		["a wrong transactionCommitment", () => signedIntent(wallet, route, {}, { transactionCommitment: "0".repeat(64) }), 400, "INVALID_MESSAGE"],
		["a recipientHash other than the TIN", () => signedIntent(wallet, route, {}, { recipientHash: "1234567897" }), 400, "INVALID_MESSAGE"],
		["an unsupported funding mode", () => signedIntent(wallet, route, { senderFundingMode: "custodial_v1" }), 400, "UNSUPPORTED_FUNDING_MODE"],
		["a bad message before a bad funding mode", () => signedIntent(wallet, route, { senderFundingMode: "custodial_v1" }, { amount: "7" }), 400, "INVALID_MESSAGE"],
		["another wallet's signature", () => { const r = signedIntent(wallet, route); return { ...r, senderAuthorizationSignature: other.sign(r.senderAuthorizationMessage) }; }, 400, "INVALID_SIGNATURE"],
		["a bad signature before an expiry", () => { const r = signedIntent(wallet, route, { senderAuthorizationIssuedAt: iso(-120_000), senderAuthorizationExpiresAt: iso(-60_000) }); return { ...r, senderAuthorizationSignature: other.sign(r.senderAuthorizationMessage) }; }, 400, "INVALID_SIGNATURE"],
		["issuedAt more than 60 s ahead", () => signedIntent(wallet, route, { senderAuthorizationIssuedAt: iso(5 * 60_000), senderAuthorizationExpiresAt: iso(10 * 60_000) }), 400, "INVALID_MESSAGE"],
		["a validity over 24 h", () => signedIntent(wallet, route, { senderAuthorizationExpiresAt: iso(25 * 3600_000) }), 400, "INVALID_MESSAGE"]
	];
	// Signed by the sender, then refused: the record keeps its rejectionReason.
	const recorded: Case[] = [
		["an expired authorization", () => signedIntent(wallet, route, { senderAuthorizationIssuedAt: iso(-120_000), senderAuthorizationExpiresAt: iso(-60_000) }), 400, "EXPIRED"],
		["an unknown TIN", () => signedIntent(wallet, { ...route, tin: newRoute().tin }), 422, "UNKNOWN_TIN"],
		["a stale route version", () => signedIntent(wallet, { ...route, routeVersion: 2 }), 422, "ROUTE_MISMATCH"],
		["another route commitment", () => signedIntent(wallet, { ...route, routeCommitment: "ab".repeat(32) }), 422, "ROUTE_MISMATCH"]
	];

	it.each(unrecorded)("refuses %s, leaving no record: the paymentId stays free for its signer", async (_name, build, status, type) => {
		const request = build();
		const before = await totalIntents();
		const answer = await node.http("POST", "/intents", request);
		expect(answer.status).toBe(status);
		expect(answer.body).toMatchObject({ code: status, type });
		expect(answer.body.data).toEqual({ paymentId: request.paymentId });
		expect(await totalIntents()).toBe(before);

		const replay = await node.http("POST", "/intents", request);
		expect(replay.body).toEqual(answer.body);
		// The sender's own signed body under that paymentId is accepted afterwards.
		expect((await node.http("POST", "/intents", signedIntent(wallet, route, { paymentId: request.paymentId }))).status).toBe(201);
	});

	it.each(recorded)("refuses %s, stored with its reason", async (_name, build, status, type) => {
		const request = build();
		const answer = await node.http("POST", "/intents", request);
		expect(answer.status).toBe(status);
		expect(answer.body).toMatchObject({ code: status, type, data: { paymentId: request.paymentId } });
		expect(answer.body.data.id).toMatch(/^int_/);

		const stored = await node.http("GET", `/intents/${answer.body.data.id}`);
		expect(stored.body).toMatchObject({ status: "canceled", receiverStatus: "REJECTED", rejectionReason: type });

		const replay = await node.http("POST", "/intents", request);
		expect(replay.status).toBe(status);
		expect(replay.body).toEqual(answer.body);
	});

	it("refuses a nonce this sender already used, and frees it once its holder is rejected", async () => {
		const nonce = "shared_nonce_0123456789";
		const first = await node.http("POST", "/intents", signedIntent(wallet, route, { senderAuthorizationNonce: nonce }));
		expect(first.status).toBe(201);
		const reuse = await node.http("POST", "/intents", signedIntent(wallet, route, { senderAuthorizationNonce: nonce }));
		expect(reuse.status).toBe(409);
		expect(reuse.body).toMatchObject({ type: "NONCE_REUSED", data: { id: expect.any(String) } });

		// Another sender may use the same nonce string: nonces are per wallet.
		expect((await node.http("POST", "/intents", signedIntent(newWallet(), route, { senderAuthorizationNonce: nonce }))).status).toBe(201);
	});

	it("lets only one of two concurrent intents with the same nonce through", async () => {
		const nonce = "race_nonce_0123456789ab";
		const answers = await Promise.all([0, 1, 2, 3].map(() => node.http("POST", "/intents", signedIntent(wallet, route, { senderAuthorizationNonce: nonce }))));
		expect(answers.map(a => a.status).sort()).toEqual([201, 409, 409, 409]);
	});
});

describe("bad input is refused with SPEC §7 bodies and stores nothing", () => {
	const invalid: [string, (r: Record<string, unknown>) => unknown][] = [
		["an unknown field", r => ({ ...r, extra: 1 })],
		["a missing field", ({ amount: _amount, ...r }) => r],
		["a zero amount", r => ({ ...r, amount: "0" })],
		["an amount over u64", r => ({ ...r, amount: "18446744073709551616" })],
		["an amount as a JS number", r => ({ ...r, amount: 1500000 })],
		["an amount with a leading zero", r => ({ ...r, amount: "01" })],
		["a TIN with a bad check digit", r => ({ ...r, recipientTin: "1234567890" })],
		["a sender that is not 32 bytes of base58", r => ({ ...r, senderWallet: "0OIl" })],
		["a signature of the wrong length", r => ({ ...r, senderAuthorizationSignature: MINT })],
		["an uppercase commitment", r => ({ ...r, recipientRouteCommitment: String(r.recipientRouteCommitment).toUpperCase() })],
		["a time without milliseconds", r => ({ ...r, senderAuthorizationIssuedAt: "2026-11-21T18:00:00Z" })],
		["a short paymentId", r => ({ ...r, paymentId: "short" })],
		["a short nonce", r => ({ ...r, senderAuthorizationNonce: "tooshort" })],
		["a slot beyond 2^53-1", r => ({ ...r, expiresAtSlot: 2 ** 53 })],
		["a route version 0", r => ({ ...r, recipientRouteVersion: 0 })],
		["an array body", () => [1, 2]],
		["a __proto__ key", r => JSON.parse(JSON.stringify(r).replace("{", '{"__proto__":{"polluted":true},'))]
	];

	it.each(invalid)("refuses %s with 422 VALIDATION_ERROR", async (_name, mutate) => {
		const before = await totalIntents();
		const { status, body } = await node.http("POST", "/intents", JSON.stringify(mutate(signedIntent(wallet, route) as unknown as Record<string, unknown>)));
		expect(status).toBe(422);
		expect(body).toMatchObject({ name: "ValidationError", code: 422, type: "VALIDATION_ERROR" });
		expect(Array.isArray(body.data)).toBe(true);
		expect(JSON.stringify(body)).not.toMatch(/at .*\.ts:\d+/);
		expect(await totalIntents()).toBe(before);
	});

	it("refuses malformed JSON and a non-JSON body with 422", async () => {
		for (const [payload, type] of [["{not json", "application/json"], ["amount=1", "application/x-www-form-urlencoded"]]) {
			const { status, body } = await node.http("POST", "/intents", payload, { "content-type": type });
			expect(status).toBe(422);
			expect(body.type).toBe("VALIDATION_ERROR");
		}
	});

	it("says why a JSON body is refused as a whole, naming $body (a reader of the docs found one message for every reason, and an array refused field by field)", async () => {
		const reasons: [payload: string, message: string][] = [
			["{not json", "The body is not valid JSON"],
			["12", "The body is not a JSON object"],
			["null", "The body is not a JSON object"],
			["[1]", "The body is a JSON array; every route takes a JSON object"],
			['{"__proto__":{}}', "The body holds the key __proto__"]
		];
		for (const [payload, message] of reasons) {
			const { status, body } = await node.http("POST", "/intents", payload);
			expect([status, body.message]).toEqual([422, message]);
			expect(body.data).toEqual([expect.objectContaining({ type: "json", field: "$body" })]);
		}
		// An enum's refusal names the value sent, then the allowed ones (fastest-validator's own message had them swapped).
		const { body } = await node.http("POST", "/", { include: ["bogus"] });
		expect(body.data).toEqual([expect.objectContaining({ type: "enumValue", message: expect.stringContaining("value 'bogus' is not one of the allowed values: epoch, crankers, counts") })]);
	});

	it("refuses a body over 65,536 bytes with 413 and accepts one just under", async () => {
		const big = JSON.stringify({ ...signedIntent(wallet, route), senderAuthorizationMessage: "x".repeat(65_536) });
		const tooLarge = await node.http("POST", "/intents", big);
		expect(tooLarge.status).toBe(413);
		expect(tooLarge.body).toMatchObject({ code: 413, type: "PAYLOAD_TOO_LARGE" });

		const request = signedIntent(wallet, route);
		const padded = JSON.stringify(request).replace("{", `{${" ".repeat(65_536 - JSON.stringify(request).length)}`);
		expect(Buffer.byteLength(padded)).toBe(65_536);
		expect((await node.http("POST", "/intents", padded)).status).toBe(201);
	});

	it("takes input from one place only: no query on POST, no body on GET, JSON bodies only", async () => {
		const request = signedIntent(wallet, route);
		const viaQuery = await node.http("POST", `/intents?recipientHash=${route.tin}`, request);
		expect(viaQuery.body).toMatchObject({ code: 422, type: "VALIDATION_ERROR" });
		const overridden = await node.http("POST", "/intents?paymentId=abcdefgh123", request);
		expect(overridden.status).toBe(422);
		expect(await getWithBody(`${node.url}/registry/tins/${route.tin}`, JSON.stringify({ tin: "1234567897" }))).toBe(422);
		for (const [payload, type] of [["garbage", "text/plain"], ["null", "application/json"], ["123", "application/json"], ['"x"', "application/json"]])
			expect((await node.http("POST", "/", payload, { "content-type": type })).status).toBe(422);
		// A media type that only begins like JSON is not read: refused, never answered with the body ignored.
		for (const type of ["application/jsonx", "application/json-seq", "application/json+evil"])
			for (const path of ["/", "/intents"]) expect([path, type, (await node.http("POST", path, '{"include":["counts"]}', { "content-type": type })).body]).toMatchObject([path, type, { code: 422, type: "VALIDATION_ERROR" }]);
		expect((await node.http("POST", "/", '{"include":["counts"]}', { "content-type": "Application/JSON; charset=UTF-8" })).status).toBe(200);
		expect((await node.http("POST", "/intents", request)).status).toBe(201);
	});

	it("refuses undecodable path segments with 422", async () => {
		for (const path of ["/intents/%ZZ", "/intents/%E0%A4%A", "/registry/tins/%ZZ"]) {
			const { status, body } = await node.http("GET", path);
			expect(status).toBe(422);
			expect(body.type).toBe("VALIDATION_ERROR");
		}
	});

	it("answers unknown routes with 404 NOT_FOUND", async () => {
		for (const [method, path] of [["GET", "/nope"], ["DELETE", "/intents/x"], ["GET", "/mempool/list"], ["POST", "/receiver/submit"]]) {
			const { status, body } = await node.http(method, path, method === "POST" ? {} : undefined);
			expect(status).toBe(404);
			expect(body).toMatchObject({ code: 404, type: "NOT_FOUND" });
		}
	});
});

describe("worker routes need the worker key", () => {
	// Three columns in every row: jest would take a missing third argument for a `done` callback.
	const routes: [string, string, unknown][] = [
		["GET", "/intents", undefined],
		["GET", "/intent-work", undefined],
		["PATCH", "/intents/int_x/status", {}],
		["POST", "/internal/settlement-authorizations/settlement", {}],
		["POST", "/internal/wake", undefined],
		["POST", "/crankers/heartbeat", {}]
	];
	it.each(routes)("%s %s: 401 without a key, 403 with a wrong one", async (method, path, body) => {
		const missing = await node.http(method, path, body);
		expect(missing.status).toBe(401);
		expect(missing.body).toMatchObject({ code: 401, type: "UNAUTHORIZED" });
		const wrong = await node.http(method, path, body, { "x-api-key": "wrong" });
		expect(wrong.status).toBe(403);
		expect(wrong.body).toMatchObject({ code: 403, type: "FORBIDDEN" });
		expect(JSON.stringify(wrong.body)).not.toContain("test-worker-key");
	});
});

describe("GET /intents (worker)", () => {
	it("lists newest first, filters by internal or public status, and bounds limit", async () => {
		const a = (await node.http("POST", "/intents", signedIntent(wallet, route))).body;
		const b = (await node.http("POST", "/intents", signedIntent(wallet, route))).body;
		const listed = await node.http("GET", "/intents?limit=2", undefined, worker);
		expect(listed.status).toBe(200);
		expect(listed.body.map((i: { id: string }) => i.id)).toEqual([b.id, a.id]);
		expect(listed.body[0]).not.toHaveProperty("senderAuthorizationSignature");
		// The kept views' texts, sent as one JSON array: each item is the record's public view as it is now.
		expect(listed.headers.get("content-type")).toBe("application/json; charset=utf-8");
		expect(Number(listed.headers.get("content-length"))).toBeGreaterThan(0);
		expect(listed.body).toStrictEqual([(await node.http("GET", `/intents/${b.id}`)).body, (await node.http("GET", `/intents/${a.id}`)).body]);

		const canceled = await node.http("GET", "/intents?status=canceled&limit=500", undefined, worker);
		expect(canceled.body.length).toBeGreaterThan(0);
		expect(canceled.body.every((i: { receiverStatus: string }) => i.receiverStatus === "REJECTED")).toBe(true);
		const verified = await node.http("GET", "/intents?status=VERIFIED&limit=500", undefined, worker);
		expect(verified.body.every((i: { receiverStatus: string }) => i.receiverStatus === "VERIFIED")).toBe(true);

		for (const bad of ["limit=0", "limit=501", "limit=abc", "status=nope"]) expect((await node.http("GET", `/intents?${bad}`, undefined, worker)).status).toBe(422);
	});
});

describe("load", () => {
	it("takes 200 concurrent submissions without a 5xx", async () => {
		const requests = Array.from({ length: 200 }, (_, i) => signedIntent(i % 2 ? wallet : newWallet(), route));
		const answers = await Promise.all(requests.map(r => node.http("POST", "/intents", r)));
		expect(answers.filter(a => a.status >= 500)).toEqual([]);
		expect(answers.every(a => a.status === 201)).toBe(true);
		expect(new Set(answers.map(a => a.body.id)).size).toBe(200);
	});

	it("answers each of many concurrent submissions (handed over in batches) with its own outcome", async () => {
		const kinds = ["signed", "forged", "unknown TIN", "invalid", "repeat"] as const;
		const repeated = signedIntent(newWallet(), route);
		await node.http("POST", "/intents", repeated);
		const requests = Array.from({ length: 100 }, (_, i) => {
			const kind = kinds[i % kinds.length];
			const request = signedIntent(newWallet(), kind === "unknown TIN" ? newRoute() : route);
			if (kind === "forged") return { kind, request: { ...request, senderAuthorizationSignature: newWallet().sign(request.senderAuthorizationMessage) } };
			if (kind === "invalid") return { kind, request: { ...request, amount: "-1" } };
			return { kind, request: kind === "repeat" ? repeated : request };
		});
		const answers = await Promise.all(requests.map(({ request }) => node.http("POST", "/intents", request)));
		const expected = { signed: [201, undefined], forged: [400, "INVALID_SIGNATURE"], "unknown TIN": [422, "UNKNOWN_TIN"], invalid: [422, "VALIDATION_ERROR"], repeat: [200, undefined] };
		answers.forEach((answer, i) => {
			const { kind, request } = requests[i];
			expect([kind, answer.status, answer.body.type]).toEqual([kind, ...expected[kind]]);
			if (answer.status < 300) expect(answer.body.paymentId).toBe(request.paymentId);
			else if (kind !== "invalid") expect(answer.body.data.paymentId).toBe(request.paymentId);
		});
	});
});
