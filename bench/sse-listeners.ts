/**
 * SSE listeners for bench:intents, in a process of their own so that their work does not slow
 * the load generator: `count` streams of GET /events (new VERIFIED intents). The service sends
 * every event to every listener; the first MEASURED of them also read each event's delay from its
 * state change (`at`) to its arrival, the others only count the bytes. On "reset" from the parent
 * (after the warm-up) it waits for the events still on their way, forgets what it counted, and
 * answers { quiet } (false: the events never stopped coming within 5 s, and the figures would mix
 * in the warm-up's). On "stop" it waits for the events still on their way again and answers
 * { events, p50, p99, max } in ms (over the measured listeners), the fewest and most body bytes a
 * listener received since the reset (equal when none missed anything) and the CPU this process
 * spent since the reset (µs), and exits.
 *
 *   node dist/bench/sse-listeners.js <url> <worker key> <count>
 */
import net from "node:net";

/**
 * Listeners that parse what they receive. Parsing all hundred streams took this process about as
 * much CPU as the service spends on them, on the cores the service is measured on; the service
 * treats every stream alike, so ten tell the delay.
 */
const MEASURED = 10;
const FRAME_END = Buffer.from("\n\n");
const AT = Buffer.from('"at":"');
const CRLF = Buffer.from("\r\n");
/** The last events of a phase are still on their way when its last answer arrives: wait for a quiet spell. */
const QUIET_MS = 300;

const [url, apiKey, countText] = process.argv.slice(2);
const count = Number(countText);
const target = new URL(url);
const delays: number[] = [];
const received: number[] = [];
const sockets: net.Socket[] = [];
let opened = 0;
let lastData = Date.now();
let cpuSinceReset = process.cpuUsage();

/** Each event's delay, from the body as it comes (frames may span reads). */
function delayReader(): (body: Buffer) => void {
	let rest: Buffer = Buffer.alloc(0);
	return body => {
		const bytes = rest.length ? Buffer.concat([rest, body]) : body;
		const now = Date.now();
		let start = 0;
		let end: number;
		while ((end = bytes.indexOf(FRAME_END, start)) >= 0) {
			const at = bytes.indexOf(AT, start);
			if (at >= 0 && at < end) delays.push(now - Date.parse(bytes.toString("latin1", at + AT.length, at + AT.length + 24)));
			start = end + FRAME_END.length;
		}
		rest = bytes.subarray(start);
	};
}

/**
 * One listener over a plain socket, without node:http's parser and streams in the way: the status
 * line and headers, then the chunked body, handed to `onBody` without its framing.
 */
function listen(i: number, onBody: (body: Buffer) => void): void {
	const socket = net.connect(Number(target.port), target.hostname, () =>
		socket.write(`GET /events?types=intent.status_changed&states=VERIFIED HTTP/1.1\r\nhost: ${target.host}\r\nx-api-key: ${apiKey}\r\naccept: text/event-stream\r\n\r\n`)
	);
	let buffered: Buffer = Buffer.alloc(0);
	let headers = true;
	/** Body bytes still due in the current chunk; -1: a chunk-size line is next. */
	let due = -1;
	socket.on("data", (chunk: Buffer) => {
		lastData = Date.now();
		let bytes = buffered.length ? Buffer.concat([buffered, chunk]) : chunk;
		if (headers) {
			const end = bytes.indexOf("\r\n\r\n");
			if (end < 0) return void (buffered = bytes);
			const status = bytes.toString("latin1", 0, bytes.indexOf(CRLF));
			if (!status.startsWith("HTTP/1.1 200")) {
				process.stderr.write(`listener ${i}: ${status}\n`);
				process.exit(1);
			}
			headers = false;
			if (++opened === count) process.send?.({ ready: true });
			bytes = bytes.subarray(end + 4);
		}
		let at = 0;
		while (at < bytes.length) {
			if (due < 0) {
				const end = bytes.indexOf(CRLF, at);
				if (end < 0) break;
				due = parseInt(bytes.toString("latin1", at, end), 16) + CRLF.length;
				at = end + CRLF.length;
				continue;
			}
			const take = Math.min(due, bytes.length - at);
			// The chunk's closing CRLF is not body.
			const body = bytes.subarray(at, at + Math.min(take, Math.max(0, due - CRLF.length)));
			received[i] += body.length;
			if (body.length) onBody(body);
			due -= take;
			at += take;
			if (due === 0) due = -1;
		}
		buffered = bytes.subarray(at);
	});
	socket.on("error", () => undefined);
	received[i] = 0;
	sockets.push(socket);
}

for (let i = 0; i < count; i++) listen(i, i < MEASURED ? delayReader() : () => {});

/**
 * Until no byte has come for QUIET_MS (5 s at most): the events of what was sent are all in, and
 * every stream is between two frames. False when the bytes never stopped.
 */
async function quiet(): Promise<boolean> {
	const deadline = Date.now() + 5000;
	while (Date.now() - lastData < QUIET_MS) {
		if (Date.now() >= deadline) return false;
		await new Promise(resolve => setTimeout(resolve, 50));
	}
	return true;
}

process.on("message", async message => {
	if (message === "reset") {
		const calm = await quiet();
		delays.length = 0;
		received.fill(0);
		cpuSinceReset = process.cpuUsage();
		return void process.send?.({ quiet: calm });
	}
	if (message !== "stop") return;
	await quiet();
	const cpu = process.cpuUsage(cpuSinceReset);
	for (const socket of sockets) socket.destroy();
	const sorted = delays.sort((a, b) => a - b);
	const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
	process.send?.(
		{
			events: sorted.length / Math.min(MEASURED, count),
			p50: at(0.5),
			p99: at(0.99),
			max: sorted[sorted.length - 1] ?? NaN,
			bytes: { fewest: Math.min(...received), most: Math.max(...received) },
			cpuMicros: cpu.user + cpu.system
		},
		() => process.exit(0)
	);
});
