/**
 * `npm run cranker [-- --roles settlement,verifier,submitter]`: the Cranker worker.
 * Exit codes: 0 after a clean stop (SIGTERM/SIGINT), 2 for a configuration it cannot start with.
 */
import { CrankerConfigError, loadCrankerConfig } from "./config";
import { createLogger } from "./log";
import { Cranker } from "./worker";

async function main(): Promise<void> {
	let config;
	try {
		config = loadCrankerConfig();
	} catch (err) {
		if (!(err instanceof CrankerConfigError)) throw err;
		process.stderr.write(`cranker: ${err.message}\n`);
		process.exit(2);
	}
	const cranker = await Cranker.create(config, createLogger({ service: "cranker" }));
	cranker.start();
	let stopping = false;
	const stop = (signal: string) => {
		if (stopping) return;
		stopping = true;
		process.stdout.write(JSON.stringify({ time: new Date().toISOString(), level: "info", message: `${signal}: finishing the work in hand` }) + "\n");
		cranker.stop().then(() => process.exit(0));
	};
	process.on("SIGTERM", () => stop("SIGTERM"));
	process.on("SIGINT", () => stop("SIGINT"));
}

main().catch(err => {
	process.stderr.write(`cranker: ${(err as Error).message}\n`);
	process.exit(1);
});
