/**
 * MongoDB adapter (distributed mode): one database shared by the owning services, one MongoDB
 * collection per store collection. The document's `id` is its `_id`; everything else is stored as
 * is, so declared fields need no separate columns.
 *
 * Semantics follow the SQLite adapter, the reference: null in a condition matches null or a missing
 * field, comparisons never match null, and a unique group only binds documents whose fields in that
 * group are all non-null (SQLite's UNIQUE treats NULLs as distinct).
 */
import {
	Decimal128,
	MongoClient,
	MongoError,
	MongoNetworkError,
	MongoOperationTimeoutError,
	MongoServerError,
	MongoServerSelectionError,
	MongoWriteConcernError,
	type ClientSession,
	type Collection as MongoCollection,
	type Db,
	type Document,
	type Filter,
	type IndexDescription,
	type MongoClientOptions
} from "mongodb";
import {
	StoreUnavailableError,
	UniqueConflictError,
	assertCursor,
	assertDeclared,
	assertOutbox,
	assertWhere,
	batchSize,
	eventPage,
	isComparison,
	servingIndex,
	tallyChange,
	VIEW_PREFIX,
	VIEW_STAMP,
	assertViews,
	viewKey,
	viewOf,
	viewPlaces,
	viewStamp,
	viewTexts,
	type Collection,
	type CollectionSpec,
	type Condition,
	type Doc,
	type EventPage,
	type EventQuery,
	type FieldValue,
	type IndexKey,
	type ListQuery,
	type OutboxEvent,
	type Store,
	type StoredEvent,
	type ViewRow,
	type Where
} from "./port";

interface Stored extends Document {
	_id: string;
}

const DUPLICATE_KEY = 11000;
const NAMESPACE_EXISTS = 48;
const INDEX_NOT_FOUND = 27;
const NAMESPACE_NOT_FOUND = 26;
/** MongoDB's refusal of a hint that names no index of the collection (BadValue, code 2). */
const MISSING_HINTED_INDEX = /hint provided does not correspond to an existing index/i;
const BAD_VALUE = 2;
const OPERATORS = { ne: "$ne", lt: "$lt", lte: "$lte", gt: "$gt", gte: "$gte" } as const;

/**
 * The values a unique group binds, per declared type: any string, any number, never null or a
 * missing field. Ranges rather than $type, because the planner can prove that an equality lookup
 * falls inside a range and then use the unique index for it.
 */
const PRESENT = { text: { $gte: "" }, integer: { $gte: -Infinity }, boolean: { $in: [true, false] } } as const;

/**
 * What every connection sets, whatever the URL says (SPEC's "never lose an acknowledged intent"):
 * - an acknowledged write is on a majority of members' journals, so an election cannot roll it back;
 * - a read sees only majority-committed data, so a replay never answers from a write that may vanish;
 * - writes and reads are retried once across a failover by the driver (retryable writes);
 * - a majority that cannot be reached fails the write after wtimeoutMS instead of blocking a sweep,
 *   and no primary fails a call after serverSelectionTimeoutMS: both well inside the broker's
 *   10 s request timeout, so the caller gets 503 from us rather than a timeout and a retry.
 */
export const DURABLE_OPTIONS = {
	// Both spellings of journal: the driver reads a URL's `j` before this object's `journal`.
	writeConcern: { w: "majority", j: true, journal: true, wtimeoutMS: 5000 },
	readConcern: { level: "majority" },
	readPreference: "primary",
	retryWrites: true,
	retryReads: true,
	serverSelectionTimeoutMS: 5000,
	// Undefined properties are left out, as JSON.stringify does in the SQLite adapter.
	ignoreUndefined: true
} as const satisfies MongoClientOptions;

/** Server error codes of a member that is not (or no longer) the primary, or is going away. */
const TRANSIENT_CODES = new Set([
	6, // HostUnreachable
	7, // HostNotFound
	50, // MaxTimeMSExpired
	64, // WriteConcernFailed (wtimeout)
	89, // NetworkTimeout
	91, // ShutdownInProgress
	112, // WriteConflict
	189, // PrimarySteppedDown
	262, // ExceededTimeLimit
	9001, // SocketException
	10107, // NotWritablePrimary
	11600, // InterruptedAtShutdown
	11602, // InterruptedDueToReplStateChange
	13435, // NotPrimaryNoSecondaryOk
	13436, // NotPrimaryOrSecondary
	24, // LockTimeout
	134, // ReadConcernMajorityNotAvailableYet (a freshly initiated set)
	216, // ElectionInProgress
	246, // SnapshotUnavailable
	251, // NoSuchTransaction
	10058 // LegacyNotPrimary
]);

