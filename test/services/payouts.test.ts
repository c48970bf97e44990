/**
 * The payouts service on a real SQLite file, with small stand-ins for the owners it asks: the
 * mempool (which owns leases: its stand-in applies the same rule, lib/intents.ts leaseForPayout, to
 * records the test holds) and the TIN owner (the active route of a TIN). A lease holder gets one
 * authorization, signed with the Node authority key, and the same one again while it is valid; no
 * other Cranker gets one meanwhile.
 */
import path from "node:path";
import { ServiceBroker, type Context, type ServiceSchema } from "moleculer";
import { buildPayoutMessage, payoutNullifier } from "../../lib/canonical";
import { loadConfig } from "../../lib/config";
import { verifySignature } from "../../lib/ed25519";
import { leaseForPayout, rejectReplacedRoute, type LeasedIntentRecord } from "../../lib/intents";
import type { PayoutAuthorization } from "../../lib/payout";
import type { ActiveRoute } from "../../lib/registry";
import { AUTHORITY_KEYPAIR_FILE, readKeypairFile } from "../../lib/secrets";
import { payoutsService } from "../../services/payouts.service";
import { crankerCallMeta, iso, newRoute, newWallet, signedIntent, uniqueId, walletOf } from "../helpers/fixtures";
import { sleep, tempDir } from "../helpers/node";

const route = newRoute();
/** The intents the stand-in mempool holds, by id. */
const intents = new Map<string, LeasedIntentRecord>();
/** The route the stand-in TIN owner answers for `route.tin`. */
let activeRoute: ActiveRoute | null = { ...route };
/** What the stand-in Cranker owner answers of a Cranker's standing (not listed: online, with the settlement role). */
const standings = new Map<string, { online: boolean; roles: string[] }>();
/** Set: the stand-in TIN owner holds its answers until this many requests wait, then answers them all at once. */
let gate: { size: number; waiting: (() => void)[] } | null = null;
/** Set: the stand-in TIN owner's next answers, one per request in order, each when its promise settles. */
let scriptedRoutes: Promise<ActiveRoute | null>[] = [];

function resolveRoute(tin: string): ActiveRoute | null | Promise<ActiveRoute | null> {
	const scripted = scriptedRoutes.shift();
	if (scripted) return scripted;
	const answer = tin === route.tin ? activeRoute : null;
	if (!gate) return answer;
	const held = gate;
	return new Promise(resolve => {
		held.waiting.push(() => resolve(answer));
		if (held.waiting.length === held.size) for (const release of held.waiting) release();
	});
}

const standIns: ServiceSchema[] = [
	{
		name: "mempool",
		actions: {
			leaseForPayout: (ctx: Context<{ id: string; crankerPubkey: string }>) => {
				const record = intents.get(ctx.params.id)!;
				leaseForPayout(record, ctx.params.crankerPubkey, Date.now(), null);
				return record;
			},
			rejectReplacedRoute: (ctx: Context<{ id: string; stateVersion: number; liveRouteVersion: number }>) => {
				const record = intents.get(ctx.params.id)!;
				const next = record.stateVersion === ctx.params.stateVersion ? rejectReplacedRoute(record, ctx.params.liveRouteVersion, iso(0)) : null;
				if (next) intents.set(record.id, next as LeasedIntentRecord);
				return next !== null;
			}
		}
	},
	{ name: "tin", actions: { resolve: (ctx: Context<{ tin: string }>) => resolveRoute(ctx.params.tin) } },
	{ name: "crankers", actions: { admitSignature: () => true, standing: (ctx: Context<{ crankerPubkey: string }>) => standings.get(ctx.params.crankerPubkey) ?? { online: true, roles: ["settlement"] } } }
];

/** An intent leased to `cranker` until `leaseMs` from now. */
function leasedIntent(cranker: string, leaseMs = 60_000, signedFor: ActiveRoute = route): LeasedIntentRecord {
	const request = signedIntent(newWallet(), signedFor);
	const record = { id: uniqueId("int"), paymentId: request.paymentId, state: "CRANKER_LEASED", stateVersion: 4, history: [], request, transactionCommitment: request.transactionCommitment, expiresAt: request.senderAuthorizationExpiresAt, expiresAtSlot: request.expiresAtSlot, lease: { crankerPubkey: cranker, leasedAt: iso(0), expiresAt: iso(leaseMs) } };
	intents.set(record.id, record as unknown as LeasedIntentRecord);
	return intents.get(record.id)!;
}

const dataDir = tempDir();
let broker: ServiceBroker;
/** POST /internal/settlement-authorizations/settlement as the gateway hands it over: from a request signed by `signer`. */
const authorize = async (workId: string, crankerPubkey: string, signer = crankerPubkey) =>
	broker.call<PayoutAuthorization, object>("payouts.authorize", { workId, crankerPubkey }, { meta: await crankerCallMeta(walletOf(signer), "payouts.authorize", { workId, crankerPubkey }) });

