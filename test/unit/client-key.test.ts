/**
 * lib/client-key: who a request counts against behind TRUST_PROXY. The attack it answers: a
 * caller that reaches the gateway directly, not through the proxy, names a Cranker's address in
 * `x-forwarded-for`, sends wrong keys, and locks that Cranker out. With the proxies listed, only
 * a listed peer's header is read.
 */
import { clientAddressOf, proxyTrust } from "../../lib/client-key";

describe("clientAddressOf", () => {
	const listed = proxyTrust(["10.0.0.0/8", "192.168.1.7", "fd00::/8"]);

	test("no proxy: the peer, whatever the header says", () => {
		expect(clientAddressOf("203.0.113.5", "198.51.100.1", proxyTrust(false))).toBe("203.0.113.5");
	});

	test("TRUST_PROXY=true: any peer is the proxy, for one hop (the entry it appended)", () => {
		expect(clientAddressOf("203.0.113.5", "1.1.1.1, 198.51.100.1", proxyTrust(true))).toBe("198.51.100.1");
		expect(clientAddressOf("203.0.113.5", "", proxyTrust(true))).toBe("203.0.113.5");
	});

	test("listed proxies: a peer that is not one is the client, its header unread (the lock-out attack)", () => {
		expect(clientAddressOf("10.9.9.9", "198.51.100.1", listed)).toBe("198.51.100.1");
		expect(clientAddressOf("172.16.0.4", "198.51.100.1", listed)).toBe("172.16.0.4");
		expect(clientAddressOf("::ffff:172.16.0.4", "198.51.100.1", listed)).toBe("::ffff:172.16.0.4");
	});

	test("listed proxies: read from the last entry back while the entries are proxies; a client's own entries are never reached", () => {
		expect(clientAddressOf("::ffff:10.0.0.2", "6.6.6.6, 198.51.100.1, 192.168.1.7", listed)).toBe("198.51.100.1");
		expect(clientAddressOf("fd00::1", "2001:db8::9", listed)).toBe("2001:db8::9");
		// Every entry a proxy: the first one, the client as the outermost proxy saw it.
		expect(clientAddressOf("10.0.0.2", "10.1.1.1, 10.2.2.2", listed)).toBe("10.1.1.1");
		expect(clientAddressOf("10.0.0.2", undefined, listed)).toBe("10.0.0.2");
		// Not an address: taken as it is, as the proxy wrote it (it counts as one client).
		expect(clientAddressOf("10.0.0.2", "unknown", listed)).toBe("unknown");
	});

	test("an entry with a port, or an IPv6 address in brackets, is the address: each connection of a client is not a client of its own", () => {
		expect(clientAddressOf("203.0.113.5", "198.51.100.1:41234", proxyTrust(true))).toBe("198.51.100.1");
		expect(clientAddressOf("203.0.113.5", "[2001:db8::9]:443", proxyTrust(true))).toBe("2001:db8::9");
		expect(clientAddressOf("203.0.113.5", "[2001:db8::9]", proxyTrust(true))).toBe("2001:db8::9");
		// Read on past a proxy written with its port.
		expect(clientAddressOf("10.0.0.2", "198.51.100.1:5, 10.2.2.2:80", listed)).toBe("198.51.100.1");
		// Not an address and a port: as written.
		expect(clientAddressOf("10.0.0.2", "999.1.1.1:2", listed)).toBe("999.1.1.1:2");
		expect(clientAddressOf("10.0.0.2", "[nothing]:1", listed)).toBe("[nothing]:1");
	});
});