/**
 * How long a transaction may keep retrying transient conflicts: inside the broker's request timeout.
 * The driver's withTransaction retries for 120 s (a timed-out majority commit included), which
 * would hold a call far past it; this budget turns a stalled majority into a 503 instead.
 */
const TRANSACTION_BUDGET_MS = 8000;

/**
 * Runs `work` in a transaction within TRANSACTION_BUDGET_MS: a transient conflict runs it again (the
 * server says nothing was committed), a commit whose result is unknown is committed again (never
 * `work`: the first commit may have applied it), with the driver's backoff between attempts.
 */
async function inTransaction<R>(client: MongoClient, work: (session: ClientSession) => Promise<R>): Promise<R> {
	return client.withSession(async session => {
		const deadline = Date.now() + TRANSACTION_BUDGET_MS;
		const inBudget = () => Date.now() < deadline;
		const backoff = (attempt: number) => new Promise(resolve => setTimeout(resolve, Math.random() * Math.min(500, 5 * 1.5 ** attempt)));
		const labelled = (err: unknown, label: string) => err instanceof MongoError && err.hasErrorLabel(label);
		for (let attempt = 0; ; attempt++) {
			if (attempt > 0) await backoff(attempt);
			session.startTransaction();
			let result: R;
			try {
				result = await work(session);
			} catch (err) {
				if (session.inTransaction()) await session.abortTransaction().catch(() => undefined);
				if (labelled(err, "TransientTransactionError") && inBudget()) continue;
				throw err;
			}
			for (let commit = 0; ; commit++) {
				try {
					await session.commitTransaction();
					return result;
				} catch (err) {
					// Checked first, as the driver does: the commit may have been applied.
					if (labelled(err, "UnknownTransactionCommitResult") && !(err instanceof MongoError && err.code === 50) && inBudget()) {
						await backoff(commit);
						continue;
					}
					if (labelled(err, "TransientTransactionError") && inBudget()) break;
					throw err;
				}
			}
		}
	});
}

/** Refuses a client whose settings are not the durable ones (a URL option the driver let win over DURABLE_OPTIONS). */
export function assertDurableClient(client: MongoClient): void {
	const { writeConcern, readConcern } = client;
	if (writeConcern?.w !== "majority" || writeConcern.journal !== true || !writeConcern.wtimeoutMS || readConcern?.level !== "majority")
		throw new Error("MONGO_URL overrides the store's durability (write concern majority with journal and a write timeout, read concern majority)");
}

/**
 * Whether a driver error means "try again in a moment" (503) rather than a bug (500). A write
 * concern error counts even beside a duplicate key: the write it reports may not be on a majority
 * yet, so neither "taken" nor "written" can be answered truthfully.
 */
export function isTransientMongoError(err: unknown): boolean {
	// MongoOperationTimeoutError: what the driver throws in their place when the URL sets timeoutMS.
	if (err instanceof MongoNetworkError || err instanceof MongoServerSelectionError || err instanceof MongoWriteConcernError || err instanceof MongoOperationTimeoutError) return true;
	if (!(err instanceof MongoError)) return false;
	if (err.hasErrorLabel("RetryableWriteError") || err.hasErrorLabel("TransientTransactionError") || err.hasErrorLabel("UnknownTransactionCommitResult")) return true;
	const { code, writeConcernError, errInfo } = err as MongoError & { writeConcernError?: unknown; errInfo?: { writeConcern?: unknown } };
	if (writeConcernError) return true;
	if (errInfo && typeof errInfo === "object" && "wtimeout" in errInfo) return true;
	return typeof code === "number" && TRANSIENT_CODES.has(code);
}

/** Clients whose last owner began to close them: the process is stopping. */
const closingClients = new WeakSet<MongoClient>();

/**
 * Closes a shared client. Calls still running on it fail in many ways as it closes (an ended
 * session's aborted transaction, a closed pool, an illegal state transition), and each is the
 * process stopping, not a bug: storeError answers them by the client's state, not their class.
 */
export async function closeClient(client: MongoClient): Promise<void> {
	closingClients.add(client);
	await client.close();
}

/**
 * The port's translation of a driver failure on `client`: transient ones, and any on a client
 * that is closing, become StoreUnavailableError.
 */
export function storeError(err: unknown, client?: MongoClient): unknown {
	if (client && closingClients.has(client)) return new StoreUnavailableError("MongoDB client is closed: its process is stopping", err);
	return isTransientMongoError(err) ? new StoreUnavailableError(`MongoDB is unavailable: ${(err as Error).name}`, err) : err;
}

