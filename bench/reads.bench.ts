/**
 * The list routes as the store grows: a service is filled with signed intents (and a tenth as
 * many TIN operations) through its own POST routes, and at each size the lists a Cranker and an
 * operator read are timed one request at a time. A list served by an index that ends with its
 * sort key costs O(limit), whatever is stored: the p99 stays flat from the first size to the last.
 * Each row is also timed against a bare node:http process answering the very same bytes
 * (bench/bare-answer.ts): the floor of sending that answer here. Both are read by the same client,
 * which allocates nothing per answer (load.ts runAlternating), one request to each in turn so that
 * both see the same machine, after untimed reads of each and once the fill has settled.
 *
 *   npm run bench:reads                          # 10,000 then 100,000 intents
 *   npm run bench:reads -- --sizes 10000,50000,100000 --reads 500
 *
 * Options (argv `--name value` or the environment): SIZES (10000,100000), READS (1000 timed
 * requests per list and limit), FILL_CONCURRENCY (64).
 * Results: bench/results/reads-<timestamp>.json and a Markdown table on stdout. Exits 1 when the
 * service cannot start or a fill request is refused.
 */
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { freePort } from "../devkit/process";
import { buildTinOperationMessage } from "../lib/canonical";
import { createSigner, generateKeypair } from "../lib/ed25519";
import { sha256Hex } from "../lib/encoding";
import { tinFromSequence } from "../lib/tin";
import { BodyFactory, cpuSeconds, fmt, runAlternating, runClosed, startProcess, summarize, type Route } from "./load";

const root = path.resolve(__dirname, "..", "..");

function options() {
	const { values } = parseArgs({ args: process.argv.slice(2), options: { sizes: { type: "string" }, reads: { type: "string" }, fill_concurrency: { type: "string" } }, strict: true });
	const read = (name: "sizes" | "reads" | "fill_concurrency", fallback: string) => values[name] ?? process.env[name.toUpperCase()] ?? fallback;
	const sizes = read("sizes", "10000,100000").split(",").map(Number);
	if (sizes.some(n => !Number.isInteger(n) || n < 1) || sizes.some((n, i) => i > 0 && n <= sizes[i - 1])) throw new Error("SIZES must be increasing positive integers");
	return { sizes, reads: Number(read("reads", "1000")), fillConcurrency: Number(read("fill_concurrency", "64")) };
}

/** Signed TIN create operations, each by its own owner wallet. */
function tinOperationBodies(count: number): string[] {
	const issuedAt = new Date(Date.now() - 1000).toISOString();
	const expiresAt = new Date(Date.now() + 3_600_000).toISOString();
	return Array.from({ length: count }, () => {
		const owner = generateKeypair();
		const body = {
			operationId: `op_${randomBytes(12).toString("base64url")}`,
			intentType: "create" as const,
			ownerWallet: owner.publicKey,
			routeCommitment: sha256Hex(randomBytes(8)),
			policyCommitment: sha256Hex(randomBytes(8)),
			issuedAt,
			expiresAt
		};
		return JSON.stringify({ ...body, ownerSignature: createSigner(owner)(buildTinOperationMessage(body)) });
	});
}

/** Untimed reads of each row first, so that its code is compiled and its pages cached when timing starts. */
const WARMUP = 100;

/**
 * Waits (30 s at most) until the service spends under a tenth of a core, as it does idle (its
 * sweeps): what a fill leaves running (its last commits, checkpoints) is not a read's cost.
 */
async function quiet(pid: number | null): Promise<void> {
	if (pid === null) return;
	const deadline = Date.now() + 30_000;
	for (let before = cpuSeconds(pid); Date.now() < deadline; ) {
		await new Promise(resolve => setTimeout(resolve, 500));
		const now = cpuSeconds(pid);
		if (now - before < 0.05) return;
		before = now;
	}
}

const LISTS = ["/intent-work", "/intents", "/tin-operations/verification-work", "/tin-operations/fee-work", "/tin-operations/registry-work", "/tin-operations"];
const LIMITS = [50, 500];

