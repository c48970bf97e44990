/** services/event-streams.ts: who a stream limit counts against, and a stream whose reader stops reading. */
import http from "node:http";
import net from "node:net";
import { clientKey } from "../../lib/client-key";
import { SseConnection, WriteRounds } from "../../services/event-streams";
import { sleep } from "../helpers/node";

describe("clientKey", () => {
	it("is the address for IPv4 (IPv4-mapped included), and the /64 for IPv6, however it is written", () => {
		expect(clientKey("203.0.113.9")).toBe("203.0.113.9");
		expect(clientKey("::ffff:203.0.113.9")).toBe("203.0.113.9");
		expect(clientKey("::FFFF:203.0.113.9")).toBe("203.0.113.9");
		const sameHost = ["2001:db8:1:2::9", "2001:db8:1:2:a:b:c:d", "2001:0db8:0001:0002:0000:0000:0000:0001"].map(clientKey);
		expect(new Set(sameHost)).toEqual(new Set(["2001:db8:1:2::/64"]));
		expect(clientKey("2001:db8:1:3::9")).toBe("2001:db8:1:3::/64");
		expect(clientKey("2001:DB8:1:3:0::1")).toBe("2001:db8:1:3::/64");
		expect(clientKey("::1")).toBe("0:0:0:0::/64");
		expect(clientKey("unknown")).toBe("unknown");
		expect(clientKey("fe80::1%eth0")).toBe("fe80:0:0:0::/64");
		// An IPv4 client however a proxy wrote it, NAT64's well-known prefix included: its own key, never one shared (a review's replay).
		for (const form of ["::ffff:1.2.3.4", "::ffff:0102:0304", "0:0:0:0:0:ffff:1.2.3.4", "64:ff9b::1.2.3.4", "64:FF9B::102:304"]) expect(clientKey(form)).toBe("1.2.3.4");
		expect(clientKey("64:ff9b::5.6.7.8")).toBe("5.6.7.8");
	});
});

describe("an SSE response whose reader stops reading", () => {
	/** A stream to a client that sends its request and never reads a byte of the answer. */
	async function nonReader() {
		const rounds = new WriteRounds();
		const opened = new Promise<{ connection: SseConnection; res: http.ServerResponse; closers: number[] }>(resolve =>
			server.once("request", (_req: http.IncomingMessage, res: http.ServerResponse) => {
				const connection = new SseConnection(res, rounds);
				const closers: number[] = [];
				connection.onceClosed(() => closers.push(Date.now()));
				resolve({ connection, res, closers });
			})
		);
		const client = net.connect((server.address() as net.AddressInfo).port, "127.0.0.1");
		client.write("GET /events HTTP/1.1\r\nhost: test\r\n\r\n");
		client.pause();
		clients.push(client);
		return opened;
	}
	const frame = Buffer.alloc(64 * 1024, "a");
	const server = http.createServer();
	const clients: net.Socket[] = [];
	beforeAll(() => new Promise<void>(resolve => server.listen(0, "127.0.0.1", resolve)));
	afterAll(() => {
		for (const client of clients) client.destroy();
		return new Promise<void>(resolve => server.close(() => resolve()));
	});

	it("is cut off once 1 MiB waits unsent: its socket goes at once, so it holds neither memory nor a place in the limits", async () => {
		const { connection, res, closers } = await nonReader();
		for (let sent = 0; !connection.closed && sent < 2000; sent++) {
			connection.sendFrame(frame);
			await sleep(2);
		}
		expect(connection.closed).toBe(true);
		expect(closers).toHaveLength(1);
		expect(res.destroyed).toBe(true);
		expect(res.socket?.destroyed ?? true).toBe(true);
	});

	it("is cut off after its reconnect delay when its stream ended with bytes it has not taken", async () => {
		const { connection, res, closers } = await nonReader();
		// Until the kernel's buffers are full and the last round left bytes waiting, far below 1 MiB.
		while (res.writableLength === 0) {
			connection.sendFrame(frame);
			await sleep(30);
		}
		expect(res.writableLength).toBeLessThan(1 << 20);
		connection.end();
		expect(closers).toHaveLength(1);
		expect(res.destroyed).toBe(false);
		await sleep(2500);
		expect(res.destroyed).toBe(true);
	});
});

/**
 * SSE responses on a WriteRounds of `budget` over those open, one per client of `reads` (true: the
 * client reads, false: it never does): the connections, the open set, and after each round the
 * streams it cut and what the open ones held. Stops the server after `body`.
 */
