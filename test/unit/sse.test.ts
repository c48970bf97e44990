/** lib/sse.ts: the text/event-stream parser the SDK and the Cranker share, against the WHATWG rules. */
import { SSE_MAX_CHARS, SSE_MAX_RETRY_MS, SSE_MIN_RETRY_MS, SilenceWatch, SseParser, SseTooLargeError, readEvents, type SseEvent } from "../../lib/sse";

const parse = (...chunks: string[]): { events: SseEvent[]; parser: SseParser } => {
	const parser = new SseParser();
	return { events: chunks.flatMap(chunk => parser.push(chunk)), parser };
};

/** A byte stream that hands out `chunks` and records whether it was cancelled. */
function byteStream(chunks: Uint8Array[]): { stream: ReadableStream<Uint8Array>; cancelled: () => boolean } {
	let cancelled = false;
	let next = 0;
	const stream = new ReadableStream<Uint8Array>({
		pull(controller) {
			if (next < chunks.length) controller.enqueue(chunks[next++]);
			else controller.close();
		},
		cancel() {
			cancelled = true;
		}
	});
	return { stream, cancelled: () => cancelled };
}

describe("SseParser", () => {
	it("refuses a line, or an event's data, longer than SSE_MAX_CHARS instead of holding it without end (a review's replay)", () => {
		const endless = new SseParser();
		const piece = "x".repeat(64 * 1024);
		expect(() => {
			for (let i = 0; i <= SSE_MAX_CHARS / piece.length; i++) endless.push(i === 0 ? `data: ${piece}` : piece);
		}).toThrow(SseTooLargeError);
		const lines = new SseParser();
		expect(() => {
			for (let i = 0; i <= SSE_MAX_CHARS / piece.length; i++) lines.push(`data: ${piece}\n`);
		}).toThrow(SseTooLargeError);
		// A line a byte at a time is still read whole.
		const bytewise = new SseParser();
		const events = [..."data: {\"a\":1}\n\n"].flatMap(ch => bytewise.push(ch));
		expect(events).toEqual([{ type: "message", data: '{"a":1}', id: "" }]);
	});

	it("reads the service's events: id, event, data, the retry field and heartbeat comments", () => {
		const { events, parser } = parse('retry: 2000\n\nid: 7\nevent: status\ndata: {"a":1}\n\n: heartbeat\n\nid: 9\nevent: status\ndata: {"a":2}\n\n');
		expect(events).toEqual([
			{ type: "status", data: '{"a":1}', id: "7" },
			{ type: "status", data: '{"a":2}', id: "9" }
		]);
		expect(parser).toMatchObject({ lastEventId: "9", retry: 2000 });
	});

	it("takes an id when its event is dispatched, so a stream cut after `id:` resumes after the last whole event", () => {
		const cut = parse("id: 7\ndata: a\n\nid: 8\nevent: status\n");
		expect(cut.events.map(e => e.id)).toEqual(["7"]);
		expect(cut.parser.lastEventId).toBe("7");
		// A block with an id and no data dispatches no event, but its id counts (WHATWG).
		expect(parse("id: 7\ndata: a\n\nid: 8\n\n").parser.lastEventId).toBe("8");
	});

	it("joins data lines with \\n, and takes CRLF, CR and LF alike as line ends", () => {
		expect(parse("data: one\r\ndata: two\rdata: three\n\r\n").events).toEqual([{ type: "message", data: "one\ntwo\nthree", id: "" }]);
	});

	it("gives the same events however the text is cut into chunks, a CRLF cut in two included", () => {
		const text = "\uFEFFid: 1\r\nevent: a\r\ndata: x\r\ndata:y\r\n\r\n: c\r\rdata\r\rid: 2\ndata:  z\n\n";
		const whole = parse(text).events;
		expect(whole).toEqual([
			{ type: "a", data: "x\ny", id: "1" },
			{ type: "message", data: "", id: "1" },
			{ type: "message", data: " z", id: "2" }
		]);
		for (let cut = 0; cut <= text.length; cut++) expect(parse(text.slice(0, cut), text.slice(cut)).events).toEqual(whole);
		expect(parse(...text.split("")).events).toEqual(whole);
		// A CR ending a chunk and an LF opening the next end one line, not two: no empty line dispatched between.
		expect(parse("data: a\r", "\ndata: b\n\n").events).toEqual([{ type: "message", data: "a\nb", id: "" }]);
		// Two CRs, one a chunk, are two line ends: the second dispatches.
		expect(parse("data: a\r", "\r").events).toEqual([{ type: "message", data: "a", id: "" }]);
	});

	it("strips one byte order mark at the start of the stream, no more", () => {
		expect(parse("\uFEFFdata: a\n\n").events).toEqual([{ type: "message", data: "a", id: "" }]);
		// A second one makes the field name "\uFEFFdata", which is ignored.
		expect(parse("\uFEFF\uFEFFdata: a\n\n").events).toEqual([]);
		expect(parse("data: a\n\n\uFEFFdata: b\n\n").events).toEqual([{ type: "message", data: "a", id: "" }]);
	});

	it("dispatches nothing for a block without data, and forgets its event name", () => {
		expect(parse("event: status\n\ndata: a\n\n").events).toEqual([{ type: "message", data: "a", id: "" }]);
	});

	it("keeps the last id across events, ignores one with a NUL, and an empty id resets it", () => {
		const { events } = parse("id: 5\ndata: a\n\ndata: b\n\nid: 6\0\ndata: c\n\nid\ndata: d\n\n");
		expect(events.map(event => event.id)).toEqual(["5", "5", "5", ""]);
	});

	it("takes retry only as digits, and ignores unknown fields", () => {
		expect(parse("retry: 1500\nretry: 2s\nfoo: bar\ndata: a\n\n").parser.retry).toBe(1500);
		expect(parse("retry: x\n").parser.retry).toBeNull();
		// A server's retry: 0 would have its readers reconnect in a loop (a review's replay).
		expect(parse("retry: 0\n").parser.retry).toBe(SSE_MIN_RETRY_MS);
		expect(parse("retry: 99999999999\n").parser.retry).toBe(SSE_MAX_RETRY_MS);
	});
});

