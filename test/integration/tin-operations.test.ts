/**
 * The TIN operations pipeline over HTTP (SPEC §5): signed create/update operations, idempotency,
 * every stage with its role and lifecycle rules, activation of routes, and restarts.
 */
import Database from "better-sqlite3";
import path from "node:path";
import type { GenesisRoute } from "../../lib/registry";
import { tinFromSequence } from "../../lib/tin";
import { iso, newRoute, newWallet, signedHeartbeat, signedIntent, signedTinOperation, walletOf, writeSeedFile } from "../helpers/fixtures";
import { startNode, tempDir, worker, type TestNode } from "../helpers/node";

const SIG = "3".repeat(87);
const owner = newWallet();
const verifier = newWallet();
const submitter = newWallet();
const both = newWallet();
const sender = newWallet();
/** Genesis routes: one holding the first TIN of the sequence (so a create must skip it), one owned. */
const firstTin = tinFromSequence(100_000_000);
const genesisUnowned: GenesisRoute = newRoute({ tin: firstTin });
const genesisOwned = { ...newRoute(), ownerWallet: owner.address };

let node: TestNode;
let dataDir: string;
/** A stage move signed by the Cranker it names (SPEC §6.1). */
const stage = (id: string, name: string, body: Record<string, unknown>) => node.as(walletOf(body.crankerPubkey as string))("POST", `/tin-operations/${id}/${name}`, body);
const heartbeatAll = async () => {
	for (const [cranker, roles] of [[verifier, ["verifier"]], [submitter, ["submitter", "settlement"]], [both, ["verifier", "submitter"]]] as const)
		expect((await node.as(cranker)("POST", "/crankers/heartbeat", signedHeartbeat(cranker, [...roles]))).status).toBe(200);
};

/** Runs an operation through every stage to FINALIZED. */
async function finalize(id: string, fee: string) {
	expect((await stage(id, "verified", { crankerPubkey: verifier.address })).status).toBe(200);
	expect((await stage(id, "fee-committed", { crankerPubkey: submitter.address, feeAmount: fee })).status).toBe(200);
	expect((await stage(id, "submitted", { crankerPubkey: submitter.address, transactionSignature: SIG })).status).toBe(200);
	const finalized = await stage(id, "finalized", { crankerPubkey: submitter.address, transactionSignature: SIG });
	expect(finalized.status).toBe(200);
	return finalized.body;
}

beforeAll(async () => {
	dataDir = tempDir();
	node = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dataDir, [genesisUnowned, genesisOwned]) }, dataDir);
	await heartbeatAll();
});
afterAll(() => node?.stop());

