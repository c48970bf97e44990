/**
 * crankers: owns Cranker heartbeats (SPEC §6). A Cranker is online while its last accepted,
 * signed heartbeat is younger than CRANKER_TTL_MS.
 */
import type { Context, ServiceSchema } from "moleculer";
import { buildHeartbeatMessage } from "../lib/canonical";
import type { Config } from "../lib/config";
import { verifySignature } from "../lib/ed25519";
import { ServiceError } from "../lib/errors";
import { CRANKER_ROLES, address, heartbeatParams, type CrankerRole } from "../lib/schemas";
import type { Collection } from "../lib/store";
import { storeMixin } from "../mixins/store.mixin";

const MAX_HEARTBEAT_SKEW_MS = 60_000;

interface HeartbeatRequest {
	crankerPubkey: string;
	roles: CrankerRole[];
	liquidity: { tokenMintAddress: string; available: string }[];
	version?: string;
	sentAt: string;
	signature: string;
}

interface CrankerDoc {
	id: string;
	crankerPubkey: string;
	roles: CrankerRole[];
	liquidity: HeartbeatRequest["liquidity"];
	version: string | null;
	lastSentAt: string;
	lastSeenAt: string;
}

export function crankersService(config: Config): ServiceSchema {
	let crankers: Collection<CrankerDoc>;
	const operators = new Set(config.crankerOperators);

	const isOnline = (doc: CrankerDoc, nowMs: number) => Date.parse(doc.lastSeenAt) + config.crankerTtlMs > nowMs;
	const toView = (doc: CrankerDoc, nowMs: number) => ({
		crankerPubkey: doc.crankerPubkey,
		roles: doc.roles,
		liquidity: doc.liquidity,
		version: doc.version,
		lastSeenAt: doc.lastSeenAt,
		online: isOnline(doc, nowMs)
	});
	const isOperator = (pubkey: string) => operators.size === 0 || operators.has(pubkey);

	return {
		name: "crankers",
		mixins: [
			storeMixin(config, "crankers", async store => {
				crankers = await store.collection<CrankerDoc>({ name: "crankers", fields: { lastSentAt: "text", lastSeenAt: "text" }, indexes: [["lastSeenAt"]] });
			})
		],

		actions: {
			/** POST /crankers/heartbeat */
			heartbeat: {
				params: heartbeatParams,
				async handler(ctx: Context<HeartbeatRequest>) {
					const hb = ctx.params;
					if (!verifySignature(hb.crankerPubkey, buildHeartbeatMessage(hb), hb.signature))
						throw new ServiceError("INVALID_SIGNATURE", "The heartbeat signature does not verify");
					if (!isOperator(hb.crankerPubkey)) throw new ServiceError("CRANKER_NOT_ALLOWED", "This Cranker is not an allowed operator");
					const now = new Date();
					if (Math.abs(now.getTime() - Date.parse(hb.sentAt)) > MAX_HEARTBEAT_SKEW_MS)
						throw new ServiceError("STALE_HEARTBEAT", "sentAt is more than 60 s away from the Node's clock");

					const doc: CrankerDoc = {
						id: hb.crankerPubkey,
						crankerPubkey: hb.crankerPubkey,
						roles: hb.roles,
						liquidity: hb.liquidity,
						version: hb.version ?? null,
						lastSentAt: hb.sentAt,
						lastSeenAt: now.toISOString()
					};
					// Accepted only when newer than the last accepted one; the condition makes replays and races safe.
					const accepted = (await crankers.insert(doc)) || (await crankers.update(doc.id, { lastSentAt: { lt: hb.sentAt } }, doc));
					if (!accepted) throw new ServiceError("STALE_HEARTBEAT", "sentAt is not newer than the last accepted heartbeat");
					return toView(doc, now.getTime());
				}
			},

			/**
			 * Internal: the Cranker side of the observation routes: counts, online Crankers per role,
			 * and per mint the liquidity and number of online settlement Crankers offering it.
			 */
			summary: {
				params: {},
				async handler() {
					const nowMs = Date.now();
					const all = await crankers.list();
					const online = all.filter(doc => isOnline(doc, nowMs) && isOperator(doc.crankerPubkey));
					const byRole = Object.fromEntries(CRANKER_ROLES.map(role => [role, online.filter(doc => doc.roles.includes(role)).length]));
					const mints = new Map<string, { liquidity: bigint; crankersOnline: number }>();
					for (const doc of online.filter(d => d.roles.includes("settlement")))
						for (const { tokenMintAddress, available } of doc.liquidity) {
							const mint = mints.get(tokenMintAddress) ?? { liquidity: 0n, crankersOnline: 0 };
							mint.liquidity += BigInt(available);
							mint.crankersOnline++;
							mints.set(tokenMintAddress, mint);
						}
					return {
						online: online.length,
						total: all.length,
						byRole,
						mints: Object.fromEntries([...mints].map(([mint, m]) => [mint, { liquidity: m.liquidity.toString(), crankersOnline: m.crankersOnline }]))
					};
				}
			},

			/** Internal: whether a Cranker is online (and an allowed operator) and which roles it has. */
			standing: {
				params: { crankerPubkey: address() },
				async handler(ctx: Context<{ crankerPubkey: string }>): Promise<{ online: boolean; roles: CrankerRole[] }> {
					const doc = await crankers.get(ctx.params.crankerPubkey);
					const online = !!doc && isOnline(doc, Date.now()) && isOperator(doc.crankerPubkey);
					return { online, roles: doc?.roles ?? [] };
				}
			},

			/** Internal: how many Crankers are online now. */
			onlineCount: {
				params: {},
				async handler(): Promise<number> {
					return crankers.count({ lastSeenAt: { gt: new Date(Date.now() - config.crankerTtlMs).toISOString() } });
				}
			}
		}
	};
}
