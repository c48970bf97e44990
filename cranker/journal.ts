/**
 * The settlements this Cranker signed, on its own disk, until their blockhash has expired.
 *
 * A signed settlement can land until its blockhash expires, and the Node's word that it did not
 * is not proof: a Node that re-offers an intent while the first transaction is still in flight
 * (after this Cranker restarted, say) would have it sign and pay a second time. So every
 * settlement is written here, durably, before it is reported or sent. One found for the same
 * payout nullifier whose blockhash is still live is sent again, the same bytes, which land at
 * most once; a new one is signed only after the old one can no longer land.
 *
 * One file per Cranker key, rewritten whole (temporary file, fsync, rename): it only holds what
 * may still land, a minute or two of settlements.
 */
import fs from "node:fs/promises";
import path from "node:path";
import { getBase64EncodedWireTransaction, getSignatureFromTransaction, getTransactionDecoder, type Transaction } from "@solana/kit";
import type { Lifetime } from "./chain";

export interface SignedSettlementRecord {
	/** The journal's key: the chain's own key for this payment (SPEC §2.5). */
	payoutNullifier: string;
	/** Which payment the bytes pay: the sender-signed message's commitment. */
	transactionCommitment: string;
	signature: string;
	/** The slot read just after the blockhash. */
	slot: number;
	lifetime: Lifetime;
	transaction: Transaction;
}

interface StoredRecord {
	payoutNullifier: string;
	transactionCommitment: string;
	signature: string;
	slot: number;
	blockhash: string;
	lastValidBlockHeight: string;
	wireTransaction: string;
}

const toStored = (record: SignedSettlementRecord): StoredRecord => ({
	payoutNullifier: record.payoutNullifier,
	transactionCommitment: record.transactionCommitment,
	signature: record.signature,
	slot: record.slot,
	blockhash: record.lifetime.blockhash,
	lastValidBlockHeight: record.lifetime.lastValidBlockHeight.toString(),
	wireTransaction: getBase64EncodedWireTransaction(record.transaction)
});

function fromStored(stored: StoredRecord): SignedSettlementRecord {
	const transaction = getTransactionDecoder().decode(Buffer.from(stored.wireTransaction, "base64"));
	// The file is this Cranker's own, but a bit flip must not re-send bytes other than the ones named.
	if (getSignatureFromTransaction(transaction) !== stored.signature) throw new Error(`the journal's transaction for ${stored.payoutNullifier} is not the one it names`);
	return {
		payoutNullifier: stored.payoutNullifier,
		transactionCommitment: stored.transactionCommitment,
		signature: stored.signature,
		slot: stored.slot,
		lifetime: { blockhash: stored.blockhash as Lifetime["blockhash"], lastValidBlockHeight: BigInt(stored.lastValidBlockHeight) },
		transaction
	};
}

export class SettlementJournal {
	/** Saves run one after another, each writing the records as they are then. */
	private saving: Promise<void> = Promise.resolve();

	private constructor(
		private readonly file: string,
		private readonly records: Map<string, SignedSettlementRecord>
	) {}

	/** The journal of `crankerPubkey` under `dir` (created if missing). An unreadable journal stops the start: signing blind could pay twice. */
	static async open(dir: string, crankerPubkey: string): Promise<SettlementJournal> {
		await fs.mkdir(dir, { recursive: true, mode: 0o700 });
		const file = path.join(dir, `settlements-${crankerPubkey}.json`);
		let text: string;
		try {
			text = await fs.readFile(file, "utf8");
		} catch (err) {
			if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
			return new SettlementJournal(file, new Map());
		}
		let stored: StoredRecord[];
		try {
			stored = JSON.parse(text) as StoredRecord[];
		} catch {
			throw new Error(`the settlement journal ${file} is not JSON`);
		}
		return new SettlementJournal(file, new Map(stored.map(fromStored).map(record => [record.payoutNullifier, record])));
	}

	/** The settlement signed for this payout nullifier, while it is kept. */
	signedFor(payoutNullifier: string): SignedSettlementRecord | undefined {
		return this.records.get(payoutNullifier);
	}

	/** Keeps `record` on disk before it returns; it replaces any earlier one for its nullifier (which could no longer land). */
	async keep(record: SignedSettlementRecord): Promise<void> {
		this.records.set(record.payoutNullifier, record);
		await this.save();
	}

	/** Forgets settlements whose blockhash has expired by block height `height`: none of them can land any more. */
	async forgetExpired(height: bigint): Promise<void> {
		let forgotten = false;
		for (const [nullifier, record] of this.records)
			if (record.lifetime.lastValidBlockHeight < height) forgotten = this.records.delete(nullifier) || forgotten;
		if (forgotten) await this.save();
	}

	private save(): Promise<void> {
		this.saving = this.saving.catch(() => {}).then(() => this.write());
		return this.saving;
	}

	private async write(): Promise<void> {
		const temporary = `${this.file}.${process.pid}.tmp`;
		const handle = await fs.open(temporary, "w", 0o600);
		try {
			await handle.writeFile(JSON.stringify([...this.records.values()].map(toStored)));
			await handle.sync();
		} finally {
			await handle.close();
		}
		await fs.rename(temporary, this.file);
		// The rename is durable once the directory is.
		const directory = await fs.open(path.dirname(this.file), "r");
		try {
			await directory.sync();
		} finally {
			await directory.close();
		}
	}
}
