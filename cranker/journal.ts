/**
 * The settlements this Cranker signed, on its own disk, until they can no longer land.
 *
 * A signed settlement can land until its blockhash expires, and the Node's word that it did not
 * is not proof: a Node that offers an intent again while the first transaction is still in flight
 * (after this Cranker restarted, say) would have it sign and pay a second time. So every
 * settlement is written here, durably, before it is reported or sent. One found for the same
 * payout nullifier that may still land is sent again, the same bytes, which land at most once; a
 * new one is signed only after the old one can no longer land.
 *
 * One file per Cranker key, rewritten whole (a new temporary file, fsync, rename): it holds only
 * what may still land, minutes of settlements. One process writes it: it holds a lock on the file
 * (proper-lockfile, renewed while it runs), and a second process on the same key and directory
 * waits for it, then fails to start.
 */
import { randomBytes } from "node:crypto";
import fs from "node:fs/promises";
import path from "node:path";
import { getBase64EncodedWireTransaction, getTransactionDecoder, type Transaction } from "@solana/kit";
import lockfile from "proper-lockfile";
import { encodeBase58 } from "../lib/encoding";
import { verifySignature } from "../lib/ed25519";
import type { Lifetime } from "./chain";

/** The lock is renewed this often, and taken for abandoned (its process killed) after LOCK_STALE_MS. */
const LOCK_UPDATE_MS = 5_000;
const LOCK_STALE_MS = 20_000;
/** How long a start waits for a live holder's lock: a stopping Cranker may take a minute to finish its work in hand. */
const LOCK_WAIT_MS = 120_000;
/**
 * A record is forgotten only once the chain's height is past its blockhash's and this long after
 * it was signed: one RPC answer with a wrong height must not erase what may still land.
 */
const FORGET_AFTER_MS = 10 * 60_000;

export interface SignedSettlementRecord {
	/** The journal's key: the chain's own key for this payment (SPEC §2.5). */
	payoutNullifier: string;
	/** Which payment the bytes pay: the sender-signed message's commitment. */
	transactionCommitment: string;
	signature: string;
	/** The slot read just after the blockhash. */
	slot: number;
	signedAt: number;
	lifetime: Lifetime;
	transaction: Transaction;
}

interface StoredRecord {
	payoutNullifier: string;
	transactionCommitment: string;
	signature: string;
	slot: number;
	signedAt: number;
	blockhash: string;
	lastValidBlockHeight: string;
	wireTransaction: string;
}

const toStored = ({ lifetime, transaction, ...fields }: SignedSettlementRecord): StoredRecord => ({
	...fields,
	blockhash: lifetime.blockhash,
	lastValidBlockHeight: lifetime.lastValidBlockHeight.toString(),
	wireTransaction: getBase64EncodedWireTransaction(transaction)
});

const STORED_STRINGS = ["payoutNullifier", "transactionCommitment", "signature", "blockhash", "wireTransaction"] as const;

export class SettlementJournal {
	/** Saves run one after another, each writing the records as they are then. */
	private saving: Promise<void> = Promise.resolve();
	/** Set when the lock was lost (another process took it): nothing is kept or sent again any more. */
	private lockLost: Error | null = null;

	private constructor(
		readonly file: string,
		private readonly crankerPubkey: string,
		private readonly records: Map<string, SignedSettlementRecord>,
		private releaseLock: () => Promise<void>
	) {}

	/**
	 * The journal of `crankerPubkey` under `dir` (created if missing), locked for this process. A
	 * lock left by a killed process is taken over once stale (after LOCK_STALE_MS); a live holder's
	 * is waited for, then refused, and so is an unreadable journal: signing blind could pay twice.
	 * `onLockLost`: another process took the lock (this one was stalled past LOCK_STALE_MS); the
	 * journal then refuses every read and write.
	 */
	static async open(
		dir: string,
		crankerPubkey: string,
		{ onLockLost = () => {}, waitForLockMs = LOCK_WAIT_MS }: { onLockLost?: (err: Error) => void; waitForLockMs?: number } = {}
	): Promise<SettlementJournal> {
		await fs.mkdir(dir, { recursive: true, mode: 0o700 });
		const file = path.resolve(dir, `settlements-${crankerPubkey}.json`);
		let journal: SettlementJournal | null = null;
		let releaseLock: () => Promise<void>;
		try {
			releaseLock = await lockfile.lock(file, {
				realpath: false,
				stale: LOCK_STALE_MS,
				update: LOCK_UPDATE_MS,
				retries: { retries: Math.ceil(waitForLockMs / 1000), factor: 1, minTimeout: 1000, maxTimeout: 1000 },
				onCompromised: err => {
					if (journal) journal.lockLost = err;
					onLockLost(err);
				}
			});
		} catch (err) {
			if ((err as NodeJS.ErrnoException).code !== "ELOCKED") throw err;
			throw new Error(`another Cranker process holds the settlement journal ${file}: run one process per key and CRANKER_STATE_DIR`);
		}
		try {
			// Temporary files of saves a crash cut short: never renamed, so never the journal.
			for (const name of await fs.readdir(dir)) if (name.startsWith(`${path.basename(file)}.`) && name.endsWith(".tmp")) await fs.rm(path.join(dir, name), { force: true });
			journal = new SettlementJournal(file, crankerPubkey, await readRecords(file, crankerPubkey), releaseLock);
			return journal;
		} catch (err) {
			await releaseLock();
			throw err;
		}
	}

