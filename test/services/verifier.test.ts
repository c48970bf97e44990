/**
 * The verifier alone, with a stand-in for the one thing it asks another service (tin: a TIN's
 * route). The equation on worker threads (VERIFY_THREADS) answers as on the event loop, and each
 * verdict carries the request's transactionCommitment, computed once.
 */
import { ServiceBroker, type Context } from "moleculer";
import { buildPaymentMessage } from "../../lib/canonical";
import { loadConfig } from "../../lib/config";
import type { CreateIntentRequest } from "../../lib/intents";
import type { ActiveRoute } from "../../lib/registry";
import { verifierMetrics } from "../../services/metrics";
import { verifierService, type VerifierAnswer } from "../../services/verifier.service";
import { newRoute, newWallet, signedIntent } from "../helpers/fixtures";

const route = newRoute();
let routeVersion = route.routeVersion;
let resolves = 0;
/** TINs whose route the stand-in cannot read (its store down, say). */
const unreadable = new Set<string>();
/** Routes of TINs created since, which the stand-in answers besides `route`'s. */
const createdRoutes = new Map<string, ActiveRoute>();
/** Run once by the next read of `route`, after it read the route and before it answers (a change landing meanwhile). */
let duringNextRead: (() => void | Promise<void>) | null = null;

async function startVerifier(threads: string) {
	const broker = new ServiceBroker({ logger: false });
	broker.createService({
		name: "tin",
		actions: {
			resolve: async (ctx: Context<{ tin: string }>): Promise<ActiveRoute | null> => {
				resolves++;
				if (unreadable.has(ctx.params.tin)) throw new Error("the registry cannot be read");
				if (ctx.params.tin === route.tin) {
					const read = { tin: route.tin, routeCommitment: route.routeCommitment, routeVersion, policyCommitment: route.policyCommitment };
					const during = duringNextRead;
					duringNextRead = null;
					await during?.();
					return read;
				}
				return createdRoutes.get(ctx.params.tin) ?? null;
			}
		}
	});
	broker.createService(verifierService(loadConfig({ VERIFY_THREADS: threads })));
	await broker.start();
	return { broker, verify: (request: CreateIntentRequest) => broker.call<VerifierAnswer, object>("verifier.verify", { request }) };
}

test("VERIFY_THREADS=2 and 0 give the same verdicts, each with the request's transactionCommitment", async () => {
	const [pooled, inline] = await Promise.all([startVerifier("2"), startVerifier("0")]);
	try {
		const wallet = newWallet();
		const good = signedIntent(wallet, route);
		const cases = [
			good,
			{ ...good, senderAuthorizationSignature: newWallet().sign(good.senderAuthorizationMessage) },
			{ ...good, amount: "7" },
			signedIntent(wallet, newRoute()),
			signedIntent(wallet, route, { senderAuthorizationExpiresAt: new Date(Date.now() - 1000).toISOString() })
		];
		const answers = await Promise.all(cases.map(pooled.verify));
		expect(answers.map(answer => (answer.ok ? "OK" : answer.reason))).toEqual(["OK", "INVALID_SIGNATURE", "INVALID_MESSAGE", "UNKNOWN_TIN", "EXPIRED"]);
		expect(await Promise.all(cases.map(inline.verify))).toEqual(answers.map(answer => ({ ...answer, verifiedBy: expect.stringMatching(/^verifier@/) })));
		expect(answers.map(answer => answer.transactionCommitment)).toEqual(cases.map(request => buildPaymentMessage(request).transactionCommitment));
	} finally {
		await Promise.all([pooled.broker.stop(), inline.broker.stop()]);
	}
});

test("a batch's request that cannot be decided now is answered null (recorded RECEIVED for the sweep), the others keep their verdicts, and a forgery is refused all the same (a review)", async () => {
	const verifier = await startVerifier("1");
	const other = newRoute();
	unreadable.add(other.tin);
	try {
		const wallet = newWallet();
		const unsigned = signedIntent(wallet, other);
		const forged = { ...unsigned, senderAuthorizationSignature: newWallet().sign(unsigned.senderAuthorizationMessage) };
		const requests = [signedIntent(wallet, route), signedIntent(wallet, other), { ...signedIntent(wallet, route), amount: "7" }, forged];
		const answers = await verifier.broker.call<(VerifierAnswer | null)[], object>("verifier.verifyMany", { requests });
		// A forgery is refused whatever the registry: its route is read only once the signature holds.
		expect(answers.map(answer => (answer === null ? null : answer.ok ? "OK" : answer.reason))).toEqual(["OK", null, "INVALID_MESSAGE", "INVALID_SIGNATURE"]);
		expect(await verifier.verify(forged)).toMatchObject({ ok: false, reason: "INVALID_SIGNATURE" });
	} finally {
		unreadable.clear();
		await verifier.broker.stop();
	}
});

