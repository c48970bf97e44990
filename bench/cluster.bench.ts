/**
 * POST /intents through the distributed layout on this machine: nats-server, an owners process, a
 * gateway process (api, receiver, network) and 1, then 2, verifier processes, with the generator
 * of bench:intents. For each process role it reports the CPU spent per accepted intent (from
 * /proc, over the measured phase only): what the bus and the hops cost, and which role would cap
 * the rate on a machine with a core per process.
 *
 *   npm run bench:cluster                     # COUNT=5000 CONCURRENCY=32 WARMUP=8000
 *   COUNT=20000 CONCURRENCY=64 npm run bench:cluster
 *
 * WARMUP requests go first, unmeasured: fresh processes keep compiling their hot code (TurboFan)
 * for several thousand requests, and the figures asked for are the steady ones.
 *
 * Needs `nats-server` on PATH. Results: bench/results/cluster-<timestamp>.json and a table. Exits 1
 * when the cluster cannot start, 2 when more than 1 % of a phase's requests (measured or warm-up)
 * were not 201.
 */
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Cluster, natsServerAvailable } from "../devkit/cluster";
import { sha256Hex } from "../lib/encoding";
import { tinFromSequence } from "../lib/tin";
import { BodyFactory, cpuSeconds, fmt, mostlyRefused, runClosed, summarize, verifiesPerSecond, type Route } from "./load";

const root = path.resolve(__dirname, "..", "..");
const env = (name: string, fallback: number) => Number(process.env[name] ?? fallback);
const COUNT = env("COUNT", 5000);
const CONCURRENCY = env("CONCURRENCY", 32);
const WARMUP = env("WARMUP", 8000);

interface Run {
	verifiers: number;
	perSecond: number;
	p50: number;
	p99: number;
	notAccepted: number;
	/** Warm-up requests answered other than 201. */
	warmUpNotAccepted: number;
	/** Over 1 % of the measured or the warm-up requests answered other than 201: the run fails. */
	spoiled: boolean;
	/** CPU µs per accepted intent, by role (all verifier processes together). */
	cpuMicros: Record<"gateway" | "owners" | "verifiers" | "nats-server", number>;
}

async function measure(verifiers: number, seedFile: string, bodies: BodyFactory): Promise<Run> {
	// At warn, as bench:intents runs the service: no access line per request.
	const cluster = new Cluster({ verifiers, seedFile, workerApiKey: randomBytes(24).toString("hex"), root, logLevel: "warn" });
	try {
		await cluster.start();
		const target = { url: cluster.gateway.url, path: "/intents", expected: 201 };
		// Signed before the warm-up, so the processes do not idle between it and the measured phase.
		const [warm, measured] = [bodies.take(WARMUP), bodies.take(COUNT)];
		const warmed = summarize(await runClosed(target, warm, CONCURRENCY));
		const roles = { gateway: [cluster.gateway.child.pid!], owners: [cluster.owners.child.pid!], verifiers: cluster.verifiers.map(v => v.child.pid!), "nats-server": [cluster.nats.pid!] };
		const cpu = () => Object.fromEntries(Object.entries(roles).map(([role, pids]) => [role, pids.reduce((sum, pid) => sum + cpuSeconds(pid), 0)]));
		const before = cpu();
		const phase = summarize(await runClosed(target, measured, CONCURRENCY));
		const after = cpu();
		const cpuMicros = Object.fromEntries(Object.keys(roles).map(role => [role, ((after[role] - before[role]) * 1e6) / Math.max(1, phase.accepted)])) as Run["cpuMicros"];
		return { verifiers, perSecond: phase.perSecond, p50: phase.p50, p99: phase.p99, notAccepted: phase.notAccepted, warmUpNotAccepted: warmed.notAccepted, spoiled: mostlyRefused(phase) || mostlyRefused(warmed), cpuMicros };
	} finally {
		await cluster.stop();
	}
}

async function main(): Promise<number> {
	if (!natsServerAvailable) throw new Error("nats-server is not on PATH (Debian: apt-get install nats-server)");
	const route: Route = { tin: tinFromSequence(123_456_789), routeCommitment: sha256Hex("bench route"), routeVersion: 1, policyCommitment: sha256Hex("bench policy") };
	const seedFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "scs-bench-cluster-")), "seed.json");
	fs.writeFileSync(seedFile, JSON.stringify([route]));
	const bodies = new BodyFactory(route, 256);

	const runs = [await measure(1, seedFile, bodies), await measure(2, seedFile, bodies)];
	// The machine's yardstick: µs of one raw ed25519 verification on one thread, in this run.
	const verifyMicros = 1e6 / verifiesPerSecond(bodies.samples, 2).raw;
	const at = new Date().toISOString();
	const machine = `${os.cpus()[0]?.model?.trim() ?? "unknown CPU"} × ${os.availableParallelism()}, ${process.version}`;
	const dir = path.join(root, "bench", "results");
	fs.mkdirSync(dir, { recursive: true });
	const file = path.join(dir, `cluster-${at.replace(/[:.]/g, "-")}.json`);
	fs.writeFileSync(file, `${JSON.stringify({ benchmark: "cluster", at, machine, count: COUNT, warmup: WARMUP, concurrency: CONCURRENCY, verifyMicros, runs }, null, 2)}\n`);

	const total = (run: Run) => Object.values(run.cpuMicros).reduce((sum, micros) => sum + micros, 0);
	/** With a core per process, the busiest process caps the rate: 1 s of its CPU over its µs per intent. */
	const corePerProcess = (run: Run) => 1e6 / Math.max(run.cpuMicros.gateway, run.cpuMicros.owners, run.cpuMicros["nats-server"], run.cpuMicros.verifiers / run.verifiers);
	const lines = [
		"| verifier processes | intents/s | p50 ms | p99 ms | not 201 | CPU µs/intent: gateway | owners | verifiers | nats-server | total | total ÷ one raw verify | a core per process: intents/s |",
		"|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	];
	for (const run of runs)
		lines.push(
			`| ${run.verifiers} | ${fmt(run.perSecond)} | ${fmt(run.p50, 1)} | ${fmt(run.p99, 1)} | ${run.notAccepted} | ${fmt(run.cpuMicros.gateway)} | ${fmt(run.cpuMicros.owners)} | ${fmt(run.cpuMicros.verifiers)} | ${fmt(run.cpuMicros["nats-server"])} | ${fmt(total(run))} | ${fmt(total(run) / verifyMicros, 1)} | ${fmt(corePerProcess(run))} |`
		);
	console.log(
		`\n${lines.join("\n")}\n\nratio 2/1 verifiers = ${(runs[1].perSecond / runs[0].perSecond).toFixed(2)} (${os.availableParallelism()} cores shared by nats-server, ${2 + runs[1].verifiers} Node processes and the load generator)\none raw ed25519 verification on one thread: ${fmt(verifyMicros, 1)} µs in this run (the total in these units compares across machines)\nmachine: ${machine}\nresults: ${path.relative(process.cwd(), file)}`
	);
	// As bench:intents: more than 1 % of a phase's requests, measured or warm-up, not 201 fails the run.
	const spoiled = runs.filter(run => run.spoiled);
	if (!spoiled.length) return 0;
	console.error(`FAIL: more than 1 % of the requests were not 201 with ${spoiled.map(run => `${run.verifiers} verifier process(es) (${run.notAccepted} measured, ${run.warmUpNotAccepted} warm-up)`).join(" and ")}`);
	return 2;
}

main().then(
	code => process.exit(code),
	err => {
		console.error(`bench:cluster failed: ${(err as Error).message}`);
		process.exit(1);
	}
);
