/**
 * Running figures of the online Crankers (SPEC §8): how many, per role, and per mint the
 * settlement liquidity and how many settlement Crankers offer it. Kept as heartbeats arrive and
 * as Crankers fall silent, so the observation routes answer in time that does not grow with the
 * number of Crankers ever stored.
 */
export interface CrankerContribution {
	crankerPubkey: string;
	roles: readonly string[];
	liquidity: readonly { tokenMintAddress: string; available: string }[];
	lastSeenAt: string;
}

export interface CrankerFigures {
	online: number;
	byRole: Record<string, number>;
	mints: Record<string, { liquidity: string; crankersOnline: number }>;
}

export class CrankerTotals {
	/** The heartbeat each online Cranker counts with. */
	private readonly counted = new Map<string, CrankerContribution>();
	/** Heartbeats in arrival order (lastSeenAt ascending, near enough): the next to fall silent come first. */
	private readonly arrivals: { crankerPubkey: string; lastSeenAt: string }[] = [];
	private head = 0;
	private readonly byRole = new Map<string, number>();
	private readonly mints = new Map<string, { liquidity: bigint; crankersOnline: number }>();

	constructor(private readonly roles: readonly string[]) {}

	/**
	 * Counts a Cranker's latest accepted heartbeat instead of its previous one. One already counted,
	 * or older than the one counted (read again from the store), changes nothing.
	 */
	seen(contribution: CrankerContribution): void {
		const previous = this.counted.get(contribution.crankerPubkey);
		if (previous && previous.lastSeenAt >= contribution.lastSeenAt) return;
		if (previous) this.add(previous, -1);
		this.add(contribution, 1);
		this.counted.set(contribution.crankerPubkey, contribution);
		this.arrivals.push({ crankerPubkey: contribution.crankerPubkey, lastSeenAt: contribution.lastSeenAt });
	}

	/** Stops counting the Crankers whose last heartbeat is at or before `cutoff` (ISO time). */
	expire(cutoff: string): void {
		while (this.head < this.arrivals.length && this.arrivals[this.head].lastSeenAt <= cutoff) {
			const { crankerPubkey, lastSeenAt } = this.arrivals[this.head++];
			const current = this.counted.get(crankerPubkey);
			// A later heartbeat of the same Cranker supersedes this arrival.
			if (current?.lastSeenAt !== lastSeenAt) continue;
			this.add(current, -1);
			this.counted.delete(crankerPubkey);
		}
		// Compact now and then, so the queue's memory follows the Crankers online, not all arrivals.
		if (this.head > 1024 && this.head * 2 > this.arrivals.length) {
			this.arrivals.splice(0, this.head);
			this.head = 0;
		}
	}

	get online(): number {
		return this.counted.size;
	}

	snapshot(): CrankerFigures {
		return {
			online: this.online,
			byRole: Object.fromEntries(this.roles.map(role => [role, this.byRole.get(role) ?? 0])),
			mints: Object.fromEntries([...this.mints].map(([mint, m]) => [mint, { liquidity: m.liquidity.toString(), crankersOnline: m.crankersOnline }]))
		};
	}

	private add(contribution: CrankerContribution, sign: 1 | -1): void {
		for (const role of contribution.roles) this.byRole.set(role, (this.byRole.get(role) ?? 0) + sign);
		if (!contribution.roles.includes("settlement")) return;
		for (const { tokenMintAddress, available } of contribution.liquidity) {
			const mint = this.mints.get(tokenMintAddress) ?? { liquidity: 0n, crankersOnline: 0 };
			mint.liquidity += BigInt(available) * BigInt(sign);
			mint.crankersOnline += sign;
			if (mint.crankersOnline === 0) this.mints.delete(tokenMintAddress);
			else this.mints.set(tokenMintAddress, mint);
		}
	}
}