async function guarded<R>(client: MongoClient, operation: () => Promise<R>): Promise<R> {
	try {
		return await operation();
	} catch (err) {
		throw storeError(err, client);
	}
}

/** An event number the counter handed out is already in the log: the counter is behind it (see alignCounter). */
class EventCounterBehindError extends Error {
	constructor(collection: string, seq: number) {
		super(`The ${collection} event log already holds number ${seq}: its counter is behind the log`);
		this.name = "EventCounterBehindError";
	}
}

/** The name of the plain ("i") or sparse ("s") index on `key` (an index group followed by id), as created and as hinted. */
const indexName = ({ key, sparse }: Pick<IndexKey, "key" | "sparse">) => `${sparse ? "s" : "i"}_${key.join("_")}`;

/** The indexes a collection needs: its unique groups, and each index group followed by _id (servingIndex's rule). */
export function indexDescriptions(spec: CollectionSpec): IndexDescription[] {
	// _id is unique by itself, and so is any group that contains it.
	const unique = (spec.unique ?? []).filter(group => !group.includes("id"));
	const keys = (group: readonly string[]) => Object.fromEntries(group.map(field => [key(field), 1 as const]));
	return [
		...unique.map(group => ({
			name: `u_${group.join("_")}`,
			key: keys(group),
			unique: true,
			partialFilterExpression: Object.fromEntries(group.map(field => [field, PRESENT[spec.fields[field]]]))
		})),
		...(spec.indexes ?? []).map(group => ({ name: indexName({ key: [...group, "id"], sparse: false }), key: keys([...group, "id"]) })),
		...(spec.sparseIndexes ?? []).map(group => ({
			name: indexName({ key: [...group, "id"], sparse: true }),
			key: keys([...group, "id"]),
			partialFilterExpression: Object.fromEntries(group.map(field => [field, PRESENT[spec.fields[field]]]))
		}))
	];
}

/** Tally documents per collection: writers pick one at random, so concurrent transactions rarely touch the same one. */
const TALLY_SHARDS = 16;
const SEEDED = "$seeded";

interface TallyShard extends Document {
	_id: string;
	sums?: Record<string, Decimal128>;
}

function key(field: string): string {
	return field === "id" ? "_id" : field;
}

function translate(condition: Condition): unknown {
	if (!isComparison(condition)) return condition;
	if ("in" in condition) return { $in: condition.in };
	const [op, value] = Object.entries(condition)[0] as [keyof typeof OPERATORS, FieldValue];
	// An unknown key would otherwise become an embedded-document match that silently matches nothing.
	if (!Object.hasOwn(OPERATORS, op)) throw new Error(`unknown condition "${op}"`);
	// MongoDB's $lte/$gte null would match null and missing fields; SQL comparisons with NULL match nothing.
	if (value === null && op !== "ne") return { $in: [] };
	return { [OPERATORS[op]]: value };
}

/** An outbox event as stored: its sequence number is the _id. */
interface EventDoc extends Document {
	_id: number;
	subject: string;
	type: string;
	at: string;
	data: Record<string, unknown>;
}

function fromEventDoc({ _id, subject, type, at, data }: EventDoc): StoredEvent {
	return { seq: _id, subject, type, at, data };
}

class MongoStoreCollection<T extends Doc> implements Collection<T> {
	private readonly tallies: MongoCollection<TallyShard>;
	private readonly eventLog: MongoCollection<EventDoc>;
	/** Per collection, the last sequence number handed out (`{ _id: collection, seq }`). */
	private readonly sequences: MongoCollection<{ _id: string; seq: number }>;
	/** Where each document keeps its views' texts (viewPlaces), in viewTexts' order. */
	private readonly viewFields: string[];
	/** The index serving each query shape met so far (servingIndex, checked once per shape). */
	private readonly servingKeys = new Map<string, IndexKey>();
	/** The build of this collection's indexes under way after a hinted one was found gone (withIndexes). */
	private rebuilding: Promise<unknown> | null = null;

	constructor(
		private readonly client: MongoClient,
		private readonly collection: MongoCollection<Stored>,
		db: Db,
		private readonly spec: CollectionSpec<T>
	) {
		assertViews(spec);
		this.viewFields = viewPlaces(spec);
		this.tallies = db.collection<TallyShard>(`${spec.name}__tally`);
		this.eventLog = db.collection<EventDoc>(`${spec.name}__events`);
		this.sequences = db.collection<{ _id: string; seq: number }>("__sequences");
	}

