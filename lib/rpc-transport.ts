/**
 * Kit's HTTP transport with a bound on the answer, for every client of an RPC endpoint it does not
 * control (the Node, the Cranker, the SDK): web APIs only, so it runs in a browser too.
 */
import { SolanaError, SOLANA_ERROR__RPC__TRANSPORT_HTTP_ERROR, type RpcTransport } from "@solana/kit";
import { parseJsonWithBigInts, stringifyJsonWithBigInts } from "@solana/rpc-spec-types";
import { readTextAnswer } from "./json-answer";

/**
 * Kit's own transport reads an answer whole, however long an endpoint makes it, and then parses
 * every integer into a bigint on the event loop (about a second per MB of integers): one endpoint
 * could exhaust the memory, or hold the thread, of the process or page reading it. Past `maxBytes`
 * the read fails (AnswerTooLargeError). Solana's integers stay exact (bigints), as with kit's.
 */
export function cappedTransport(url: string, maxBytes: number): RpcTransport {
	return async ({ payload, signal }) => {
		const response = await fetch(url, {
			method: "POST",
			headers: { accept: "application/json", "content-type": "application/json; charset=utf-8" },
			body: stringifyJsonWithBigInts(payload),
			signal
		});
		if (!response.ok) {
			await response.body?.cancel().catch(() => {});
			throw new SolanaError(SOLANA_ERROR__RPC__TRANSPORT_HTTP_ERROR, { headers: response.headers, message: response.statusText, statusCode: response.status });
		}
		return parseJsonWithBigInts(await readTextAnswer(response, maxBytes)) as never;
	};
}
