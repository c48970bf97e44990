/** ConnectionsPerClient on real sockets (a client's count, proxies, nothing kept once its connections close), and RefusalNotice. */
import { once } from "node:events";
import net from "node:net";
import { proxyTrust } from "../../lib/client-key";
import { ConnectionsPerClient, RefusalNotice } from "../../lib/connection-cap";
import { waitFor } from "../../devkit/process";

describe("ConnectionsPerClient", () => {
	let server: net.Server;
	let port: number;
	let accepted: net.Socket[];
	let clients: net.Socket[];

	beforeEach(async () => {
		accepted = [];
		clients = [];
		server = net.createServer(socket => accepted.push(socket));
		await new Promise<void>(resolve => server.listen(0, "127.0.0.1", resolve));
		port = (server.address() as net.AddressInfo).port;
	});
	afterEach(async () => {
		for (const socket of [...accepted, ...clients]) socket.destroy();
		await new Promise(resolve => server.close(resolve));
	});

	/** The server's side of `n` new connections from `localAddress`. */
	async function connect(n: number, localAddress: string): Promise<net.Socket[]> {
		const before = accepted.length;
		for (let i = 0; i < n; i++) clients.push(net.connect({ port, host: "127.0.0.1", localAddress }).on("error", () => {}));
		await waitFor(() => accepted.length === before + n, 5_000, "the connections accepted");
		return accepted.slice(before);
	}

	it("admits `max` per client, another client besides, and forgets a client once its connections close", async () => {
		const cap = new ConnectionsPerClient(2, proxyTrust(false));
		const [a, b, c] = await connect(3, "127.0.0.2");
		expect([cap.admit(a), cap.admit(b), cap.admit(c)]).toEqual([true, true, false]);
		const [d] = await connect(1, "127.0.0.3");
		expect(cap.admit(d)).toBe(true);
		expect(cap.clients).toBe(2);
		// Its "close" comes a turn after destroy(); the count's listener, added first, has run by then.
		const closed = once(a, "close");
		a.destroy();
		await closed;
		const [e] = await connect(1, "127.0.0.2");
		expect(cap.admit(e)).toBe(true);
		for (const socket of [b, c, d, e]) socket.destroy();
		await waitFor(() => cap.clients === 0 || null, 5_000, "every client forgotten");
	});

	it("counts no proxy of TRUST_PROXY, and nothing with `max` 0", async () => {
		const behindProxy = new ConnectionsPerClient(1, proxyTrust(["127.0.0.2"]));
		const unlimited = new ConnectionsPerClient(0, proxyTrust(false));
		const sockets = await connect(3, "127.0.0.2");
		expect(sockets.map(socket => behindProxy.admit(socket))).toEqual([true, true, true]);
		expect(sockets.map(socket => unlimited.admit(socket))).toEqual([true, true, true]);
		expect(behindProxy.clients + unlimited.clients).toBe(0);
	});
});

describe("RefusalNotice", () => {
	it("tells the first refusal, then at most one line a minute with how many were refused since", () => {
		const notice = new RefusalNotice("Connections refused");
		expect(notice.refused(0)).toBe("Connections refused");
		for (let t = 1; t < 60_000; t += 100) expect(notice.refused(t)).toBeNull();
		expect(notice.refused(60_000)).toBe("Connections refused (601 refused in the last 60 s)");
		expect(notice.refused(60_001)).toBeNull();
		expect(notice.refused(200_000)).toBe("Connections refused (2 refused in the last 140 s)");
	});
});
