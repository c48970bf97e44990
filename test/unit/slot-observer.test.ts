/** SlotObserver against a tiny real JSON-RPC server on 127.0.0.1 (node:http). */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { agreedSlot, SLOT_DISAGREEMENT_WARNING, SlotObserver } from "../../lib/slot-observer";
import { waitFor } from "../../devkit/process";

interface FakeRpc {
	url: string;
	/** What the next getSlot answers: a slot, or a raw body to send instead. */
	answer: number | { raw: string };
	/** How long the server waits before answering. */
	delayMs: number;
	/** getSlot requests received so far. */
	requests: { method: string; params: unknown }[];
	close(): Promise<void>;
}

async function startFakeRpc(): Promise<FakeRpc> {
	const rpc = { answer: 0 as FakeRpc["answer"], delayMs: 0, requests: [] as FakeRpc["requests"] };
	const server = http.createServer((req, res) => {
		let body = "";
		req.on("data", chunk => (body += chunk));
		req.on("end", () => {
			const call = JSON.parse(body) as { id: number; method: string; params: unknown };
			rpc.requests.push({ method: call.method, params: call.params });
			res.setHeader("content-type", "application/json");
			const { answer } = rpc;
			const reply = () => res.end(typeof answer === "number" ? JSON.stringify({ jsonrpc: "2.0", id: call.id, result: answer }) : answer.raw);
			if (rpc.delayMs > 0) setTimeout(reply, rpc.delayMs);
			else reply();
		});
	});
	await new Promise<void>(resolve => server.listen(0, "127.0.0.1", resolve));
	const { port } = server.address() as AddressInfo;
	return Object.assign(rpc, {
		url: `http://127.0.0.1:${port}`,
		close: () =>
			new Promise<void>(resolve => {
				server.closeAllConnections();
				server.close(() => resolve());
			})
	});
}

const sleep = (ms: number) => new Promise(resolve => setTimeout(resolve, ms));

/** Waits until `condition` holds (or fails after 3 s), looking every 5 ms. */
const until = (condition: () => boolean) => waitFor(condition, 3000, "condition", 5);

/** Waits until `endpoint` has been asked `count` more times than now. */
async function asked(endpoint: FakeRpc, count: number): Promise<void> {
	const seen = endpoint.requests.length;
	await until(() => endpoint.requests.length >= seen + count);
}

const INTERVAL = 20;
let rpc: FakeRpc;
const observers: SlotObserver[] = [];
function observer(urls: string | string[], onError?: (message: string) => void): SlotObserver {
	// Warnings only: the lines that say a condition ended are news, logged at info.
	const o = new SlotObserver(typeof urls === "string" ? [urls] : urls, INTERVAL, onError && { warn: onError, info: () => {} });
	observers.push(o);
	return o;
}

beforeEach(async () => {
	rpc = await startFakeRpc();
});
afterEach(async () => {
	for (const o of observers.splice(0)) o.stop();
	await rpc.close();
});

