/**
 * Entry point of `npm start`: runs the services SERVICES names (all of them by default) in one
 * broker. SIGTERM/SIGINT stop it gracefully (stopNode) and the process exits 0.
 */
import { loadConfig } from "./lib/config";
import { createNode, stopNode } from "./services";
import { startHealthServer } from "./services/health";

async function main(): Promise<void> {
	const config = loadConfig();
	const broker = createNode(config, { skipProcessEventRegistration: true });
	const shutdown = (signal: string) => {
		broker.logger.info(`${signal} received: stopping gracefully.`);
		stopNode(broker).then(
			() => process.exit(0),
			err => {
				broker.logger.error(`Graceful stop failed: ${(err as Error).message}`);
				process.exit(1);
			}
		);
	};
	process.once("SIGTERM", shutdown);
	process.once("SIGINT", shutdown);
	const gateway = !config.services || config.services.includes("api");
	if (!gateway) {
		// No gateway in this process: /health/live and /health/ready on PORT for the probes, before
		// the broker starts, so a slow start (an owner opening its store) is live and not yet ready
		// instead of a process the liveness probe restarts.
		const health = await startHealthServer(broker, config.port);
		broker.logger.info(`Health routes on port ${(health.address() as { port: number }).port}; services: ${(config.services ?? []).join(",")}.`);
	}
	await broker.start();
	const api = broker.getLocalService("api") as { server?: { address(): { port: number } | string | null } } | undefined;
	const address = api?.server?.address();
	if (address && typeof address === "object") broker.logger.info(`Settlement Coordination Service listening on port ${address.port} (data in ${config.dataDir}).`);
}

main().catch(err => {
	// A refusal to start is a message for the operator, not a stack trace.
	const message = err instanceof Error ? err.message : String(err);
	process.stderr.write(`Settlement Coordination Service could not start: ${message}\n`);
	process.exit(1);
});
