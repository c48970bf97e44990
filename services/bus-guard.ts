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
import { busCallProof, busGroupOf, isBusCallProof, mayServe } from "../lib/bus-groups";
import { ServiceError } from "../lib/errors";

const PROOF = "busCallProof";

/** The parts of Moleculer's packets the guard reads. */
interface Packet {
	type: string;
	payload: { sender?: unknown; services?: { name?: unknown }[]; action?: unknown; id?: unknown; meta?: Record<string, unknown> };
}
type Handler = (cmd: string, packet: Packet) => unknown;
type Publish = (packet: Packet) => unknown;

export function busGuard(callKey: Buffer | null): Middleware {
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
				payload.services = payload.services.filter(service => group !== null && mayServe(group, String(service?.name)));
			}
			if (cmd === "REQ" && payload?.meta && typeof payload.meta === "object") {
				const { [PROOF]: proof, ...meta } = payload.meta;
				payload.meta = meta;
				const action = String(payload.action);
				if (needsProof(action) && !(callKey && isBusCallProof(callKey, action, String(payload.id), proof))) {
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