describe("POST /tin-operations", () => {
	it("accepts a signed create with 201, allocating the next free TIN of the sequence, and is idempotent on operationId", async () => {
		const body = signedTinOperation(owner, { intentType: "create" });
		const { status, body: record } = await node.http("POST", "/tin-operations", body);
		expect(status).toBe(201);
		expect(record).toEqual({ id: expect.stringMatching(/^top_[0-9a-f]{32}$/), operationId: body.operationId, intentType: "create", tin: expect.any(String), status: "PENDING_VERIFICATION", createdAt: expect.any(String), updatedAt: expect.any(String) });
		expect(record.tin).not.toBe(firstTin);
		expect(Number(record.tin.slice(0, 9))).toBeGreaterThan(100_000_000);

		const again = await node.http("POST", "/tin-operations", body);
		expect(again.status).toBe(200);
		expect(again.body).toEqual(record);
		const changed = await node.http("POST", "/tin-operations", { ...signedTinOperation(owner, { intentType: "create", operationId: body.operationId }) });
		expect(changed.body).toMatchObject({ code: 409, type: "IDEMPOTENCY_CONFLICT" });
		expect((await node.http("GET", `/tin-operations/${record.id}`)).body).toEqual(record);
	});

	it("never allocates a TIN twice, even to concurrent creates", async () => {
		const answers = await Promise.all(Array.from({ length: 12 }, () => node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "create" }))));
		expect(answers.every(a => a.status === 201)).toBe(true);
		expect(new Set(answers.map(a => a.body.tin)).size).toBe(12);
	});

	it("refuses, in order and storing nothing: bad signature, time window, unknown TIN, not the owner, misplaced tin", async () => {
		const before = (await node.http("GET", "/tin-operations?limit=500")).body.length;
		const forged = { ...signedTinOperation(owner, { intentType: "create" }), ownerSignature: newWallet().sign("x") };
		expect((await node.http("POST", "/tin-operations", forged)).body).toMatchObject({ code: 400, type: "INVALID_SIGNATURE" });
		expect((await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "create", issuedAt: iso(-7200_000), expiresAt: iso(-3600_000) }))).body).toMatchObject({ code: 400, type: "EXPIRED" });
		expect((await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "create", issuedAt: iso(600_000) }))).body).toMatchObject({ code: 400, type: "INVALID_MESSAGE" });
		expect((await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "update", tin: newRoute().tin }))).body).toMatchObject({ code: 422, type: "UNKNOWN_TIN" });
		expect((await node.http("POST", "/tin-operations", signedTinOperation(newWallet(), { intentType: "update", tin: genesisOwned.tin }))).body).toMatchObject({ code: 403, type: "NOT_OWNER" });
		expect((await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "update", tin: genesisUnowned.tin }))).body).toMatchObject({ code: 403, type: "NOT_OWNER" });
		expect((await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "create", tin: genesisOwned.tin }))).status).toBe(422);
		expect((await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "update" }))).status).toBe(422);
		expect((await node.http("POST", "/tin-operations", { ...signedTinOperation(owner, { intentType: "create" }), extra: 1 })).status).toBe(422);
		expect((await node.http("GET", "/tin-operations?limit=500")).body).toHaveLength(before);
	});

	it("lists newest first with status and intent_type filters; 404 for an unknown id", async () => {
		const created = (await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "create" }))).body;
		const listed = await node.http("GET", "/tin-operations?status=PENDING_VERIFICATION&intent_type=create&limit=1");
		expect(listed.body).toEqual([created]);
		expect((await node.http("GET", "/tin-operations?intent_type=update&limit=500")).body.every((r: { intentType: string }) => r.intentType === "update")).toBe(true);
		expect((await node.http("GET", "/tin-operations/top_nope")).body).toMatchObject({ code: 404, type: "NOT_FOUND" });
		for (const bad of ["limit=0", "limit=501", "status=DONE", "intent_type=delete"]) expect((await node.http("GET", `/tin-operations?${bad}`)).status).toBe(422);
	});
});