	/** The event log's index (per subject in order), and its counter past its newest event. */
	async prepareOutbox(): Promise<void> {
		if (!this.spec.outbox) return;
		await guarded(this.client, () =>
			this.eventLog.createIndexes([{ name: "subject_seq", key: { subject: 1, _id: 1 } }])
		);
		await this.alignCounter();
	}

	/**
	 * Raises the event counter to the log's newest number if it is behind: a backup taken while
	 * owners wrote (mongodump without --oplog copies one collection after another) restores a
	 * counter older than the log, and each number it hands out is then taken. $max never lowers it,
	 * so replicas running this at once, or beside writers, agree.
	 */
	private async alignCounter(): Promise<void> {
		const newest = await guarded(this.client, () => this.newestSeq());
		if (newest === 0) return;
		const raise = () => this.sequences.updateOne({ _id: this.spec.name }, { $max: { seq: newest } }, { upsert: true });
		await guarded(this.client, () =>
			// Two replicas creating the counter at once: one insert wins, the other raises what it made.
			raise().catch(err => {
				if (err instanceof MongoServerError && err.code === DUPLICATE_KEY) return raise();
				throw err;
			})
		);
	}

	/** The number of the log's newest event (0: empty). */
	private async newestSeq(session?: ClientSession): Promise<number> {
		const [newest] = await this.eventLog.find({}, { session, projection: { _id: 1 } }).sort({ _id: -1 }).limit(1).toArray();
		return newest?._id ?? 0;
	}

	/** Checks once per query shape that an index serves it (servingIndex). */
	private served(where: Where = {}, orderBy?: ListQuery["orderBy"]): IndexKey {
		// A null is its own shape: no sparse index serves it, where one serves a value.
		const shape = JSON.stringify([Object.entries(where).map(([field, c]) => [field, c === null ? "null" : isComparison(c) ? Object.keys(c)[0] : "eq"]), orderBy?.[0]]);
		let key = this.servingKeys.get(shape);
		if (!key) this.servingKeys.set(shape, (key = servingIndex(this.spec, where, orderBy)));
		return key;
	}

	/**
	 * Runs a write that changes the tally in one transaction with the tally's update and its outbox
	 * event. The replica set (required, see DURABLE_OPTIONS) makes it atomic; withTransaction
	 * retries a transient conflict. `write` answers the document replaced (or null) and the one
	 * written (or null: nothing written, and no event). An event number found taken (a counter
	 * restored behind its log) aborts it all; the counter is raised and the write runs once more.
	 */
	private async withTally<R>(write: (session: ClientSession) => Promise<{ result: R; before: T | null; after: T | null }>, event?: OutboxEvent): Promise<R> {
		try {
			return await this.inTallyTransaction(write, event);
		} catch (err) {
			if (!(err instanceof EventCounterBehindError)) throw err;
			// Nothing was written: the counter is set past the log, and the write runs again, once.
			await this.alignCounter();
			return this.inTallyTransaction(write, event);
		}
	}

	private inTallyTransaction<R>(write: (session: ClientSession) => Promise<{ result: R; before: T | null; after: T | null }>, event?: OutboxEvent): Promise<R> {
		return guarded(this.client, () =>
			inTransaction(this.client, async session => {
					const { result, before, after } = await write(session);
					// The counter document serializes the writers of events: one that took a number
					// commits before the next can take one, so numbers become visible in order.
					if (event && after !== null) {
						const counter = await this.sequences.findOneAndUpdate({ _id: this.spec.name }, { $inc: { seq: 1 } }, { session, upsert: true, returnDocument: "after" });
						try {
							await this.eventLog.insertOne({ _id: counter!.seq, subject: event.subject, type: event.type, at: event.at, data: event.data }, { session });
						} catch (err) {
							// Not the document's key taken (which insert and update answer as such): the counter is behind the log.
							if (err instanceof MongoServerError && err.code === DUPLICATE_KEY) throw new EventCounterBehindError(this.spec.name, counter!.seq);
							throw err;
						}
					}
					const change = tallyChange(this.spec, before, after);
					if (change.size) {
						const inc = Object.fromEntries([...change].map(([name, delta]) => [`sums.${name}`, Decimal128.fromString(delta.toString())]));
						await this.tallies.updateOne({ _id: String(Math.floor(Math.random() * TALLY_SHARDS)) }, { $inc: inc }, { session, upsert: true });
					}
					return result;
			})
		);
	}