describe("SlotObserver", () => {
	it("is null without an RPC URL, and start() sends nothing", async () => {
		const o = observer([]);
		await o.start();
		await sleep(3 * INTERVAL);
		expect(o.latest()).toBeNull();
		expect(rpc.requests).toHaveLength(0);
	});

	it("is null before start()", () => {
		expect(observer(rpc.url).latest()).toBeNull();
	});

	it("knows the slot as soon as start() resolves, asking getSlot with confirmed commitment", async () => {
		rpc.answer = 1000;
		const o = observer(rpc.url);
		await o.start();
		expect(o.latest()).toBe(1000);
		expect(rpc.requests[0]).toEqual({ method: "getSlot", params: [{ commitment: "confirmed" }] });
	});

	it("follows the chain as it moves on", async () => {
		rpc.answer = 1000;
		const o = observer(rpc.url);
		await o.start();
		rpc.answer = 1005;
		await until(() => o.latest() === 1005);
		rpc.answer = 2000;
		await until(() => o.latest() === 2000);
	});

	it("never goes backwards when the RPC node lags", async () => {
		rpc.answer = 5000;
		const o = observer(rpc.url);
		await o.start();
		rpc.answer = 4000;
		await asked(rpc, 3);
		expect(o.latest()).toBe(5000);
	});

	it("ignores answers that are not slots, and reports failures through onError", async () => {
		const errors: string[] = [];
		rpc.answer = 700;
		const o = observer(rpc.url, message => errors.push(message));
		await o.start();
		rpc.answer = { raw: JSON.stringify({ jsonrpc: "2.0", id: 1, error: { code: -32005, message: "node is behind" } }) };
		await asked(rpc, 2);
		expect(o.latest()).toBe(700);
		rpc.answer = { raw: JSON.stringify({ jsonrpc: "2.0", id: 1, result: "800" }) };
		await asked(rpc, 2);
		expect(o.latest()).toBe(700);
		rpc.answer = { raw: "<html>bad gateway</html>" };
		await until(() => errors.length > 0);
		expect(errors[0]).toMatch(/getSlot from SOLANA_RPC_URL failed/);
		expect(o.latest()).toBe(700);
		// It keeps polling after a failure.
		rpc.answer = 900;
		await until(() => o.latest() === 900);
	});

	it("reports an unreachable RPC through onError and stays null", async () => {
		const errors: string[] = [];
		const url = rpc.url;
		await rpc.close();
		const o = observer(url, message => errors.push(message));
		await o.start();
		expect(o.latest()).toBeNull();
		expect(errors).toHaveLength(1);
		expect(errors[0]).toMatch(/getSlot from SOLANA_RPC_URL failed/);
		o.stop();
		rpc = await startFakeRpc();
	});

	it("stop() stops polling", async () => {
		rpc.answer = 10;
		const o = observer(rpc.url);
		await o.start();
		await until(() => rpc.requests.length >= 3);
		o.stop();
		// A poll already in flight may still land; after that, nothing more.
		await sleep(3 * INTERVAL);
		const after = rpc.requests.length;
		rpc.answer = 20;
		await sleep(10 * INTERVAL);
		expect(rpc.requests.length).toBe(after);
		expect(o.latest()).toBe(10);
	});

	it("stop() while a later getSlot is in flight stops polling too", async () => {
		rpc.answer = 10;
		const o = observer(rpc.url);
		await o.start();
		rpc.delayMs = 60;
		rpc.answer = 11;
		// The server has received a request it has not answered yet: a poll is in flight.
		await asked(rpc, 1);
		o.stop();
		const after = rpc.requests.length;
		await sleep(rpc.delayMs + 10 * INTERVAL);
		expect(rpc.requests.length).toBe(after);
	});

	it("stop() while the first getSlot of start() is in flight stops polling too", async () => {
		rpc.answer = 10;
		rpc.delayMs = 50;
		const o = observer(rpc.url);
		const starting = o.start();
		o.stop();
		await starting;
		const after = rpc.requests.length;
		await sleep(10 * INTERVAL + 2 * rpc.delayMs);
		expect(rpc.requests.length).toBe(after);
	});

	it("start() again after a stop() while polls are in flight polls once per interval, not twice", async () => {
		rpc.answer = 10;
		rpc.delayMs = 50;
		const o = observer(rpc.url);
		const first = o.start();
		o.stop();
		await Promise.all([first, o.start()]);
		// One loop asks about once per 70 ms (a 50 ms answer, then a 20 ms wait); two would ask twice as often.
		const before = rpc.requests.length;
		await sleep(700);
		expect(rpc.requests.length - before).toBeLessThanOrEqual(12);
		expect(rpc.requests.length - before).toBeGreaterThanOrEqual(3);
	});
});