describe("the stage pipeline", () => {
	it("create → verified → fee-committed → submitted → finalized activates the route; a payment to it is accepted", async () => {
		const created = (await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "create" }))).body;
		const work = (await node.http("GET", "/tin-operations/verification-work?limit=500", undefined, worker)).body;
		expect(work.map((r: { id: string }) => r.id)).toContain(created.id);

		const verified = await stage(created.id, "verified", { crankerPubkey: verifier.address });
		expect(verified.body).toMatchObject({ status: "VERIFIED", verifiedBy: verifier.address, request: expect.any(Object), history: expect.any(Array) });
		const feeWorkForVerifier = (await node.http("GET", `/tin-operations/fee-work?operator_pubkey=${verifier.address}&limit=500`, undefined, worker)).body;
		expect(feeWorkForVerifier.map((r: { id: string }) => r.id)).not.toContain(created.id);
		const feeWork = (await node.http("GET", `/tin-operations/fee-work?operator_pubkey=${submitter.address}&limit=500`, undefined, worker)).body;
		expect(feeWork.map((r: { id: string }) => r.id)).toContain(created.id);

		expect((await stage(created.id, "fee-committed", { crankerPubkey: submitter.address, feeAmount: "10000" })).body).toMatchObject({ code: 422 });
		const committed = await stage(created.id, "fee-committed", { crankerPubkey: submitter.address, feeAmount: "50000" });
		expect(committed.body).toMatchObject({ status: "FEE_COMMITTED", feeCommittedBy: submitter.address, feeAmount: "50000" });
		expect((await node.http("GET", `/tin-operations/registry-work?operator_pubkey=${submitter.address}&limit=500`, undefined, worker)).body.map((r: { id: string }) => r.id)).toContain(created.id);
		expect((await node.http("GET", `/tin-operations/registry-work?operator_pubkey=${both.address}&limit=500`, undefined, worker)).body.map((r: { id: string }) => r.id)).not.toContain(created.id);

		expect((await stage(created.id, "submitted", { crankerPubkey: submitter.address })).status).toBe(422);
		expect((await stage(created.id, "submitted", { crankerPubkey: submitter.address, transactionSignature: "not-base58-0OIl" })).status).toBe(422);
		expect((await stage(created.id, "submitted", { crankerPubkey: both.address, transactionSignature: SIG })).body).toMatchObject({ code: 403, type: "CRANKER_NOT_ALLOWED" });
		expect((await stage(created.id, "submitted", { crankerPubkey: submitter.address, transactionSignature: SIG })).body).toMatchObject({ status: "SUBMITTED", submittedBy: submitter.address, transactionSignature: SIG });
		// The same report again is a repeat; another transaction in its place is not (a review's replay: it
		// was answered 200, and the submitter sent the second beside the first).
		expect((await stage(created.id, "submitted", { crankerPubkey: submitter.address, transactionSignature: SIG })).body).toMatchObject({ status: "SUBMITTED", transactionSignature: SIG });
		expect((await stage(created.id, "submitted", { crankerPubkey: submitter.address, transactionSignature: "4".repeat(87) })).body).toMatchObject({ code: 409, type: "INVALID_TRANSITION", data: { transactionSignature: SIG } });
		expect((await stage(created.id, "finalized", { crankerPubkey: submitter.address, transactionSignature: "4".repeat(87) })).status).toBe(422);
		const finalized = await stage(created.id, "finalized", { crankerPubkey: submitter.address });
		expect(finalized.body).toMatchObject({ status: "FINALIZED", routeVersion: 1 });
		expect((await node.http("GET", `/tin-operations/${created.id}`)).body).toMatchObject({ status: "FINALIZED", routeVersion: 1 });

		const route = (await node.http("GET", `/registry/tins/${created.tin}`)).body;
		expect(route).toMatchObject({ tin: created.tin, routeVersion: 1, active: true, routeCommitment: finalized.body.request.routeCommitment });
		const payment = await node.http("POST", "/intents", signedIntent(sender, route));
		expect(payment.status).toBe(201);
	});

	it("an update finalizes version 2, and intents signed for version 1 are refused with ROUTE_MISMATCH", async () => {
		const created = (await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "create" }))).body;
		await finalize(created.id, "50000");
		const v1 = (await node.http("GET", `/registry/tins/${created.tin}`)).body;
		expect((await node.http("POST", "/intents", signedIntent(sender, v1))).status).toBe(201);

		const update = (await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "update", tin: created.tin }))).body;
		expect(update).toMatchObject({ intentType: "update", tin: created.tin, status: "PENDING_VERIFICATION" });
		const done = await finalize(update.id, "10000");
		expect(done).toMatchObject({ status: "FINALIZED", routeVersion: 2 });
		const v2 = (await node.http("GET", `/registry/tins/${created.tin}`)).body;
		expect(v2).toMatchObject({ routeVersion: 2, routeCommitment: done.request.routeCommitment });
		expect((await node.http("POST", "/intents", signedIntent(sender, v1))).body).toMatchObject({ code: 422, type: "ROUTE_MISMATCH" });
		expect((await node.http("POST", "/intents", signedIntent(sender, v2))).status).toBe(201);
	});

	it("an intent signed for a route that an update replaced since is REJECTED (ROUTE_MISMATCH) at its first payout request, not leased again and again", async () => {
		const created = (await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "create" }))).body;
		await finalize(created.id, "50000");
		const v1 = (await node.http("GET", `/registry/tins/${created.tin}`)).body;
		const payment = await node.http("POST", "/intents", signedIntent(sender, v1));
		expect(payment.status).toBe(201);
		await finalize((await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "update", tin: created.tin }))).body.id, "10000");

		const settler = node.as(submitter);
		const id = payment.body.id;
		expect((await settler("PATCH", `/intents/${id}/status`, { status: "CRANKER_LEASED", crankerPubkey: submitter.address, expectedVersion: 3 })).status).toBe(200);
		const refused = await settler("POST", "/internal/settlement-authorizations/settlement", { workId: id, crankerPubkey: submitter.address });
		expect(refused.body).toMatchObject({ code: 422, type: "EVIDENCE_INCONSISTENT", data: { reason: "ROUTE_MISMATCH", state: "REJECTED" } });
		// Before, a Cranker could only release it, and the next one leased it again, each round until it expired.
		const intent = (await node.http("GET", `/intents/${id}`, undefined, worker)).body;
		expect(intent).toMatchObject({ receiverStatus: "REJECTED", status: "canceled", rejectionReason: "ROUTE_MISMATCH", stateVersion: 5 });
		expect(intent.history.at(-1)).toEqual({ state: "REJECTED", at: expect.any(String), reason: "ROUTE_MISMATCH" });
		expect((await settler("PATCH", `/intents/${id}/status`, { status: "VERIFIED", crankerPubkey: submitter.address, expectedVersion: 4, reason: "no payout" })).body).toMatchObject({ code: 409 });
		// An intent signed for the live route is paid as before.
		const current = await node.http("POST", "/intents", signedIntent(sender, (await node.http("GET", `/registry/tins/${created.tin}`)).body));
		expect((await settler("PATCH", `/intents/${current.body.id}/status`, { status: "CRANKER_LEASED", crankerPubkey: submitter.address, expectedVersion: 3 })).status).toBe(200);
		expect((await settler("POST", "/internal/settlement-authorizations/settlement", { workId: current.body.id, crankerPubkey: submitter.address })).status).toBe(200);
	});

	it("a payment whose route an update replaced after its lease is refused SUBMITTED (ROUTE_MISMATCH), authorized or not: nothing goes out to a route its owner gave up", async () => {
		const created = (await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "create" }))).body;
		await finalize(created.id, "50000");
		const v1 = (await node.http("GET", `/registry/tins/${created.tin}`)).body;
		const settler = node.as(submitter);
		const [authorized, unasked] = await Promise.all([signedIntent(sender, v1), signedIntent(sender, v1)].map(async body => (await node.http("POST", "/intents", body)).body.id as string));
		for (const id of [authorized, unasked]) expect((await settler("PATCH", `/intents/${id}/status`, { status: "CRANKER_LEASED", crankerPubkey: submitter.address, expectedVersion: 3 })).status).toBe(200);
		expect((await settler("POST", "/internal/settlement-authorizations/settlement", { workId: authorized, crankerPubkey: submitter.address })).status).toBe(200);

		await finalize((await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "update", tin: created.tin }))).body.id, "10000");
		for (const id of [authorized, unasked]) {
			const submitted = await settler("PATCH", `/intents/${id}/status`, { status: "SUBMITTED", crankerPubkey: submitter.address, expectedVersion: 4, transactionSignature: SIG, lastValidBlockHeight: 1000 });
			expect(submitted.body).toMatchObject({ code: 422, type: "EVIDENCE_INCONSISTENT", data: { reason: "ROUTE_MISMATCH" } });
			expect((await node.http("GET", `/intents/${id}`, undefined, worker)).body).toMatchObject({ receiverStatus: "CRANKER_LEASED", stateVersion: 4 });
		}
	});

	it("an update the owner signed earlier never goes live once the owner signed a later one: it ends FAILED (SUPERSEDED) at its fee or its finalization", async () => {
		const tin = genesisOwned.tin;
		const older = (await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "update", tin, issuedAt: iso(-3000) }))).body;
		// A submitter that held the older one back (a review's replay: it went live over the newer route),
		// its fee paid and its registry transaction sent before the owner signed the newer one.
		expect((await stage(older.id, "verified", { crankerPubkey: verifier.address })).status).toBe(200);
		expect((await stage(older.id, "fee-committed", { crankerPubkey: submitter.address, feeAmount: "10000" })).status).toBe(200);
		expect((await stage(older.id, "submitted", { crankerPubkey: submitter.address, transactionSignature: SIG })).status).toBe(200);
		const newer = (await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "update", tin, issuedAt: iso(-2000) }))).body;
		const newest = await finalize(newer.id, "10000");
		const refused = await stage(older.id, "finalized", { crankerPubkey: submitter.address, transactionSignature: SIG });
		expect(refused.body).toMatchObject({ code: 409, type: "INVALID_TRANSITION", data: { status: "FAILED", failureReason: expect.stringMatching(/^SUPERSEDED/) } });
		expect((await node.http("GET", `/tin-operations/${older.id}`)).body).toMatchObject({ status: "FAILED", failureReason: expect.stringMatching(/^SUPERSEDED/) });
		expect((await node.http("GET", `/registry/tins/${tin}`)).body).toMatchObject({ routeCommitment: newest.request.routeCommitment, routeVersion: newest.routeVersion });
		// One still waiting for its fee ends there: no fee is paid for an update that can never go live.
		const stale = (await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "update", tin, issuedAt: iso(-2500) }))).body;
		expect((await stage(stale.id, "verified", { crankerPubkey: verifier.address })).status).toBe(200);
		const unpaid = await stage(stale.id, "fee-committed", { crankerPubkey: submitter.address, feeAmount: "10000" });
		expect(unpaid.body).toMatchObject({ code: 409, type: "INVALID_TRANSITION", data: { status: "FAILED", failureReason: expect.stringMatching(/^SUPERSEDED/) } });
		expect((await node.http("GET", `/tin-operations/${stale.id}`)).body).toMatchObject({ status: "FAILED", failureReason: expect.stringMatching(/^SUPERSEDED/) });
		// Of two pending, only the one signed later goes live: signing it overrode the other.
		const first = (await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "update", tin, issuedAt: iso(-1500) }))).body;
		const second = (await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "update", tin, issuedAt: iso(-1000) }))).body;
		expect((await stage(first.id, "verified", { crankerPubkey: verifier.address })).status).toBe(200);
		expect((await stage(first.id, "fee-committed", { crankerPubkey: submitter.address, feeAmount: "10000" })).body).toMatchObject({ code: 409, data: { failureReason: expect.stringMatching(/^SUPERSEDED/) } });
		const last = await finalize(second.id, "10000");
		expect((await node.http("GET", `/registry/tins/${tin}`)).body).toMatchObject({ routeCommitment: last.request.routeCommitment, routeVersion: newest.routeVersion + 1 });
	});

	it("a Cranker that fails the owner's newer update cannot bring the older one's route live instead (a review's attack)", async () => {
		const tin = genesisOwned.tin;
		const before = (await node.http("GET", `/registry/tins/${tin}`)).body;
		// Signed after every update of this TIN the tests before made, so that only the newer one here can supersede it.
		const abandoned = (await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "update", tin, issuedAt: iso(-500) }))).body;
		const override = (await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "update", tin, issuedAt: iso(-200) }))).body;
		// Any online verifier or submitter may fail an operation (SPEC §5): the newer one, here.
		expect((await stage(override.id, "failed", { crankerPubkey: submitter.address, reason: "no reason at all" })).status).toBe(200);
		expect((await stage(abandoned.id, "verified", { crankerPubkey: verifier.address })).status).toBe(200);
		const refused = await stage(abandoned.id, "fee-committed", { crankerPubkey: submitter.address, feeAmount: "10000" });
		expect(refused.body).toMatchObject({ code: 409, type: "INVALID_TRANSITION", data: { status: "FAILED", failureReason: expect.stringMatching(/^SUPERSEDED/) } });
		expect((await node.http("GET", `/registry/tins/${tin}`)).body).toMatchObject({ routeCommitment: before.routeCommitment, routeVersion: before.routeVersion });

		// The same with the older one's registry transaction sent first: its finalization is refused.
		const held = (await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "update", tin, issuedAt: iso(-150) }))).body;
		expect((await stage(held.id, "verified", { crankerPubkey: verifier.address })).status).toBe(200);
		expect((await stage(held.id, "fee-committed", { crankerPubkey: submitter.address, feeAmount: "10000" })).status).toBe(200);
		expect((await stage(held.id, "submitted", { crankerPubkey: submitter.address, transactionSignature: SIG })).status).toBe(200);
		const later = (await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "update", tin, issuedAt: iso(-100) }))).body;
		expect((await stage(later.id, "failed", { crankerPubkey: submitter.address, reason: "no reason at all" })).status).toBe(200);
		const unfinished = await stage(held.id, "finalized", { crankerPubkey: submitter.address, transactionSignature: SIG });
		expect(unfinished.body).toMatchObject({ code: 409, data: { status: "FAILED", failureReason: expect.stringMatching(/^SUPERSEDED/) } });
		expect((await node.http("GET", `/registry/tins/${tin}`)).body).toMatchObject({ routeCommitment: before.routeCommitment, routeVersion: before.routeVersion });
	});

	it("only the Cranker that submitted an operation finalizes it: another online submitter is refused (403)", async () => {
		await heartbeatAll();
		const created = (await node.http("POST", "/tin-operations", signedTinOperation(newWallet(), { intentType: "create" }))).body;
		expect((await stage(created.id, "verified", { crankerPubkey: verifier.address })).status).toBe(200);
		expect((await stage(created.id, "fee-committed", { crankerPubkey: submitter.address, feeAmount: "50000" })).status).toBe(200);
		expect((await stage(created.id, "submitted", { crankerPubkey: submitter.address, transactionSignature: SIG })).status).toBe(200);
		expect((await stage(created.id, "finalized", { crankerPubkey: both.address, transactionSignature: SIG })).body).toMatchObject({ code: 403, type: "CRANKER_NOT_ALLOWED" });
		expect((await node.http("GET", `/tin-operations/${created.id}`)).body).toMatchObject({ status: "SUBMITTED" });
	});

	it("an operation whose signed expiresAt has passed is not moved on before its registry transaction: it ends FAILED (EXPIRED); one submitted before still finalizes", async () => {
		await heartbeatAll();
		const signed = () => signedTinOperation(newWallet(), { intentType: "create", issuedAt: iso(-1000), expiresAt: iso(2000) });
		const [pending, verified, committed, submitted] = await Promise.all([signed(), signed(), signed(), signed()].map(async body => (await node.http("POST", "/tin-operations", body)).body));
		for (const op of [verified, committed, submitted]) expect((await stage(op.id, "verified", { crankerPubkey: verifier.address })).status).toBe(200);
		for (const op of [committed, submitted]) expect((await stage(op.id, "fee-committed", { crankerPubkey: submitter.address, feeAmount: "50000" })).status).toBe(200);
		expect((await stage(submitted.id, "submitted", { crankerPubkey: submitter.address, transactionSignature: SIG })).status).toBe(200);
		await new Promise(resolve => setTimeout(resolve, 2100));
		const expired = { code: 409, type: "INVALID_TRANSITION", data: { status: "FAILED", failureReason: expect.stringMatching(/^EXPIRED/) } };
		// Refusals come first: a Cranker that may not make the move changes nothing.
		expect((await stage(pending.id, "fee-committed", { crankerPubkey: submitter.address, feeAmount: "50000" })).body).toMatchObject({ code: 409, data: { status: "PENDING_VERIFICATION" } });
		expect((await stage(pending.id, "verified", { crankerPubkey: verifier.address })).body).toMatchObject(expired);
		expect((await stage(verified.id, "fee-committed", { crankerPubkey: submitter.address, feeAmount: "50000" })).body).toMatchObject(expired);
		expect((await stage(committed.id, "submitted", { crankerPubkey: submitter.address, transactionSignature: SIG })).body).toMatchObject(expired);
		expect((await stage(submitted.id, "finalized", { crankerPubkey: submitter.address, transactionSignature: SIG })).body).toMatchObject({ status: "FINALIZED" });
	});

	it("never lets a route go live for an operation that a racing stage failed", async () => {
		for (let round = 0; round < 5; round++) {
			const { id, tin } = (await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "create" }))).body;
			await stage(id, "verified", { crankerPubkey: verifier.address });
			await stage(id, "fee-committed", { crankerPubkey: submitter.address, feeAmount: "50000" });
			await stage(id, "submitted", { crankerPubkey: submitter.address, transactionSignature: SIG });
			const [finalized, failed] = await Promise.all([
				stage(id, "finalized", { crankerPubkey: submitter.address }),
				stage(id, "failed", { crankerPubkey: verifier.address, reason: "race" })
			]);
			const final = (await node.http("GET", `/tin-operations/${id}`)).body;
			const route = await node.http("GET", `/registry/tins/${tin}`);
			if (final.status === "FINALIZED") {
				expect(finalized.status).toBe(200);
				expect(failed.status).toBe(409);
				expect(route.body).toMatchObject({ routeVersion: 1, active: true });
			} else {
				expect(final.status).toBe("FAILED");
				expect(failed.status).toBe(200);
				expect(finalized.status).toBe(409);
				expect(route.status).toBe(404);
			}
		}
	});

	it("refuses moves in SPEC §5's order and answers a repeated move with 200", async () => {
		const { id } = (await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "create" }))).body;
		expect((await stage("top_missing", "verified", { crankerPubkey: verifier.address })).body).toMatchObject({ code: 404 });
		// 404 comes before the field checks (422) too.
		expect((await stage("top_missing", "fee-committed", { crankerPubkey: submitter.address, feeAmount: "x" })).body).toMatchObject({ code: 404 });
		expect((await stage(id, "finalized", { crankerPubkey: submitter.address })).body).toMatchObject({ code: 409, type: "INVALID_TRANSITION" });
		expect((await stage(id, "verified", { crankerPubkey: submitter.address })).body).toMatchObject({ code: 403, type: "CRANKER_NOT_ALLOWED" });
		expect((await stage(id, "verified", { crankerPubkey: newWallet().address })).body).toMatchObject({ code: 403, type: "CRANKER_NOT_ALLOWED" });
		const first = await stage(id, "verified", { crankerPubkey: both.address });
		const repeat = await stage(id, "verified", { crankerPubkey: both.address });
		expect(repeat.status).toBe(200);
		expect(repeat.body).toEqual(first.body);
		// Separation of duties: the verifier cannot commit the fee.
		expect((await stage(id, "fee-committed", { crankerPubkey: both.address, feeAmount: "50000" })).body).toMatchObject({ code: 403, type: "CRANKER_NOT_ALLOWED" });
		expect((await stage(id, "rejected", { crankerPubkey: verifier.address })).body).toMatchObject({ code: 422 });
		// Nor may an owner that is also a verifier verify its own operation.
		const own = (await node.http("POST", "/tin-operations", signedTinOperation(both, { intentType: "create" }))).body;
		expect((await stage(own.id, "verified", { crankerPubkey: both.address })).body).toMatchObject({ code: 403, type: "CRANKER_NOT_ALLOWED", message: "The owner of a TIN operation cannot verify it" });
		expect((await stage(own.id, "verified", { crankerPubkey: verifier.address })).status).toBe(200);
		const rejected = await stage(id, "rejected", { crankerPubkey: verifier.address, reason: "route commitment unreadable" });
		expect(rejected.body).toMatchObject({ status: "REJECTED", failureReason: "route commitment unreadable" });
		expect((await node.http("GET", `/tin-operations/${id}`)).body).toMatchObject({ status: "REJECTED", failureReason: "route commitment unreadable" });
		expect((await stage(id, "failed", { crankerPubkey: verifier.address, reason: "late" })).body).toMatchObject({ code: 409, type: "INVALID_TRANSITION" });
	});

	it("fails an operation from any non-terminal state, not rejects once the fee is committed", async () => {
		const { id } = (await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "create" }))).body;
		await stage(id, "verified", { crankerPubkey: verifier.address });
		await stage(id, "fee-committed", { crankerPubkey: submitter.address, feeAmount: "50000" });
		expect((await stage(id, "rejected", { crankerPubkey: verifier.address, reason: "x" })).body).toMatchObject({ code: 409 });
		const failed = await stage(id, "failed", { crankerPubkey: submitter.address, reason: "fee transfer failed" });
		expect(failed.body).toMatchObject({ status: "FAILED", failureReason: "fee transfer failed" });
	});
});

