/**
 * tin: owns the registry of TIN routes (SPEC §5). This part resolves a TIN to its active route and
 * imports the genesis routes of REGISTRY_SEED_FILE at start.
 */
import fs from "node:fs";
import type { Context, ServiceSchema } from "moleculer";
import { ConfigError, type Config } from "../lib/config";
import { ServiceError } from "../lib/errors";
import { parseRegistrySeed, toRouteView, type ActiveRoute, type RouteRecord } from "../lib/registry";
import { tin } from "../lib/schemas";
import type { Collection } from "../lib/store";
import { storeMixin } from "../mixins/store.mixin";

const ROUTES_COLLECTION = {
	name: "registry_routes",
	fields: { tin: "text", active: "integer" },
	unique: [["tin"]]
} as const;

export function tinService(config: Config): ServiceSchema {
	let routes: Collection<RouteRecord>;

	async function importGenesis(file: string): Promise<number> {
		let entries;
		try {
			entries = parseRegistrySeed(fs.readFileSync(file, "utf8"));
		} catch (err) {
			throw new ConfigError(`REGISTRY_SEED_FILE ${file} is invalid: ${(err as Error).message}`);
		}
		const updatedAt = new Date().toISOString();
		let imported = 0;
		for (const entry of entries) {
			// insert() leaves an existing TIN as it is: importing twice changes nothing.
			const route: RouteRecord = { ...entry, id: entry.tin, ownerWallet: entry.ownerWallet ?? null, active: true, updatedAt };
			if (await routes.insert(route)) imported++;
		}
		return imported;
	}

	async function activeRoute(value: string): Promise<RouteRecord | null> {
		const route = await routes.get(value);
		return route?.active ? route : null;
	}

	return {
		name: "tin",
		mixins: [
			storeMixin(config, "tin", async store => {
				routes = await store.collection<RouteRecord>(ROUTES_COLLECTION);
			})
		],

		actions: {
			/** Internal: the active route of a TIN, or null. */
			resolve: {
				params: { tin: tin() },
				async handler(ctx: Context<{ tin: string }>): Promise<ActiveRoute | null> {
					const route = await activeRoute(ctx.params.tin);
					return route && { tin: route.tin, routeCommitment: route.routeCommitment, routeVersion: route.routeVersion, policyCommitment: route.policyCommitment };
				}
			},

			/** Internal: proves the registry can be read; 503 REGISTRY_INVALID otherwise. */
			check: {
				params: {},
				async handler(): Promise<{ routes: number }> {
					try {
						return { routes: await routes.count({ active: true }) };
					} catch (err) {
						throw new ServiceError("REGISTRY_INVALID", "The registry cannot be read", { reason: (err as Error).message });
					}
				}
			},

			/** GET /registry/tins/{tin} */
			getRoute: {
				params: { $$strict: true, tin: tin() },
				async handler(ctx: Context<{ tin: string }>) {
					const route = await activeRoute(ctx.params.tin);
					if (!route) throw new ServiceError("NOT_FOUND", `TIN ${ctx.params.tin} has no active route`);
					return toRouteView(route);
				}
			}
		},

		async started() {
			if (!config.registrySeedFile) return;
			const imported = await importGenesis(config.registrySeedFile);
			this.logger.info(`Registry seed ${config.registrySeedFile}: ${imported} new route(s) imported.`);
		}
	};
}
