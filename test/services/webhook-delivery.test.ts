/**
 * The webhook-delivery worker beside the real intents' owner (mempool) and subscriptions' owner
 * (webhooks), with the TIN operations' owner absent (still starting, or down): a small stand-in
 * for it, which a test removes. Delivery goes on for the intents' stream, and no pass calls an
 * owner that is not there (the broker would log a warning for every such call).
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { ServiceBroker, type ActionHandler, type ActionSchema, type Context, type Middleware, type Service } from "moleculer";
import { waitFor } from "../../devkit/process";
import { loadConfig } from "../../lib/config";
import { requestDigest } from "../../lib/digest";
import { mempoolService } from "../../services/mempool.service";
import { webhookDeliveryService } from "../../services/webhook-delivery.service";
import { webhooksService } from "../../services/webhooks.service";
import { newRoute, newWallet, signedIntent } from "../helpers/fixtures";
import { tempDir } from "../helpers/node";

/** The heads each delivery pass leases with (webhooks.claim). */
function claimRecorder(heads: object[]): Middleware {
	return {
		localAction: (next: ActionHandler, action: ActionSchema) => (ctx: Context<{ heads?: object }>) => {
			if (action.name === "webhooks.claim" && ctx.params.heads) heads.push(ctx.params.heads);
			return next.call(ctx.service as Service, ctx);
		}
	};
}

/** A broker with the owners up and the worker created once they are (its first pass then finds them). */
async function startWorker(withTinOwner: boolean) {
	const heads: object[] = [];
	const warnings: string[] = [];
	const consoleWarn = jest.spyOn(console, "warn").mockImplementation((...args: unknown[]) => void warnings.push(args.join(" ")));
	const broker = new ServiceBroker({ logger: { type: "Console", options: { level: "warn" } }, middlewares: [claimRecorder(heads)] });
	const config = loadConfig({ DATA_DIR: tempDir(), SWEEP_INTERVAL_MS: "20", WEBHOOK_ALLOW_PRIVATE: "true" });
	broker.createService(mempoolService(config));
	broker.createService(webhooksService(config));
	const tin = withTinOwner ? broker.createService({ name: "tin", actions: { latestEvent: () => null, events: () => [] } }) : null;
	await broker.start();
	broker.createService(webhookDeliveryService(config));
	await broker.waitForServices(["webhook-delivery"]);
	const stop = async () => {
		await broker.stop();
		consoleWarn.mockRestore();
	};
	return { broker, tin, heads, warnings, stop };
}

test("a pass leases with the heads of the owners that are up, and calls none that is not", async () => {
	const worker = await startWorker(false);
	try {
		await waitFor(() => worker.heads.length >= 3, 5000, "three delivery passes");
		for (const head of worker.heads) expect(head).toEqual({ intents: 0 });
		expect(worker.warnings.filter(line => line.includes("tin."))).toEqual([]);
	} finally {
		await worker.stop();
	}
});

test("with the TIN owner gone, a subscription to both streams still gets its intent events, and nothing calls the TIN owner", async () => {
	const worker = await startWorker(true);
	const received: string[] = [];
	const receiver = http.createServer((req, res) => {
		let body = "";
		req.on("data", chunk => (body += chunk));
		req.on("end", () => {
			received.push(body);
			res.writeHead(204).end();
		});
	});
	await new Promise<void>(resolve => receiver.listen(0, "127.0.0.1", resolve));
	try {
		const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
		// The TIN stream first: its owner's absence must not hold the intents' stream back.
		await worker.broker.call("webhooks.create", { url, eventTypes: ["tin_operation.status_changed", "intent.status_changed"] });
		await worker.broker.destroyService(worker.tin!);
		worker.warnings.length = 0;

		const request = signedIntent(newWallet(), newRoute());
		await worker.broker.call("mempool.receive", { request, epoch: 1, requestDigest: requestDigest(request), verdict: { ok: true, verifiedBy: "verifier@test" } });
		await waitFor(() => received.length > 0, 5000, "the intent's webhook");
		expect(JSON.parse(received[0])).toMatchObject({ type: "intent.status_changed", data: { state: "VERIFIED", view: { paymentId: request.paymentId } } });
		// A few more passes: none of them calls the owner that left.
		const passes = worker.heads.length;
		await waitFor(() => worker.heads.length >= passes + 3, 5000, "three more delivery passes");
		expect(worker.warnings.filter(line => line.includes("tin."))).toEqual([]);
	} finally {
		await new Promise(resolve => receiver.close(resolve));
		await worker.stop();
	}
});