/** A look at the registry as it is on disk, before any start reconciles it. */
async function routeOnDisk(tin: string): Promise<{ status: number }> {
	const db = new Database(path.join(dataDir, "tin.sqlite"), { readonly: true });
	const row = db.prepare("SELECT doc FROM registry_routes WHERE id = ?").get(tin);
	db.close();
	return { status: row ? 200 : 404 };
}

describe("restarts", () => {
	it("loses nothing between stages, and finishes a finalization a crash interrupted", async () => {
		const created = (await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "create" }))).body;
		await stage(created.id, "verified", { crankerPubkey: verifier.address });
		await stage(created.id, "fee-committed", { crankerPubkey: submitter.address, feeAmount: "50000" });
		await node.stop();

		node = await startNode({ REGISTRY_SEED_FILE: path.join(dataDir, "registry-seed.json") }, dataDir);
		await heartbeatAll();
		expect((await node.http("GET", `/tin-operations/${created.id}`)).body.status).toBe("FEE_COMMITTED");
		expect((await stage(created.id, "submitted", { crankerPubkey: submitter.address, transactionSignature: SIG })).status).toBe(200);
		await node.stop();

		// A crash right after the finalization began (the operation marked, its route not yet written),
		// by an earlier version: its mark keeps no FINALIZED entry, which is rebuilt at the start.
		const db = new Database(path.join(dataDir, "tin.sqlite"));
		const op = JSON.parse((db.prepare("SELECT doc FROM tin_operations WHERE id = ?").get(created.id) as { doc: string }).doc);
		const marked = { ...op, finalizing: new Date().toISOString() };
		db.prepare("UPDATE tin_operations SET finalizing = ?, doc = ? WHERE id = ?").run(marked.finalizing, JSON.stringify(marked), created.id);
		db.close();
		expect((await routeOnDisk(created.tin)).status).toBe(404);

		node = await startNode({ REGISTRY_SEED_FILE: path.join(dataDir, "registry-seed.json") }, dataDir);
		await heartbeatAll();
		expect((await node.http("GET", `/tin-operations/${created.id}`)).body).toMatchObject({ status: "FINALIZED", routeVersion: 1 });
		expect((await node.http("GET", `/registry/tins/${created.tin}`)).body).toMatchObject({ routeVersion: 1, routeCommitment: op.request.routeCommitment });
		// The submitter's own finalize, sent after the restart, is a repeat: 200, nothing changes.
		const repeated = (await stage(created.id, "finalized", { crankerPubkey: submitter.address })).body;
		expect(repeated).toMatchObject({ status: "FINALIZED", routeVersion: 1 });
		expect(repeated.history.at(-1)).toStrictEqual({ status: "FINALIZED", at: marked.finalizing, by: submitter.address });
	});
});
