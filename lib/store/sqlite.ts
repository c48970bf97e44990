/**
 * SQLite adapter (embedded default): one database file per owning service, one table per
 * collection with the declared fields as indexed columns beside the JSON document.
 *
 * Durability: WAL with synchronous=FULL, so a write is on disk (fsynced) before its promise
 * resolves, and survives a power loss, not only a crashed process. Group commit pays for it: the
 * writes of one commit window (STORE_COMMIT_WINDOW_MS, cut short once it holds GROUP_COMMIT_WRITES,
 * or one event-loop turn) share one transaction, committed (and fsynced) once, and each write's
 * promise resolves only after that commit. Per-commit overhead, not the B-tree work, was most of
 * the cost of several commits per intent. A read answers only what is committed: one made while a
 * group is open waits for that group's commit (GroupCommit.committed).
 */
import Database from "better-sqlite3";
import fs from "node:fs";
import path from "node:path";
import { BatchWindow } from "../batcher";
import { StoreUnavailableError, UniqueConflictError, assertCursor, assertOutbox, assertDeclared, assertWhere, batchSize, eventPage, isComparison, servingIndex, tallyChange, VIEW_PREFIX, VIEW_STAMP, assertViews, viewKey, viewOf, viewPlaces, viewTexts, type Collection, type CollectionSpec, type Doc, type FieldValue, type EventPage, type EventQuery, type ListQuery, type OutboxEvent, type Store, type StoredEvent, type Tally, type ViewRow, type Where } from "./port";

const OPERATORS = { ne: "!=", lt: "<", lte: "<=", gt: ">", gte: ">=" } as const;

function quote(identifier: string): string {
	if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(identifier)) throw new Error(`bad identifier ${identifier}`);
	return `"${identifier}"`;
}

function sqlValue(value: FieldValue): string | number | null {
	return typeof value === "boolean" ? Number(value) : value;
}

/** Busy or locked: another connection holds the file for longer than busy_timeout. Worth a retry. */
const TRANSIENT = new Set(["SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_BUSY_SNAPSHOT", "SQLITE_BUSY_TIMEOUT"]);

/**
 * Translates a SQLite failure worth a retry into the port's StoreUnavailableError: the file busy,
 * or the store closed because its process is stopping (the services of a stopping broker stop
 * together, so a call can reach an owner whose store has closed). Anything else is a bug.
 */
function storeError(db: Database.Database, err: unknown): unknown {
	if (!db.open) return new StoreUnavailableError("SQLite store is closed: its process is stopping", err);
	const code = (err as { code?: string }).code;
	return code && TRANSIENT.has(code) ? new StoreUnavailableError(`SQLite store is busy (${code})`, err) : err;
}

function guarded<R>(db: Database.Database, read: () => R): R {
	try {
		return read();
	} catch (err) {
		throw storeError(db, err);
	}
}

function compileWhere(spec: CollectionSpec, where: Where = {}): { sql: string; args: (string | number | null)[] } {
	assertWhere(spec, where);
	const clauses: string[] = [];
	const args: (string | number | null)[] = [];
	for (const [field, condition] of Object.entries(where)) {
		const column = quote(field);
		if (!isComparison(condition)) {
			if (condition === null) clauses.push(`${column} IS NULL`);
			else {
				clauses.push(`${column} = ?`);
				args.push(sqlValue(condition));
			}
		} else if ("in" in condition) {
			// SQL's IN never matches NULL, but a null in the list means the same as equality to null.
			const values = condition.in.filter(v => v !== null);
			const alternatives = values.length ? [`${column} IN (${values.map(() => "?").join(",")})`] : [];
			if (values.length < condition.in.length) alternatives.push(`${column} IS NULL`);
			clauses.push(alternatives.length ? `(${alternatives.join(" OR ")})` : "0");
			args.push(...values.map(sqlValue));
		} else {
			const [op, value] = Object.entries(condition)[0] as [keyof typeof OPERATORS, FieldValue];
			if (op === "ne" && value === null) clauses.push(`${column} IS NOT NULL`);
			else if (op === "ne") {
				clauses.push(`(${column} IS NULL OR ${column} != ?)`);
				args.push(sqlValue(value));
			} else {
				clauses.push(`${column} ${OPERATORS[op]} ?`);
				args.push(sqlValue(value));
			}
		}
	}
	return { sql: clauses.length ? ` WHERE ${clauses.join(" AND ")}` : "", args };
}

/** What a collection does at its group's edges: flush what it kept for the commit, or drop it on a rollback. */
interface GroupMember {
	beforeCommit(): void;
	afterCommit(): void;
	afterRollback(): void;
}

/**
 * A group of this many writes commits at the end of the turn it reached them in, without waiting
 * out its window: eight writes share an fsync well, and clients that wait for their answers before
 * sending more (a pool of 32 at full load) would otherwise idle through every window. The window
 * is for moderate load, where fewer come: at half the maximum rate, 2 ms windows with this early
 * commit (and its like for intake batches) cost about a tenth less CPU per intent than 1 ms
 * windows without; at full load, the same rate.
 */
