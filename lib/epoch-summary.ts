/**
 * What a closed epoch archived (SPEC §8), summed page by page in leaf (id) order: counts, volume
 * per mint and the Merkle root of its executed intents. An epoch may hold millions: nothing here
 * grows with it but the mints.
 */
import type { EpochCloseResult } from "./answers";
import { MerkleRootBuilder } from "./merkle";

/** One archived intent, as the mempool pages them (id order). */
export interface ArchivedIntent {
	id: string;
	state: string;
	transactionCommitment: string;
	tokenMintAddress: string;
	amount: string;
}

export type EpochFigures = Pick<EpochCloseResult, "executed" | "canceled" | "volume" | "root">;

export class EpochSummary {
	private executed = 0;
	private canceled = 0;
	private readonly volume = new Map<string, bigint>();
	private readonly tree = new MerkleRootBuilder();
	private lastId: string | null = null;

	/** The next archived intent; ids must come in increasing string order (the leaves' order). */
	add(intent: ArchivedIntent): void {
		if (this.lastId !== null && !(intent.id > this.lastId)) throw new Error(`archived intents out of id order: ${intent.id} after ${this.lastId}`);
		this.lastId = intent.id;
		if (intent.state === "REJECTED") this.canceled++;
		else if (intent.state === "CONFIRMED") {
			this.executed++;
			this.volume.set(intent.tokenMintAddress, (this.volume.get(intent.tokenMintAddress) ?? 0n) + BigInt(intent.amount));
			this.tree.push(intent.transactionCommitment);
		}
	}

	figures(): EpochFigures {
		return {
			executed: this.executed,
			canceled: this.canceled,
			volume: Object.fromEntries([...this.volume].map(([mint, sum]) => [mint, sum.toString()])),
			root: this.tree.root()
		};
	}
}
