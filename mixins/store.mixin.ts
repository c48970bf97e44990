/**
 * Opens the owning service's store when it starts and closes it when it stops. Each owner gets
 * its own store (its own SQLite file, or its own collections in MongoDB), so no service can reach
 * another's data except through that service's actions.
 */
import type { ServiceSchema } from "moleculer";
import type { Config } from "../lib/config";
import { openStore, type Store } from "../lib/store";

export function storeMixin(config: Config, owner: string, onOpen: (store: Store) => Promise<void>): Partial<ServiceSchema> {
	let store: Store | null = null;
	return {
		async started() {
			store = await openStore({ kind: config.store, dataDir: config.dataDir, mongoUrl: config.mongoUrl, owner });
			await onOpen(store);
		},
		async stopped() {
			await store?.close();
			store = null;
		}
	};
}
