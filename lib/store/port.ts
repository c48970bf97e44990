/**
 * The store port (DESIGN §3): what the owning services need, not a query language. Documents are
 * JSON objects with a string `id`; the fields a collection declares are the only ones that can be
 * filtered, ordered, counted or made unique, and each adapter indexes them natively.
 */
import type { OutboxEvent } from "../outbox-event";

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

export type FieldType = "text" | "integer" | "boolean";

/**
 * Running sums the store keeps for a collection: per key, the sum over its documents of what
 * `tally` gives for each. Kept in the same atomic write as the document, so the figures a route
 * reports are the store's, one truth for every replica, at no cost per read.
 */
export type Tally = Readonly<Record<string, bigint>>;

export interface CollectionSpec<T extends Doc = any> {
	name: string;
	/** Top-level document fields that queries may use, with their column type. */
	fields: Readonly<Record<string, FieldType>>;
	/** Field groups that must be unique across the collection (besides `id`). */
	unique?: readonly (readonly string[])[];
	/**
	 * Field groups to index for listing and counting, in order. Every adapter ends each of them with
	 * `id`, the tie-break of every ordered list, so the index also serves the order (see servingIndex).
	 */
	indexes?: readonly (readonly string[])[];
	/**
	 * Field groups to index over only the documents in which every field of the group is set (not
	 * null), each ended with `id` as above: the others are not in it, so their writes cost it
	 * nothing. It serves only queries that match each of its fields to a value.
	 */
	sparseIndexes?: readonly (readonly string[])[];
	/** What a document adds to the collection's tally (see Tally); keys absent count 0. */
	tally?: (doc: T) => Tally;
	/** The collection keeps an event log (an outbox): writes may carry an OutboxEvent (see insert, update). */
	outbox?: boolean;
	/** Views the store keeps serialized beside each document, for listViews (see ViewSpec). */
	views?: Readonly<Record<string, ViewSpec<T>>>;
	/**
	 * With views: declared fields (text or integer) whose values change, together, whenever a view
	 * does. The store keeps their values with the views, and builds at read the views of a document
	 * whose values differ: it was written by a version that keeps no views (an older replica beside
	 * this one, or the version a rollback went back to), which left the texts as they were.
	 */
	viewStamp?: readonly string[];
}

/**
 * A view of a document that a list route answers: the store keeps its JSON text beside the
 * document, built in the same write, so that a list of views costs its bytes, not a parse and a
 * serialization of every document per read. `version` names what `build` gives: change it with
 * the build, and documents written before are built from their document at read until their next
 * write, so that no list ever answers a stale shape.
 */
export interface ViewSpec<T> {
	version: number;
	build: (doc: T) => unknown;
}

/** A listed view: its document's id, the value of the list's ordered field (the next page's cursor), and the view's JSON text. */
export interface ViewRow {
	id: string;
	order: FieldValue;
	json: string;
}

/** What the place of every view's text starts with: never a field of a document itself. */
export const VIEW_PREFIX = "_view_";

/** Where an adapter keeps the stamp of a document's views (CollectionSpec.viewStamp). */
export const VIEW_STAMP = `${VIEW_PREFIX}stamp`;

/** Where an adapter keeps a view's text: a new version gets a new place, which documents written before lack. */
export function viewKey(name: string, view: ViewSpec<never>): string {
	if (!/^[A-Za-z][A-Za-z0-9]*$/.test(name) || !Number.isInteger(view.version) || view.version < 1) throw new Error(`bad view ${name} v${view.version}`);
	return `${VIEW_PREFIX}${name}_v${view.version}`;
}

/** Where an adapter keeps each of viewTexts' texts, in its order: the spec's views, then their stamp. */
export function viewPlaces(spec: CollectionSpec): string[] {
	return spec.views ? [...Object.entries(spec.views).map(([name, view]) => viewKey(name, view)), VIEW_STAMP] : [];
}

/** The view texts of a document, in the order of its spec's views, then their stamp (viewStamp). */
export function viewTexts<T extends Doc>(spec: CollectionSpec<T>, doc: T): string[] {
	if (!spec.views) return [];
	return [...Object.values(spec.views).map(view => JSON.stringify(view.build(doc))), viewStamp(spec, doc as unknown as Record<string, unknown>)];
}

/** The values of a document's viewStamp fields, as JSON: what SQLite's json_array of their columns gives. */
export function viewStamp(spec: CollectionSpec, doc: Readonly<Record<string, unknown>>): string {
	return JSON.stringify((spec.viewStamp ?? []).map(field => doc[field] ?? null));
}

