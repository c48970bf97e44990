/**
 * `npm run cranker [-- --roles settlement,verifier,submitter]`: the Cranker worker.
 * Exit codes: 0 after a clean stop (SIGTERM/SIGINT), 2 for a configuration it cannot start with, 1
 * when its settlement journal is unreadable, or held or taken by another process.
 */
import fs from "node:fs";
import path from "node:path";
import { CrankerConfigError, USAGE, loadCrankerConfig, parseCli } from "./config";
import { createLogger } from "./log";
import { startMetricsServer } from "./metrics";
import { Cranker } from "./worker";

/** The package's version, from the package.json beside dist/ (or beside the sources under ts-node). */
function version(): string {
	for (const dir of [path.resolve(__dirname, "../.."), path.resolve(__dirname, "..")]) {
		const file = path.join(dir, "package.json");
		if (fs.existsSync(file)) return (JSON.parse(fs.readFileSync(file, "utf8")) as { version: string }).version;
	}
	return "unknown";
}

async function main(): Promise<void> {
	let config;
	try {
		const cli = parseCli(process.argv.slice(2));
		if (cli.help) return void process.stdout.write(USAGE);
		if (cli.version) return void process.stdout.write(`${version()}\n`);
		config = loadCrankerConfig();
	} catch (err) {
		if (!(err instanceof CrankerConfigError)) throw err;
		process.stderr.write(`cranker: ${err.message}\n`);
		process.exit(2);
	}
	const log = createLogger({ service: "cranker" });
	let stopping = false;
	// Another process took the journal: stop, and say so by the exit code.
	const cranker = await Cranker.create(config, log, () => stop("settlement journal lost", 1));
	const metrics = config.metricsPort === null ? null : await startMetricsServer(cranker.metrics, config.metricsHost, config.metricsPort, () => cranker.isOnline);
	if (metrics) log.info("metrics and health served", { host: config.metricsHost, port: metrics.port, paths: ["/metrics", "/health"] });
	cranker.start();
	function stop(reason: string, exitCode = 0) {
		if (stopping) return;
		stopping = true;
		process.stdout.write(JSON.stringify({ time: new Date().toISOString(), level: "info", message: `${reason}: finishing the work in hand` }) + "\n");
		cranker
			.stop()
			.then(() => metrics?.close())
			.then(
				() => process.exit(exitCode),
				// A stop that failed (the journal could not be closed, say) still ends the process, and says why.
				(err: Error) => {
					process.stderr.write(`cranker: stopping failed: ${err.message}\n`);
					process.exit(exitCode || 1);
				}
			);
	}
	process.on("SIGTERM", () => stop("SIGTERM"));
	process.on("SIGINT", () => stop("SIGINT"));
}

main().catch(err => {
	process.stderr.write(`cranker: ${(err as Error).message}\n`);
	process.exit(1);
});
