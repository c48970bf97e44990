/**
 * MongoDB adapter (distributed mode): one database shared by the owning services, one MongoDB
 * collection per store collection. The document's `id` is its `_id`; everything else is stored as
 * is, so declared fields need no separate columns.
 *
 * Semantics follow the SQLite adapter, the reference: null in a condition matches null or a missing
 * field, comparisons never match null, and a unique group only binds documents whose fields in that
 * group are all non-null (SQLite's UNIQUE treats NULLs as distinct).
 */
import { MongoClient, MongoServerError, type Collection as MongoCollection, type Db, type Document, type Filter, type IndexDescription } from "mongodb";
import { assertDeclared, batchSize, isComparison, type Collection, type CollectionSpec, type Condition, type Doc, type FieldValue, type ListQuery, type Store, type Where } from "./port";

interface Stored extends Document {
	_id: string;
}

const DUPLICATE_KEY = 11000;
const OPERATORS = { ne: "$ne", lt: "$lt", lte: "$lte", gt: "$gt", gte: "$gte" } as const;

/**
 * The values a unique group binds, per declared type: any string, any number, never null or a
 * missing field. Ranges rather than $type, because the planner can prove that an equality lookup
 * falls inside a range and then use the unique index for it.
 */
const PRESENT = { text: { $gte: "" }, integer: { $gte: -Infinity } } as const;

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

class MongoStoreCollection<T extends Doc> implements Collection<T> {
	constructor(
		private readonly collection: MongoCollection<Stored>,
		private readonly spec: CollectionSpec
	) {}

	private filter(where: Where = {}): Filter<Stored> {
		assertDeclared(this.spec, Object.keys(where));
		return Object.fromEntries(Object.entries(where).map(([field, condition]) => [key(field), translate(condition)])) as Filter<Stored>;
	}

	private toStored(doc: T): Stored {
		const { id, ...rest } = doc as T & Record<string, unknown>;
		// Same rule as the SQLite columns: a declared field must stay queryable and orderable.
		for (const field of Object.keys(this.spec.fields))
			if (rest[field] !== null && typeof rest[field] === "object") throw new Error(`${this.spec.name}.${field} must be a scalar`);
		return { ...rest, _id: id };
	}

	private fromStored({ _id, ...rest }: Stored): T {
		return { id: _id, ...rest } as unknown as T;
	}

	async insert(doc: T): Promise<boolean> {
		try {
			await this.collection.insertOne(this.toStored(doc));
			return true;
		} catch (error) {
			if (error instanceof MongoServerError && error.code === DUPLICATE_KEY) return false;
			throw error;
		}
	}

	async get(id: string): Promise<T | null> {
		const doc = await this.collection.findOne({ _id: id });
		return doc && this.fromStored(doc);
	}

	async findOne(where: Where): Promise<T | null> {
		const doc = await this.collection.findOne(this.filter(where));
		return doc && this.fromStored(doc);
	}

	/**
	 * replaceOne with the expectation in its filter: MongoDB applies a single-document write
	 * atomically, so of two racing updates only one still matches. A replacement (rather than
	 * findOneAndUpdate with $set) also drops the fields `next` no longer has, like SQLite's
	 * rewrite of the whole row, and returns no document we would discard anyway.
	 */
	async update(id: string, expected: Where, next: T): Promise<boolean> {
		if (next.id !== id) throw new Error("update cannot change a document's id");
		const { _id, ...replacement } = this.toStored(next);
		const result = await this.collection.replaceOne({ $and: [{ _id }, this.filter(expected)] }, replacement);
		return result.matchedCount === 1;
	}

	/** deleteOne with the expectation in its filter, atomic for the same reason as `update`. */
	async remove(id: string, expected: Where = {}): Promise<boolean> {
		const result = await this.collection.deleteOne({ $and: [{ _id: id }, this.filter(expected)] });
		return result.deletedCount === 1;
	}

