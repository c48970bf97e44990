/**
 * Broker calls that are safe to repeat (services/replay.ts): the same call sent twice, as a broker
 * retry or a redelivery would send it (same parent context), gets the first call's answer from
 * each state-changing action; the same body from another call is still refused where it must be.
 * Real broker, real services, real SQLite files: only the second delivery is made by hand.
 */
import type { Context } from "moleculer";
import type { GenesisRoute } from "../../lib/registry";
import { requestDigest } from "../../lib/digest";
import { crankerCallMeta, newRoute, newWallet, signedAccessProof, signedHeartbeat, signedIntent, signedTinOperation, writeSeedFile } from "../helpers/fixtures";
import { startNode, tempDir, type TestNode } from "../helpers/node";

let node: TestNode;
let route: GenesisRoute;

/** A parent context, as the gateway's request context is for the calls it makes. */
function caller(): Context {
	return node.broker.ContextFactory.create(node.broker, null as never, {}, {}) as Context;
}

/**
 * Calls `action` twice from the same parent context (a retry) and answers both outcomes. `meta` is
 * made for each call: a Cranker signs each attempt anew (a signature is admitted once).
 */
async function twice(parent: Context, action: string, params: object, meta: () => object | Promise<object> = () => ({})) {
	const call = async () => parent.call(action, params, { meta: await meta() }).then(
		value => ({ ok: true as const, value }),
		(error: { type?: string }) => ({ ok: false as const, type: error.type })
	);
	return [await call(), await call()] as const;
}

beforeAll(async () => {
	const dataDir = tempDir();
	route = newRoute();
	node = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]), ALLOW_SINGLE_CRANKER_TINS: "true" }, dataDir);
});
afterAll(() => node.stop());

describe("a repeated call gets the first call's answer", () => {
	test("access.consume: the nonce it consumed is not NONCE_REUSED for its own retry, but is for anyone else", async () => {
		const wallet = newWallet();
		const body = signedAccessProof(wallet);
		const [first, retry] = await twice(caller(), "access.consume", body);
		expect(first.ok).toBe(true);
		expect(retry).toStrictEqual(first);
		const [other] = await twice(caller(), "access.consume", body);
		expect(other).toStrictEqual({ ok: false, type: "NONCE_REUSED" });
	});

	test("crankers.heartbeat: its retry (signed anew) is not STALE_HEARTBEAT; another call with the same sentAt is", async () => {
		const cranker = newWallet();
		const heartbeat = signedHeartbeat(cranker);
		const signed = () => crankerCallMeta(cranker, "crankers.heartbeat", heartbeat);
		const [first, retry] = await twice(caller(), "crankers.heartbeat", heartbeat, signed);
		expect(first.ok).toBe(true);
		expect(retry).toStrictEqual(first);
		const [other] = await twice(caller(), "crankers.heartbeat", heartbeat, signed);
		expect(other).toStrictEqual({ ok: false, type: "STALE_HEARTBEAT" });
		// The same signed request again, even from the same parent (whoever sends it names that), is a replay.
		const newer = signedHeartbeat(cranker, ["settlement"], { sentAt: new Date(Date.now() + 2000).toISOString() });
		const meta = await crankerCallMeta(cranker, "crankers.heartbeat", newer);
		const [accepted, replayed] = await twice(caller(), "crankers.heartbeat", newer, () => meta);
		expect(accepted.ok).toBe(true);
		expect(replayed).toStrictEqual({ ok: false, type: "FORBIDDEN" });
	});

	test("mempool.receive: the retry of the call that recorded the intent answers created", async () => {
		const request = signedIntent(newWallet(), route);
		const intake = { request, epoch: 1, requestDigest: requestDigest(request) };
		const [first, retry] = await twice(caller(), "mempool.receive", intake);
		expect(first).toMatchObject({ ok: true, value: { created: true } });
		expect(retry).toStrictEqual(first);
		const [other] = await twice(caller(), "mempool.receive", intake);
		expect(other).toMatchObject({ ok: true, value: { created: false } });
	});

	test("epochs.close: the retry answers with the close it began instead of closing the next epoch", async () => {
		const before = (await node.broker.call<{ epoch: number }>("epochs.current")).epoch;
		const [first, retry] = await twice(caller(), "epochs.close", {});
		expect(first).toMatchObject({ ok: true, value: { epoch: before } });
		expect(retry).toStrictEqual(first);
		expect((await node.broker.call<{ epoch: number }>("epochs.current")).epoch).toBe(before + 1);
		const [other] = await twice(caller(), "epochs.close", {});
		expect(other).toMatchObject({ ok: true, value: { epoch: before + 1 } });
	});

	test("a TIN stage: the retry of a stage move answers with the moved operation", async () => {
		const owner = newWallet();
		const verifier = newWallet();
		expect((await node.as(verifier)("POST", "/crankers/heartbeat", signedHeartbeat(verifier, ["verifier"]))).status).toBe(200);
		const created = await node.http("POST", "/tin-operations", signedTinOperation(owner, { intentType: "create" }));
		expect(created.status).toBe(201);
		const params = { id: created.body.id as string, crankerPubkey: verifier.address };
		const [first, retry] = await twice(caller(), "tin.verified", params, () => crankerCallMeta(verifier, "tin.verified", params));
		expect(first).toMatchObject({ ok: true, value: { status: "VERIFIED" } });
		expect(retry).toStrictEqual(first);
	});
});
