/**
 * Each process's own Prometheus metrics (prom-client). The process and Node.js runtime metrics
 * belong to the process; the counters and histograms of a service live in a registry of its
 * broker, so a process exposes only the families of the services it runs. The `metrics` service,
 * in every process, answers its figures to the gateway, which renders the whole cluster's
 * (network.metrics). Figures every replica reads alike from the store are not here: the network
 * service adds them once per scrape.
 */
import type { Context, ServiceBroker, ServiceSchema } from "moleculer";
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import { registerProcessMetrics } from "../lib/process-metrics";
import { VERIFY_FALLBACKS } from "../lib/verify-pool";
import { internal } from "./internal";

/** One metric family as `registry.getMetricsAsJSON()` gives it; NaN and ±Inf travel as strings (JSON has no such numbers). */
export interface MetricFamily {
	name: string;
	help: string;
	type: string;
	aggregator: string;
	values: { value: number | string; labels: Record<string, string | number>; metricName?: string }[];
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const METRIC_TYPES = new Set(["counter", "gauge", "histogram", "summary"]);
/** More than any process of ours has (a few hundred series): past it, an answer is no snapshot of ours. */
const SNAPSHOT_SERIES_MAX = 20_000;

/**
 * Whether another process's snapshot is one the Prometheus text and the JSON figures can take: a
 * node of any group answers its own, so a wrong or hostile one (a name with a space, a type
 * Prometheus does not know, null) must not break or falsify the whole cluster's. Values as
 * snapshot() sends them: finite numbers, else the text of NaN or an infinity.
 */
export function isMetricSnapshot(answer: unknown): answer is MetricFamily[] {
	if (!Array.isArray(answer)) return false;
	let series = 0;
	return answer.every(family => {
		if (typeof family !== "object" || family === null) return false;
		const { name, help, type, values } = family as Partial<MetricFamily>;
		if (typeof name !== "string" || !METRIC_NAME.test(name) || typeof help !== "string" || typeof type !== "string" || !METRIC_TYPES.has(type) || !Array.isArray(values)) return false;
		series += values.length;
		return (
			series <= SNAPSHOT_SERIES_MAX &&
			values.every(({ value, labels, metricName }) => {
				const numeric = typeof value === "number" ? Number.isFinite(value) : value === "NaN" || value === "Infinity" || value === "-Infinity";
				const labelled = typeof labels === "object" && labels !== null && Object.entries(labels).every(([key, text]) => LABEL_NAME.test(key) && (typeof text === "string" || typeof text === "number"));
				return numeric && labelled && (metricName === undefined || (typeof metricName === "string" && METRIC_NAME.test(metricName)));
			})
		);
	});
}

/** Verification and authorization take milliseconds; an HTTP request up to the 30 s request limit. */
const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

let runtime: Registry | null = null;
/** The process and Node.js runtime metrics (standard `process_` and `nodejs_` names): one set per process. */
function runtimeRegistry(): Registry {
	if (!runtime) {
		runtime = new Registry();
		registerProcessMetrics(runtime);
	}
	return runtime;
}

const registries = new WeakMap<ServiceBroker, Registry>();
/** The registry of the services this broker runs. */
function serviceRegistry(broker: ServiceBroker): Registry {
	let registry = registries.get(broker);
	if (!registry) registries.set(broker, (registry = new Registry()));
	return registry;
}

/** A family is registered once per broker, by whichever of its services asks first. */
function counter<L extends string>(broker: ServiceBroker, name: string, help: string, labelNames: readonly L[], known: Partial<Record<L, string>>[] = []): Counter<L> {
	const registry = serviceRegistry(broker);
	const existing = registry.getSingleMetric(name) as Counter<L> | undefined;
	if (existing) return existing;
	const created = new Counter<L>({ name, help, labelNames, registers: [registry] });
	// Known series start at 0, so rate() sees their first increment.
	for (const labels of known) created.inc(labels, 0);
	return created;
}

function histogram<L extends string>(broker: ServiceBroker, name: string, help: string, labelNames: readonly L[] = [], buckets = LATENCY_BUCKETS): Histogram<L> {
	const registry = serviceRegistry(broker);
	return (registry.getSingleMetric(name) as Histogram<L> | undefined) ?? new Histogram<L>({ name, help, labelNames, buckets, registers: [registry] });
}

/** A gauge the process sets itself (collected with its registry, like the counters). */
function liveGauge<L extends string>(broker: ServiceBroker, name: string, help: string, labelNames: readonly L[]): Gauge<L> {
	const registry = serviceRegistry(broker);
	return (registry.getSingleMetric(name) as Gauge<L> | undefined) ?? new Gauge<L>({ name, help, labelNames, registers: [registry] });
}

/** The event logs (outbox): events the owners of this process committed, by stream. */
export function eventMetrics(broker: ServiceBroker) {
	return counter(broker, "scs_events_written_total", "Events committed to the event logs, by stream.", ["stream"]);
}

/** The gateway's open event streams (SSE), by route, and the time from an event's change to its sending. */
export function eventStreamMetrics(broker: ServiceBroker) {
	return {
		open: liveGauge(broker, "scs_event_streams_open", "Event streams (SSE) open on this gateway, by route.", ["route"]),
		lag: histogram(broker, "scs_event_stream_lag_seconds", "Time from a state change to its event being handed to the live streams of this gateway."),
		readFailures: counter(broker, "scs_event_stream_read_failures_total", "Failed reads of an event log by this gateway's shared stream reader, by stream.", ["stream"], [{ stream: "intents" }, { stream: "tin_operations" }])
	};
}

const each = <L extends string>(label: L, values: readonly string[]) => values.map(value => ({ [label]: value }) as Record<L, string>);

/** The gateway's requests, by route template (never the raw URL: `unmatched` for a path no route has). */
export function httpMetrics(broker: ServiceBroker) {
	return {
		requests: counter(broker, "scs_http_requests_total", "HTTP requests the gateway is done with, by the status answered; 499 when the connection closed before the answer was sent whole.", ["method", "route", "status"]),
		duration: histogram(broker, "scs_http_request_duration_seconds", "Time from a request's arrival to its answer sent whole or its connection's close (an event stream's life).", ["method", "route"]),
		openConnections: liveGauge(broker, "scs_http_connections_open", "Connections open on this gateway (event streams included).", []),
		refusedConnections: counter(
			broker,
			"scs_http_connections_refused_total",
			"Connections the gateway closed unanswered, by the limit reached (process: MAX_CONNECTIONS, client: MAX_CONNECTIONS_PER_CLIENT, pipelined: more requests pipelined on one than it answers at once).",
			["limit"],
			each("limit", ["process", "client", "pipelined"])
		)
	};
}

const VERIFICATION_OUTCOMES = ["verified", "rejected", "unrecorded"] as const;

/** The receiver's verdicts: at intake and in its sweep. `unrecorded`: bodies refused without a record (forgeries and the like). */
export function verificationMetrics(broker: ServiceBroker) {
	return {
		outcomes: counter(broker, "scs_verifications_total", "Verdicts this receiver applied, by outcome.", ["outcome"], each("outcome", VERIFICATION_OUTCOMES)),
		duration: histogram(broker, "scs_verification_duration_seconds", "Time from asking a verifier to the stored outcome, for verdicts that leave a record.")
	};
}

/** A verifier's checks, by result (per node: how the shard ring spreads the work), and its fallbacks off its verify threads. */
export function verifierMetrics(broker: ServiceBroker) {
	return {
		checks: counter(broker, "scs_verifier_checks_total", "Payment authorizations this verifier checked, by result.", ["result"], each("result", ["ok", "refused"])),
		fallbacks: counter(
			broker,
			"scs_verifier_thread_fallbacks_total",
			"Signatures sent to a verify worker thread but verified on the event loop, because the worker was lost or answered for other jobs, by reason.",
			["reason"],
			each("reason", VERIFY_FALLBACKS)
		)
	};
}

const LEASE_EVENTS = ["granted", "renewed", "released", "expired"] as const;
export type LeaseEvent = (typeof LEASE_EVENTS)[number];

/** Leases as the mempool moves them: granted, renewed and released by Crankers, expired by the lease sweep. */
export function leaseMetrics(broker: ServiceBroker) {
	return counter(broker, "scs_lease_events_total", "Lease changes this mempool stored, by event.", ["event"], each("event", LEASE_EVENTS));
}

const PAYOUT_RESULTS = ["issued", "repeated", "refused", "failed"] as const;
export type PayoutResult = (typeof PAYOUT_RESULTS)[number];

/** Payout authorizations: a fresh one signed, the valid one repeated to its holder, a refusal (4xx) or a failure. */
export function payoutMetrics(broker: ServiceBroker) {
	return {
		results: counter(broker, "scs_payout_authorizations_total", "Payout authorization requests, by result.", ["result"], each("result", PAYOUT_RESULTS)),
		duration: histogram(broker, "scs_payout_authorization_duration_seconds", "Time to answer a payout authorization request.")
	};
}

const WEBHOOK_OUTCOMES = ["delivered", "failed", "disabled", "deferred", "missed"] as const;
/** A delivery waits for its retries (up to WEBHOOK_RETRY_FOR_MS, 24 h by default), not only for its request. */
const WEBHOOK_LAG_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600];