	/**
	 * A tally first kept by this version starts from the documents already stored, set (not added)
	 * in one snapshot transaction with its marker: writes before the snapshot are in the scan, and
	 * a write after it conflicts with this transaction, which then runs again.
	 */
	async seedTally(): Promise<void> {
		if (!this.spec.tally || (await guarded(this.client, () => this.tallies.findOne({ _id: SEEDED })))) return;
		// Created first: a collection created inside concurrent transactions makes them collide.
		await guarded(this.client, () => this.tallies.db.createCollection(this.tallies.collectionName)).catch(err => {
			if (!(err instanceof MongoServerError && err.code === NAMESPACE_EXISTS)) throw err;
		});
		await guarded(this.client, () =>
			inTransaction(this.client, async session => {
					if (await this.tallies.findOne({ _id: SEEDED }, { session })) return;
					const sums = new Map<string, bigint>();
					for await (const stored of this.collection.find({}, { session }))
						for (const [name, delta] of tallyChange(this.spec, null, this.fromStored(stored))) sums.set(name, (sums.get(name) ?? 0n) + delta);
					const total = Object.fromEntries([...sums].map(([name, sum]) => [name, Decimal128.fromString(sum.toString())]));
					await this.tallies.deleteMany({}, { session });
					await this.tallies.insertMany([{ _id: "0", sums: total }, { _id: SEEDED }], { session });
			})
		);
	}

	private filter(where: Where = {}): Filter<Stored> {
		assertWhere(this.spec, where);
		return Object.fromEntries(Object.entries(where).map(([field, condition]) => [key(field), translate(condition)])) as Filter<Stored>;
	}

	private toStored(doc: T): Stored {
		const { id, ...rest } = doc as T & Record<string, unknown>;
		// Same rule as the SQLite columns: a declared field must stay queryable and orderable.
		for (const field of Object.keys(this.spec.fields))
			if (rest[field] !== null && typeof rest[field] === "object") throw new Error(`${this.spec.name}.${field} must be a scalar`);
		const stored: Stored = { ...rest, _id: id };
		// The views' texts, in the document itself: one write keeps them and the document alike.
		const texts = viewTexts(this.spec, doc);
		this.viewFields.forEach((field, i) => (stored[field] = texts[i]));
		return stored;
	}

	private fromStored({ _id, ...rest }: Stored): T {
		const doc: Record<string, unknown> = { id: _id };
		// Any view text, of this version or of another.
		for (const field in rest) if (!field.startsWith(VIEW_PREFIX)) doc[field] = rest[field];
		return doc as T;
	}

	async insert(doc: T, event?: OutboxEvent): Promise<boolean> {
		assertOutbox(this.spec, event);
		const stored = this.toStored(doc);
		try {
			if (!this.spec.tally && !event) await guarded(this.client, () => this.collection.insertOne(stored));
			else await this.withTally(async session => ({ result: await this.collection.insertOne(stored, { session }), before: null, after: doc }), event);
			return true;
		} catch (error) {
			if (error instanceof MongoServerError && error.code === DUPLICATE_KEY) return false;
			throw error;
		}
	}

	async get(id: string): Promise<T | null> {
		const doc = await guarded(this.client, () => this.collection.findOne({ _id: id }));
		return doc && this.fromStored(doc);
	}

	async findOne(where: Where): Promise<T | null> {
		const filter = this.filter(where);
		this.served(where);
		const doc = await guarded(this.client, () => this.collection.findOne(filter));
		return doc && this.fromStored(doc);
	}

	/**
	 * replaceOne with the expectation in its filter: MongoDB applies a single-document write
	 * atomically, so of two racing updates only one still matches. A replacement (rather than
	 * $set) also drops the fields `next` no longer has, like SQLite's rewrite of the whole row.
	 * With a tally, findOneAndReplace in the tally's transaction, for the document it replaced.
	 */
	async update(id: string, expected: Where, next: T, event?: OutboxEvent): Promise<boolean> {
		if (next.id !== id) throw new Error("update cannot change a document's id");
		assertOutbox(this.spec, event);
		const { _id, ...replacement } = this.toStored(next);
		const filter = { $and: [{ _id }, this.filter(expected)] };
		try {
			if (!this.spec.tally && !event) return (await guarded(this.client, () => this.collection.replaceOne(filter, replacement))).matchedCount === 1;
			return await this.withTally(async session => {
				const before = await this.collection.findOneAndReplace(filter, replacement, { session, returnDocument: "before" });
				return { result: before !== null, before: before && this.fromStored(before), after: before && next };
			}, event);
		} catch (err) {
			// The replacement took a unique value another document holds: nothing was written (a transaction's write aborts it whole).
			if (err instanceof MongoServerError && err.code === DUPLICATE_KEY) throw new UniqueConflictError(this.spec.name, err);
			throw err;
		}
	}

