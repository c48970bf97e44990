/**
 * The bus guard, a broker middleware of every process on the bus (moleculer.config.ts):
 * - a node's announcement (INFO) is believed only for the services its group may run, so a
 *   process of another group cannot take an owner's or a verifier's calls by claiming its
 *   services (and one that claims an owner's node id cannot read what is sent there: NATS keeps
 *   that group's subjects to it);
 * - a packet whose sender is not a node id of this deployment's form is dropped: Moleculer
 *   answers to the sender's subject, and NATS's protocol would take a space or a line break in it
 *   as the end of a command;
 * - a packet in this node's own name is dropped: with Moleculer's balancer a node never receives
 *   its own, and it would take an announcement of its id for a node id conflict and stop;
 * - a call this process sends to a node of the intake or the owners carries a fresh proof of their
 *   key when it holds it, bound to the call, its parameters and its addressee; a call it receives
 *   for a `keyHoldersOnly` action (services/internal.ts) runs only with a valid proof it has not
 *   seen before. The proof leaves the call's meta before the action runs, so it is never passed on;
 * - a call the gateway makes for a worker whose API key it checked (`actForWorker`) carries a proof
 *   under that key, bound alike; a call for a `workersOnly` action runs only with such a proof,
 *   or with the intake's and owners'. A verifier holds neither. A call's `meta.worker` (a worker
 *   key came with a public route: the worker's view) is believed only with such a proof;
 * - the packets that say who a node is and whether it lives (announcements, heartbeats, goodbyes,
 *   discovery and pings) are signed with the sender's group's key, and believed only with a fresh
 *   signature by the group its sender's id names (lib/bus-signatures.ts);
 * - a packet that nests deeper than 64 levels is dropped before it is parsed (answering it would
 *   overflow the serializer's stack), so the broker must use the JSON serializer;
 * - an answer is taken from the node its call went to only (so the balancer must stay on), and
 *   its meta, which Moleculer merges into the caller's context and the gateway sends as status and
 *   headers, from the intake and the owners only; calls and events carry their context's
 *   `parentID` and `requestID` as digests, so no addressee learns the ids of calls still awaited.
 */
import { createHash } from "node:crypto";
import { Serializers, type Middleware, type ServiceBroker } from "moleculer";
import { BUS_CALL_PROOF_TTL_MS, busCallDigest, busCallProof, busGroupOf, believedInterface, holdsCallKey, isBusCallProof, isNodeId, mayServe, workerCallKey, type BusCall, type BusGroup } from "../lib/bus-groups";
import { SIGNATURE_FIELD, SIGNED_PACKETS, SIGNED_PACKET_MAX_BYTES, SignedPackets, SigningClock, busSignature, type BusKeys, type Refusal } from "../lib/bus-signatures";
import { ServiceError } from "../lib/errors";
import { MAX_BODY_DEPTH, nestsDeeperThan } from "../lib/json-body";

const PROOF = "busCallProof";
const WORKER_PROOF = "workerCallProof";
/** A context id as it leaves the process: its digest (the same for the same id), or what it was if it is none. */
const idDigest = (id: unknown) => (typeof id === "string" && id !== "" ? createHash("sha256").update(id).digest("base64url").slice(0, 22) : id);

/** A packet wraps what it carries in a few levels; what it carries nests at most as deep as a request body. */
const BUS_PACKET_MAX_DEPTH = 2 * MAX_BODY_DEPTH;

/**
 * Where a worker's call context keeps its prover: a symbol, which the JSON serializer leaves out,
 * so it never leaves the process, while the contexts of the calls it makes copy it.
 */
const WORKER_PROVER = Symbol("workerProver");
type WorkerProver = (call: BusCall) => string;
const provers = new Map<string, WorkerProver>();

/**
 * Marks the context of a worker route's call (its `meta`) as made for a worker whose API key the
 * gateway checked: the calls it makes over the bus prove that key. Only checked keys come here,
 * so the provers kept are one per configured key.
 */
export function actForWorker(meta: object, workerApiKey: string): void {
	let prove = provers.get(workerApiKey);
	if (!prove) {
		const key = workerCallKey(workerApiKey);
		prove = call => busCallProof(key, call);
		provers.set(workerApiKey, prove);
	}
	(meta as Record<symbol, WorkerProver>)[WORKER_PROVER] = prove;
}

