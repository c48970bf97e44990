/**
 * An HTTP answer's JSON read with a bound, for clients of a server they do not control (the
 * Cranker of its Node, the SDK of a gateway): web APIs only, so it runs in a browser too.
 */

/** The answer was longer than the reader allows; the rest was not read. */
export class AnswerTooLargeError extends Error {
	constructor(readonly maxBytes: number) {
		super(`the answer passed ${maxBytes} bytes`);
		this.name = "AnswerTooLargeError";
	}
}

/**
 * The answer's JSON, undefined when it is not JSON; past `maxBytes` an AnswerTooLargeError, the
 * body cancelled. A fetch without streaming bodies (React Native's, polyfills) is read whole, once
 * its content-length is within the bound.
 */
export async function readJsonAnswer(response: Response, maxBytes: number): Promise<unknown> {
	if (!response.body?.getReader) {
		if (Number(response.headers.get("content-length") ?? 0) > maxBytes) throw new AnswerTooLargeError(maxBytes);
		const text = await response.text();
		if (text.length > maxBytes) throw new AnswerTooLargeError(maxBytes);
		return parseJson(text);
	}
	const reader = response.body.getReader();
	const chunks: Uint8Array[] = [];
	let size = 0;
	for (;;) {
		const { done, value } = await reader.read();
		if (done) break;
		size += value.byteLength;
		if (size > maxBytes) {
			await reader.cancel().catch(() => {});
			throw new AnswerTooLargeError(maxBytes);
		}
		chunks.push(value);
	}
	const bytes = new Uint8Array(size);
	let offset = 0;
	for (const chunk of chunks) {
		bytes.set(chunk, offset);
		offset += chunk.byteLength;
	}
	return parseJson(new TextDecoder().decode(bytes));
}

/** The JSON value of `text`, undefined when it is not JSON. */
export function parseJson(text: string): unknown {
	try {
		return JSON.parse(text);
	} catch {
		return undefined;
	}
}
