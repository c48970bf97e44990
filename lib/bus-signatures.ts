/**
 * Signed announcements on the bus. Moleculer believes what a packet says of its sender, and every
 * group may publish the broadcasts, so without signatures any group's credentials could speak for
 * another group's node: announce it emptied of its services, say it left, ask every node to answer
 * to it. Each group has an ed25519 key pair; a process holds its own group's private key
 * (BUS_SIGNING_KEY) and every group's public keys (BUS_PUBLIC_KEYS), and signs the packets that
 * say who a node is and whether it lives, bound to the deployment's namespace, their addressee and
 * the time. A receiver checks each against the public keys of the group its sender's id names,
 * takes a packet addressed to another node for a replay, and takes each sender's packets in the
 * order they were signed, each once (SignedPackets). A process can still speak for another node of
 * its own group.
 *
 * Keys are base64 of their DER form, as openssl writes them (k8s/README.md, "The Secret").
 */
import { createPrivateKey, createPublicKey, generateKeyPairSync, sign, verify, type KeyObject } from "node:crypto";
import { BUS_GROUPS, busGroupOf, isBusGroup, type BusGroup } from "./bus-groups";

/** The packets signed: those that tell who a node is, whether it lives, or ask every node to answer it. */
export const SIGNED_PACKETS: ReadonlySet<string> = new Set(["DISCOVER", "INFO", "DISCONNECT", "HEARTBEAT", "PING", "PONG"]);

/** How long a signature holds (clocks differ by up to this much). */
export const BUS_SIGNATURE_TTL_MS = 60_000;

/**
 * The largest signed packet taken, in bytes, before it is parsed: an announcement lists every
 * action's schema (about 26 KB for every service in one process); the others are a few fields.
 */
export const SIGNED_PACKET_MAX_BYTES = { INFO: 128 * 1024, other: 4 * 1024 };

/**
 * Signature checks a second at most, each weighing 1 and 1 more per 16 KB it hashes: a node's
 * heartbeats and announcements need a few; a flood of made-up ones costs no more (about 80 ms of
 * CPU a second). While a flood exhausts it, the guard keeps the nodes it knows (bus-guard.ts).
 */
export const SIGNATURE_CHECKS_PER_SECOND = 1000;

/**
 * Senders remembered at most for each group (so that the node ids one group's key can mint keep no
 * other group's new nodes out), and signatures of one millisecond per sender: no flood grows them further.
 */
const MAX_SENDERS_PER_GROUP = 2_500;
const MAX_SAME_MILLISECOND = 64;

/** The payload field that carries a packet's signature: `<ms>:<addressee, empty for a broadcast>:<base64url signature>`. */
export const SIGNATURE_FIELD = "busSignature";

/** Fields the transporter sets after a packet is signed (the protocol version, the sender), and the signature itself. */
const UNSIGNED_FIELDS = new Set(["ver", "sender", SIGNATURE_FIELD]);

/** A packet as signed: the deployment, its type, sender and addressee (null: a broadcast), and its payload. */
export interface SignedPacket {
	namespace: string;
	cmd: string;
	sender: string;
	target: string | null;
	payload: Record<string, unknown>;
}

/** What a signature covers: the packet, the time, and its payload's JSON (the JSON serializer's own). */
function signedBytes(packet: SignedPacket, at: number): Buffer {
	const signed = Object.fromEntries(Object.entries(packet.payload).filter(([name]) => !UNSIGNED_FIELDS.has(name)));
	return Buffer.from([packet.namespace, packet.cmd, packet.sender, packet.target ?? "", at, JSON.stringify(signed)].join("\n"), "utf8");
}

export function busSignature(privateKey: KeyObject, packet: SignedPacket, at = Date.now()): string {
	return `${at}:${packet.target ?? ""}:${sign(null, signedBytes(packet, at), privateKey).toString("base64url")}`;
}

/**
 * A signature's parts, or null when it is not exactly as busSignature writes it: one spelling per
 * signature (no leading zero; the last base64url character's unused bits zero), so that "seen
 * once" cannot be dodged by spelling a seen signature otherwise.
 */
