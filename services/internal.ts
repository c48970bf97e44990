import { Errors, type CallingOptions, type ServiceBroker } from "moleculer";

/**
 * The one rule for actions that only our own services call, never a route of the gateway:
 * - visibility "public": callable over the broker, but moleculer-web refuses to run it, so no
 *   route can expose it, even by mistake;
 * - params checked for shape only: what reaches them was validated in full where it entered (the
 *   gateway's route schemas, lib/schemas.ts), and a second full check of a signed request costs
 *   more than its signature check.
 * test/integration/openapi.test.ts checks that every action the gateway does not route is internal.
 */
export function internal<A extends object>(action: A): A & { visibility: "public" } {
	return { ...action, visibility: "public" };
}

/**
 * An internal action that changes state: over the bus it runs only for a caller that proves it
 * holds the intake's and the owners' key (lib/bus-groups.ts, checked by moleculer.config.ts's bus
 * guard), so a process with the gateway's or a verifier's bus credentials cannot call it. Calls
 * within a process are not checked: they never cross the bus.
 */
export function keyHoldersOnly<A extends object>(action: A): A & { visibility: "public"; keyHoldersOnly: true } {
	return { ...internal(action), keyHoldersOnly: true };
}

/**
 * An action a worker route runs (the gateway's own, or an owner's), or one such an action calls:
 * over the bus it runs only for a call proven by a worker's API key, which the gateway that checked
 * the key attaches, or by the intake's and owners' key (services/bus-guard.ts). So the worker API
 * key admits a worker where the action runs, and a verifier's bus credentials act for no worker.
 * test/integration/openapi.test.ts checks that every worker route's action is one.
 */
export function workersOnly<A extends object>(action: A): A & { workersOnly: true } {
	return { ...action, workersOnly: true };
}

/**
 * Whether some node now serves `action`: a caller with a fallback (a batch action a node of the
 * previous version lacks during a rolling update, say) asks before it calls.
 */
export function isServed(broker: ServiceBroker, action: string): boolean {
	return broker.registry.getActionEndpoints(action)?.hasAvailable() ?? false;
}

/**
 * Whether this process serves `action` now (its endpoint here is available): a call pinned to this
 * node then passes params and answer by reference, never over the bus. When it is not, the caller
 * leaves the choice to the broker, which may pick another node.
 */
export function isServedHere(broker: ServiceBroker, action: string): boolean {
	return (broker.registry.getActionEndpointByNodeId(action, broker.nodeID) as unknown) != null;
}

/**
 * A call that a periodic task makes (a sweep, a stream's log reader): refused at once, as the
 * broker would, when no node serves `action`, but without the broker's warning, which it writes
 * for every call to an action not registered. The task's own failure streak (lib/failure-streak.ts)
 * tells of the owner's absence once, instead of once a second.
 */
export function callServed<T>(broker: ServiceBroker, action: string, params: object, options?: CallingOptions): Promise<T> {
	const endpoints = broker.registry.getActionEndpoints(action);
	if (!endpoints) return Promise.reject(new Errors.ServiceNotFoundError({ action }));
	if (!endpoints.hasAvailable()) return Promise.reject(new Errors.ServiceNotAvailableError({ action }));
	return broker.call<T, object>(action, params, options);
}
