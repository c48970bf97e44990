/**
 * The event streams over HTTP (server-sent events) against the real gateway: an intent's own
 * stream (current state first, each change, closed after a terminal state, resumed with
 * Last-Event-ID), the worker stream of every change with its filters, and the limits.
 */
import path from "node:path";
import Database from "better-sqlite3";
import { waitFor } from "../../devkit/process";
import { mempoolService } from "../../services/mempool.service";
import { newRoute, newWallet, signedHeartbeat, signedIntent, signedTinOperation, walletOf, writeSeedFile, type Wallet } from "../helpers/fixtures";
import { API_KEY, sleep, startNode, tempDir, worker, type TestNode } from "../helpers/node";
import { openStream, type SseStream } from "../helpers/sse";

jest.setTimeout(30_000);

const route = newRoute();
let node: TestNode;
const cranker = newWallet();
const opened: SseStream[] = [];
const open = async (path: string, headers: Record<string, string> = {}) => {
	const stream = await openStream(`${node.url}${path}`, headers);
	opened.push(stream);
	return stream;
};
const workerHeaders = { "x-api-key": API_KEY };
const iso = (offsetMs: number) => new Date(Date.now() + offsetMs).toISOString();

async function submit(sender: Wallet = newWallet(), fields = {}): Promise<string> {
	const { status, body } = await node.http("POST", "/intents", signedIntent(sender, route, fields));
	expect(status).toBe(201);
	return body.id;
}

const lease = (id: string, expectedVersion: number) => {
	const body = { status: "CRANKER_LEASED", crankerPubkey: cranker.address, expectedVersion };
	return node.as(walletOf(cranker.address))("PATCH", `/intents/${id}/status`, body);
};

beforeAll(async () => {
	const dir = tempDir();
	// Short request time limits: they bound how long a request takes to arrive, never a stream's life.
	node = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dir, [route]), EVENT_HEARTBEAT_MS: "100", EVENT_STREAMS_PER_IP: "4", HEADERS_TIMEOUT_MS: "500", REQUEST_TIMEOUT_MS: "500" }, dir);
	expect((await node.as(cranker)("POST", "/crankers/heartbeat", signedHeartbeat(cranker))).status).toBe(200);
});
afterEach(() => {
	for (const stream of opened.splice(0)) stream.close();
});
afterAll(() => node?.stop());

