/**
 * The receiver with its real neighbours (the verifier and the mempool on a real SQLite file) and
 * small stand-ins for the owners it only asks one thing (epochs: the current epoch; tin: a route).
 * Verify first, store once, in batches: the gateway hands over the submissions of a turn in one
 * call, and the verdicts travel with the requests in one call to the mempool.
 */
import { ServiceBroker, type ActionHandler, type ActionSchema, type Context, type Middleware, type Service } from "moleculer";
import { buildPaymentMessage } from "../../lib/canonical";
import { loadConfig } from "../../lib/config";
import type { Submission, SubmissionAnswer } from "../../lib/intake";
import type { IntentRecord, PublicMempoolIntent } from "../../lib/intents";
import { StoreUnavailableError, type Collection } from "../../lib/store/port";
import type { ActiveRoute } from "../../lib/registry";
import { mempoolService } from "../../services/mempool.service";
import { receiverService } from "../../services/receiver.service";
import { verifierService } from "../../services/verifier.service";
import { forgedIntent, newRoute, newWallet, signedIntent, walletOf } from "../helpers/fixtures";
import { tempDir } from "../helpers/node";

const route = newRoute();
const activeRoute: ActiveRoute = { tin: route.tin, routeCommitment: route.routeCommitment, routeVersion: route.routeVersion, policyCommitment: route.policyCommitment };
const config = () => loadConfig({ DATA_DIR: tempDir(), SWEEP_INTERVAL_MS: "60000", VERIFY_TIMEOUT_MS: "500", VERIFY_THREADS: "1" });

/** Every action run (but the cached lookups), by name, with how many requests it carried: the hops of a batch. */
function callRecorder(calls: [string, number][]): Middleware {
	const carried = (params: { submissions?: unknown[]; requests?: unknown[]; items?: unknown[] }) => (params.submissions ?? params.requests ?? params.items ?? [null]).length;
	return {
		localAction: (next: ActionHandler, action: ActionSchema) => (ctx: Context<object>) => {
			if (action.name !== "epochs.current" && action.name !== "tin.resolve") calls.push([action.name ?? "", carried(ctx.params)]);
			return next.call(ctx.service as Service, ctx);
		}
	};
}

/** The stand-ins of the owners the receiver only asks one thing. */
function standIns(broker: ServiceBroker): void {
	broker.createService({ name: "epochs", actions: { current: () => ({ epoch: 7 }) } });
	broker.createService({ name: "tin", actions: { resolve: (ctx: Context<{ tin: string }>) => (ctx.params.tin === route.tin ? activeRoute : null) } });
}

/** An action schema's service without the actions a previous version did not have. */
function previousVersion<S extends { actions?: object }>(schema: S, ...added: string[]): S {
	const actions = { ...schema.actions } as Record<string, unknown>;
	for (const name of added) delete actions[name];
	return { ...schema, actions };
}

/**
 * The receiver, the mempool, the stand-ins, and the verifier unless `withVerifier` is false; with
 * `previousOwners`, a mempool and a verifier of the previous version (one request per call).
 */
async function startIntake(withVerifier = true, previousOwners = false) {
	const settings = config();
	const calls: [string, number][] = [];
	const broker = new ServiceBroker({ logger: false, middlewares: [callRecorder(calls)] });
	standIns(broker);
	broker.createService(previousOwners ? previousVersion(mempoolService(settings), "receiveMany") : mempoolService(settings));
	if (withVerifier) broker.createService(previousOwners ? previousVersion(verifierService(settings), "verifyMany") : verifierService(settings));
	broker.createService(receiverService(settings));
	await broker.start();
	let call = 0;
	/** As the gateway hands a turn's submissions over. */
	const submitMany = (requests: object[]) => broker.call<SubmissionAnswer[], object>("receiver.submitMany", { submissions: requests.map(request => ({ request, call: `http-${++call}` })) });
	/** One submission, as a gateway of an earlier version hands it over: the status and location come back in the call's meta. */
	const submit = async (request: object) => {
		const meta: { $statusCode?: number; $location?: string } = {};
		const view = await broker.call<PublicMempoolIntent, object>("receiver.submit", request, { meta });
		return { view, status: meta.$statusCode, location: meta.$location };
	};
	return { broker, config: settings, submitMany, submit, calls };
}

const viewOf = (answer: SubmissionAnswer): PublicMempoolIntent => {
	if ("refused" in answer) throw new Error(`refused: ${answer.refused.type}`);
	return answer.view;
};

