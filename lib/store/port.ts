/**
 * The store port (DESIGN §3): what the owning services need, not a query language. Documents are
 * JSON objects with a string `id`; the fields a collection declares are the only ones that can be
 * filtered, ordered, counted or made unique, and each adapter indexes them natively.
 */

export type FieldValue = string | number | boolean | null;

/** Equality on a value, or one comparison. Every condition of a `Where` must hold. */
export type Condition =
	| FieldValue
	| { in: readonly FieldValue[] }
	| { ne: FieldValue }
	| { lt: FieldValue }
	| { lte: FieldValue }
	| { gt: FieldValue }
	| { gte: FieldValue };

export type Where = Readonly<Record<string, Condition>>;

export interface Doc {
	id: string;
}

export interface CollectionSpec {
	name: string;
	/** Top-level document fields that queries may use, with their column type. */
	fields: Readonly<Record<string, "text" | "integer">>;
	/** Field groups that must be unique across the collection (besides `id`). */
	unique?: readonly (readonly string[])[];
	/** Field groups to index for listing and counting, in order. */
	indexes?: readonly (readonly string[])[];
}

export interface ListQuery {
	where?: Where;
	orderBy?: readonly [field: string, direction: "asc" | "desc"];
	limit?: number;
}

export interface Collection<T extends Doc> {
	/** Inserts a new document; false (and nothing written) when `id` or a unique group is taken. */
	insert(doc: T): Promise<boolean>;
	get(id: string): Promise<T | null>;
	findOne(where: Where): Promise<T | null>;
	/**
	 * Compare-and-set: replaces document `id` with `next` only while it matches `expected`.
	 * True when it was replaced; false when it is missing or no longer matches.
	 */
	update(id: string, expected: Where, next: T): Promise<boolean>;
	/**
	 * Compare-and-set delete: deletes document `id` only while it matches `expected` (whatever it
	 * holds when omitted). True when it was deleted; false when it is missing or no longer matches.
	 */
	remove(id: string, expected?: Where): Promise<boolean>;
	/**
	 * Deletes at most `limit` documents matching `where` (which ones is unspecified) and answers how
	 * many, so that a sweep pays for one bounded batch per call. A limit of 0 or less deletes nothing.
	 */
	removeWhere(where: Where, limit: number): Promise<number>;
	list(query?: ListQuery): Promise<T[]>;
	count(where?: Where): Promise<number>;
	/** Number of documents per value of `field`. */
	countBy(field: string, where?: Where): Promise<Record<string, number>>;
}

export interface Store {
	readonly kind: "sqlite" | "mongodb";
	collection<T extends Doc>(spec: CollectionSpec): Promise<Collection<T>>;
	close(): Promise<void>;
}

/** Checks a query only names declared fields: a typo must fail loudly, not scan everything. */
export function assertDeclared(spec: CollectionSpec, fields: Iterable<string>): void {
	for (const field of fields)
		if (field !== "id" && !(field in spec.fields)) throw new Error(`${spec.name}: field "${field}" is not declared`);
}

export function isComparison(condition: Condition): condition is Exclude<Condition, FieldValue> {
	return condition !== null && typeof condition === "object";
}

/** The size of a `removeWhere` batch: 0 deletes nothing, and an unbounded batch is a bug, not a sweep. */
export function batchSize(limit: number): number {
	const size = Math.floor(limit);
	if (!(size > 0)) return 0;
	if (!Number.isSafeInteger(size)) throw new RangeError(`removeWhere needs a bounded limit, not ${limit}`);
	return size;
}
