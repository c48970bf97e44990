/**
 * The tin service alone, on a real SQLite file: a broker with just this service and a stand-in
 * for the one neighbour it asks (crankers.standing), called as the gateway calls it. The gateway
 * has checked each stage request's signature; here the meta says whose it was.
 */
import { ServiceBroker, type Context } from "moleculer";
import { loadConfig } from "../../lib/config";
import { StoreUnavailableError } from "../../lib/store";
import { tinFromSequence } from "../../lib/tin";
import type { CrankerStanding, PublicTinOperation, TinOperationRecord, TinOperationView } from "../../lib/tin-operations";
import type { ActiveRoute, RouteRecord } from "../../lib/registry";
import { tinService } from "../../services/tin.service";
import { crankerCallMeta, iso, newRoute, newWallet, signedTinOperation, uniqueId, walletOf, writeSeedFile } from "../helpers/fixtures";
import { sleep, tempDir } from "../helpers/node";

const FEE = "50000";
const verifier = newWallet().address;
const submitter = newWallet().address;
const signature = () => newWallet().sign(uniqueId("tx"));

/** Counts the writes of the TIN counter from now on (an allocation's compare-and-sets): the count so far. */
function counterWrites(service: TinInternals): () => number {
	const { sequence } = service;
	const { insert, update } = sequence;
	let writes = 0;
	sequence.insert = (...args) => (writes++, insert.apply(sequence, args));
	sequence.update = (...args) => (writes++, update.apply(sequence, args));
	return () => writes;
}

async function startTin(env: Record<string, string> = {}, settings: object = {}) {
	const broker = new ServiceBroker({ logger: false });
	const standings = new Map<string, CrankerStanding>([
		[verifier, { online: true, roles: ["verifier"] }],
		[submitter, { online: true, roles: ["submitter"] }]
	]);
	broker.createService({
		name: "crankers",
		actions: {
			standing: (ctx: Context<{ crankerPubkey: string }>) => standings.get(ctx.params.crankerPubkey) ?? { online: false, roles: [] },
			admitSignature: () => true
		}
	});
	const schema = tinService(loadConfig({ DATA_DIR: tempDir(), SWEEP_INTERVAL_MS: "60000", TIN_CREATE_FEE: FEE, TIN_UPDATE_FEE: FEE, ...env }));
	const service = broker.createService({ ...schema, settings: { ...schema.settings!, ...settings } }) as unknown as TinInternals;
	await broker.start();
	const submit = (body: object) => {
		const meta: { $statusCode?: number } = {};
		return broker.call<PublicTinOperation, object>("tin.submitOperation", body, { meta }).then(view => ({ view, status: meta.$statusCode }));
	};
	const stage = async (action: string, id: string, crankerPubkey: string, fields: object = {}) =>
		broker.call<TinOperationView, object>(`tin.${action}`, { id, crankerPubkey, ...fields }, { meta: await crankerCallMeta(walletOf(crankerPubkey), `tin.${action}`, { id, crankerPubkey, ...fields }) });
	/** A list as this version's gateway takes it: the items' JSON texts. */
	const list = async (action: string, params: object = {}) =>
		(await broker.call<string[], object>(`tin.${action}`, { limit: 500, ...params }, { meta: { jsonTexts: true } })).map(text => JSON.parse(text) as { id: string; status: string });
	/** Moves a new operation (a create, unless given) to SUBMITTED, by `submitter`. */
	const submitted = async (body: ReturnType<typeof signedTinOperation> = signedTinOperation(newWallet(), { intentType: "create" })) => {
		const { view } = await submit(body);
		await stage("verified", view.id, verifier);
		await stage("feeCommitted", view.id, submitter, { feeAmount: FEE });
		const transactionSignature = signature();
		await stage("submitted", view.id, submitter, { transactionSignature });
		return { view, transactionSignature };
	};
	return { broker, service, submit, stage, list, submitted };
}

/**
 * Stalls the finalization of operation `id` at its first route read after its mark (a paused
 * process, a throttled pod): `stalled` once it is there, `resume` to let it go on. Other reads pass.
 */
function stallAfterMark(service: TinInternals, id: string) {
	const routes = service.routes;
	const get = routes.get;
	let resume!: () => void;
	const stalled = new Promise<void>(
		stall =>
			(routes.get = async tinOf => {
				if ((await service.operations.get(id))!.finalizing) {
					routes.get = get;
					await new Promise<void>(resolve => (stall(), (resume = resolve)));
				}
				return get.call(routes, tinOf);
			})
	);
	return { stalled, resume: () => resume() };
}