async function streamsUnder(
	budget: number,
	reads: boolean[],
	body: (connections: SseConnection[], rounds: { open: Set<SseConnection>; cuts: number[]; heldAfterWeighing: number[] }) => Promise<void>
) {
	const open = new Set<SseConnection>();
	const cuts: number[] = [];
	/** What the open streams hold once each round was weighed (and cut). */
	const heldAfterWeighing: number[] = [];
	const rounds = new WriteRounds(open, budget, cut => {
		if (cut) cuts.push(cut);
		heldAfterWeighing.push([...open].reduce((held, connection) => held + connection.buffered, 0));
	});
	const connections: SseConnection[] = [];
	const server = http.createServer((_req, res) => {
		const connection = new SseConnection(res, rounds);
		open.add(connection);
		connection.onceClosed(() => open.delete(connection));
		connections.push(connection);
	});
	await new Promise<void>(resolve => server.listen(0, "127.0.0.1", resolve));
	const clients: net.Socket[] = [];
	try {
		for (const [i, reading] of reads.entries()) {
			const client = net.connect((server.address() as net.AddressInfo).port, "127.0.0.1");
			client.on("error", () => {});
			client.write("GET /events HTTP/1.1\r\nhost: test\r\n\r\n");
			if (reading) client.resume();
			else client.pause();
			clients.push(client);
			for (let waited = 0; connections.length <= i && waited < 2000; waited += 5) await sleep(5);
		}
		await body(connections, { open, cuts, heldAfterWeighing });
	} finally {
		for (const client of clients) client.destroy();
		server.closeAllConnections();
		await new Promise<void>(resolve => server.close(() => resolve()));
	}
}

// Under one stream's own limit (1 MiB), so that only the budget can cut a stream.
const BUDGET = 768 * 1024;

it("cuts off the streams furthest behind once all of them together hold more unsent than their budget, each under its own limit", () =>
	streamsUnder(BUDGET, [false, false, false], async ([fast, ...others], { cuts, heldAfterWeighing }) => {
		// Each its own events (another filter, say), each event's frame a buffer of its own, as the
		// gateway builds them: no buffer shared. The first is sent twice as much.
		const frame = () => Buffer.alloc(32 * 1024, "a");
		let fastAtCut = -1;
		for (let sent = 0; !fast.closed && sent < 600; sent++) {
			fastAtCut = fast.buffered;
			fast.sendFrame(frame());
			fast.sendFrame(frame());
			for (const other of others) other.sendFrame(frame());
			// A round at a time (one per 25 ms): what each round writes is what the budget weighs.
			await sleep(30);
		}
		// What the sockets hold adds the chunked encoding's few bytes per write to the events'.
		expect(Math.max(...heldAfterWeighing)).toBeLessThanOrEqual(BUDGET + 4096);
		// Cut by the budget, not by its own 1 MiB: the others, less far behind, stay open.
		expect(fast.closed).toBe(true);
		expect(fastAtCut).toBeLessThan(1 << 20);
		expect(others.map(other => other.closed)).toEqual([false, false]);
		expect(cuts[0]).toBe(1);
	}));

it("counts a buffer that several streams share (the same filter) once: streams behind by more than the budget together, on the same bytes, stay open", () =>
	streamsUnder(BUDGET, [false, false, false], async (connections, { cuts }) => {
		// Until together they hold more than the budget unsent, the same bytes (each event's frame one
		// buffer, sent to every stream), each a third of it or so.
		const held = () => connections.reduce((sum, connection) => sum + connection.buffered, 0);
		for (let sent = 0; held() <= BUDGET + 64 * 1024 && !connections.some(connection => connection.closed) && sent < 600; sent++) {
			const frame = Buffer.alloc(32 * 1024, "a");
			for (const connection of connections) connection.sendFrame(frame);
			await sleep(30);
		}
		expect(held()).toBeGreaterThan(BUDGET);
		expect(connections.map(connection => connection.closed)).toEqual([false, false, false]);
		expect(cuts).toEqual([]);
	}));