test("routes are cached, and a registry.routeChanged event drops the TIN's entry", async () => {
	const verifier = await startVerifier("1");
	try {
		const wallet = newWallet();
		resolves = 0;
		expect((await verifier.verify(signedIntent(wallet, route))).ok).toBe(true);
		expect((await verifier.verify(signedIntent(wallet, route))).ok).toBe(true);
		expect(resolves).toBe(1);
		routeVersion++;
		verifier.broker.broadcastLocal("registry.routeChanged", { tin: route.tin });
		expect(await verifier.verify(signedIntent(wallet, route))).toMatchObject({ ok: false, reason: "ROUTE_MISMATCH" });
		expect(resolves).toBe(2);
	} finally {
		routeVersion = route.routeVersion;
		await verifier.broker.stop();
	}
});

/** Has the next read of `route` answer the route it read, though it was replaced and announced meanwhile, with the changes of `others`. */
function replacedDuringNextRead(broker: ServiceBroker, others: string[] = []) {
	duringNextRead = async () => {
		routeVersion++;
		for (const tin of [route.tin, ...others]) broker.broadcastLocal("registry.routeChanged", { tin });
		// Every one handled before the read answers.
		await new Promise(resolve => setTimeout(resolve, 50));
	};
}

test("a route change announced while the verifier's read of the route was out is read again, not hidden by that read for the cache's life (a review's race)", async () => {
	const verifier = await startVerifier("1");
	try {
		const wallet = newWallet();
		resolves = 0;
		replacedDuringNextRead(verifier.broker);
		expect(await verifier.verify(signedIntent(wallet, route))).toMatchObject({ ok: false, reason: "ROUTE_MISMATCH" });
		expect(await verifier.verify(signedIntent(wallet, route))).toMatchObject({ ok: false, reason: "ROUTE_MISMATCH" });
		expect(await verifier.verify(signedIntent(wallet, { ...route, routeVersion }))).toMatchObject({ ok: true });
		expect(resolves).toBe(2);

		// A change of another TIN during the read costs this one nothing; a change during the second read leaves it uncached.
		const other = newRoute();
		verifier.broker.broadcastLocal("registry.routeChanged", { tin: route.tin });
		resolves = 0;
		duringNextRead = () => verifier.broker.broadcastLocal("registry.routeChanged", { tin: other.tin });
		expect(await verifier.verify(signedIntent(wallet, { ...route, routeVersion }))).toMatchObject({ ok: true });
		expect(resolves).toBe(1);
		verifier.broker.broadcastLocal("registry.routeChanged", { tin: route.tin });
		resolves = 0;
		const changeTwice = () => verifier.broker.broadcastLocal("registry.routeChanged", { tin: route.tin });
		duringNextRead = () => ((duringNextRead = changeTwice), changeTwice());
		expect(await verifier.verify(signedIntent(wallet, { ...route, routeVersion }))).toMatchObject({ ok: true });
		expect(resolves).toBe(2);
		expect(await verifier.verify(signedIntent(wallet, { ...route, routeVersion }))).toMatchObject({ ok: true });
		expect(resolves).toBe(3);
	} finally {
		routeVersion = route.routeVersion;
		duringNextRead = null;
		await verifier.broker.stop();
	}
});

test("a route read overtaken by its TIN's change is read again also when the changes heard are forgotten meanwhile (their bound reached)", async () => {
	const verifier = await startVerifier("1");
	try {
		resolves = 0;
		// With changes of 10,000 other TINs: the changes heard so far are forgotten, this TIN's too.
		replacedDuringNextRead(verifier.broker, Array.from({ length: 10_000 }, (_, i) => `7${String(i).padStart(9, "0")}`));
		expect(await verifier.verify(signedIntent(newWallet(), route))).toMatchObject({ ok: false, reason: "ROUTE_MISMATCH" });
		expect(resolves).toBe(2);
	} finally {
		routeVersion = route.routeVersion;
		duringNextRead = null;
		await verifier.broker.stop();
	}
});