/** Checks a spec's views: a stamp of declared text or integer fields, so that a stale view can be told. */
export function assertViews(spec: CollectionSpec): void {
	if (!spec.views) return;
	for (const [name, view] of Object.entries(spec.views)) viewKey(name, view);
	// Booleans are stored as 0 and 1 by SQLite, and the stamp compares values as JSON.
	if (!spec.viewStamp?.length || spec.viewStamp.some(field => spec.fields[field] !== "text" && spec.fields[field] !== "integer"))
		throw new Error(`${spec.name}: views need a viewStamp of declared text or integer fields`);
}

/** A spec's view by name: an undeclared one is a bug, never a silent empty list. */
export function viewOf<T extends Doc>(spec: CollectionSpec<T>, name: string): ViewSpec<T> {
	const view = spec.views?.[name];
	if (!view || !Object.hasOwn(spec.views!, name)) throw new Error(`${spec.name}: view "${name}" is not declared`);
	return view;
}

export type { OutboxEvent };

/** An event as stored: `seq` increases with each event of the collection, in commit order. */
export interface StoredEvent extends OutboxEvent {
	seq: number;
}

export interface EventQuery {
	/** Events after this sequence number (0: from the first kept). */
	after: number;
	/** Only the events of one document. */
	subject?: string;
	limit: number;
}

export interface EventPage {
	events: StoredEvent[];
	/**
	 * Every event of the query numbered up to `through` is in `events` (or at or before `after`): the
	 * last event's number when the page is full, else where the log ended in the snapshot read. A
	 * reader of one subject may skip to it; a separately read head may be newer than this read saw
	 * (a MongoDB failover), so skipping to that could pass events.
	 */
	through: number;
}

/** The page of `events`, read after `query.after` up to `query.limit`, from a log that ended at `head` when read. */
export function eventPage(events: StoredEvent[], query: { after: number; limit: number }, head: number): EventPage {
	const last = events.at(-1)?.seq;
	return { events, through: events.length === query.limit ? (last ?? query.after) : Math.max(head, query.after, last ?? 0) };
}

export interface ListQuery {
	where?: Where;
	orderBy?: readonly [field: string, direction: "asc" | "desc"];
	limit?: number;
	/**
	 * Keyset paging, with `orderBy` only: the documents strictly after the one whose ordered field
	 * is `value` and id is `id`, in the order's direction (ties broken by id, as every list is).
	 * The next page starts after the last document of this one, however many share its value.
	 */
	after?: { value: string | number; id: string };
}

/**
 * Every document of a list, in its order, read in keyset pages of `pageSize`: each read stays
 * bounded, the next page starts after the last document of the one before (lists are ordered by
 * their field, then id), and none is read before the caller asks for its documents.
 */
export async function* listInPages<T extends Doc>(collection: Pick<Collection<T>, "list">, query: Omit<ListQuery, "limit" | "after"> & Required<Pick<ListQuery, "orderBy">>, pageSize: number): AsyncGenerator<T> {
	for (let after: ListQuery["after"]; ; ) {
		const page = await collection.list({ ...query, limit: pageSize, ...(after ? { after } : {}) });
		yield* page;
		if (page.length < pageSize) return;
		const last = page[page.length - 1];
		// The ordered field is a declared scalar; a null there is refused by assertCursor.
		after = { value: (last as unknown as Record<string, string | number>)[query.orderBy[0]], id: last.id };
	}
}

/**
 * Runs `removeBatch` (a removeWhere or a pruneEvents of at most `batch`) until a batch comes back
 * short or `batches` ran: each store call stays short, and a sweep's run bounded; how many went.
 */
export async function removeInBatches(removeBatch: (batch: number) => Promise<number>, batch: number, batches: number): Promise<number> {
	let total = 0;
	for (let round = 0; round < batches; round++) {
		const removed = await removeBatch(batch);
		total += removed;
		if (removed < batch) break;
	}
	return total;
}

/** Checks a keyset cursor: it needs an order, and a value of the ordered field's type. */
export function assertCursor(spec: CollectionSpec, query: ListQuery): void {
	if (!query.after) return;
	if (!query.orderBy) throw new Error(`${spec.name}: a cursor (after) needs an orderBy`);
	// Comparisons never match null: a cursor at a null would silently end the paging.
	if (query.after.value === null) throw new Error(`${spec.name}: a cursor (after) cannot be at a null value`);
	assertWhere(spec, { [query.orderBy[0]]: { gt: query.after.value }, id: query.after.id });
}

