/**
 * The chain as one process reads it: one NodeChain (settlement reads and the cluster check) and
 * one SlotObserver, shared by the services of the process that need them (the mempool, the TIN
 * service, the verifier), so that a process polls its endpoints and warns about them once,
 * whichever of those it runs. An endpoint's slot counts only while it is on the named cluster.
 */
import { nodeChain, type NodeChain } from "./chain";
import type { ConditionLog } from "./failure-streak";
import { SlotObserver } from "./slot-observer";

export class ProcessChain {
	/** Null without an endpoint: nothing can be proven on chain then. */
	readonly reads: NodeChain | null;
	readonly slots: SlotObserver;
	/** The services started on it: the polls run while there is one. */
	private readonly users = new Set<object>();
	private starting: Promise<void> | null = null;

	constructor(rpcUrls: readonly string[], cluster: string, slotPollIntervalMs: number, log: ConditionLog) {
		this.reads = nodeChain(rpcUrls, cluster, log);
		const reads = this.reads;
		this.slots = new SlotObserver(rpcUrls, slotPollIntervalMs, log, reads ? () => reads.endpointsOnCluster() : undefined);
	}

	/**
	 * The first service to start starts the polls: the endpoints' cluster is read first (a wrong
	 * list is told before the first settlement needs it), then every endpoint's first slot. Each
	 * service that starts waits for that.
	 */
	start(user: object): Promise<void> {
		this.users.add(user);
		return (this.starting ??= (async () => {
			await this.reads?.sameCluster().catch(() => {});
			await this.slots.start();
		})());
	}

	/** The last service to stop stops the polls; one that never started changes nothing. */
	stop(user: object): void {
		if (!this.users.delete(user) || this.users.size > 0) return;
		this.slots.stop();
		this.starting = null;
	}
}
