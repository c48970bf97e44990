/**
 * Answers sent as JSON text the store already holds (its kept views, CollectionSpec.views): a list
 * of 500 records is then its bytes joined, not 500 parses and one serialization of the whole.
 */

/** The content type of an answer in JSON text. */
export const JSON_TEXT = "application/json; charset=utf-8";

/**
 * An action whose handler answers JSON text: moleculer-web sends a string answer as it is when
 * the action's definition names its `responseType`, and a definition reaches every node.
 */
export function answersJsonText<A extends object>(action: A): A {
	return Object.assign(action, { responseType: JSON_TEXT });
}

/** A JSON array of JSON texts. */
export function jsonArray(texts: readonly string[]): string {
	return `[${texts.join(",")}]`;
}
