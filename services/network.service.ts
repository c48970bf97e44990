/**
 * network: observation routes. Owns nothing: it asks the owners for their own figures.
 * This part answers POST / (MempoolStatusRequest → MempoolStatusResponse).
 */
import type { Context, ServiceSchema } from "moleculer";
import type { IntentState } from "../lib/intents";

const SECTIONS = ["epoch", "crankers", "counts"] as const;
type Section = (typeof SECTIONS)[number];

export function networkService(): ServiceSchema {
	return {
		name: "network",

		actions: {
			/** POST / */
			status: {
				params: { $$strict: true, include: { type: "array", items: { type: "enum", values: [...SECTIONS] }, unique: true, optional: true } },
				async handler(ctx: Context<{ include?: Section[] }>) {
					const include = new Set(ctx.params.include ?? SECTIONS);
					const [counts, epoch, crankersOnline] = await Promise.all([
						include.has("counts") ? ctx.call<Record<IntentState, number>>("mempool.counts") : undefined,
						include.has("epoch") ? ctx.call("epochs.status") : undefined,
						include.has("crankers") ? ctx.call<number>("crankers.onlineCount") : undefined
					]);
					return { ok: true, healthy: ctx.broker.started, counts, epoch, crankersOnline };
				}
			}
		}
	};
}