describe("GET /intents/{id}/events", () => {
	it("sends the current state first, then each change, and closes after a terminal state", async () => {
		const id = await submit(newWallet(), { senderAuthorizationExpiresAt: iso(1500) });
		const stream = await open(`/intents/${id}/events`);
		expect(stream.status).toBe(200);
		expect(stream.headers["content-type"]).toBe("text/event-stream; charset=utf-8");
		expect(stream.headers["cache-control"]).toBe("no-cache, no-transform");
		const [current] = await stream.waitFor(1);
		expect(current).toMatchObject({ event: "status", data: { id, receiverStatus: "VERIFIED", status: "pending" } });
		expect(current.id).toMatch(/^\d+$/);
		// The public view only: nothing of the signature, the nonce or the lease.
		expect(Object.keys(current.data)).not.toEqual(expect.arrayContaining(["senderAuthorizationSignature"]));
		expect((await lease(id, 3)).status).toBe(200);
		// The authorization expires while leased: the sweep rejects it (terminal), and the stream ends.
		const events = await stream.waitFor(3);
		expect(events.map(e => e.data.receiverStatus)).toEqual(["VERIFIED", "CRANKER_LEASED", "REJECTED"]);
		expect(events[2].data).toMatchObject({ status: "canceled", rejectionReason: "EXPIRED" });
		const ids = events.map(e => Number(e.id));
		expect([...ids].sort((a, b) => a - b)).toEqual(ids);
		await stream.whenEnded();
		expect(stream.events).toHaveLength(3);

		// Resumed after the first event: the changes after it, nothing before, then closed.
		const resumed = await open(`/intents/${id}/events`, { "last-event-id": events[0].id! });
		await resumed.whenEnded();
		expect(resumed.events.map(e => [e.id, e.data.receiverStatus])).toEqual(events.slice(1).map(e => [e.id, e.data.receiverStatus]));
		// A terminal intent: its state, then the end.
		const again = await open(`/intents/${id}/events`);
		await again.whenEnded();
		expect(again.events.map(e => [e.id, e.data.receiverStatus])).toEqual([[events[2].id, "REJECTED"]]);
		// Resumed after its terminal change: 204, nothing to follow (an EventSource stops reconnecting),
		// and no stream left open; past its last change: not an id it sent.
		const done = await open(`/intents/${id}/events`, { "last-event-id": events[2].id! });
		expect(done).toMatchObject({ status: 204, ended: true });
		const beyond = await open(`/intents/${id}/events`, { "last-event-id": String(Number(events[2].id) + 1) });
		expect(beyond).toMatchObject({ status: 422, body: { data: [{ field: "Last-Event-ID" }] } });
	});

	it("keeps an idle stream open with heartbeat comments, past the request time limits", async () => {
		const stream = await open(`/intents/${await submit()}/events`);
		await stream.waitFor(1);
		await new Promise(resolve => setTimeout(resolve, 2500));
		expect(stream.comments.filter(c => c === "heartbeat").length).toBeGreaterThanOrEqual(10);
		expect(stream.ended).toBe(false);
	});

	it("refuses an unknown intent (404), a malformed Last-Event-ID (422), and changes nothing", async () => {
		const unknown = await open("/intents/int_00000000000000000000000000000000/events");
		expect(unknown).toMatchObject({ status: 404, body: { type: "NOT_FOUND" } });
		const id = await submit();
		for (const bad of ["x", "1-2", "-1", "1".repeat(16)]) {
			const refused = await open(`/intents/${id}/events`, { "last-event-id": bad });
			expect(refused).toMatchObject({ status: 422, body: { type: "VALIDATION_ERROR", data: [{ field: "Last-Event-ID" }] } });
		}
		const tooLong = await open(`/intents/${"a".repeat(65)}/events`);
		expect(tooLong).toMatchObject({ status: 422, body: { type: "VALIDATION_ERROR", data: [{ field: "id" }] } });
		// The path names the intent; the query can neither add fields nor name another.
		for (const query of ["since=1", `id=${id}`]) {
			const refused = await open(`/intents/int_00000000000000000000000000000000/events?${query}`);
			expect(refused.status).toBe(query.startsWith("id=") ? 404 : 422);
		}
	});

	it("shows nothing of an intent whose record is gone while its events are kept (a migration removed it: a review): 404, as GET /intents/{id}", async () => {
		const id = await submit();
		const db = new Database(path.join(node.dataDir, "mempool.sqlite"));
		try {
			expect(db.prepare("DELETE FROM intents WHERE id = ?").run(id).changes).toBe(1);
		} finally {
			db.close();
		}
		expect((await node.http("GET", `/intents/${id}`)).status).toBe(404);
		expect(await open(`/intents/${id}/events`)).toMatchObject({ status: 404, body: { type: "NOT_FOUND" } });
		expect(await open(`/intents/${id}/events`, { "last-event-id": "1" })).toMatchObject({ status: 404, body: { type: "NOT_FOUND" } });
	});

	it("limits streams per client IP: 429 past the limit, a slot again once one closes", async () => {
		const id = await submit();
		const streams = await Promise.all(Array.from({ length: 4 }, () => open(`/intents/${id}/events`)));
		expect(streams.map(s => s.status)).toEqual([200, 200, 200, 200]);
		const refused = await open(`/intents/${id}/events`);
		expect(refused).toMatchObject({ status: 429, body: { type: "RATE_LIMITED" } });
		expect(refused.headers["retry-after"]).toBeDefined();
		// Refused before it costs the owner a read: an unknown intent's stream is 429 too, not the owner's 404.
		expect(await open("/intents/int_unknown/events")).toMatchObject({ status: 429, body: { type: "RATE_LIMITED" } });
		streams[0].close();
		const deadline = Date.now() + 5000;
		let admitted: SseStream;
		do admitted = await open(`/intents/${id}/events`);
		while (admitted.status === 429 && Date.now() < deadline && (await new Promise(resolve => setTimeout(resolve, 50)), true));
		expect(admitted.status).toBe(200);
	});
});

