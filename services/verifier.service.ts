/**
 * verifier: pure verification of signed payment authorizations (SPEC §1). Stateless and
 * horizontally scaled; callers reach it with the Shard strategy keyed by the sender's wallet, so a
 * sender's intents stay on one verifier (and its key cache) while the pool grows.
 */
import type { Context, ServiceSchema } from "moleculer";
import type { Config } from "../lib/config";
import type { CreateIntentRequest } from "../lib/intents";
import type { ActiveRoute } from "../lib/registry";
import { SlotObserver } from "../lib/slot-observer";
import { verifyPaymentAuthorization, type VerificationResult } from "../lib/verification";
import { verifierMetrics } from "./metrics";

/** Routes change rarely; the TTL bounds how long a lost change event can leave a stale entry. */
const ROUTE_CACHE_TTL_MS = 5000;

export function verifierService(config: Config): ServiceSchema {
	const routeCache = new Map<string, { route: ActiveRoute | null; until: number }>();
	let slots: SlotObserver;
	let checks: ReturnType<typeof verifierMetrics>;

	async function routeOf(ctx: Context, tin: string): Promise<ActiveRoute | null> {
		const cached = routeCache.get(tin);
		if (cached && cached.until > Date.now()) return cached.route;
		const route = await ctx.call<ActiveRoute | null, object>("tin.resolve", { tin });
		routeCache.set(tin, { route, until: Date.now() + ROUTE_CACHE_TTL_MS });
		return route;
	}

	return {
		name: "verifier",

		actions: {
			verify: {
				strategy: "Shard",
				strategyOptions: { shardKey: "request.senderWallet" },
				// Shape-checked at intake by the receiver (createIntentParams), the only caller.
				params: { request: "object" },
				async handler(ctx: Context<{ request: CreateIntentRequest }>): Promise<VerificationResult & { verifiedBy: string }> {
					const { request } = ctx.params;
					const result = verifyPaymentAuthorization(request, {
						nowMs: Date.now(),
						latestSlot: slots.latest(),
						route: await routeOf(ctx, request.recipientTin)
					});
					checks.inc({ result: result.ok ? "ok" : "refused" });
					return { ...result, verifiedBy: `verifier@${ctx.broker.nodeID}` };
				}
			}
		},

		events: {
			"registry.routeChanged": {
				params: { tin: "string" },
				handler(ctx: Context<{ tin: string }>) {
					routeCache.delete(ctx.params.tin);
				}
			}
		},

		created() {
			checks = verifierMetrics(this.broker);
			slots = new SlotObserver(config.solanaRpcUrl, config.slotPollIntervalMs, message => this.logger.warn(message));
		},

		async started() {
			await slots.start();
		},

		stopped() {
			slots.stop();
		}
	};
}
