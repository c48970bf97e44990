/**
 * The process and Node.js runtime metrics every process of ours exposes (prom-client's defaults,
 * under their standard `process_` and `nodejs_` names, which dashboards expect).
 */
import { collectDefaultMetrics, type Registry } from "prom-client";

/**
 * prom-client's gauges named like counters: Prometheus's conventions (and `promtool check
 * metrics`) reserve `_total` for counters. Each is the sum of its by-type gauge, which stays
 * (`sum(nodejs_active_handles)`).
 */
const MISNAMED = ["nodejs_active_handles_total", "nodejs_active_requests_total", "nodejs_active_resources_total"];

export function registerProcessMetrics(registry: Registry): void {
	collectDefaultMetrics({ register: registry });
	for (const name of MISNAMED) registry.removeSingleMetric(name);
}