it("never cuts open streams for bytes that streams no longer open hold (ended, in their last seconds): neither one holding nothing nor one a little behind", () =>
	// Not open (its stream ended), never reading; open and reading; open and a little behind.
	streamsUnder(256 * 1024, [false, true, false], async ([gone, reading, behind], { open, cuts }) => {
		open.delete(gone);
		for (let sent = 0; behind.buffered === 0 && sent < 600; sent++) {
			behind.sendFrame(Buffer.alloc(32 * 1024, "c"));
			await sleep(30);
		}
		expect(behind.buffered).toBeGreaterThan(0);
		expect(behind.buffered).toBeLessThan(256 * 1024);
		for (let sent = 0; gone.buffered <= 300 * 1024 && sent < 600; sent++) {
			gone.sendFrame(Buffer.alloc(32 * 1024, "a"));
			reading.sendFrame(Buffer.alloc(64, "b"));
			await sleep(30);
		}
		expect(gone.buffered).toBeGreaterThan(300 * 1024);
		expect([reading.closed, behind.closed]).toEqual([false, false]);
		expect(cuts).toEqual([]);
	}));

it("cuts off a stream queued behind another on its connection (pipelined) by closing the connection: its bytes are not held until it had a socket", async () => {
	const rounds = new WriteRounds();
	const connections: SseConnection[] = [];
	const server = http.createServer((_req, res) => void connections.push(new SseConnection(res, rounds)));
	await new Promise<void>(resolve => server.listen(0, "127.0.0.1", resolve));
	const client = net.connect((server.address() as net.AddressInfo).port, "127.0.0.1");
	client.on("error", () => {});
	const closed = new Promise<void>(resolve => client.once("close", () => resolve()));
	try {
		client.write("GET /events HTTP/1.1\r\nhost: test\r\n\r\n".repeat(2));
		client.resume();
		for (let waited = 0; connections.length < 2 && waited < 2000; waited += 5) await sleep(5);
		const queued = connections[1];
		queued.cut();
		expect(queued.closed).toBe(true);
		await expect(Promise.race([closed.then(() => "closed"), sleep(1000).then(() => "still open")])).resolves.toBe("closed");
	} finally {
		client.destroy();
		server.closeAllConnections();
		await new Promise<void>(resolve => server.close(() => resolve()));
	}
});

it("ends every stream of a socket that goes, those pipelined behind the first included: none keeps its place in the limits", async () => {
	const rounds = new WriteRounds();
	const connections: SseConnection[] = [];
	const server = http.createServer((_req, res) => void connections.push(new SseConnection(res, rounds)));
	let socket: net.Socket | null = null;
	server.on("connection", accepted => (socket = accepted));
	await new Promise<void>(resolve => server.listen(0, "127.0.0.1", resolve));
	try {
		const client = net.connect((server.address() as net.AddressInfo).port, "127.0.0.1");
		client.on("error", () => {});
		// More than an emitter's default of 10 listeners, as the 20 streams a client may open.
		const pipelined = 20;
		client.write("GET /intents/a/events HTTP/1.1\r\nhost: test\r\n\r\n".repeat(pipelined));
		for (let waited = 0; connections.length < pipelined && waited < 2000; waited += 10) await sleep(10);
		expect(connections).toHaveLength(pipelined);
		// One listener of ours on the socket however many streams it carries, beside Node's own: no
		// MaxListenersExceededWarning in the log.
		expect(socket!.listenerCount("close")).toBeLessThan(5);
		const ended = connections.map(() => false);
		connections.forEach((connection, i) => connection.onceClosed(() => (ended[i] = true)));
		client.destroy();
		for (let waited = 0; ended.includes(false) && waited < 2000; waited += 10) await sleep(10);
		expect(ended.every(Boolean)).toBe(true);
	} finally {
		server.closeAllConnections();
		await new Promise<void>(resolve => server.close(() => resolve()));
	}
});

it("ends a pipelined stream whose socket went while it awaited its owner: it never holds a place in the limits", async () => {
	const rounds = new WriteRounds();
	const connections: SseConnection[] = [];
	// As the gateway does: the stream opens once the owner has answered (over NATS, some ms later).
	const server = http.createServer((_req, res) => void sleep(30).then(() => connections.push(new SseConnection(res, rounds))));
	await new Promise<void>(resolve => server.listen(0, "127.0.0.1", resolve));
	try {
		const client = net.connect((server.address() as net.AddressInfo).port, "127.0.0.1");
		client.on("error", () => {});
		client.write("GET /intents/a/events HTTP/1.1\r\nhost: test\r\n\r\n".repeat(2));
		await sleep(5);
		client.destroy();
		for (let waited = 0; connections.length < 2 && waited < 2000; waited += 10) await sleep(10);
		expect(connections).toHaveLength(2);
		expect(connections.map(connection => connection.closed)).toEqual([true, true]);
	} finally {
		server.closeAllConnections();
		await new Promise<void>(resolve => server.close(() => resolve()));
	}
});