describe("with a verifier", () => {
	let intake: Awaited<ReturnType<typeof startIntake>>;
	beforeAll(async () => (intake = await startIntake()));
	afterAll(() => intake.broker.stop());

	test("a batch of signed requests: each 201 VERIFIED in the current epoch, in order, with one call to the verifier and one to the mempool for the whole batch", async () => {
		const requests = Array.from({ length: 5 }, () => signedIntent(newWallet(), route));
		intake.calls.length = 0;
		const answers = await intake.submitMany(requests);
		expect(answers.map(answer => ("status" in answer ? answer.status : answer.refused.type))).toEqual([201, 201, 201, 201, 201]);
		answers.forEach((answer, i) =>
			expect(viewOf(answer)).toMatchObject({ paymentId: requests[i].paymentId, receiverStatus: "VERIFIED", epoch: 7, transactionCommitment: buildPaymentMessage(requests[i]).transactionCommitment })
		);
		expect(intake.calls).toEqual([
			["receiver.submitMany", 5],
			["verifier.verifyMany", 5],
			["mempool.receiveMany", 5]
		]);
	});

	test("a repeat of the same body is 200 with the same record, in the same batch or a later one", async () => {
		const request = signedIntent(newWallet(), route);
		const [first, twin] = await intake.submitMany([request, request]);
		const [again] = await intake.submitMany([request]);
		expect(["status" in first && first.status, "status" in twin && twin.status].sort()).toEqual([200, 201]);
		expect(again).toEqual({ status: 200, view: viewOf(first) });
	});

	test("each submission of a batch is answered on its own: a forgery is refused before the mempool, a refusal that leaves a record (unknown TIN) is stored REJECTED", async () => {
		const signed = signedIntent(newWallet(), route);
		// The sender's message, signed by someone else.
		const forged = { ...signed, senderAuthorizationSignature: newWallet().sign(signed.senderAuthorizationMessage) };
		const unknownTin = signedIntent(newWallet(), newRoute());
		const reused = signedIntent(newWallet(), route);
		const conflicting = signedIntent(walletOf(reused.senderWallet), route, { paymentId: reused.paymentId });
		await intake.submitMany([reused]);
		intake.calls.length = 0;
		const [forgery, accepted, unknown, conflict] = await intake.submitMany([forged, signed, unknownTin, conflicting]);
		expect(forgery).toMatchObject({ refused: { type: "INVALID_SIGNATURE", data: { paymentId: signed.paymentId } } });
		expect((forgery as { refused: { data: object } }).refused.data).not.toHaveProperty("id");
		expect(accepted).toMatchObject({ status: 201, view: { paymentId: signed.paymentId } });
		expect(unknown).toMatchObject({ refused: { type: "UNKNOWN_TIN", data: { paymentId: unknownTin.paymentId, id: expect.stringMatching(/^int_/) } } });
		expect(conflict).toMatchObject({ refused: { type: "IDEMPOTENCY_CONFLICT", data: { paymentId: reused.paymentId } } });
		// The forgery never reached the mempool.
		expect(intake.calls).toContainEqual(["mempool.receiveMany", 3]);
		const counts = await intake.broker.call<Record<string, number>>("mempool.counts");
		expect(counts.REJECTED).toBeGreaterThanOrEqual(1);
	});

	test("one submission as a gateway of an earlier version hands it over: 201 with its location, and the refusals as errors", async () => {
		const request = signedIntent(newWallet(), route);
		const { view, status, location } = await intake.submit(request);
		expect([status, location, view.receiverStatus]).toEqual([201, `/intents/${view.id}`, "VERIFIED"]);
		expect((await intake.submit(request)).status).toBe(200);
		await expect(intake.submit({ ...request, amount: "x" })).rejects.toMatchObject({ type: "VALIDATION_ERROR", code: 422 });
		await expect(intake.submit(signedIntent(newWallet(), newRoute()))).rejects.toMatchObject({ type: "UNKNOWN_TIN", code: 422 });
	});
});

test("with owners and verifiers of the previous version (a rolling update), a batch goes to them one request per call, each answered as before", async () => {
	const intake = await startIntake(true, true);
	try {
		const signed = signedIntent(newWallet(), route);
		const forged = { ...signedIntent(newWallet(), route), senderAuthorizationSignature: newWallet().sign("x") };
		const unknownTin = signedIntent(newWallet(), newRoute());
		intake.calls.length = 0;
		const [accepted, forgery, unknown, repeat] = await intake.submitMany([signed, forged, unknownTin, signed]);
		expect(accepted).toMatchObject({ status: 201, view: { paymentId: signed.paymentId, receiverStatus: "VERIFIED" } });
		expect(forgery).toMatchObject({ refused: { type: "INVALID_SIGNATURE" } });
		expect(unknown).toMatchObject({ refused: { type: "UNKNOWN_TIN" } });
		expect(repeat).toMatchObject({ status: 200, view: { id: viewOf(accepted).id } });
		expect(intake.calls.filter(([name]) => name === "verifier.verify")).toHaveLength(4);
		expect(intake.calls.filter(([name]) => name === "mempool.receive")).toHaveLength(3);
	} finally {
		await intake.broker.stop();
	}
});