/** What a test reaches inside the service: its stores, to stand a crash in for a failing write, and its steps. */
interface TinInternals {
	routes: { get(tin: string): Promise<RouteRecord | null>; update(tin: string, expected: object, next: RouteRecord): Promise<boolean> };
	sequence: {
		get(id: string): Promise<{ next: number } | null>;
		insert(doc: { id: string; next: number }): Promise<boolean>;
		update(id: string, expected: object, next: { id: string; next: number }): Promise<boolean>;
	};
	claims: { remove(id: string): Promise<boolean>; insert(doc: { id: string; by: "create" | "genesis" }): Promise<boolean> };
	importGenesis(file: string): Promise<number>;
	allocateTin(): Promise<string>;
	reconcile(markedBefore: Date): Promise<number>;
	observeRegistrySubmission(record: TinOperationRecord): Promise<unknown>;
	routeVersions: { get(id: string): Promise<{ routeVersion: number } | null>; remove(id: string): Promise<boolean> };
	operations: { get(id: string): Promise<TinOperationRecord | null>; update(id: string, expected: object, next: TinOperationRecord): Promise<boolean> };
}

describe("tin service", () => {
	let tin: Awaited<ReturnType<typeof startTin>>;
	beforeAll(async () => (tin = await startTin()));
	afterAll(() => tin.broker.stop());

	test("a create gets the next TIN of the sequence; the same body again is answered 200, another body under its operationId 409", async () => {
		const owner = newWallet();
		const body = signedTinOperation(owner, { intentType: "create" });
		const first = await tin.submit(body);
		expect(first).toMatchObject({ status: 201, view: { operationId: body.operationId, status: "PENDING_VERIFICATION", tin: tinFromSequence(100_000_000) } });
		expect(await tin.submit(body)).toStrictEqual({ status: 200, view: first.view });
		const other = signedTinOperation(owner, { intentType: "create", operationId: body.operationId });
		await expect(tin.submit(other)).rejects.toMatchObject({ type: "IDEMPOTENCY_CONFLICT" });
		const next = await tin.submit(signedTinOperation(newWallet(), { intentType: "create" }));
		expect(next.view.tin).toBe(tinFromSequence(100_000_001));
	});

	test("an update signed before the one that went live meanwhile ends FAILED (SUPERSEDED), also when it was already past its checks as the other finished (a review's race)", async () => {
		const owner = newWallet();
		const created = await tin.submitted(signedTinOperation(owner, { intentType: "create" }));
		await tin.stage("finalized", created.view.id, submitter, { transactionSignature: created.transactionSignature });
		const older = await tin.submitted(signedTinOperation(owner, { intentType: "update", tin: created.view.tin, issuedAt: new Date(Date.now() - 3000).toISOString() }));
		const newer = await tin.submitted(signedTinOperation(owner, { intentType: "update", tin: created.view.tin, issuedAt: new Date(Date.now() - 2000).toISOString() }));
		// The older one's finalization stalls in its chain read (a slow RPC) while the newer one finishes.
		const observe = tin.service.observeRegistrySubmission;
		let release!: () => void;
		const held = new Promise<void>(resolve => (release = resolve));
		tin.service.observeRegistrySubmission = async record => {
			if (record.id === older.view.id) await held;
			return observe.call(tin.service, record);
		};
		try {
			const stalled = tin.stage("finalized", older.view.id, submitter, { transactionSignature: older.transactionSignature });
			const done = await tin.stage("finalized", newer.view.id, submitter, { transactionSignature: newer.transactionSignature });
			expect(done).toMatchObject({ status: "FINALIZED", routeVersion: 2 });
			release();
			await expect(stalled).rejects.toMatchObject({ type: "INVALID_TRANSITION", data: { status: "FAILED", failureReason: expect.stringMatching(/^SUPERSEDED/) } });
		} finally {
			tin.service.observeRegistrySubmission = observe;
		}
		expect(await tin.service.routes.get(created.view.tin)).toMatchObject({ routeVersion: 2, lastOperationId: newer.view.id });
	});

	test("the last TIN of the sequence is allocated, then a create is refused 409 LIMIT_REACHED, not a 500 (a review)", async () => {
		const own = await startTin();
		try {
			await own.submit(signedTinOperation(newWallet(), { intentType: "create" }));
			expect(await own.service.sequence.update("tin", { next: 100_000_001 }, { id: "tin", next: 999_999_999 })).toBe(true);
			expect((await own.submit(signedTinOperation(newWallet(), { intentType: "create" }))).view.tin).toBe(tinFromSequence(999_999_999));
			await expect(own.submit(signedTinOperation(newWallet(), { intentType: "create" }))).rejects.toMatchObject({ type: "LIMIT_REACHED", code: 409 });
			expect((await own.service.sequence.get("tin"))?.next).toBe(1_000_000_000);
		} finally {
			await own.broker.stop();
		}
	});

	test("the stages move an operation through the work lists, and finalizing makes its route live", async () => {
		const owner = newWallet();
		const { view } = await tin.submit(signedTinOperation(owner, { intentType: "create" }));
		const id = view.id;
		const inList = async (action: string, params?: object) => (await tin.list(action, params)).some(item => item.id === id);
		expect(await inList("verificationWork")).toBe(true);
		expect(await tin.broker.call("tin.resolve", { tin: view.tin })).toBeNull();

		await tin.stage("verified", id, verifier);
		expect(await inList("verificationWork")).toBe(false);
		expect(await inList("feeWork")).toBe(true);
		expect(await inList("feeWork", { operator_pubkey: verifier })).toBe(false);
		await expect(tin.stage("feeCommitted", id, verifier, { feeAmount: FEE })).rejects.toMatchObject({ type: "CRANKER_NOT_ALLOWED" });

		await tin.stage("feeCommitted", id, submitter, { feeAmount: FEE });
		expect(await inList("registryWork", { operator_pubkey: submitter })).toBe(true);
		const transactionSignature = signature();
		await tin.stage("submitted", id, submitter, { transactionSignature });
		const finalized = await tin.stage("finalized", id, submitter, { transactionSignature });
		expect(finalized).toMatchObject({ id, status: "FINALIZED", routeVersion: 1 });
		// The same move by the same Cranker again changes nothing.
		expect(await tin.stage("finalized", id, submitter, { transactionSignature })).toMatchObject({ status: "FINALIZED", routeVersion: 1 });
		expect(await tin.broker.call<ActiveRoute | null, object>("tin.resolve", { tin: view.tin })).toMatchObject({ tin: view.tin, routeVersion: 1 });
		expect(await inList("registryWork", { operator_pubkey: submitter })).toBe(false);
		const [newest] = await tin.list("listOperations", { status: "FINALIZED" });
		expect(newest).toMatchObject({ id, status: "FINALIZED" });
	});

	test("a submitted operation not finalized in time after its submission ends FAILED (EXPIRED): its submitter cannot hold the route back past the window after its report, itself before expiresAt (a review's attack)", async () => {
		const late = await startTin({}, { finalizeWithinMs: 4000 });
		try {
			const owner = newWallet();
			const expiresAt = iso(2000);
			const live = await late.submitted(signedTinOperation(owner, { intentType: "create", issuedAt: iso(-1000), expiresAt }));
			const held = await late.submitted(signedTinOperation(owner, { intentType: "create", issuedAt: iso(-1000), expiresAt }));
			await sleep(Date.parse(expiresAt) - Date.now() + 100);
			// Past expiresAt, within the window: finalized, as a transaction sent before it may land after it.
			expect(await late.stage("finalized", live.view.id, submitter, { transactionSignature: live.transactionSignature })).toMatchObject({ status: "FINALIZED" });
			await sleep(4000);
			// Past the window: failed, and its TIN has no route.
			await expect(late.stage("finalized", held.view.id, submitter, { transactionSignature: held.transactionSignature })).rejects.toMatchObject({
				type: "INVALID_TRANSITION",
				data: { status: "FAILED", failureReason: "EXPIRED: not finalized within 4 s of its submission" }
			});
			expect(await late.broker.call("tin.resolve", { tin: held.view.tin })).toBeNull();
		} finally {
			await late.broker.stop();
		}
	});

	test("a finalization left after its mark (its replica died) is finished by the sweep once abandoned, as its own would have ended: chain evidence included", async () => {
		const other = await startTin({ SWEEP_INTERVAL_MS: "50" });
		try {
			const { view, transactionSignature } = await other.submitted();
			// The route write fails right after the mark, as if the process had died there.
			const routes = other.service.routes;
			const get = routes.get;
			routes.get = async tinOf => ((await other.service.operations.get(view.id))!.finalizing ? Promise.reject(new Error("the process died here")) : get.call(routes, tinOf));
			await expect(other.stage("finalized", view.id, submitter, { transactionSignature })).rejects.toThrow();
			routes.get = get;
			const marked = (await other.service.operations.get(view.id))!;
			expect(marked).toMatchObject({ status: "SUBMITTED", finalizing: expect.any(String) });
			// Only just marked: the sweep leaves it to its finalizer.
			await new Promise(resolve => setTimeout(resolve, 300));
			expect((await other.service.operations.get(view.id))!.status).toBe("SUBMITTED");
			// A mark a minute old is abandoned.
			const longAgo = new Date(Date.now() - 61_000).toISOString();
			expect(await other.service.operations.update(view.id, { finalizing: marked.finalizing }, { ...marked, finalizing: longAgo })).toBe(true);
			for (const deadline = Date.now() + 5000; (await other.service.operations.get(view.id))!.status !== "FINALIZED" && Date.now() < deadline; ) await new Promise(resolve => setTimeout(resolve, 20));
			const finished = await other.stage("finalized", view.id, submitter, { transactionSignature });
			expect(finished).toMatchObject({ status: "FINALIZED", routeVersion: 1 });
			// The entry its Cranker's request made: no chain is configured here, and that is on record.
			expect(finished.history.at(-1)).toStrictEqual({ status: "FINALIZED", at: marked.finalizedEntry!.at, by: submitter, onChainChecked: false });
			expect(await other.broker.call("tin.resolve", { tin: view.tin })).toMatchObject({ routeVersion: 1 });

			// Another left the same way is finished at once by its Cranker's finalize sent again.
			const again = await other.submitted();
			routes.get = async tinOf => ((await other.service.operations.get(again.view.id))!.finalizing ? Promise.reject(new Error("the process died here")) : get.call(routes, tinOf));
			await expect(other.stage("finalized", again.view.id, submitter, { transactionSignature: again.transactionSignature })).rejects.toThrow();
			routes.get = get;
			expect(await other.stage("finalized", again.view.id, submitter, { transactionSignature: again.transactionSignature })).toMatchObject({ status: "FINALIZED", routeVersion: 1 });
		} finally {
			await other.broker.stop();
		}
	});

	test("the sweep counts only the finalizations it finished: one the live finisher ended first, meanwhile, is not", async () => {
		const { view, transactionSignature } = await tin.submitted();
		const live = stallAfterMark(tin.service, view.id);
		const finishing = tin.stage("finalized", view.id, submitter, { transactionSignature });
		await live.stalled;
		// The sweep takes the mark as abandoned, and stalls at the same point.
		const sweep = stallAfterMark(tin.service, view.id);
		const swept = tin.service.reconcile(new Date(Date.now() + 60_000));
		await sweep.stalled;
		live.resume();
		expect(await finishing).toMatchObject({ status: "FINALIZED", routeVersion: 1 });
		sweep.resume();
		expect(await swept).toBe(0);
	});

	test("the sweep tries every abandoned finalization, a page at a time: those that fail are counted and fail the sweep once the others are done; a store that cannot answer ends it at once", async () => {
		const other = await startTin();
		try {
			const marked: { id: string; tin: string }[] = [];
			for (let i = 0; i < 102; i++) {
				const { view } = await other.submitted();
				// Marked, then its replica died: the first the longest ago.
				const operation = (await other.service.operations.get(view.id))!;
				const markedAt = new Date(Date.now() - 3_600_000 + i * 1000).toISOString();
				expect(await other.service.operations.update(view.id, { status: "SUBMITTED" }, { ...operation, finalizing: markedAt })).toBe(true);
				marked.push({ id: view.id, tin: view.tin });
			}
			const statuses = async () => Promise.all(marked.map(async ({ id }) => (await other.service.operations.get(id))!.status));
			// The route reads of the 101 oldest fail, again and again: more than a page of them.
			const routes = other.service.routes;
			const get = routes.get;
			const failing = new Set(marked.slice(0, 101).map(({ tin }) => tin));
			routes.get = async tinOf => (failing.has(tinOf) ? Promise.reject(new Error("this record cannot be read")) : get.call(routes, tinOf));
			const failure = await other.service.reconcile(new Date()).catch((err: Error) => err);
			expect(failure).toMatchObject({ name: "UnfinishedFinalizationsError", count: 101 });
			expect(await statuses()).toStrictEqual([...Array(101).fill("SUBMITTED"), "FINALIZED"]);
			// The start (as after a crash) logs them and goes on: one mark that cannot be finished does not keep the owners down.
			const started = tinService(loadConfig({ DATA_DIR: tempDir() })).started as (this: unknown) => Promise<void>;
			await expect(started.call(other.service)).resolves.toBeUndefined();
			// The next sweep fails with one mark fewer (it finishes that one), in the same words: the sweeper tells it once a minute, not at every sweep.
			failing.delete(marked[100].tin);
			await expect(other.service.reconcile(new Date())).rejects.toMatchObject({ count: 100, message: (failure as Error).message });
			// The store cannot answer: the first attempt ends the sweep.
			let reads = 0;
			routes.get = async () => (reads++, Promise.reject(new StoreUnavailableError("no primary")));
			await expect(other.service.reconcile(new Date())).rejects.toBeInstanceOf(StoreUnavailableError);
			expect(reads).toBe(1);
			// …and a start that meets it fails, as any start on a store that cannot answer.
			await expect(started.call(other.service)).rejects.toBeInstanceOf(StoreUnavailableError);
			routes.get = get;
			expect(await other.service.reconcile(new Date())).toBe(100);
			expect(new Set(await statuses())).toStrictEqual(new Set(["FINALIZED"]));
		} finally {
			await other.broker.stop();
		}
	});

	test("a finalization that resumes late, after the sweep finished it and a later update of its TIN went live, leaves the later route live", async () => {
		const other = await startTin({ SWEEP_INTERVAL_MS: "50" });
		try {
			const owner = newWallet();
			const created = await other.submitted(signedTinOperation(owner, { intentType: "create" }));
			await other.stage("finalized", created.view.id, submitter, { transactionSignature: created.transactionSignature });
			const tin = created.view.tin;
			const [first, second] = [signedTinOperation(owner, { intentType: "update", tin }), signedTinOperation(owner, { intentType: "update", tin })];
			const a = await other.submitted(first);
			// A's finalization stalls right after its mark (a paused process, a throttled pod)…
			const { stalled, resume } = stallAfterMark(other.service, a.view.id);
			const late = other.stage("finalized", a.view.id, submitter, { transactionSignature: a.transactionSignature });
			await stalled;
			// …and its owner signs B (had B come first, A could not have begun: it would have been superseded).
			const b = await other.submitted(second);
			// …for over a minute: the sweep finishes it (version 2), then B goes live (version 3).
			const marked = (await other.service.operations.get(a.view.id))!;
			await other.service.operations.update(a.view.id, { finalizing: marked.finalizing }, { ...marked, finalizing: new Date(Date.now() - 61_000).toISOString() });
			for (const deadline = Date.now() + 5000; (await other.service.operations.get(a.view.id))!.status !== "FINALIZED" && Date.now() < deadline; ) await new Promise(resolve => setTimeout(resolve, 20));
			expect(await other.broker.call("tin.resolve", { tin })).toMatchObject({ routeVersion: 2, routeCommitment: first.routeCommitment });
			expect(await other.stage("finalized", b.view.id, submitter, { transactionSignature: b.transactionSignature })).toMatchObject({ status: "FINALIZED", routeVersion: 3 });
			resume();
			expect(await late).toMatchObject({ status: "FINALIZED", routeVersion: 2 });
			expect(await other.broker.call("tin.resolve", { tin })).toMatchObject({ routeVersion: 3, routeCommitment: second.routeCommitment });
		} finally {
			await other.broker.stop();
		}
	});

	test("versions follow the order finalizations began in: one whose finisher failed after its mark, finished after a later update, stays behind it", async () => {
		const owner = newWallet();
		const created = await tin.submitted(signedTinOperation(owner, { intentType: "create" }));
		await tin.stage("finalized", created.view.id, submitter, { transactionSignature: created.transactionSignature });
		const [first, second] = [signedTinOperation(owner, { intentType: "update", tin: created.view.tin }), signedTinOperation(owner, { intentType: "update", tin: created.view.tin })];
		const a = await tin.submitted(first);
		const routes = tin.service.routes;
		const get = routes.get;
		routes.get = async tinOf => ((await tin.service.operations.get(a.view.id))!.finalizing ? Promise.reject(new Error("the store went away")) : get.call(routes, tinOf));
		await expect(tin.stage("finalized", a.view.id, submitter, { transactionSignature: a.transactionSignature })).rejects.toThrow();
		routes.get = get;
		// Its owner signs B once A's finalization has begun.
		const b = await tin.submitted(second);
		expect(await tin.stage("finalized", b.view.id, submitter, { transactionSignature: b.transactionSignature })).toMatchObject({ routeVersion: 3 });
		expect(await tin.stage("finalized", a.view.id, submitter, { transactionSignature: a.transactionSignature })).toMatchObject({ status: "FINALIZED", routeVersion: 2 });
		expect(await tin.broker.call("tin.resolve", { tin: created.view.tin })).toMatchObject({ routeVersion: 3, routeCommitment: second.routeCommitment });
	});

	test("a finisher whose mark lost to another's, and whose read of the operation comes back stale (a majority read behind), keeps the version claimed: 503, not a removal (a review)", async () => {
		const owner = newWallet();
		const created = await tin.submitted(signedTinOperation(owner, { intentType: "create" }));
		await tin.stage("finalized", created.view.id, submitter, { transactionSignature: created.transactionSignature });
		const a = await tin.submitted(signedTinOperation(owner, { intentType: "update", tin: created.view.tin }));
		const { operations } = tin.service;
		const [update, get] = [operations.update, operations.get];
		const before = (await operations.get(a.view.id))!;
		// Another finisher's mark lands just ahead of this one's; this one's read after it still shows the operation unmarked.
		operations.update = async (id, expected, next) => {
			if (id !== a.view.id || (expected as { finalizing?: unknown }).finalizing !== null || next.finalizing === undefined) return update.call(operations, id, expected, next);
			operations.update = update;
			operations.get = async readId => (readId === a.view.id ? ((operations.get = get), before) : get.call(operations, readId));
			expect(await update.call(operations, id, expected, next)).toBe(true);
			return false;
		};
		try {
			await expect(tin.stage("finalized", a.view.id, submitter, { transactionSignature: a.transactionSignature })).rejects.toMatchObject({ type: "NOT_READY" });
		} finally {
			[operations.update, operations.get] = [update, get];
		}
		expect(await tin.service.routeVersions.get(a.view.id)).toMatchObject({ routeVersion: 2 });
		// The mark is finished as it began, at the version it claimed.
		expect(await tin.stage("finalized", a.view.id, submitter, { transactionSignature: a.transactionSignature })).toMatchObject({ status: "FINALIZED", routeVersion: 2 });
	});

	test("a route the previous version wrote for a marked operation (no version record) keeps its version: a later update takes the next and stays live", async () => {
		const owner = newWallet();
		const created = await tin.submitted(signedTinOperation(owner, { intentType: "create" }));
		await tin.stage("finalized", created.view.id, submitter, { transactionSignature: created.transactionSignature });
		const tinOf = created.view.tin;
		// As the previous version left things: no version records, A marked and its route (v2) written, then a crash.
		await tin.service.routeVersions.remove(created.view.id);
		const [first, second] = [signedTinOperation(owner, { intentType: "update", tin: tinOf }), signedTinOperation(owner, { intentType: "update", tin: tinOf })];
		const a = await tin.submitted(first);
		const b = await tin.submitted(second);
		const at = new Date().toISOString();
		const operation = (await tin.service.operations.get(a.view.id))!;
		expect(await tin.service.operations.update(a.view.id, { status: "SUBMITTED" }, { ...operation, finalizing: at })).toBe(true);
		const v1 = (await tin.service.routes.get(tinOf))!;
		expect(await tin.service.routes.update(tinOf, { routeVersion: 1 }, { ...v1, routeVersion: 2, routeCommitment: first.routeCommitment, policyCommitment: first.policyCommitment, lastOperationId: a.view.id, updatedAt: at })).toBe(true);
		expect(await tin.stage("finalized", b.view.id, submitter, { transactionSignature: b.transactionSignature })).toMatchObject({ routeVersion: 3 });
		expect(await tin.stage("finalized", a.view.id, submitter, { transactionSignature: a.transactionSignature })).toMatchObject({ status: "FINALIZED", routeVersion: 2 });
		expect(await tin.broker.call("tin.resolve", { tin: tinOf })).toMatchObject({ routeVersion: 3, routeCommitment: second.routeCommitment });
	});

	test("a version the previous version of the service wrote live for another operation meanwhile (a rolling update) is not shared: this one takes the next", async () => {
		const owner = newWallet();
		const created = await tin.submitted(signedTinOperation(owner, { intentType: "create" }));
		await tin.stage("finalized", created.view.id, submitter, { transactionSignature: created.transactionSignature });
		const tinOf = created.view.tin;
		const [mine, theirs] = [signedTinOperation(owner, { intentType: "update", tin: tinOf }), signedTinOperation(owner, { intentType: "update", tin: tinOf })];
		const e = await tin.submitted(mine);
		// E took version 2 and is marked; before its route write, an owner of the previous version writes D's route as version 2.
		const { stalled, resume } = stallAfterMark(tin.service, e.view.id);
		const finishing = tin.stage("finalized", e.view.id, submitter, { transactionSignature: e.transactionSignature });
		await stalled;
		const d = await tin.submitted(theirs);
		const v1 = (await tin.service.routes.get(tinOf))!;
		expect(await tin.service.routes.update(tinOf, { routeVersion: 1 }, { ...v1, routeVersion: 2, routeCommitment: theirs.routeCommitment, lastOperationId: d.view.id })).toBe(true);
		resume();
		expect(await finishing).toMatchObject({ status: "FINALIZED", routeVersion: 3 });
		expect(await tin.broker.call("tin.resolve", { tin: tinOf })).toMatchObject({ routeVersion: 3, routeCommitment: mine.routeCommitment });
	});

	test("a caller that does not say it takes JSON texts (a gateway of the previous version) gets the same items whole", async () => {
		await tin.submit(signedTinOperation(newWallet(), { intentType: "create" }));
		for (const action of ["verificationWork", "listOperations"]) {
			const whole = await tin.broker.call<unknown[], object>(`tin.${action}`, { limit: 500 });
			expect(whole.length).toBeGreaterThan(0);
			expect(whole).toStrictEqual(await tin.list(action));
		}
	});

	test("a stage that skips ahead is refused as a transition, and an unknown operation is not found", async () => {
		const { view } = await tin.submit(signedTinOperation(newWallet(), { intentType: "create" }));
		await expect(tin.stage("submitted", view.id, submitter, { transactionSignature: signature() })).rejects.toMatchObject({ type: "INVALID_TRANSITION" });
		await expect(tin.stage("verified", "top_missing", verifier)).rejects.toMatchObject({ type: "NOT_FOUND" });
	});

	describe("genesis routes against creates: a TIN has one of them (SPEC §5: a TIN is never allocated twice)", () => {
		test("a seed that gains a TIN a create was handed does not import it: the create's finalization makes its route, version 1, its owner's", async () => {
			const dataDir = tempDir();
			const creator = newWallet();
			const first = await startTin({ DATA_DIR: dataDir });
			const body = signedTinOperation(creator, { intentType: "create" });
			const { view } = await first.submit(body);
			await first.broker.stop();

			const seeded = newRoute({ tin: view.tin, ownerWallet: newWallet().address });
			const unrelated = newRoute();
			const again = await startTin({ DATA_DIR: dataDir, REGISTRY_SEED_FILE: writeSeedFile(dataDir, [seeded, unrelated]) });
			try {
				expect(await again.broker.call("tin.resolve", { tin: view.tin })).toBeNull();
				expect(await again.broker.call("tin.resolve", { tin: unrelated.tin })).toMatchObject({ routeCommitment: unrelated.routeCommitment });
				await again.stage("verified", view.id, verifier);
				await again.stage("feeCommitted", view.id, submitter, { feeAmount: FEE });
				const transactionSignature = signature();
				await again.stage("submitted", view.id, submitter, { transactionSignature });
				expect(await again.stage("finalized", view.id, submitter, { transactionSignature })).toMatchObject({ status: "FINALIZED", routeVersion: 1 });
				expect(await again.service.routes.get(view.tin)).toMatchObject({ routeVersion: 1, routeCommitment: body.routeCommitment, ownerWallet: creator.address });
			} finally {
				await again.broker.stop();
			}
		});

		test("an import that read the counter just before an allocation took the same TIN leaves it to the create", async () => {
			const other = await startTin();
			try {
				const next = tinFromSequence((await other.service.sequence.get("tin"))?.next ?? 100_000_000);
				// The import reads the counter, then another replica's allocation takes that TIN.
				const sequence = other.service.sequence;
				const get = sequence.get;
				let allocated: string | undefined;
				sequence.get = async id => {
					const value = await get.call(sequence, id);
					sequence.get = get;
					allocated = await other.service.allocateTin();
					return value;
				};
				expect(await other.service.importGenesis(writeSeedFile(tempDir(), [newRoute({ tin: next })]))).toBe(0);
				expect(allocated).toBe(next);
				expect(await other.service.routes.get(next)).toBeNull();
			} finally {
				await other.broker.stop();
			}
		});

		test("an allocation meets a TIN the seed is importing (claimed, its route not written yet): it takes the next, and the seed's route lands", async () => {
			const other = await startTin();
			try {
				const seeded = newRoute({ tin: tinFromSequence(100_000_000) });
				// The import's route write fails once, as if its process stopped between its claim and its route.
				const routes = other.service.routes as unknown as { insert(route: RouteRecord): Promise<boolean> };
				const insert = routes.insert;
				routes.insert = async () => {
					routes.insert = insert;
					throw new Error("stopped");
				};
				await expect(other.service.importGenesis(writeSeedFile(tempDir(), [seeded]))).rejects.toThrow("stopped");
				expect(await other.service.allocateTin()).toBe(tinFromSequence(100_000_001));
				expect(await other.service.importGenesis(writeSeedFile(tempDir(), [seeded]))).toBe(1);
				expect(await other.service.routes.get(seeded.tin)).toMatchObject({ routeCommitment: seeded.routeCommitment, routeVersion: 1 });
			} finally {
				await other.broker.stop();
			}
		});

		test("a seed is imported whatever the counter: a TIN below it keeps its route, one above it after creates lands, a large seed lands whole", async () => {
			const dataDir = tempDir();
			const below = newRoute({ tin: tinFromSequence(100_000_000) });
			const other = await startTin({ DATA_DIR: dataDir, REGISTRY_SEED_FILE: writeSeedFile(dataDir, [below]) });
			try {
				expect((await other.submit(signedTinOperation(newWallet(), { intentType: "create" }))).view.tin).toBe(tinFromSequence(100_000_001));
				expect((await other.submit(signedTinOperation(newWallet(), { intentType: "create" }))).view.tin).toBe(tinFromSequence(100_000_002));
				const above = Array.from({ length: 250 }, (_, i) => newRoute({ tin: tinFromSequence(100_000_010 + i) }));
				expect(await other.service.importGenesis(writeSeedFile(tempDir(), [below, ...above]))).toBe(250);
				for (const route of [below, ...above]) expect(await other.service.routes.get(route.tin)).toMatchObject({ routeCommitment: route.routeCommitment });
				expect((await other.submit(signedTinOperation(newWallet(), { intentType: "create" }))).view.tin).toBe(tinFromSequence(100_000_003));
			} finally {
				await other.broker.stop();
			}
		});

		test("creates after a large seed step over each run of seeded TINs at once: the first costs what any other does (a review)", async () => {
			const dataDir = tempDir();
			// 2,000 TINs from the start of the sequence, a gap of 10, then 500 more.
			const seeded = [...Array.from({ length: 2000 }, (_, i) => 100_000_000 + i), ...Array.from({ length: 500 }, (_, i) => 100_002_010 + i)];
			const other = await startTin({ DATA_DIR: dataDir, REGISTRY_SEED_FILE: writeSeedFile(dataDir, seeded.map(n => newRoute({ tin: tinFromSequence(n) }))) });
			try {
				const moves = counterWrites(other.service);
				const created: string[] = [];
				for (let i = 0; i < 11; i++) created.push((await other.submit(signedTinOperation(newWallet(), { intentType: "create" }))).view.tin);
				expect(created).toStrictEqual([...Array.from({ length: 10 }, (_, i) => tinFromSequence(100_002_000 + i)), tinFromSequence(100_002_510)]);
				// One write of the counter per create, not one per seeded TIN passed (2,500 before).
				expect(moves()).toBe(11);
			} finally {
				await other.broker.stop();
			}
		});

		test("a replica without REGISTRY_SEED_FILE steps over the seeded runs at once too, read at start, and read again when another replica imported a seed since (a review)", async () => {
			const dataDir = tempDir();
			const seeded = Array.from({ length: 2000 }, (_, i) => 100_000_000 + i);
			const importer = await startTin({ DATA_DIR: dataDir, REGISTRY_SEED_FILE: writeSeedFile(dataDir, seeded.map(n => newRoute({ tin: tinFromSequence(n) }))) });
			await importer.broker.stop();
			const other = await startTin({ DATA_DIR: dataDir });
			try {
				const moves = counterWrites(other.service);
				const create = async () => (await other.submit(signedTinOperation(newWallet(), { intentType: "create" }))).view.tin;
				expect(await create()).toBe(tinFromSequence(100_002_000));
				expect(moves()).toBe(1);
				// Another replica claims 1,000 more for its seed, after this one read the runs.
				for (let n = 100_002_001; n < 100_003_001; n++) expect(await other.service.claims.insert({ id: tinFromSequence(n), by: "genesis" })).toBe(true);
				expect(await create()).toBe(tinFromSequence(100_003_001));
				expect(await create()).toBe(tinFromSequence(100_003_002));
				// The first seeded TIN met, then the rest of its run at once: 2 writes, not 1,001.
				expect(moves()).toBe(4);
			} finally {
				await other.broker.stop();
			}
		});

		test("a seed imported before claims were kept is claimed at the next import, so that a replica without REGISTRY_SEED_FILE steps over it at once too (a review)", async () => {
			const dataDir = tempDir();
			const seedFile = writeSeedFile(dataDir, Array.from({ length: 500 }, (_, i) => newRoute({ tin: tinFromSequence(100_000_000 + i) })));
			const older = await startTin({ DATA_DIR: dataDir, REGISTRY_SEED_FILE: seedFile });
			// As a version that kept no claims left it: the routes, and no claim of any.
			for (let n = 100_000_000; n < 100_000_500; n++) expect(await older.service.claims.remove(tinFromSequence(n))).toBe(true);
			await older.broker.stop();
			// This version imports the same seed (its routes there already), then a replica without it creates.
			const importer = await startTin({ DATA_DIR: dataDir, REGISTRY_SEED_FILE: seedFile });
			await importer.broker.stop();
			const other = await startTin({ DATA_DIR: dataDir });
			try {
				const moves = counterWrites(other.service);
				expect((await other.submit(signedTinOperation(newWallet(), { intentType: "create" }))).view.tin).toBe(tinFromSequence(100_000_500));
				expect(moves()).toBe(1);
			} finally {
				await other.broker.stop();
			}
		});

		test("seeded TINs that cannot be read (an index an older replica dropped, say) cost a create a step each, not the create", async () => {
			const other = await startTin();
			try {
				const claims = other.service.claims as unknown as { list: () => Promise<never> };
				claims.list = () => Promise.reject(new Error("no index serves the query"));
				for (let n = 100_000_000; n < 100_000_005; n++) expect(await other.service.claims.insert({ id: tinFromSequence(n), by: "genesis" })).toBe(true);
				expect((await other.submit(signedTinOperation(newWallet(), { intentType: "create" }))).view.tin).toBe(tinFromSequence(100_000_005));
			} finally {
				await other.broker.stop();
			}
		});

		test("a TIN the previous version handed out (the counter passed it, no claim kept) is not imported either", async () => {
			const other = await startTin();
			try {
				const handedOut = await other.service.allocateTin();
				expect(await other.service.claims.remove(handedOut)).toBe(true);
				expect(await other.service.importGenesis(writeSeedFile(tempDir(), [newRoute({ tin: handedOut })]))).toBe(0);
				expect(await other.service.routes.get(handedOut)).toBeNull();
			} finally {
				await other.broker.stop();
			}
		});
	});
});