	/** deleteOne with the expectation in its filter, atomic for the same reason as `update`. */
	async remove(id: string, expected: Where = {}): Promise<boolean> {
		const filter = { $and: [{ _id: id }, this.filter(expected)] };
		if (!this.spec.tally) return (await guarded(this.client, () => this.collection.deleteOne(filter))).deletedCount === 1;
		return this.withTally(async session => {
			const before = await this.collection.findOneAndDelete(filter, { session });
			return { result: before !== null, before: before && this.fromStored(before), after: null };
		});
	}

	/**
	 * deleteMany takes no limit, so the batch's ids are found first. The delete keeps the filter, so
	 * a document that stopped matching in between stays; $and rather than a merged object, because a
	 * condition on id would replace the $in and lift the limit. With a tally, one at a time.
	 */
	async removeWhere(where: Where, limit: number): Promise<number> {
		const filter = this.filter(where);
		this.served(where);
		const size = batchSize(limit);
		if (size === 0) return 0;
		const batch = await guarded(this.client, () => this.collection.find(filter, { projection: { _id: 1 }, limit: size }).toArray());
		if (!batch.length) return 0;
		if (this.spec.tally) {
			let removed = 0;
			for (const { _id } of batch) if (await this.remove(_id, where)) removed++;
			return removed;
		}
		return (await guarded(this.client, () => this.collection.deleteMany({ $and: [{ _id: { $in: batch.map(doc => doc._id) } }, filter] }))).deletedCount;
	}

	async list(query: ListQuery = {}): Promise<T[]> {
		return this.withIndexes(async () => {
			const cursor = this.listCursor(query);
			return cursor ? (await guarded(this.client, () => cursor.toArray())).map(doc => this.fromStored(doc)) : [];
		});
	}

	/**
	 * `read`, a list hinted to the index servingIndex names; asked once more after the collection's
	 * indexes are made again, when that index is gone. A replica of an earlier version that starts
	 * during a rolling update drops the plain indexes it does not declare (MongoStore.collection), and
	 * every list hinted to one of them would fail until this process restarted.
	 */
	private async withIndexes<R>(read: () => Promise<R>): Promise<R> {
		try {
			return await read();
		} catch (err) {
			if (!(err instanceof MongoServerError && err.code === BAD_VALUE && MISSING_HINTED_INDEX.test(err.message))) throw err;
			// One build for every list that finds the index gone meanwhile (each would otherwise hold a connection on it).
			this.rebuilding ??= guarded(this.client, () => this.collection.createIndexes(indexDescriptions(this.spec))).finally(() => (this.rebuilding = null));
			await this.rebuilding;
			return read();
		}
	}

	listViews(name: string, query: ListQuery = {}): Promise<ViewRow[]> {
		return this.withIndexes(() => this.listViewRows(name, query));
	}

	private async listViewRows(name: string, query: ListQuery): Promise<ViewRow[]> {
		const view = viewOf(this.spec, name);
		const field = viewKey(name, view);
		const order = query.orderBy ? key(query.orderBy[0]) : null;
		const stampFields = this.spec.viewStamp!;
		const texts = this.listCursor(query)?.project<Stored>({ [field]: 1, [VIEW_STAMP]: 1, ...Object.fromEntries(stampFields.map(f => [f, 1])), ...(order ? { [order]: 1 } : {}) });
		if (!texts) return [];
		// A view is missing (written before this view's version) or stale (written by a version that
		// keeps no views: an older replica hands the texts back with the document it writes).
		const kept = (row: Stored) => typeof row[field] === "string" && row[VIEW_STAMP] === viewStamp(this.spec, row);
		let rows = await guarded(this.client, () => texts.toArray());
		// Some must be built: the list again, whole, to build theirs.
		if (!rows.every(kept)) rows = await guarded(this.client, () => this.listCursor(query)!.toArray());
		return rows.map(row => ({
			id: row._id,
			order: order ? ((row[order] as FieldValue | undefined) ?? null) : null,
			json: kept(row) ? (row[field] as string) : JSON.stringify(view.build(this.fromStored(row)))
		}));
	}

