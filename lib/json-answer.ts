/**
 * An HTTP answer read with a bound, for clients of a server they do not control (a Node, a
 * gateway, an RPC endpoint): web APIs only, so it runs in a browser too.
 */

/** The answer was longer than the reader allows; the rest was not read. */
export class AnswerTooLargeError extends Error {
	constructor(readonly maxBytes: number) {
		super(`the answer passed ${maxBytes} bytes`);
		this.name = "AnswerTooLargeError";
	}
}

/** readTextAnswer's JSON, undefined when it is not JSON. */
export async function readJsonAnswer(response: Response, maxBytes: number): Promise<unknown> {
	return parseJson(await readTextAnswer(response, maxBytes));
}

/**
 * The answer's text; past `maxBytes` (decoded) an AnswerTooLargeError, the body cancelled. A fetch
 * without streaming bodies (React Native's, polyfills) reads it whole, once its length is allowed.
 */
export async function readTextAnswer(response: Response, maxBytes: number): Promise<string> {
	if (!response.body?.getReader) {
		if (Number(response.headers.get("content-length") ?? 0) > maxBytes) throw new AnswerTooLargeError(maxBytes);
		const text = await response.text();
		if (text.length > maxBytes) throw new AnswerTooLargeError(maxBytes);
		return text;
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
	return new TextDecoder().decode(bytes);
}

/** The JSON value of `text`, undefined when it is not JSON. */
export function parseJson(text: string): unknown {
	try {
		return JSON.parse(text);
	} catch {
		return undefined;
	}
}
