/**
 * POST /intents counted in instructions, not timed: the service and the lean ideal each run under
 * valgrind's callgrind, take WARMUP intents at concurrency 32, then COUNT more, counted apart.
 * Instructions per intent, over every thread of the process, do not move with the machine's
 * speed or with what else runs on it (two runs of the same code differ by a few percent), so this
 * tells the CPU ratio to the lean ideal, and where the difference lies, on a machine too noisy
 * for bench:intents to tell a change of a few percent. What it cannot tell is time: waiting for
 * the disk, and what an instruction costs (cache misses, system calls).
 *
 *   npm run bench:instructions                       # needs valgrind (Debian: apt-get install valgrind)
 *   npm run bench:instructions -- --count 3000 --service-env VERIFY_THREADS=0
 *
 * Options (argv `--name value`, or the environment): COUNT (2000), WARMUP (4000), WALLETS (256),
 * SERVICE_ENV (`NAME=value,...`). Under callgrind a target runs about fifty times slower: a run
 * takes about ten minutes. V8 still compiles hot code well into the counted intents at this
 * warm-up (its compilers are a category of their own below, so the rest reads without them).
 * Results: bench/results/instructions-<timestamp>.json and a Markdown table on stdout.
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { freePort, waitFor } from "../devkit/process";
import { BodyFactory, envPairs, fmt, newRouteSeed, runClosed, startProcess, type Route } from "./load";

const root = path.resolve(__dirname, "..", "..");
const CONCURRENCY = 32;

/** Where an instruction was spent, by the function it was in (callgrind's symbol and object). */
const CATEGORIES: [string, RegExp][] = [
	["ed25519", /^(fe_|ge_|x25519|ossl_ed25519|sc_|slide|table_select|cmov|sha512)/],
	["sha256", /sha256/],
	["V8 compilers", /v8::internal::(compiler|maglev|turboshaft)::|v8::internal::Compiler/],
	["garbage collection", /Scaveng|MarkCompact|Marking|Sweeper|v8::internal::Heap::|heap::base::|Evacuat|RememberedSet|SlotSet/],
	["JSON", /Json/],
	["SQLite", /\[better_sqlite3\.node\]$/],
	["JIT code", /\[\?\?\?\]$/],
	["V8 builtins", /^Builtins_/],
	["libc", /\[libc\.so[^\]]*\]$/]
];
const OTHER = "everything else";

function categoryOf(fn: string): string {
	return CATEGORIES.find(([, pattern]) => pattern.test(fn))?.[0] ?? OTHER;
}

/** Exclusive instructions by category from a callgrind dump (cost lines after `calls=` are a callee's, not the function's). */
function instructionsByCategory(dump: string): Map<string, number> {
	const names = { ob: new Map<string, string>(), fn: new Map<string, string>() };
	// Compressed names: `(id) name` the first time, `(id)` after.
	const named = (map: Map<string, string>, value: string) => {
		const m = /^\((\d+)\)(?: (.*))?$/.exec(value);
		if (!m) return value;
		if (m[2] !== undefined) map.set(m[1], m[2]);
		return map.get(m[1]) ?? value;
	};
	const totals = new Map<string, number>();
	let object = "";
	let fn = "";
	let callee = false;
	// Costs are read as `<line> <Ir>`: callgrind's defaults, which this bench does not change.
	if (!/^positions: line$/m.test(dump) || !/^events: Ir$/m.test(dump)) throw new Error("a callgrind dump with other positions or events than `line` and `Ir`");
	for (const line of dump.split("\n")) {
		const eq = line.indexOf("=");
		const key = eq > 0 ? line.slice(0, eq) : "";
		if (key === "ob" || key === "cob") {
			const name = named(names.ob, line.slice(eq + 1));
			if (key === "ob") object = name.slice(name.lastIndexOf("/") + 1);
		} else if (key === "fn" || key === "cfn") {
			const name = named(names.fn, line.slice(eq + 1));
			if (key === "fn") fn = `${name} [${object}]`;
		} else if (key === "calls") callee = true;
		else if (/^([+-]?\d+|\*) /.test(line)) {
			if (callee) callee = false;
			else {
				const category = categoryOf(fn);
				totals.set(category, (totals.get(category) ?? 0) + Number(line.trim().split(/\s+/)[1] ?? 0));
			}
		}
	}
	return totals;
}

