/**
 * HTTP/1.1 by hand, on raw sockets: for what a client library would not send or would hide (bytes
 * trickled, headers repeated, a connection held open idle). Answers are read as latin1: byte for byte.
 */
import net from "node:net";
import { waitFor } from "../../devkit/process";

/** A raw request on its own socket: the bytes as given, and everything the server answers until it closes. */
export function rawRequest(port: number, head: string, body: Buffer | string = "", trickleMs = 0): Promise<{ answer: string; closedAfterMs: number }> {
	return new Promise(resolve => {
		const startedAt = Date.now();
		const socket = net.connect(port, "127.0.0.1");
		let answer = "";
		socket.on("data", chunk => (answer += chunk.toString("latin1")));
		socket.on("error", () => {});
		socket.on("close", () => resolve({ answer, closedAfterMs: Date.now() - startedAt }));
		socket.write(head);
		// Never half-closed: the server answers, and closes when the request says so (or times out).
		if (!trickleMs) return void socket.write(body);
		// One byte at a time, forever: only the server's timeout ends it.
		const timer = setInterval(() => (socket.destroyed ? clearInterval(timer) : socket.write("a")), trickleMs);
	});
}

/** One keep-alive connection to a gateway, by hand (from `localAddress` if given): `ask` sends GET /health/live on it and waits for the answer. */
export async function rawConnection(url: string, localAddress?: string) {
	const socket = net.connect({ port: Number(new URL(url).port), host: "127.0.0.1", localAddress });
	let received = "";
	let closed = false;
	socket.on("data", chunk => (received += chunk.toString("latin1")));
	await new Promise((resolve, reject) => socket.once("connect", resolve).once("error", reject));
	socket.on("error", () => {});
	socket.on("close", () => (closed = true));
	const answers = () => received.match(/HTTP\/1\.1 200/g)?.length ?? 0;
	return {
		socket,
		received: () => received,
		closed: () => closed,
		async ask() {
			const before = answers();
			socket.write("GET /health/live HTTP/1.1\r\nHost: localhost\r\n\r\n");
			await waitFor(() => answers() > before || (closed ? Promise.reject(new Error("the connection closed")) : null), 5_000, "an answer on the same connection");
		}
	};
}

export type RawConnection = Awaited<ReturnType<typeof rawConnection>>;