describe("GET /events", () => {
	it("needs the worker key", async () => {
		expect(await open("/events")).toMatchObject({ status: 401, body: { type: "UNAUTHORIZED" } });
		expect(await open("/events", { "x-api-key": "wrong-key-0123456789abcdef" })).toMatchObject({ status: 403, body: { type: "FORBIDDEN" } });
	});

	it("streams every change from now, filtered by type and state, and resumes after Last-Event-ID without a gap", async () => {
		const verified = await open("/events?types=intent.status_changed&states=VERIFIED", workerHeaders);
		const everything = await open("/events", workerHeaders);
		// A worker's stream: no shared cache keeps it (a review); an intent's public one as SSE is cached by none anyway.
		expect(everything.headers["cache-control"]).toBe("private, no-store, no-transform");
		const ids = [await submit(), await submit(), await submit()];
		const operation = await node.http("POST", "/tin-operations", signedTinOperation(newWallet(), { intentType: "create" }));
		expect(operation.status).toBe(201);
		expect((await lease(ids[0], 3)).status).toBe(200);

		const seen = await verified.waitFor(3);
		expect(seen.map(e => e.data.subject)).toEqual(ids);
		expect(seen.every(e => e.event === "intent.status_changed" && e.data.state === "VERIFIED" && e.data.previousState === null)).toBe(true);
		expect(seen[0].data.view).toMatchObject({ id: ids[0], receiverStatus: "VERIFIED" });

		const all = await everything.waitFor(5);
		expect(all.map(e => [e.event, e.data.subject, e.data.state])).toEqual(
			expect.arrayContaining([
				["intent.status_changed", ids[0], "VERIFIED"],
				["tin_operation.status_changed", operation.body.id, "PENDING_VERIFICATION"],
				["intent.status_changed", ids[0], "CRANKER_LEASED"]
			])
		);
		for (const event of all) expect(event.id).toMatch(/^\d+-\d+$/);
		// Nothing filtered out reached the filtered stream.
		await new Promise(resolve => setTimeout(resolve, 300));
		expect(verified.events).toHaveLength(3);

		// Resumed after the first event: exactly the rest, each log in its order (the two logs
		// interleave as they are read, so the combined ids may differ).
		const resumed = await open("/events", { ...workerHeaders, "last-event-id": all[0].id! });
		await resumed.waitFor(all.length - 1);
		const perLog = (events: typeof all) => ["intent.status_changed", "tin_operation.status_changed"].map(type => events.filter(e => e.event === type).map(e => e.data.seq));
		expect(perLog(resumed.events)).toEqual(perLog(all.slice(1)));
		for (const events of [all, resumed.events]) {
			const positions = events.map(e => e.id!.split("-").map(Number));
			for (let i = 1; i < positions.length; i++) expect(positions[i][0] >= positions[i - 1][0] && positions[i][1] >= positions[i - 1][1]).toBe(true);
		}
	});

	it("sends its place in the logs as it opens and with each heartbeat: a client that drops before an event it takes misses nothing, and resumes past what its filter left out", async () => {
		const first = await open("/events?types=intent.status_changed&states=CRANKER_LEASED", workerHeaders);
		await waitFor(() => first.lastEventId, 2000, "the id the stream opens with");
		const openedAt = first.lastEventId!;
		first.close();
		// While it is away: one intent leased (taken by its filter), after which others are only VERIFIED (left out).
		const leasedId = await submit();
		expect((await lease(leasedId, 3)).status).toBe(200);
		const resumed = await open("/events?types=intent.status_changed&states=CRANKER_LEASED", { ...workerHeaders, "last-event-id": openedAt });
		const [event] = await resumed.waitFor(1);
		expect(event.data).toMatchObject({ subject: leasedId, state: "CRANKER_LEASED" });
		// Events left out move its place on: the next heartbeat's id is past them.
		await submit();
		await waitFor(() => Number(resumed.lastEventId!.split("-")[0]) > Number(event.id!.split("-")[0]), 2000, "a heartbeat past the event left out");
		expect(resumed.events).toHaveLength(1);
	});

	it("writes busy streams in rounds, at most one write per 25 ms, the same events to every stream", async () => {
		const streams = [await open("/events", workerHeaders), await open("/events", workerHeaders)];
		const before = streams.map(stream => stream.chunks);
		const started = performance.now();
		// One intent after another: each is committed and announced on its own, about every 10 ms.
		for (let i = 0; i < 30; i++) await submit();
		for (const stream of streams) await stream.waitFor(30);
		const elapsed = performance.now() - started;
		// A round every 25 ms, a heartbeat every 100 ms (one write each), and one round to spare.
		const allowed = Math.ceil(elapsed / 25) + Math.ceil(elapsed / 100) + 1;
		for (const [i, stream] of streams.entries()) expect(stream.chunks - before[i]).toBeLessThanOrEqual(allowed);
		expect(streams[1].events).toEqual(streams[0].events);
	});

	it("gives each stream its own events when streams with different filters are written in one round", async () => {
		const leased = await submit();
		const verifiedOnly = await open("/events?states=VERIFIED", workerHeaders);
		const leasedOnly = await open("/events?states=CRANKER_LEASED", workerHeaders);
		// Two changes at once: one event for each stream, most likely read in one page and written in one round.
		const [created] = await Promise.all([submit(), lease(leased, 3).then(answer => expect(answer.status).toBe(200))]);
		const [verified] = await verifiedOnly.waitFor(1);
		const [lease1] = await leasedOnly.waitFor(1);
		expect([verified.data.subject, verified.data.state]).toEqual([created, "VERIFIED"]);
		expect([lease1.data.subject, lease1.data.state]).toEqual([leased, "CRANKER_LEASED"]);
		await new Promise(resolve => setTimeout(resolve, 100));
		expect([verifiedOnly.events.length, leasedOnly.events.length]).toEqual([1, 1]);
	});

	it("refuses unknown filters and ids with 422", async () => {
		for (const [query, field] of [["types=intent.created", "types"], ["states=SETTLED", "states"], ["color=red", "color"]] as const) {
			const refused = await open(`/events?${query}`, workerHeaders);
			expect(refused).toMatchObject({ status: 422, body: { type: "VALIDATION_ERROR", data: [expect.objectContaining({ field })] } });
		}
		expect(await open("/events", { ...workerHeaders, "last-event-id": "12" })).toMatchObject({ status: 422, body: { data: [{ field: "Last-Event-ID" }] } });
		// Past the end of a log: an id it never sent (its stream would skip every event up to there).
		expect(await open("/events", { ...workerHeaders, "last-event-id": "999999999-0" })).toMatchObject({ status: 422, body: { data: [{ field: "Last-Event-ID" }] } });
		// Also the part of a log the filter leaves out: it is sent back in every id of the stream.
		expect(await open("/events?types=intent.status_changed", { ...workerHeaders, "last-event-id": "0-999999999" })).toMatchObject({ status: 422, body: { data: [{ field: "Last-Event-ID" }] } });
	});

	it("ends open streams when the gateway drains, so that clients reconnect elsewhere", async () => {
		const dir = tempDir();
		const other = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dir, [route]) }, dir);
		const stream = await openStream(`${other.url}/events`, workerHeaders);
		expect(stream.status).toBe(200);
		await other.stop();
		await stream.whenEnded(5000);
	});
});