export const GROUP_COMMIT_WRITES = 8;

/**
 * One transaction for every write on a connection within a commit window (see the file comment):
 * `windowMs` after the group's first write, or at the end of its event-loop turn when 0, or at the
 * end of the turn its GROUP_COMMIT_WRITES-th write came in. A window of a millisecond or two keeps
 * groups large at moderate load, where one fsync per turn would serve only a few writes each.
 */
class GroupCommit {
	private waiting: { resolve: () => void; reject: (err: unknown) => void }[] = [];
	private readonly window: BatchWindow;
	private readonly members: GroupMember[] = [];
	// Prepared once: exec() compiles its SQL on every call.
	private readonly begin: Database.Statement;
	private readonly end: Database.Statement;
	private readonly undo: Database.Statement;

	constructor(
		private readonly db: Database.Database,
		windowMs: number
	) {
		this.window = new BatchWindow(windowMs, GROUP_COMMIT_WRITES, () => this.commit());
		this.begin = db.prepare("BEGIN IMMEDIATE");
		this.end = db.prepare("COMMIT");
		this.undo = db.prepare("ROLLBACK");
	}

	join(member: GroupMember): void {
		this.members.push(member);
	}

	/**
	 * Runs `write` in the open group transaction; resolves with its result once that transaction
	 * committed. A write of one statement is atomic by itself: SQLite undoes a statement that fails.
	 * A write of several (`atomic`) that fails undoes the whole group instead, since SQLite would
	 * undo only its last statement. Such a failure is a full disk or an I/O error, which often rolls
	 * the group back anyway; a savepoint around every write to undo it alone cost an intent's insert
	 * about a fifth of its store time (its sub-journal's temporary file, and two more statements).
	 * The one refusal an atomic write may throw and leave the group as it was is a
	 * UniqueConflictError, and only from its first change.
	 */
	run<R>(write: () => R, atomic = false): Promise<R> {
		let result: R;
		try {
			this.failIfRolledBack();
			if (!this.db.inTransaction) this.begin.run();
			this.window.add();
			try {
				result = write();
			} catch (err) {
				if (this.db.inTransaction && atomic && !(err instanceof UniqueConflictError)) this.rollBack();
				if (!this.db.inTransaction) this.failGroup(err);
				throw err;
			}
		} catch (err) {
			return Promise.reject(storeError(this.db, err));
		}
		return new Promise<R>((resolve, reject) => this.waiting.push({ resolve: () => resolve(result), reject }));
	}

	/**
	 * `read` as committed data. A read on this connection sees the open group's writes, which a
	 * crash in the commit window or a rollback can still lose; an answer built on one (a replay's
	 * "already leased", a repeated authorization, a record) must not go out before them. So, with a
	 * group open, the result waits for that group's commit, and is read again if it rolled back.
	 * Reads inside a write, which decide within its own transaction, do not come here.
	 */
	async committed<R>(read: () => R): Promise<R> {
		for (;;) {
			this.failIfRolledBack();
			const result = guarded(this.db, read);
			if (!this.db.inTransaction || (await this.ended())) return result;
		}
	}

	/** Whether the open group committed (false: rolled back), once it ended. */
	private ended(): Promise<boolean> {
		return new Promise(resolve => this.waiting.push({ resolve: () => resolve(true), reject: () => resolve(false) }));
	}

	/**
	 * Undoes the open transaction. Should ROLLBACK itself fail, the transaction must never end: left
	 * open, a half-done atomic write would be committed by the next group, and a read would wait on a
	 * group no window ends. The connection is closed (which rolls it back) and the process stops, so
	 * that it is restarted (SQLite rolls back what it finds when the file is opened again) rather than
	 * left answering unavailable, and ready, for good.
	 */
	private rollBack(): void {
		try {
			if (this.db.inTransaction) this.undo.run();
		} catch (err) {
			try {
				this.db.close();
			} catch {
				// Closing failed too: stopping the process is what is left.
			}
			setImmediate(() => {
				throw new Error(`SQLite could not roll back a failed commit group (${(err as Error).message}): stopping, so that it is never committed`);
			});
		}
	}

	/**
	 * Some failures (a full disk, an I/O error) make SQLite roll back the whole group transaction,
	 * not only the failing write: every write of the group is gone, and none may resolve as stored.
	 */
	private failGroup(err: unknown): void {
		const batch = this.waiting;
		this.waiting = [];
		for (const member of this.members) member.afterRollback();
		for (const waiter of batch) waiter.reject(storeError(this.db, err));
	}

	/**
	 * Writes wait for their commit, yet no transaction is open: SQLite rolled it back behind the
	 * group (an I/O error or no memory in a read on this connection). They are not stored, and must
	 * fail before a commit, or a new transaction's, would answer them as stored.
	 */
	failIfRolledBack(): void {
		if (!this.db.inTransaction && this.waiting.length) this.failGroup(new StoreUnavailableError("SQLite rolled back a commit group before its commit"));
	}

