/**
 * The mempool service alone, on a real SQLite file: a broker with just this service (its
 * neighbours are not needed for intake and verification), called as the receiver calls it.
 * Intake is one insert, in the verdict's state; the nonce rule is the unique index on nonceKey.
 */
import Database from "better-sqlite3";
import path from "node:path";
import { ServiceBroker } from "moleculer";
import { loadConfig } from "../../lib/config";
import { requestDigest } from "../../lib/digest";
import { decidedRecord, type Verdict } from "../../lib/intake";
import { newId } from "../../lib/ids";
import { EpochSummary, type ArchivedIntent } from "../../lib/epoch-summary";
import { byId, merkleRoot } from "../../lib/merkle";
import type { CreateIntentRequest, IntentRecord } from "../../lib/intents";
import { WORK_PAGE } from "../../lib/schemas";
import { openStore } from "../../lib/store";
import { INTENTS_COLLECTION, mempoolService, type IntakeOutcome, type WaitingIntent } from "../../services/mempool.service";
import { forgedIntent, newRoute, newWallet, signedIntent } from "../helpers/fixtures";
import { sleep, tempDir } from "../helpers/node";

const route = newRoute();
const VERIFIED: Verdict = { ok: true, verifiedBy: "verifier@test" };

async function startMempool(dataDir = tempDir()) {
	const broker = new ServiceBroker({ logger: false });
	broker.createService(mempoolService(loadConfig({ DATA_DIR: dataDir, SWEEP_INTERVAL_MS: "60000" })));
	await broker.start();
	const receive = (request: CreateIntentRequest, verdict?: Verdict) => broker.call<IntakeOutcome, object>("mempool.receive", { request, epoch: 1, requestDigest: requestDigest(request), ...(verdict ? { verdict } : {}) });
	const rows = () => {
		const db = new Database(path.join(dataDir, "mempool.sqlite"), { readonly: true });
		try {
			return (db.prepare("SELECT doc FROM intents").all() as { doc: string }[]).map(row => JSON.parse(row.doc) as IntentRecord);
		} finally {
			db.close();
		}
	};
	return { broker, dataDir, receive, rows };
}