describe("readEvents", () => {
	it("decodes UTF-8 cut anywhere and drops the event the stream ended in", async () => {
		const bytes = new TextEncoder().encode('id: 1\ndata: {"name":"Zoë €"}\n\nid: 2\ndata: cut off');
		const { stream, cancelled } = byteStream([...bytes].map(byte => Uint8Array.of(byte)));
		const parser = new SseParser();
		const events: SseEvent[] = [];
		for await (const event of readEvents(stream, parser)) events.push(event);
		expect(events).toEqual([{ type: "message", data: '{"name":"Zoë €"}', id: "1" }]);
		// The id of the event cut off never counts: a reconnect resumes after the last whole one, and gets event 2.
		expect(parser.lastEventId).toBe("1");
		expect(cancelled()).toBe(false); // it ended by itself
	});

	it("reads a reconnect with the same parser afresh: what the cut connection left half-read neither dispatches nor lends its id", async () => {
		const parser = new SseParser();
		const read = async (text: string) => {
			const events: SseEvent[] = [];
			for await (const event of readEvents(byteStream([new TextEncoder().encode(text)]).stream, parser)) events.push(event);
			return events;
		};
		for (const cut of ["id: 8\nevent: status\n", 'id: 8\nevent: status\ndata: {"state":"EXEC']) {
			expect(await read(`id: 7\ndata: a\n\n${cut}`)).toEqual([{ type: "message", data: "a", id: "7" }]);
			expect(parser.lastEventId).toBe("7");
			// The service's reconnect answer opens with its retry block, a blank line of its own.
			expect(await read('retry: 2000\n\nid: 8\nevent: status\ndata: {"state":"EXECUTED"}\n\n')).toEqual([{ type: "status", data: '{"state":"EXECUTED"}', id: "8" }]);
			expect(parser.lastEventId).toBe("8");
		}
	});

	it("cancels the body when the consumer stops early: no connection left open", async () => {
		const { stream, cancelled } = byteStream([new TextEncoder().encode("data: a\n\ndata: b\n\n"), new TextEncoder().encode("data: c\n\n")]);
		for await (const event of readEvents(stream, new SseParser())) if (event.data === "a") break;
		expect(cancelled()).toBe(true);
	});
});

describe("SilenceWatch", () => {
	it("hears every chunk readEvents reads, heartbeats included, without TransformStream (browsers that lack it); fires once they stop", async () => {
		const saved = globalThis.TransformStream;
		Reflect.deleteProperty(globalThis, "TransformStream");
		let silent = 0;
		const silence = new SilenceWatch(80, () => silent++);
		try {
			// Five heartbeats 40 ms apart: each restarts the 80 ms watch, so it does not fire while they come.
			let sent = 0;
			const stream = new ReadableStream<Uint8Array>({
				async pull(controller) {
					await new Promise(resolve => setTimeout(resolve, 40));
					if (sent++ === 5) return controller.close();
					controller.enqueue(new TextEncoder().encode(": heartbeat\n\n"));
				}
			});
			for await (const event of readEvents(stream, new SseParser(), silence)) throw new Error(`no event expected: ${event.type}`);
			expect(silent).toBe(0);
			await new Promise(resolve => setTimeout(resolve, 120));
			expect(silent).toBe(1);
		} finally {
			silence.stop();
			globalThis.TransformStream = saved;
		}
	});

	it("never fires with Infinity, which a timer would take for at once", async () => {
		let silent = 0;
		const silence = new SilenceWatch(Infinity, () => silent++);
		await new Promise(resolve => setTimeout(resolve, 30));
		silence.heard();
		await new Promise(resolve => setTimeout(resolve, 30));
		silence.stop();
		expect(silent).toBe(0);
	});
});
