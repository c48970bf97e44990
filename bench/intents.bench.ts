/**
 * POST /intents, side by side in one run with one generator:
 *   - the service (`node dist/index.js`, SQLite, one process);
 *   - the lean ideal (bench/lean-ideal.js with LEAN_VERIFY_WORKERS=1): the least work a correct,
 *     durable intake must do, as a yardstick;
 *   - raw ed25519 verification on one thread (node:crypto, keys and signatures pre-decoded).
 * Each target runs closed-loop at every concurrency, then paced at half its own maximum rate, in
 * ROUNDS rounds that alternate the targets, so that a machine whose speed drifts during the run
 * (a shared one does, by a tenth or more) weighs on both alike. For each: the median over the
 * rounds of req/s, p50, p99 and the target's CPU per accepted request (from /proc), and the
 * median of each round's ratio of the service to the lean ideal.
 *
 *   npm run bench:intents
 *   npm run bench:intents -- --concurrencies 32 --count 5000
 *   BENCH_URL=http://host:3000 BENCH_SEED_FILE=seed.json npm run bench:intents   # one external target
 *
 * Options (argv `--name value`, `--name=value`, or the environment):
 *   CONCURRENCIES (16,32,64)  closed-loop concurrencies; CONCURRENCY=n runs just one
 *   COUNT (8000)              measured requests per phase
 *   ROUNDS (3)                rounds of every phase, the targets alternating
 *   WARMUP (8000)             requests sent first in each phase, not measured: a fresh service
 *                             process is still compiling its hot code (TurboFan) well past its
 *                             first few thousand requests, and the figures are the steady ones
 *   WALLETS (256)             distinct sender wallets
 *   VERIFY_SECONDS (2)        duration of the raw verification measurement
 *   LEAN (1)                  0 leaves the lean ideal out
 *   LISTENERS (100)           SSE listeners (GET /events, each sent every new VERIFIED intent) for the
 *                             listener pair: the service at concurrency 32 without and with them,
 *                             alternating, and the delay from each state change to its arrival; 0 skips
 *   SERVICE_ENV               settings for the service, `NAME=value,NAME=value` (VERIFY_THREADS=0, say)
 *   BENCH_URL                 an already-started service instead (its pid is unknown: no CPU figure);
 *                             BENCH_SEED_FILE is the registry seed it was started with, BENCH_TIN a TIN of it
 *
 * Results: bench/results/intents-<timestamp>.json and Markdown tables on stdout. Exits 1 when a
 * target cannot start, 2 when more than 1 % of a phase's measured or warm-up requests were not 201.
 */
import { fork } from "node:child_process";
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { freePort } from "../devkit/process";
import { BodyFactory, cpuSeconds, envPairs, fmt, mostlyRefused, newRouteSeed, runClosed, runPaced, startProcess, summarize, verifiesPerSecond, type PhaseResult, type RunningTarget, type Route, type Summary } from "./load";

const OPTIONS = {
	concurrencies: "16,32,64",
	concurrency: "",
	count: "8000",
	rounds: "3",
	warmup: "8000",
	wallets: "256",
	verify_seconds: "2",
	lean: "1",
	listeners: "100",
	service_env: "",
	bench_url: "",
	bench_seed_file: "",
	bench_tin: ""
};
type OptionName = keyof typeof OPTIONS;

/** argv first, then the environment (upper case), then the default. */
function readOptions(): Record<OptionName, string> {
	const { values } = parseArgs({
		args: process.argv.slice(2).map(arg => arg.replace(/^--([^=]*)/, (_, name: string) => `--${name.toLowerCase().replace(/-/g, "_")}`)),
		options: Object.fromEntries(Object.keys(OPTIONS).map(name => [name, { type: "string" }])) as Record<OptionName, { type: "string" }>,
		strict: true
	});
	return Object.fromEntries(Object.entries(OPTIONS).map(([name, fallback]) => [name, (values[name as OptionName] ?? process.env[name.toUpperCase()] ?? fallback).trim()])) as Record<OptionName, string>;
}

function positiveInt(name: string, raw: string): number {
	if (!/^\d+$/.test(raw) || Number(raw) < 1) throw new Error(`${name} must be a positive integer, got "${raw}"`);
	return Number(raw);
}

const root = path.resolve(__dirname, "..", "..");

