/**
 * The receiver with its real neighbours (the verifier and the mempool on a real SQLite file) and
 * small stand-ins for the owners it only asks one thing (epochs: the current epoch; tin: a route).
 * Verify first, store once: the verdict travels with the request in one call to the mempool.
 */
import { ServiceBroker, type ActionHandler, type ActionSchema, type Context, type Middleware, type Service } from "moleculer";
import { buildPaymentMessage } from "../../lib/canonical";
import { loadConfig } from "../../lib/config";
import type { PublicMempoolIntent } from "../../lib/intents";
import type { ActiveRoute } from "../../lib/registry";
import { mempoolService } from "../../services/mempool.service";
import { receiverService } from "../../services/receiver.service";
import { verifierService } from "../../services/verifier.service";
import { newRoute, newWallet, signedIntent } from "../helpers/fixtures";
import { tempDir } from "../helpers/node";

const route = newRoute();
const activeRoute: ActiveRoute = { tin: route.tin, routeCommitment: route.routeCommitment, routeVersion: route.routeVersion, policyCommitment: route.policyCommitment };

/** The receiver, the mempool, the stand-ins, and the verifier unless `withVerifier` is false. */
async function startIntake(withVerifier = true) {
	const config = loadConfig({ DATA_DIR: tempDir(), SWEEP_INTERVAL_MS: "60000", VERIFY_TIMEOUT_MS: "500", VERIFY_THREADS: "1" });
	const calls: string[] = [];
	// Every action run, by name: the hops of one submission.
	const recordCalls: Middleware = { localAction: (next: ActionHandler, action: ActionSchema) => (ctx: Context) => (calls.push(action.name ?? ""), next.call(ctx.service as Service, ctx)) };
	const broker = new ServiceBroker({ logger: false, middlewares: [recordCalls] });
	broker.createService({ name: "epochs", actions: { current: () => ({ epoch: 7 }) } });
	broker.createService({ name: "tin", actions: { resolve: (ctx: Context<{ tin: string }>) => (ctx.params.tin === route.tin ? activeRoute : null) } });
	broker.createService(mempoolService(config));
	if (withVerifier) broker.createService(verifierService(config));
	broker.createService(receiverService(config));
	await broker.start();
	/** As the gateway calls it: the status and location come back in the call's meta. */
	const submit = async (request: object) => {
		const meta: { $statusCode?: number; $location?: string } = {};
		const view = await broker.call<PublicMempoolIntent, object>("receiver.submit", request, { meta });
		return { view, status: meta.$statusCode, location: meta.$location };
	};
	return { broker, config, submit, calls };
}

describe("with a verifier", () => {
	let intake: Awaited<ReturnType<typeof startIntake>>;
	beforeAll(async () => (intake = await startIntake()));
	afterAll(() => intake.broker.stop());

	test("a signed request: 201 VERIFIED in the current epoch, with one call to the verifier and one to the mempool", async () => {
		const request = signedIntent(newWallet(), route);
		intake.calls.length = 0;
		const { view, status, location } = await intake.submit(request);
		expect(status).toBe(201);
		expect(location).toBe(`/intents/${view.id}`);
		expect(view).toMatchObject({ receiverStatus: "VERIFIED", epoch: 7, transactionCommitment: buildPaymentMessage(request).transactionCommitment });
		// The epoch and the route are cached lookups (a second or so), not hops of each submission.
		expect(intake.calls.filter(action => action !== "epochs.current" && action !== "tin.resolve")).toEqual(["receiver.submit", "verifier.verify", "mempool.receive"]);
	});

	test("a repeat of the same body is 200 with the same record", async () => {
		const request = signedIntent(newWallet(), route);
		const first = await intake.submit(request);
		const again = await intake.submit(request);
		expect([again.status, again.view]).toEqual([200, first.view]);
	});

	test("a forgery is refused before the mempool: nothing is stored and its paymentId stays free", async () => {
		const request = signedIntent(newWallet(), route);
		// The sender's message, signed by someone else.
		const forged = { ...request, senderAuthorizationSignature: newWallet().sign(request.senderAuthorizationMessage) };
		intake.calls.length = 0;
		await expect(intake.submit(forged)).rejects.toMatchObject({ type: "INVALID_SIGNATURE", code: 400 });
		expect(intake.calls).not.toContain("mempool.receive");
		expect((await intake.submit(request)).status).toBe(201);
	});

	test("a refusal that leaves a record (unknown TIN) answers its error and is stored REJECTED", async () => {
		const request = signedIntent(newWallet(), newRoute());
		await expect(intake.submit(request)).rejects.toMatchObject({ type: "UNKNOWN_TIN", data: { paymentId: request.paymentId } });
		const counts = await intake.broker.call<Record<string, number>>("mempool.counts");
		expect(counts.REJECTED).toBeGreaterThanOrEqual(1);
	});
});

test("without a verifier: 202 RECEIVED, then the sweep verifies it once a verifier is there", async () => {
	const intake = await startIntake(false);
	try {
		const request = signedIntent(newWallet(), route);
		const { view, status } = await intake.submit(request);
		expect([status, view.receiverStatus]).toEqual([202, "RECEIVED"]);
		await expect(intake.broker.call("receiver.wake")).rejects.toMatchObject({ type: "VERIFIER_UNAVAILABLE" });
		intake.broker.createService(verifierService(intake.config));
		await intake.broker.waitForServices("verifier");
		expect(await intake.broker.call("receiver.wake")).toEqual({ ok: true, status: { picked: 1, verified: 1, rejected: 0, pending: 0, verifierUnavailable: false } });
		expect((await intake.submit(request)).view).toMatchObject({ id: view.id, receiverStatus: "VERIFIED" });
	} finally {
		await intake.broker.stop();
	}
});
