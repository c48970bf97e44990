/**
 * The worker side over HTTP: heartbeats, the work list, every row and refusal of SPEC §2.4,
 * lease races and expiry, payout authorizations, and the intent expiry sweep.
 */
import { ed25519 } from "@noble/curves/ed25519.js";
import { decodeBase58, encodeBase58 } from "../../lib/encoding";
import { buildPayoutMessage, payoutNullifier } from "../../lib/canonical";
import type { GenesisRoute } from "../../lib/registry";
import { DEFAULT_SETTLEMENT_PROGRAM_ID } from "../../lib/settlement";
import { iso, newRoute, newWallet, signedHeartbeat, signedIntent, walletOf, writeSeedFile, type Wallet } from "../helpers/fixtures";
import { startNode, tempDir, worker, type TestNode } from "../helpers/node";

const SIG_A = "5".repeat(87);
const SIG_B = "4".repeat(87);

let node: TestNode;
let route: GenesisRoute;
const sender = newWallet();
const crankerA = newWallet();
const crankerB = newWallet();
const verifierOnly = newWallet();

/** A status update signed by the Cranker it names (SPEC §6.1). */
const patch = (id: string, body: Record<string, unknown>) => node.as(walletOf(body.crankerPubkey as string))("PATCH", `/intents/${id}/status`, body);
const heartbeat = (cranker: Wallet, roles = ["settlement"], overrides = {}) => node.as(cranker)("POST", "/crankers/heartbeat", signedHeartbeat(cranker, roles, overrides));
/** A lastValidBlockHeight for submissions the tests make up (no chain in this file). */
const LVBH = 1_000_000;
const wait = (ms: number) => new Promise(resolve => setTimeout(resolve, ms));

async function verifiedIntent(fields = {}): Promise<{ id: string; stateVersion: number }> {
	const { status, body } = await node.http("POST", "/intents", signedIntent(sender, route, fields));
	expect(status).toBe(201);
	return { id: body.id, stateVersion: 3 };
}

async function workerView(id: string) {
	return (await node.http("GET", `/intents/${id}`, undefined, worker)).body;
}

async function until<T>(probe: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 5000): Promise<T> {
	const deadline = Date.now() + timeoutMs;
	for (;;) {
		const value = await probe();
		if (done(value) || Date.now() > deadline) return value;
		await wait(50);
	}
}

beforeAll(async () => {
	route = newRoute();
	const dataDir = tempDir();
	node = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]), LEASE_TTL_MS: "1500" }, dataDir);
});
// Before each test, not once: on a loaded machine the suite outlasts CRANKER_TTL_MS (30 s), and a
// Cranker whose heartbeat aged out is refused (CRANKER_NOT_ALLOWED) whatever the test checks.
beforeEach(async () => {
	for (const cranker of [crankerA, crankerB]) expect((await heartbeat(cranker)).status).toBe(200);
	expect((await heartbeat(verifierOnly, ["verifier"])).status).toBe(200);
});
afterAll(() => node?.stop());

