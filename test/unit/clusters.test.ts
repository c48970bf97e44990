import { endpointsOnCluster, looksPublic, PUBLIC_CLUSTERS, UNREADABLE } from "../../lib/clusters";

const devnet = PUBLIC_CLUSTERS.get("solana-devnet")!;
const mainnet = PUBLIC_CLUSTERS.get("solana-mainnet")!;
const local = "11111111111111111111111111111111";

describe("endpointsOnCluster", () => {
	it("for a public cluster, takes the endpoints showing its genesis hash", () => {
		expect(endpointsOnCluster([devnet, mainnet, UNREADABLE], devnet)).toEqual([true, false, false]);
		expect(endpointsOnCluster([mainnet], devnet)).toEqual([false]);
	});

	it("for another name, takes the hash more than half of the readable endpoints show, whichever place its first is in", () => {
		expect(endpointsOnCluster([local], undefined)).toEqual([true]);
		expect(endpointsOnCluster([devnet, local, local], undefined)).toEqual([false, true, true]);
		expect(endpointsOnCluster([local, devnet], undefined)).toEqual([false, false]);
		expect(endpointsOnCluster([local, devnet, UNREADABLE], undefined)).toEqual([false, false, false]);
		// One that cannot be read (down, a proxy refusing the method) takes no other off.
		expect(endpointsOnCluster([local, UNREADABLE], undefined)).toEqual([true, false]);
		expect(endpointsOnCluster([UNREADABLE], undefined)).toEqual([false]);
	});

	it("for another name, never takes a public cluster's endpoints: under another name, mainnet would escape BLOCKHASH_LIFETIME_BLOCKS' floor", () => {
		expect(endpointsOnCluster([mainnet], undefined)).toEqual([false]);
		expect(endpointsOnCluster([devnet, devnet, UNREADABLE], undefined)).toEqual([false, false, false]);
	});

	it("tells look-alike names of public clusters", () => {
		expect(looksPublic("solana-mainnet-beta")).toBe(true);
		expect(looksPublic("solana-mainnet")).toBe(false);
		expect(looksPublic("solana-localnet")).toBe(false);
	});
});