describe("agreedSlot: one endpoint of three or more moves the slot neither way", () => {
	it("believes the first of one or two endpoints, as a single endpoint always was", () => {
		expect(agreedSlot([])).toBeNull();
		expect(agreedSlot([null])).toBeNull();
		expect(agreedSlot([500])).toBe(500);
		expect(agreedSlot([500, 10 ** 9])).toBe(500);
		expect(agreedSlot([null, 500])).toBeNull();
	});

	it("takes the lower median of three or more, once more than half of them answered", () => {
		expect(agreedSlot([100, 10 ** 9, 101])).toBe(101);
		expect(agreedSlot([100, 0, 101])).toBe(100);
		expect(agreedSlot([100, null, 101])).toBe(100);
		expect(agreedSlot([10 ** 9, null, 101])).toBe(101);
		expect(agreedSlot([100, null, null])).toBeNull();
		expect(agreedSlot([null, null, null])).toBeNull();
		expect(agreedSlot([100, 101, 102, 10 ** 9])).toBe(101);
		expect(agreedSlot([100, null, 101, 10 ** 9])).toBe(101);
		expect(agreedSlot([100, null, null, 101])).toBeNull();
		expect(agreedSlot([10 ** 9, 10 ** 9, 100, 101, 102])).toBe(102);
		expect(agreedSlot([0, 0, 100, 101, 102])).toBe(100);
	});

	it("stays between honest answers whatever fewer than half of the endpoints answer, in any order", () => {
		let seed = 7;
		const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
		for (let round = 0; round < 2000; round++) {
			const endpoints = 3 + Math.floor(random() * 3);
			const liars = Math.floor((endpoints - 1) / 2);
			const honest = Array.from({ length: endpoints - liars }, () => 5000 + Math.floor(random() * 10));
			const lies = Array.from({ length: liars }, () => [0, 10 ** 12, null, 4990, 5020][Math.floor(random() * 5)]!);
			const answers = [...honest, ...lies].sort(() => random() - 0.5);
			const agreed = agreedSlot(answers);
			// A silent liar counts against the quorum only: the honest answers are more than half.
			expect(agreed).not.toBeNull();
			expect(agreed!).toBeGreaterThanOrEqual(Math.min(...honest));
			expect(agreed!).toBeLessThanOrEqual(Math.max(...honest));
		}
	});
});