export interface Collection<T extends Doc> {
	/**
	 * Inserts a new document; false (and nothing written) when `id` or a unique group is taken.
	 * `event` (outbox collections only) is written with it, atomically, or not at all.
	 */
	insert(doc: T, event?: OutboxEvent): Promise<boolean>;
	get(id: string): Promise<T | null>;
	findOne(where: Where): Promise<T | null>;
	/**
	 * Compare-and-set: replaces document `id` with `next` only while it matches `expected`.
	 * True when it was replaced; false when it is missing or no longer matches. Throws
	 * UniqueConflictError (nothing written) when `next` takes a unique value another document holds.
	 * `event` (outbox collections only) is written with it, atomically, or not at all.
	 */
	update(id: string, expected: Where, next: T, event?: OutboxEvent): Promise<boolean>;
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
	/** The same documents as `list(query)`, as the JSON texts of one of the spec's views. */
	listViews(view: string, query?: ListQuery): Promise<ViewRow[]>;
	count(where?: Where): Promise<number>;
	/** Number of documents per value of `field`. */
	countBy(field: string, where?: Where): Promise<Record<string, number>>;
	/**
	 * The collection's tally (CollectionSpec.tally): nonzero sums only; with `prefixes`, only the
	 * keys that start with one of them (keys named after what clients choose, such as mints, are
	 * many): SQLite reads no other, MongoDB sends no other.
	 */
	tally(prefixes?: readonly string[]): Promise<Record<string, bigint>>;
	/** Committed events after `query.after`, oldest first (outbox collections), and how far the read saw. */
	events(query: EventQuery): Promise<EventPage>;
	/** The newest committed event of `subject`, or of the collection; null when there is none. */
	latestEvent(subject?: string): Promise<StoredEvent | null>;
	/**
	 * Deletes at most `limit` of the oldest events, those from before `before` (ISO time) up to the
	 * first that is not, and never the newest (so that no number is handed out twice); answers how many.
	 */
	pruneEvents(before: string, limit: number): Promise<number>;
}

/** Refuses an event (or a read of events) on a collection that keeps none: an event would be silently lost. */
export function assertOutbox(spec: CollectionSpec, event: OutboxEvent | "read" | undefined): void {
	if (event !== undefined && !spec.outbox) throw new Error(`${spec.name} keeps no event log (CollectionSpec.outbox)`);
}

export interface Store {
	readonly kind: "sqlite" | "mongodb";
	collection<T extends Doc>(spec: CollectionSpec<T>): Promise<Collection<T>>;
	close(): Promise<void>;
}

/**
 * An update refused because its document would take a value of a unique group (CollectionSpec.unique)
 * that another document holds. Nothing was written; the caller decides what the conflict means.
 */
export class UniqueConflictError extends Error {
	constructor(
		readonly collection: string,
		override readonly cause?: unknown
	) {
		super(`${collection}: the update would take a unique value another document holds`);
		this.name = "UniqueConflictError";
	}
}

/**
 * A store that cannot answer now but may in a moment (no primary during an election, a timed-out
 * majority write, a locked file): the gateway answers 503 with retry-after. Adapters translate
 * their driver's transient failures into this at their boundary; any other failure is a bug.
 */
export class StoreUnavailableError extends Error {
	constructor(
		message: string,
		override readonly cause?: unknown
	) {
		super(message);
		this.name = "StoreUnavailableError";
	}
}

/** Checks a query only names declared fields: a typo must fail loudly, not scan everything. */
export function assertDeclared(spec: CollectionSpec, fields: Iterable<string>): void {
	for (const field of fields)
		if (field !== "id" && !Object.hasOwn(spec.fields, field)) throw new Error(`${spec.name}: field "${field}" is not declared`);
}

function typeOf(spec: CollectionSpec, field: string): FieldType {
	return field === "id" ? "text" : spec.fields[field];
}

const JS_TYPE: Record<FieldType, string> = { text: "string", integer: "number", boolean: "boolean" };

/**
 * Checks a filter before an adapter compiles it: declared fields only, no `undefined` (a missing
 * value would silently drop the condition from a compare-and-set), and values of the declared
 * type (SQLite would coerce "5" to 5 where MongoDB matches nothing: the adapters must not differ).
 */