/** Webhook attempts by this delivery worker: delivered (2xx), failed (retried later), disabled (failed past the retry window). */
export function webhookMetrics(broker: ServiceBroker) {
	return {
		attempts: counter(broker, "scs_webhook_deliveries_total", "Webhook delivery attempts, by outcome.", ["outcome"], each("outcome", WEBHOOK_OUTCOMES)),
		lag: histogram(broker, "scs_webhook_delivery_lag_seconds", "Time from an event to its successful webhook delivery, retries included.", [], WEBHOOK_LAG_BUCKETS)
	};
}

/** Sweeps that threw (a store or bus failure): each is logged, and retried at its next interval. */
export function sweepFailureMetrics(broker: ServiceBroker) {
	return counter(broker, "scs_sweep_failures_total", "Sweeps that failed, by sweep.", ["sweep"]);
}

/** What each periodic (or start-up) sweep did: `sweep` and `result` name a fixed set, see the callers. */
export function sweepMetrics(broker: ServiceBroker) {
	return counter(broker, "scs_sweep_results_total", "Items the sweeps handled, by sweep and result.", ["sweep", "result"]);
}

export type MetricsForm = "prometheus" | "json";

/** One media range of an Accept header: `type/subtype` in lower case, and its weight. */
function mediaRanges(accept: string): { range: string; q: number }[] {
	const ranges: { range: string; q: number }[] = [];
	for (const part of accept.split(",")) {
		const [range, ...params] = part.split(";").map(s => s.trim().toLowerCase());
		if (!range) continue;
		const qParam = params.find(p => p.startsWith("q="));
		const q = qParam === undefined ? 1 : Number(qParam.slice(2));
		// A weight that is not one (RFC 9110 §12.4.2) says nothing: the range is left out.
		if (qParam !== undefined && (qParam.length < 3 || !Number.isFinite(q) || q < 0 || q > 1)) continue;
		ranges.push({ range, q });
	}
	return ranges;
}

