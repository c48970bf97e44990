/** services/event-streams.ts: who a stream limit counts against. */
import { clientKey } from "../../services/event-streams";

describe("clientKey", () => {
	it("is the address for IPv4 (IPv4-mapped included), and the /64 for IPv6, however it is written", () => {
		expect(clientKey("203.0.113.9")).toBe("203.0.113.9");
		expect(clientKey("::ffff:203.0.113.9")).toBe("::ffff:203.0.113.9");
		const sameHost = ["2001:db8:1:2::9", "2001:db8:1:2:a:b:c:d", "2001:0db8:0001:0002:0000:0000:0000:0001"].map(clientKey);
		expect(new Set(sameHost)).toEqual(new Set(["2001:db8:1:2::/64"]));
		expect(clientKey("2001:db8:1:3::9")).toBe("2001:db8:1:3::/64");
		expect(clientKey("::1")).toBe("0:0:0:0::/64");
		expect(clientKey("unknown")).toBe("unknown");
	});
});