	commit(): void {
		this.window.closed();
		this.failIfRolledBack();
		const batch = this.waiting;
		this.waiting = [];
		try {
			if (this.db.inTransaction) {
				for (const member of this.members) member.beforeCommit();
				this.end.run();
			}
		} catch (err) {
			// The batch is refused whatever the rollback does; a retry of any of its writes is safe
			// (ids and compare-and-set make them repeatable).
			this.rollBack();
			for (const member of this.members) member.afterRollback();
			for (const waiter of batch) waiter.reject(storeError(this.db, err));
			return;
		}
		for (const member of this.members) member.afterCommit();
		for (const waiter of batch) waiter.resolve();
	}
}

/** The name of a collection's unique ("u"), plain ("i") or sparse ("s") index on `group`, as created and as named in INDEXED BY. */
function indexName(collection: string, kind: "u" | "i" | "s", group: readonly string[]): string {
	return `${collection}_${kind}_${group.join("_")}`;
}

/** Whether an EXPLAIN QUERY PLAN reads every match to sort it (a temp B-tree), or, for an ordered list, scans the table without an index. */
export function sortsOrScans(plan: readonly string[], table: string, ordered: boolean): boolean {
	return plan.some(step => step.includes("TEMP B-TREE") || (ordered && step === `SCAN ${table}`));
}

/** A listed row before its document is parsed: what orders it, and the document's text (or a view's, see listViews). */
interface ListRow {
	sortValue?: string | number | null;
	id: string;
	doc: string | null;
	view?: string | null;
}

/** What a list reads of each row besides its order and id: the document. */
const DOC = "doc";

/** SQLite's order for one column's values: NULL, then numbers, then text (the ASCII keys we sort by compare alike in both). */
function compareKeys(a: string | number | null | undefined, b: string | number | null | undefined): number {
	if (a === b) return 0;
	if (a === null || a === undefined) return -1;
	if (b === null || b === undefined) return 1;
	if (typeof a !== typeof b) return typeof a === "number" ? -1 : 1;
	return a < b ? -1 : 1;
}

interface EventRow {
	seq: number;
	subject: string;
	type: string;
	at: string;
	data: string;
}

function storedEvent(row: EventRow): StoredEvent {
	return { seq: row.seq, subject: row.subject, type: row.type, at: row.at, data: JSON.parse(row.data) as Record<string, unknown> };
}

/** The least text above every text that starts with `prefix` (not empty). */
const prefixEnd = (prefix: string) => prefix.slice(0, -1) + String.fromCharCode(prefix.charCodeAt(prefix.length - 1) + 1);

/** The column that keeps a row's contribution to its collection's tally. */
const TALLY_COLUMN = "_tally";

/** The key of a tally row that says the tally holds every document (written by its first seeding). */
const SEEDED = "$seeded";

class SqliteCollection<T extends Doc> implements Collection<T>, GroupMember {
	private readonly table: string;
	/**
	 * The tally changes of the writes in the open group, added to the tally rows once, just before
	 * the group commits (in its transaction), instead of once per write: a group holds many writes.
	 */
	private pending = new Map<string, bigint>();
	private readonly columns: string[];
	/** The columns of the spec's views, then their stamp's (viewPlaces). */
	private readonly viewColumns: string[];
	private readonly insertStmt: Database.Statement;
	private readonly getStmt: Database.Statement<[string], { doc: string }>;
	private readonly tallyTable: string;
	/** Compiled statements per query shape: the hot paths repeat a handful of shapes. */
	private readonly statements = new Map<string, Database.Statement>();
	/** List statements by what they read and everything after their FROM (listQuery). */
	private readonly lists = new Map<string, Database.Statement>();
	private readonly eventsTable: string;
	/**
	 * The newest event of a committed group. Reads on this connection see the open group's writes,
	 * which may still roll back: events past this are not announced until their commit.
	 */
	private committedSeq = 0;
	/** The newest event number written in the open group (0: none): committed, it is the new committedSeq, with no read after the commit that could fail. */
	private writtenSeq = 0;

