/** The service catalogue: which services exist, and a broker running the ones a process selects. */
import { ServiceBroker, type BrokerOptions, type Service, type ServiceSchema } from "moleculer";
import { brokerOptions } from "../moleculer.config";
import type { Config } from "../lib/config";
import { accessService } from "./access.service";
import { apiService } from "./api.service";
import { crankersService } from "./crankers.service";
import { epochsService } from "./epochs.service";
import { markDraining } from "./health";
import { mempoolService } from "./mempool.service";
import { metricsService } from "./metrics";
import { networkService } from "./network.service";
import { payoutsService } from "./payouts.service";
import { receiverService } from "./receiver.service";
import { tinService } from "./tin.service";
import { verifierService } from "./verifier.service";
import { webhookDeliveryService } from "./webhook-delivery.service";
import { webhooksService } from "./webhooks.service";

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- each factory types its own settings, methods and `this`
export const SERVICE_FACTORIES: Record<string, (config: Config) => ServiceSchema<any, any, any, any>> = {
	api: apiService,
	receiver: receiverService,
	verifier: verifierService,
	mempool: mempoolService,
	payouts: payoutsService,
	crankers: crankersService,
	tin: tinService,
	epochs: epochsService,
	network: networkService,
	access: accessService,
	webhooks: webhooksService,
	"webhook-delivery": webhookDeliveryService
};

export function createNode(config: Config, overrides: Partial<BrokerOptions> = {}): ServiceBroker {
	const names = config.services ?? Object.keys(SERVICE_FACTORIES);
	const unknown = names.filter(name => !(name in SERVICE_FACTORIES));
	if (unknown.length) throw new Error(`SERVICES names unknown service(s): ${unknown.join(", ")}; known: ${Object.keys(SERVICE_FACTORIES).join(", ")}`);
	const broker = new ServiceBroker({ ...brokerOptions(config), ...overrides });
	for (const name of names) broker.createService(SERVICE_FACTORIES[name](config));
	// In every process, whatever it runs: the gateway gathers each process's own metrics from it.
	broker.createService(metricsService());
	return broker;
}

/**
 * Graceful stop in tiers: the gateway first (it refuses new requests and drains those in flight),
 * then the services that call others, then the owners they call. Moleculer's own stop would stop
 * them all at once, closing an owner's store under a request that still needs it.
 */
const STOP_TIERS = [["api"], ["receiver", "payouts", "network", "epochs", "webhook-delivery"], ["verifier"]];

export async function stopNode(broker: ServiceBroker): Promise<void> {
	markDraining(broker);
	const api = broker.getLocalService("api") as (Service & { drain(): Promise<void> }) | undefined;
	await api?.drain();
	for (const tier of STOP_TIERS)
		await Promise.all(
			tier
				.map(name => broker.getLocalService(name))
				.filter(service => service !== undefined)
				.map(service => broker.destroyService(service))
		);
	await broker.stop();
}