	/**
	 * deleteMany takes no limit, so the batch's ids are found first. The delete keeps the filter, so
	 * a document that stopped matching in between stays; $and rather than a merged object, because a
	 * condition on id would replace the $in and lift the limit.
	 */
	async removeWhere(where: Where, limit: number): Promise<number> {
		const filter = this.filter(where);
		const size = batchSize(limit);
		if (size === 0) return 0;
		const batch = await this.collection.find(filter, { projection: { _id: 1 }, limit: size }).toArray();
		if (!batch.length) return 0;
		const result = await this.collection.deleteMany({ $and: [{ _id: { $in: batch.map(doc => doc._id) } }, filter] });
		return result.deletedCount;
	}

	async list(query: ListQuery = {}): Promise<T[]> {
		const filter = this.filter(query.where);
		const limit = query.limit === undefined ? undefined : Math.max(0, Math.floor(query.limit));
		// MongoDB reads a limit of 0 as "no limit".
		if (limit === 0) return [];
		const cursor = this.collection.find(filter);
		if (query.orderBy) {
			const [field, direction] = query.orderBy;
			assertDeclared(this.spec, [field]);
			// _id breaks ties so that equal timestamps still list in a stable order.
			const order = direction === "desc" ? -1 : 1;
			cursor.sort({ [key(field)]: order, _id: order });
		}
		if (limit !== undefined) cursor.limit(limit);
		return (await cursor.toArray()).map(doc => this.fromStored(doc));
	}

	async count(where?: Where): Promise<number> {
		return this.collection.countDocuments(this.filter(where));
	}

	async countBy(field: string, where?: Where): Promise<Record<string, number>> {
		assertDeclared(this.spec, [field]);
		const groups = await this.collection
			.aggregate<{ _id: FieldValue; n: number }>([{ $match: this.filter(where) }, { $group: { _id: `$${key(field)}`, n: { $sum: 1 } } }])
			.toArray();
		// Keys as SQLite gives them: its columns hold booleans as 0 and 1, and a missing field is null.
		return Object.fromEntries(groups.map(g => [String(typeof g._id === "boolean" ? Number(g._id) : g._id), g.n]));
	}
}

export class MongoStore implements Store {
	readonly kind = "mongodb" as const;

	private constructor(
		private readonly client: MongoClient,
		private readonly db: Db
	) {}

	static async connect(url: string, dbName: string): Promise<MongoStore> {
		const client = await MongoClient.connect(url, {
			// An acknowledged write is on a majority of members' journals, so a failover or a
			// restart cannot roll it back: the guarantee SQLite's WAL gives the embedded mode. It
			// costs only latency, and on a standalone server it is a journaled write.
			writeConcern: { w: "majority", journal: true },
			// Undefined properties are left out, as JSON.stringify does in the SQLite adapter.
			ignoreUndefined: true
		});
		return new MongoStore(client, client.db(dbName));
	}

	async collection<T extends Doc>(spec: CollectionSpec): Promise<Collection<T>> {
		const indexes = spec.indexes ?? [];
		assertDeclared(spec, [...(spec.unique ?? []), ...indexes].flat());
		// _id is unique by itself, and so is any group that contains it.
		const unique = (spec.unique ?? []).filter(group => !group.includes("id"));
		const keys = (group: readonly string[]) => Object.fromEntries(group.map(field => [key(field), 1 as const]));
		const descriptions: IndexDescription[] = [
			...unique.map(group => ({
				name: `u_${group.join("_")}`,
				key: keys(group),
				unique: true,
				partialFilterExpression: Object.fromEntries(group.map(field => [field, PRESENT[spec.fields[field]]]))
			})),
			...indexes.map(group => ({ name: `i_${group.join("_")}`, key: keys(group) }))
		];
		const collection = this.db.collection<Stored>(spec.name);
		if (descriptions.length) await collection.createIndexes(descriptions);
		return new MongoStoreCollection<T>(collection, spec);
	}

	async close(): Promise<void> {
		await this.client.close();
	}
}