	constructor(
		private readonly db: Database.Database,
		private readonly spec: CollectionSpec<T>,
		private readonly group: GroupCommit
	) {
		this.table = quote(spec.name);
		this.tallyTable = quote(`${spec.name}__tally`);
		this.columns = Object.keys(spec.fields);
		assertViews(spec);
		this.viewColumns = viewPlaces(spec);
		const columnDefs = this.columns.map(c => `${quote(c)} ${spec.fields[c] === "text" ? "TEXT" : "INTEGER"}`);
		// With a tally, each row keeps its document's contribution (`_tally`, JSON), so that a write
		// reads that small column for what it replaces instead of parsing the whole document.
		const tallyColumn = spec.tally ? [`${TALLY_COLUMN} TEXT`] : [];
		db.exec(`CREATE TABLE IF NOT EXISTS ${this.table} (id TEXT PRIMARY KEY, ${[...columnDefs, ...tallyColumn, "doc TEXT NOT NULL", ...this.viewColumns.map(c => `${quote(c)} TEXT`)].join(", ")})`);
		this.addMissingColumns();
		const wanted = new Set<string>();
		for (const group of spec.unique ?? []) {
			wanted.add(indexName(spec.name, "u", group));
			db.exec(`CREATE UNIQUE INDEX IF NOT EXISTS ${quote(indexName(spec.name, "u", group))} ON ${this.table} (${group.map(quote).join(", ")})`);
		}
		// Each index ends in id, the tie-break of every ordered list, so it serves the order as well.
		for (const group of spec.indexes ?? []) {
			const key = [...group, "id"];
			wanted.add(indexName(spec.name, "i", key));
			db.exec(`CREATE INDEX IF NOT EXISTS ${quote(indexName(spec.name, "i", key))} ON ${this.table} (${key.map(quote).join(", ")})`);
		}
		// Partial: a document without the fields is not in it. SQLite uses it for `field = ?`, which implies IS NOT NULL.
		for (const group of spec.sparseIndexes ?? []) {
			const key = [...group, "id"];
			wanted.add(indexName(spec.name, "s", key));
			db.exec(`CREATE INDEX IF NOT EXISTS ${quote(indexName(spec.name, "s", key))} ON ${this.table} (${key.map(quote).join(", ")}) WHERE ${group.map(field => `${quote(field)} IS NOT NULL`).join(" AND ")}`);
		}
		// Plain and sparse indexes an earlier version declared cost every write and serve nothing now. Unique
		// ones stay: one may belong to a newer version (a rollback), and without it duplicates get in.
		const existing = db.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL").all(spec.name) as { name: string }[];
		for (const { name } of existing) if ((name.startsWith(`${spec.name}_i_`) || name.startsWith(`${spec.name}_s_`)) && !wanted.has(name)) db.exec(`DROP INDEX ${quote(name)}`);
		if (spec.tally) db.exec(`CREATE TABLE IF NOT EXISTS ${this.tallyTable} (key TEXT PRIMARY KEY, value TEXT NOT NULL)`);
		const all = ["id", ...this.columns, ...(spec.tally ? [TALLY_COLUMN] : []), "doc", ...this.viewColumns];
		this.insertStmt = db.prepare(`INSERT OR IGNORE INTO ${this.table} (${all.map(quote).join(", ")}) VALUES (${all.map(() => "?").join(", ")})`);
		this.getStmt = db.prepare(`SELECT doc FROM ${this.table} WHERE id = ?`);
		this.eventsTable = quote(`${spec.name}__events`);
		if (spec.outbox) {
			// The rowid numbers the events: the next is the newest + 1, and pruning never takes the
			// newest (pruneEvents), so no number is handed out twice. (AUTOINCREMENT would do the same
			// with a write to sqlite_sequence per event.) One index: a record's events; pruning walks seq.
			db.exec(`CREATE TABLE IF NOT EXISTS ${this.eventsTable} (seq INTEGER PRIMARY KEY, subject TEXT NOT NULL, type TEXT NOT NULL, at TEXT NOT NULL, data TEXT NOT NULL)`);
			db.exec(`CREATE INDEX IF NOT EXISTS ${quote(`${spec.name}__events_subject`)} ON ${this.eventsTable} (subject, seq)`);
			this.committedSeq = this.maxSeq();
		}
		if (spec.tally || spec.outbox) group.join(this);
	}

	private maxSeq(): number {
		return (this.statement(`SELECT COALESCE(MAX(seq), 0) AS seq FROM ${this.eventsTable}`).get() as { seq: number }).seq;
	}

	/** Inside a write that happened: its event, in the same transaction. */
	private writeEvent(event: OutboxEvent): void {
		const { lastInsertRowid } = this.statement(`INSERT INTO ${this.eventsTable} (subject, type, at, data) VALUES (?, ?, ?, ?)`).run(event.subject, event.type, event.at, JSON.stringify(event.data));
		this.writtenSeq = Number(lastInsertRowid);
	}

	/** A field declared after the table was created gets its column, filled from the documents. */
	private addMissingColumns(): void {
		const present = new Set((this.db.prepare(`PRAGMA table_info(${this.table})`).all() as { name: string }[]).map(column => column.name));
		if (this.spec.tally && !present.has(TALLY_COLUMN)) this.db.exec(`ALTER TABLE ${this.table} ADD COLUMN ${TALLY_COLUMN} TEXT`);
		// A view's column starts empty: listViews builds the view of a row without one from its document.
		for (const column of this.viewColumns.filter(c => !present.has(c))) this.db.exec(`ALTER TABLE ${this.table} ADD COLUMN ${quote(column)} TEXT`);
		// A view version no longer declared is never read again, and stale from the next write on.
		for (const column of present) if (column.startsWith(VIEW_PREFIX) && !this.viewColumns.includes(column)) this.db.exec(`ALTER TABLE ${this.table} DROP COLUMN ${quote(column)}`);
		for (const column of this.columns.filter(c => !present.has(c)))
			// One transaction: a crash between the two would leave the column empty for good.
			this.db.transaction(() => {
				this.db.exec(`ALTER TABLE ${this.table} ADD COLUMN ${quote(column)} ${this.spec.fields[column] === "text" ? "TEXT" : "INTEGER"}`);
				// json_extract gives 1 and 0 for JSON booleans, as the adapter stores them; objects stay out (declared fields are scalars).
				const path = `$.${column}`;
				this.db.prepare(`UPDATE ${this.table} SET ${quote(column)} = json_extract(doc, ?) WHERE json_type(doc, ?) NOT IN ('object', 'array')`).run(path, path);
			})();
	}