describe("POST /crankers/heartbeat", () => {
	it("records a signed heartbeat and answers the CrankerHeartbeatRecord, with the settlement program the Node checks against", async () => {
		const cranker = newWallet();
		const hb = signedHeartbeat(cranker, ["settlement", "verifier"]);
		const { status, body } = await node.as(cranker)("POST", "/crankers/heartbeat", hb);
		expect(status).toBe(200);
		expect(body).toEqual({ crankerPubkey: cranker.address, roles: ["settlement", "verifier"], liquidity: hb.liquidity, version: "test-1", lastSeenAt: expect.any(String), online: true, settlementProgramId: DEFAULT_SETTLEMENT_PROGRAM_ID });
	});

	it("refuses a bad signature (400), a stale or repeated sentAt (409) and bad shapes (422)", async () => {
		const cranker = newWallet();
		const forged = { ...signedHeartbeat(cranker), signature: crankerB.sign("something else") };
		expect((await node.as(cranker)("POST", "/crankers/heartbeat", forged)).body).toMatchObject({ code: 400, type: "INVALID_SIGNATURE" });

		const old = await heartbeat(cranker, ["settlement"], { sentAt: iso(-61_000) });
		expect(old.body).toMatchObject({ code: 409, type: "STALE_HEARTBEAT" });
		const ahead = await heartbeat(cranker, ["settlement"], { sentAt: iso(61_000) });
		expect(ahead.body).toMatchObject({ code: 409, type: "STALE_HEARTBEAT" });

		const sentAt = iso(0);
		expect((await heartbeat(cranker, ["settlement"], { sentAt })).status).toBe(200);
		expect((await heartbeat(cranker, ["settlement"], { sentAt })).body).toMatchObject({ code: 409, type: "STALE_HEARTBEAT" });
		expect((await heartbeat(cranker, ["settlement"], { sentAt: iso(-5000) })).body).toMatchObject({ code: 409, type: "STALE_HEARTBEAT" });

		const manyMints = Array.from({ length: 65 }, (_, i) => ({ tokenMintAddress: encodeBase58(new Uint8Array(32).fill(i + 1)), available: "1" }));
		for (const bad of [{ roles: ["admin"] }, { roles: [] }, { liquidity: [{ tokenMintAddress: cranker.address, available: "-1" }] }, { liquidity: manyMints }, { extra: true }])
			expect((await node.as(cranker)("POST", "/crankers/heartbeat", { ...signedHeartbeat(cranker), ...bad })).status).toBe(422);
		// A mint named twice, signed as it is (a review's replay: 64 of one mint counted the Cranker 64 times in the public figures).
		const twice = [1, 2].map(available => ({ tokenMintAddress: manyMints[0].tokenMintAddress, available: String(available) }));
		const duplicated = await node.as(cranker)("POST", "/crankers/heartbeat", signedHeartbeat(cranker, ["settlement"], { liquidity: twice, sentAt: iso(1000) }));
		expect(duplicated.body).toMatchObject({ code: 422, type: "VALIDATION_ERROR", data: [expect.objectContaining({ type: "distinctMints", field: "liquidity" })] });
		expect((await node.http("GET", "/settlement-networks")).body).not.toContainEqual(expect.objectContaining({ tokenMintAddress: manyMints[0].tokenMintAddress }));
	});

	it("refuses operators outside CRANKER_OPERATORS with 403", async () => {
		const allowed = newWallet();
		const restricted = await startNode({ CRANKER_OPERATORS: allowed.address });
		try {
			const outsider = newWallet();
			const refused = await restricted.as(outsider)("POST", "/crankers/heartbeat", signedHeartbeat(outsider));
			expect(refused.body).toMatchObject({ code: 403, type: "CRANKER_NOT_ALLOWED" });
			expect((await restricted.as(allowed)("POST", "/crankers/heartbeat", signedHeartbeat(allowed))).status).toBe(200);
		} finally {
			await restricted.stop();
		}
	});
});

describe("GET /intent-work", () => {
	it("lists VERIFIED, unexpired intents oldest first as IntentWorkItems", async () => {
		const first = await verifiedIntent();
		const second = await verifiedIntent();
		const { status, body } = await node.http("GET", "/intent-work?limit=500", undefined, worker);
		expect(status).toBe(200);
		const ids = body.map((item: { intent: { id: string } }) => item.intent.id);
		expect(ids.indexOf(first.id)).toBeLessThan(ids.indexOf(second.id));
		const item = body.find((i: { intent: { id: string } }) => i.intent.id === first.id);
		expect(item.leaseTtlMs).toBe(1500);
		expect(item.intent).toMatchObject({ receiverStatus: "VERIFIED", stateVersion: 3, lease: null, senderAuthorizationSignature: expect.any(String) });
		expect(body.every((i: { intent: { receiverStatus: string } }) => i.intent.receiverStatus === "VERIFIED")).toBe(true);
		for (const bad of ["0", "501", "x"]) expect((await node.http("GET", `/intent-work?limit=${bad}`, undefined, worker)).status).toBe(422);
		expect((await node.http("GET", "/intent-work?limit=1", undefined, worker)).body).toHaveLength(1);
	});

	it("goes on past the intent `after` names, so that a Cranker can page past work it cannot take", async () => {
		const mine = [await verifiedIntent(), await verifiedIntent(), await verifiedIntent()];
		const idsOf = (body: { intent: { id: string } }[]) => body.map(item => item.intent.id);
		const all = idsOf((await node.http("GET", "/intent-work?limit=500", undefined, worker)).body);
		const from = all.indexOf(mine[0].id);
		const next = await node.http("GET", `/intent-work?limit=2&after=${mine[0].id}`, undefined, worker);
		expect(next.status).toBe(200);
		expect(idsOf(next.body)).toEqual(all.slice(from + 1, from + 3));
		// An intent no longer VERIFIED still marks the place.
		await patch(mine[1].id, { status: "CRANKER_LEASED", crankerPubkey: crankerA.address, expectedVersion: 3 });
		expect(idsOf((await node.http("GET", `/intent-work?limit=500&after=${mine[1].id}`, undefined, worker)).body)[0]).toBe(mine[2].id);
		for (const bad of ["int_nothing", "x".repeat(65)]) {
			const refused = await node.http("GET", `/intent-work?after=${bad}`, undefined, worker);
			expect(refused.status).toBe(422);
			expect(refused.body).toMatchObject({ type: "VALIDATION_ERROR" });
		}
	});
});

