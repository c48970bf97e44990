/**
 * Health of a process, for Kubernetes probes. The gateway serves it on its own routes; a process
 * without the gateway (SERVICES=verifier, the owners, …) serves the same two routes from a bare
 * HTTP server on PORT, so every Deployment probes the same way.
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

export async function startHealthServer(broker: ServiceBroker, port: number): Promise<http.Server> {
	const server = http.createServer((req, res) => {
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
	await new Promise<void>(resolve => server.listen(port, "0.0.0.0", resolve));
	return server;
}
