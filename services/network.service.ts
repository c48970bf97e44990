/**
 * network: observation routes (SPEC §8 and POST /). Owns nothing: it asks the owners for their
 * own figures and shapes them.
 */
import type { Context, Service, ServiceSchema } from "moleculer";
import type { Config } from "../lib/config";
import { ServiceError } from "../lib/errors";
import type { EpochStatus, MempoolStatus, Metrics, NetworkOverview, SettlementNetwork } from "../lib/answers";
import type { TotalsSnapshot } from "../lib/intent-totals";
import { PUBLIC_STATUS, type IntentState, type PublicStatus } from "../lib/intents";
import { AggregatorRegistry, Counter, Gauge, Registry } from "prom-client";
import { FailureStreak } from "../lib/failure-streak";
import { SharedReads } from "../lib/shared-reads";
import { histogramQuantile, isMetricSnapshot, type MetricFamily, type MetricsForm } from "./metrics";

const SECTIONS = ["epoch", "crankers", "counts"] as const;
type Section = (typeof SECTIONS)[number];

interface CrankerSummary {
	online: number;
	total: number;
	byRole: Record<string, number>;
	mints: Record<string, { liquidity: string; crankersOnline: number }>;
}

const VERIFICATIONS = "scs_verifications_total";
const VERIFICATION_DURATION = "scs_verification_duration_seconds";

/**
 * Every process's own metric families (services/metrics.ts), by node; with `names` (the JSON
 * figures' families, which only receivers keep), the receivers' only. A process that cannot answer
 * in 2 s is left out, and so is one whose answer is no snapshot (`onBad` is told its node); `asked`
 * names every node asked, so that the scrape can say which were left out (scs_metrics_node_up).
 */
async function processMetrics(ctx: Context, onBad: (nodeID: string) => void, names?: string[]): Promise<{ perNode: Map<string, MetricFamily[]>; asked: string[] }> {
	const services = ctx.broker.registry.getServiceList({ onlyAvailable: true, withActions: false });
	const nodesOf = (name: string) => new Set(services.filter(service => service.name === name).map(service => service.nodeID));
	const receivers = names ? nodesOf("receiver") : null;
	const nodes = [...nodesOf("metrics")].filter((nodeID): nodeID is string => typeof nodeID === "string" && (!receivers || receivers.has(nodeID)));
	const answers = await Promise.all(
		nodes.map(nodeID =>
			ctx.call<unknown, object>("metrics.snapshot", names ? { names } : {}, { nodeID, timeout: 2000 }).then(
				families => (isMetricSnapshot(families) ? ([nodeID, families] as const) : (onBad(nodeID), null)),
				() => null
			)
		)
	);
	return { perNode: new Map(answers.filter(answer => answer !== null)), asked: nodes };
}

/** The receivers' own verification figures: unrecorded bodies summed, and the slowest receiver's latency quantiles in ms. */
function verificationFigures(perNode: Map<string, MetricFamily[]>): { unrecorded: number; p50Ms: number; p99Ms: number } {
	let unrecorded = 0;
	let p50 = 0;
	let p99 = 0;
	for (const families of perNode.values()) {
		for (const family of families) {
			if (family.name === VERIFICATIONS) unrecorded += family.values.filter(v => v.labels.outcome === "unrecorded").reduce((sum, v) => sum + Number(v.value), 0);
			if (family.name !== VERIFICATION_DURATION) continue;
			const buckets = family.values
				.filter(v => v.metricName === `${VERIFICATION_DURATION}_bucket`)
				.map(v => ({ le: v.labels.le === "+Inf" ? Infinity : Number(v.labels.le), count: Number(v.value) }));
			p50 = Math.max(p50, histogramQuantile(0.5, buckets));
			p99 = Math.max(p99, histogramQuantile(0.99, buckets));
		}
	}
	const ms = (seconds: number) => Math.round(seconds * 100_000) / 100;
	return { unrecorded, p50Ms: ms(p50), p99Ms: ms(p99) };
}

/** The store's figures, as the mempool and the crankers owner answer them. */
interface StoreFigures {
	totals: TotalsSnapshot;
	crankers: CrankerSummary;
}

const STORE_FIGURES_UP = "scs_store_figures_up";
const NODE_UP = "scs_metrics_node_up";
/** How long a scrape waits for the store's figures before it is served without them. */
const STORE_FIGURES_TIMEOUT_MS = 3000;

/** The store's figures as Prometheus metrics, none set yet. */
function storeMetrics() {
	const registers = [new Registry()];
	const gauge = (name: string, help: string, labelNames: string[] = []) => new Gauge({ name, help, labelNames, registers });
	const counter = (name: string, help: string, labelNames: string[] = []) => new Counter({ name, help, labelNames, registers });
	return {
		registry: registers[0],
		up: gauge(STORE_FIGURES_UP, "1 when this scrape read the store's figures (the scs_ series without a node label), 0 when it could not and left them out."),
		intents: gauge("scs_intents", "Live payment intents per internal state.", ["state"]),
		settled: counter("scs_settled_intents_total", "Payment intents settled (CONFIRMED)."),
		volume: counter("scs_settled_volume_base_units_total", "Settled amount per token mint, in base units.", ["mint"]),
		verdicts: counter("scs_intent_verdicts_total", "Verification verdicts stored on intents, by verdict.", ["verdict"]),
		leasesActive: gauge("scs_leases_active", "Leases held now."),
		leasesExpired: counter("scs_leases_expired_total", "Leases the expiry sweep returned."),
		online: gauge("scs_crankers_online", "Crankers online, by role.", ["role"]),
		registered: gauge("scs_crankers_registered", "Cranker records stored, online or not.")
	};
}