type Flags = { keyHoldersOnly?: boolean; workersOnly?: boolean };

/** The parts of Moleculer's packets the guard reads. */
interface Packet {
	type: string;
	target?: string | null;
	payload: { sender?: unknown; services?: AnnouncedService[]; action?: unknown; id?: unknown; params?: unknown; meta?: unknown; stream?: unknown; seq?: unknown; parentID?: unknown; requestID?: unknown; [SIGNATURE_FIELD]?: unknown };
}
type AnnouncedService = { name?: unknown; fullName?: unknown; version?: unknown; actions?: Record<string, { name?: unknown } | undefined>; events?: unknown } | undefined;
/** How often one node's discovery request is answered at most. */
const DISCOVER_ANSWER_EVERY_MS = 5000;

/** Senders answered within the last `windowMs`: one answer per window each (kept no longer than the window). */
class AnswerWindow {
	private readonly answeredAt = new Map<string, number>();
	constructor(private readonly windowMs: number) {}

	admit(sender: string, nowMs: number): boolean {
		const last = this.answeredAt.get(sender);
		if (last !== undefined && nowMs - last < this.windowMs) return false;
		// The map holds the senders of one window: the older entries go as a new one comes.
		for (const [known, at] of this.answeredAt) if (nowMs - at >= this.windowMs) this.answeredAt.delete(known);
		this.answeredAt.set(sender, nowMs);
		return true;
	}
}

type Handler = (cmd: string, packet: Packet) => unknown;
type Receive = (cmd: string, data: Buffer, s?: unknown) => unknown;
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
 * A believed service with only the actions and events it has, rebuilt from their names (lib/bus-groups.ts
 * believedInterface): Moleculer matches every event emitted against every event name announced,
 * as a pattern, and takes the strategy, the timeout and the retries of an action from whoever
 * announced it. So also for a node of no group (BUS_ADMIT_UNGROUPED), believed for any service.
 */
function withBelievedInterface(service: NonNullable<AnnouncedService>): AnnouncedService {
	return { ...service, ...believedInterface(String(service.name), service) };
}

/**
 * Ids of the calls proven lately: a proof is good once. A proof holds from BUS_CALL_PROOF_TTL_MS
 * before its time to as long after (clocks differ), so an id is kept at least twice that: two
 * generations, each that long.
 */
class SeenCalls {
	private current = new Set<string>();
	private previous = new Set<string>();
	private rotatedAt = Date.now();

	/** Whether `id` is new; it is seen from now on. */
	admit(id: string, now = Date.now()): boolean {
		const generation = 2 * BUS_CALL_PROOF_TTL_MS;
		if (now - this.rotatedAt >= generation) {
			this.previous = now - this.rotatedAt >= 2 * generation ? new Set() : this.current;
			this.current = new Set();
			this.rotatedAt = now;
		}
		if (this.current.has(id) || this.previous.has(id)) return false;
		this.current.add(id);
		return true;
	}
}

/**
 * `busKeys`: this group's signing key, and every group's public keys.
 * `callKeys`: the keys of the intake's and owners' proofs, when this process holds them: the first
 * proves its calls, and a proof under any is taken (WEBHOOK_SECRETS_KEY under rotation).
 * `workerApiKeys`: the keys of the proofs of calls made for a worker.
 * `admitUngrouped`: during the roll from the one-user bus, the previous version's nodes (ids of no
 * group) are taken as peers, their announcements believed (BUS_ADMIT_UNGROUPED). Their calls to
 * `keyHoldersOnly` actions get no waiver: a packet's sender is whatever the packet says.
 * `admitUnsigned`: during the roll to the version that signs, a packet of a grouped node that
 * carries no signature is taken (BUS_ADMIT_UNSIGNED); one that carries a signature is checked.
 */
