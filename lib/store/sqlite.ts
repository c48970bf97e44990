/**
 * SQLite adapter (embedded default): one database file per owning service, one table per
 * collection with the declared fields as indexed columns beside the JSON document.
 *
 * Durability: WAL with synchronous=FULL, so a write is on disk (fsynced) before its promise
 * resolves, and survives a power loss, not only a crashed process. Group commit pays for it: the
 * writes of one event-loop turn share one transaction, committed (and fsynced) once at the end of
 * the turn, and each write's promise resolves only after that commit. Per-commit overhead, not
 * the B-tree work, was most of the cost of three commits per intent.
 */
import Database from "better-sqlite3";
import fs from "node:fs";
import path from "node:path";
import { assertDeclared, batchSize, isComparison, type Collection, type CollectionSpec, type Doc, type FieldValue, type ListQuery, type Store, type Where } from "./port";

const OPERATORS = { ne: "!=", lt: "<", lte: "<=", gt: ">", gte: ">=" } as const;

function quote(identifier: string): string {
	if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(identifier)) throw new Error(`bad identifier ${identifier}`);
	return `"${identifier}"`;
}

function sqlValue(value: FieldValue): string | number | null {
	return typeof value === "boolean" ? Number(value) : value;
}

function compileWhere(spec: CollectionSpec, where: Where = {}): { sql: string; args: (string | number | null)[] } {
	assertDeclared(spec, Object.keys(where));
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

/** One transaction per event-loop turn for every write on a connection (see the file comment). */
class GroupCommit {
	private waiting: { resolve: () => void; reject: (err: unknown) => void }[] = [];
	private scheduled = false;

	constructor(private readonly db: Database.Database) {}

	/** Runs `write` in the open group transaction; resolves with its result once that transaction committed. */
	run<R>(write: () => R): Promise<R> {
		if (!this.db.inTransaction) this.db.exec("BEGIN IMMEDIATE");
		if (!this.scheduled) {
			this.scheduled = true;
			setImmediate(() => this.commit());
		}
		let result: R;
		try {
			result = write();
		} catch (err) {
			// A failing statement (a unique violation, say) rolls back only itself; the group goes on.
			return Promise.reject(err);
		}
		return new Promise<R>((resolve, reject) => this.waiting.push({ resolve: () => resolve(result), reject }));
	}

	commit(): void {
		this.scheduled = false;
		const batch = this.waiting;
		this.waiting = [];
		try {
			if (this.db.inTransaction) this.db.exec("COMMIT");
		} catch (err) {
			if (this.db.inTransaction) this.db.exec("ROLLBACK");
			for (const waiter of batch) waiter.reject(err);
			return;
		}
		for (const waiter of batch) waiter.resolve();
	}
}

class SqliteCollection<T extends Doc> implements Collection<T> {
	private readonly columns: string[];
	private readonly insertStmt: Database.Statement;
	private readonly getStmt: Database.Statement<[string], { doc: string }>;
	/** Compiled statements per query shape: the hot paths repeat a handful of shapes. */
	private readonly statements = new Map<string, Database.Statement>();

	constructor(
		private readonly db: Database.Database,
		private readonly spec: CollectionSpec,
		private readonly group: GroupCommit
	) {
		const table = quote(spec.name);
		this.columns = Object.keys(spec.fields);
		const columnDefs = this.columns.map(c => `${quote(c)} ${spec.fields[c] === "integer" ? "INTEGER" : "TEXT"}`);
		db.exec(`CREATE TABLE IF NOT EXISTS ${table} (id TEXT PRIMARY KEY, ${[...columnDefs, "doc TEXT NOT NULL"].join(", ")})`);
		const indexName = (kind: string, group: readonly string[]) => quote(`${spec.name}_${kind}_${group.join("_")}`);
		for (const group of spec.unique ?? [])
			db.exec(`CREATE UNIQUE INDEX IF NOT EXISTS ${indexName("u", group)} ON ${table} (${group.map(quote).join(", ")})`);
		for (const group of spec.indexes ?? [])
			db.exec(`CREATE INDEX IF NOT EXISTS ${indexName("i", group)} ON ${table} (${group.map(quote).join(", ")})`);
		const all = ["id", ...this.columns, "doc"];
		this.insertStmt = db.prepare(`INSERT OR IGNORE INTO ${table} (${all.map(quote).join(", ")}) VALUES (${all.map(() => "?").join(", ")})`);
		this.getStmt = db.prepare(`SELECT doc FROM ${table} WHERE id = ?`);
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
			stmt = this.db.prepare(sql);
			this.statements.set(sql, stmt);
		}
		return stmt;
	}

	insert(doc: T): Promise<boolean> {
		return this.group.run(() => this.insertStmt.run(doc.id, ...this.row(doc), JSON.stringify(doc)).changes === 1);
	}

	async get(id: string): Promise<T | null> {
		const row = this.getStmt.get(id);
		return row ? (JSON.parse(row.doc) as T) : null;
	}

	async findOne(where: Where): Promise<T | null> {
		const [doc] = await this.list({ where, limit: 1 });
		return doc ?? null;
	}

	async update(id: string, expected: Where, next: T): Promise<boolean> {
		if (next.id !== id) throw new Error("update cannot change a document's id");
		const { sql, args } = compileWhere(this.spec, expected);
		const assignments = [...this.columns.map(c => `${quote(c)} = ?`), "doc = ?"].join(", ");
		const condition = sql ? `${sql} AND id = ?` : " WHERE id = ?";
		const stmt = this.statement(`UPDATE ${quote(this.spec.name)} SET ${assignments}${condition}`);
		return this.group.run(() => stmt.run(...this.row(next), JSON.stringify(next), ...args, id).changes === 1);
	}

	async remove(id: string, expected: Where = {}): Promise<boolean> {
		const { sql, args } = compileWhere(this.spec, expected);
		const condition = sql ? `${sql} AND id = ?` : " WHERE id = ?";
		const stmt = this.statement(`DELETE FROM ${quote(this.spec.name)}${condition}`);
		return this.group.run(() => stmt.run(...args, id).changes === 1);
	}

	async removeWhere(where: Where, limit: number): Promise<number> {
		const { sql, args } = compileWhere(this.spec, where);
		const size = batchSize(limit);
		if (size === 0) return 0;
		// DELETE … LIMIT needs SQLITE_ENABLE_UPDATE_DELETE_LIMIT; a limited subquery does the same in
		// one statement. The limit is bound, so every batch size shares one compiled statement.
		const table = quote(this.spec.name);
		const stmt = this.statement(`DELETE FROM ${table} WHERE id IN (SELECT id FROM ${table}${sql} LIMIT ?)`);
		return this.group.run(() => stmt.run(...args, size).changes);
	}

	async list(query: ListQuery = {}): Promise<T[]> {
		const { sql, args } = compileWhere(this.spec, query.where);
		let text = `SELECT doc FROM ${quote(this.spec.name)}${sql}`;
		if (query.orderBy) {
			assertDeclared(this.spec, [query.orderBy[0]]);
			// id breaks ties so that equal timestamps still list in a stable order.
			const direction = query.orderBy[1] === "desc" ? "DESC" : "ASC";
			text += ` ORDER BY ${quote(query.orderBy[0])} ${direction}, id ${direction}`;
		}
		if (query.limit !== undefined) text += ` LIMIT ${Math.max(0, Math.floor(query.limit))}`;
		const rows = this.statement(text).all(...args) as { doc: string }[];
		return rows.map(r => JSON.parse(r.doc) as T);
	}

	async count(where?: Where): Promise<number> {
		const { sql, args } = compileWhere(this.spec, where);
		return (this.statement(`SELECT COUNT(*) AS n FROM ${quote(this.spec.name)}${sql}`).get(...args) as { n: number }).n;
	}

	async countBy(field: string, where?: Where): Promise<Record<string, number>> {
		assertDeclared(this.spec, [field]);
		const { sql, args } = compileWhere(this.spec, where);
		const column = quote(field);
		const rows = this.statement(`SELECT ${column} AS k, COUNT(*) AS n FROM ${quote(this.spec.name)}${sql} GROUP BY ${column}`).all(...args) as {
			k: string | number | null;
			n: number;
		}[];
		return Object.fromEntries(rows.map(r => [String(r.k), r.n]));
	}
}

export class SqliteStore implements Store {
	readonly kind = "sqlite" as const;
	private readonly db: Database.Database;
	private readonly group: GroupCommit;

	constructor(file: string) {
		fs.mkdirSync(path.dirname(file), { recursive: true });
		this.db = new Database(file);
		this.db.pragma("journal_mode = WAL");
		this.db.pragma("synchronous = FULL");
		this.db.pragma("busy_timeout = 5000");
		this.group = new GroupCommit(this.db);
	}

	async collection<T extends Doc>(spec: CollectionSpec): Promise<Collection<T>> {
		return new SqliteCollection<T>(this.db, spec, this.group);
	}

	async close(): Promise<void> {
		if (!this.db.open) return;
		this.group.commit();
		this.db.close();
	}
}
