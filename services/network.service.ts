/**
 * network: observation routes (SPEC §8 and POST /). Owns nothing: it asks the owners for their
 * own figures and shapes them.
 */
import type { Context, ServiceSchema } from "moleculer";
import type { Config } from "../lib/config";
import { ServiceError } from "../lib/errors";
import type { TotalsSnapshot } from "../lib/intent-totals";
import { PUBLIC_STATUS, type IntentState, type PublicStatus } from "../lib/intents";

const SECTIONS = ["epoch", "crankers", "counts"] as const;
type Section = (typeof SECTIONS)[number];

interface CrankerSummary {
	online: number;
	total: number;
	byRole: Record<string, number>;
	mints: Record<string, { liquidity: string; crankersOnline: number }>;
}

/** One receiver process's own figures: what never reaches the store. */
interface ReceiverStats {
	/** Bodies refused without leaving a record, such as forgeries (SPEC §2.1). */
	unrecorded: number;
	p50Ms: number;
	p99Ms: number;
}

interface Metrics {
	uptimeSeconds: number;
	startedAt: string;
	intents: Record<IntentState, number>;
	settled: { count: number; volume: Record<string, string> };
	/**
	 * verified and rejected come from the store, the same on every replica; unrecorded is summed
	 * over the receivers running now, and the latencies are the slowest receiver's.
	 */
	verification: { verified: number; rejected: number; unrecorded: number; p50Ms: number; p99Ms: number };
	leases: { active: number; expired: number };
}

/** Every receiver process's own figures, by node: a process that cannot answer is left out. */
async function receiverStats(ctx: Context): Promise<Map<string, ReceiverStats>> {
	const nodes = ctx.broker.registry
		.getServiceList({ onlyAvailable: true, withActions: false })
		.filter(service => service.name === "receiver")
		.map(service => service.nodeID)
		.filter((nodeID): nodeID is string => typeof nodeID === "string");
	const answers = await Promise.all(
		[...new Set(nodes)].map(nodeID =>
			ctx.call<ReceiverStats, object>("receiver.stats", {}, { nodeID, timeout: 2000 }).then(
				stats => [nodeID, stats] as const,
				() => null
			)
		)
	);
	return new Map(answers.filter(answer => answer !== null));
}

/** Prometheus text exposition (version 0.0.4) of the same figures. */
function toPrometheus(metrics: Metrics, receivers: Map<string, ReceiverStats>): string {
	const lines: string[] = [];
	const metric = (name: string, type: "gauge" | "counter", help: string, samples: [labels: string, value: number | string][]) => {
		lines.push(`# HELP scs_${name} ${help}`, `# TYPE scs_${name} ${type}`);
		for (const [labels, value] of samples) lines.push(`scs_${name}${labels} ${value}`);
	};
	metric("uptime_seconds", "gauge", "Seconds since this node started.", [["", metrics.uptimeSeconds]]);
	metric("intents", "gauge", "Live payment intents per internal state.", Object.entries(metrics.intents).map(([state, n]) => [`{state="${state}"}`, n]));
	metric("settled_intents_total", "counter", "Payment intents settled (CONFIRMED).", [["", metrics.settled.count]]);
	metric("settled_volume_base_units_total", "counter", "Settled amount per token mint, in base units.", Object.entries(metrics.settled.volume).map(([mint, v]) => [`{mint="${mint}"}`, v]));
	metric("verifications_total", "counter", "Verification verdicts stored on intents.", [
		['{outcome="verified"}', metrics.verification.verified],
		['{outcome="rejected"}', metrics.verification.rejected]
	]);
	// Per process, labelled by node: Prometheus sums them (sum by (...)), and a restarted process
	// starts its own series again instead of making a cluster total go down.
	metric("unrecorded_rejections_total", "counter", "Bodies refused without a record (forgeries and the like), per receiver process.", [...receivers].map(([node, stats]) => [`{node="${node}"}`, stats.unrecorded]));
	metric("verification_latency_ms", "gauge", "Verification latency percentiles over the latest verdicts, per receiver process.", [...receivers].flatMap(([node, stats]) => [
		[`{node="${node}",quantile="0.5"}`, stats.p50Ms],
		[`{node="${node}",quantile="0.99"}`, stats.p99Ms]
	] as [string, number][]));
	metric("leases_active", "gauge", "Leases held now.", [["", metrics.leases.active]]);
	metric("leases_expired_total", "counter", "Leases returned by the expiry sweep.", [["", metrics.leases.expired]]);
	return `${lines.join("\n")}\n`;
}

