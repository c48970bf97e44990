/**
 * Running figures of the online Crankers (SPEC §8): how many, per role, and per mint the
 * settlement liquidity and how many settlement Crankers offer it (hold any of it). Kept as
 * heartbeats arrive and as Crankers fall silent, so the observation routes answer in time that
 * does not grow with the number of Crankers ever stored.
 */
import { U64_MAX } from "./encoding";

export interface CrankerContribution {
	crankerPubkey: string;
	roles: readonly string[];
	liquidity: readonly { tokenMintAddress: string; available: string }[];
	lastSeenAt: string;
	/** Which binding of `liquidity` to the chain this is, if any: the same heartbeat bound later replaces it. */
	boundAt?: number;
}

export interface CrankerFigures {
	online: number;
	byRole: Record<string, number>;
	mints: Record<string, { liquidity: string; crankersOnline: number }>;
}

/** A later heartbeat, or the same one bound to the chain later. */
function isNewer(a: CrankerContribution, b: CrankerContribution): boolean {
	if (a.lastSeenAt !== b.lastSeenAt) return a.lastSeenAt > b.lastSeenAt;
	return (a.boundAt ?? -1) > (b.boundAt ?? -1);
}

export class CrankerTotals<C extends CrankerContribution = CrankerContribution> {
	/** The heartbeat each online Cranker counts with. */
	private readonly counted = new Map<string, C>();
	/**
	 * Every counted heartbeat, the oldest first (a binary min-heap on lastSeenAt): one another replica
	 * stamped before some already here, and read after them, still falls silent at its own time.
	 */
	private readonly dueToExpire = new ExpiryHeap();
	private readonly byRole = new Map<string, number>();
	/** Per mint: the sum, the settlement Crankers reporting it, and those of them holding any (they offer it). */
	private readonly mints = new Map<string, { liquidity: bigint; reporting: number; crankersOnline: number }>();

	constructor(private readonly roles: readonly string[]) {}

	/**
	 * Counts a Cranker's latest accepted heartbeat, as last bound to the chain, instead of what it
	 * counted with. One already counted, or older than the one counted (read again from the store),
	 * changes nothing.
	 */
	seen(contribution: C): void {
		const previous = this.counted.get(contribution.crankerPubkey);
		if (previous && !isNewer(contribution, previous)) return;
		if (previous) this.add(previous, -1);
		this.add(contribution, 1);
		this.counted.set(contribution.crankerPubkey, contribution);
		if (previous?.lastSeenAt !== contribution.lastSeenAt) this.dueToExpire.push({ crankerPubkey: contribution.crankerPubkey, lastSeenAt: contribution.lastSeenAt });
	}

	/** Stops counting the Crankers whose last heartbeat is at or before `cutoff` (ISO time). */
	expire(cutoff: string): void {
		for (let next = this.dueToExpire.peek(); next && next.lastSeenAt <= cutoff; next = this.dueToExpire.peek()) {
			const { crankerPubkey, lastSeenAt } = this.dueToExpire.pop()!;
			const current = this.counted.get(crankerPubkey);
			// A later heartbeat of the same Cranker supersedes this one.
			if (current?.lastSeenAt !== lastSeenAt) continue;
			this.add(current, -1);
			this.counted.delete(crankerPubkey);
		}
	}

	get online(): number {
		return this.counted.size;
	}

	/** What each online Cranker counts with (as of the last expire()). */
	contributions(): IterableIterator<C> {
		return this.counted.values();
	}

	snapshot(): CrankerFigures {
		return {
			online: this.online,
			byRole: Object.fromEntries(this.roles.map(role => [role, this.byRole.get(role) ?? 0])),
			// A sum over many Crankers may pass what one amount can say (u64): it is told as that much.
			mints: Object.fromEntries([...this.mints].map(([mint, m]) => [mint, { liquidity: (m.liquidity < U64_MAX ? m.liquidity : U64_MAX).toString(), crankersOnline: m.crankersOnline }]))
		};
	}

	private add(contribution: CrankerContribution, sign: 1 | -1): void {
		for (const role of contribution.roles) this.byRole.set(role, (this.byRole.get(role) ?? 0) + sign);
		if (!contribution.roles.includes("settlement")) return;
		for (const { tokenMintAddress, available } of contribution.liquidity) {
			const mint = this.mints.get(tokenMintAddress) ?? { liquidity: 0n, reporting: 0, crankersOnline: 0 };
			const amount = BigInt(available);
			mint.liquidity += amount * BigInt(sign);
			mint.reporting += sign;
			// A Cranker that holds none of a mint cannot pay in it: it does not offer it.
			if (amount > 0n) mint.crankersOnline += sign;
			if (mint.reporting === 0) this.mints.delete(tokenMintAddress);
			else this.mints.set(tokenMintAddress, mint);
		}
	}
}

interface Due {
	crankerPubkey: string;
	lastSeenAt: string;
}

/** A binary min-heap of heartbeats on lastSeenAt (ISO times compare as strings). */
class ExpiryHeap {
	private readonly items: Due[] = [];

	get size(): number {
		return this.items.length;
	}

	peek(): Due | undefined {
		return this.items[0];
	}

	push(item: Due): void {
		const items = this.items;
		let i = items.push(item) - 1;
		while (i > 0) {
			const parent = (i - 1) >> 1;
			if (items[parent].lastSeenAt <= item.lastSeenAt) break;
			items[i] = items[parent];
			i = parent;
		}
		items[i] = item;
	}

	pop(): Due | undefined {
		const items = this.items;
		const top = items[0];
		const last = items.pop();
		if (!items.length || !last) return top;
		let i = 0;
		for (;;) {
			const left = 2 * i + 1;
			if (left >= items.length) break;
			const child = left + 1 < items.length && items[left + 1].lastSeenAt < items[left].lastSeenAt ? left + 1 : left;
			if (items[child].lastSeenAt >= last.lastSeenAt) break;
			items[i] = items[child];
			i = child;
		}
		items[i] = last;
		return top;
	}
}
