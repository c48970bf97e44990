/**
 * Who a per-client limit counts against (the public rate, the failed-key lock-out, the stream
 * limits): an IPv4 address, written the same whether IPv4-mapped or not, or an IPv6 /64, however
 * it is written. One host usually holds a whole /64: counted by address, it would have 2^64
 * budgets.
 */
import net from "node:net";

export function clientKey(ip: string): string {
	const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
	if (mapped) return mapped[1];
	if (!net.isIPv6(ip)) return ip;
	const [head, tail = ""] = ip.split("::");
	const left = head ? head.split(":") : [];
	const right = ip.includes("::") ? (tail ? tail.split(":") : []) : [];
	const groups = [...left, ...Array<string>(8 - left.length - right.length).fill("0"), ...right];
	return `${groups.slice(0, 4).map(group => parseInt(group, 16).toString(16)).join(":")}::/64`;
}
