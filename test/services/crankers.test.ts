/**
 * The crankers service alone, on a real SQLite file: a broker with just this owner, called as the
 * gateway calls it, with the request signer's key in `meta` (the gateway verified the request's
 * signature; the heartbeat must be signed by that same key). Real ed25519 signatures throughout.
 */
import { randomBytes } from "node:crypto";
import { ServiceBroker } from "moleculer";
import { waitFor } from "../../devkit/process";
import { loadConfig } from "../../lib/config";
import { newBusKeyring } from "../../lib/bus-signatures";
import { MAX_CLOCK_SKEW_S } from "../../lib/http-signature";
import { crankersService } from "../../services/crankers.service";
import { MINT, crankerCallMeta, iso, newWallet, signedHeartbeat, walletOf, type Wallet } from "../helpers/fixtures";
import { sleep, tempDir } from "../helpers/node";

async function startCrankers(env: Record<string, string> = {}) {
	const broker = new ServiceBroker({ logger: false });
	broker.createService(crankersService(loadConfig({ DATA_DIR: tempDir(), SWEEP_INTERVAL_MS: "50", ...env })));
	await broker.start();
	return {
		broker,
		/** A heartbeat as the gateway hands it over: from a request signed by `signer`. */
		heartbeat: async (heartbeat: ReturnType<typeof signedHeartbeat>, signer = heartbeat.crankerPubkey) =>
			broker.call<{ online: boolean }, object>("crankers.heartbeat", heartbeat, { meta: await crankerCallMeta(walletOf(signer), "crankers.heartbeat", heartbeat) }),
		standing: (cranker: Wallet) => broker.call<{ online: boolean; roles: string[] }, object>("crankers.standing", { crankerPubkey: cranker.address }),
		summary: () => broker.call<{ online: number; total: number; byRole: Record<string, number>; mints: Record<string, unknown> }>("crankers.summary")
	};
}