beforeAll(async () => {
	broker = new ServiceBroker({ logger: false });
	for (const standIn of standIns) broker.createService(standIn);
	broker.createService(payoutsService(loadConfig({ DATA_DIR: dataDir })));
	await broker.start();
});
afterAll(() => broker.stop());
afterEach(() => {
	activeRoute = { ...route };
	gate = null;
	scriptedRoutes = [];
});

test("the lease holder gets an authorization of its lease, signed by the Node authority key; asked again, the same one", async () => {
	const cranker = newWallet().address;
	const record = leasedIntent(cranker);
	const authorization = await authorize(record.id, cranker);
	expect(authorization).toMatchObject({
		kind: "SVC_PAYOUT_AUTHORIZATION",
		workId: record.id,
		paymentId: record.paymentId,
		crankerPubkey: cranker,
		amount: record.request.amount,
		transactionCommitment: record.transactionCommitment,
		payoutNullifier: payoutNullifier(record.request.senderWallet, record.request.senderAuthorizationNonce)
	});
	const { kind: _kind, version: _version, authorizationSigner, authorizationMessage, authorizationSignature, ...fields } = authorization;
	expect(authorizationMessage).toBe(buildPayoutMessage(fields));
	// The key the Node generated into DATA_DIR at its first start, and no other.
	expect(authorizationSigner).toBe(readKeypairFile(path.join(dataDir, AUTHORITY_KEYPAIR_FILE)).publicKey);
	expect(verifySignature(authorizationSigner, authorizationMessage, authorizationSignature)).toBe(true);
	expect(await authorize(record.id, cranker)).toEqual(authorization);
});

test("the authority key is never a setting: what the service publishes to other nodes holds nothing of it", () => {
	// The INFO packet this node sends every other: its services with their settings.
	const { services } = broker.getLocalNodeInfo() as unknown as { services: { name: string; settings: object }[] };
	expect(services.find(service => service.name === "payouts")?.settings).toEqual({});
});

test("requests of the holder racing for one intent are all answered the same authorization", async () => {
	const cranker = newWallet().address;
	const record = leasedIntent(cranker);
	const answers = await Promise.all(Array.from({ length: 5 }, () => authorize(record.id, cranker)));
	expect(new Set(answers.map(answer => answer.authorizationSignature)).size).toBe(1);
});

test("while an authorization is valid, a Cranker that leased the intent since gets none; once it lapsed, it gets its own", async () => {
	const first = newWallet().address;
	const record = leasedIntent(first, 1500);
	const earlier = await authorize(record.id, first);
	// The lease lapsed and another Cranker leased the intent; the first authorization lives to the first lease's end.
	const second = newWallet().address;
	intents.set(record.id, { ...record, lease: { crankerPubkey: second, leasedAt: iso(0), expiresAt: iso(60_000) } });
	await expect(authorize(record.id, second)).rejects.toMatchObject({ type: "INVALID_TRANSITION", data: { authorizationExpiresAt: earlier.expiresAt } });
	await sleep(Date.parse(earlier.expiresAt) - Date.now() + 20);
	// Its requests racing to replace the lapsed one, each begun a few milliseconds after the other (so each
	// would sign another issuedAt) and all reading the lapsed one at once: one is stored, and all answer it.
	gate = { size: 5, waiting: [] };
	const racing: Promise<PayoutAuthorization>[] = [];
	for (let i = 0; i < gate.size; i++) {
		racing.push(authorize(record.id, second));
		await sleep(3);
	}
	const answers = await Promise.all(racing);
	expect(answers[0]).toMatchObject({ crankerPubkey: second, workId: record.id });
	expect(new Set(answers.map(answer => answer.authorizationSignature)).size).toBe(1);
});

test("refused without an authorization: a request another key signed, a Cranker without the lease, a route no longer active", async () => {
	const cranker = newWallet().address;
	const record = leasedIntent(cranker);
	await expect(authorize(record.id, cranker, newWallet().address)).rejects.toMatchObject({ type: "FORBIDDEN", data: { reason: "keyid-mismatch" } });
	await expect(authorize(record.id, newWallet().address)).rejects.toMatchObject({ type: "NOT_LEASE_HOLDER" });
	// No live route (the stand-in's answer for a TIN it does not know): refused, and the intent stays leased.
	activeRoute = null;
	await expect(authorize(record.id, cranker)).rejects.toMatchObject({ type: "EVIDENCE_INCONSISTENT", data: { reason: "ROUTE_MISMATCH" } });
	expect(intents.get(record.id)?.state).toBe("CRANKER_LEASED");
	// None of them stored one: the holder's first authorization is issued now, not repeated.
	activeRoute = { ...route };
	await sleep(5);
	const issuedAfter = Date.now();
	expect(Date.parse((await authorize(record.id, cranker)).issuedAt)).toBeGreaterThanOrEqual(issuedAfter);
});

