/**
 * The Cranker's Prometheus metrics (prom-client, a registry of its own) and the small HTTP server
 * that exposes them with its liveness: GET /metrics and GET /health on CRANKER_METRICS_PORT.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { Counter, Histogram, Registry } from "prom-client";
import { registerProcessMetrics } from "../lib/process-metrics";
import { TIN_STAGES } from "../lib/schemas";

/** Node calls take milliseconds; a retried one up to the client's 15 s timeout. */
const NODE_REQUEST_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15];

const SETTLEMENT_OUTCOMES = ["confirmed", "rejected", "returned"] as const;

export class CrankerMetrics {
	readonly registry = new Registry();
	readonly leases = new Counter({ name: "scs_cranker_leases_total", help: "Leases this Cranker took.", registers: [this.registry] });
	readonly submissions = new Counter({ name: "scs_cranker_settlements_submitted_total", help: "Settlement transactions reported SUBMITTED.", registers: [this.registry] });
	readonly settlements = new Counter({
		name: "scs_cranker_settlements_finished_total",
		help: "Settlements this Cranker finished: confirmed, rejected (failed on chain, expired, refused), or returned to VERIFIED (released, dropped).",
		labelNames: ["outcome"] as const,
		registers: [this.registry]
	});
	readonly tinStages = new Counter({ name: "scs_cranker_tin_stages_total", help: "TIN operation stages this Cranker moved.", labelNames: ["stage"] as const, registers: [this.registry] });
	readonly heartbeats = new Counter({ name: "scs_cranker_heartbeats_total", help: "Heartbeats sent, by result.", labelNames: ["result"] as const, registers: [this.registry] });
	readonly nodeRequests = new Counter({
		name: "scs_cranker_node_requests_total",
		help: "Requests to the Node, by route template and HTTP status (`error`: no answer).",
		labelNames: ["method", "route", "status"] as const,
		registers: [this.registry]
	});
	readonly nodeRequestDuration = new Histogram({
		name: "scs_cranker_node_request_duration_seconds",
		help: "Time to the Node's answer, per attempt.",
		labelNames: ["method", "route"] as const,
		buckets: NODE_REQUEST_BUCKETS,
		registers: [this.registry]
	});

	constructor() {
		registerProcessMetrics(this.registry);
		// Known series start at 0, so rate() sees their first increment.
		for (const outcome of SETTLEMENT_OUTCOMES) this.settlements.inc({ outcome }, 0);
		for (const stage of TIN_STAGES) this.tinStages.inc({ stage }, 0);
		for (const result of ["accepted", "failed"]) this.heartbeats.inc({ result }, 0);
	}
}

/** GET /metrics (Prometheus text) and GET /health (200 while the process runs, `online` once a heartbeat was accepted). */
export async function startMetricsServer(metrics: CrankerMetrics, host: string, port: number, online: () => boolean): Promise<{ port: number; close(): Promise<void> }> {
	const server = http.createServer((req, res) => {
		const path = req.method === "GET" ? (req.url ?? "").split("?")[0] : null;
		if (path === "/metrics") {
			metrics.registry.metrics().then(
				text => {
					res.writeHead(200, { "content-type": metrics.registry.contentType });
					res.end(text);
				},
				(err: Error) => {
					res.writeHead(500, { "content-type": "text/plain" });
					res.end(`metrics failed: ${err.message}\n`);
				}
			);
			return;
		}
		const [status, body] = path === "/health" ? [200, { status: "live", online: online() }] : [404, { type: "NOT_FOUND" }];
		res.writeHead(status, { "content-type": "application/json" });
		res.end(JSON.stringify(body));
	});
	await new Promise<void>((resolve, reject) => {
		server.once("error", reject);
		server.listen(port, host, resolve);
	});
	return {
		port: (server.address() as AddressInfo).port,
		close: () =>
			new Promise<void>(resolve => {
				server.close(() => resolve());
				// A scraper's keep-alive connection would hold close() open.
				server.closeAllConnections();
			})
	};
}