describe("PATCH /intents/{id}/status: the rows of SPEC §2.4", () => {
	it("leases, renews, submits and confirms, with the transaction signature readable once CONFIRMED", async () => {
		const { id } = await verifiedIntent();
		const leased = await patch(id, { status: "CRANKER_LEASED", crankerPubkey: crankerA.address, expectedVersion: 3 });
		expect(leased.status).toBe(200);
		expect(leased.body).toMatchObject({ receiverStatus: "CRANKER_LEASED", stateVersion: 4, lease: { crankerPubkey: crankerA.address } });
		const firstExpiry = Date.parse(leased.body.lease.expiresAt);
		expect(firstExpiry - Date.parse(leased.body.lease.leasedAt)).toBe(1500);

		await wait(20);
		const renewed = await patch(id, { status: "CRANKER_LEASED", crankerPubkey: crankerA.address, expectedVersion: 4 });
		expect(renewed.body.stateVersion).toBe(4);
		expect(Date.parse(renewed.body.lease.expiresAt)).toBeGreaterThan(firstExpiry);
		expect(renewed.body.lease.leasedAt).toBe(leased.body.lease.leasedAt);

		const submitted = await patch(id, { status: "SUBMITTED", crankerPubkey: crankerA.address, expectedVersion: 4, transactionSignature: SIG_A, slot: 1234, lastValidBlockHeight: LVBH });
		expect(submitted.body).toMatchObject({ receiverStatus: "SUBMITTED", stateVersion: 5, submission: { transactionSignature: SIG_A, slot: 1234, lastValidBlockHeight: LVBH } });
		expect((await node.http("GET", `/intents/${id}`)).body).not.toHaveProperty("transactionSignature");

		const confirmed = await patch(id, { status: "CONFIRMED", crankerPubkey: crankerA.address, expectedVersion: 5, transactionSignature: SIG_A });
		expect(confirmed.body).toMatchObject({ receiverStatus: "CONFIRMED", status: "executed", stateVersion: 6, transactionSignature: SIG_A });
		// No chain configured here: recorded on the signed Cranker's word, and marked so (SPEC §2.4).
		expect(confirmed.body.history.at(-1)).toMatchObject({ state: "CONFIRMED", by: crankerA.address, onChainChecked: false });
		expect((await node.http("GET", `/intents/${id}`)).body).toMatchObject({ status: "executed", transactionSignature: SIG_A });
		expect(confirmed.body.history.map((h: { state: string }) => h.state)).toEqual(["RECEIVED", "NODE_VERIFYING", "VERIFIED", "CRANKER_LEASED", "SUBMITTED", "CONFIRMED"]);
	});

	it("lets the holder release the lease back to VERIFIED", async () => {
		const { id } = await verifiedIntent();
		await patch(id, { status: "CRANKER_LEASED", crankerPubkey: crankerA.address, expectedVersion: 3 });
		const released = await patch(id, { status: "VERIFIED", crankerPubkey: crankerA.address, expectedVersion: 4 });
		expect(released.body).toMatchObject({ receiverStatus: "VERIFIED", stateVersion: 5, lease: null });
		expect((await patch(id, { status: "CRANKER_LEASED", crankerPubkey: crankerB.address, expectedVersion: 5 })).status).toBe(200);
	});

	it("keeps a history of at most 128 entries however often an intent is leased and released: its first three and its latest, the rest counted", async () => {
		const { id } = await verifiedIntent();
		const reason = "cannot pay now ".repeat(34).slice(0, 512);
		let version = 3;
		for (let round = 0; round < 130; round++, version += 2) {
			expect((await patch(id, { status: "CRANKER_LEASED", crankerPubkey: crankerA.address, expectedVersion: version })).status).toBe(200);
			expect((await patch(id, { status: "VERIFIED", crankerPubkey: crankerA.address, expectedVersion: version + 1, reason })).status).toBe(200);
		}
		const view = await workerView(id);
		// 3 + 260 entries: every move still counts in stateVersion, the oldest leases are left out of the history.
		expect(view).toMatchObject({ stateVersion: 263, historyOmitted: 135 });
		expect(view.history).toHaveLength(128);
		expect(view.history.slice(0, 3).map((entry: { state: string }) => entry.state)).toEqual(["RECEIVED", "NODE_VERIFYING", "VERIFIED"]);
		expect(view.history.at(-1)).toEqual({ state: "VERIFIED", at: expect.any(String), by: crankerA.address, reason });
		// The 135 oldest moves (leases 1–68, releases 1–67) are the ones left out.
		expect(view.history[3]).toMatchObject({ state: "VERIFIED", by: crankerA.address });
		expect(view.history.filter((entry: { state: string }) => entry.state === "CRANKER_LEASED")).toHaveLength(62);
		expect(JSON.stringify(view).length).toBeLessThan(128 * 1024);
	});

	it("without a chain, never lets a submission go back to VERIFIED (503 CHAIN_UNAVAILABLE; reason still required first)", async () => {
		const { id } = await verifiedIntent();
		await patch(id, { status: "CRANKER_LEASED", crankerPubkey: crankerA.address, expectedVersion: 3 });
		await patch(id, { status: "SUBMITTED", crankerPubkey: crankerA.address, expectedVersion: 4, transactionSignature: SIG_A, lastValidBlockHeight: LVBH });
		expect((await patch(id, { status: "VERIFIED", crankerPubkey: crankerA.address, expectedVersion: 5 })).body).toMatchObject({ code: 422, type: "VALIDATION_ERROR" });
		const dropped = await patch(id, { status: "VERIFIED", crankerPubkey: crankerA.address, expectedVersion: 5, reason: "blockhash expired" });
		expect(dropped.body).toMatchObject({ code: 503, type: "CHAIN_UNAVAILABLE" });
		expect((await workerView(id)).receiverStatus).toBe("SUBMITTED");
		const noAuthorization = await node.as(crankerA)("POST", "/internal/settlement-authorizations/settlement", { workId: id, crankerPubkey: crankerA.address });
		expect(noAuthorization.body).toMatchObject({ code: 409 });
	});

	it("rejects from CRANKER_LEASED and from SUBMITTED with a reason", async () => {
		const request = signedIntent(sender, route);
		const leased = (await node.http("POST", "/intents", request)).body;
		await patch(leased.id, { status: "CRANKER_LEASED", crankerPubkey: crankerA.address, expectedVersion: 3 });
		expect((await patch(leased.id, { status: "REJECTED", crankerPubkey: crankerA.address, expectedVersion: 4 })).status).toBe(422);
		const rejected = await patch(leased.id, { status: "REJECTED", crankerPubkey: crankerA.address, expectedVersion: 4, reason: "insufficient liquidity" });
		expect(rejected.body).toMatchObject({ receiverStatus: "REJECTED", status: "canceled", rejectionReason: "insufficient liquidity" });
		// Canceled after acceptance, not refused at verification: replaying the body answers the record.
		const replay = await node.http("POST", "/intents", request);
		expect(replay.status).toBe(200);
		expect(replay.body).toMatchObject({ id: leased.id, status: "canceled", rejectionReason: "insufficient liquidity" });

		// From SUBMITTED a rejection frees the nonce: only the chain may say so, and there is none here.
		const submitted = await verifiedIntent();
		await patch(submitted.id, { status: "CRANKER_LEASED", crankerPubkey: crankerA.address, expectedVersion: 3 });
		await patch(submitted.id, { status: "SUBMITTED", crankerPubkey: crankerA.address, expectedVersion: 4, transactionSignature: SIG_A, lastValidBlockHeight: LVBH });
		const refused = await patch(submitted.id, { status: "REJECTED", crankerPubkey: crankerA.address, expectedVersion: 5, reason: "program refused: nullifier used" });
		expect(refused.body).toMatchObject({ code: 503, type: "CHAIN_UNAVAILABLE" });
		expect((await node.http("GET", `/intents/${submitted.id}`)).body.receiverStatus).toBe("SUBMITTED");
	});

	it("answers a re-sent successful update with 200 and no second transition", async () => {
		const { id } = await verifiedIntent();
		const lease = { status: "CRANKER_LEASED", crankerPubkey: crankerA.address, expectedVersion: 3 };
		const first = await patch(id, lease);
		const again = await patch(id, lease);
		expect(again.status).toBe(200);
		expect(again.body.stateVersion).toBe(first.body.stateVersion);
		expect(again.body.history).toHaveLength(first.body.history.length);
		const submit = { status: "SUBMITTED", crankerPubkey: crankerA.address, expectedVersion: 4, transactionSignature: SIG_A, lastValidBlockHeight: LVBH };
		await patch(id, submit);
		const resent = await patch(id, submit);
		expect(resent.status).toBe(200);
		expect(resent.body).toMatchObject({ stateVersion: 5, receiverStatus: "SUBMITTED" });
		// Another Cranker sending the same body is no replay.
		expect((await patch(id, { ...submit, crankerPubkey: crankerB.address })).status).toBe(409);
	});
});