describe("intake: one insert, in the verdict's state", () => {
	let mempool: Awaited<ReturnType<typeof startMempool>>;
	beforeAll(async () => (mempool = await startMempool()));
	afterAll(() => mempool.broker.stop());

	test("a verified request is stored once as VERIFIED, holding its nonce, with the history of the claim and the verdict", async () => {
		const request = signedIntent(newWallet(), route);
		const outcome = await mempool.receive(request, VERIFIED);
		expect(outcome).toMatchObject({ created: true, view: { paymentId: request.paymentId, receiverStatus: "VERIFIED", status: "pending" } });
		expect(outcome.rejection).toBeUndefined();
		const [stored] = mempool.rows().filter(row => row.paymentId === request.paymentId);
		expect(stored).toMatchObject({ state: "VERIFIED", stateVersion: 3, verdict: "VERIFIED", nonceKey: `${request.senderWallet}:${request.senderAuthorizationNonce}` });
		expect(stored.history.map(entry => [entry.state, entry.by])).toEqual([
			["RECEIVED", undefined],
			["NODE_VERIFYING", undefined],
			["VERIFIED", "verifier@test"]
		]);
	});

	test("the same body again answers the record (created false); another body under the paymentId is 409", async () => {
		const request = signedIntent(newWallet(), route);
		const first = await mempool.receive(request, VERIFIED);
		expect(await mempool.receive(request, VERIFIED)).toEqual({ ...first, created: false });
		const other = signedIntent(newWallet(), route, { paymentId: request.paymentId });
		await expect(mempool.receive(other, VERIFIED)).rejects.toMatchObject({ type: "IDEMPOTENCY_CONFLICT", data: { paymentId: request.paymentId } });
		expect(mempool.rows().filter(row => row.paymentId === request.paymentId)).toHaveLength(1);
	});

	test("a verified request whose nonce another intent holds is stored REJECTED NONCE_REUSED, holding nothing", async () => {
		const sender = newWallet();
		const holder = signedIntent(sender, route);
		await mempool.receive(holder, VERIFIED);
		const reuse = signedIntent(sender, route, { senderAuthorizationNonce: holder.senderAuthorizationNonce });
		const outcome = await mempool.receive(reuse, VERIFIED);
		expect(outcome).toMatchObject({ created: true, view: { receiverStatus: "REJECTED", rejectionReason: "NONCE_REUSED" }, rejection: { reason: "NONCE_REUSED", paymentId: reuse.paymentId } });
		expect(mempool.rows().find(row => row.paymentId === reuse.paymentId)).toMatchObject({ state: "REJECTED", nonceKey: null, verdict: "REJECTED" });
	});

	test("a recorded refusal holds no nonce: the sender's next verified request with it is VERIFIED", async () => {
		const sender = newWallet();
		const refused = signedIntent(sender, route);
		const outcome = await mempool.receive(refused, { ok: false, reason: "UNKNOWN_TIN", detail: "not in the registry", verifiedBy: "verifier@test" });
		expect(outcome.rejection).toMatchObject({ reason: "UNKNOWN_TIN", detail: "not in the registry" });
		const next = signedIntent(sender, route, { senderAuthorizationNonce: refused.senderAuthorizationNonce });
		expect((await mempool.receive(next, VERIFIED)).view.receiverStatus).toBe("VERIFIED");
	});

	test("without a verdict it is RECEIVED (the 202 path); the sweep's claim and verdict take it to VERIFIED, or NONCE_REUSED when the nonce went meanwhile", async () => {
		const sender = newWallet();
		const waiting = signedIntent(sender, route);
		expect((await mempool.receive(waiting)).view.receiverStatus).toBe("RECEIVED");
		const rival = signedIntent(sender, route, { senderAuthorizationNonce: waiting.senderAuthorizationNonce });
		expect((await mempool.receive(rival, VERIFIED)).view.receiverStatus).toBe("VERIFIED");

		const [received] = mempool.rows().filter(row => row.paymentId === waiting.paymentId);
		const claimed = await mempool.broker.call<WaitingIntent | null, object>("mempool.claimForVerification", { id: received.id, expectedVersion: 1 });
		expect(claimed).toMatchObject({ id: received.id, state: "NODE_VERIFYING", stateVersion: 2, request: waiting });
		expect(await mempool.broker.call("mempool.claimForVerification", { id: received.id, expectedVersion: 1 })).toBeNull();
		// The unique index refuses the second holder: the verdict becomes NONCE_REUSED.
		expect(await mempool.broker.call("mempool.completeVerification", { id: received.id, expectedVersion: 2, verdict: VERIFIED })).toBe("REJECTED");
		expect(mempool.rows().find(row => row.id === received.id)).toMatchObject({ rejectionReason: "NONCE_REUSED", nonceKey: null });

		const free = signedIntent(newWallet(), route);
		await mempool.receive(free);
		const freeRecord = mempool.rows().find(row => row.paymentId === free.paymentId)!;
		await mempool.broker.call("mempool.claimForVerification", { id: freeRecord.id, expectedVersion: 1 });
		expect(await mempool.broker.call("mempool.completeVerification", { id: freeRecord.id, expectedVersion: 2, verdict: VERIFIED })).toBe("VERIFIED");
	});

	test("a refusal that leaves no record is never stored, even if a caller hands it over", async () => {
		const request = signedIntent(newWallet(), route);
		await expect(mempool.receive(request, { ok: false, reason: "INVALID_SIGNATURE", detail: "forged" })).rejects.toMatchObject({ type: "INTERNAL_ERROR" });
		expect(mempool.rows().find(row => row.paymentId === request.paymentId)).toBeUndefined();
	});

	test("a signed body that meets an unsigned holder of its paymentId as the sweep removes it is stored VERIFIED, not NONCE_REUSED: its nonce is free", async () => {
		const sender = newWallet();
		const real = signedIntent(sender, route);
		const unsigned = { ...signedIntent(sender, route, { paymentId: real.paymentId, amount: "1" }), senderAuthorizationSignature: real.senderAuthorizationSignature };
		await mempool.receive(unsigned);
		const { id } = mempool.rows().find(row => row.paymentId === real.paymentId)!;
		await mempool.broker.call("mempool.claimForVerification", { id, expectedVersion: 1 });
		// At once: the insert is refused by the holder, which is gone by the time it is looked up, or
		// still there (the lookup answers only what is committed): then "retry later", and the retry
		// takes the paymentId. Never NONCE_REUSED.
		const [first, removed] = await Promise.all([
			mempool.receive(real, VERIFIED).catch((err: { type?: string }) => err.type),
			mempool.broker.call("mempool.completeVerification", { id, expectedVersion: 2, verdict: { ok: false, reason: "INVALID_SIGNATURE", detail: "forged" } })
		]);
		expect(removed).toBeNull();
		const outcome = typeof first === "object" ? first : await mempool.receive(real, VERIFIED);
		expect(typeof first === "object" || first === "NOT_READY").toBe(true);
		expect(outcome).toMatchObject({ created: true, view: { paymentId: real.paymentId, amount: real.amount, receiverStatus: "VERIFIED" } });
		expect(outcome.rejection).toBeUndefined();
		expect(mempool.rows().filter(row => row.paymentId === real.paymentId)).toMatchObject([{ state: "VERIFIED", nonceKey: `${sender.address}:${real.senderAuthorizationNonce}` }]);
	});

	test("an unsigned body found by the sweep is removed: its paymentId is free again", async () => {
		const request = signedIntent(newWallet(), route);
		await mempool.receive(request);
		const { id } = mempool.rows().find(row => row.paymentId === request.paymentId)!;
		await mempool.broker.call("mempool.claimForVerification", { id, expectedVersion: 1 });
		expect(await mempool.broker.call("mempool.completeVerification", { id, expectedVersion: 2, verdict: { ok: false, reason: "INVALID_SIGNATURE", detail: "forged" } })).toBeNull();
		expect(mempool.rows().find(row => row.paymentId === request.paymentId)).toBeUndefined();
	});
});