function parseSignature(signature: unknown): { at: number; target: string | null; bytes: Buffer; text: string } | null {
	if (typeof signature !== "string" || signature.length > 400) return null;
	const match = /^(0|[1-9]\d{0,14}):([A-Za-z0-9_.-]{0,200}):([A-Za-z0-9_-]{86})$/.exec(signature);
	if (!match) return null;
	const bytes = Buffer.from(match[3], "base64url");
	if (bytes.toString("base64url") !== match[3]) return null;
	return { at: Number(match[1]), target: match[2] || null, bytes, text: signature };
}

/** Why a signed packet was not taken. */
export type Refusal = "unsigned" | "stale" | "elsewhere" | "replayed" | "busy" | "forged";

/**
 * The receiving side: a packet is taken when its signature is well formed, fresh, addressed to
 * this node or to all, later than the last one taken from its sender (or of the same millisecond
 * and not seen), within the budget of checks, and valid. The cheap checks come first, so a packet
 * refused by them costs no signature check. Each sender's last time is kept for as long as a
 * signature holds.
 */
export class SignedPackets {
	private readonly last = new Map<string, { at: number; seen: Set<string> }>();
	/** Senders remembered, by the group their id names. */
	private readonly senders = new Map<BusGroup | null, number>();
	private budget = { second: 0, left: SIGNATURE_CHECKS_PER_SECOND };

	constructor(
		private readonly namespace: string,
		private readonly nodeID: string,
		private readonly keysOf: (sender: string) => readonly KeyObject[]
	) {}

	/** Null when `payload` (a packet of `cmd` from `sender`) is taken; else why not. */
	check(cmd: string, sender: string, payload: Record<string, unknown>, signature: unknown, now = Date.now()): Refusal | null {
		const parsed = parseSignature(signature);
		if (!parsed) return "unsigned";
		if (Math.abs(now - parsed.at) > BUS_SIGNATURE_TTL_MS) return "stale";
		if (parsed.target !== null && parsed.target !== this.nodeID) return "elsewhere";
		const last = this.last.get(sender);
		if (last && (parsed.at < last.at || (parsed.at === last.at && last.seen.has(parsed.text)))) return "replayed";
		const group = busGroupOf(sender);
		const crowded = last ? parsed.at === last.at && last.seen.size >= MAX_SAME_MILLISECOND : (this.senders.get(group) ?? 0) >= MAX_SENDERS_PER_GROUP;
		const second = Math.floor(now / 1000);
		if (second !== this.budget.second) this.budget = { second, left: SIGNATURE_CHECKS_PER_SECOND };
		if (crowded || this.budget.left <= 0) return "busy";
		const bytes = signedBytes({ namespace: this.namespace, cmd, sender, target: parsed.target, payload }, parsed.at);
		const keys = this.keysOf(sender);
		this.budget.left -= keys.length * (1 + (bytes.length >> 14));
		if (!keys.some(key => verify(null, bytes, key, parsed.bytes))) return "forged";
		if (last && parsed.at === last.at) last.seen.add(parsed.text);
		else {
			if (!last) this.senders.set(group, (this.senders.get(group) ?? 0) + 1);
			this.last.set(sender, { at: parsed.at, seen: new Set([parsed.text]) });
		}
		this.prune(now);
		return null;
	}

	private prunedAt = 0;
	/** Senders whose last packet is older than a signature holds need no memory: anything older is stale. */
	private prune(now: number): void {
		if (now - this.prunedAt < BUS_SIGNATURE_TTL_MS) return;
		this.prunedAt = now;
		for (const [sender, { at }] of this.last) {
			if (now - at <= 2 * BUS_SIGNATURE_TTL_MS) continue;
			this.last.delete(sender);
			const group = busGroupOf(sender);
			this.senders.set(group, (this.senders.get(group) ?? 1) - 1);
		}
	}
}