	/**
	 * A tally first kept by this version starts from the documents already stored: one pass, once,
	 * in the same transaction as its marker.
	 */
	async seedTally(): Promise<void> {
		if (!this.spec.tally) return;
		const seeded = this.statement(`SELECT 1 FROM ${this.tallyTable} WHERE key = ?`);
		if (seeded.get(SEEDED)) return;
		await this.group.run(() => {
			if (seeded.get(SEEDED)) return;
			const sums = new Map<string, bigint>();
			// Pages by id: a statement cannot write while another still iterates on the connection.
			const page = this.db.prepare(`SELECT id, doc FROM ${this.table} WHERE id > ? ORDER BY id LIMIT 1000`);
			for (let after = "", rows: { id: string; doc: string }[]; (rows = page.all(after) as typeof rows).length; after = rows[rows.length - 1].id)
				for (const row of rows) for (const [key, value] of tallyChange(this.spec, null, JSON.parse(row.doc) as T)) sums.set(key, (sums.get(key) ?? 0n) + value);
			this.writeTally(sums);
			this.statement(`INSERT INTO ${this.tallyTable} (key, value) VALUES (?, '1')`).run(SEEDED);
		}, true);
	}

	/** What a document adds to the tally: its sums, and their text as its row's `_tally` column keeps them. */
	private contribution(doc: T): { sums: Tally; text: string } {
		const sums = this.spec.tally!(doc);
		let text = "";
		for (const key in sums) text += `${text ? "," : ""}${JSON.stringify(key)}:"${sums[key]}"`;
		return { sums, text: `{${text}}` };
	}

	/** Inside a write: the contribution of the row `id` holds now (from its document when a row predates the column). */
	private storedContribution(id: string): Map<string, bigint> {
		const row = this.statement(`SELECT ${TALLY_COLUMN} AS tally, CASE WHEN ${TALLY_COLUMN} IS NULL THEN doc END AS doc FROM ${this.table} WHERE id = ?`).get(id) as
			| { tally: string | null; doc: string | null }
			| undefined;
		if (!row) return new Map();
		if (row.tally === null) return tallyChange(this.spec, null, JSON.parse(row.doc!) as T);
		return new Map(Object.entries(JSON.parse(row.tally) as Record<string, string>).map(([key, value]) => [key, BigInt(value)]));
	}

	/** Inside a write that happened: adds `after` minus `before` (contributions) to the group's pending tally changes. */
	private applyTally(before: Map<string, bigint>, after: Tally | null): void {
		for (const [key, value] of before) this.pending.set(key, (this.pending.get(key) ?? 0n) - value);
		if (after) for (const key in after) this.pending.set(key, (this.pending.get(key) ?? 0n) + after[key]);
	}

	/** Adds `changes` to the tally rows (inside the transaction). */
	private writeTally(changes: Map<string, bigint>): void {
		const read = this.statement(`SELECT value FROM ${this.tallyTable} WHERE key = ?`);
		const write = this.statement(`INSERT INTO ${this.tallyTable} (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value`);
		const remove = this.statement(`DELETE FROM ${this.tallyTable} WHERE key = ?`);
		for (const [key, delta] of changes) {
			if (delta === 0n) continue;
			// Sums are decimal text: amounts in base units overflow SQLite's 64-bit integers.
			const sum = BigInt((read.get(key) as { value: string } | undefined)?.value ?? "0") + delta;
			// A sum back at zero leaves no row: keys come and go (a mint's live volume), reads stay short.
			if (sum === 0n) remove.run(key);
			else write.run(key, sum.toString());
		}
	}

	afterCommit(): void {
		if (!this.writtenSeq) return;
		this.committedSeq = this.writtenSeq;
		this.writtenSeq = 0;
	}

	beforeCommit(): void {
		if (!this.pending.size) return;
		const changes = this.pending;
		this.pending = new Map();
		this.writeTally(changes);
	}

	afterRollback(): void {
		this.pending = new Map();
		this.writtenSeq = 0;
	}

	private current(id: string): T | null {
		const row = this.getStmt.get(id);
		return row ? (JSON.parse(row.doc) as T) : null;
	}

	private row(doc: T): (string | number | null)[] {
		const record = doc as unknown as Record<string, unknown>;
		return this.columns.map(c => {
			const value = record[c];
			if (value === undefined || value === null) return null;
			if (typeof value === "object") throw new Error(`${this.spec.name}.${c} must be a scalar`);
			return sqlValue(value as FieldValue);
		});
	}