describe("the streams' figures", () => {
	it("counts open streams and events written in /metrics", async () => {
		const stream = await open("/events", workerHeaders);
		await submit();
		await stream.waitFor(1);
		const text = (await node.http("GET", "/metrics?format=prometheus", undefined, worker)).body as string;
		expect(text).toMatch(/^scs_event_streams_open\{route="\/events",node="[^"]+"\} [1-9]/m);
		expect(text).toMatch(/^scs_events_written_total\{stream="intents",node="[^"]+"\} [1-9]/m);
		expect(text).toMatch(/^scs_event_stream_lag_seconds_count\{node="[^"]+"\} [1-9]/m);
	});
});

describe("retention", () => {
	it("prunes events older than EVENT_RETENTION_MS on the owners' sweep, all but the newest", async () => {
		const dir = tempDir();
		const short = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dir, [route]), EVENT_RETENTION_MS: "200", WEBHOOK_RETRY_FOR_MS: "100" }, dir);
		try {
			// One intent ends (its authorization expires: the sweep rejects it) before two more arrive.
			const ended = (await short.http("POST", "/intents", signedIntent(newWallet(), route, { senderAuthorizationExpiresAt: iso(1000) }))).body;
			await waitFor(async () => (await short.http("GET", `/intents/${ended.id}`)).body.receiverStatus === "REJECTED", 5000, "the intent to expire");
			// From now: the ended intent's events may be pruned already.
			const kept = await openStream(`${short.url}/events`, workerHeaders);
			const first = (await short.http("POST", "/intents", signedIntent(newWallet(), route))).body;
			const second = (await short.http("POST", "/intents", signedIntent(newWallet(), route))).body;
			await waitFor(async () => kept.events.at(-1)?.data.subject === second.id, 5000, "the newest event");
			expect(kept.events.slice(-2).map(e => e.data.subject)).toEqual([first.id, second.id]);
			kept.close();
			// The retention sweep runs at most once a second.
			const prunedCount = async () => Number(/scs_sweep_results_total\{sweep="intents-event-retention",result="pruned",node="[^"]+"\} (\d+)/.exec((await short.http("GET", "/metrics?format=prometheus")).body)?.[1] ?? 0);
			await waitFor(async () => (await prunedCount()) === 3, 5000, "three events pruned");
			// The newest stays, so that its number is never handed out again.
			const newest = kept.events.at(-1)!.data.seq as number;
			const replay = await openStream(`${short.url}/events`, { ...workerHeaders, "last-event-id": `${newest - 1}-0` });
			await new Promise(resolve => setTimeout(resolve, 300));
			replay.close();
			expect(replay.events.map(e => e.data.subject)).toEqual([second.id]);
			// Resumed from before the pruned ones, the stream would skip them without a word: 422, as
			// for an id it never sent, so that the client follows from now and reads the current state.
			const behind = await openStream(`${short.url}/events`, { ...workerHeaders, "last-event-id": "0-0" });
			behind.close();
			expect(behind.status).toBe(422);
			expect(behind.body).toMatchObject({ type: "VALIDATION_ERROR", data: [{ field: "Last-Event-ID" }] });
			expect(behind.body.message).toMatch(/EVENT_RETENTION_MS/);
			// The intent itself stays; its stream shows its state without an event id.
			const own = await openStream(`${short.url}/intents/${first.id}/events`);
			expect((await own.waitFor(1))[0]).toMatchObject({ id: undefined, data: { id: first.id, receiverStatus: "VERIFIED" } });
			own.close();
			// Resumed after its pruned event, the same: the view, which alone tells its state now.
			const resumed = await openStream(`${short.url}/intents/${first.id}/events`, { "last-event-id": "1" });
			expect((await resumed.waitFor(1))[0]).toMatchObject({ id: undefined, data: { id: first.id, receiverStatus: "VERIFIED" } });
			resumed.close();
			// A terminal intent whose events are gone: its view with id 0, then the end, fresh or resumed;
			// resumed from 0, 204, so that an EventSource stops reconnecting instead of being sent it again.
			for (const headers of [{}, { "last-event-id": "2" }] as Record<string, string>[]) {
				const final = await openStream(`${short.url}/intents/${ended.id}/events`, headers);
				await final.whenEnded();
				expect(final.events.map(e => [e.id, e.data.receiverStatus])).toEqual([["0", "REJECTED"]]);
			}
			expect(await openStream(`${short.url}/intents/${ended.id}/events`, { "last-event-id": "0" })).toMatchObject({ status: 204, ended: true });
			// From 0, an intent that is not terminal gets its view and stays open.
			const open0 = await openStream(`${short.url}/intents/${first.id}/events`, { "last-event-id": "0" });
			expect((await open0.waitFor(1))[0]).toMatchObject({ id: undefined, data: { receiverStatus: "VERIFIED" } });
			expect(open0.ended).toBe(false);
			open0.close();
		} finally {
			await short.stop();
		}
	});
});

describe("budgets", () => {
	it("counts public and worker streams apart: anonymous streams cannot take the Crankers' room", async () => {
		const dir = tempDir();
		const small = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dir, [route]), EVENT_STREAMS_MAX: "2" }, dir);
		const streams: SseStream[] = [];
		try {
			const { body } = await small.http("POST", "/intents", signedIntent(newWallet(), route));
			for (let i = 0; i < 2; i++) streams.push(await openStream(`${small.url}/intents/${body.id}/events`));
			expect(streams.map(s => s.status)).toEqual([200, 200]);
			expect(await openStream(`${small.url}/intents/${body.id}/events`)).toMatchObject({ status: 429, body: { type: "RATE_LIMITED" } });
			const cranker = await openStream(`${small.url}/events`, workerHeaders);
			streams.push(cranker);
			expect(cranker.status).toBe(200);
		} finally {
			for (const stream of streams) stream.close();
			await small.stop();
		}
	});
});