	get size(): number {
		return this.records.size;
	}

	/** The settlement kept for this payout nullifier, if any. */
	signedFor(payoutNullifier: string): SignedSettlementRecord | undefined {
		this.assertHeld();
		return this.records.get(payoutNullifier);
	}

	/**
	 * Keeps `record` on disk before it returns; it replaces any earlier one for its nullifier
	 * (which could no longer land). When the save fails the journal is as it was, and the error
	 * is thrown: the record's transaction must not be sent.
	 */
	async keep(record: SignedSettlementRecord): Promise<void> {
		this.assertHeld();
		// What could not be read back at the next start is not kept: that start would fail.
		const problem = storedRecordProblem(toStored(record), this.crankerPubkey);
		if (problem) throw new Error(`not keeping a settlement of the wrong form (${problem})`);
		const earlier = this.records.get(record.payoutNullifier);
		this.records.set(record.payoutNullifier, record);
		try {
			await this.save();
		} catch (err) {
			if (earlier) this.records.set(record.payoutNullifier, earlier);
			else this.records.delete(record.payoutNullifier);
			throw err;
		}
	}

	/** Forgets settlements that can no longer land by block height `height`, and were signed long enough ago to be sure. */
	async forgetExpired(height: bigint, nowMs = Date.now()): Promise<void> {
		this.assertHeld();
		let forgotten = false;
		for (const [nullifier, record] of this.records)
			if (record.lifetime.lastValidBlockHeight < height && nowMs - record.signedAt > FORGET_AFTER_MS) forgotten = this.records.delete(nullifier) || forgotten;
		if (forgotten) await this.save();
	}

	/** Releases the lock (at a clean stop); once. */
	async close(): Promise<void> {
		await this.saving.catch(() => {});
		const release = this.releaseLock;
		this.releaseLock = async () => {};
		if (!this.lockLost) await release();
	}

	private assertHeld(): void {
		if (this.lockLost) throw new Error(`the settlement journal's lock was lost (${this.lockLost.message}): not signing`);
	}

	private save(): Promise<void> {
		this.saving = this.saving.catch(() => {}).then(() => this.write());
		return this.saving;
	}

	private async write(): Promise<void> {
		// Another process holds the file now: this one's records would overwrite its.
		this.assertHeld();
		const temporary = `${this.file}.${randomBytes(6).toString("hex")}.tmp`;
		// "wx": a new file of its own, never one a link points elsewhere.
		const handle = await fs.open(temporary, "wx", 0o600);
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

/** The records of `file` (none when it does not exist); one that is not this Cranker's signed settlement stops the start. */
async function readRecords(file: string, crankerPubkey: string): Promise<Map<string, SignedSettlementRecord>> {
	let text: string;
	try {
		text = await fs.readFile(file, "utf8");
	} catch (err) {
		if ((err as NodeJS.ErrnoException).code === "ENOENT") return new Map();
		throw err;
	}
	const unreadable = (why: string) => new Error(`the settlement journal ${file} is unreadable (${why}); it holds settlements that may still land: restore it, or remove it once they cannot`);
	let stored: unknown;
	try {
		stored = JSON.parse(text);
	} catch {
		throw unreadable("not JSON");
	}
	if (!Array.isArray(stored)) throw unreadable("not a list");
	const records = new Map<string, SignedSettlementRecord>();
	for (const entry of stored as Partial<StoredRecord>[]) {
		const problem = storedRecordProblem(entry, crankerPubkey);
		if (problem) throw unreadable(problem);
		const record = entry as StoredRecord;
		const transaction = getTransactionDecoder().decode(Buffer.from(record.wireTransaction, "base64"));
		records.set(record.payoutNullifier, {
			payoutNullifier: record.payoutNullifier,
			transactionCommitment: record.transactionCommitment,
			signature: record.signature,
			slot: record.slot,
			signedAt: record.signedAt,
			lifetime: { blockhash: record.blockhash as Lifetime["blockhash"], lastValidBlockHeight: BigInt(record.lastValidBlockHeight) },
			transaction
		});
	}
	return records;
}

/**
 * What is wrong with a stored record, null when nothing: its fields' shapes, and its transaction
 * must be the one it names, signed by this Cranker (only those bytes are ever sent again).
 */
function storedRecordProblem(entry: Partial<StoredRecord> | null, crankerPubkey: string): string | null {
	if (STORED_STRINGS.some(key => typeof entry?.[key] !== "string") || !Number.isSafeInteger(entry!.slot) || !Number.isSafeInteger(entry!.signedAt) || !/^\d+$/.test(String(entry!.lastValidBlockHeight)))
		return "a record of the wrong shape";
	const record = entry as StoredRecord;
	try {
		const transaction = getTransactionDecoder().decode(Buffer.from(record.wireTransaction, "base64"));
		const signature = transaction.signatures[crankerPubkey as keyof typeof transaction.signatures];
		if (signature && encodeBase58(signature) === record.signature && verifySignature(crankerPubkey, Uint8Array.from(transaction.messageBytes), signature)) return null;
	} catch {
		// not a transaction
	}
	return `the transaction of ${record.payoutNullifier} is not the one it names`;
}