describe("heartbeats", () => {
	let crankers: Awaited<ReturnType<typeof startCrankers>>;
	beforeEach(async () => (crankers = await startCrankers()));
	afterEach(() => crankers.broker.stop());

	test("a heartbeat its Cranker signed, in a request that Cranker signed, makes it online with its roles and liquidity", async () => {
		const cranker = newWallet();
		expect(await crankers.heartbeat(signedHeartbeat(cranker, ["settlement", "verifier"]))).toMatchObject({ crankerPubkey: cranker.address, online: true });
		expect(await crankers.standing(cranker)).toEqual({ online: true, roles: ["settlement", "verifier"] });
		expect(await crankers.summary()).toMatchObject({ online: 1, total: 1, byRole: { settlement: 1, verifier: 1 }, mints: { [MINT]: { liquidity: "1000000000", crankersOnline: 1 } } });
	});

	test("a heartbeat in a request another key signed, or whose own signature does not verify, is refused and stores nothing", async () => {
		const cranker = newWallet();
		await expect(crankers.heartbeat(signedHeartbeat(cranker), newWallet().address)).rejects.toMatchObject({ type: "FORBIDDEN", data: { reason: "keyid-mismatch" } });
		const forged = { ...signedHeartbeat(cranker), signature: signedHeartbeat(newWallet()).signature };
		await expect(crankers.heartbeat(forged)).rejects.toMatchObject({ type: "INVALID_SIGNATURE" });
		// Signed, but over other roles than it claims.
		await expect(crankers.heartbeat({ ...signedHeartbeat(cranker, ["settlement"]), roles: ["verifier"] })).rejects.toMatchObject({ type: "INVALID_SIGNATURE" });
		expect(await crankers.standing(cranker)).toEqual({ online: false, roles: [] });
		expect(await crankers.summary()).toMatchObject({ online: 0, total: 0 });
	});

	test("only a newer heartbeat than the last accepted is accepted: a replay, an older one or one a minute off the clock is STALE_HEARTBEAT", async () => {
		const cranker = newWallet();
		const first = signedHeartbeat(cranker, ["settlement"], { sentAt: iso(-1000) });
		await crankers.heartbeat(first);
		await expect(crankers.heartbeat(first)).rejects.toMatchObject({ type: "STALE_HEARTBEAT" });
		await expect(crankers.heartbeat(signedHeartbeat(cranker, ["verifier"], { sentAt: iso(-2000) }))).rejects.toMatchObject({ type: "STALE_HEARTBEAT" });
		await expect(crankers.heartbeat(signedHeartbeat(cranker, ["verifier"], { sentAt: iso(61_000) }))).rejects.toMatchObject({ type: "STALE_HEARTBEAT" });
		expect((await crankers.standing(cranker)).roles).toEqual(["settlement"]);
		await crankers.heartbeat(signedHeartbeat(cranker, ["verifier"]));
		expect((await crankers.standing(cranker)).roles).toEqual(["verifier"]);
	});

	test("the same heartbeat sent five times at once is accepted once", async () => {
		const heartbeat = signedHeartbeat(newWallet());
		const outcomes = await Promise.allSettled(Array.from({ length: 5 }, () => crankers.heartbeat(heartbeat)));
		expect(outcomes.filter(outcome => outcome.status === "fulfilled")).toHaveLength(1);
		expect(outcomes.filter(outcome => outcome.status === "rejected").map(outcome => (outcome as PromiseRejectedResult).reason.type)).toEqual(Array(4).fill("STALE_HEARTBEAT"));
		expect(await crankers.summary()).toMatchObject({ online: 1, total: 1 });
	});

	test("a signed heartbeat sent again on the bus, naming the first call's parent, is a replay: a refused one cannot take effect later", async () => {
		const cranker = newWallet();
		// sentAt just over 60 s ahead: refused (STALE_HEARTBEAT), its signature admitted all the same.
		const ahead = signedHeartbeat(cranker, ["settlement"], { sentAt: iso(61_500) });
		const meta = await crankerCallMeta(cranker, "crankers.heartbeat", ahead);
		const fromParent = (parentID: string) =>
			crankers.broker.call("crankers.heartbeat", ahead, { meta, parentCtx: { id: parentID, level: 1, meta: {}, requestID: parentID } as never }).then(
				() => "accepted",
				(error: { type?: string; data?: { reason?: string } }) => `${error.type} ${error.data?.reason ?? ""}`.trim()
			);
		expect(await fromParent("gateway-request-1")).toBe("STALE_HEARTBEAT");
		await sleep(2000); // inside the Node's 60 s now
		expect(await fromParent("gateway-request-1")).toBe("FORBIDDEN replayed");
		expect(await fromParent("another-parent")).toBe("FORBIDDEN replayed");
		expect(await crankers.standing(cranker)).toEqual({ online: false, roles: [] });
	});

	test("a request signature is admitted once; the same one again within its window is a replay", async () => {
		const admit = (signature: string, created: number) => crankers.broker.call("crankers.admitSignature", { keyid: newWallet().address, signature, created });
		const now = Math.floor(Date.now() / 1000);
		await expect(admit("sig-a", now)).resolves.toBe(true);
		await expect(admit("sig-a", now)).rejects.toMatchObject({ type: "FORBIDDEN", data: { reason: "replayed" } });
		// One whose window is over is forgotten by the next sweep (the gateway refuses it as too old anyway).
		await admit("sig-old", now - MAX_CLOCK_SKEW_S - 5);
		await waitFor(() => admit("sig-old", now - MAX_CLOCK_SKEW_S - 5).catch(() => false), 5000, "the expired signature forgotten");
		await expect(admit("sig-a", now)).rejects.toMatchObject({ type: "FORBIDDEN" });
	});
});