/** A fresh target with its own data directory, so every phase starts from the same empty store. */
async function startTarget(kind: "service" | "lean", seedFile: string, serviceEnv: Record<string, string>): Promise<RunningTarget> {
	const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), `scs-bench-${kind}-`));
	const port = await freePort();
	const url = `http://127.0.0.1:${port}`;
	// The generator stands for many clients: the per-client limits are off (the paced one may open up to 512 connections in a stall).
	const target =
		kind === "service"
			? await startProcess("service", path.join(root, "dist", "index.js"), [], { PORT: String(port), DATA_DIR: dataDir, REGISTRY_SEED_FILE: seedFile, WORKER_API_KEYS: randomBytes(24).toString("hex"), RATE_LIMIT_PER_MIN: "0", MAX_CONNECTIONS_PER_CLIENT: "0", LOG_LEVEL: "warn", ...serviceEnv }, url)
			: await startProcess("lean ideal", path.join(root, "bench", "lean-ideal.js"), [String(port), dataDir, seedFile], { LEAN_VERIFY_WORKERS: "1", PROJECT_DIR: root }, url);
	const stop = target.stop;
	target.stop = async () => {
		await stop();
		fs.rmSync(dataDir, { recursive: true, force: true });
	};
	return target;
}

interface Measured extends Summary {
	target: string;
	/** The round (from 1) of the phase. */
	round: number;
	/** `c=<n>` closed loop, or `half` (paced at half the target's best closed-loop rate). */
	load: string;
	/** The paced rate, per second. */
	rate?: number;
	/** CPU of the target process per accepted request, in µs; null when its pid is unknown. */
	cpuMicrosPerRequest: number | null;
	statuses: Record<string, number>;
	errorSamples: Record<string, string[]>;
}

async function measure(target: RunningTarget, load: string, round: number, run: () => Promise<PhaseResult>, rate?: number): Promise<Measured> {
	const cpuBefore = target.pid ? cpuSeconds(target.pid) : 0;
	const phase = await run();
	const cpuAfter = target.pid ? cpuSeconds(target.pid) : 0;
	const summary = summarize(phase);
	return {
		target: target.name,
		round,
		load,
		...(rate ? { rate } : {}),
		...summary,
		cpuMicrosPerRequest: target.pid && summary.accepted ? ((cpuAfter - cpuBefore) * 1e6) / summary.accepted : null,
		statuses: phase.statuses,
		errorSamples: phase.errorSamples
	};
}

const median = (values: number[]) => {
	const sorted = values.filter(Number.isFinite).sort((a, b) => a - b);
	if (!sorted.length) return NaN;
	const middle = Math.floor(sorted.length / 2);
	return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
};

/**
 * One line per target and load: the median over the rounds of each figure, and for the service
 * in the closed loop the median of each round's ratios to the lean ideal of the same round (paced
 * rows run at half of each target's own maximum, so their rates do not compare).
 */
function table(rows: Measured[], rawPerSec: number): string[] {
	const lines = ["| target | load | rounds | req/s | p50 ms | p99 ms | CPU µs/req | req/s ÷ lean ideal | CPU ÷ lean ideal | ÷ raw verify | not 201 |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"];
	const keys = [...new Set(rows.map(row => `${row.target}|${row.load}`))];
	for (const key of keys) {
		const group = rows.filter(row => `${row.target}|${row.load}` === key);
		const [target, load] = key.split("|");
		const yardstick = (row: Measured) => (target === "service" && load !== "half" ? rows.find(other => other.target === "lean ideal" && other.load === load && other.round === row.round) : undefined);
		const ratio = (figure: (row: Measured) => number | null) => median(group.map(row => {
			const lean = yardstick(row);
			return lean ? (figure(row) ?? NaN) / (figure(lean) ?? NaN) : NaN;
		}));
		const cpu = median(group.map(row => row.cpuMicrosPerRequest ?? NaN));
		const perSecond = median(group.map(row => row.perSecond));
		const shown = load === "half" ? `paced ${fmt(median(group.map(row => row.rate ?? NaN)))}/s (½ max)` : load;
		const rateRatio = ratio(row => row.perSecond);
		const cpuRatio = ratio(row => row.cpuMicrosPerRequest);
		lines.push(
			`| ${target} | ${shown} | ${group.length} | ${fmt(perSecond)} | ${fmt(median(group.map(row => row.p50)), 1)} | ${fmt(median(group.map(row => row.p99)), 1)} | ${Number.isFinite(cpu) ? fmt(cpu) : "n/a"} | ${Number.isFinite(rateRatio) ? fmt(rateRatio, 2) : ""} | ${Number.isFinite(cpuRatio) ? fmt(cpuRatio, 2) : ""} | ${fmt(perSecond / rawPerSec, 2)} | ${group.reduce((sum, row) => sum + row.notAccepted, 0)} |`
		);
	}
	return lines;
}

