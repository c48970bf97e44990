/**
 * The bus's trust zones. Each process group of the distributed deployment (k8s/4*.yaml) signs in
 * to NATS as its own user, and that user may subscribe only to its own nodes' subjects and to the
 * broadcasts. So a process holding one group's credentials, the internet-facing gateway's above
 * all, can neither read another group's requests and answers nor receive calls in its name.
 *
 * Moleculer addresses a node's requests, answers and events to `<prefix>.<CMD>.<nodeID>`. A node's
 * id therefore starts with its group as a subject token (`owners.<host>-<pid>`), which NATS
 * permissions can match (`MOL-<namespace>.REQ.owners.>`). A node is believed to serve only what its
 * group may serve: another group's node that claims an owner's service is ignored. One that claims
 * an owner's node id is believed, but cannot receive what is sent to it (such calls time out).
 *
 * Every group may publish every Moleculer packet (and nothing else), so the internal actions that
 * change state ask more of a call that comes over the bus: a fresh proof, keyed by the secret only
 * the intake and the owners hold, over the call and its parameters (`keyHoldersOnly` in
 * services/internal.ts).
 */
import { createHash, createHmac, hkdfSync, timingSafeEqual } from "node:crypto";
import { JSON_TEXT } from "./json-text";

/** The groups, each the NATS user its processes sign in as, and the services it may run. */
export const BUS_GROUPS = {
	// The public REST gateway: it calls the others and serves none of their services.
	gateway: ["api"],
	// Intake: submissions, webhook delivery, the network figures; may run a gateway beside them.
	intake: ["api", "receiver", "network", "webhook-delivery"],
	verifier: ["verifier"],
	owners: ["mempool", "payouts", "crankers", "tin", "epochs", "access", "webhooks"]
} as const satisfies Record<string, readonly string[]>;

export type BusGroup = keyof typeof BUS_GROUPS;

/** Services every process runs, whatever its group (services/index.ts): each answers for itself. */
const EVERY_NODE = ["metrics"];

export function isBusGroup(name: string): name is BusGroup {
	return Object.hasOwn(BUS_GROUPS, name);
}

export function mayServe(group: BusGroup, service: string): boolean {
	return EVERY_NODE.includes(service) || (BUS_GROUPS[group] as readonly string[]).includes(service);
}

/**
 * What each service answers and handles, as its announcement (INFO) names them: a peer is
 * believed for these names only (test/unit/bus-guard.test.ts checks them against what the
 * services announce). Moleculer keeps a list for every action and event name a peer announces, for
 * good, and matches every event any process emits against each event name as a pattern: a name
 * such as `a*(` throws in every emit, and fresh names at every announcement would grow the lists
 * without end.
 */
const SERVICE_INTERFACES: Readonly<Record<string, { actions: readonly string[]; events?: readonly string[] }>> = {
	api: { actions: ["intentWork", "webhookList", "openapi"], events: ["$services.changed", "events.appended"] },
	receiver: { actions: ["submitMany", "submit", "wake"], events: ["epochs.opened"] },
	network: { actions: ["status", "metrics", "overview", "settlementNetworks"] },
	"webhook-delivery": { actions: [], events: ["events.appended"] },
	verifier: { actions: ["verify", "verifyMany"], events: ["registry.routeChanged"] },
	mempool: {
		actions: [
			...["events", "taggedEvents", "eventPage", "taggedHead", "latestEvent"],
			...["receive", "receiveMany", "view", "list", "workPage", "pendingVerification", "receivedHolder", "claimForVerification", "completeVerification", "returnToReceived"],
			...["updateStatus", "leaseForPayout", "rejectReplacedRoute", "epochTotals", "archiveTerminal", "archivedPage", "totals", "counts"]
		]
	},
	payouts: { actions: ["authorize"] },
	crankers: { actions: ["heartbeat", "admitSignature", "summary", "standing", "onlineCount"] },
	tin: {
		actions: [
			...["events", "taggedEvents", "eventPage", "taggedHead", "latestEvent"],
			...["resolve", "check", "getRoute", "submitOperation", "listOperations", "getOperation", "verificationWork", "feeWork", "registryWork"],
			...["verified", "feeCommitted", "submitted", "finalized", "failed", "rejected"]
		]
	},
	epochs: { actions: ["current", "status", "close"] },
	access: { actions: ["consume"] },
	// `list`: the previous version's GET /webhooks, which the gateway calls while owners of that version run.
	webhooks: { actions: ["create", "page", "list", "get", "remove", "claim", "advance", "fail", "release"] },
	metrics: { actions: ["snapshot"] }
};