test("without a verifier: 202 RECEIVED, then the sweep verifies it once a verifier is there", async () => {
	const intake = await startIntake(false);
	try {
		const request = signedIntent(newWallet(), route);
		const [answer] = await intake.submitMany([request]);
		expect(answer).toMatchObject({ status: 202, view: { receiverStatus: "RECEIVED" } });
		await expect(intake.broker.call("receiver.wake")).rejects.toMatchObject({ type: "VERIFIER_UNAVAILABLE" });
		intake.broker.createService(verifierService(intake.config));
		await intake.broker.waitForServices("verifier");
		expect(await intake.broker.call("receiver.wake")).toEqual({ ok: true, status: { picked: 1, verified: 1, rejected: 0, pending: 0, verifierUnavailable: false } });
		expect((await intake.submitMany([request]))[0]).toMatchObject({ status: 200, view: { id: viewOf(answer).id, receiverStatus: "VERIFIED" } });
	} finally {
		await intake.broker.stop();
	}
});

/** Intents taken without a verifier, the oldest ones' records failing to read with `failures`, one each; then a verifier. */
async function sweepPastFailures(...failures: Error[]) {
	const intake = await startIntake(false);
	const answers = [];
	for (let i = 0; i <= failures.length; i++) {
		answers.push(...(await intake.submitMany([signedIntent(newWallet(), route)])));
		// One after the other: the sweep takes the oldest first.
		await new Promise(resolve => setTimeout(resolve, 5));
	}
	expect(answers.map(answer => ("status" in answer ? answer.status : 0))).toEqual(answers.map(() => 202));
	const views = answers.map(viewOf);
	const failing = new Map(failures.map((failure, i) => [views[i].id, failure]));
	const intents = (intake.broker.getLocalService("mempool") as unknown as { intents: Collection<IntentRecord> }).intents;
	const get = intents.get.bind(intents);
	intents.get = id => (failing.has(id) ? Promise.reject(failing.get(id)) : get(id));
	intake.broker.createService(verifierService(intake.config));
	await intake.broker.waitForServices("verifier");
	return { intake, next: views[views.length - 1], mended: () => (intents.get = get) };
}

test("an intent whose verification fails does not hold up the others of the sweep: they are verified, and the sweep then fails with its error", async () => {
	// The oldest waiting intent cannot be read (a damaged page): every sweep meets it first.
	const { intake, next, mended } = await sweepPastFailures(Object.assign(new Error("disk I/O error"), { code: "SQLITE_IOERR" }));
	try {
		await expect(intake.broker.call("receiver.wake")).rejects.toMatchObject({ type: "INTERNAL_ERROR" });
		expect(await intake.broker.call("mempool.view", { id: next.id })).toMatchObject({ receiverStatus: "VERIFIED" });
		mended();
		expect(await intake.broker.call("receiver.wake")).toMatchObject({ ok: true, status: { picked: 1, verified: 1 } });
	} finally {
		await intake.broker.stop();
	}
});

test("a store that cannot answer now stops the sweep at once, with that answer: the others would each wait for the same", async () => {
	// One intent's own failure first, then the store's: the sweep answers the one a retry may mend.
	const { intake, next } = await sweepPastFailures(Object.assign(new Error("disk I/O error"), { code: "SQLITE_IOERR" }), new StoreUnavailableError("the primary stepped down"));
	try {
		await expect(intake.broker.call("receiver.wake")).rejects.toMatchObject({ type: "NOT_READY" });
		expect(await intake.broker.call("mempool.view", { id: next.id })).toMatchObject({ receiverStatus: "RECEIVED" });
	} finally {
		await intake.broker.stop();
	}
});

