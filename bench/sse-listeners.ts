/**
 * SSE listeners for bench:intents, in a process of their own so that their work does not slow
 * the load generator: `count` streams of GET /events (new VERIFIED intents). The service sends
 * every event to every listener; the first MEASURED of them also read each event's delay from its
 * state change (`at`) to its arrival, the others only count the bytes. On "stop" from the parent
 * it answers { events, p50, p99, max } in ms (over the measured listeners) and the fewest and most
 * bytes a listener received (equal when none missed anything), and exits.
 *
 *   node dist/bench/sse-listeners.js <url> <worker key> <count>
 */
import http from "node:http";

/**
 * Listeners that parse what they receive. Parsing all hundred streams took this process about as
 * much CPU as the service spends on them, on the cores the service is measured on; the service
 * treats every stream alike, so ten tell the delay.
 */
const MEASURED = 10;
const FRAME_END = Buffer.from("\n\n");
const AT = Buffer.from('"at":"');

const [url, apiKey, countText] = process.argv.slice(2);
const count = Number(countText);
const delays: number[] = [];
const received: number[] = [];
const requests: http.ClientRequest[] = [];
let opened = 0;

function measureDelays(res: http.IncomingMessage): void {
	let rest: Buffer = Buffer.alloc(0);
	res.on("data", (chunk: Buffer) => {
		const bytes = rest.length ? Buffer.concat([rest, chunk]) : chunk;
		const now = Date.now();
		let start = 0;
		let end: number;
		while ((end = bytes.indexOf(FRAME_END, start)) >= 0) {
			const at = bytes.indexOf(AT, start);
			if (at >= 0 && at < end) delays.push(now - Date.parse(bytes.toString("latin1", at + AT.length, at + AT.length + 24)));
			start = end + FRAME_END.length;
		}
		rest = bytes.subarray(start);
	});
}

for (let i = 0; i < count; i++) {
	const req = http.get(`${url}/events?types=intent.status_changed&states=VERIFIED`, { headers: { "x-api-key": apiKey, accept: "text/event-stream" }, agent: false }, res => {
		if (res.statusCode !== 200) {
			process.stderr.write(`listener ${i}: HTTP ${res.statusCode}\n`);
			process.exit(1);
		}
		if (++opened === count) process.send?.({ ready: true });
		received[i] = 0;
		res.on("data", (chunk: Buffer) => {
			received[i] += chunk.length;
			lastData = Date.now();
		});
		if (i < MEASURED) measureDelays(res);
	});
	req.on("error", () => undefined);
	requests.push(req);
}

/** The last events of a phase are still on their way when its last answer arrives: wait for a quiet spell. */
const QUIET_MS = 300;
let lastData = Date.now();

process.on("message", async message => {
	if (message !== "stop") return;
	const deadline = Date.now() + 5000;
	while (Date.now() - lastData < QUIET_MS && Date.now() < deadline) await new Promise(resolve => setTimeout(resolve, 50));
	for (const req of requests) req.destroy();
	const sorted = delays.sort((a, b) => a - b);
	const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
	process.send?.(
		{ events: sorted.length / Math.min(MEASURED, count), p50: at(0.5), p99: at(0.99), max: sorted[sorted.length - 1] ?? NaN, bytes: { fewest: Math.min(...received), most: Math.max(...received) } },
		() => process.exit(0)
	);
});