	private statement(sql: string): Database.Statement {
		let stmt = this.statements.get(sql);
		if (!stmt) {
			stmt = guarded(this.db, () => this.db.prepare(sql));
			this.statements.set(sql, stmt);
		}
		return stmt;
	}

	/** A read statement for a query shape: the first time, a check that an index serves it. */
	private query(sql: string, where: Where = {}, orderBy?: ListQuery["orderBy"]): Database.Statement {
		if (!this.statements.has(sql)) servingIndex(this.spec, where, orderBy);
		return this.statement(sql);
	}

	/**
	 * The statement of a list, by what it reads of each row (`select`) and everything after its
	 * FROM (`tail`), prepared the first time its shape is used: an index must serve it (servingIndex), an ordered list walks exactly that index
	 * (INDEXED BY: left to its estimates, SQLite prefers an index on a range condition and then
	 * sorts every match), and SQLite's own plan must agree: no sort of the matching rows and no
	 * scan of the table, so that reading `limit` rows costs O(limit), not O(stored).
	 */
	private listQuery(select: string, tail: string, args: unknown[], query: ListQuery): Database.Statement {
		let stmt = this.lists.get(select + tail);
		if (stmt) return stmt;
		const { where = {}, orderBy } = query;
		const { key, sparse } = servingIndex(this.spec, where, orderBy);
		const indexed = orderBy && key.length > 1 && key[key.length - 1] === "id" ? ` INDEXED BY ${quote(indexName(this.spec.name, sparse ? "s" : "i", key))}` : "";
		const sql = `SELECT ${orderBy ? `${quote(orderBy[0])} AS sortValue, ` : ""}id, ${select} FROM ${this.table}${indexed}${tail}`;
		const plan = (this.db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(...args) as { detail: string }[]).map(row => row.detail);
		if (sortsOrScans(plan, this.spec.name, orderBy !== undefined)) throw new Error(`${this.spec.name}: SQLite would sort or scan for this list (${plan.join("; ")}): ${sql}`);
		this.lists.set(select + tail, (stmt = this.db.prepare(sql)));
		return stmt;
	}

	async insert(doc: T, event?: OutboxEvent): Promise<boolean> {
		assertOutbox(this.spec, event);
		const contribution = this.spec.tally ? this.contribution(doc) : null;
		const row = [doc.id, ...this.row(doc), ...(contribution !== null ? [contribution.text] : []), JSON.stringify(doc), ...viewTexts(this.spec, doc)];
		return this.group.run(() => {
			const inserted = this.insertStmt.run(...row).changes === 1;
			if (inserted && event) this.writeEvent(event);
			if (inserted && contribution !== null) this.applyTally(new Map(), contribution.sums);
			return inserted;
		}, event !== undefined);
	}

	async get(id: string): Promise<T | null> {
		return this.group.committed(() => this.current(id));
	}

	async findOne(where: Where): Promise<T | null> {
		const [doc] = await this.list({ where, limit: 1 });
		return doc ?? null;
	}

	async update(id: string, expected: Where, next: T, event?: OutboxEvent): Promise<boolean> {
		if (next.id !== id) throw new Error("update cannot change a document's id");
		assertOutbox(this.spec, event);
		const { sql, args } = compileWhere(this.spec, expected);
		const contribution = this.spec.tally ? this.contribution(next) : null;
		const assignments = [...this.columns, ...(contribution !== null ? [TALLY_COLUMN] : []), "doc", ...this.viewColumns].map(c => `${quote(c)} = ?`).join(", ");
		const condition = sql ? `${sql} AND id = ?` : " WHERE id = ?";
		const stmt = this.statement(`UPDATE ${this.table} SET ${assignments}${condition}`);
		const row = [...this.row(next), ...(contribution !== null ? [contribution.text] : []), JSON.stringify(next), ...viewTexts(this.spec, next)];
		return this.group.run(() => {
			const before = contribution !== null ? this.storedContribution(id) : null;
			let updated: boolean;
			try {
				updated = stmt.run(...row, ...args, id).changes === 1;
			} catch (err) {
				// One statement: SQLite undid it whole and the group's transaction goes on.
				if ((err as { code?: string }).code === "SQLITE_CONSTRAINT_UNIQUE") throw new UniqueConflictError(this.spec.name, err);
				throw err;
			}
			if (updated && event) this.writeEvent(event);
			if (updated && before) this.applyTally(before, contribution!.sums);
			return updated;
		}, event !== undefined);
	}

	async remove(id: string, expected: Where = {}): Promise<boolean> {
		const { sql, args } = compileWhere(this.spec, expected);
		const condition = sql ? `${sql} AND id = ?` : " WHERE id = ?";
		const stmt = this.statement(`DELETE FROM ${this.table}${condition}`);
		return this.group.run(() => {
			const before = this.spec.tally ? this.storedContribution(id) : null;
			const removed = stmt.run(...args, id).changes === 1;
			if (removed && before) this.applyTally(before, null);
			return removed;
		});
	}

