/**
 * The webhook-delivery worker in a broker with the intents' owner and the subscriptions' owner,
 * but without the TIN operations' owner (still starting, or down): its passes go on for the
 * intents' stream, and it does not call an owner that is not there (the broker would log a
 * warning on every pass).
 */
import { ServiceBroker, type ActionHandler, type ActionSchema, type Context, type Middleware, type Service } from "moleculer";
import { waitFor } from "../../devkit/process";
import { loadConfig } from "../../lib/config";
import { mempoolService } from "../../services/mempool.service";
import { webhookDeliveryService } from "../../services/webhook-delivery.service";
import { webhooksService } from "../../services/webhooks.service";
import { tempDir } from "../helpers/node";

test("a pass leases with the heads of the owners that are up, and calls none that is not", async () => {
	const heads: object[] = [];
	const recorder: Middleware = {
		localAction: (next: ActionHandler, action: ActionSchema) => (ctx: Context<{ heads?: object }>) => {
			if (action.name === "webhooks.claim" && ctx.params.heads) heads.push(ctx.params.heads);
			return next.call(ctx.service as Service, ctx);
		}
	};
	const warnings: string[] = [];
	const consoleWarn = jest.spyOn(console, "warn").mockImplementation((...args: unknown[]) => void warnings.push(args.join(" ")));
	const broker = new ServiceBroker({ logger: { type: "Console", options: { level: "warn" } }, middlewares: [recorder] });
	const config = loadConfig({ DATA_DIR: tempDir(), SWEEP_INTERVAL_MS: "20" });
	broker.createService(mempoolService(config));
	broker.createService(webhooksService(config));
	broker.createService(webhookDeliveryService(config));
	await broker.start();
	try {
		await waitFor(() => heads.length >= 3, 5000, "three delivery passes");
		for (const head of heads) expect(head).toEqual({ intents: 0 });
		expect(warnings.filter(line => line.includes("is not registered"))).toEqual([]);
	} finally {
		await broker.stop();
		consoleWarn.mockRestore();
	}
});