	/** The cursor of a list, or null when it lists nothing (a limit of 0). */
	private listCursor(query: ListQuery) {
		let filter = this.filter(query.where);
		const served = this.served(query.where, query.orderBy);
		assertCursor(this.spec, query);
		const limit = query.limit === undefined ? undefined : Math.max(0, Math.floor(query.limit));
		// MongoDB reads a limit of 0 as "no limit".
		if (limit === 0) return null;
		if (query.after && query.orderBy) {
			const field = key(query.orderBy[0]);
			const beyond = query.orderBy[1] === "desc" ? "$lt" : "$gt";
			const { value, id } = query.after;
			// The inclusive bound is what the index scan starts from; the $or drops the ties already listed.
			filter = { $and: [filter, { [field]: { [`${beyond}e`]: value } }, { $or: [{ [field]: { [beyond]: value } }, { [field]: value, _id: { [beyond]: id } }] }] } as Filter<Stored>;
		}
		const cursor = this.collection.find(filter);
		if (query.orderBy) {
			const [field, direction] = query.orderBy;
			assertDeclared(this.spec, [field]);
			// _id breaks ties so that equal timestamps still list in a stable order (every index ends in it).
			const order = direction === "desc" ? -1 : 1;
			cursor.sort({ [key(field)]: order, _id: order });
			// The index servingIndex names, whatever the planner's trial would pick (an index on a
			// range condition, then a blocking sort of every match).
			if (served.key.length > 1) cursor.hint(indexName(served));
		}
		if (limit !== undefined) cursor.limit(limit);
		return cursor;
	}

	async count(where?: Where): Promise<number> {
		const filter = this.filter(where);
		this.served(where);
		return guarded(this.client, () => this.collection.countDocuments(filter));
	}

	async countBy(field: string, where?: Where): Promise<Record<string, number>> {
		assertDeclared(this.spec, [field]);
		const filter = this.filter(where);
		this.served(where);
		const groups = await guarded(this.client, () => this.collection.aggregate<{ _id: FieldValue; n: number }>([{ $match: filter }, { $group: { _id: `$${key(field)}`, n: { $sum: 1 } } }]).toArray());
		// Keys as SQLite gives them: its columns hold booleans as 0 and 1, and a missing field is null.
		return Object.fromEntries(groups.map(g => [String(typeof g._id === "boolean" ? Number(g._id) : g._id), g.n]));
	}

	async events(query: EventQuery): Promise<EventPage> {
		assertOutbox(this.spec, "read");
		const limit = Math.max(0, Math.floor(query.limit));
		if (limit === 0) return { events: [], through: query.after };
		const filter = { _id: { $gt: query.after }, ...(query.subject !== undefined ? { subject: query.subject } : {}) };
		// The log's head, then the events, in one causally consistent session: the second read waits
		// for a snapshot at least as new as the first, on whichever member answers it (a failover
		// between them included), so no event up to the head is missing from the page.
		const { head, found } = await guarded(this.client, () =>
			this.client.withSession({ causalConsistency: true }, async session => {
				const head = await this.newestSeq(session);
				// One record's events by its index, as the lists are hinted: the planner might walk _id instead.
				const found = await this.eventLog.find(filter, { session }).sort({ _id: 1 }).hint(query.subject !== undefined ? "subject_seq" : { _id: 1 }).limit(limit).toArray();
				return { head, found };
			})
		);
		return eventPage(found.map(fromEventDoc), { after: query.after, limit }, head);
	}

	async latestEvent(subject?: string): Promise<StoredEvent | null> {
		assertOutbox(this.spec, "read");
		const found = await guarded(this.client, () => this.eventLog.find(subject !== undefined ? { subject } : {}).sort({ _id: -1 }).hint(subject !== undefined ? "subject_seq" : { _id: 1 }).limit(1).toArray());
		return found.length ? fromEventDoc(found[0]) : null;
	}

	async pruneEvents(before: string, limit: number): Promise<number> {
		assertOutbox(this.spec, "read");
		const size = batchSize(limit);
		if (size === 0) return 0;
		// As on SQLite: the run of the oldest events (by number) from before `before`, never the newest.
		const oldest = await guarded(this.client, () => this.eventLog.find({}, { projection: { _id: 1, at: 1 } }).sort({ _id: 1 }).limit(size + 1).toArray());
		const candidates = oldest.length > size ? oldest.slice(0, size) : oldest.slice(0, -1);
		const stale = candidates.findIndex(doc => doc.at >= before);
		const upTo = stale === -1 ? candidates.length : stale;
		if (upTo === 0) return 0;
		return (await guarded(this.client, () => this.eventLog.deleteMany({ _id: { $lte: candidates[upTo - 1]._id } }))).deletedCount;
	}