/**
 * How callers reach an action, where it is not the broker's default. Moleculer takes these from
 * the announcement of whichever node announced the action first (the balancing strategy and its
 * options) or of the node called (the timeout, the retries): taken from a peer, a Shard strategy
 * with a cache of 50 million entries ran a process out of memory, and a timeout of 1 ms failed
 * every call. So every announced action is believed with these, set here (believedInterface), and
 * the services declare their actions with them too.
 */
export const ACTION_CALL_OPTIONS = {
	"verifier.verify": { strategy: "Shard", strategyOptions: { shardKey: "request.senderWallet" } },
	"verifier.verifyMany": { strategy: "Shard", strategyOptions: { shardKey: "requests.0.senderWallet" } },
	// Longer than the broker's default: a close waits EPOCH_CLOSE_SETTLE_MS and archives in batches.
	"epochs.close": { timeout: 28_000 }
} as const;

const VISIBILITIES: readonly unknown[] = ["published", "public", "protected", "private"];

/**
 * A peer's parameter schema is read for GET /openapi.json only, and kept when it is no larger than
 * a schema of ours could be (the largest is about 1 KB, 7 levels deep): a peer's could otherwise
 * make every build of that document costly.
 */
const MAX_PARAMS_JSON_CHARS = 8192;
const MAX_PARAMS_DEPTH = 12;

function isSmallSchema(value: unknown): value is object {
	const shallow = (node: unknown, depth: number): boolean => node === null || typeof node !== "object" || (depth < MAX_PARAMS_DEPTH && Object.values(node).every(child => shallow(child, depth + 1)));
	return value !== null && typeof value === "object" && !Array.isArray(value) && shallow(value, 1) && JSON.stringify(value).length <= MAX_PARAMS_JSON_CHARS;
}

type AnnouncedEntry = { name: string; group?: string; visibility?: string; params?: object; responseType?: string; answersJsonTexts?: true };

/**
 * An announced service's actions and events as they are believed: those it has (above), each
 * filed under its own name, rebuilt from its name alone: for an action, its visibility, its
 * parameters' schema (GET /openapi.json documents the running versions' actions), and whether it
 * answers JSON texts (lib/json-text.ts: so the gateway reads the answer of the version that gives
 * it, during a rolling update); for an event, its group when that is the service's own
 * (Moleculer balances an event among the nodes of a group, so a peer announcing another group
 * would take a share of that group's events). The rest is left out, not the service, so that a
 * newer version's node with one more action or event is still called during a rolling update.
 */