/**
 * The sending side's clock: never earlier than its last stamp, so that a clock set back a little
 * does not make its next packets look like replays. Set back by more than a signature holds (a
 * clock that had run ahead, then corrected), it follows: its packets would be stale otherwise.
 */
export class SigningClock {
	private last = 0;
	now(wall = Date.now()): number {
		this.last = this.last - wall > BUS_SIGNATURE_TTL_MS ? wall : Math.max(wall, this.last);
		return this.last;
	}
}

/** A group's private key from BUS_SIGNING_KEY (base64 of PKCS#8 DER); null when it is not an ed25519 key. */
export function busSigningKey(base64: string): KeyObject | null {
	try {
		const key = createPrivateKey({ key: Buffer.from(base64, "base64"), format: "der", type: "pkcs8" });
		return key.asymmetricKeyType === "ed25519" ? key : null;
	} catch {
		return null;
	}
}

/**
 * The public keys of BUS_PUBLIC_KEYS (`gateway:<base64 SPKI DER>,intake:…`): each group's, one or
 * more (a rotation lists the old key and the new one), or a message saying what is wrong.
 */
export function busPublicKeys(text: string): Record<BusGroup, KeyObject[]> | string {
	const keys: Partial<Record<BusGroup, KeyObject[]>> = {};
	for (const entry of text.split(",").map(part => part.trim()).filter(Boolean)) {
		const colon = entry.indexOf(":");
		const group = entry.slice(0, colon);
		if (colon < 1 || !isBusGroup(group)) return `each entry is <group>:<base64 public key>, with a group of ${Object.keys(BUS_GROUPS).join(", ")}`;
		try {
			const key = createPublicKey({ key: Buffer.from(entry.slice(colon + 1), "base64"), format: "der", type: "spki" });
			if (key.asymmetricKeyType !== "ed25519") return `${group}'s key is not an ed25519 key`;
			(keys[group] ??= []).push(key);
		} catch {
			return `${group}'s key is not a public key in base64 DER`;
		}
	}
	const missing = (Object.keys(BUS_GROUPS) as BusGroup[]).filter(group => !keys[group]);
	return missing.length ? `it lacks the key of ${missing.join(", ")}` : (keys as Record<BusGroup, KeyObject[]>);
}

/** Whether `privateKey` is the private half of one of `publicKeys`. */
export function isKeyPairOf(privateKey: KeyObject, publicKeys: readonly KeyObject[]): boolean {
	const derived = createPublicKey(privateKey).export({ format: "der", type: "spki" });
	return publicKeys.some(key => derived.equals(key.export({ format: "der", type: "spki" })));
}

/** The keys a process of `group` holds: its group's private key, and every group's public keys. */
export interface BusKeys {
	signing: KeyObject;
	groups: Record<BusGroup, KeyObject[]>;
}

/**
 * A new key pair per group (harnesses; k8s/README.md makes them with openssl): as the environment
 * gives them to a process of `group`, or as its bus guard holds them.
 */
export function newBusKeyring(): { env(group: BusGroup): { BUS_SIGNING_KEY: string; BUS_PUBLIC_KEYS: string }; keys(group: BusGroup): BusKeys } {
	const pairs = Object.fromEntries((Object.keys(BUS_GROUPS) as BusGroup[]).map(group => [group, generateKeyPairSync("ed25519")])) as Record<BusGroup, { publicKey: KeyObject; privateKey: KeyObject }>;
	const groups = Object.fromEntries(Object.entries(pairs).map(([group, pair]) => [group, [pair.publicKey]])) as Record<BusGroup, KeyObject[]>;
	const publicKeys = Object.entries(pairs)
		.map(([group, pair]) => `${group}:${pair.publicKey.export({ format: "der", type: "spki" }).toString("base64")}`)
		.join(",");
	return {
		env: group => ({ BUS_SIGNING_KEY: pairs[group].privateKey.export({ format: "der", type: "pkcs8" }).toString("base64"), BUS_PUBLIC_KEYS: publicKeys }),
		keys: group => ({ signing: pairs[group].privateKey, groups })
	};
}
