/**
 * The event log is an outbox: a state change and its event are one write. The process is killed
 * (SIGKILL) in the middle of a burst of submissions and leases, before any stream or webhook read
 * their events; after a restart on the same DATA_DIR, every record's changes are in the log, and
 * every event in the log is a change a record shows: none lost, none invented.
 */
import { waitFor } from "../../devkit/process";
import { newRoute, newWallet, signedHeartbeat, signedIntent, writeSeedFile } from "../helpers/fixtures";
import { API_KEY, crankerClient, httpClient, spawnService, tempDir, worker } from "../helpers/node";
import { openStream } from "../helpers/sse";

jest.setTimeout(60_000);

/** The service as a process on `dataDir`, as the crash tests start it (again). */
const start = (dataDir: string, seedFile: string) => spawnService({ DATA_DIR: dataDir, WORKER_API_KEYS: API_KEY, REGISTRY_SEED_FILE: seedFile, LOG_LEVEL: "warn", RATE_LIMIT_PER_MIN: "0" });

test("killed in a burst of changes: after the restart, every change has its event and every event its change", async () => {
	const dataDir = tempDir();
	const route = newRoute();
	const seedFile = writeSeedFile(dataDir, [route]);
	const cranker = newWallet();

	const first = await start(dataDir, seedFile);
	expect((await crankerClient(first.url, cranker)("POST", "/crankers/heartbeat", signedHeartbeat(cranker))).status).toBe(200);
	const answered: string[] = [];
	// Submissions, each leased as soon as it is answered, until the process dies under them.
	const burst = Array.from({ length: 8 }, async () => {
		for (;;) {
			const created = await fetch(`${first.url}/intents`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(signedIntent(newWallet(), route)) }).catch(() => null);
			if (!created) return;
			const { id } = (await created.json()) as { id: string };
			answered.push(id);
			const lease = { status: "CRANKER_LEASED", crankerPubkey: cranker.address, expectedVersion: 3 };
			if (!(await crankerClient(first.url, cranker)("PATCH", `/intents/${id}/status`, lease, undefined, { allowInternalError: true }).catch(() => null))) return;
		}
	});
	await waitFor(async () => answered.length >= 40, 20_000, "40 answered submissions", 5);
	first.proc.child.kill("SIGKILL");
	await first.proc.exited;
	await Promise.all(burst);

	const second = await start(dataDir, seedFile);
	try {
		const again = httpClient(second.url);
		const records = (await again("GET", "/intents?limit=500", undefined, worker)).body as { id: string; receiverStatus: string; history: { state: string }[] }[];
		for (const id of answered) expect(records.map(r => r.id)).toContain(id);
		const stream = await openStream(`${second.url}/events?types=intent.status_changed`, { "x-api-key": API_KEY, "last-event-id": "0-0" });
		// Each record: its creation (VERIFIED) and, when leased, the lease.
		const expected = records.reduce((n, record) => n + (record.receiverStatus === "CRANKER_LEASED" ? 2 : 1), 0);
		const events = await stream.waitFor(expected);
		await new Promise(resolve => setTimeout(resolve, 300));
		stream.close();
		expect(stream.events).toHaveLength(expected);
		const bySubject = new Map<string, string[]>();
		for (const event of events) bySubject.set(event.data.subject, [...(bySubject.get(event.data.subject) ?? []), event.data.state]);
		expect([...bySubject.keys()].sort()).toEqual(records.map(r => r.id).sort());
		for (const record of records) expect(bySubject.get(record.id)).toEqual(record.receiverStatus === "CRANKER_LEASED" ? ["VERIFIED", "CRANKER_LEASED"] : ["VERIFIED"]);
		expect(records.some(r => r.receiverStatus === "CRANKER_LEASED")).toBe(true);
	} finally {
		second.proc.child.kill("SIGTERM");
		await second.proc.exited;
	}
});