export function busGuard({ busKeys, callKeys, workerApiKeys, admitUngrouped, admitUnsigned = false }: { busKeys: BusKeys; callKeys: readonly Buffer[] | null; workerApiKeys: readonly string[]; admitUngrouped: boolean; admitUnsigned?: boolean }): Middleware {
	let broker: ServiceBroker;
	let signedPackets: SignedPackets;
	const clock = new SigningClock();
	const seen = new SeenCalls();
	const workerKeys = workerApiKeys.map(workerCallKey);
	const callKey = callKeys?.[0] ?? null;
	const warnedAt = new Map<string, number>();
	const discoveries = new AnswerWindow(DISCOVER_ANSWER_EVERY_MS);
	/** A packet dropped for what it claims is worth a warning, once a minute for each kind: one flood, one line, and no flood hides another kind. */
	const dropped = (kind: string, message: string) => {
		if (Date.now() - (warnedAt.get(kind) ?? 0) > 60_000) {
			warnedAt.set(kind, Date.now());
			broker.logger.warn(message);
		}
		return Promise.resolve(false);
	};
	/** The node a call awaiting its answer went to (Moleculer's transit keeps them by id); null for none. */
	const addresseeOf = (id: string): string | null => (broker.transit as unknown as { pendingRequests?: Map<string, { nodeID?: string | null }> } | undefined)?.pendingRequests?.get(id)?.nodeID ?? null;
	/**
	 * While a flood exhausts the budget of signature checks, the nodes' real heartbeats may be among
	 * what is dropped: Moleculer's heartbeat expiry waits until the flood has been over for two of its
	 * timeouts, so that a flood freezes who is on the bus rather than emptying it.
	 */
	let frozenUntil = 0;
	const holdMembership = () => {
		const discoverer = broker.registry.discoverer as unknown as { opts: { disableHeartbeatChecks?: boolean } };
		frozenUntil = Date.now() + 2 * (broker.options.heartbeatTimeout ?? 15) * 1000;
		if (discoverer.opts.disableHeartbeatChecks) return;
		discoverer.opts.disableHeartbeatChecks = true;
		broker.logger.warn("Signed packets come faster than they can be checked (a flood?): the nodes on the bus are kept as they are until it stops.");
		const thaw = setInterval(() => {
			if (Date.now() < frozenUntil) return;
			discoverer.opts.disableHeartbeatChecks = false;
			clearInterval(thaw);
		}, 1000);
		thaw.unref();
	};
	const REFUSALS: Record<Refusal, string> = {
		unsigned: "carries no signature",
		stale: "is signed more than a minute from this node's clock (are the clocks apart?)",
		elsewhere: "was signed for another node",
		replayed: "was signed before the last one taken from that node",
		busy: "came past this second's budget of signature checks",
		forged: "does not carry a signature of its sender's group"
	};
	// This node's own action's flags, never a peer's announcement of them.
	const flagsOf = (action: unknown): Flags => (typeof action === "string" && (broker.registry.getActionEndpointByNodeId(action, broker.nodeID) as { action?: Flags } | null)?.action) || {};
	const believedSender = (sender: unknown): sender is string => isNodeId(sender) && (admitUngrouped || busGroupOf(sender) !== null);
	const refuse = (payload: Packet["payload"], message: string) =>
		broker.transit!.sendResponse(String(payload.sender), String(payload.id), {}, {}, {}, new ServiceError("FORBIDDEN", message, { reason: "unproven" }));

	const guard = {
		name: "BusGuard",
		created(created: ServiceBroker) {
			broker = created;
			// What the guard reads of a packet's bytes before they are parsed (their nesting) is JSON's.
			if (broker.serializer && !(broker.serializer instanceof Serializers.JSON)) throw new Error("The bus guard reads packets as JSON: the broker's serializer must be JSON");
			// An answer is checked against the node its call went to: a balanced call names none.
			if (broker.options?.disableBalancer) throw new Error("The bus guard checks each answer's node: disableBalancer must stay off");
			signedPackets = new SignedPackets(broker.namespace, broker.nodeID, sender => busKeys.groups[busGroupOf(sender)!]);
			if (admitUnsigned) broker.logger.warn("BUS_ADMIT_UNSIGNED is set: announcements without a signature are taken. Unset it once every process signs its own.");
			if (admitUngrouped) broker.logger.warn("BUS_ADMIT_UNGROUPED is set: nodes whose id names no bus group are taken as peers. Unset it once the roll from the one-user bus is done.");
		},
		transitPublish: (next: Publish): Publish => packet => {
			const { payload } = packet;
			// A subject is never built from an id of another form (see isNodeId).
			if (packet.target != null && !isNodeId(packet.target)) return Promise.resolve();
			// A copy: Moleculer may send one announcement object more than once.
			if (SIGNED_PACKETS.has(packet.type)) {
				const signed = { namespace: broker.namespace, cmd: packet.type, sender: broker.nodeID, target: packet.target ?? null, payload: payload as Record<string, unknown> };
				packet.payload = { ...payload, [SIGNATURE_FIELD]: busSignature(busKeys.signing, signed, clock.now()) };
			}
			const group = packet.target ? busGroupOf(packet.target) : null;
			// To every call to a key holder: whether its action asks for a proof is the addressee's to say.
			if (packet.type === "REQ" && packet.target && group && holdsCallKey(group)) {
				const call = { action: String(payload.action), id: String(payload.id), sender: broker.nodeID, target: packet.target, params: payload.params };
				const meta = (payload.meta ?? {}) as Record<string | symbol, unknown>;
				const proveForWorker = meta[WORKER_PROVER] as WorkerProver | undefined;
				// A copy: the payload's meta is the calling context's own.
				if (callKey || proveForWorker)
					packet.payload = { ...payload, meta: { ...meta, ...(callKey ? { [PROOF]: busCallProof(callKey, call) } : {}), ...(proveForWorker ? { [WORKER_PROOF]: proveForWorker(call) } : {}) } };
			}
			// A call's or an event's parentID and requestID are ids of contexts whose callers still await
			// them: read as they are by the addressee (or by every group, for an event), they would let it
			// answer those calls in the addressed node's name. Their digests keep what they are used for,
			// telling one call's repeats (services/replay.ts), and tell nobody the ids.
			if (packet.type === "REQ" || packet.type === "EVENT") packet.payload = { ...packet.payload, parentID: idDigest(packet.payload.parentID), requestID: idDigest(packet.payload.requestID) };
			// A publish that throws (NATS refuses a packet past its payload limit at once: an answer that
			// carries back a caller's meta grown near it) rejects instead, where Moleculer catches and logs
			// it; thrown, it escaped every catch and ended the process.
			try {
				return next(packet);
			} catch (err) {
				return Promise.reject(err);
			}
		},
		// Before a packet is parsed: a signed one larger than any of ours is dropped unread, and so is
		// any that nests deeper than ours do (its answer's serializer, or the validator, would overflow
		// the stack, and the rejection end the process).
		transporterReceive: (next: Receive): Receive => (cmd, data, s) => {
			if (SIGNED_PACKETS.has(cmd) && data.length > (cmd === "INFO" ? SIGNED_PACKET_MAX_BYTES.INFO : SIGNED_PACKET_MAX_BYTES.other)) return dropped("size", `A ${cmd} packet of ${data.length} bytes came over the bus: ignored.`);
			if (nestsDeeperThan(data, BUS_PACKET_MAX_DEPTH)) return dropped("depth", `A ${cmd} packet nesting deeper than ${BUS_PACKET_MAX_DEPTH} levels came over the bus: ignored.`);
			// Whatever handling a packet ends in, it ends here: the transporter's subscription drops what it
			// is given back, so a rejection left in it would end the process.
			const failed = (err: unknown) => dropped("failed", `A ${cmd} packet failed in its handling: ${(err as Error).message}`);
			try {
				return Promise.resolve(next(cmd, data, s)).catch(failed);
			} catch (err) {
				return failed(err);
			}
		},
		transitMessageHandler: (next: Handler): Handler => (cmd, packet) => {
			const { payload } = packet;
			// Its own broadcasts come back to a node (NATS echoes them), so these go silently.
			if (payload?.sender === broker.nodeID) return Promise.resolve(false);
			if (!payload || !believedSender(payload.sender)) return dropped("sender", `A ${cmd} packet from no node of this deployment came over the bus: ignored.`);
			if (SIGNED_PACKETS.has(cmd)) {
				const { [SIGNATURE_FIELD]: signature, ...signed } = payload;
				// A node of no group is one of the previous version's, during the roll (BUS_ADMIT_UNGROUPED): it signs nothing.
				const unsignedWaived = busGroupOf(payload.sender) === null || (admitUnsigned && signature === undefined);
				const refusal = unsignedWaived ? null : signedPackets.check(cmd, payload.sender, signed, signature);
				if (refusal === "busy") holdMembership();
				if (refusal) return dropped(refusal, `A ${cmd} packet in the name of ${payload.sender} ${REFUSALS[refusal]}: ignored.`);
				delete payload[SIGNATURE_FIELD];
			}
			// Each discovery has this node sign and send its whole announcement (about 26 KB) again: a
			// group's key must not buy that at its own rate. A node that asks again within the window was
			// answered already.
			if (cmd === "DISCOVER" && !discoveries.admit(String(payload.sender), Date.now())) return dropped("discover", `${payload.sender} asked for this node's announcement again within ${DISCOVER_ANSWER_EVERY_MS} ms: ignored.`);
			if (cmd === "INFO") {
				if (!Array.isArray(payload.services)) return Promise.resolve(false);
				const group = busGroupOf(payload.sender);
				payload.services = payload.services
					.filter(service => (group === null ? typeof service?.name === "string" : isBelieved(group, service)))
					.map(service => withBelievedInterface(service!));
			}
			if (cmd === "RES") {
				// Nor answers with one: its chunks would wait for their call, held until its sender leaves.
				if (payload.stream || payload.seq != null) return dropped("stream", `A streamed answer from ${payload.sender} came over the bus: ignored.`);
				// Moleculer matches an answer to its call by id alone: one in the name of another node than
				// the call's addressee is another's (the id reached the whole addressee's group).
				const addressee = addresseeOf(String(payload.id));
				if (addressee && addressee !== payload.sender) return dropped("answerer", `An answer in the name of ${payload.sender} to a call made to another node came over the bus: ignored.`);
				// Its meta is merged into the caller's context, whose `$statusCode`, `$responseType` and
				// `$responseHeaders` the gateway sends: only the intake's and the owners' answers set any.
				const group = busGroupOf(payload.sender);
				if (group !== null && !holdsCallKey(group)) delete payload.meta;
			}
			// An own `__proto__` key would become the prototype of the context's meta where Moleculer copies it.
			if ((cmd === "RES" || cmd === "REQ" || cmd === "EVENT") && payload.meta !== null && typeof payload.meta === "object") delete (payload.meta as Record<string, unknown>)["__proto__"];
			if (cmd === "REQ") {
				// Whatever the packet's meta is (none at all included), the proofs are checked, then dropped.
				const { [PROOF]: proof, [WORKER_PROOF]: workerProof, ...meta } = payload.meta !== null && typeof payload.meta === "object" ? (payload.meta as Record<string, unknown>) : {};
				payload.meta = meta;
				// No action here takes a stream; a stream's chunks would wait in memory for their first.
				// Moleculer opens one for any truthy `stream`, not only `true`, and keeps it until its
				// sender's node leaves, which a node that never announced itself never does.
				if (payload.stream || payload.seq != null) return refuse(payload, "Streams are not taken on the bus");
				const flags = flagsOf(payload.action);
				// The public routes say `worker: false` on every call: only a claim costs a check.
				const claimsWorker = meta.worker !== undefined && meta.worker !== false;
				if (flags.keyHoldersOnly || flags.workersOnly || claimsWorker) {
					const call = { action: String(payload.action), id: String(payload.id), sender: payload.sender, target: broker.nodeID, params: payload.params };
					// The parameters' digest once, however many keys are tried, and none without a proof to check.
					const digest = typeof proof === "string" || typeof workerProof === "string" ? busCallDigest(call.params) : "";
					const byKeyHolder = (flags.keyHoldersOnly || flags.workersOnly) && !!callKeys?.some(key => isBusCallProof(key, call, proof, { digest }));
					const forWorker = (flags.workersOnly || claimsWorker) && workerKeys.some(key => isBusCallProof(key, call, workerProof, { digest }));
					const fresh = (byKeyHolder || forWorker) && seen.admit(`${call.sender}\n${call.id}`);
					if (flags.keyHoldersOnly && !(fresh && byKeyHolder)) return refuse(payload, "This action runs only for the intake and the owners");
					if (flags.workersOnly && !fresh) return refuse(payload, "This action runs only for a worker, through the gateway");
					if (!(fresh && forWorker)) delete meta.worker;
				}
			}
			return next(cmd, packet);
		}
	};
	// Moleculer's typings give these hooks the wrapped method's result type; they return the wrapper.
	return guard as unknown as Middleware;
}