test("CRANKER_OPERATORS: a Cranker not listed is refused, however well signed", async () => {
	const operator = newWallet();
	const crankers = await startCrankers({ CRANKER_OPERATORS: operator.address });
	try {
		await expect(crankers.heartbeat(signedHeartbeat(newWallet()))).rejects.toMatchObject({ type: "CRANKER_NOT_ALLOWED" });
		await crankers.heartbeat(signedHeartbeat(operator));
		expect(await crankers.summary()).toMatchObject({ online: 1, total: 1 });
	} finally {
		await crankers.broker.stop();
	}
});

test("a Cranker silent for CRANKER_TTL_MS is offline and leaves the figures; silent for CRANKER_RETENTION_MS, its record is pruned", async () => {
	const crankers = await startCrankers({ CRANKER_TTL_MS: "300", CRANKER_RETENTION_MS: "2000" });
	try {
		const cranker = newWallet();
		await crankers.heartbeat(signedHeartbeat(cranker));
		expect(await crankers.summary()).toMatchObject({ online: 1, total: 1 });
		await sleep(400);
		expect(await crankers.standing(cranker)).toEqual({ online: false, roles: ["settlement"] });
		expect(await crankers.summary()).toEqual({ online: 0, total: 1, byRole: { settlement: 0, verifier: 0, submitter: 0 }, mints: {} });
		expect(await crankers.broker.call("crankers.onlineCount")).toBe(0);
		await waitFor(async () => (await crankers.summary()).total === 0, 5000, "the record pruned");
		expect(await crankers.standing(cranker)).toEqual({ online: false, roles: [] });
	} finally {
		await crankers.broker.stop();
	}
});

test("with replicas, a heartbeat another replica stamped long before it was stored (a slow MongoDB write) is counted once stored", async () => {
	// A transporter says replicas may share the store; this broker runs without one.
	const crankers = await startCrankers({ TRANSPORTER: "nats://127.0.0.1:4222", NATS_USER: "owners", ...newBusKeyring().env("owners"), SERVICES: "crankers", WEBHOOK_SECRETS_KEY: randomBytes(32).toString("base64"), WORKER_API_KEYS: randomBytes(24).toString("hex") });
	try {
		await crankers.heartbeat(signedHeartbeat(newWallet()));
		await sleep(200);
		// Stored now by the other replica, stamped 20 s ago: still within CRANKER_TTL_MS (30 s).
		const late = newWallet();
		const stampedAt = new Date(Date.now() - 20_000).toISOString();
		const store = (crankers.broker.getLocalService("crankers") as unknown as { crankers: { insert(doc: object): Promise<boolean> } }).crankers;
		await store.insert({ id: late.address, crankerPubkey: late.address, roles: ["verifier"], liquidity: [], version: null, lastSentAt: stampedAt, lastSeenAt: stampedAt, callKey: "other-replica" });
		await waitFor(async () => (await crankers.summary()).online === 2, 3000, "the late heartbeat counted");
		expect(await crankers.summary()).toMatchObject({ online: 2, byRole: { settlement: 1, verifier: 1 } });
	} finally {
		await crankers.broker.stop();
	}
});

test("a restarted owner counts the Crankers online from its store", async () => {
	const dataDir = tempDir();
	// No sweep in the test's time: the figures come from the catch-up at start.
	const first = await startCrankers({ DATA_DIR: dataDir, SWEEP_INTERVAL_MS: "60000" });
	try {
		await first.heartbeat(signedHeartbeat(newWallet(), ["settlement"]));
		await first.heartbeat(signedHeartbeat(newWallet(), ["verifier"]));
	} finally {
		await first.broker.stop();
	}
	const second = await startCrankers({ DATA_DIR: dataDir, SWEEP_INTERVAL_MS: "60000" });
	try {
		expect(await second.summary()).toMatchObject({ online: 2, total: 2, byRole: { settlement: 1, verifier: 1 } });
	} finally {
		await second.broker.stop();
	}
});
