/**
 * crankers: owns Cranker admission (SPEC §6, §6.1): signed heartbeats, liveness and roles, and the
 * request signatures already seen (replay protection). A Cranker is online while its last accepted
 * heartbeat is younger than CRANKER_TTL_MS; records silent for CRANKER_RETENTION_MS are pruned.
 */
import type { Context, ServiceSchema } from "moleculer";
import { buildHeartbeatMessage } from "../lib/canonical";
import type { Config } from "../lib/config";
import { CrankerTotals } from "../lib/cranker-totals";
import { verifySignature } from "../lib/ed25519";
import { ServiceError } from "../lib/errors";
import { MAX_CLOCK_SKEW_S, assertSignedBy } from "../lib/http-signature";
import { CRANKER_ROLES, address, heartbeatParams, type CrankerRole } from "../lib/schemas";
import type { Collection } from "../lib/store";
import { callKey, isOwnWrite } from "./replay";
import { storeMixin } from "../mixins/store.mixin";
import { sweeperMixin } from "../mixins/sweeper.mixin";

const MAX_HEARTBEAT_SKEW_MS = 60_000;
/** Records pruned per sweep: a sweep's cost stays bounded whatever accumulated. */
const PRUNE_BATCH = 500;

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
	/** The call that stored this heartbeat (services/replay.ts). */
	callKey?: string | null;
}

/** A request signature seen within its validity window, keyed by the signature itself. */
interface SeenSignature {
	id: string;
	keyid: string;
	/** The end of the window in which the signature would still be accepted: then it can go. */
	expiresAt: string;
}

export function crankersService(config: Config): ServiceSchema {
	let crankers: Collection<CrankerDoc>;
	let seenSignatures: Collection<SeenSignature>;
	const operators = new Set(config.crankerOperators);
	// One crankers owner holds a SQLite store, so these figures are exact; MongoDB replicas each
	// count the heartbeats they take (as the mempool's totals): the distributed deployment's to solve.
	const totals = new CrankerTotals(CRANKER_ROLES);
	let recordCount = 0;

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
	const onlineCutoff = (nowMs: number) => new Date(nowMs - config.crankerTtlMs).toISOString();

	/** Seeds the figures from the Crankers online now (an index range), and the record count. */
	async function seedTotals(): Promise<void> {
		for (const doc of await crankers.list({ where: { lastSeenAt: { gt: onlineCutoff(Date.now()) } }, orderBy: ["lastSeenAt", "asc"] }))
			if (isOperator(doc.crankerPubkey)) totals.seen(doc);
		recordCount = await crankers.count();
	}

	/** Drops silent Crankers from the figures, prunes long-silent records and expired replay entries. */
	async function sweep(): Promise<void> {
		const nowMs = Date.now();
		totals.expire(onlineCutoff(nowMs));
		// Awaited first: `recordCount -= await …` would read the count before the await and lose the
		// heartbeats inserted meanwhile.
		const pruned = await crankers.removeWhere({ lastSeenAt: { lt: new Date(nowMs - config.crankerRetentionMs).toISOString() } }, PRUNE_BATCH);
		recordCount -= pruned;
		await seenSignatures.removeWhere({ expiresAt: { lt: new Date(nowMs).toISOString() } }, PRUNE_BATCH);
	}

	return {
		name: "crankers",
		mixins: [
			storeMixin(config, "crankers", async store => {
				crankers = await store.collection<CrankerDoc>({ name: "crankers", fields: { lastSentAt: "text", lastSeenAt: "text" }, indexes: [["lastSeenAt"]] });
				seenSignatures = await store.collection<SeenSignature>({ name: "request_signatures", fields: { expiresAt: "text" }, indexes: [["expiresAt"]] });
				await seedTotals();
			}),
			sweeperMixin("cranker liveness", config.sweepIntervalMs, sweep)
		],

		actions: {
			/** POST /crankers/heartbeat (a signed Cranker request) */
			heartbeat: {
				params: heartbeatParams,
				async handler(ctx: Context<HeartbeatRequest, { crankerPubkey?: string }>) {
					const hb = ctx.params;
					assertSignedBy(ctx.meta, hb.crankerPubkey);
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
						lastSeenAt: now.toISOString(),
						callKey: callKey(ctx)
					};
					// Accepted only when newer than the last accepted one; the condition makes replays and races safe.
					const inserted = await crankers.insert(doc);
					if (!inserted && !(await crankers.update(doc.id, { lastSentAt: { lt: hb.sentAt } }, doc))) {
						// A retry of the call that stored this heartbeat answers as that call did.
						const stored = await crankers.get(doc.id);
						if (stored && isOwnWrite(ctx, stored.callKey)) return toView(stored, Date.parse(stored.lastSeenAt));
						throw new ServiceError("STALE_HEARTBEAT", "sentAt is not newer than the last accepted heartbeat");
					}
					if (inserted) recordCount++;
					totals.seen(doc);
					return toView(doc, now.getTime());
				}
			},

			/**
			 * Internal, from the gateway: records a verified request signature, once. The same
			 * signature again within its validity window is a replay (SPEC §6.1).
			 */
			admitSignature: {
				params: { keyid: address(), signature: { type: "string", max: 128 }, created: { type: "number", integer: true } },
				async handler(ctx: Context<{ keyid: string; signature: string; created: number }>): Promise<true> {
					const { keyid, signature, created } = ctx.params;
					const expiresAt = new Date((created + MAX_CLOCK_SKEW_S) * 1000).toISOString();
					if (!(await seenSignatures.insert({ id: signature, keyid, expiresAt })))
						throw new ServiceError("FORBIDDEN", "This request signature was used before", { reason: "replayed" });
					return true;
				}
			},

			/**
			 * Internal: the Cranker side of the observation routes: counts, online Crankers per role,
			 * and per mint the liquidity and number of online settlement Crankers offering it.
			 */
			summary: {
				params: {},
				handler() {
					totals.expire(onlineCutoff(Date.now()));
					return { ...totals.snapshot(), total: recordCount };
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
				handler(): number {
					totals.expire(onlineCutoff(Date.now()));
					return totals.online;
				}
			}
		}
	};
}
