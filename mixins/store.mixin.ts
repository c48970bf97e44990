/**
 * Opens the owning service's store when it starts and closes it when it stops. Each owner gets
 * its own store (its own SQLite file, or its own collections in MongoDB), so no service can reach
 * another's data except through that service's actions.
 */
import { Errors, type Context, type Service, type ServiceSchema } from "moleculer";
import { ConfigError, type Config } from "../lib/config";
import { ERROR_STATUS, isServiceError, ServiceError } from "../lib/errors";
import { openStore, StoreUnavailableError, type Store } from "../lib/store";

/** How long a starting SQLite owner listens for the cluster's INFO packets before it checks for a twin. */
const DISCOVERY_WAIT_MS = 1500;

/**
 * SQLite is single-owner: a second replica of this service elsewhere in the cluster would hold a
 * store of its own, and the two would answer differently. So it refuses to start. (Two replicas
 * started in the same instant can both miss each other; MongoDB is the store for replicas.)
 */
async function refuseSqliteTwin(service: Service): Promise<void> {
	const { broker } = service;
	await new Promise(resolve => setTimeout(resolve, DISCOVERY_WAIT_MS));
	const twins = broker.registry
		.getServiceList({ onlyAvailable: true, skipInternal: true })
		.filter(other => other.name === service.name && other.nodeID !== broker.nodeID);
	if (twins.length)
		throw new ConfigError(
			`another replica of "${service.name}" runs on ${twins.map(t => t.nodeID).join(", ")}: with SQLite a service has exactly one owner; set MONGO_URL to run replicas`
		);
}

/**
 * The store boundary: what an owner's action throws leaves it as a SPEC §7 error. A store that
 * cannot answer now is 503 NOT_READY (the gateway adds retry-after); any other failure is a bare
 * 500, logged here with its cause, so no database code or message ever reads as a client error.
 */
function storeBoundary(this: Service, ctx: Context, err: unknown): never {
	throw storeFailure(this.logger, ctx.action?.name ?? this.name, err);
}

/**
 * What the store boundary answers for `err`, logged here when it is not the caller's doing. Also
 * for one item of a batch, whose failure must be its own answer and not the batch's.
 */
export function storeFailure(logger: Service["logger"], where: string, err: unknown): unknown {
	// A SPEC §7 answer, this service's or one rebuilt from another process's (a plain Error then).
	if (isServiceError(err) || (typeof (err as { type?: unknown }).type === "string" && (err as { type: string }).type in ERROR_STATUS)) return err;
	if (err instanceof StoreUnavailableError) {
		logger.warn(`${where}: ${err.message}`);
		return new ServiceError("NOT_READY", "The store is not available right now; retry shortly");
	}
	// Errors of the framework (validation, a nested call's answer or timeout) keep their own meaning.
	if (err instanceof Errors.MoleculerError) return err;
	logger.error(`${where} failed:`, err);
	return new ServiceError("INTERNAL_ERROR", "Internal error");
}

const storeMixins = new WeakSet<object>();

/** Whether a service's mixin is a storeMixin (the service catalogue's test checks each owner lists it last). */
export const isStoreMixin = (mixin: unknown): boolean => typeof mixin === "object" && mixin !== null && storeMixins.has(mixin);

/**
 * `onOpen` runs as the service (`this`), once its store is open and before it counts as started.
 * List it last among the service's mixins: Moleculer runs the `started` hook of a service's last
 * mixin first and its `stopped` hook last, so the store is open before a sweep (sweeperMixin) can
 * start, and closes only after the last sweep has ended.
 */
export function storeMixin<S = Service>(config: Config, owner: string, onOpen: (this: S, store: Store) => Promise<void>): Partial<ServiceSchema> {
	let store: Store | null = null;
	const mixin: Partial<ServiceSchema> = {
		hooks: { error: { "*": storeBoundary } },
		async started(this: Service) {
			if (config.store === "sqlite" && this.broker.transit) await refuseSqliteTwin(this);
			store = await openStore({ kind: config.store, dataDir: config.dataDir, mongoUrl: config.mongoUrl, allowWeakDurability: config.mongoAllowWeakDurability, owner, commitWindowMs: config.storeCommitWindowMs });
			await onOpen.call(this as unknown as S, store);
		},
		async stopped() {
			await store?.close();
			store = null;
		}
	};
	storeMixins.add(mixin);
	return mixin;
}