/** The names of the store's families: a process's snapshot that names one is left out (prometheusText). */
const STORE_FAMILY_NAMES: ReadonlySet<string> = new Set(storeMetrics().registry.getMetricsAsArray().map(metric => metric.name));

/**
 * The store's figures, the same on every replica: in the Prometheus text once, without a node label.
 * Without them (the store or an owner down), only scs_store_figures_up 0: a zero would be a lie.
 */
async function clusterFamilies(figures: StoreFigures | null): Promise<MetricFamily[]> {
	const metrics = storeMetrics();
	metrics.up.set(figures ? 1 : 0);
	if (figures) {
		const { totals, crankers } = figures;
		for (const [state, n] of Object.entries(totals.live)) metrics.intents.set({ state }, n);
		metrics.settled.inc(totals.settled.count);
		// Per mint, as SPEC §8 has it: as many as Crankers settled (docs/security.md, settled mints).
		for (const [mint, amount] of Object.entries(totals.settled.volume)) metrics.volume.inc({ mint }, Number(amount));
		metrics.verdicts.inc({ verdict: "verified" }, totals.verdicts.verified);
		metrics.verdicts.inc({ verdict: "rejected" }, totals.verdicts.rejected);
		metrics.leasesActive.set(totals.live.CRANKER_LEASED);
		metrics.leasesExpired.inc(totals.lapsedLeases);
		for (const [role, n] of Object.entries(crankers.byRole)) metrics.online.set({ role }, n);
		metrics.registered.set(crankers.total);
	}
	const families = (await metrics.registry.getMetricsAsJSON()) as unknown as MetricFamily[];
	return figures ? families : families.filter(family => family.name === STORE_FIGURES_UP);
}

/**
 * Prometheus text of the whole cluster: each process's families with its `node` label, and the
 * store's figures once. A node's answer that names a store figure is left out whole: merged, it
 * would change that family's type or add to it.
 */
async function prometheusText({ perNode, asked }: { perNode: Map<string, MetricFamily[]>; asked: string[] }, cluster: MetricFamily[]): Promise<string> {
	const included = [...perNode].filter(([, families]) => !families.some(family => STORE_FAMILY_NAMES.has(family.name) || family.name === NODE_UP));
	// Which processes this scrape holds: one left out shows as 0, not as series that vanished.
	const registry = new Registry();
	const nodeUp = new Gauge({ name: NODE_UP, help: "1 when this scrape holds the node's own figures (its node-labelled series), 0 when the node was asked and did not answer them in 2 s, or answered no snapshot.", labelNames: ["node"], registers: [registry] });
	for (const node of asked) nodeUp.set({ node }, 0);
	for (const [node] of included) nodeUp.set({ node }, 1);
	const nodeUpFamilies = (await registry.getMetricsAsJSON()) as unknown as MetricFamily[];
	const labelled = included.map(([node, families]) =>
		families.map(family => ({
			...family,
			// Distinct node labels keep every series apart; `first` also keeps those prom-client would
			// otherwise omit when aggregating (process_start_time_seconds).
			aggregator: "first",
			values: family.values.map(value => ({ ...value, value: Number(value.value), labels: { ...value.labels, node } }))
		}))
	);
	return AggregatorRegistry.aggregate([...labelled, cluster, nodeUpFamilies]).metrics();
}

interface NetworkSettings {
	/** SOLANA_CLUSTER: the network every settlement network entry names. */
	solanaCluster: string;
}

interface NetworkVars {
	startedAt: Date;
	/**
	 * GET /metrics's collection of each form in flight, shared by the requests that come meanwhile:
	 * each asks every process over the bus, and many at once would ask as many times.
	 */
	collections: SharedReads<Metrics | string>;
	/** Scrapes without the store's figures: told when they start, once a minute while they last, and when they end. */
	storeFigures: FailureStreak;
}

interface NetworkMethods {
	readStoreFigures(ctx: Context): Promise<StoreFigures | null>;
	collectMetrics(ctx: Context, prometheus: boolean): Promise<Metrics | string>;
}

type NetworkThis = Service<NetworkSettings> & NetworkVars & NetworkMethods;

