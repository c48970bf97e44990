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