export function believedInterface(service: string, announced: { actions?: unknown; events?: unknown }): { actions: Record<string, AnnouncedEntry>; events: Record<string, AnnouncedEntry> } {
	const known = Object.hasOwn(SERVICE_INTERFACES, service) ? SERVICE_INTERFACES[service] : { actions: [] };
	const actionNames = known.actions.map(action => `${service}.${action}`);
	const kept = (entries: unknown, names: readonly string[], rebuild: (name: string, entry: { group?: unknown; visibility?: unknown; params?: unknown; responseType?: unknown; answersJsonTexts?: unknown }) => AnnouncedEntry | null) => {
		const believed: Record<string, AnnouncedEntry> = {};
		if (entries === null || typeof entries !== "object") return believed;
		for (const [key, entry] of Object.entries(entries)) {
			const announcedEntry = (entry ?? {}) as { name?: unknown; group?: unknown; visibility?: unknown; params?: unknown; responseType?: unknown; answersJsonTexts?: unknown };
			const rebuilt = key === announcedEntry.name && names.includes(key) ? rebuild(key, announcedEntry) : null;
			if (rebuilt) believed[key] = rebuilt;
		}
		return believed;
	};
	return {
		actions: kept(announced.actions, actionNames, (name, { visibility, params, responseType, answersJsonTexts }) => {
			if (visibility !== undefined && !VISIBILITIES.includes(visibility)) return null;
			const options = Object.hasOwn(ACTION_CALL_OPTIONS, name) ? ACTION_CALL_OPTIONS[name as keyof typeof ACTION_CALL_OPTIONS] : {};
			const texts = answersJsonTexts === true && responseType === JSON_TEXT ? { responseType: JSON_TEXT, answersJsonTexts: true as const } : {};
			const schema = isSmallSchema(params) ? { params } : {};
			return { name, ...(visibility !== undefined ? { visibility: visibility as string } : {}), ...schema, ...texts, ...options };
		}),
		events: kept(announced.events, known.events ?? [], (name, { group }) => {
			if (group !== undefined && group !== service) return null;
			return group === undefined ? { name } : { name, group };
		})
	};
}

/** The first group that may run all of `services` (for harnesses that start processes by their services). */
export function busGroupServing(services: string[]): BusGroup {
	const group = (Object.keys(BUS_GROUPS) as BusGroup[]).find(candidate => services.every(service => mayServe(candidate, service)));
	if (!group) throw new Error(`no bus group runs all of ${services.join(", ")}`);
	return group;
}

/** A node id NATS permissions can tell apart by group: the group, then a dot. */
export function busNodeId(group: BusGroup, name: string): string {
	return `${group}.${name}`;
}

/**
 * A node id as this deployment makes them (a group, a host name, a pid): what else a packet names
 * as its sender would reach NATS's protocol as a subject, where a space or a line break splits it.
 */
