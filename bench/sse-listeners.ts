/**
 * SSE listeners for bench:intents, in a process of their own so that their parsing does not slow
 * the load generator: `count` streams of GET /events (new VERIFIED intents), each event's delay
 * from its state change (`at`) to its arrival recorded. On "stop" from the parent it answers
 * { events, p50, p99, max } in ms and exits.
 *
 *   node dist/bench/sse-listeners.js <url> <worker key> <count>
 */
import http from "node:http";

const [url, apiKey, countText] = process.argv.slice(2);
const delays: number[] = [];
const requests: http.ClientRequest[] = [];
let opened = 0;

for (let i = 0; i < Number(countText); i++) {
	const req = http.get(`${url}/events?types=intent.status_changed&states=VERIFIED`, { headers: { "x-api-key": apiKey, accept: "text/event-stream" }, agent: false }, res => {
		if (res.statusCode !== 200) {
			process.stderr.write(`listener ${i}: HTTP ${res.statusCode}\n`);
			process.exit(1);
		}
		if (++opened === Number(countText)) process.send?.({ ready: true });
		let text = "";
		res.setEncoding("utf8");
		res.on("data", (chunk: string) => {
			text += chunk;
			let end: number;
			// Only the time of each change is read: a full JSON.parse per event per listener would
			// take the cores the service is measured on.
			let start = 0;
			while ((end = text.indexOf("\n\n", start)) >= 0) {
				const at = text.indexOf('"at":"', start);
				if (at >= 0 && at < end) delays.push(Date.now() - Date.parse(text.slice(at + 6, at + 30)));
				start = end + 2;
			}
			text = text.slice(start);
		});
	});
	req.on("error", () => undefined);
	requests.push(req);
}

process.on("message", message => {
	if (message !== "stop") return;
	for (const req of requests) req.destroy();
	const sorted = delays.sort((a, b) => a - b);
	const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
	process.send?.({ events: sorted.length, p50: at(0.5), p99: at(0.99), max: sorted[sorted.length - 1] ?? NaN }, () => process.exit(0));
});