	async removeWhere(where: Where, limit: number): Promise<number> {
		const { sql, args } = compileWhere(this.spec, where);
		const size = batchSize(limit);
		if (size === 0) return 0;
		// DELETE … LIMIT needs SQLITE_ENABLE_UPDATE_DELETE_LIMIT; a limited subquery does the same in
		// one statement. The limit is bound, so every batch size shares one compiled statement.
		if (!this.spec.tally) {
			const stmt = this.query(`DELETE FROM ${this.table} WHERE id IN (SELECT id FROM ${this.table}${sql} LIMIT ?)`, where);
			return this.group.run(() => stmt.run(...args, size).changes);
		}
		const batch = this.query(`SELECT doc FROM ${this.table}${sql} LIMIT ?`, where);
		const removeOne = this.statement(`DELETE FROM ${this.table} WHERE id = ?`);
		return this.group.run(() => {
			let removed = 0;
			for (const { doc } of batch.all(...args, size) as { doc: string }[]) {
				const { id } = JSON.parse(doc) as T;
				const before = this.storedContribution(id);
				removed += removeOne.run(id).changes;
				this.applyTally(before, null);
			}
			return removed;
		}, true);
	}

	async list(query: ListQuery = {}): Promise<T[]> {
		return this.group.committed(() => this.listRows(query, DOC).map(row => JSON.parse(row.doc!) as T));
	}

	async listViews(name: string, query: ListQuery = {}): Promise<ViewRow[]> {
		const view = viewOf(this.spec, name);
		const column = quote(viewKey(name, view));
		// The document only for a row whose view is missing (written before this view's version) or
		// stale (written by a version that keeps no views): its view is built now.
		const stamp = `json_array(${this.spec.viewStamp!.map(quote).join(", ")})`;
		const select = `${column} AS view, iif(${column} IS NULL OR ${quote(VIEW_STAMP)} IS NOT ${stamp}, doc, NULL) AS doc`;
		return this.group.committed(() =>
			this.listRows(query, select).map(row => ({ id: row.id, order: row.sortValue ?? null, json: row.doc === null ? row.view! : JSON.stringify(view.build(JSON.parse(row.doc) as T)) }))
		);
	}

	/**
	 * The rows of a list, in order. An ordered list with `in` on a field is one index walk per
	 * value, merged: SQLite would otherwise read every row of every value and sort them.
	 */
	private listRows(query: ListQuery, select: string): ListRow[] {
		// `in` nothing matches nothing (SQLite would plan a sort of no rows).
		assertWhere(this.spec, query.where ?? {});
		if (Object.values(query.where ?? {}).some(c => isComparison(c) && "in" in c && c.in.length === 0)) return [];
		const split = query.orderBy && Object.entries(query.where ?? {}).find(([, c]) => isComparison(c) && "in" in c && c.in.length > 1);
		if (!split) return this.listStatement(query, select);
		// The shape as a whole, as MongoDB checks it: each value's part alone may be served where the whole is not (a sparse index).
		servingIndex(this.spec, query.where, query.orderBy);
		const [field, condition] = split as [string, { in: readonly FieldValue[] }];
		// Each value once, as MongoDB's $in matches each document once.
		const parts = [...new Set(condition.in)].map(value => this.listRows({ ...query, where: { ...query.where, [field]: value } }, select));
		const sign = query.orderBy![1] === "desc" ? -1 : 1;
		const merged = parts.flat().sort((a, b) => sign * (compareKeys(a.sortValue, b.sortValue) || compareKeys(a.id, b.id)));
		return query.limit === undefined ? merged : merged.slice(0, Math.max(0, Math.floor(query.limit)));
	}

	private listStatement(query: ListQuery, select: string): ListRow[] {
		const { sql, args } = compileWhere(this.spec, query.where);
		assertCursor(this.spec, query);
		let text = sql;
		if (query.orderBy) {
			assertDeclared(this.spec, [query.orderBy[0]]);
			const column = quote(query.orderBy[0]);
			// id breaks ties so that equal timestamps still list in a stable order.
			const direction = query.orderBy[1] === "desc" ? "DESC" : "ASC";
			if (query.after) {
				// A row value, which SQLite matches on the index; the same condition spelled with OR
				// makes it merge two index searches and sort what they find.
				text += `${sql ? " AND" : " WHERE"} (${column}, id) ${direction === "DESC" ? "<" : ">"} (?, ?)`;
				args.push(query.after.value, query.after.id);
			}
			text += query.orderBy[0] === "id" ? ` ORDER BY id ${direction}` : ` ORDER BY ${column} ${direction}, id ${direction}`;
		}
		if (query.limit !== undefined) {
			text += " LIMIT ?";
			args.push(Math.max(0, Math.floor(query.limit)));
		}
		return this.listQuery(select, text, args, query).all(...args) as ListRow[];
	}

