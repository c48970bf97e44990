/**
 * Health of a process, for Kubernetes probes. The gateway serves it on its own routes; a process
 * without the gateway (SERVICES=verifier, the owners, …) serves the same two routes from a bare
 * HTTP server on PORT, so every Deployment probes the same way. With HEALTH_PORT, every process
 * serves them there too, out of reach of the connections that fill the gateway's MAX_CONNECTIONS.
 */
import http from "node:http";
import type { Socket } from "node:net";
import type { ServiceBroker } from "moleculer";
import type { NatsConnection } from "nats";
import { proxyTrust } from "../lib/client-key";
import { ConnectionsPerClient } from "../lib/connection-cap";
import { ServiceError, errorBody } from "../lib/errors";

/** Brokers stopping on SIGTERM: from the first moment, they are no longer ready (SPEC §10). */
const draining = new WeakSet<ServiceBroker>();

export function markDraining(broker: ServiceBroker): void {
	draining.add(broker);
}

/**
 * Brokers whose bus connection is down (the client reconnecting), closed for good, or deaf: the bus
 * refused one of its subscriptions (its users' permissions name another NAMESPACE, say), which
 * nats.js then drops for good, reconnections included; only a restart subscribes again.
 */
const busLost = new WeakMap<ServiceBroker, "down" | "closed" | "deaf">();

/** Brokers whose heartbeat the bus refused, and when last: connected and hearing, but none of its broadcasts reach anyone. */
const heartbeatRefusedAt = new WeakMap<ServiceBroker, number>();

/** How long a refused heartbeat keeps a process unready: longer than Moleculer's heartbeat interval, which repeats it. */
const REFUSED_HEARTBEAT_HOLD_MS = 30_000;

/** Called by the transporter (moleculer.config.ts) when the bus refuses one of the broker's subscriptions. */
export function subscriptionRefused(broker: ServiceBroker, subject: string): void {
	busLost.set(broker, "deaf");
	broker.logger.error(`The bus refused the subscription to ${subject}: check NAMESPACE against the bus's permissions (nats.conf); the process must be restarted`);
}

/**
 * Follows the NATS client of a started broker: Moleculer's transit says connected through an
 * outage (only its own stop clears that), so readiness would too, and a pod cut off from the bus
 * would keep its traffic. While the client reconnects the process is not ready; once it gave up
 * for good (nats.js does after repeated refusals of its credentials, a rotated password say) it
 * is not live either, so that Kubernetes restarts it. A refused heartbeat makes it unready too.
 * Refusals of other publishes do not count: a packet's sender names the subject of its answer,
 * so another node could choose one the bus refuses and take this process out of service.
 */
export function watchBus(broker: ServiceBroker): void {
	const transporter = broker.transit?.tx as { client?: NatsConnection | null; prefix?: string } | undefined;
	const client = transporter?.client;
	if (!client) return;
	const heartbeatSubject = `${transporter.prefix}.HEARTBEAT`;
	void (async () => {
		for await (const status of client.status()) {
			if (status.type === "disconnect" && !busLost.has(broker)) busLost.set(broker, "down");
			else if (status.type === "reconnect" && busLost.get(broker) === "down") busLost.delete(broker);
			else if (status.type === "error" && status.data === "PERMISSIONS_VIOLATION") {
				const refused = (status as { permissionContext?: { operation: string; subject: string } }).permissionContext;
				if (refused?.operation !== "publish" || refused.subject !== heartbeatSubject) continue;
				if (!heartbeatRefusedAt.has(broker)) broker.logger.error(`The bus refused this process's heartbeat (${heartbeatSubject}): check NAMESPACE against the bus's permissions (nats.conf)`);
				heartbeatRefusedAt.set(broker, Date.now());
			}
		}
	})();
	void client.closed().then(() => {
		if (!draining.has(broker) && broker.started) busLost.set(broker, "closed");
	});
}

/** Ready: the broker has started, is not stopping and, when distributed, is connected to the transporter, which takes its subjects. */
export function isReady(broker: ServiceBroker): boolean {
	return broker.started && !draining.has(broker) && (!broker.transit || broker.transit.connected) && !busLost.has(broker) && !heartbeatRefused(broker);
}

function heartbeatRefused(broker: ServiceBroker): boolean {
	return Date.now() - (heartbeatRefusedAt.get(broker) ?? -Infinity) < REFUSED_HEARTBEAT_HOLD_MS;
}

/** How long a client should wait before retrying a 503: the store and the bus recover within seconds. */
export const RETRY_AFTER_UNAVAILABLE_S = 1;

export type Probe = "live" | "ready";

/** What a probe route answers, the same from the gateway's routes and from the probes' own server. */
export function probeAnswer(probe: Probe, broker: ServiceBroker): { status: number; body: object; headers: Record<string, string> } {
	const lost = busLost.get(broker);
	const notReady = (message: string) => ({ status: 503, body: errorBody(new ServiceError("NOT_READY", message)), headers: { "retry-after": String(RETRY_AFTER_UNAVAILABLE_S) } });
	if (lost === "closed") return notReady("The bus connection is closed for good: the process must be restarted");
	if (lost === "deaf") return notReady("The bus refused a subscription of this process (its NAMESPACE or the bus's permissions are wrong): it must be restarted");
	if (probe === "live") return { status: 200, body: { status: "live" }, headers: {} };
	if (isReady(broker)) return { status: 200, body: { status: "ready" }, headers: {} };
	if (lost === "down") return notReady("The bus connection is down; it is being restored");
	if (heartbeatRefused(broker)) return notReady("The bus refuses this process's heartbeat: its NAMESPACE or the bus's permissions are wrong");
	return notReady("The service is starting or stopping");
}

const PROBE_PATHS: Record<string, Probe> = { "/health/live": "live", "/health/ready": "ready" };

/**
 * The probes' server: the kubelet opens a connection per probe, a few a minute, and each is closed
 * once answered. Its own small limits keep whoever else reaches the port (in k8s, no other pod
 * where the network plugin enforces NetworkPolicy; the node always can) from holding it: a few
 * connections per address, each given 5 s, checked every second.
 */
const PROBE_CONNECTIONS = 32;
const PROBE_CONNECTIONS_PER_CLIENT = 4;
const PROBE_TIMEOUT_MS = 5000;

export async function startHealthServer(broker: ServiceBroker, port: number): Promise<http.Server> {
	const server = http.createServer(
		{ headersTimeout: PROBE_TIMEOUT_MS, requestTimeout: PROBE_TIMEOUT_MS, connectionsCheckingInterval: 1000 },
		(req, res) => {
			const probe = req.method === "GET" ? PROBE_PATHS[req.url?.split("?")[0] ?? ""] : undefined;
			const { status, body, headers } = probe ? probeAnswer(probe, broker) : { status: 404, body: errorBody(new ServiceError("NOT_FOUND", "Not found")), headers: {} };
			res.shouldKeepAlive = false;
			res.writeHead(status, { "content-type": "application/json; charset=utf-8", ...headers });
			res.end(JSON.stringify(body));
		}
	);
	server.maxConnections = PROBE_CONNECTIONS;
	const perClient = new ConnectionsPerClient(PROBE_CONNECTIONS_PER_CLIENT, proxyTrust(false));
	server.on("connection", (socket: Socket) => perClient.admit(socket) || socket.destroy());
	server.setTimeout(PROBE_TIMEOUT_MS, socket => socket.destroy());
	await new Promise<void>((resolve, reject) => {
		server.once("error", reject).listen(port, "0.0.0.0", () => {
			server.off("error", reject);
			resolve();
		});
	});
	return server;
}