	async tally(prefixes?: readonly string[]): Promise<Record<string, bigint>> {
		if (!this.spec.tally) return {};
		const shards = await guarded(this.client, () => (prefixes ? this.tallies.aggregate<TallyShard>(shardsWithPrefixes(prefixes)) : this.tallies.find({ _id: { $ne: SEEDED } })).toArray());
		const sums = new Map<string, bigint>();
		for (const shard of shards) for (const [name, value] of Object.entries(shard.sums ?? {})) sums.set(name, (sums.get(name) ?? 0n) + BigInt(value.toString()));
		return Object.fromEntries([...sums].filter(([, sum]) => sum !== 0n));
	}
}

/**
 * The tally's shards with only their nonzero sums whose keys start with one of `prefixes`: the
 * server drops the others, so only the sums asked for cross the wire (it still walks every key).
 */
function shardsWithPrefixes(prefixes: readonly string[]): Document[] {
	const startsWithOne = { $or: prefixes.map(prefix => ({ $eq: [{ $substrCP: ["$$sum.k", 0, prefix.length] }, prefix] })) };
	const kept = { $filter: { input: { $objectToArray: { $ifNull: ["$sums", {}] } }, as: "sum", cond: { $and: [{ $ne: ["$$sum.v", 0] }, startsWithOne] } } };
	return [{ $match: { _id: { $ne: SEEDED } } }, { $project: { sums: { $arrayToObject: kept } } }];
}

/** One MongoClient per process and URL, shared by the owning services of the process, closed with the last. */
const clients = new Map<string, { client: Promise<MongoClient>; users: number }>();

async function sharedClient(url: string, allowWeakDurability: boolean): Promise<MongoClient> {
	let entry = clients.get(url);
	if (!entry) {
		const client = MongoClient.connect(url, DURABLE_OPTIONS).then(
			async connected => {
				try {
					if (!allowWeakDurability) assertDurableClient(connected);
				} catch (err) {
					await connected.close();
					throw err;
				}
				return connected;
			}
		).catch(err => {
			clients.delete(url);
			throw storeError(err);
		});
		entry = { client, users: 0 };
		clients.set(url, entry);
	}
	entry.users++;
	return entry.client;
}

async function releaseClient(url: string): Promise<void> {
	const entry = clients.get(url);
	if (!entry || --entry.users > 0) return;
	clients.delete(url);
	await closeClient(await entry.client);
}

export class MongoStore implements Store {
	readonly kind = "mongodb" as const;
	private closed = false;

	private constructor(
		private readonly url: string,
		private readonly client: MongoClient,
		private readonly db: Db
	) {}

	static async connect(url: string, dbName: string, allowWeakDurability = false): Promise<MongoStore> {
		const client = await sharedClient(url, allowWeakDurability);
		return new MongoStore(url, client, client.db(dbName));
	}

	async collection<T extends Doc>(spec: CollectionSpec<T>): Promise<Collection<T>> {
		assertDeclared(spec, [...(spec.unique ?? []), ...(spec.indexes ?? []), ...(spec.sparseIndexes ?? [])].flat());
		const collection = this.db.collection<Stored>(spec.name);
		const descriptions = indexDescriptions(spec);
		if (descriptions.length) await guarded(this.client, () => collection.createIndexes(descriptions));
		// Plain and sparse indexes an earlier version declared (ours are named i_… and s_…) cost every write and
		// serve nothing now. Unique ones (u_…) stay: one may belong to a newer version running beside this one.
		const wanted = new Set(descriptions.map(description => description.name));
		const existing = await guarded(this.client, () => collection.listIndexes().toArray()).catch(err => {
			// A collection with no index of ours may not exist yet.
			if (err instanceof MongoServerError && err.code === NAMESPACE_NOT_FOUND) return [];
			throw err;
		});
		for (const { name } of existing)
			if (typeof name === "string" && (name.startsWith("i_") || name.startsWith("s_")) && !wanted.has(name))
				await guarded(this.client, () => collection.dropIndex(name)).catch(err => {
					// Another replica dropped it first.
					if (!(err instanceof MongoServerError && err.code === INDEX_NOT_FOUND)) throw err;
				});
		const store = new MongoStoreCollection<T>(this.client, collection, this.db, spec);
		await store.seedTally();
		await store.prepareOutbox();
		return store;
	}

	async close(): Promise<void> {
		if (this.closed) return;
		this.closed = true;
		await releaseClient(this.url);
	}
}