export function networkService(config: Config): ServiceSchema<NetworkSettings, NetworkMethods, NetworkVars, NetworkThis> {
	return {
		name: "network",
		settings: { solanaCluster: config.solanaCluster },

		actions: {
			/** POST / */
			status: {
				params: { $$strict: true, include: { type: "array", items: { type: "enum", values: [...SECTIONS] }, unique: true, optional: true } },
				async handler(ctx: Context<{ include?: Section[] }>): Promise<MempoolStatus> {
					const include = new Set(ctx.params.include ?? SECTIONS);
					const [counts, epoch, crankersOnline] = await Promise.all([
						include.has("counts") ? ctx.call<Record<IntentState, number>>("mempool.counts") : undefined,
						include.has("epoch") ? ctx.call<EpochStatus>("epochs.status") : undefined,
						include.has("crankers") ? ctx.call<number>("crankers.onlineCount") : undefined
					]);
					return { ok: true, healthy: ctx.broker.started, counts, epoch, crankersOnline };
				}
			},

			/**
			 * GET /metrics (JSON), or Prometheus text: the cluster's, whichever gateway answers. The
			 * gateway decides the form (metricsForm: ?format, else Accept) and checks METRICS_API_KEY
			 * for the text; this reads only its decision, so what is served is what was authorized.
			 */
			metrics: {
				params: { $$strict: true, format: { type: "enum", values: ["json", "prometheus"], optional: true } },
				handler(this: NetworkThis, ctx: Context<{ format?: "json" | "prometheus" }, { metricsForm?: MetricsForm; $responseType?: string }>): Promise<Metrics | string> {
					const prometheus = ctx.meta.metricsForm === "prometheus";
					if (prometheus) ctx.meta.$responseType = Registry.PROMETHEUS_CONTENT_TYPE;
					return this.collections.get(prometheus ? "prometheus" : "json", () => this.collectMetrics(ctx, prometheus));
				}
			},

			/** GET /network/overview */
			overview: {
				params: { $$strict: true },
				async handler(ctx: Context): Promise<NetworkOverview> {
					const [crankers, counts, epoch] = await Promise.all([
						ctx.call<CrankerSummary>("crankers.summary"),
						ctx.call<Record<IntentState, number>>("mempool.counts"),
						ctx.call<EpochStatus>("epochs.status")
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
				async handler(this: NetworkThis, ctx: Context): Promise<SettlementNetwork[]> {
					// An owner that cannot answer is a registry that cannot be read.
					await ctx.call("tin.check").catch(err => {
						throw (err as ServiceError).type === "REGISTRY_INVALID" ? err : new ServiceError("REGISTRY_INVALID", "The registry cannot be read");
					});
					const { mints } = await ctx.call<CrankerSummary>("crankers.summary");
					return Object.entries(mints)
						.filter(([, m]) => BigInt(m.liquidity) > 0n)
						.map(([tokenMintAddress, m]) => ({ network: this.settings.solanaCluster, tokenMintAddress, ready: true, liquidity: m.liquidity, crankersOnline: m.crankersOnline }));
				}
			}
		},

		methods: {
			async collectMetrics(this: NetworkThis, ctx, prometheus) {
				const onBad = (nodeID: string) => this.logger.warn(`The metrics of node ${nodeID} are no snapshot of this service's; left out of GET /metrics`);
				if (prometheus) {
					// Each process's own figures whatever the store: an outage is when they are wanted most.
					const [figures, processes] = await Promise.all([this.readStoreFigures(ctx), processMetrics(ctx, onBad)]);
					return prometheusText(processes, await clusterFamilies(figures));
				}
				const [totals, { perNode }] = await Promise.all([ctx.call<TotalsSnapshot>("mempool.totals"), processMetrics(ctx, onBad, [VERIFICATIONS, VERIFICATION_DURATION])]);
				return {
					uptimeSeconds: Math.floor((Date.now() - this.startedAt.getTime()) / 1000),
					startedAt: this.startedAt.toISOString(),
					intents: totals.live,
					settled: totals.settled,
					verification: { ...totals.verdicts, ...verificationFigures(perNode) },
					leases: { active: totals.live.CRANKER_LEASED, expired: totals.lapsedLeases }
				};
			},

			/**
			 * The store's figures for a scrape, or null when an owner cannot give them within a scrape's
			 * time (Prometheus waits 10 s by default, not the bus's 15 s: a store that hangs is one that fails).
			 */
			async readStoreFigures(this: NetworkThis, ctx) {
				const call = <T>(action: string) => ctx.call<T, object>(action, {}, { timeout: STORE_FIGURES_TIMEOUT_MS });
				try {
					const [totals, crankers] = await Promise.all([call<TotalsSnapshot>("mempool.totals"), call<CrankerSummary>("crankers.summary")]);
					const recovered = this.storeFigures.succeeded();
					if (recovered) this.logger.info(`GET /metrics: reading the store's figures ${recovered}`);
					return { totals, crankers };
				} catch (err) {
					const line = this.storeFigures.failed(`GET /metrics: the store's figures could not be read (${(err as Error).message}); served without them, scs_store_figures_up 0`);
					if (line) this.logger.warn(line);
					return null;
				}
			}
		} satisfies NetworkMethods & ThisType<NetworkThis>,

		created(this: NetworkThis) {
			this.startedAt = new Date();
			this.collections = new SharedReads();
			this.storeFigures = new FailureStreak();
		}
	};
}