export function isNodeId(value: unknown): value is string {
	// Dot-separated tokens, none empty: NATS matches no permission against a subject with an empty token.
	return typeof value === "string" && value.length <= 200 && /^[A-Za-z0-9][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*$/.test(value);
}

/** The group a node id claims, or null for an id of no group. */
export function busGroupOf(nodeID: string): BusGroup | null {
	const dot = nodeID.indexOf(".");
	if (dot < 1) return null;
	const group = nodeID.slice(0, dot);
	return isBusGroup(group) ? group : null;
}

/** Moleculer's packets addressed to one node (its id after the command). */
const ADDRESSED = ["REQ", "RES", "EVENT", "DISCOVER", "INFO", "PING", "PONG"];
/** Moleculer's broadcasts, which every node reads. */
const BROADCAST = ["DISCOVER", "INFO", "DISCONNECT", "HEARTBEAT", "PING"];

/** Moleculer's subject prefix for a namespace (its transporter's `MOL` or `MOL-<namespace>`). */
export function busPrefix(namespace: string): string {
	return namespace ? `MOL-${namespace}` : "MOL";
}

/** What a group's user may subscribe to: its own group's nodes' subjects, and the broadcasts. */
export function busSubscriptions(group: BusGroup, namespace: string): string[] {
	const prefix = busPrefix(namespace);
	return [...ADDRESSED.map(cmd => `${prefix}.${cmd}.${group}.>`), ...BROADCAST.map(cmd => `${prefix}.${cmd}`)];
}

/**
 * What any group's user may publish: Moleculer's packets, to any node (every group calls, answers
 * and announces itself), and nothing else. Not NATS's own APIs: JetStream's would let a user have
 * the server copy other groups' subjects to one it reads.
 */
export function busPublications(namespace: string): string[] {
	const prefix = busPrefix(namespace);
	return [...ADDRESSED.map(cmd => `${prefix}.${cmd}.>`), ...BROADCAST.map(cmd => `${prefix}.${cmd}`)];
}

/**
 * The `authorization` block of nats.conf for the bus of `namespace` (NAMESPACE): a user per group,
 * with its password (a literal, or a `$VARIABLE` nats-server reads from its environment) and its
 * permissions.
 */
export function natsAuthorization(passwordOf: (group: BusGroup) => string, namespace: string, indent = ""): string {
	const list = (subjects: string[]) => subjects.map(subject => `"${subject}"`).join(", ");
	const users = (Object.keys(BUS_GROUPS) as BusGroup[]).map(
		group => `${indent}    { user: ${group}, password: ${passwordOf(group)}, permissions: { publish: [${list(busPublications(namespace))}], subscribe: [${list(busSubscriptions(group, namespace))}] } }`
	);
	return [`${indent}authorization {`, `${indent}  timeout: 2`, `${indent}  users: [`, ...users, `${indent}  ]`, `${indent}}`].join("\n");
}

/** Whether `group` holds the key of the calls to the actions that change state: the intake and the owners. */
export function holdsCallKey(group: BusGroup): boolean {
	return group === "intake" || group === "owners";
}

/**
 * The key that proves a call comes from the intake or the owners, derived from the secret only
 * they hold (WEBHOOK_SECRETS_KEY; the gateway and the verifiers are not given it).
 */
export function busCallKey(sharedSecret: Buffer): Buffer {
	return Buffer.from(hkdfSync("sha256", sharedSecret, Buffer.alloc(0), "scs bus calls v1", 32));
}

/** How long a call's proof holds: a replay later is refused, one sooner is caught as a repeat. */
export const BUS_CALL_PROOF_TTL_MS = 60_000;

/** What a call's proof covers: the action, the call's id, its sender, its addressee and its parameters. */
export interface BusCall {
	action: string;
	id: string;
	sender: string;
	target: string;
	params: unknown;
}

/** The digest of a call's parameters a proof covers (their JSON, as Moleculer's JSON serializer sends them). */
export function busCallDigest(params: unknown): string {
	return createHash("sha256").update(JSON.stringify(params) ?? "").digest("base64url");
}

function busCallMac(key: Buffer, call: BusCall, at: number, digest: string): string {
	return createHmac("sha256", key).update([call.action, call.id, call.sender, call.target, at, digest].join("\n")).digest("base64url");
}

/**
 * A call's proof, made at `at` (ms): a MAC over the call, its parameters included, so that a proof
 * seen once allows no other call. Moleculer's JSON serializer gives the addressee the parameters
 * as they were sent, so both ends digest the same JSON.
 */
export function busCallProof(key: Buffer, call: BusCall, at = Date.now()): string {
	return `${at}.${busCallMac(key, call, at, busCallDigest(call.params))}`;
}

/**
 * Whether `proof` is a fresh proof of `call` (within BUS_CALL_PROOF_TTL_MS of `now`, either way);
 * `digest`, the parameters' (busCallDigest), when the caller has it already.
 */
export function isBusCallProof(key: Buffer, call: BusCall, proof: unknown, { digest, now = Date.now() }: { digest?: string; now?: number } = {}): boolean {
	if (typeof proof !== "string") return false;
	const dot = proof.indexOf(".");
	const at = Number(proof.slice(0, dot));
	if (dot < 1 || !Number.isSafeInteger(at) || Math.abs(now - at) > BUS_CALL_PROOF_TTL_MS) return false;
	const given = Buffer.from(proof.slice(dot + 1));
	const expected = Buffer.from(busCallMac(key, call, at, digest ?? busCallDigest(call.params)));
	return given.length === expected.length && timingSafeEqual(given, expected);
}

/**
 * Whether `group` holds the worker API keys (WORKER_API_KEYS): the gateway checks a worker's key
 * and proves with it the calls it makes for the worker; the intake and the owners check those
 * proofs. A verifier holds none, so its bus credentials act for no worker.
 */
export function holdsWorkerKeys(group: BusGroup): boolean {
	return group !== "verifier";
}

/** The key of the proofs of the calls made for a worker, derived from the worker's API key. */
export function workerCallKey(workerApiKey: string): Buffer {
	return Buffer.from(hkdfSync("sha256", Buffer.from(workerApiKey, "utf8"), Buffer.alloc(0), "scs worker calls v1", 32));
}
