/**
 * The bus guard, a broker middleware of every process on the bus (moleculer.config.ts):
 * - a node's announcement (INFO) is believed only for the services its group may run, so a
 *   process of another group cannot take an owner's or a verifier's calls by claiming its
 *   services (and one that claims an owner's node id cannot read what is sent there: NATS keeps
 *   that group's subjects to it);
 * - a packet in this node's own name from elsewhere is dropped: Moleculer would take an
 *   announcement of it for a node id conflict and stop the process;
 * - a call this process sends to a `keyHoldersOnly` action (services/internal.ts) carries a fresh
 *   proof of the intake's and the owners' key when it holds it, and a call it receives for one
 *   runs only with a valid proof it has not seen before. The proof leaves the call's meta before
 *   the action runs, so it is never passed on.
 */
import type { Middleware, ServiceBroker } from "moleculer";
import { BUS_CALL_PROOF_TTL_MS, busCallProof, busGroupOf, isBusCallProof, mayServe, type BusGroup } from "../lib/bus-groups";
import { ServiceError } from "../lib/errors";

const PROOF = "busCallProof";
/** Moleculer's packets a node sends in its own name, which it also receives from itself on the bus. */
const OWN_ECHOES = new Set(["REQ", "RES", "EVENT"]);

/** The parts of Moleculer's packets the guard reads. */
interface Packet {
	type: string;
	target?: string | null;
	payload: { sender?: unknown; services?: AnnouncedService[]; action?: unknown; id?: unknown; params?: unknown; meta?: unknown; stream?: unknown; seq?: unknown };
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

/** Ids of the calls proven lately: a proof is good once. Two generations, each as long as a proof holds. */
class SeenCalls {
	private current = new Set<string>();
	private previous = new Set<string>();
	private rotatedAt = Date.now();

	/** Whether `id` is new; it is seen from now on. */
	admit(id: string, now = Date.now()): boolean {
		if (now - this.rotatedAt >= BUS_CALL_PROOF_TTL_MS) {
			this.previous = now - this.rotatedAt >= 2 * BUS_CALL_PROOF_TTL_MS ? new Set() : this.current;
			this.current = new Set();
			this.rotatedAt = now;
		}
		if (this.current.has(id) || this.previous.has(id)) return false;
		this.current.add(id);
		return true;
	}
}

/**
 * `callKey`: the key of the intake's and owners' proofs, when this process holds it.
 * `admitUngrouped`: during the roll from the one-user bus, the previous version's nodes (ids of no
 * group) are believed for the services they announce (BUS_ADMIT_UNGROUPED). Their calls get no
 * waiver: a packet's sender is whatever the packet says.
 */
export function busGuard({ callKey, admitUngrouped }: { callKey: Buffer | null; admitUngrouped: boolean }): Middleware {
	let broker: ServiceBroker;
	const seen = new SeenCalls();
	let warnedAt = 0;
	const needsProof = (action: unknown, nodeID: string) =>
		typeof action === "string" && (broker.registry.getActionEndpointByNodeId(action, nodeID) as { action?: { keyHoldersOnly?: boolean } } | null)?.action?.keyHoldersOnly === true;
	const refuse = (payload: Packet["payload"], message: string) =>
		broker.transit!.sendResponse(String(payload.sender), String(payload.id), {}, {}, {}, new ServiceError("FORBIDDEN", message, { reason: "unproven" }));

	const guard = {
		name: "BusGuard",
		created(created: ServiceBroker) {
			broker = created;
			if (admitUngrouped) broker.logger.warn("BUS_ADMIT_UNGROUPED is set: nodes whose id names no bus group are believed. Unset it once the roll from the one-user bus is done.");
		},
		transitPublish: (next: Publish): Publish => packet => {
			const { payload } = packet;
			if (callKey && packet.type === "REQ" && packet.target && needsProof(payload.action, packet.target)) {
				const call = { action: String(payload.action), id: String(payload.id), sender: broker.nodeID, params: payload.params };
				// A copy: the payload's meta is the calling context's own.
				packet.payload = { ...payload, meta: { ...(payload.meta as object), [PROOF]: busCallProof(callKey, call) } };
			}
			return next(packet);
		},
		transitMessageHandler: (next: Handler): Handler => (cmd, packet) => {
			const { payload } = packet;
			if (payload?.sender === broker.nodeID && !OWN_ECHOES.has(cmd)) {
				if (Date.now() - warnedAt > 60_000) {
					warnedAt = Date.now();
					broker.logger.warn(`A ${cmd} packet in this node's name came from elsewhere on the bus: ignored.`);
				}
				return Promise.resolve(false);
			}
			if (cmd === "INFO" && Array.isArray(payload?.services)) {
				const group = busGroupOf(String(payload.sender));
				if (group !== null) payload.services = payload.services.filter(service => isBelieved(group, service));
				else if (!admitUngrouped) payload.services = [];
			}
			if (cmd === "REQ" && payload) {
				// Whatever the packet's meta is (none at all included), the proof is checked, then dropped.
				const { [PROOF]: proof, ...meta } = payload.meta !== null && typeof payload.meta === "object" ? (payload.meta as Record<string, unknown>) : {};
				payload.meta = meta;
				// No action here takes a stream; a stream's chunks would wait in memory for their first.
				if (payload.stream === true || payload.seq != null) return refuse(payload, "Streams are not taken on the bus");
				if (needsProof(payload.action, broker.nodeID)) {
					const call = { action: String(payload.action), id: String(payload.id), sender: String(payload.sender), params: payload.params };
					if (!callKey || !isBusCallProof(callKey, call, proof) || !seen.admit(`${call.sender}\n${call.id}`)) return refuse(payload, "This action runs only for the intake and the owners");
				}
			}
			return next(cmd, packet);
		}
	};
	// Moleculer's typings give these hooks the wrapped method's result type; they return the wrapper.
	return guard as unknown as Middleware;
}