export function assertWhere(spec: CollectionSpec, where: Where): void {
	assertDeclared(spec, Object.keys(where));
	for (const [field, condition] of Object.entries(where)) {
		if (condition === undefined) throw new Error(`${spec.name}: condition on "${field}" is undefined`);
		const values = !isComparison(condition) ? [condition] : "in" in condition ? condition.in : Object.values(condition);
		// `in` too: the adapters read an `in` alone, and would drop whatever operator came with it.
		if (isComparison(condition) && Object.keys(condition).length !== 1) throw new Error(`${spec.name}: condition on "${field}" must have one operator`);
		for (const value of values) {
			if (value === null) continue;
			if (typeof value !== JS_TYPE[typeOf(spec, field)] || (typeof value === "number" && !Number.isFinite(value)))
				throw new Error(`${spec.name}: "${field}" is ${typeOf(spec, field)}, not ${value === undefined ? "undefined" : typeof value}`);
		}
	}
}

export interface IndexKey {
	key: readonly string[];
	/** A unique key orders its documents fully without the `id` tie-break. */
	unique: boolean;
	/** It holds only the documents whose group fields are all set (CollectionSpec.sparseIndexes). */
	sparse: boolean;
}

/**
 * The keys that serve ranges and orders: the primary key and each index followed by `id`. Unique
 * groups are not among them: MongoDB's are partial (present values only), which its planner uses
 * for equality lookups it can prove inside the filter, never for a range, a sort or a scan.
 */
export function indexKeys(spec: CollectionSpec): IndexKey[] {
	const plain = (spec.indexes ?? []).map(group => ({ key: [...group, "id"], unique: false, sparse: false }));
	const sparse = (spec.sparseIndexes ?? []).map(group => ({ key: [...group, "id"], unique: false, sparse: true }));
	return [{ key: ["id"], unique: true, sparse: false }, ...plain, ...sparse];
}

/**
 * The index that serves a query, or an error naming the query: the filter's equality (and `in`)
 * fields first, in any order, then the sort field and `id`. Without an order, the index starts
 * with the equality fields, or with a range field when there is none. Other range conditions are
 * checked along the index scan. Every adapter checks every query with this, so a query shape no
 * index serves fails in the tests instead of scanning a collection in production.
 */
export function servingIndex(spec: CollectionSpec, where: Where = {}, orderBy?: ListQuery["orderBy"]): IndexKey {
	const equalities = Object.entries(where)
		.filter(([, condition]) => !isComparison(condition) || "in" in condition)
		.map(([field]) => field);
	const ranges = Object.keys(where).filter(field => !equalities.includes(field));
	const sort = orderBy?.[0];
	if (equalities.includes("id")) return indexKeys(spec)[0];
	// A unique group the equalities cover holds at most one document per combination (scalar
	// equalities only: the planner proves those inside the group's partial filter).
	const scalars = Object.entries(where)
		.filter(([, condition]) => !isComparison(condition) && condition !== null)
		.map(([field]) => field);
	const covered = (spec.unique ?? []).find(group => sort === undefined && group.every(field => scalars.includes(field)));
	if (covered) return { key: covered, unique: true, sparse: false };
	const serves = ({ key, unique, sparse }: IndexKey): boolean => {
		// A sparse index misses the documents without its fields: only a query that sets each by value stays inside it.
		if (sparse && !key.slice(0, -1).every(field => scalars.includes(field))) return false;
		const prefix = key.slice(0, equalities.length);
		if (prefix.length !== equalities.length || !equalities.every(field => prefix.includes(field))) return false;
		const [next, after] = key.slice(equalities.length);
		if (sort === undefined) return equalities.length > 0 || ranges.length === 0 || ranges.includes(next);
		if (sort === "id") return next === "id" || (unique && next === undefined);
		return next === sort && (after === "id" || (unique && after === undefined));
	};
	const found = indexKeys(spec).find(serves);
	if (!found) throw new Error(`${spec.name}: no index serves ${JSON.stringify({ where: Object.keys(where), orderBy })}`);
	return found;
}

/** Adds `delta` times `tally` to `sums`, keeping only nonzero keys. */
export function addTally(sums: Map<string, bigint>, tally: Tally | undefined, delta: 1n | -1n): void {
	for (const [key, value] of Object.entries(tally ?? {})) {
		const sum = (sums.get(key) ?? 0n) + value * delta;
		if (sum === 0n) sums.delete(key);
		else sums.set(key, sum);
	}
}

/** What replacing `before` by `after` changes in a tally (either may be null: an insert or a delete). */
export function tallyChange<T extends Doc>(spec: CollectionSpec<T>, before: T | null, after: T | null): Map<string, bigint> {
	const change = new Map<string, bigint>();
	if (!spec.tally) return change;
	if (before) addTally(change, spec.tally(before), -1n);
	if (after) addTally(change, spec.tally(after), 1n);
	return change;
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