test("a forgery taken without a verifier, expired, holds nobody's paymentId: not expired before its verdict, the real body told to retry (503), then the verification removes it", async () => {
	const intake = await startIntake(false);
	try {
		const victim = newWallet();
		const real = signedIntent(victim, route);
		// The victim's paymentId and wallet, its canonical message, another key's signature, an expiry already past.
		const expired = { senderAuthorizationIssuedAt: new Date(Date.now() - 120_000).toISOString(), senderAuthorizationExpiresAt: new Date(Date.now() - 60_000).toISOString() };
		const forgery = forgedIntent(real, route, expired);
		const [taken] = await intake.submitMany([forgery]);
		expect(taken).toMatchObject({ status: 202, view: { receiverStatus: "RECEIVED" } });
		// The expiry sweep leaves it to its verification: REJECTED EXPIRED would keep it for good.
		const mempool = intake.broker.getLocalService("mempool") as unknown as { expireDue(): Promise<number> };
		expect(await mempool.expireDue()).toBe(0);
		expect(await intake.broker.call("mempool.view", { id: viewOf(taken).id })).toMatchObject({ receiverStatus: "RECEIVED" });
		// The real sender is not told another signed body exists: none is known to.
		const [waiting] = await intake.submitMany([real]);
		expect(waiting).toMatchObject({ refused: { type: "NOT_READY", data: { paymentId: real.paymentId } } });

		intake.broker.createService(verifierService(intake.config));
		await intake.broker.waitForServices("verifier");
		expect(await intake.broker.call("receiver.wake")).toMatchObject({ ok: true, status: { picked: 1, verified: 0 } });
		await expect(intake.broker.call("mempool.view", { id: viewOf(taken).id })).rejects.toMatchObject({ type: "NOT_FOUND" });
		expect((await intake.submitMany([real]))[0]).toMatchObject({ status: 201, view: { paymentId: real.paymentId, senderWallet: victim.address, amount: real.amount, receiverStatus: "VERIFIED" } });
	} finally {
		await intake.broker.stop();
	}
});

test("a signed body meeting a holder of its paymentId taken unverified has it verified at once: a forgery is removed and the body stored (201), a signed other body kept (409)", async () => {
	const intake = await startIntake(false);
	try {
		const victim = newWallet();
		const real = signedIntent(victim, route);
		const forgery = forgedIntent(real, route);
		const sender = newWallet();
		const first = signedIntent(sender, route);
		const second = signedIntent(sender, route, { paymentId: first.paymentId, amount: "2" });
		const taken = await intake.submitMany([forgery, first]);
		expect(taken).toMatchObject([{ status: 202 }, { status: 202 }]);

		intake.broker.createService(verifierService(intake.config));
		await intake.broker.waitForServices("verifier");
		const answers = await intake.submitMany([real, second]);
		expect(answers[0]).toMatchObject({ status: 201, view: { paymentId: real.paymentId, amount: real.amount, receiverStatus: "VERIFIED" } });
		await expect(intake.broker.call("mempool.view", { id: viewOf(taken[0]).id })).rejects.toMatchObject({ type: "NOT_FOUND" });
		expect(answers[1]).toMatchObject({ refused: { type: "IDEMPOTENCY_CONFLICT", data: { paymentId: first.paymentId } } });
		expect(await intake.broker.call("mempool.view", { id: viewOf(taken[1]).id })).toMatchObject({ amount: first.amount, receiverStatus: "VERIFIED" });
	} finally {
		await intake.broker.stop();
	}
});

test("when storing again after verifying a holder fails, that submission keeps its 503 and the others of its batch their answers", async () => {
	const settings = config();
	let stores = 0;
	const secondStoreFails: Middleware = {
		localAction: (next: ActionHandler, action: ActionSchema) => (ctx: Context) => {
			if (action.name === "mempool.receiveMany" && ++stores === 3) throw new Error("the store went away");
			return next.call(ctx.service as Service, ctx);
		}
	};
	const broker = new ServiceBroker({ logger: false, middlewares: [secondStoreFails] });
	standIns(broker);
	broker.createService(mempoolService(settings));
	broker.createService(receiverService(settings));
	await broker.start();
	try {
		let call = 0;
		const submitMany = (requests: object[]) => broker.call<SubmissionAnswer[], object>("receiver.submitMany", { submissions: requests.map(request => ({ request, call: `http-${++call}` })) });
		const victim = newWallet();
		const real = signedIntent(victim, route);
		const forgery = forgedIntent(real, route);
		expect(await submitMany([forgery])).toMatchObject([{ status: 202 }]);
		broker.createService(verifierService(settings));
		await broker.waitForServices("verifier");
		const bystander = signedIntent(newWallet(), route);
		const answers = await submitMany([real, bystander]);
		expect(answers).toMatchObject([{ refused: { type: "NOT_READY", data: { paymentId: real.paymentId } } }, { status: 201, view: { paymentId: bystander.paymentId } }]);
		// Its retry is stored: the forgery is gone.
		expect(await submitMany([real])).toMatchObject([{ status: 201, view: { paymentId: real.paymentId, amount: real.amount } }]);
	} finally {
		await broker.stop();
	}
});

