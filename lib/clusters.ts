/**
 * The public Solana clusters by the SOLANA_CLUSTER names that stand for them, with their genesis
 * hashes: a Node that names one must read that cluster (lib/chain.ts checks its endpoints).
 */
export const PUBLIC_CLUSTERS: ReadonlyMap<string, string> = new Map([
	["solana-mainnet", "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d"],
	["solana-devnet", "EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG"],
	["solana-testnet", "4uhcVJyU9pJkvQyS88uRDiswHXSCkY3zQawwpjk2NsNY"]
]);

/**
 * A name that looks like a public cluster's but is none of the three ("mainnet-beta",
 * "Solana-Devnet"): it would tell apps a public cluster while no genesis hash is checked for it.
 */
export function looksPublic(name: string): boolean {
	return !PUBLIC_CLUSTERS.has(name) && /mainnet|devnet|testnet/i.test(name);
}

/** The genesis hash of an endpoint that answered none (down, or a proxy refusing the method). */
export const UNREADABLE = "unreadable";

/** The public cluster whose genesis hash `hash` is, if any. */
function publicClusterOf(hash: string): string | undefined {
	for (const [name, genesis] of PUBLIC_CLUSTERS) if (genesis === hash) return name;
}

/**
 * Which endpoints, by their genesis hashes in list order, are on the cluster: for a public one,
 * those showing its hash (`publicHash`); for another name, those showing the hash more than half
 * of the readable ones show (one endpoint is on its own; two that differ are neither; one that
 * cannot be read takes no other off), and never a public cluster's: named otherwise, it would
 * escape the checks its name brings (its genesis hash, BLOCKHASH_LIFETIME_BLOCKS' floor).
 */
export function endpointsOnCluster(hashes: readonly string[], publicHash: string | undefined): boolean[] {
	let expected = publicHash;
	if (expected === undefined) {
		const readable = hashes.filter(hash => hash !== UNREADABLE);
		const counts = new Map<string, number>();
		for (const hash of readable) counts.set(hash, (counts.get(hash) ?? 0) + 1);
		expected = [...counts].find(([, count]) => count * 2 > readable.length)?.[0];
		if (expected !== undefined && publicClusterOf(expected)) expected = undefined;
	}
	return hashes.map(hash => hash !== UNREADABLE && hash === expected);
}
