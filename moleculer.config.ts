/**
 * Broker settings, explicit rather than Moleculer's defaults (DESIGN §7: requestTimeout defaults
 * to none, and retries would otherwise repeat non-idempotent calls).
 */
import { randomUUID } from "node:crypto";
import os from "node:os";
import { Transporters, Validators, type BrokerOptions, type Errors } from "moleculer";
import { busCallKey, busNodeId } from "./lib/bus-groups";
import type { Config } from "./lib/config";
import { ERROR_STATUS } from "./lib/errors";
import { VALIDATION_MESSAGES } from "./lib/schemas";
import { busGuard } from "./services/bus-guard";
import { subscriptionRefused } from "./services/health";

/** A failure of the node that ran the action, as opposed to an answer of the SPEC §7 catalogue. */
function isNodeFailure(err: Error): boolean {
	const { code, type } = err as Errors.MoleculerError;
	return code >= 500 && (type === "INTERNAL_ERROR" || !(type in ERROR_STATUS));
}

/**
 * The NATS URL(s) with the credentials in them: Moleculer's NATS transporter takes user and pass
 * only from the URL (it overwrites options.user and options.pass with the URL's). The config
 * admits only URL-safe credentials, so they go in as they are.
 */
function withNatsCredentials(urls: string, user: string | null, password: string | null): string {
	if (user === null) return urls;
	return urls
		.split(",")
		.map(url => url.trim().replace(/^(nats|tls):\/\//i, `$1://${user}:${password ?? ""}@`))
		.join(",");
}

/**
 * Moleculer's NATS transporter. A `tls://` URL requires TLS (the client's `tls` option): from the
 * URL alone the client takes TLS only when the server offers it, so anything answering in the
 * server's place without TLS would have been sent the credentials in clear (a review). The server's
 * certificate is checked against Node's CAs (NODE_EXTRA_CA_CERTS adds a cluster's own).
 */
export function natsTransporter(urls: string, user: string | null, password: string | null): NatsBusTransporter {
	// One tls:// URL makes TLS required of every server of the list: the client has one tls option.
	const requiresTls = urls.split(",").some(url => /^tls:\/\//i.test(url.trim()));
	return new NatsBusTransporter({ url: withNatsCredentials(urls, user, password), ...(requiresTls ? { tls: {} } : {}) });
}

/**
 * Moleculer's NATS transporter, except that a subscription the bus refuses (its users' permissions
 * name another NAMESPACE, say) is told to the probes (services/health.ts). Moleculer's callback
 * reads the message that an error comes without: the TypeError ended the client's reader, and the
 * process heard nothing more while it reported itself connected, live and ready.
 */
export class NatsBusTransporter extends Transporters.NATS {
	override subscribe(cmd: string, nodeID?: string): Promise<void> {
		const subject = this.getTopicName(cmd, nodeID);
		this.client.subscribe(subject, {
			callback: (err: Error | null, msg: { data: Uint8Array } | undefined) => {
				if (err) subscriptionRefused(this.broker, subject);
				else if (msg) void this.receive(cmd, Buffer.from(msg.data));
			}
		});
		return Promise.resolve();
	}
}

const LEVELS = ["fatal", "error", "warn", "info", "debug", "trace"] as const;

/** One level less talkative than `level`, never quieter than warn. */
function quieter(level: string): string {
	return LEVELS.indexOf(level as (typeof LEVELS)[number]) >= LEVELS.indexOf("info") ? "warn" : level;
}

/** LOG_FORMAT=json: one JSON object per line, ISO timestamp first, for log collectors. */
function jsonLine(level: string, args: unknown[], bindings: { nodeID?: string; mod?: string; svc?: string }): string[] {
	const message = args.map(arg => (arg instanceof Error ? arg.stack ?? arg.message : typeof arg === "string" ? arg : JSON.stringify(arg))).join(" ");
	return [JSON.stringify({ time: new Date().toISOString(), level, module: bindings.svc ?? bindings.mod, node: bindings.nodeID, message })];
}

export function brokerOptions(config: Config): BrokerOptions {
	const name = `${os.hostname()}-${process.pid}`;
	return {
		namespace: config.namespace,
		// On the bus, the group first: NATS lets each group's user read only its own nodes' subjects.
		nodeID: config.busGroup ? busNodeId(config.busGroup, name) : name,
		// Embedded: every service in one process, no transporter. Distributed: NATS.
		// The bus requires credentials (k8s/20-nats.yaml): without them any pod could call an owner.
		transporter: config.transporter ? natsTransporter(config.transporter, config.natsUser, config.natsPassword) : null,
		// JSON: readable on the wire with `nats sub`, and our payloads are small documents.
		serializer: "JSON",
		logger: { type: "Console", options: { formatter: config.logFormat === "json" ? jsonLine : "short", colors: false, moduleColors: false } },
		// The framework's own start-up report (node id, strategy, serializer, each service started)
		// only at debug: start-up fits on a screen, and index.ts says what an operator needs.
		logLevel: { BROKER: quieter(config.logLevel), REGISTRY: quieter(config.logLevel), "**": config.logLevel } as BrokerOptions["logLevel"],
		// Longer than the store's own limits (5 s to find a primary, 5 s for a majority write), so a
		// store that cannot answer comes back as 503 from its owner, not as a broker timeout.
		requestTimeout: 15_000,
		// No retries, the one rule for every action: a timed-out call may still be running, and a
		// second run of a state change answers differently (NONCE_REUSED for the nonce it consumed).
		// Callers that can wait retry on their own terms (the sweeps, the Cranker, SDK clients on
		// 503), and the state-changing actions recognise a repeat of their own call (services/replay.ts).
		retryPolicy: { enabled: false },
		// Trips on nodes that fail (crashes, timeouts), never on the Node's own answers: a 503 such as
		// CHAIN_UNAVAILABLE, which any Cranker can provoke, must not shut an action for everyone.
		circuitBreaker: { enabled: true, threshold: 0.5, minRequestCount: 20, windowTime: 60, halfOpenTime: 10_000, check: isNodeFailure },
		// Graceful stop: in-flight requests finish before services stop.
		tracking: { enabled: true, shutdownTimeout: 10_000 },
		// A node that dies without saying goodbye (SIGKILL, OOM) leaves the shard ring after 6 s; until
		// then calls to it time out (VERIFY_TIMEOUT_MS) and the sweep re-verifies elsewhere.
		heartbeatInterval: 2,
		heartbeatTimeout: 6,
		registry: { strategy: "RoundRobin", preferLocal: true },
		validator: new Validators.Fastest({ messages: VALIDATION_MESSAGES }),
		// The Prometheus metrics are our own prom-client registries (services/metrics.ts): named and
		// labelled for this service, and gathered from every process by the gateway.
		metrics: { enabled: false },
		tracing: { enabled: false },
		// No $node service: its `options` action would hand any caller the transporter URL, with the
		// bus credentials in it. Nothing here calls it.
		internalServices: false,
		// Request ids from a CSPRNG (Moleculer's default is Math.random): an answer is matched to its
		// request by id alone, so an id must not be guessable by a process that cannot read the request.
		uidGenerator: () => randomUUID(),
		// On the bus: sign (and check) the announcements, believe a node's services only where its
		// group may run them, and prove (or check) the intake's and the owners' key on calls to the
		// actions that change state, and a worker's key on calls made for a worker route.
		middlewares: config.busKeys
			? [busGuard({ busKeys: config.busKeys, callKeys: config.webhookSecretsKeys && [...config.webhookSecretsKeys, ...config.webhookSecretsNextKeys].map(busCallKey), workerApiKeys: config.workerApiKeys, admitUngrouped: config.busAdmitUngrouped, admitUnsigned: config.busAdmitUnsigned })]
			: []
	};
}
