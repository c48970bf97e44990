/**
 * End-to-end POST /intents throughput of the distributed layout on this machine: nats-server, an
 * owners process, a gateway process (api, receiver, network) and 1, then 2, verifier processes.
 * The load is bench/intents.bench.ts pointed at the cluster's gateway (BENCH_URL), so both runs
 * use the same generator; the result is each figure and their ratio (2 verifiers / 1 verifier).
 *
 *   npm run bench:cluster                     # COUNT=5000 CONCURRENCY=32 WARMUP=500
 *   COUNT=20000 CONCURRENCY=64 npm run bench:cluster
 *
 * Needs `nats-server` on PATH. Results: bench/results/cluster-<timestamp>.json and a table.
 */
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { sha256Hex } from "../lib/encoding";
import { tinFromSequence } from "../lib/tin";
import { Cluster, natsServerAvailable } from "../devkit/cluster";

const root = path.resolve(__dirname, "..", "..");
const env = (name: string, fallback: number) => Number(process.env[name] ?? fallback);

/** Runs the intents benchmark against `url` and answers what its results file says. */
function runLoad(url: string, seedFile: string, workerApiKey: string): Promise<{ intentsPerSec: number; p50: number; p99: number; notAccepted: number; file: string }> {
	return new Promise((resolve, reject) => {
		const child = spawn(process.execPath, [path.join(root, "dist/bench/intents.bench.js")], {
			env: {
				...process.env,
				BENCH_URL: url,
				BENCH_SEED_FILE: seedFile,
				WORKER_API_KEY: workerApiKey,
				COUNT: String(env("COUNT", 5000)),
				CONCURRENCY: String(env("CONCURRENCY", 32)),
				WARMUP: String(env("WARMUP", 500)),
				VERIFY_SECONDS: "1"
			},
			stdio: ["ignore", "pipe", "inherit"]
		});
		let output = "";
		child.stdout.on("data", chunk => (output += chunk));
		child.on("exit", code => {
			const file = /results: (\S+)/.exec(output)?.[1];
			if (code !== 0 || !file) return reject(new Error(`intents benchmark exited ${code}:\n${output}`));
			const results = JSON.parse(fs.readFileSync(path.resolve(file), "utf8"));
			resolve({ intentsPerSec: results.intentsPerSec, p50: results.latencyMs.p50, p99: results.latencyMs.p99, notAccepted: results.notAccepted, file });
		});
	});
}

async function measure(verifiers: number, seedFile: string) {
	const workerApiKey = randomBytes(24).toString("hex");
	const cluster = new Cluster({ verifiers, seedFile, workerApiKey, root });
	try {
		await cluster.start();
		return await runLoad(cluster.gateway.url, seedFile, workerApiKey);
	} finally {
		await cluster.stop();
	}
}

async function main(): Promise<void> {
	if (!natsServerAvailable) throw new Error("nats-server is not on PATH (Debian: apt-get install nats-server)");
	const seedFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "scs-bench-cluster-")), "seed.json");
	fs.writeFileSync(seedFile, JSON.stringify([{ tin: tinFromSequence(123_456_789), routeCommitment: sha256Hex("bench route"), routeVersion: 1, policyCommitment: sha256Hex("bench policy") }]));

	const one = await measure(1, seedFile);
	const two = await measure(2, seedFile);
	const ratio = two.intentsPerSec / one.intentsPerSec;
	const results = { benchmark: "cluster", at: new Date().toISOString(), count: env("COUNT", 5000), concurrency: env("CONCURRENCY", 32), oneVerifier: one, twoVerifiers: two, ratio, cores: os.availableParallelism(), node: process.version };
	const dir = path.join(root, "bench", "results");
	fs.mkdirSync(dir, { recursive: true });
	const file = path.join(dir, `cluster-${results.at.replace(/[:.]/g, "-")}.json`);
	fs.writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`);
	const fmt = (n: number) => n.toLocaleString("en-US", { maximumFractionDigits: 1 });
	console.log("\n| verifier processes | intents/s | p50 ms | p99 ms | not 201 |\n|---:|---:|---:|---:|---:|");
	console.log(`| 1 | ${fmt(one.intentsPerSec)} | ${fmt(one.p50)} | ${fmt(one.p99)} | ${one.notAccepted} |`);
	console.log(`| 2 | ${fmt(two.intentsPerSec)} | ${fmt(two.p50)} | ${fmt(two.p99)} | ${two.notAccepted} |`);
	console.log(`\nratio 2/1 = ${ratio.toFixed(3)} (${os.availableParallelism()} cores shared by nats-server, 4–5 Node processes and the load generator)\nresults: ${path.relative(process.cwd(), file)}`);
}

main().catch(err => {
	console.error(`bench:cluster failed: ${(err as Error).message}`);
	process.exit(1);
});
