/**
 * List answers sent as the JSON texts the store already holds (its kept views, CollectionSpec.views):
 * a list of 500 records is then its bytes copied once, not 500 parses and one serialization.
 */

/** The content type of an answer in JSON text. */
export const JSON_TEXT = "application/json; charset=utf-8";

/**
 * An action whose handler answers the JSON texts of a list's items to a caller that takes them
 * (forCaller): the gateway sends them as one JSON array (jsonArrayBuffer). moleculer-web reads
 * `responseType` from the action's definition, and a definition, with its `answersJsonTexts`,
 * reaches every node.
 */
export function answersJsonTexts<A extends object>(action: A): A & { responseType: string; answersJsonTexts: true } {
	return Object.assign(action, { responseType: JSON_TEXT, answersJsonTexts: true as const });
}

/** What a caller that takes JSON texts says in its call's meta. */
export interface TakesJsonTexts {
	jsonTexts?: boolean;
}

/**
 * The items as the caller takes them: their texts for a gateway of this version, which says so in
 * its meta, the parsed objects for one of an earlier version (a rolling update runs both).
 */
export function forCaller(texts: string[], meta: TakesJsonTexts): string[] | unknown[] {
	return meta.jsonTexts ? texts : texts.map(text => JSON.parse(text) as unknown);
}

/**
 * The JSON array of JSON texts, written into one buffer. Joining a megabyte of strings and then
 * encoding the result for the socket costs several times more (about 3 ms against 0.4 ms for 500
 * worker views on the development machine).
 */
export function jsonArrayBuffer(texts: readonly string[]): Buffer {
	let length = 2 + Math.max(0, texts.length - 1);
	for (const text of texts) length += Buffer.byteLength(text);
	const buffer = Buffer.allocUnsafe(length);
	let at = buffer.write("[");
	texts.forEach((text, i) => {
		if (i > 0) at += buffer.write(",", at);
		at += buffer.write(text, at);
	});
	buffer.write("]", at);
	return buffer;
}
