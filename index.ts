/**
 * Entry point of `npm start`: runs the services SERVICES names (all of them by default) in one
 * broker. The broker stops gracefully on SIGTERM/SIGINT and the process exits 0.
 */
import { ConfigError, loadConfig } from "./lib/config";
import { createNode } from "./services";

async function main(): Promise<void> {
	const config = loadConfig();
	const broker = createNode(config);
	await broker.start();
	const api = broker.getLocalService("api") as { server?: { address(): { port: number } | string | null } } | undefined;
	const address = api?.server?.address();
	if (address && typeof address === "object") broker.logger.info(`Settlement Coordination Service listening on port ${address.port} (data in ${config.dataDir}).`);
}

main().catch(err => {
	// A refusal to start is a message for the operator, not a stack trace.
	const message = err instanceof ConfigError || err instanceof Error ? err.message : String(err);
	process.stderr.write(`Settlement Coordination Service could not start: ${message}\n`);
	process.exit(1);
});