describe("PATCH refusals, in SPEC §2.4 order", () => {
	it("404 for an unknown id", async () => {
		expect((await patch("int_missing", { status: "CRANKER_LEASED", crankerPubkey: crankerA.address, expectedVersion: 1 })).body).toMatchObject({ code: 404, type: "NOT_FOUND" });
	});

	it("409 VERSION_CONFLICT before INVALID_TRANSITION before CRANKER_NOT_ALLOWED", async () => {
		const { id } = await verifiedIntent();
		const stranger = newWallet();
		expect((await patch(id, { status: "CONFIRMED", crankerPubkey: stranger.address, expectedVersion: 2 })).body).toMatchObject({ code: 409, type: "VERSION_CONFLICT" });
		expect((await patch(id, { status: "CONFIRMED", crankerPubkey: stranger.address, expectedVersion: 3 })).body).toMatchObject({ code: 409, type: "INVALID_TRANSITION" });
		expect((await patch(id, { status: "CRANKER_LEASED", crankerPubkey: stranger.address, expectedVersion: 3 })).body).toMatchObject({ code: 403, type: "CRANKER_NOT_ALLOWED" });
		expect((await patch(id, { status: "CRANKER_LEASED", crankerPubkey: verifierOnly.address, expectedVersion: 3 })).body).toMatchObject({ code: 403, type: "CRANKER_NOT_ALLOWED" });
		expect((await workerView(id)).stateVersion).toBe(3);
	});

	it("403 NOT_LEASE_HOLDER for another Cranker, 422 for missing fields", async () => {
		const { id } = await verifiedIntent();
		await patch(id, { status: "CRANKER_LEASED", crankerPubkey: crankerA.address, expectedVersion: 3 });
		expect((await patch(id, { status: "SUBMITTED", crankerPubkey: crankerB.address, expectedVersion: 4, transactionSignature: SIG_B })).body).toMatchObject({ code: 403, type: "NOT_LEASE_HOLDER" });
		expect((await patch(id, { status: "CRANKER_LEASED", crankerPubkey: crankerB.address, expectedVersion: 4 })).body).toMatchObject({ code: 403, type: "NOT_LEASE_HOLDER" });
		expect((await patch(id, { status: "SUBMITTED", crankerPubkey: crankerA.address, expectedVersion: 4 })).body).toMatchObject({ code: 422, type: "VALIDATION_ERROR" });
		// null is no value: a field it stands for is as missing, and nothing is stored with it.
		for (const nulls of [{ transactionSignature: null, lastValidBlockHeight: LVBH }, { transactionSignature: SIG_A, lastValidBlockHeight: null }])
			expect((await patch(id, { status: "SUBMITTED", crankerPubkey: crankerA.address, expectedVersion: 4, ...nulls })).body).toMatchObject({ code: 422, type: "VALIDATION_ERROR" });
		expect((await workerView(id)).stateVersion).toBe(4);
		await patch(id, { status: "SUBMITTED", crankerPubkey: crankerA.address, expectedVersion: 4, transactionSignature: SIG_A, lastValidBlockHeight: LVBH });
		expect((await patch(id, { status: "CONFIRMED", crankerPubkey: crankerA.address, expectedVersion: 5, transactionSignature: SIG_B })).status).toBe(422);
		const confirm = { status: "CONFIRMED", crankerPubkey: crankerA.address, expectedVersion: 5, transactionSignature: SIG_A };
		for (const bad of [{ status: "DONE" }, { expectedVersion: 0 }, { extra: 1 }]) expect((await patch(id, { ...confirm, ...bad })).status).toBe(422);
		// A crankerPubkey that is not the signer's is refused with the signature, before the shape.
		expect((await node.as(crankerA)("PATCH", `/intents/${id}/status`, { ...confirm, crankerPubkey: "abc" })).body).toMatchObject({ code: 403, type: "FORBIDDEN", data: { reason: "keyid-mismatch" } });
	});

	it("lets exactly one of two racing Crankers lease the same intent", async () => {
		for (let round = 0; round < 5; round++) {
			const { id } = await verifiedIntent();
			const answers = await Promise.all([crankerA, crankerB, crankerA, crankerB].map(c => patch(id, { status: "CRANKER_LEASED", crankerPubkey: c.address, expectedVersion: 3 })));
			const winners = answers.filter(a => a.status === 200);
			const holders = new Set(winners.map(w => w.body.lease.crankerPubkey));
			expect(holders.size).toBe(1);
			expect(answers.filter(a => a.status !== 200).every(a => a.status === 409)).toBe(true);
			expect((await workerView(id)).lease.crankerPubkey).toBe([...holders][0]);
		}
	});
});

