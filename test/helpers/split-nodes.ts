/**
 * The owners and a gateway as brokers of this process over a real nats-server, as the distributed
 * deployment splits them: what crosses between them goes through the bus, its serializer and its
 * message limit. `owners`, `gateway` and each of `others` are a node's own settings, beside the
 * bus's and `env`, which all share; each signs in as the bus group of its SERVICES, and the
 * gateway's HTTP port is a free one. The nodes of the groups that hold them get the intake's and
 * owners' key and the worker key (API_KEY), as k8s gives them.
 */
import { randomBytes } from "node:crypto";
import type { ServiceBroker } from "moleculer";
import { NatsServer, groupSecrets } from "../../devkit/cluster";
import { freePort } from "../../devkit/process";
import { busGroupServing, busNodeId } from "../../lib/bus-groups";
import { loadConfig } from "../../lib/config";
import { loadOrCreateAuthorityKeypair } from "../../lib/secrets";
import { createNode, stopNode } from "../../services";
import { API_KEY, tempDir } from "./node";

export interface SplitNodes {
	owners: ServiceBroker;
	/** The `others` nodes, in the order given. */
	others: ServiceBroker[];
	gateway: ServiceBroker;
	/** The gateway's base URL. */
	url: string;
	stop(): Promise<void>;
}

export async function startSplitNodes(options: {
	namespace: string;
	owners: Record<string, string>;
	gateway: Record<string, string>;
	/** More nodes, started between the owners and the gateway. */
	others?: Record<string, string>[];
	/** Services the gateway waits for before the nodes count as started. */
	waitFor: string[];
	env?: Record<string, string>;
	/** The bus's message limit (NATS's default: 1 MB). */
	natsMaxPayload?: number;
}): Promise<SplitNodes> {
	const namespace = `${options.namespace}${process.pid}`;
	const nats = new NatsServer(await freePort(), { namespace, maxPayload: options.natsMaxPayload });
	let owners: ServiceBroker | undefined;
	let gateway: ServiceBroker | undefined;
	const others: ServiceBroker[] = [];
	const stop = async () => {
		await gateway?.stop().catch(() => undefined);
		for (const other of others) if (other.started) await stopNode(other);
		if (owners) await stopNode(owners);
		await nats.stop();
	};
	try {
		await nats.start();
		const authorityKeyFile = loadOrCreateAuthorityKeypair(null, tempDir()).source;
		const webhookSecretsKey = randomBytes(32).toString("base64");
		const shared = { TRANSPORTER: nats.url, NAMESPACE: namespace, NODE_AUTHORITY_KEYPAIR_PATH: authorityKeyFile, LOG_LEVEL: "warn", RATE_LIMIT_PER_MIN: "0", ...options.env };
		const brokerOf = (role: string, env: Record<string, string>) => {
			const group = busGroupServing(env.SERVICES.split(","));
			const secrets = groupSecrets(group, { webhookSecretsKey, workerApiKeys: API_KEY });
			return createNode(loadConfig({ ...shared, ...nats.credentials(group), ...secrets, DATA_DIR: tempDir(), ...env }), { nodeID: busNodeId(group, `${role}-${process.pid}`), logger: false, skipProcessEventRegistration: true });
		};
		owners = brokerOf("owners", options.owners);
		await owners.start();
		for (const [i, env] of (options.others ?? []).entries()) {
			others.push(brokerOf(`node${i}`, env));
			await others[i].start();
		}
		gateway = brokerOf("gateway", { PORT: "0", ...options.gateway });
		await gateway.start();
		await gateway.waitForServices(options.waitFor, 15_000);
		const api = gateway.getLocalService("api") as unknown as { server: { address(): { port: number } } };
		return { owners, others, gateway, url: `http://127.0.0.1:${api.server.address().port}`, stop };
	} catch (err) {
		await stop();
		throw err;
	}
}