describe("unverified intents", () => {
	it("write no event until their verdict: a forgery removed by the sweep never reaches a stream, and its own stream ends", async () => {
		const dataDir = tempDir();
		const env = { REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]), SWEEP_INTERVAL_MS: "600000", VERIFY_TIMEOUT_MS: "300", EVENT_HEARTBEAT_MS: "100" };
		const sender = newWallet();
		const genuine = signedIntent(sender, route);
		// A forgery in the sender's name: unverifiable while no verifier runs, so recorded RECEIVED.
		const forged = { ...signedIntent(sender, route, { amount: "999999999999" }), senderAuthorizationSignature: newWallet().sign("x") };
		const withoutVerifier = await startNode({ ...env, SERVICES: "api,receiver,mempool,payouts,crankers,tin,epochs,network" }, dataDir);
		let ids: string[];
		try {
			const answers = [await withoutVerifier.http("POST", "/intents", genuine), await withoutVerifier.http("POST", "/intents", forged)];
			expect(answers.map(a => [a.status, a.body.receiverStatus])).toEqual([[202, "RECEIVED"], [202, "RECEIVED"]]);
			ids = answers.map(a => a.body.id);
		} finally {
			await withoutVerifier.stop();
		}
		const full = await startNode(env, dataDir);
		const streams: SseStream[] = [];
		try {
			const all = await openStream(`${full.url}/events`, { ...workerHeaders, "last-event-id": "0-0" });
			const [genuineStream, forgedStream] = await Promise.all(ids.map(id => openStream(`${full.url}/intents/${id}/events`)));
			streams.push(all, genuineStream, forgedStream);
			// Their current view, without an id: no event exists for them.
			for (const stream of [genuineStream, forgedStream]) expect((await stream.waitFor(1))[0]).toMatchObject({ id: undefined, data: { receiverStatus: "RECEIVED" } });
			// With no event of its own yet, an id past the end of the log is refused, as for any intent;
			// one within it resumes there and gets the verdict.
			expect((await full.http("GET", `/intents/${ids[0]}/events`, undefined, { "last-event-id": "999999999999999" })).body).toMatchObject({ code: 422, type: "VALIDATION_ERROR" });
			const resumed = await openStream(`${full.url}/intents/${ids[0]}/events`, { "last-event-id": "0" });
			streams.push(resumed);
			expect(resumed.status).toBe(200);
			await new Promise(resolve => setTimeout(resolve, 300));
			expect(all.events).toEqual([]);
			expect((await full.http("POST", "/internal/wake", undefined, worker)).body.status).toMatchObject({ verified: 1, rejected: 1 });
			// The verdict is the genuine intent's first event; the forgery is gone, and its stream with it.
			const [verdict] = await all.waitFor(1);
			expect(verdict.data).toMatchObject({ subject: ids[0], previousState: "NODE_VERIFYING", state: "VERIFIED" });
			expect((await genuineStream.waitFor(2))[1]).toMatchObject({ id: expect.stringMatching(/^\d+$/), data: { id: ids[0], receiverStatus: "VERIFIED" } });
			// Its current view first (it has no event to resume after), then the verdict.
			expect((await resumed.waitFor(2)).map(e => [e.id, e.data.receiverStatus])).toEqual([
				[undefined, "RECEIVED"],
				[expect.stringMatching(/^\d+$/), "VERIFIED"]
			]);
			await forgedStream.whenEnded(5000);
			await new Promise(resolve => setTimeout(resolve, 300));
			expect(all.events.map(e => e.data.subject)).toEqual([ids[0]]);
		} finally {
			for (const stream of streams) stream.close();
			await full.stop();
		}
	});
});