	async count(where?: Where): Promise<number> {
		const { sql, args } = compileWhere(this.spec, where);
		const stmt = this.query(`SELECT COUNT(*) AS n FROM ${this.table}${sql}`, where);
		return this.group.committed(() => (stmt.get(...args) as { n: number }).n);
	}

	async countBy(field: string, where?: Where): Promise<Record<string, number>> {
		assertDeclared(this.spec, [field]);
		const { sql, args } = compileWhere(this.spec, where);
		const column = quote(field);
		const stmt = this.query(`SELECT ${column} AS k, COUNT(*) AS n FROM ${this.table}${sql} GROUP BY ${column}`, where);
		const rows = await this.group.committed(() => stmt.all(...args) as { k: string | number | null; n: number }[]);
		return Object.fromEntries(rows.map(r => [String(r.k), r.n]));
	}

	async events(query: EventQuery): Promise<EventPage> {
		assertOutbox(this.spec, "read");
		const bySubject = query.subject !== undefined;
		const stmt = this.statement(`SELECT seq, subject, type, at, data FROM ${this.eventsTable} WHERE ${bySubject ? "subject = ? AND " : ""}seq > ? AND seq <= ? ORDER BY seq LIMIT ?`);
		const limit = Math.max(0, Math.floor(query.limit));
		const head = this.committedSeq;
		const events = guarded(this.db, () => (stmt.all(...(bySubject ? [query.subject] : []), query.after, head, limit) as EventRow[]).map(storedEvent));
		return eventPage(events, { after: query.after, limit }, head);
	}

	async latestEvent(subject?: string): Promise<StoredEvent | null> {
		assertOutbox(this.spec, "read");
		const stmt = this.statement(`SELECT seq, subject, type, at, data FROM ${this.eventsTable} WHERE ${subject !== undefined ? "subject = ? AND " : ""}seq <= ? ORDER BY seq DESC LIMIT 1`);
		const row = guarded(this.db, () => stmt.get(...(subject !== undefined ? [subject] : []), this.committedSeq) as EventRow | undefined);
		return row ? storedEvent(row) : null;
	}

	async pruneEvents(before: string, limit: number): Promise<number> {
		assertOutbox(this.spec, "read");
		const size = batchSize(limit);
		if (size === 0) return 0;
		// The oldest events, by seq (an event's time follows its number, within a commit window):
		// the run of them from before `before`, never the newest.
		const oldest = this.statement(`SELECT seq, at FROM ${this.eventsTable} WHERE seq < (SELECT MAX(seq) FROM ${this.eventsTable}) ORDER BY seq LIMIT ?`);
		const remove = this.statement(`DELETE FROM ${this.eventsTable} WHERE seq <= ?`);
		return this.group.run(() => {
			const rows = oldest.all(size) as { seq: number; at: string }[];
			const stale = rows.findIndex(row => row.at >= before);
			const upTo = stale === -1 ? rows.length : stale;
			return upTo === 0 ? 0 : remove.run(rows[upTo - 1].seq).changes;
		});
	}

	async tally(prefixes?: readonly string[]): Promise<Record<string, bigint>> {
		if (!this.spec.tally) return {};
		return this.group.committed(() => {
			// A prefix is a range of the primary key (prefixEnd); an empty one is every key, as on MongoDB.
			const rows = (
				prefixes && !prefixes.includes("")
					? prefixes.flatMap(prefix => this.statement(`SELECT key, value FROM ${this.tallyTable} WHERE key >= ? AND key < ? AND key != ?`).all(prefix, prefixEnd(prefix), SEEDED))
					: this.statement(`SELECT key, value FROM ${this.tallyTable} WHERE key != ?`).all(SEEDED)
			) as { key: string; value: string }[];
			// With the open group's tally changes, as with its documents: both count once it committed.
			const sums = new Map(rows.map(r => [r.key, BigInt(r.value)]));
			for (const [key, delta] of this.pending) if (!prefixes || prefixes.some(prefix => key.startsWith(prefix))) sums.set(key, (sums.get(key) ?? 0n) + delta);
			return Object.fromEntries([...sums].filter(([, value]) => value !== 0n));
		});
	}
}

export class SqliteStore implements Store {
	readonly kind = "sqlite" as const;
	private readonly db: Database.Database;
	private readonly group: GroupCommit;

	/** `commitWindowMs`: how long a group of writes stays open for more before its one commit (fsync). */
	constructor(file: string, commitWindowMs = 0) {
		fs.mkdirSync(path.dirname(file), { recursive: true });
		this.db = new Database(file);
		this.db.pragma("journal_mode = WAL");
		this.db.pragma("synchronous = FULL");
		this.db.pragma("busy_timeout = 5000");
		this.group = new GroupCommit(this.db, commitWindowMs);
	}

	async collection<T extends Doc>(spec: CollectionSpec<T>): Promise<Collection<T>> {
		const collection = new SqliteCollection<T>(this.db, spec, this.group);
		await collection.seedTally();
		return collection;
	}

	async close(): Promise<void> {
		if (!this.db.open) return;
		this.group.commit();
		this.db.close();
	}
}