describe("lease expiry", () => {
	it("returns an unrenewed lease to VERIFIED; the former holder then gets 409", async () => {
		const other = await verifiedIntent();
		await patch(other.id, { status: "CRANKER_LEASED", crankerPubkey: crankerA.address, expectedVersion: 3 });
		await wait(1600);
		const late = await patch(other.id, { status: "SUBMITTED", crankerPubkey: crankerA.address, expectedVersion: 4, transactionSignature: SIG_A, lastValidBlockHeight: LVBH });
		expect(late.status).toBe(409);
		expect(["LEASE_EXPIRED", "VERSION_CONFLICT"]).toContain(late.body.type);
		const swept = await until(() => workerView(other.id), v => v.receiverStatus === "VERIFIED");
		expect(swept).toMatchObject({ receiverStatus: "VERIFIED", stateVersion: 5, lease: null });
		expect(swept.history.at(-1)).toMatchObject({ state: "VERIFIED", reason: "LEASE_EXPIRED" });
		expect((await patch(other.id, { status: "SUBMITTED", crankerPubkey: crankerA.address, expectedVersion: 4, transactionSignature: SIG_A, lastValidBlockHeight: LVBH })).body.type).toBe("VERSION_CONFLICT");
		expect((await patch(other.id, { status: "CRANKER_LEASED", crankerPubkey: crankerB.address, expectedVersion: 5 })).status).toBe(200);
	});

	it("never sweeps a SUBMITTED intent; once its lease lapsed another Cranker may finish it, but not reject it", async () => {
		const { id } = await verifiedIntent();
		await patch(id, { status: "CRANKER_LEASED", crankerPubkey: crankerA.address, expectedVersion: 3 });
		await patch(id, { status: "SUBMITTED", crankerPubkey: crankerA.address, expectedVersion: 4, transactionSignature: SIG_A, lastValidBlockHeight: LVBH });
		expect((await patch(id, { status: "CONFIRMED", crankerPubkey: crankerB.address, expectedVersion: 5, transactionSignature: SIG_A })).body.type).toBe("NOT_LEASE_HOLDER");
		await wait(1800);
		expect((await workerView(id)).receiverStatus).toBe("SUBMITTED");
		// Not cancel it for good, which is the holder's call (a review's replay: it was taken, then checked on chain).
		const rivalReject = await patch(id, { status: "REJECTED", crankerPubkey: crankerB.address, expectedVersion: 5, reason: "griefing" });
		expect([rivalReject.status, rivalReject.body.type]).toEqual([403, "NOT_LEASE_HOLDER"]);
		const finished = await patch(id, { status: "CONFIRMED", crankerPubkey: crankerB.address, expectedVersion: 5, transactionSignature: SIG_A });
		expect(finished.body).toMatchObject({ receiverStatus: "CONFIRMED", transactionSignature: SIG_A });
	});
});

