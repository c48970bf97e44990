/**
 * Verify first, store once (SPEC §2.1): a submission is verified, then stored in one insert. A
 * process killed between the two leaves nothing and answered nothing, so the client's retry of the
 * same body is safe. The insert is held back by another writer on the mempool's real SQLite file
 * (as a stalled disk would), then the process is killed (SIGKILL) and started again on the same
 * DATA_DIR.
 */
import Database from "better-sqlite3";
import path from "node:path";
import { waitFor } from "../../devkit/process";
import { newRoute, newWallet, signedIntent, signedTinOperation, writeSeedFile } from "../helpers/fixtures";
import { API_KEY, httpClient, sleep, spawnService, tempDir, worker } from "../helpers/node";

/** The service as a process on `dataDir`, as the crash tests start it (again). */
const start = (dataDir: string, seedFile: string) => spawnService({ DATA_DIR: dataDir, WORKER_API_KEYS: API_KEY, REGISTRY_SEED_FILE: seedFile, LOG_LEVEL: "warn", RATE_LIMIT_PER_MIN: "0" });

test("killed between the verification and the insert: no record, no answer, and the retry of the same body is 201", async () => {
	const dataDir = tempDir();
	const route = newRoute();
	const seedFile = writeSeedFile(dataDir, [route]);
	const request = signedIntent(newWallet(), route);

	const first = await start(dataDir, seedFile);
	const holder = new Database(path.join(dataDir, "mempool.sqlite"));
	holder.exec("BEGIN IMMEDIATE");
	try {
		const answer = fetch(`${first.url}/intents`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(request) }).then(
			response => `answered ${response.status}`,
			() => "no answer"
		);
		// The insert, which comes only after the verdict, now waits for the file: SQLite's busy wait
		// (busy_timeout, 5 s) holds the process's event loop, so its health route stops answering.
		await waitFor(async () => (await fetch(`${first.url}/health/live`, { signal: AbortSignal.timeout(300) }).catch(() => null)) === null, 4000, "the insert to wait for the file", 20);
		first.proc.child.kill("SIGKILL");
		await first.proc.exited;
		expect(await answer).toBe("no answer");
	} finally {
		holder.exec("ROLLBACK");
		holder.close();
	}

	const second = await start(dataDir, seedFile);
	try {
		const http = httpClient(second.url);
		expect((await http("GET", "/intents?limit=500", undefined, worker)).body).toEqual([]);
		const retry = await http("POST", "/intents", request);
		expect(retry.status).toBe(201);
		expect(retry.body).toMatchObject({ paymentId: request.paymentId, receiverStatus: "VERIFIED" });
		expect((await http("GET", "/metrics")).body.intents.VERIFIED).toBe(1);
	} finally {
		second.proc.child.kill("SIGTERM");
		await second.proc.exited;
	}
});

test("killed in a commit window: a repeated TIN create is not answered from the operation still uncommitted (a review: the repeat was told 200, the restart found no operation)", async () => {
	const dataDir = tempDir();
	const seedFile = writeSeedFile(dataDir, [newRoute()]);
	// Long commit windows: the create's three writes (the TIN counter, its claim, the operation)
	// each wait 3 s for their commit, and a repeat can come while the last is written, not committed.
	const first = await spawnService({ DATA_DIR: dataDir, WORKER_API_KEYS: API_KEY, REGISTRY_SEED_FILE: seedFile, LOG_LEVEL: "warn", RATE_LIMIT_PER_MIN: "0", STORE_COMMIT_WINDOW_MS: "3000" });
	const create = signedTinOperation(newWallet(), { intentType: "create" });
	const ask = () => httpClient(first.url)("POST", "/tin-operations", create).then(({ status, body }) => ({ status, id: (body as { id?: string }).id }), () => "no answer" as const);
	const firstAsk = ask();
	// The TIN's claim committed (read from the file, as committed): the operation's insert follows
	// at once, in a group that commits 3 s later. The repeat comes inside that group's window.
	const tinStore = new Database(path.join(dataDir, "tin.sqlite"), { readonly: true });
	try {
		await waitFor(() => (tinStore.prepare(`SELECT COUNT(*) AS n FROM registry_tin_claims WHERE doc LIKE '%"by":"create"%'`).get() as { n: number }).n === 1, 15_000, "the TIN's claim", 20);
	} finally {
		tinStore.close();
	}
	await sleep(300);
	const repeat = ask();
	await Promise.race([repeat, sleep(1200)]);
	first.proc.child.kill("SIGKILL");
	await first.proc.exited;

	const second = await start(dataDir, seedFile);
	try {
		const stored = await httpClient(second.url)("GET", `/tin-operations?limit=10`, undefined, worker);
		// An operation answered is an operation stored.
		expect({ firstAsk: await firstAsk, repeat: await repeat, stored: stored.body }).toEqual({ firstAsk: "no answer", repeat: "no answer", stored: [] });
	} finally {
		second.proc.child.kill("SIGTERM");
		await second.proc.exited;
	}
}, 60_000);