async function main(): Promise<void> {
	const { sizes, reads, fillConcurrency } = options();
	const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "scs-bench-reads-"));
	const route: Route = { tin: tinFromSequence(123_456_789), routeCommitment: sha256Hex("bench route"), routeVersion: 1, policyCommitment: sha256Hex("bench policy") };
	const seedFile = path.join(dataDir, "registry-seed.json");
	fs.writeFileSync(seedFile, JSON.stringify([route]));
	const workerKey = randomBytes(24).toString("hex");
	const port = await freePort();
	const url = `http://127.0.0.1:${port}`;
	const service = await startProcess("service", path.join(root, "dist", "index.js"), [], { PORT: String(port), DATA_DIR: dataDir, REGISTRY_SEED_FILE: seedFile, WORKER_API_KEYS: workerKey, RATE_LIMIT_PER_MIN: "0", LOG_LEVEL: "warn" }, url);
	const log = (line: string) => process.stderr.write(`${line}\n`);
	const barePort = await freePort();
	const bareUrl = `http://127.0.0.1:${barePort}`;
	const bare = await startProcess("bare answer", path.join(root, "dist", "bench", "bare-answer.js"), [], { PORT: String(barePort) }, bareUrl);
	const rows: { stored: number; list: string; limit: number; p50: number; p99: number; items: number; bytes: number; bareP50: number; bareP99: number }[] = [];
	try {
		const intents = new BodyFactory(route, 256);
		let stored = 0;
		for (const size of sizes) {
			log(`filling to ${fmt(size)} intents and ${fmt(size / 10)} TIN operations …`);
			for (let done = stored; done < size; ) {
				const batch = Math.min(5000, size - done);
				const fill = summarize(await runClosed({ url, path: "/intents", expected: 201 }, intents.take(batch), fillConcurrency));
				const ops = summarize(await runClosed({ url, path: "/tin-operations", expected: 201 }, tinOperationBodies(Math.round(batch / 10)), fillConcurrency));
				if (fill.notAccepted || ops.notAccepted) throw new Error(`the fill was refused: ${fill.notAccepted} intents, ${ops.notAccepted} TIN operations not 201`);
				done += batch;
			}
			stored = size;
			await quiet(service.pid);
			for (const list of LISTS)
				for (const limit of LIMITS) {
					const target = { url, path: `${list}?limit=${limit}`, expected: 200, headers: { "x-api-key": workerKey } };
					const sample = await fetch(url + target.path, { headers: target.headers }).then(res => res.text());
					const items = (JSON.parse(sample) as unknown[]).length;
					await fetch(`${bareUrl}/answer`, { method: "PUT", body: sample });
					const floor = { url: bareUrl, path: "/answer", expected: 200 };
					await runAlternating([target, floor], WARMUP);
					const [timed, bareTimed] = (await runAlternating([target, floor], reads)).map(phase => summarize(phase, 200));
					if (timed.notAccepted || bareTimed.notAccepted) throw new Error(`GET ${target.path} answered other than 200`);
					rows.push({ stored: size, list, limit, p50: timed.p50, p99: timed.p99, items, bytes: Buffer.byteLength(sample), bareP50: bareTimed.p50, bareP99: bareTimed.p99 });
					log(`${fmt(size)} stored: GET ${target.path} p99 ${fmt(timed.p99, 2)} ms (the same bytes from bare node:http: ${fmt(bareTimed.p99, 2)} ms)`);
				}
		}
	} finally {
		await Promise.all([service.stop(), bare.stop()]);
		fs.rmSync(dataDir, { recursive: true, force: true });
	}

	const at = new Date().toISOString();
	const machine = `${os.cpus()[0]?.model?.trim() ?? "unknown CPU"} × ${os.availableParallelism()}, ${process.version}`;
	const dir = path.join(root, "bench", "results");
	fs.mkdirSync(dir, { recursive: true });
	const file = path.join(dir, `reads-${at.replace(/[:.]/g, "-")}.json`);
	fs.writeFileSync(file, `${JSON.stringify({ benchmark: "reads", at, machine, reads, rows }, null, 2)}\n`);
	const first = sizes[0];
	const last = sizes[sizes.length - 1];
	const lines = [
		`| list | limit | items | KB | ${sizes.map(n => `p99 ms at ${fmt(n)}`).join(" | ")} | p50 ms at ${fmt(last)} | p99 ${fmt(last)} ÷ ${fmt(first)} | bare node:http, same bytes: p50 / p99 ms | p99 ÷ bare |`,
		`|---|---:|---:|---:|${sizes.map(() => "---:").join("|")}|---:|---:|---:|---:|`
	];
	for (const list of LISTS)
		for (const limit of LIMITS) {
			const at = (n: number) => rows.find(row => row.stored === n && row.list === list && row.limit === limit)!;
			const final = at(last);
			lines.push(
				`| GET ${list} | ${limit} | ${final.items} | ${fmt(final.bytes / 1000)} | ${sizes.map(n => fmt(at(n).p99, 2)).join(" | ")} | ${fmt(final.p50, 2)} | ${fmt(final.p99 / at(first).p99, 2)} | ${fmt(final.bareP50, 2)} / ${fmt(final.bareP99, 2)} | ${fmt(final.p99 / final.bareP99, 2)} |`
			);
		}
	process.stdout.write(`\n${lines.join("\n")}\n\nmachine: ${machine}; one request at a time, ${reads} timed per row\nresults: ${path.relative(process.cwd(), file)}\n`);
}

main().catch(err => {
	process.stderr.write(`FAIL: ${err instanceof Error ? err.message : String(err)}\n`);
	process.exit(1);
});