test("no authorization for a lease holder no longer online with the settlement role: gone offline, or struck from CRANKER_OPERATORS (a review's replay)", async () => {
	const cranker = newWallet().address;
	const record = leasedIntent(cranker);
	for (const standing of [{ online: false, roles: ["settlement"] }, { online: true, roles: ["verification"] }]) {
		standings.set(cranker, standing);
		await expect(authorize(record.id, cranker)).rejects.toMatchObject({ type: "CRANKER_NOT_ALLOWED" });
	}
	// Back online, it gets the first authorization of that lease: the refusals stored none.
	standings.delete(cranker);
	await sleep(5);
	const issuedAfter = Date.now();
	expect(Date.parse((await authorize(record.id, cranker)).issuedAt)).toBeGreaterThanOrEqual(issuedAfter);
});

test("no authorization for a record whose payment its sender never signed, however it got leased (the bus is one trust zone: a deployment review)", async () => {
	const cranker = newWallet().address;
	const record = leasedIntent(cranker);
	// As a process holding the bus credentials could have stored it: the signed amount changed after signing.
	intents.set(record.id, { ...record, request: { ...record.request, amount: "999999999" } });
	await expect(authorize(record.id, cranker)).rejects.toMatchObject({ type: "EVIDENCE_INCONSISTENT", data: { reason: "INVALID_SIGNATURE" } });
	// The signed one is authorized as before.
	intents.set(record.id, record);
	await expect(authorize(record.id, cranker)).resolves.toMatchObject({ workId: record.id, amount: record.request.amount });
});

test("a route replaced by a newer version: refused, and the intent REJECTED (ROUTE_MISMATCH), as it can never be paid", async () => {
	const cranker = newWallet().address;
	const record = leasedIntent(cranker);
	activeRoute = { ...route, routeVersion: route.routeVersion + 1 };
	await expect(authorize(record.id, cranker)).rejects.toMatchObject({ type: "EVIDENCE_INCONSISTENT", data: { reason: "ROUTE_MISMATCH", state: "REJECTED" } });
	expect(intents.get(record.id)).toMatchObject({ state: "REJECTED", rejectionReason: "ROUTE_MISMATCH" });
});

test("two requests of the holder, one that read the signed route and one the route that replaced it: the intent is REJECTED, and no authorization comes back for it", async () => {
	const cranker = newWallet().address;
	const record = leasedIntent(cranker);
	// The first request reads the signed route, but its answer arrives only once the second, which read
	// the newer route, has rejected the intent: it must not sign for a payment the Node canceled.
	let answerFirst!: () => void;
	const replaced = { ...route, routeVersion: route.routeVersion + 1 };
	scriptedRoutes = [new Promise(resolve => (answerFirst = () => resolve({ ...route }))), Promise.resolve(replaced)];
	const first = authorize(record.id, cranker).catch((err: unknown) => err);
	while (scriptedRoutes.length === 2) await sleep(5);
	await expect(authorize(record.id, cranker)).rejects.toMatchObject({ type: "EVIDENCE_INCONSISTENT", data: { reason: "ROUTE_MISMATCH", state: "REJECTED" } });
	expect(intents.get(record.id)).toMatchObject({ state: "REJECTED", rejectionReason: "ROUTE_MISMATCH" });
	answerFirst();
	expect(await first).toMatchObject({ type: "EVIDENCE_INCONSISTENT", data: { reason: "ROUTE_MISMATCH" } });
	// Nor later, on a registry read from behind: the mark stays.
	intents.set(record.id, { ...record, stateVersion: record.stateVersion + 2 });
	await expect(authorize(record.id, cranker)).rejects.toMatchObject({ type: "EVIDENCE_INCONSISTENT", data: { reason: "ROUTE_MISMATCH" } });
});

test("a registry read from behind (an older route than the one signed): refused this time, and the intent neither ended nor marked, so it is paid once the read catches up (a review)", async () => {
	const cranker = newWallet().address;
	const newer = { ...route, routeVersion: route.routeVersion + 1 };
	const record = leasedIntent(cranker, 60_000, newer);
	await expect(authorize(record.id, cranker)).rejects.toMatchObject({ type: "EVIDENCE_INCONSISTENT", data: { reason: "ROUTE_MISMATCH" } });
	expect(intents.get(record.id)?.state).toBe("CRANKER_LEASED");
	activeRoute = newer;
	await expect(authorize(record.id, cranker)).resolves.toMatchObject({ workId: record.id, recipientRouteVersion: newer.routeVersion });
});

test("a route replaced after an authorization was issued for the intent: refused, but the intent is not ended, as a settlement sent under it may have landed", async () => {
	const first = newWallet().address;
	const record = leasedIntent(first);
	await authorize(record.id, first);
	const second = newWallet().address;
	intents.set(record.id, { ...record, stateVersion: record.stateVersion + 2, lease: { crankerPubkey: second, leasedAt: iso(0), expiresAt: iso(60_000) } });
	activeRoute = { ...route, routeVersion: route.routeVersion + 1 };
	const refusal = await authorize(record.id, second).catch((err: { type: string; data: object }) => err);
	expect(refusal).toMatchObject({ type: "EVIDENCE_INCONSISTENT", data: { reason: "ROUTE_MISMATCH" } });
	expect((refusal as { data: object }).data).not.toHaveProperty("state");
	expect(intents.get(record.id)?.state).toBe("CRANKER_LEASED");
});
