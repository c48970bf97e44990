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