describe("POST /internal/settlement-authorizations/settlement", () => {
	const authorize = (workId: string, cranker: Wallet) => node.as(cranker)("POST", "/internal/settlement-authorizations/settlement", { workId, crankerPubkey: cranker.address });

	it("issues the signed one-time payout authorization to the lease holder, the same one while valid", async () => {
		const request = signedIntent(sender, route);
		const { body: created } = await node.http("POST", "/intents", request);
		await patch(created.id, { status: "CRANKER_LEASED", crankerPubkey: crankerA.address, expectedVersion: 3 });
		const { status, body } = await authorize(created.id, crankerA);
		expect(status).toBe(200);
		expect(body).toMatchObject({
			kind: "SVC_PAYOUT_AUTHORIZATION",
			version: 1,
			workId: created.id,
			paymentId: request.paymentId,
			crankerPubkey: crankerA.address,
			tokenMintAddress: request.tokenMintAddress,
			amount: request.amount,
			feeLimit: request.feeLimit,
			recipientRouteCommitment: route.routeCommitment,
			recipientRouteVersion: route.routeVersion,
			transactionCommitment: request.transactionCommitment,
			payoutNullifier: payoutNullifier(sender.address, request.senderAuthorizationNonce),
			expiresAtSlot: request.expiresAtSlot
		});
		const lease = (await workerView(created.id)).lease;
		expect(Date.parse(body.expiresAt)).toBeLessThanOrEqual(Date.parse(lease.expiresAt));
		expect(body.authorizationMessage).toBe(buildPayoutMessage(body));
		expect(body.authorizationMessage.split("\n")[0]).toBe("Settlement Coordination Payout Authorization");
		expect(ed25519.verify(decodeBase58(body.authorizationSignature)!, new TextEncoder().encode(body.authorizationMessage), decodeBase58(body.authorizationSigner)!)).toBe(true);

		expect((await authorize(created.id, crankerA)).body).toEqual(body);
		expect((await authorize(created.id, crankerB)).body).toMatchObject({ code: 403, type: "NOT_LEASE_HOLDER" });
	});

	it("gives the next holder no authorization while one issued under an earlier lease is still valid", async () => {
		const { id } = await verifiedIntent();
		await patch(id, { status: "CRANKER_LEASED", crankerPubkey: crankerA.address, expectedVersion: 3 });
		const first = await authorize(id, crankerA);
		expect(first.status).toBe(200);
		await patch(id, { status: "VERIFIED", crankerPubkey: crankerA.address, expectedVersion: 4 });
		await patch(id, { status: "CRANKER_LEASED", crankerPubkey: crankerB.address, expectedVersion: 5 });
		const second = await authorize(id, crankerB);
		expect(second.body).toMatchObject({ code: 409, type: "INVALID_TRANSITION", data: { authorizationExpiresAt: first.body.expiresAt } });
		// Once A's authorization has lapsed (it never outlives A's 1.5 s lease), B gets its own, same nullifier.
		const renewB = { status: "CRANKER_LEASED", crankerPubkey: crankerB.address, expectedVersion: 6 };
		for (const lapsed = Date.parse(first.body.expiresAt) + 50; Date.now() < lapsed; await wait(Math.max(0, Math.min(400, lapsed - Date.now()))))
			expect((await patch(id, renewB)).status).toBe(200);
		expect((await patch(id, renewB)).status).toBe(200);
		const third = await authorize(id, crankerB);
		expect(third.status).toBe(200);
		expect(third.body).toMatchObject({ crankerPubkey: crankerB.address, payoutNullifier: first.body.payoutNullifier });
	});

	it("refuses intents that are not leased (409), unknown ids (404) and expired leases (409)", async () => {
		const { id } = await verifiedIntent();
		expect((await authorize(id, crankerA)).body).toMatchObject({ code: 409 });
		expect((await authorize("int_nope", crankerA)).body).toMatchObject({ code: 404 });
		await patch(id, { status: "CRANKER_LEASED", crankerPubkey: crankerA.address, expectedVersion: 3 });
		await wait(1600);
		expect((await authorize(id, crankerA)).status).toBe(409);
	});

	it("refuses with 422 when the intent expired while leased, before any sweep ran", async () => {
		// Sweeps off: the authorization check itself must notice the expiry.
		const dataDir = tempDir();
		// The lease outlasts the authorization's 700 ms by far, even on a loaded machine.
		const quiet = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]), SWEEP_INTERVAL_MS: "600000", LEASE_TTL_MS: "3000" }, dataDir);
		try {
			const asA = quiet.as(crankerA);
			expect((await asA("POST", "/crankers/heartbeat", signedHeartbeat(crankerA))).status).toBe(200);
			const { body } = await quiet.http("POST", "/intents", signedIntent(sender, route, { senderAuthorizationExpiresAt: iso(700) }));
			expect((await asA("PATCH", `/intents/${body.id}/status`, { status: "CRANKER_LEASED", crankerPubkey: crankerA.address, expectedVersion: 3 })).status).toBe(200);
			await wait(800);
			const answer = await asA("POST", "/internal/settlement-authorizations/settlement", { workId: body.id, crankerPubkey: crankerA.address });
			expect(answer.status).toBe(422);
			expect(answer.body).toMatchObject({ type: "EVIDENCE_INCONSISTENT", data: { reason: "EXPIRED" } });

			// With no sweep to return it, a lapsed lease is refused as such.
			const lapsing = (await quiet.http("POST", "/intents", signedIntent(sender, route))).body;
			await asA("PATCH", `/intents/${lapsing.id}/status`, { status: "CRANKER_LEASED", crankerPubkey: crankerA.address, expectedVersion: 3 });
			await wait(3100);
			const late = await asA("PATCH", `/intents/${lapsing.id}/status`, { status: "SUBMITTED", crankerPubkey: crankerA.address, expectedVersion: 4, transactionSignature: SIG_A, lastValidBlockHeight: LVBH });
			expect(late.body).toMatchObject({ code: 409, type: "LEASE_EXPIRED" });
			const noAuthorization = await asA("POST", "/internal/settlement-authorizations/settlement", { workId: lapsing.id, crankerPubkey: crankerA.address });
			expect(noAuthorization.body).toMatchObject({ code: 409, type: "LEASE_EXPIRED" });

			// An intent that expires while leased cannot be reported SUBMITTED: it moves to REJECTED/EXPIRED first.
			const expiring = (await quiet.http("POST", "/intents", signedIntent(sender, route, { senderAuthorizationExpiresAt: iso(700) }))).body;
			await asA("PATCH", `/intents/${expiring.id}/status`, { status: "CRANKER_LEASED", crankerPubkey: crankerA.address, expectedVersion: 3 });
			await wait(800);
			const submitted = await asA("PATCH", `/intents/${expiring.id}/status`, { status: "SUBMITTED", crankerPubkey: crankerA.address, expectedVersion: 4, transactionSignature: SIG_A, lastValidBlockHeight: LVBH });
			expect(submitted.status).toBe(409);
			expect((await quiet.http("GET", `/intents/${expiring.id}`)).body).toMatchObject({ receiverStatus: "REJECTED", rejectionReason: "EXPIRED" });
		} finally {
			await quiet.stop();
		}
	});
});

describe("intent expiry", () => {
	it("moves an intent whose expiresAt passes before SUBMITTED to REJECTED/EXPIRED, and never lists it as work", async () => {
		const { id } = await verifiedIntent({ senderAuthorizationExpiresAt: iso(600) });
		await wait(700);
		const work = await node.http("GET", "/intent-work?limit=500", undefined, worker);
		expect(work.body.map((i: { intent: { id: string } }) => i.intent.id)).not.toContain(id);
		const swept = await until(() => workerView(id), v => v.receiverStatus === "REJECTED");
		expect(swept).toMatchObject({ receiverStatus: "REJECTED", status: "canceled", rejectionReason: "EXPIRED" });
		expect((await patch(id, { status: "CRANKER_LEASED", crankerPubkey: crankerA.address, expectedVersion: swept.stateVersion })).body.type).toBe("INVALID_TRANSITION");
	});
});
