import path from "node:path";
import { MongoStore } from "./mongodb";
import type { Store } from "./port";
import { SqliteStore } from "./sqlite";

export type { Collection, CollectionSpec, Condition, Doc, FieldValue, ListQuery, Store, Where } from "./port";

export interface StoreOptions {
	kind: "sqlite" | "mongodb";
	dataDir: string;
	mongoUrl: string | null;
	/** The owning service: names its SQLite file. In MongoDB the owners share one database and keep distinct collection names. */
	owner: string;
}

const DEFAULT_DATABASE = "scs";

/**
 * The database named by the path of a MongoDB connection string, or `scs`. Parsed by hand because
 * `new URL` rejects host lists (`mongodb://a:27017,b:27017/db`) and the driver falls back to `test`.
 */
export function mongoDatabaseName(url: string): string {
	const match = /^mongodb(?:\+srv)?:\/\/[^/?]*\/([^?]*)/.exec(url);
	return (match && decodeURIComponent(match[1])) || DEFAULT_DATABASE;
}

export async function openStore(options: StoreOptions): Promise<Store> {
	if (options.kind === "sqlite") return new SqliteStore(path.join(options.dataDir, `${options.owner}.sqlite`));
	if (!options.mongoUrl) throw new Error("the mongodb store needs MONGO_URL");
	return MongoStore.connect(options.mongoUrl, mongoDatabaseName(options.mongoUrl));
}
