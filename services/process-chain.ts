/** One ProcessChain per broker (lib/process-chain.ts): the services of a process share it. */
import type { ServiceBroker } from "moleculer";
import type { Config } from "../lib/config";
import { ProcessChain } from "../lib/process-chain";

const chains = new WeakMap<ServiceBroker, ProcessChain>();

/** The broker's ProcessChain, made by the first service to ask, from its config (one per process). */
export function processChain(broker: ServiceBroker, config: Config): ProcessChain {
	let chain = chains.get(broker);
	if (!chain) chains.set(broker, (chain = new ProcessChain(config.solanaRpcUrls, config.solanaCluster, config.slotPollIntervalMs, broker.getLogger("chain"))));
	return chain;
}