export function networkService(config: Config): ServiceSchema {
	const startedAt = new Date();

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
			},

			/** GET /metrics (JSON), or Prometheus text with ?format=prometheus or `accept: text/plain`. */
			metrics: {
				params: { $$strict: true, format: { type: "enum", values: ["json", "prometheus"], optional: true } },
				async handler(ctx: Context<{ format?: "json" | "prometheus" }, { accept?: string; $responseType?: string }>) {
					const [totals, receivers] = await Promise.all([ctx.call<TotalsSnapshot>("mempool.totals"), receiverStats(ctx)]);
					const own = [...receivers.values()];
					const metrics: Metrics = {
						uptimeSeconds: Math.floor((Date.now() - startedAt.getTime()) / 1000),
						startedAt: startedAt.toISOString(),
						intents: totals.live,
						settled: totals.settled,
						verification: {
							...totals.verdicts,
							unrecorded: own.reduce((sum, stats) => sum + stats.unrecorded, 0),
							p50Ms: Math.max(0, ...own.map(stats => stats.p50Ms)),
							p99Ms: Math.max(0, ...own.map(stats => stats.p99Ms))
						},
						leases: { active: totals.live.CRANKER_LEASED, expired: totals.lapsedLeases }
					};
					const prometheus = ctx.params.format === "prometheus" || (ctx.params.format === undefined && /\btext\/plain\b/.test(ctx.meta.accept ?? ""));
					if (!prometheus) return metrics;
					ctx.meta.$responseType = "text/plain; version=0.0.4; charset=utf-8";
					return toPrometheus(metrics, receivers);
				}
			},

			/** GET /network/overview */
			overview: {
				params: { $$strict: true },
				async handler(ctx: Context) {
					const [crankers, counts, epoch] = await Promise.all([
						ctx.call<CrankerSummary>("crankers.summary"),
						ctx.call<Record<IntentState, number>>("mempool.counts"),
						ctx.call("epochs.status")
					]);
					const intents: Record<PublicStatus, number> = { pending: 0, executed: 0, canceled: 0 };
					for (const [state, n] of Object.entries(counts)) intents[PUBLIC_STATUS[state as IntentState]] += n;
					return {
						crankers: { online: crankers.online, total: crankers.total, byRole: crankers.byRole },
						liquidity: Object.fromEntries(Object.entries(crankers.mints).map(([mint, m]) => [mint, m.liquidity])),
						intents,
						epoch
					};
				}
			},

			/** GET /settlement-networks: one entry per mint an online settlement Cranker offers liquidity in. */
			settlementNetworks: {
				params: { $$strict: true },
				async handler(ctx: Context) {
					// An owner that cannot answer is a registry that cannot be read.
					await ctx.call("tin.check").catch(err => {
						throw (err as ServiceError).type === "REGISTRY_INVALID" ? err : new ServiceError("REGISTRY_INVALID", "The registry cannot be read");
					});
					const { mints } = await ctx.call<CrankerSummary>("crankers.summary");
					return Object.entries(mints)
						.filter(([, m]) => BigInt(m.liquidity) > 0n)
						.map(([tokenMintAddress, m]) => ({ network: config.solanaCluster, tokenMintAddress, ready: true, liquidity: m.liquidity, crankersOnline: m.crankersOnline }));
				}
			}
		}
	};
}
