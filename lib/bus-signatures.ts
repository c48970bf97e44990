/**
 * Signed announcements on the bus. Moleculer believes what a packet says of its sender, and every
 * group may publish the broadcasts, so without signatures any group's credentials could speak for
 * another group's node: announce it emptied of its services, say it left, ask every node to answer
 * to it. Each group has an ed25519 key pair; a process holds its own group's private key
 * (BUS_SIGNING_KEY) and every group's public key (BUS_PUBLIC_KEYS), and signs the packets that say
 * who a node is and whether it lives. A receiver checks each against the public key of the group
 * its sender's id names. A process can still speak for another node of its own group.
 *
 * Keys are base64 of their DER form, as openssl writes them (`openssl genpkey -algorithm ed25519
 * -outform DER | base64 -w0`; the public key with `openssl pkey -inform DER -pubout -outform DER`).
 */
import { createPrivateKey, createPublicKey, generateKeyPairSync, sign, verify, type KeyObject } from "node:crypto";
import { BUS_GROUPS, isBusGroup, type BusGroup } from "./bus-groups";

/** The packets signed: those that tell who a node is, whether it lives, or ask every node to answer it. */
export const SIGNED_PACKETS: ReadonlySet<string> = new Set(["DISCOVER", "INFO", "DISCONNECT", "HEARTBEAT", "PING", "PONG"]);

/** How long a signature holds (clocks differ): a replay later is refused, and one sooner changes nothing Moleculer has not seen. */
export const BUS_SIGNATURE_TTL_MS = 60_000;

/** The payload field that carries a packet's signature: `<ms>.<base64url signature>`. */
export const SIGNATURE_FIELD = "busSignature";

/** Fields the transporter sets after a packet is signed (the protocol version, the sender), and the signature itself. */
const UNSIGNED_FIELDS = new Set(["ver", "sender", SIGNATURE_FIELD]);

/** What a signature covers: the packet type, its sender, the time, and its payload's JSON (the JSON serializer's own). */
function signedBytes(cmd: string, sender: string, at: number, payload: Record<string, unknown>): Buffer {
	const signed = Object.fromEntries(Object.entries(payload).filter(([name]) => !UNSIGNED_FIELDS.has(name)));
	return Buffer.from(`${cmd}\n${sender}\n${at}\n${JSON.stringify(signed)}`, "utf8");
}

export function busSignature(privateKey: KeyObject, cmd: string, sender: string, payload: Record<string, unknown>, at = Date.now()): string {
	return `${at}.${sign(null, signedBytes(cmd, sender, at, payload), privateKey).toString("base64url")}`;
}

/** Whether `signature` is a fresh signature by `publicKey` of this packet. */
export function isBusSignature(publicKey: KeyObject, cmd: string, sender: string, payload: Record<string, unknown>, signature: unknown, now = Date.now()): boolean {
	if (typeof signature !== "string") return false;
	const dot = signature.indexOf(".");
	const at = Number(signature.slice(0, dot));
	if (dot < 1 || !Number.isSafeInteger(at) || Math.abs(now - at) > BUS_SIGNATURE_TTL_MS) return false;
	const bytes = Buffer.from(signature.slice(dot + 1), "base64url");
	return bytes.length === 64 && verify(null, signedBytes(cmd, sender, at, payload), publicKey, bytes);
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

/** The public keys of BUS_PUBLIC_KEYS (`gateway:<base64 SPKI DER>,intake:…`): one per group, or a message saying what is wrong. */
export function busPublicKeys(text: string): Record<BusGroup, KeyObject> | string {
	const keys: Partial<Record<BusGroup, KeyObject>> = {};
	for (const entry of text.split(",").map(part => part.trim()).filter(Boolean)) {
		const colon = entry.indexOf(":");
		const group = entry.slice(0, colon);
		if (colon < 1 || !isBusGroup(group)) return `each entry is <group>:<base64 public key>, with a group of ${Object.keys(BUS_GROUPS).join(", ")}`;
		if (keys[group]) return `${group} is given twice`;
		try {
			const key = createPublicKey({ key: Buffer.from(entry.slice(colon + 1), "base64"), format: "der", type: "spki" });
			if (key.asymmetricKeyType !== "ed25519") return `${group}'s key is not an ed25519 key`;
			keys[group] = key;
		} catch {
			return `${group}'s key is not a public key in base64 DER`;
		}
	}
	const missing = (Object.keys(BUS_GROUPS) as BusGroup[]).filter(group => !keys[group]);
	return missing.length ? `it lacks the key of ${missing.join(", ")}` : (keys as Record<BusGroup, KeyObject>);
}

/** Whether `privateKey` is the private half of `publicKey`. */
export function isKeyPair(privateKey: KeyObject, publicKey: KeyObject): boolean {
	return createPublicKey(privateKey).export({ format: "der", type: "spki" }).equals(publicKey.export({ format: "der", type: "spki" }));
}

/** The keys a process of `group` holds: its group's private key, and every group's public key. */
export interface BusKeys {
	signing: KeyObject;
	groups: Record<BusGroup, KeyObject>;
}

/**
 * A new key pair per group (harnesses; k8s/README.md makes them with openssl): as the environment
 * gives them to a process of `group`, or as its bus guard holds them.
 */
export function newBusKeyring(): { env(group: BusGroup): { BUS_SIGNING_KEY: string; BUS_PUBLIC_KEYS: string }; keys(group: BusGroup): BusKeys } {
	const pairs = Object.fromEntries((Object.keys(BUS_GROUPS) as BusGroup[]).map(group => [group, generateKeyPairSync("ed25519")])) as Record<BusGroup, { publicKey: KeyObject; privateKey: KeyObject }>;
	const groups = Object.fromEntries(Object.entries(pairs).map(([group, pair]) => [group, pair.publicKey])) as Record<BusGroup, KeyObject>;
	const publicKeys = Object.entries(groups).map(([group, key]) => `${group}:${key.export({ format: "der", type: "spki" }).toString("base64")}`).join(",");
	return {
		env: group => ({ BUS_SIGNING_KEY: pairs[group].privateKey.export({ format: "der", type: "pkcs8" }).toString("base64"), BUS_PUBLIC_KEYS: publicKeys }),
		keys: group => ({ signing: pairs[group].privateKey, groups })
	};
}
