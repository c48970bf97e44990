/**
 * A server-sent events client for the tests: node:http, the stream parsed as it arrives, so a
 * test can wait for the nth event, see comments (heartbeats), and see the server end the stream.
 */
import http from "node:http";

export interface SseEvent {
	id?: string;
	event: string;
	data: any;
}

export interface SseStream {
	status: number;
	headers: http.IncomingHttpHeaders;
	/** The body when the answer is not a stream (an error). */
	body: any;
	events: SseEvent[];
	comments: string[];
	/** The last `id:` the stream sent, with an event or without one (what a client resumes from). */
	lastEventId?: string;
	/** True once the server ended the response. */
	ended: boolean;
	/** How many reads the body arrived in (about how many writes the server made). */
	chunks: number;
	/** Resolves once `count` events arrived (or rejects after `timeoutMs`). */
	waitFor(count: number, timeoutMs?: number): Promise<SseEvent[]>;
	/** Resolves when the server ends the stream. */
	whenEnded(timeoutMs?: number): Promise<void>;
	close(): void;
}

export function openStream(url: string, headers: Record<string, string> = {}): Promise<SseStream> {
	return new Promise((resolve, reject) => {
		const req = http.get(url, { headers: { accept: "text/event-stream", ...headers } }, res => {
			const stream: SseStream = {
				status: res.statusCode ?? 0,
				headers: res.headers,
				body: undefined,
				events: [],
				comments: [],
				ended: false,
				chunks: 0,
				waitFor: (count, timeoutMs = 10_000) => until(() => stream.events.length >= count, timeoutMs, `${count} events (got ${stream.events.length})`).then(() => stream.events.slice(0, count)),
				whenEnded: (timeoutMs = 10_000) => until(() => stream.ended, timeoutMs, "the end of the stream"),
				close: () => req.destroy()
			};
			let text = "";
			res.setEncoding("utf8");
			if (!String(res.headers["content-type"]).startsWith("text/event-stream")) {
				res.on("data", chunk => (text += chunk));
				res.on("end", () => {
					stream.body = text ? JSON.parse(text) : undefined;
					stream.ended = true;
					resolve(stream);
				});
				return;
			}
			res.on("data", (chunk: string) => {
				stream.chunks++;
				text += chunk;
				let end: number;
				while ((end = text.indexOf("\n\n")) >= 0) {
					const block = text.slice(0, end);
					text = text.slice(end + 2);
					const fields = block.split("\n");
					stream.comments.push(...fields.filter(line => line.startsWith(":")).map(line => line.slice(1).trim()));
					const field = (name: string) => fields.find(line => line.startsWith(`${name}: `))?.slice(name.length + 2);
					if (field("id") !== undefined) stream.lastEventId = field("id");
					if (field("data") === undefined) continue; // retry:, a heartbeat or an id only
					stream.events.push({ id: field("id"), event: field("event") ?? "message", data: JSON.parse(field("data")!) });
				}
			});
			res.on("end", () => (stream.ended = true));
			res.on("close", () => (stream.ended = true));
			resolve(stream);
		});
		req.on("error", reject);
	});
}

async function until(done: () => boolean, timeoutMs: number, what: string): Promise<void> {
	const deadline = Date.now() + timeoutMs;
	while (!done()) {
		if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
		await new Promise(resolve => setTimeout(resolve, 10));
	}
}