test("a payment signed for a route newer than the one cached, or for a TIN cached as none, reads the route again: one that went live an instant ago is not refused for good (a review)", async () => {
	const verifier = await startVerifier("1");
	const created = newRoute();
	try {
		const wallet = newWallet();
		resolves = 0;
		expect((await verifier.verify(signedIntent(wallet, route))).ok).toBe(true);
		expect(await verifier.verify(signedIntent(wallet, created))).toMatchObject({ ok: false, reason: "UNKNOWN_TIN" });
		// Both change before the verifier hears of it (the event on its way, or a read begun before it came back after it).
		routeVersion++;
		createdRoutes.set(created.tin, created);
		expect(await verifier.verify(signedIntent(wallet, { ...route, routeVersion }))).toMatchObject({ ok: true });
		expect(await verifier.verify(signedIntent(wallet, created))).toMatchObject({ ok: true });
		expect(resolves).toBe(4);
		// A payment for the version cached reads nothing.
		expect(await verifier.verify(signedIntent(wallet, { ...route, routeVersion }))).toMatchObject({ ok: true });
		expect(resolves).toBe(4);
	} finally {
		routeVersion = route.routeVersion;
		createdRoutes.clear();
		await verifier.broker.stop();
	}
});

test("bodies whose signatures do not verify, naming new TINs, do not grow the route cache without bound", async () => {
	const verifier = await startVerifier("0");
	try {
		const forged = { ...signedIntent(newWallet(), route), senderAuthorizationSignature: newWallet().sign("not this message") };
		for (let batch = 0; batch < 24; batch++)
			await Promise.all(Array.from({ length: 500 }, (_, i) => verifier.verify({ ...forged, recipientTin: String(batch * 500 + i).padStart(10, "9") })));
		const cache = (verifier.broker.getLocalService("verifier") as unknown as { routeCache: Map<string, unknown> }).routeCache;
		expect(cache.size).toBeLessThanOrEqual(10_000);
	} finally {
		await verifier.broker.stop();
	}
});

test("a verify thread that fails mid-request: the verdicts stand, and the fallback is counted and logged once", async () => {
	const verifier = await startVerifier("1");
	const service = verifier.broker.getLocalService("verifier") as unknown as {
		pool: { workers: { emit(event: string, err: Error): boolean; postMessage(message: unknown): void }[]; sent: { jobs: unknown[] }[][] };
		logger: { warn(line: string): void };
	};
	const warn = jest.spyOn(service.logger, "warn");
	try {
		const wallet = newWallet();
		const requests = Array.from({ length: 40 }, (_, i) => (i % 2 ? signedIntent(wallet, route) : { ...signedIntent(wallet, route), amount: "7" }));
		const withForgery = [...requests, { ...requests[1], senderAuthorizationSignature: newWallet().sign(requests[1].senderAuthorizationMessage) }];
		// As soon as signatures are out to the thread, it fails (as a crash tells it) with them: before
		// its answer can come back, which a busy machine let happen before a polling loop looked.
		const [thread] = service.pool.workers;
		const post = thread.postMessage.bind(thread);
		let unanswered = 0;
		thread.postMessage = message => {
			post(message);
			if (unanswered) return;
			unanswered = service.pool.sent[0].reduce((jobs, sent) => jobs + sent.jobs.length, 0);
			queueMicrotask(() => thread.emit("error", new Error("a verify thread that crashed")));
		};
		const answers = Promise.all(withForgery.map(verifier.verify));
		expect((await answers).map(answer => (answer.ok ? "OK" : answer.reason))).toEqual(withForgery.map((_, i) => (i === 40 ? "INVALID_SIGNATURE" : i % 2 ? "OK" : "INVALID_MESSAGE")));
		const counted = (await verifierMetrics(verifier.broker).fallbacks.get()).values;
		expect(counted.find(value => value.labels.reason === "unmatched_answer")?.value).toBe(0);
		expect(counted.find(value => value.labels.reason === "worker_lost")?.value).toBe(unanswered);
		expect(unanswered).toBeGreaterThan(0);
		expect(warn.mock.calls.filter(([line]) => line.includes("verify worker thread was lost"))).toHaveLength(1);
		// The new thread answers.
		expect((await verifier.verify(signedIntent(wallet, route))).ok).toBe(true);
	} finally {
		await verifier.broker.stop();
	}
});
