/**
 * The bus guard, a broker middleware of every process on the bus (moleculer.config.ts):
 * - a node's announcement (INFO) is believed only for the services its group may run, so a
 *   process of another group cannot take an owner's or a verifier's calls by claiming its
 *   services (and one that claims an owner's node id cannot read what is sent there: NATS keeps
 *   that group's subjects to it);
 * - a call this process sends carries a proof of the intake's and the owners' key when it holds
 *   it, and a call it receives for a `keyHoldersOnly` action (services/internal.ts) runs only with
 *   a valid one. The proof leaves the call's meta before the action runs, so it is never passed on.
 */
import type { Middleware, ServiceBroker } from "moleculer";
import { busCallProof, busGroupOf, isBusCallProof, mayServe, type BusGroup } from "../lib/bus-groups";
import { ServiceError } from "../lib/errors";

const PROOF = "busCallProof";

/** The parts of Moleculer's packets the guard reads. */
interface Packet {
	type: string;
	payload: { sender?: unknown; services?: AnnouncedService[]; action?: unknown; id?: unknown; meta?: Record<string, unknown> };
}
type AnnouncedService = { name?: unknown; fullName?: unknown; version?: unknown; actions?: Record<string, { name?: unknown } | undefined> } | undefined;
type Handler = (cmd: string, packet: Packet) => unknown;
type Publish = (packet: Packet) => unknown;

/**
 * An announced service is believed when its group may run it, and when it is what it says: no
 * version, and every action named after it. Moleculer files an action under the name it is
 * announced with, whatever its service's, so a node that may run `api` could otherwise announce
 * `verifier.verifyMany` under it.
 */
function isBelieved(group: BusGroup, service: AnnouncedService): boolean {
	const { name, fullName, version, actions } = service ?? {};
	if (typeof name !== "string" || !mayServe(group, name) || fullName !== name || version != null) return false;
	return Object.entries(actions ?? {}).every(([key, action]) => key === action?.name && key.startsWith(`${name}.`));
}

/**
 * `callKey`: the key of the intake's and owners' proofs, when this process holds it.
 * `admitUngrouped`: during the roll from the one-user bus, nodes of the previous version (ids of
 * no group) are believed and their calls run without a proof, as before (BUS_ADMIT_UNGROUPED).
 */
export function busGuard({ callKey, admitUngrouped }: { callKey: Buffer | null; admitUngrouped: boolean }): Middleware {
	let broker: ServiceBroker;
	const needsProof = (action: string) => (broker.registry.getActionEndpointByNodeId(action, broker.nodeID) as { action?: { keyHoldersOnly?: boolean } } | null)?.action?.keyHoldersOnly === true;
	const guard = {
		name: "BusGuard",
		created(created: ServiceBroker) {
			broker = created;
		},
		transitPublish: (next: Publish): Publish => packet => {
			const { payload } = packet;
			if (callKey && packet.type === "REQ" && typeof payload.action === "string" && typeof payload.id === "string")
				// A copy: the payload's meta is the calling context's own.
				packet.payload = { ...payload, meta: { ...payload.meta, [PROOF]: busCallProof(callKey, payload.action, payload.id) } };
			return next(packet);
		},
		transitMessageHandler: (next: Handler): Handler => (cmd, packet) => {
			const { payload } = packet;
			if (cmd === "INFO" && Array.isArray(payload?.services)) {
				const group = busGroupOf(String(payload.sender));
				if (group !== null) payload.services = payload.services.filter(service => isBelieved(group, service));
				else if (!admitUngrouped) payload.services = [];
			}
			if (cmd === "REQ" && payload) {
				// Whatever the packet's meta is (none at all included), the proof is checked, then dropped.
				const { [PROOF]: proof, ...meta } = payload.meta !== null && typeof payload.meta === "object" ? payload.meta : {};
				payload.meta = meta;
				const action = String(payload.action);
				const proven = () => (callKey !== null && isBusCallProof(callKey, action, String(payload.id), proof)) || (admitUngrouped && busGroupOf(String(payload.sender)) === null);
				if (needsProof(action) && !proven()) {
					const refusal = new ServiceError("FORBIDDEN", "This action runs only for the intake and the owners", { reason: "unproven" });
					return broker.transit!.sendResponse(String(payload.sender), String(payload.id), {}, {}, {}, refusal);
				}
			}
			return next(cmd, packet);
		}
	};
	// Moleculer's typings give these hooks the wrapped method's result type; they return the wrapper.
	return guard as unknown as Middleware;
}
