/**
 * Server-sent events (the WHATWG `text/event-stream` format) read over a fetch body, for the SDK
 * (browsers and Node) and the Cranker. Fetch streaming instead of EventSource: Node has no
 * EventSource, and fetch lets the caller send headers (the worker key), read a refusal's status
 * (429, 404) and abort. Web APIs only, as the SDK bundles this file.
 */

export interface SseEvent {
	/** `event:`; "message" when the event named none. */
	type: string;
	/** Its `data:` lines, joined by "\n". */
	data: string;
	/** The stream's last `id:` so far (an event without one keeps the previous), "" if none. */
	id: string;
}

/**
 * The most characters one line, or one event's data, may hold: a stream that sends more without
 * ending it is refused (SseTooLargeError), not buffered without end. The service's events are a few
 * KB; a server that never ends a line must not exhaust its reader's memory.
 */
export const SSE_MAX_CHARS = 1 << 20;
/**
 * The reconnect delays a `retry:` field may ask for: `retry: 0` would make a reader reconnect in a
 * loop, and so would one past setTimeout's 2^31 − 1 ms, which fires at once.
 */
export const SSE_MIN_RETRY_MS = 500;
export const SSE_MAX_RETRY_MS = 60_000;

export class SseTooLargeError extends Error {
	constructor() {
		super(`an event-stream line or event passed ${SSE_MAX_CHARS} characters`);
		this.name = "SseTooLargeError";
	}
}

/** An incremental parser: decoded text goes in, in chunks cut anywhere; whole events come out. */
export class SseParser {
	/** The Last-Event-ID to reconnect with ("" if none). */
	lastEventId = "";
	// The `id:` read so far: lastEventId once its event is dispatched, never for one cut off (WHATWG's last event ID buffer).
	private idBuffer = "";
	/** The `retry:` delay, in ms. */
	retry: number | null = null;
	private pending = "";
	private started = false;
	private afterCr = false;
	private type = "";
	private data: string | null = null;

	/**
	 * A new connection of the same stream (a reconnect): what the last one was cut off in the middle
	 * of is dropped, and only the id of an event dispatched carries over.
	 */
	reconnected(): void {
		this.pending = "";
		this.started = false;
		this.afterCr = false;
		this.type = "";
		this.data = null;
		this.idBuffer = this.lastEventId;
	}

	push(chunk: string): SseEvent[] {
		if (!chunk) return [];
		// afterCr: the last chunk ended with CR, so an LF opening this one ends the same line.
		let text = this.pending + (this.afterCr && chunk.startsWith("\n") ? chunk.slice(1) : chunk);
		this.afterCr = chunk.endsWith("\r");
		// One byte order mark may open the stream.
		if (!this.started && text) {
			this.started = true;
			if (text.startsWith("\uFEFF")) text = text.slice(1);
		}
		// A chunk that ends no line only lengthens the one pending: not split again (a line sent a byte at a time).
		if (!/[\r\n]/.test(chunk)) {
			if (text.length > SSE_MAX_CHARS) throw new SseTooLargeError();
			this.pending = text;
			return [];
		}
		const lines = text.split(/\r\n|\r|\n/);
		this.pending = lines.pop()!;
		if (this.pending.length > SSE_MAX_CHARS) throw new SseTooLargeError();
		const events: SseEvent[] = [];
		for (const line of lines) {
			if (line === "") {
				// A blank line dispatches, and its id counts from then; one without data lines is no event.
				this.lastEventId = this.idBuffer;
				if (this.data !== null) events.push({ type: this.type || "message", data: this.data, id: this.lastEventId });
				this.type = "";
				this.data = null;
				continue;
			}
			const colon = line.indexOf(":");
			if (colon === 0) continue; // a comment (a heartbeat)
			const field = colon < 0 ? line : line.slice(0, colon);
			const value = colon < 0 ? "" : line.slice(line[colon + 1] === " " ? colon + 2 : colon + 1);
			if (field === "event") this.type = value;
			else if (field === "data") {
				this.data = this.data === null ? value : `${this.data}\n${value}`;
				if (this.data.length > SSE_MAX_CHARS) throw new SseTooLargeError();
			}
			else if (field === "id" && !value.includes("\0")) this.idBuffer = value;
			else if (field === "retry" && /^\d+$/.test(value)) this.retry = Math.min(Math.max(Number(value), SSE_MIN_RETRY_MS), SSE_MAX_RETRY_MS);
		}
		return events;
	}
}

/**
 * The events of `body` until it ends, an event at a time; `parser` may have read earlier connections
 * of the same stream (its Last-Event-ID). Leaving the loop early cancels the body,
 * so that a consumer done with the stream leaves no connection open. An event the stream ended in
 * the middle of is dropped, as the format wants. `silence` hears every chunk, heartbeats included.
 */
export async function* readEvents(body: ReadableStream<Uint8Array>, parser: SseParser, silence?: SilenceWatch): AsyncGenerator<SseEvent> {
	parser.reconnected();
	const reader = body.getReader();
	// The parser strips the one byte order mark the format allows; the decoder must leave it.
	const decoder = new TextDecoder("utf-8", { ignoreBOM: true });
	try {
		for (let read = await reader.read(); !read.done; read = await reader.read()) {
			silence?.heard();
			yield* parser.push(decoder.decode(read.value, { stream: true }));
		}
	} finally {
		await reader.cancel().catch(() => {});
	}
}

/**
 * Calls `onSilent` once a connection has sent nothing for `idleMs`, from its request on: one
 * dropped without a close (a gateway gone, a route lost) otherwise reads nothing, for good. The
 * service sends a heartbeat comment every 15 s, so three missed ones mean it is gone. Infinity:
 * never (a timer past 2^31 - 1 ms would fire at once).
 */
export class SilenceWatch {
	private timer: ReturnType<typeof setTimeout> | undefined;
	/** Whether the connection sent anything at all: the service writes a line as it opens a stream. */
	spoke = false;

	constructor(
		private readonly idleMs: number,
		private readonly onSilent: () => void
	) {
		this.arm();
	}

	stop(): void {
		clearTimeout(this.timer);
	}

	/** A sign of life: any chunk of the stream, an event or a heartbeat comment (readEvents calls it). */
	heard(): void {
		this.spoke = true;
		this.arm();
	}

	private arm(): void {
		clearTimeout(this.timer);
		if (this.idleMs !== Infinity) this.timer = setTimeout(this.onSilent, this.idleMs);
	}
}
