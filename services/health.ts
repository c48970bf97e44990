/**
 * Health of a process, for Kubernetes probes. The gateway serves it on its own routes; a process
 * without the gateway (SERVICES=verifier, the owners, …) serves the same two routes from a bare
 * HTTP server on PORT, so every Deployment probes the same way. With HEALTH_PORT, every process
 * serves them there too, out of reach of the connections that fill the gateway's MAX_CONNECTIONS.
 */
import http from "node:http";
import type { ServiceBroker } from "moleculer";
import { ServiceError } from "../lib/errors";

/** Brokers stopping on SIGTERM: from the first moment, they are no longer ready (SPEC §10). */
const draining = new WeakSet<ServiceBroker>();

export function markDraining(broker: ServiceBroker): void {
	draining.add(broker);
}

/** Ready: the broker has started, is not stopping and, when distributed, is connected to the transporter. */
export function isReady(broker: ServiceBroker): boolean {
	return broker.started && !draining.has(broker) && (!broker.transit || broker.transit.connected);
}

/** An error in SPEC §7's shape, as the gateway answers it. */
const errorBody = (error: ServiceError) => ({ name: error.name, message: error.message, code: error.code, type: error.type });

/**
 * The probes' server: a kubelet opens a connection per probe, a few a minute. Its own small limits
 * keep whoever else reaches the port from holding it (Kubernetes admits only the kubelet to it).
 */
const PROBE_CONNECTIONS = 32;
const PROBE_TIMEOUT_MS = 5000;

export async function startHealthServer(broker: ServiceBroker, port: number): Promise<http.Server> {
	const server = http.createServer({ headersTimeout: PROBE_TIMEOUT_MS, requestTimeout: PROBE_TIMEOUT_MS, keepAliveTimeout: PROBE_TIMEOUT_MS }, (req, res) => {
		const route = req.method === "GET" ? req.url?.split("?")[0] : undefined;
		const [status, body] =
			route === "/health/live"
				? [200, { status: "live" }]
				: route === "/health/ready"
					? isReady(broker)
						? [200, { status: "ready" }]
						: [503, errorBody(new ServiceError("NOT_READY", "The service is starting or stopping"))]
					: [404, errorBody(new ServiceError("NOT_FOUND", "Not found"))];
		res.writeHead(status, { "content-type": "application/json; charset=utf-8" });
		res.end(JSON.stringify(body));
	});
	server.maxConnections = PROBE_CONNECTIONS;
	server.setTimeout(PROBE_TIMEOUT_MS, socket => socket.destroy());
	await new Promise<void>((resolve, reject) => server.once("error", reject).listen(port, "0.0.0.0", resolve));
	return server;
}