describe("failures after a stream opened", () => {
	it("an owner that cannot be read once a stream opened ends that stream; the gateway lives on", async () => {
		const dir = tempDir();
		const failing = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dir, [route]), EVENT_HEARTBEAT_MS: "20" }, dir);
		try {
			await failing.http("POST", "/intents", signedIntent(newWallet(), route));
			const other = await openStream(`${failing.url}/events?types=tin_operation.status_changed`, workerHeaders);
			expect(other.status).toBe(200);
			await failing.broker.destroyService(failing.broker.getLocalService("mempool")!);
			// Resumed from the start: the stream opens before its first read of the intents' log, which fails.
			const stream = await openStream(`${failing.url}/events`, { ...workerHeaders, "last-event-id": "0-0" });
			expect(stream.status).toBe(200);
			await stream.whenEnded(5000);
			// Heartbeats go on every 20 ms for the stream still open: none writes to the ended one.
			const before = other.comments.length;
			await new Promise(resolve => setTimeout(resolve, 300));
			expect(other.comments.length).toBeGreaterThan(before + 3);
			expect(other.ended).toBe(false);
			other.close();
			expect((await fetch(`${failing.url}/health/live`)).status).toBe(200);
		} finally {
			await failing.stop();
		}
	});

	it("an owner gone under caught-up streams is logged once, not at every read or sweep, and once when it is back", async () => {
		const lines: string[] = [];
		const capture = (...args: unknown[]) => void lines.push(args.join(" "));
		const spies = [jest.spyOn(console, "warn").mockImplementation(capture), jest.spyOn(console, "log").mockImplementation(capture)];
		const about = (text: string) => lines.filter(line => line.includes(text));
		const dir = tempDir();
		const gone = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dir, [route]), LOG_LEVEL: "info" }, dir, { log: true });
		try {
			const stream = await openStream(`${gone.url}/events`, workerHeaders);
			expect(stream.status).toBe(200);
			await gone.broker.destroyService(gone.broker.getLocalService("mempool")!);
			// The streams' shared reader reads again every second, the verification sweep every 200 ms.
			await sleep(3500);
			expect(about("Reading the intents event log failed")).toHaveLength(1);
			expect(about("verification sweep failed")).toHaveLength(1);
			// Nor does the broker warn of each call to the absent owner.
			expect(lines.filter(line => /BROKER: Service .* is not (registered|available)/.test(line))).toEqual([]);

			gone.broker.createService(mempoolService(gone.config));
			await waitFor(() => about("Reading the intents event log works again").length === 1, 5000, "the reader's recovery");
			await waitFor(() => about("verification sweep works again").length === 1, 5000, "the sweep's recovery");
			// Each failed read was counted all the same.
			const text = await (await fetch(`${gone.url}/metrics?format=prometheus`)).text();
			expect(Number(/^scs_event_stream_read_failures_total\{stream="intents",node="[^"]+"\} (\d+)/m.exec(text)?.[1])).toBeGreaterThanOrEqual(2);
			expect(stream.ended).toBe(false);
			stream.close();
		} finally {
			await gone.stop();
			for (const spy of spies) spy.mockRestore();
		}
	});
});
