import path from "node:path";
import { MongoStore } from "./mongodb";
import { mongoDatabaseName } from "./mongo-url";
import type { Store } from "./port";
import { SqliteStore } from "./sqlite";

export { mongoDatabaseName, mongoUrlWeakenings } from "./mongo-url";
export { StoreUnavailableError, UniqueConflictError, eventPage, listInPages, removeInBatches } from "./port";
export type { Collection, CollectionSpec, Condition, Doc, EventPage, EventQuery, FieldValue, ListQuery, OutboxEvent, Store, StoredEvent, Tally, ViewRow, ViewSpec, Where } from "./port";

export interface StoreOptions {
	kind: "sqlite" | "mongodb";
	dataDir: string;
	mongoUrl: string | null;
	/** MONGO_ALLOW_WEAK_DURABILITY: start even when the URL overrides the durable settings. */
	allowWeakDurability?: boolean;
	/** The owning service: names its SQLite file. In MongoDB the owners share one database and keep distinct collection names. */
	owner: string;
	/** SQLite: how long a group of writes waits for more before its one commit (0: the end of the event-loop turn). */
	commitWindowMs?: number;
}

export async function openStore(options: StoreOptions): Promise<Store> {
	if (options.kind === "sqlite") return new SqliteStore(path.join(options.dataDir, `${options.owner}.sqlite`), options.commitWindowMs);
	if (!options.mongoUrl) throw new Error("the mongodb store needs MONGO_URL");
	return MongoStore.connect(options.mongoUrl, mongoDatabaseName(options.mongoUrl), options.allowWeakDurability ?? false);
}
