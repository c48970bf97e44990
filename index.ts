/**
 * Entry point of `npm start`: runs the services SERVICES names (all of them by default) in one
 * broker. SIGTERM/SIGINT stop it gracefully (stopNode) and the process exits 0.
 */
// First: it tunes the garbage collector before any other module allocates.
import "./lib/gc-tuning";
import path from "node:path";
import { loadConfig, type Config } from "./lib/config";
import { AUTHORITY_KEYPAIR_FILE, WORKER_KEYS_FILE } from "./lib/secrets";
import { createNode, stopNode } from "./services";
import { startHealthServer, watchBus } from "./services/health";

/** The package's version (package.json sits beside dist/). */
function version(): string {
	try {
		return (require(path.join(__dirname, "..", "package.json")) as { version: string }).version;
	} catch {
		return "unknown";
	}
}

/** The one start-up line an operator needs: what runs, where, on which store, and where the secrets are. */
function summary(config: Config, port: number | null, what: "listening" | "health routes"): string {
	const services = config.services ? config.services.join(",") : "all";
	const store = config.store === "sqlite" ? `sqlite in ${config.dataDir}` : "mongodb";
	const keys = config.workerApiKeys.length ? "WORKER_API_KEYS" : path.join(config.dataDir, WORKER_KEYS_FILE);
	const authority = config.nodeAuthorityKeypairPath ?? path.join(config.dataDir, AUTHORITY_KEYPAIR_FILE);
	return `Settlement Coordination Service ${version()} ${what} on port ${port}: services ${services}; store ${store}; worker keys ${keys}; authority keypair ${authority}.`;
}

async function main(): Promise<void> {
	const config = loadConfig();
	const broker = createNode(config, { skipProcessEventRegistration: true });
	const logger = broker.getLogger("scs");
	const shutdown = (signal: string) => {
		logger.info(`${signal} received: stopping gracefully.`);
		stopNode(broker).then(
			() => process.exit(0),
			err => {
				logger.error(`Graceful stop failed: ${(err as Error).message}`);
				process.exit(1);
			}
		);
	};
	process.once("SIGTERM", shutdown);
	process.once("SIGINT", shutdown);
	const gateway = !config.services || config.services.includes("api");
	let healthPort: number | null = null;
	if (!gateway || config.healthPort !== null) {
		// /health/live and /health/ready for the probes (on PORT without a gateway), before the broker
		// starts, so a slow start (an owner opening its store) is live and not yet ready instead of a
		// process the liveness probe restarts.
		const health = await startHealthServer(broker, config.healthPort ?? config.port);
		healthPort = (health.address() as { port: number }).port;
		logger.info(`Health routes on port ${healthPort}; starting ${(config.services ?? ["all"]).join(",")}.`);
	}
	await broker.start();
	watchBus(broker);
	const api = broker.getLocalService("api") as { server?: { address(): { port: number } | string | null } } | undefined;
	const address = api?.server?.address();
	if (address && typeof address === "object") logger.info(summary(config, address.port, "listening"));
	else logger.info(summary(config, healthPort, "health routes"));
}

main().catch(err => {
	// A refusal to start is a message for the operator, not a stack trace.
	const message = err instanceof Error ? err.message : String(err);
	process.stderr.write(`Settlement Coordination Service could not start: ${message}\n`);
	process.exit(1);
});