/** The concurrency of the listener pair: the issue's reference load. */
const LISTENER_CONCURRENCY = 32;

interface ListenerFigures {
	events: number;
	p50: number;
	p99: number;
	max: number;
	/** The fewest and most bytes one listener received: equal when none missed an event. */
	bytes: { fewest: number; most: number };
	/** CPU the listeners' process spent (µs) over the phase: it shares the cores with the service. */
	cpuMicros: number;
	/** The same per intent of the phase. */
	cpuMicrosPerIntent?: number;
}

/** SSE listeners in a child process (bench/sse-listeners.ts), open before the phase starts. */
async function startListeners(url: string, workerKey: string, count: number): Promise<{ reset(): Promise<void>; stop(): Promise<ListenerFigures> }> {
	const child = fork(path.join(__dirname, "sse-listeners.js"), [url, workerKey, String(count)], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
	/** The child's next answer; a child that exits instead fails the bench rather than hanging it. */
	const answer = <T>(message?: string) =>
		new Promise<T>((resolve, reject) => {
			const exited = (code: number | null) => reject(new Error(`the SSE listeners exited (${code}) ${message ? `instead of answering "${message}"` : "before all were open"}`));
			child.once("exit", exited);
			child.once("message", reply => {
				child.off("exit", exited);
				resolve(reply as T);
			});
			if (message) child.send(message);
		});
	await answer();
	return {
		/** The figures count from here: what the warm-up sent is left out. */
		reset: async () => {
			const { quiet } = await answer<{ quiet: boolean }>("reset");
			if (!quiet) throw new Error("the SSE listeners were still receiving the warm-up's events after 5 s: their figures would mix them in");
		},
		/** Once the phase's events are all in: the figures, and the CPU the listeners spent since the reset. */
		stop: () => answer("stop")
	};
}

async function main(): Promise<number> {
	const options = readOptions();
	const log = (line: string) => process.stderr.write(`${line}\n`);
	const concurrencies = (options.concurrency || options.concurrencies).split(",").map(c => positiveInt("CONCURRENCIES", c.trim()));
	const count = positiveInt("COUNT", options.count);
	const warmup = Number(options.warmup) || 0;
	const rounds = positiveInt("ROUNDS", options.rounds);

	let route: Route;
	let seedFile: string;
	if (options.bench_url) {
		if (!options.bench_seed_file) throw new Error("BENCH_URL needs BENCH_SEED_FILE: the registry seed the service was started with");
		seedFile = options.bench_seed_file;
		const routes = JSON.parse(fs.readFileSync(seedFile, "utf8")) as Route[];
		route = (options.bench_tin ? routes.find(r => r.tin === options.bench_tin) : routes[0]) ?? (() => { throw new Error(`no route for TIN ${options.bench_tin} in ${seedFile}`); })();
	} else {
		if (!fs.existsSync(path.join(root, "dist", "index.js"))) throw new Error("dist/index.js does not exist: run npm run build first");
		({ route, seedFile } = newRouteSeed());
	}
	const bodies = new BodyFactory(route, positiveInt("WALLETS", options.wallets));
	const serviceEnv = envPairs(options.service_env);
	const target = { path: "/intents", expected: 201 };
	// A phase's bodies, warm-up and measured, are signed before its warm-up, so that the target
	// does not idle between the two while the generator signs (the listener pair pauses 300 ms).
	const signed = (): [string[], string[]] => [bodies.take(warmup), bodies.take(count)];
	/** Warm-ups answered other than 201 (over 1 %): their phase measured something else, and the run fails. */
	const spoiled: string[] = [];
	const warmUp = async (label: string, run: Promise<PhaseResult>) => {
		const phase = await run;
		const summary = summarize(phase);
		const { accepted, notAccepted } = summary;
		const [status, samples] = Object.entries(phase.errorSamples)[0] ?? [];
		if (mostlyRefused(summary)) spoiled.push(`${label} (${notAccepted} of ${accepted + notAccepted}${status ? `, e.g. ${status}: ${samples[0]}` : ""})`);
	};

	const rows: Measured[] = [];
	const kinds: ("service" | "lean")[] = options.bench_url ? [] : options.lean === "0" ? ["service"] : ["service", "lean"];
	if (options.bench_url) {
		const external: RunningTarget = { name: "service", url: options.bench_url.replace(/\/+$/, ""), pid: null, stop: async () => {} };
		for (const concurrency of concurrencies) {
			const [warm, measured] = signed();
			await warmUp(`service c=${concurrency}`, runClosed({ ...target, url: external.url }, warm, concurrency));
			log(`external service, concurrency ${concurrency} …`);
			rows.push(await measure(external, `c=${concurrency}`, 1, () => runClosed({ ...target, url: external.url }, measured, concurrency)));
		}
	}
	// Closed loop at each concurrency, the targets alternating so that drift hits both alike.
	for (const concurrency of concurrencies)
		for (let round = 1; round <= rounds; round++)
			for (const kind of kinds) {
				const running = await startTarget(kind, seedFile, serviceEnv);
				try {
					const [warm, measured] = signed();
					await warmUp(`${running.name} c=${concurrency} round ${round}`, runClosed({ ...target, url: running.url }, warm, concurrency));
					log(`${running.name}, concurrency ${concurrency}, round ${round} …`);
					rows.push(await measure(running, `c=${concurrency}`, round, () => runClosed({ ...target, url: running.url }, measured, concurrency)));
				} finally {
					await running.stop();
				}
			}
	// Paced at half of each target's best closed-loop rate (its best concurrency's median): latency and CPU at moderate load.
	const bestRate = (name: string) => Math.max(...concurrencies.map(concurrency => median(rows.filter(row => row.target === name && row.load === `c=${concurrency}`).map(row => row.perSecond))));
	const paced = Object.fromEntries(kinds.map(kind => [kind, Math.max(1, Math.round(bestRate(kind === "service" ? "service" : "lean ideal") / 2))]));
	for (let round = 1; round <= rounds; round++)
		for (const kind of kinds) {
			const rate = paced[kind];
			const running = await startTarget(kind, seedFile, serviceEnv);
			try {
				const [warm, measured] = signed();
				await warmUp(`${running.name} paced round ${round}`, runPaced({ ...target, url: running.url }, warm, rate));
				log(`${running.name}, paced at ${rate}/s, round ${round} …`);
				rows.push(await measure(running, "half", round, () => runPaced({ ...target, url: running.url }, measured, rate), rate));
			} finally {
				await running.stop();
			}
		}

	const listeners = Number(options.listeners) || 0;
	const attached: ListenerFigures[] = [];
	if (listeners && !options.bench_url) {
		// The same settings for both phases: only the listeners differ.
		const workerKey = randomBytes(24).toString("hex");
		const env = { ...serviceEnv, WORKER_API_KEYS: workerKey, EVENT_STREAMS_PER_IP: String(listeners + 10) };
		// Both phases of a pair pause alike after the warm-up and after the measured phase: the
		// listeners wait there for the events still on their way (a quiet spell of 300 ms at least),
		// so that the figures and the CPU of the phase hold its own events, all of them.
		const pause = () => new Promise(resolve => setTimeout(resolve, 300));
		for (let round = 1; round <= rounds; round++)
			for (const withListeners of [false, true]) {
				const running = await startTarget("service", seedFile, env);
				const group = withListeners ? await startListeners(running.url, workerKey, listeners) : null;
				try {
					const [warm, measured] = signed();
					await warmUp(`service ${withListeners ? "with" : "without"} listeners round ${round}`, runClosed({ ...target, url: running.url }, warm, LISTENER_CONCURRENCY));
					await (group ? group.reset() : pause());
					log(`service, concurrency ${LISTENER_CONCURRENCY}, ${withListeners ? `${listeners} SSE listeners` : "no listeners"} (round ${round}) …`);
					let heard: ListenerFigures | undefined;
					const row = await measure(running, withListeners ? `c=${LISTENER_CONCURRENCY} +${listeners} SSE` : `c=${LISTENER_CONCURRENCY} no SSE`, round, async () => {
						const phase = await runClosed({ ...target, url: running.url }, measured, LISTENER_CONCURRENCY);
						if (group) heard = await group.stop();
						else await pause();
						return phase;
					});
					rows.push(row);
					if (heard) attached.push({ ...heard, cpuMicrosPerIntent: heard.cpuMicros / row.accepted });
				} finally {
					await running.stop();
				}
			}
	}

	log("measuring raw ed25519 verification …");
	const verifies = verifiesPerSecond(bodies.samples, positiveInt("VERIFY_SECONDS", options.verify_seconds));
	const rawPerSec = verifies.raw;

	const cpus = os.cpus();
	const machine = `${cpus[0]?.model?.trim() ?? "unknown CPU"} × ${os.availableParallelism()}, ${process.version}, ${os.platform()} ${os.arch()}`;
	const at = new Date().toISOString();
	const first = rows[0];
	const results = {
		benchmark: "intents",
		at,
		machine,
		count,
		warmup,
		serviceEnv,
		spoiledWarmUps: spoiled,
		rawVerifiesPerSec: rawPerSec,
		sseListeners: attached,
		strictVerifiesPerSec: verifies.strict,
		rows,
		// The first row, in the shape bench:cluster reads.
		intentsPerSec: first.perSecond,
		latencyMs: { p50: first.p50, p99: first.p99 },
		notAccepted: first.notAccepted
	};
	const dir = path.join(root, "bench", "results");
	fs.mkdirSync(dir, { recursive: true });
	const file = path.join(dir, `intents-${at.replace(/[:.]/g, "-")}.json`);
	fs.writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`);

	const out = ["", ...table(rows, rawPerSec), "", `ed25519 verify, 1 thread: raw ${fmt(rawPerSec)}/s, strict (SPEC §0 checks, as the service runs them) ${fmt(verifies.strict)}/s: the strict checks cost ${fmt(1e6 / verifies.strict - 1e6 / rawPerSec, 1)} µs per verification`, `machine: ${machine} (the load generator shares the cores)`, `results: ${path.relative(process.cwd(), file) || file}`];
	if (attached.length) {
		const withSse = `c=${LISTENER_CONCURRENCY} +${listeners} SSE`;
		const without = `c=${LISTENER_CONCURRENCY} no SSE`;
		const of = (label: string, figure: (row: Measured) => number) => median(rows.filter(row => row.load === label).map(figure));
		// Each round's with ÷ without, the median of them: the pair of a round runs back to back.
		const ratio = (figure: (row: Measured) => number) =>
			median(rows.filter(row => row.load === withSse).map(row => figure(row) / figure(rows.find(other => other.load === without && other.round === row.round)!)));
		const rate = (row: Measured) => row.perSecond;
		const cpu = (row: Measured) => row.cpuMicrosPerRequest ?? NaN;
		out.splice(
			-2,
			0,
			`${listeners} SSE listeners (GET /events, each sent every new intent): ${fmt(of(withSse, rate))} intents/s against ${fmt(of(without, rate))} without (÷ ${fmt(ratio(rate), 2)}, median of ${attached.length} alternating pairs); service CPU ${fmt(of(withSse, cpu))} against ${fmt(of(without, cpu))} µs per intent (÷ ${fmt(ratio(cpu), 2)}); the listeners' own process ${fmt(median(attached.map(a => a.cpuMicrosPerIntent ?? NaN)))} µs per intent on the same cores`,
			`state change → event received by a listener: p50 ${fmt(median(attached.map(a => a.p50)), 1)} ms, p99 ${fmt(median(attached.map(a => a.p99)), 1)} ms (${fmt(median(attached.map(a => a.events)))} events received per listener and run; ${attached.every(a => a.bytes.fewest === a.bytes.most) ? "every listener received the same bytes" : `LISTENERS DIFFER: ${attached.map(a => `${a.bytes.fewest}–${a.bytes.most}`).join(", ")} bytes`})`
		);
	}
	for (const row of rows) for (const [status, samples] of Object.entries(row.errorSamples)) out.push(`${row.target} ${row.load}: ${row.statuses[status]} × ${status}, e.g. ${samples[0]}`);
	process.stdout.write(`${out.join("\n")}\n`);
	const failing = rows.filter(mostlyRefused);
	if (failing.length) process.stderr.write(`FAIL: more than 1 % of the requests were not 201 in: ${failing.map(row => `${row.target} ${row.load}`).join(", ")}\n`);
	if (spoiled.length) process.stderr.write(`FAIL: more than 1 % of the warm-up requests were not 201 in: ${spoiled.join(", ")}\n`);
	if (failing.length || spoiled.length) return 2;
	return 0;
}

main().then(
	code => process.exit(code),
	err => {
		process.stderr.write(`FAIL: ${err instanceof Error ? err.message : String(err)}\n`);
		process.exit(1);
	}
);