test("with several verifiers, a batch is split by the Shard strategy: each sender always meets the same verifier, and each verifier gets one call per batch", async () => {
	const namespace = `shard-${process.pid}-${Date.now()}`;
	const seen = new Map<string, Set<string>>();
	const verifierCalls: string[] = [];
	const verifierNode = (nodeID: string) => {
		// What each verifier node was asked, by sender.
		const asked: Middleware = {
			localAction: (next: ActionHandler, action: ActionSchema) => (ctx: Context<{ requests?: Submission["request"][] }>) => {
				if (action.name === "verifier.verifyMany") {
					verifierCalls.push(nodeID);
					for (const request of ctx.params.requests ?? []) seen.set(request.senderWallet, (seen.get(request.senderWallet) ?? new Set()).add(nodeID));
				}
				return next.call(ctx.service as Service, ctx);
			}
		};
		const broker = new ServiceBroker({ nodeID, namespace, transporter: "Fake", logger: false, middlewares: [asked] });
		standIns(broker);
		broker.createService(verifierService(config()));
		return broker;
	};
	const intakeNode = new ServiceBroker({ nodeID: "intake", namespace, transporter: "Fake", logger: false });
	const settings = config();
	intakeNode.createService({ name: "epochs", actions: { current: () => ({ epoch: 7 }) } });
	intakeNode.createService(mempoolService(settings));
	intakeNode.createService(receiverService(settings));
	const verifiers = [verifierNode("verifier-a"), verifierNode("verifier-b"), verifierNode("verifier-c")];
	try {
		await Promise.all([intakeNode, ...verifiers].map(broker => broker.start()));
		await intakeNode.waitForServices(["verifier", "mempool", "epochs"]);
		// Wait until the intake knows all three verifier nodes.
		for (let i = 0; i < 100 && (intakeNode.registry.getActionEndpoints("verifier.verifyMany")?.count() ?? 0) < 3; i++) await new Promise(resolve => setTimeout(resolve, 20));
		const wallets = Array.from({ length: 12 }, () => newWallet());
		for (let round = 0; round < 3; round++) {
			verifierCalls.length = 0;
			const answers = await intakeNode.call<SubmissionAnswer[], object>("receiver.submitMany", { submissions: wallets.map((wallet, i) => ({ request: signedIntent(wallet, route), call: `r${round}-${i}` })) });
			expect(answers.every(answer => "status" in answer && answer.status === 201)).toBe(true);
			expect(new Set(verifierCalls).size).toBe(verifierCalls.length);
		}
		expect([...seen.values()].every(nodes => nodes.size === 1)).toBe(true);
		expect(new Set([...seen.values()].map(nodes => [...nodes][0])).size).toBeGreaterThan(1);
	} finally {
		await Promise.all([intakeNode, ...verifiers].map(broker => broker.stop()));
	}
});

test("a write that fails for one submission of a batch is that submission's answer: the others, stored in an earlier commit group, are answered 201", async () => {
	const intake = await startIntake();
	try {
		// A full disk for one write: the record of a nonce reused inside the batch, which the mempool
		// stores after the batch's first inserts, in a later commit group.
		const intents = (intake.broker.getLocalService("mempool") as unknown as { intents: Collection<IntentRecord> }).intents;
		const insert = intents.insert.bind(intents);
		intents.insert = (doc, event) => (doc.rejectionReason === "NONCE_REUSED" ? Promise.reject(Object.assign(new Error("database or disk is full"), { code: "SQLITE_FULL" })) : insert(doc, event));
		const others = Array.from({ length: 4 }, () => signedIntent(newWallet(), route));
		const wallet = newWallet();
		const holder = signedIntent(wallet, route, { senderAuthorizationNonce: "batch_nonce_0123456789ab" });
		const reuse = signedIntent(wallet, route, { senderAuthorizationNonce: "batch_nonce_0123456789ab" });
		const answers = await intake.submitMany([...others, holder, reuse]);
		expect(answers.map(answer => ("status" in answer ? answer.status : answer.refused.type))).toEqual([201, 201, 201, 201, 201, "INTERNAL_ERROR"]);
		expect(answers[5]).toEqual({ refused: { type: "INTERNAL_ERROR", message: "Internal error" } });
		for (const [i, request] of [...others, holder].entries()) expect(await intake.broker.call("mempool.view", { id: viewOf(answers[i]).id })).toMatchObject({ paymentId: request.paymentId, receiverStatus: "VERIFIED" });
	} finally {
		await intake.broker.stop();
	}
});