async function count(kind: "service" | "lean ideal", route: Route, seedFile: string, options: { count: number; warmup: number; wallets: number; serviceEnv: Record<string, string> }) {
	const dir = fs.mkdtempSync(path.join(os.tmpdir(), "scs-bench-instructions-"));
	const port = await freePort();
	const url = `http://127.0.0.1:${port}`;
	const dumpFile = path.join(dir, "callgrind.out");
	const wrapper = ["valgrind", "--tool=callgrind", `--callgrind-out-file=${dumpFile}`];
	const target =
		kind === "service"
			? await startProcess(kind, path.join(root, "dist", "index.js"), [], { PORT: String(port), DATA_DIR: path.join(dir, "data"), REGISTRY_SEED_FILE: seedFile, WORKER_API_KEYS: randomBytes(24).toString("hex"), RATE_LIMIT_PER_MIN: "0", LOG_LEVEL: "warn", VERIFY_TIMEOUT_MS: "60000", ...options.serviceEnv }, url, wrapper, 300_000)
			: await startProcess(kind, path.join(root, "bench", "lean-ideal.js"), [String(port), path.join(dir, "data"), seedFile], { LEAN_VERIFY_WORKERS: "1", PROJECT_DIR: root }, url, wrapper, 300_000);
	try {
		const bodies = new BodyFactory(route, options.wallets);
		const phase = (n: number) => runClosed({ url, path: "/intents", expected: 201 }, bodies.take(n), CONCURRENCY);
		// Each dump starts the counts afresh: the first holds the start and the warm-up, the second
		// the measured intents. callgrind_control exits 0 even when it reached nothing, so each
		// dump is awaited as a file, whole once its closing `totals:` line is written.
		const dump = async (part: number) => {
			execFileSync("callgrind_control", ["--dump", String(target.pid)], { stdio: "ignore" });
			const file = `${dumpFile}.${part}`;
			return waitFor(
				() => {
					const text = fs.existsSync(file) ? fs.readFileSync(file, "utf8") : "";
					return /\ntotals: \d+\s*$/.test(text) && text;
				},
				60_000,
				`callgrind's dump ${part}`,
				500
			);
		};
		await phase(options.warmup);
		await dump(1);
		const measured = await phase(options.count);
		const counted = await dump(2);
		const accepted = measured.statuses["201"] ?? 0;
		if (accepted !== options.count) throw new Error(`${kind}: ${accepted} of ${options.count} answered 201 (${JSON.stringify(measured.statuses)})`);
		const byCategory = instructionsByCategory(counted);
		return new Map([...byCategory].map(([category, n]) => [category, n / accepted]));
	} finally {
		await target.stop();
		fs.rmSync(dir, { recursive: true, force: true });
	}
}

async function main(): Promise<void> {
	const { values } = parseArgs({ options: { count: { type: "string" }, warmup: { type: "string" }, wallets: { type: "string" }, "service-env": { type: "string" } } });
	const option = (name: "count" | "warmup" | "wallets", fallback: number) => Number(values[name] ?? process.env[name.toUpperCase()] ?? fallback);
	const options = { count: option("count", 2000), warmup: option("warmup", 4000), wallets: option("wallets", 256), serviceEnv: envPairs(values["service-env"] ?? process.env.SERVICE_ENV ?? "") };
	if (!fs.existsSync(path.join(root, "dist", "index.js"))) throw new Error("dist/index.js does not exist: run npm run build first");
	const { route, seedFile } = newRouteSeed();

	const lean = await count("lean ideal", route, seedFile, options);
	const service = await count("service", route, seedFile, options);
	const total = (m: Map<string, number>) => [...m.values()].reduce((a, b) => a + b, 0);
	const rows = [...CATEGORIES.map(([name]) => name), OTHER].map(category => ({ category, service: service.get(category) ?? 0, lean: lean.get(category) ?? 0 }));
	console.log(`\nInstructions per intent (callgrind, every thread), ${options.count} intents after ${options.warmup}, concurrency ${CONCURRENCY}:\n`);
	console.log("| where | service | lean ideal | service − lean ideal |\n|---|---:|---:|---:|");
	for (const { category, service: s, lean: l } of rows.sort((a, b) => b.service - b.lean - (a.service - a.lean))) console.log(`| ${category} | ${fmt(s)} | ${fmt(l)} | ${fmt(s - l)} |`);
	const [s, l] = [total(service), total(lean)];
	const [sc, lc] = [service.get("V8 compilers") ?? 0, lean.get("V8 compilers") ?? 0];
	console.log(`| **total** | **${fmt(s)}** | **${fmt(l)}** | **${fmt(s - l)}** |\n`);
	console.log(`service ÷ lean ideal: ${fmt(s / l, 2)} in all, ${fmt((s - sc) / (l - lc), 2)} without V8's compilers`);
	fs.mkdirSync(path.join(root, "bench", "results"), { recursive: true });
	const file = path.join(root, "bench", "results", `instructions-${new Date().toISOString().replace(/[:.]/g, "-")}.json`);
	fs.writeFileSync(file, JSON.stringify({ options, service: Object.fromEntries(service), lean: Object.fromEntries(lean) }, null, 2));
	console.log(`results: ${path.relative(root, file)}`);
}

main().catch(err => {
	console.error(err instanceof Error ? err.message : err);
	process.exit(1);
});