describe("SlotObserver over several endpoints", () => {
	const extra: FakeRpc[] = [];
	afterEach(async () => {
		for (const r of extra.splice(0)) await r.close();
	});
	async function three(): Promise<[FakeRpc, FakeRpc, FakeRpc]> {
		extra.push(await startFakeRpc(), await startFakeRpc());
		return [rpc, extra[0]!, extra[1]!];
	}

	it("follows the lower median: one endpoint answering too high or lagging moves it neither way, and is named by its place", async () => {
		const errors: string[] = [];
		const [a, b, c] = await three();
		[a.answer, b.answer, c.answer] = [1000, 1001, 1000 + SLOT_DISAGREEMENT_WARNING];
		const o = observer([a.url, b.url, c.url], message => errors.push(message));
		await o.start();
		expect(o.latest()).toBe(1001);

		// Entry 3 claims a slot far ahead: it would expire every intent, were it believed.
		[a.answer, b.answer, c.answer] = [1005, 1006, 10 ** 9];
		await until(() => o.latest() === 1006);
		await until(() => errors.length > 0);
		expect(errors).toEqual([expect.stringMatching(new RegExp(`^The slot of SOLANA_RPC_URL entry 3 is more than ${SLOT_DISAGREEMENT_WARNING} from the agreed one \\(${10 ** 9} against 10\\d\\d\\)$`))]);
		expect(errors[0]).not.toContain(c.url.slice("http://".length));
		await asked(c, 3);
		expect(o.latest()).toBe(1006);
		expect(errors).toHaveLength(1);

		// Then it lags: the guard still moves on with the other two. (Each endpoint is polled on its
		// own, so while the answers change the agreed slot may be either honest one.)
		[a.answer, b.answer, c.answer] = [1010, 1011, 3];
		await until(() => o.latest()! >= 1010);
		[a.answer, b.answer] = [1020, 1021];
		await until(() => o.latest()! >= 1020);
		expect(o.latest()).toBeLessThanOrEqual(1021);
		// Astray the other way is the same condition: no new warning within the minute, however often it swings.
		await asked(c, 3);
		expect(errors).toHaveLength(1);
	});

	it("goes on with more than half answering (the lower of two), and stays, warning once, with fewer", async () => {
		const errors: string[] = [];
		const [a, b, c] = await three();
		[a.answer, b.answer, c.answer] = [2000, 2001, 2002];
		const o = observer([a.url, b.url, c.url], message => errors.push(message));
		await o.start();
		expect(o.latest()).toBe(2001);

		// Its words are not logged: an endpoint must not write lines of its own into the Node's log.
		c.answer = { raw: "<html>bad gateway</html>\nFAKE LOG LINE" };
		[a.answer, b.answer] = [2010, 2011];
		// Each endpoint is polled on its own: the slot may move on before the third's poll fails.
		await until(() => o.latest() === 2010 && errors.length > 0);
		expect(errors).toEqual(["getSlot from SOLANA_RPC_URL entry 3 failed (SyntaxError)"]);

		b.answer = { raw: JSON.stringify({ jsonrpc: "2.0", id: 1, error: { code: -32005, message: "node is behind" } }) };
		await until(() => errors.length === 3);
		expect(errors.slice(1)).toEqual([
			"getSlot from SOLANA_RPC_URL entry 2 failed (RPC error -32005)",
			"getSlot over SOLANA_RPC_URL is answered by half or fewer of its 3 endpoints; the slot stays where it is until more answer (at 2010)"
		]);
		a.answer = 10 ** 9;
		await asked(a, 3);
		expect(o.latest()).toBe(2010);
		expect(errors).toHaveLength(3);

		// Entry 1 may still be heard claiming 10^9 as the others come back: the slot is an honest one's.
		[a.answer, b.answer, c.answer] = [2030, 2031, 2032];
		await until(() => o.latest()! >= 2031);
		expect(o.latest()).toBeLessThanOrEqual(2032);
	});

	it("polls each endpoint on its own: one that hangs holds back no other's answers, and its stale answer stops counting", async () => {
		const [a, b, c] = await three();
		[a.answer, b.answer, c.answer] = [3000, 3001, 3002];
		const o = observer([a.url, b.url, c.url]);
		await o.start();
		c.delayMs = 5_000;
		await asked(c, 1);
		[a.answer, b.answer] = [3100, 3101];
		const before = a.requests.length;
		await sleep(500);
		// Every 20 ms while entry 3 hangs, not once a timeout (1 s).
		expect(a.requests.length - before).toBeGreaterThanOrEqual(5);
		expect(o.latest()).toBe(3100);
	});

	it("warns of an endpoint failing on and off once, not at every flap", async () => {
		const errors: string[] = [];
		const [a, b, c] = await three();
		[a.answer, b.answer, c.answer] = [4000, 4001, 4002];
		const o = observer([a.url, b.url, c.url], message => errors.push(message));
		await o.start();
		for (let round = 0; round < 3; round++) {
			c.answer = { raw: "down" };
			await asked(c, 2);
			c.answer = 4002;
			await asked(c, 2);
		}
		expect(errors).toEqual(["getSlot from SOLANA_RPC_URL entry 3 failed (SyntaxError)"]);
	});

	it("cuts off an answer longer than a slot's, and tells why", async () => {
		const errors: string[] = [];
		rpc.answer = { raw: JSON.stringify({ jsonrpc: "2.0", id: 1, result: 5, padding: "x".repeat(100_000) }) };
		const o = observer(rpc.url, message => errors.push(message));
		await o.start();
		expect(o.latest()).toBeNull();
		expect(errors).toEqual(["getSlot from SOLANA_RPC_URL failed (AnswerTooLargeError)"]);
	});

	it("with two endpoints, polls only the first, whose word alone counts", async () => {
		extra.push(await startFakeRpc());
		const second = extra[0]!;
		[rpc.answer, second.answer] = [6000, 10 ** 9];
		const o = observer([rpc.url, second.url]);
		await o.start();
		await until(() => rpc.requests.length >= 3);
		expect(o.latest()).toBe(6000);
		expect(second.requests).toHaveLength(0);
	});
});