/** The weight Accept gives a type: that of its most specific matching range (`ranges` most specific first), 0 if none matches. */
function weight(accepted: { range: string; q: number }[], ranges: readonly string[]): number {
	for (const range of ranges) {
		const matching = accepted.filter(a => a.range === range);
		if (matching.length) return Math.max(...matching.map(a => a.q));
	}
	return 0;
}

/**
 * Which form GET /metrics answers: Prometheus text for `?format=prometheus`; any other format is
 * JSON (or refused by the action's schema); without one, Prometheus text only when Accept weighs
 * text/plain above 0 and strictly above application/json, for which the ranges application/(any)
 * and (any)/(any) count. So Prometheus's own Accept (text/plain;version=0.0.4;q=0.3, then any type
 * at q=0.2) gets text, and curl's (any type) JSON.
 */
export function metricsForm(format: unknown, accept: string | undefined): MetricsForm {
	if (format !== undefined) return format === "prometheus" ? "prometheus" : "json";
	const accepted = mediaRanges(accept ?? "");
	const text = weight(accepted, ["text/plain", "text/*"]);
	const json = weight(accepted, ["application/json", "application/*", "*/*"]);
	return text > 0 && text > json ? "prometheus" : "json";
}

/**
 * This process's metrics in JSON: all of them, or only the families named, read from the
 * services' registry alone (the public JSON figures never need the runtime metrics, whose
 * collection reads /proc on every call).
 */
async function snapshot(broker: ServiceBroker, names?: string[]): Promise<MetricFamily[]> {
	const registry = serviceRegistry(broker);
	const families = (
		names
			? await Promise.all(names.map(name => registry.getSingleMetric(name)?.get()).filter(family => family !== undefined))
			: [...(await runtimeRegistry().getMetricsAsJSON()), ...(await registry.getMetricsAsJSON())]
	) as unknown as MetricFamily[];
	return families.map(family => ({ ...family, values: family.values.map(value => ({ ...value, value: Number.isFinite(value.value) ? value.value : String(value.value) })) }));
}

/** In every process: its own metrics, for the gateway's GET /metrics. */
export function metricsService(): ServiceSchema {
	return {
		name: "metrics",
		actions: {
			/** Internal: this process's metric families (all, or those named). */
			snapshot: internal({
				params: { names: { type: "array", items: { type: "string", max: 200 }, max: 50, optional: true } },
				handler(this: { broker: ServiceBroker }, ctx: Context<{ names?: string[] }>) {
					return snapshot(this.broker, ctx.params.names);
				}
			})
		},
		created() {
			// Process metrics from the start: counters of the process's lifetime (CPU, GC) then cover all of it.
			runtimeRegistry();
		}
	};
}

/**
 * The q-quantile of a histogram's buckets (cumulative counts by upper bound `le`), interpolated
 * linearly within its bucket as Prometheus's histogram_quantile() does; 0 without observations.
 */
export function histogramQuantile(q: number, buckets: { le: number; count: number }[]): number {
	const sorted = [...buckets].sort((a, b) => a.le - b.le);
	const total = sorted[sorted.length - 1]?.count ?? 0;
	if (total === 0) return 0;
	const rank = q * total;
	let lower = 0;
	let below = 0;
	for (const { le, count } of sorted) {
		if (count >= rank) {
			// The +Inf bucket has no upper bound: the highest finite one is the best estimate.
			if (!Number.isFinite(le)) return lower;
			return lower + ((le - lower) * (rank - below)) / Math.max(count - below, 1);
		}
		lower = le;
		below = count;
	}
	return lower;
}
