/**
 * Recognising a repeat of the same call. A broker retry, or a redelivered request, reaches an
 * action with the same parent context as the first attempt; a new request never does, and no
 * client can choose it (unlike moleculer-web's requestID, taken from x-request-id). Over the bus
 * the parent is seen as a digest of its id (services/bus-guard.ts), the same for the same parent. A state
 * change stores this key with its write, and on a conflict that carries its own key answers as
 * the first attempt did instead of refusing its own replay.
 */
import type { Context } from "moleculer";

/** The key of this call from its caller, or null for a call made without a parent context. */
export function callKey(ctx: Context): string | null {
	return ctx.parentID ? `${ctx.parentID}/${ctx.action?.name ?? ctx.event?.name ?? ""}` : null;
}

/** Whether `stored` (the key a record was written with) proves the record is this call's own write. */
export function isOwnWrite(ctx: Context, stored: string | null | undefined): boolean {
	const key = callKey(ctx);
	return key !== null && stored === key;
}