test("without a chain, the intents keep no index by slot: no slot is compared, and it would cost every intake", async () => {
	const dataDir = tempDir();
	const { broker } = await startMempool(dataDir);
	await broker.stop();
	const db = new Database(path.join(dataDir, "mempool.sqlite"), { readonly: true });
	try {
		const names = (db.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'intents'").all() as { name: string }[]).map(row => row.name);
		expect(names).toContainEqual(expect.stringContaining("state_expiresAt_id"));
		expect(names.filter(name => name.includes("expiresAtSlot"))).toEqual([]);
	} finally {
		db.close();
	}
});

test("once, at start: an unsigned body an earlier version expired before its verdict is removed (its paymentId free again), a signed one stays REJECTED EXPIRED", async () => {
	const dataDir = tempDir();
	const victim = newWallet();
	const real = signedIntent(victim, route);
	const forged = forgedIntent(real, route);
	const genuine = signedIntent(newWallet(), route);
	// A store as the earlier version left it: both taken without a verifier, then moved RECEIVED → REJECTED by its expiry sweep.
	{
		const { broker, rows } = await startMempool(dataDir);
		for (const request of [forged, genuine]) await broker.call("mempool.receive", { request, epoch: 1, requestDigest: requestDigest(request) });
		await broker.stop();
		const store = await openStore({ kind: "sqlite", dataDir, mongoUrl: null, owner: "mempool" });
		const intents = await store.collection<IntentRecord>(INTENTS_COLLECTION);
		const at = new Date().toISOString();
		for (const record of rows())
			await intents.update(record.id, { state: "RECEIVED", stateVersion: 1 }, {
				...record,
				state: "REJECTED",
				stateVersion: 2,
				updatedAt: at,
				rejectionReason: "EXPIRED",
				rejectionDetail: "the authorization expired before submission",
				history: [...record.history, { state: "REJECTED", at, reason: "EXPIRED" }]
			});
		// That version did not know the migration (this one marked it done on the fresh store above).
		await (await store.collection<{ id: string }>({ name: "mempool_migrations", fields: {} })).remove("remove-unsigned-expired");
		await store.close();
	}
	const mempool = await startMempool(dataDir);
	try {
		expect(mempool.rows().map(row => [row.paymentId, row.state, row.rejectionReason])).toStrictEqual([[genuine.paymentId, "REJECTED", "EXPIRED"]]);
		// The real sender's body takes its paymentId.
		expect((await mempool.receive(real, VERIFIED)).view).toMatchObject({ paymentId: real.paymentId, amount: real.amount, receiverStatus: "VERIFIED" });
	} finally {
		await mempool.broker.stop();
	}
});

test("nonces consumed before they were a field of the intent move onto their holders at start", async () => {
	const dataDir = tempDir();
	const sender = newWallet();
	const holder = signedIntent(sender, route);
	// A store as the previous version left it: a VERIFIED intent without nonceKey, its nonce in consumed_nonces.
	{
		const { broker, rows } = await startMempool(dataDir);
		await broker.call("mempool.receive", { request: holder, epoch: 1, requestDigest: requestDigest(holder), verdict: VERIFIED });
		await broker.stop();
		const [record] = rows();
		const store = await openStore({ kind: "sqlite", dataDir, mongoUrl: null, owner: "mempool" });
		const intents = await store.collection<IntentRecord>(INTENTS_COLLECTION);
		await intents.update(record.id, { stateVersion: record.stateVersion }, { ...record, nonceKey: undefined });
		const legacy = await store.collection<{ id: string; intentId: string }>({ name: "consumed_nonces", fields: { intentId: "text" } });
		await legacy.insert({ id: `${sender.address}:${holder.senderAuthorizationNonce}`, intentId: record.id });
		await store.close();
	}
	const mempool = await startMempool(dataDir);
	try {
		expect(mempool.rows()[0].nonceKey).toBe(`${sender.address}:${holder.senderAuthorizationNonce}`);
		const reuse = signedIntent(sender, route, { senderAuthorizationNonce: holder.senderAuthorizationNonce });
		expect((await mempool.receive(reuse, VERIFIED)).rejection?.reason).toBe("NONCE_REUSED");
		const db = new Database(path.join(dataDir, "mempool.sqlite"), { readonly: true });
		expect(db.prepare("SELECT COUNT(*) AS n FROM consumed_nonces").get()).toEqual({ n: 0 });
		db.close();
	} finally {
		await mempool.broker.stop();
	}
});

/**
 * A running mempool holding one CONFIRMED intent of epoch 1 as the previous version left it (no
 * nonceKey), its nonce in consumed_nonces, and a second handle on its store: another replica's.
 */
async function withLegacyConfirmed(body: (context: { mempool: Awaited<ReturnType<typeof startMempool>>; service: { intents: { list: (...args: never[]) => Promise<IntentRecord[]>; get(id: string): Promise<IntentRecord | null> }; migrateLegacyNonces(): Promise<number> }; record: IntentRecord; nonceKey: string; otherReplica: (write: (record: IntentRecord) => IntentRecord) => Promise<void> }) => Promise<void>) {
	const mempool = await startMempool();
	const sender = newWallet();
	const holder = signedIntent(sender, route);
	await mempool.receive(holder, VERIFIED);
	const store = await openStore({ kind: "sqlite", dataDir: mempool.dataDir, mongoUrl: null, owner: "mempool" });
	try {
		const intents = await store.collection<IntentRecord>(INTENTS_COLLECTION);
		const [verified] = mempool.rows();
		const record = { ...verified, state: "CONFIRMED" as const, stateVersion: verified.stateVersion + 3, nonceKey: undefined };
		expect(await intents.update(record.id, { stateVersion: verified.stateVersion }, record)).toBe(true);
		const nonceKey = `${sender.address}:${holder.senderAuthorizationNonce}`;
		const legacy = await store.collection<{ id: string; intentId: string }>({ name: "consumed_nonces", fields: { intentId: "text" } });
		await legacy.insert({ id: nonceKey, intentId: record.id });
		const otherReplica = async (write: (record: IntentRecord) => IntentRecord) => {
			const current = (await intents.get(record.id))!;
			expect(await intents.update(record.id, { stateVersion: current.stateVersion, archivedIn: current.archivedIn ?? null }, write(current))).toBe(true);
		};
		const service = mempool.broker.getLocalService("mempool") as unknown as Parameters<typeof body>[0]["service"];
		await body({ mempool, service, record, nonceKey, otherReplica });
	} finally {
		await store.close();
		await mempool.broker.stop();
	}
}

test("an archive that read an intent before another replica moved a legacy nonce onto it does not write the nonce away", async () => {
	await withLegacyConfirmed(async ({ mempool, service, nonceKey, otherReplica }) => {
		const list = service.intents.list.bind(service.intents);
		let interleaved = false;
		jest.spyOn(service.intents, "list").mockImplementation(async (...args) => {
			const found = await list(...args);
			if (!interleaved && found.length) {
				interleaved = true;
				await otherReplica(current => ({ ...current, nonceKey }));
			}
			return found;
		});
		const archive = () => mempool.broker.call<number, object>("mempool.archiveTerminal", { epoch: 1, changedBefore: new Date(Date.now() + 1000).toISOString(), limit: 10 });
		while ((await archive()) > 0);
		expect(interleaved).toBe(true);
		expect(mempool.rows()[0]).toMatchObject({ state: "CONFIRMED", archivedIn: 1, nonceKey });
	});
});

test("a legacy nonce whose move loses its compare-and-set to another replica's archive is moved on a second read, not dropped", async () => {
	await withLegacyConfirmed(async ({ mempool, service, record, nonceKey, otherReplica }) => {
		const get = service.intents.get.bind(service.intents);
		let interleaved = false;
		jest.spyOn(service.intents, "get").mockImplementation(async id => {
			const found = await get(id);
			if (!interleaved && id === record.id) {
				interleaved = true;
				await otherReplica(current => ({ ...current, archivedIn: 1 }));
			}
			return found;
		});
		expect(await service.migrateLegacyNonces()).toBe(1);
		expect(interleaved).toBe(true);
		expect(mempool.rows()[0]).toMatchObject({ archivedIn: 1, nonceKey });
		const db = new Database(path.join(mempool.dataDir, "mempool.sqlite"), { readonly: true });
		expect(db.prepare("SELECT COUNT(*) AS n FROM consumed_nonces").get()).toEqual({ n: 0 });
		db.close();
	});
});

test("a legacy nonce whose every compare-and-set loses (a read that lags the writes) fails the migration after a few tries, keeping its entry", async () => {
	await withLegacyConfirmed(async ({ mempool, service }) => {
		const update = jest.spyOn(service.intents as unknown as { update(): Promise<boolean> }, "update").mockResolvedValue(false);
		await expect(service.migrateLegacyNonces()).rejects.toThrow(/could not be moved onto it in 10 tries/);
		expect(update).toHaveBeenCalledTimes(10);
		const db = new Database(path.join(mempool.dataDir, "mempool.sqlite"), { readonly: true });
		expect(db.prepare("SELECT COUNT(*) AS n FROM consumed_nonces").get()).toEqual({ n: 1 });
		db.close();
	});
});

test("a work page larger than the bus carries is only for a caller in this process", async () => {
	const namespace = `work-page-${process.pid}-${Date.now()}`;
	const owner = new ServiceBroker({ nodeID: "owner", namespace, transporter: "Fake", logger: false });
	owner.createService(mempoolService(loadConfig({ DATA_DIR: tempDir(), SWEEP_INTERVAL_MS: "60000" })));
	const gateway = new ServiceBroker({ nodeID: "gateway", namespace, transporter: "Fake", logger: false });
	try {
		await Promise.all([owner.start(), gateway.start()]);
		await gateway.waitForServices(["mempool"]);
		const page = { limit: WORK_PAGE + 1 };
		await expect(gateway.call("mempool.workPage", page)).rejects.toMatchObject({ type: "VALIDATION_ERROR" });
		await expect(gateway.call("mempool.workPage", { limit: WORK_PAGE })).resolves.toEqual([]);
		await expect(owner.call("mempool.workPage", page)).resolves.toEqual([]);
	} finally {
		await Promise.all([gateway.stop(), owner.stop()]);
	}
});

test("a call that reaches the mempool after its store closed, while its broker stops, answers 503 NOT_READY (a retry), not a 500", async () => {
	const broker = new ServiceBroker({ logger: false });
	broker.createService(mempoolService(loadConfig({ DATA_DIR: tempDir(), SWEEP_INTERVAL_MS: "60000" })));
	const answers: unknown[] = [];
	// A neighbour still at work as the broker stops: the services of a broker stop together.
	broker.createService({
		name: "late-caller",
		async stopped() {
			await sleep(200);
			const request = signedIntent(newWallet(), route);
			for (const call of [broker.call("mempool.receive", { request, epoch: 1, requestDigest: requestDigest(request), verdict: VERIFIED }), broker.call("mempool.view", { id: request.paymentId })])
				answers.push(await call.catch((err: unknown) => err));
		}
	});
	await broker.start();
	await broker.stop();
	expect(answers).toEqual([expect.objectContaining({ type: "NOT_READY", code: 503 }), expect.objectContaining({ type: "NOT_READY", code: 503 })]);
});

test("an epoch's archive of more intents than a page: every terminal one archived, batch by batch, and its summary read in pages equals the whole", async () => {
	const dataDir = tempDir();
	const at = new Date(Date.now() - 60_000).toISOString();
	const store = await openStore({ kind: "sqlite", dataDir, mongoUrl: null, owner: "mempool" });
	const intents = await store.collection<IntentRecord>(INTENTS_COLLECTION);
	const sender = newWallet();
	const executed: IntentRecord[] = [];
	for (let i = 0; i < 1300; i++) {
		const request = signedIntent(sender, route, { amount: String(1000 + i) });
		const verified = decidedRecord({ id: newId("int"), request, requestDigest: requestDigest(request), transactionCommitment: request.transactionCommitment!, epoch: 1, at, intakeCall: null }, VERIFIED);
		const record: IntentRecord = { ...verified, state: i % 13 === 0 ? "REJECTED" : "CONFIRMED", nonceKey: null, stateVersion: 6 };
		expect(await intents.insert(record)).toBe(true);
		if (record.state === "CONFIRMED") executed.push(record);
	}
	await store.close();
	const mempool = await startMempool(dataDir);
	try {
		const cutoff = { epoch: 1, changedBefore: new Date().toISOString(), limit: 500 };
		const found: number[] = [];
		do found.push(await mempool.broker.call<number, object>("mempool.archiveTerminal", cutoff));
		while (found.at(-1) !== 0);
		expect(found).toEqual([500, 500, 300, 0]);
		// In pages of 400: the last short, each page in id order after the one before.
		const summed = new EpochSummary();
		const pages: number[] = [];
		for (let after: string | undefined; ; ) {
			const page = await mempool.broker.call<ArchivedIntent[], object>("mempool.archivedPage", { epoch: 1, limit: 400, ...(after ? { after } : {}) });
			pages.push(page.length);
			for (const intent of page) summed.add(intent);
			if (page.length < 400) break;
			after = page[page.length - 1].id;
		}
		expect(pages).toEqual([400, 400, 400, 100]);
		expect(summed.figures()).toEqual({
			executed: executed.length,
			canceled: 1300 - executed.length,
			volume: { [executed[0].request.tokenMintAddress]: executed.reduce((sum, record) => sum + BigInt(record.request.amount), 0n).toString() },
			root: merkleRoot([...executed].sort(byId).map(record => record.transactionCommitment))
		});
	} finally {
		await mempool.broker.stop();
	}
});
