/**
 * Who a per-client limit counts against (the public rate, the failed-key lock-out, the stream
 * limits): an IPv4 address, however it is written (IPv4-mapped, or in the NAT64 well-known prefix,
 * where each IPv4 client is one host), or an IPv6 /64, however it is written. One host usually
 * holds a whole /64: counted by address, it would have 2^64 budgets.
 */
import net from "node:net";

export function clientKey(ip: string): string {
	const address = ip.replace(/%.*$/, ""); // a zone id names the link, not the host
	if (!net.isIPv6(address)) return ip;
	const groups = ipv6Groups(address);
	const embedsIpv4 = (groups.slice(0, 5).every(g => g === 0) && groups[5] === 0xffff) || (groups[0] === 0x64 && groups[1] === 0xff9b && groups.slice(2, 6).every(g => g === 0));
	if (embedsIpv4) return [groups[6] >> 8, groups[6] & 0xff, groups[7] >> 8, groups[7] & 0xff].join(".");
	return `${groups.slice(0, 4).map(g => g.toString(16)).join(":")}::/64`;
}

/** The eight 16-bit groups of a valid IPv6 address, a dotted IPv4 tail taken as its last two. */
function ipv6Groups(address: string): number[] {
	const tail = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(address);
	const text = tail ? `${address.slice(0, tail.index)}${((+tail[1] << 8) | +tail[2]).toString(16)}:${((+tail[3] << 8) | +tail[4]).toString(16)}` : address;
	const [head, rest] = text.split("::");
	const left = head ? head.split(":") : [];
	const right = rest === undefined ? [] : rest ? rest.split(":") : [];
	const zeros = Array<string>(8 - left.length - right.length).fill("0");
	return [...left, ...zeros, ...right].map(group => parseInt(group, 16));
}

/**
 * Which peers are the deployment's proxies (TRUST_PROXY): none; every peer, for one hop (`true`);
 * or the listed addresses and CIDR ranges, hop after hop.
 */
export interface ProxyTrust {
	isProxy(ip: string): boolean;
	hops: number;
}

export function proxyTrust(setting: boolean | readonly string[]): ProxyTrust {
	if (setting === false) return { isProxy: () => false, hops: 0 };
	if (setting === true) return { isProxy: () => true, hops: 1 };
	const proxies = new net.BlockList();
	for (const entry of setting) {
		const [address, prefix] = entry.split("/") as [string, string | undefined];
		const family = net.isIPv6(address) ? "ipv6" : "ipv4";
		if (prefix === undefined) proxies.addAddress(address, family);
		else proxies.addSubnet(address, Number(prefix), family);
	}
	return {
		isProxy: ip => {
			const address = ip.replace(/^::ffff:(?=\d+\.\d+\.\d+\.\d+$)/i, "");
			const family = net.isIPv4(address) ? "ipv4" : net.isIPv6(address) ? "ipv6" : null;
			return family !== null && proxies.check(address, family);
		},
		hops: Infinity
	};
}

/**
 * The client's address: the peer's, unless the peer is a proxy. Then `x-forwarded-for` is read
 * from its last entry (the one the nearest proxy appended) towards its first, while the entries
 * are proxies too, at most `hops` entries: what a client wrote itself is never reached past a
 * proxy that appended the address it saw.
 */
export function clientAddressOf(peer: string, forwardedFor: string | undefined, trust: ProxyTrust): string {
	if (!trust.isProxy(peer)) return peer;
	const entries = (forwardedFor ?? "").split(",").map(entry => addressOfEntry(entry.trim())).filter(Boolean);
	let client = peer;
	for (let i = entries.length - 1, hop = 0; i >= 0 && hop < trust.hops; i--, hop++) {
		client = entries[i]!;
		if (!trust.isProxy(client)) break;
	}
	return client;
}

/**
 * An entry's address without the port or brackets some proxies write (`203.0.113.5:41234`,
 * `[2001:db8::1]:443`): with the port kept, each new connection of one client would be a client of
 * its own. Anything else is taken as the proxy wrote it.
 */
function addressOfEntry(entry: string): string {
	const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(entry);
	if (bracketed && net.isIPv6(bracketed[1].replace(/%.*$/, ""))) return bracketed[1];
	const withPort = /^(\d+\.\d+\.\d+\.\d+):\d+$/.exec(entry);
	return withPort && net.isIPv4(withPort[1]) ? withPort[1] : entry;
}
