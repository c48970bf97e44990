/**
 * leases: the leasing policy (who may move leased work), the lease expiry sweep and the one-time
 * payout authorizations, which it owns. Intent state itself changes only in the mempool.
 */
import type { Context, ServiceSchema } from "moleculer";
import { ConfigError, type Config } from "../lib/config";
import { createSigner } from "../lib/ed25519";
import { ServiceError } from "../lib/errors";
import { isExpired, type IntentRecord, type UpdateStatusRequest } from "../lib/intents";
import { buildPayoutAuthorization, type PayoutAuthorization } from "../lib/payout";
import type { ActiveRoute } from "../lib/registry";
import { payoutAuthorizationParams, updateStatusParams } from "../lib/schemas";
import { loadOrCreateAuthorityKeypair } from "../lib/secrets";
import type { Collection } from "../lib/store";
import { storeMixin } from "../mixins/store.mixin";
import { sweeperMixin } from "../mixins/sweeper.mixin";

interface AuthorizationDoc {
	/** The intent id: one authorization per intent, replaced only once it has expired. */
	id: string;
	issuedAt: string;
	authorization: PayoutAuthorization;
}

export function leasesService(config: Config): ServiceSchema {
	let authorizations: Collection<AuthorizationDoc>;
	let signer: { publicKey: string; sign: (message: string) => string };
	let broker: Context["broker"];

	async function issue(record: IntentRecord, crankerPubkey: string, ctx: Context): Promise<PayoutAuthorization> {
		const now = new Date();
		const { lease } = record;
		if (record.state !== "CRANKER_LEASED" || !lease) throw new ServiceError("INVALID_TRANSITION", `The intent is ${record.state}, not CRANKER_LEASED`);
		if (lease.crankerPubkey !== crankerPubkey) throw new ServiceError("NOT_LEASE_HOLDER", "Another Cranker holds the lease");
		if (Date.parse(lease.expiresAt) <= now.getTime()) throw new ServiceError("LEASE_EXPIRED", "The lease has expired");
		if (isExpired(record, now.getTime(), await ctx.call<number | null>("mempool.latestSlot")))
			throw new ServiceError("EVIDENCE_INCONSISTENT", "The intent has expired", { reason: "EXPIRED" });
		const route = await ctx.call<ActiveRoute | null, object>("tin.resolve", { tin: record.request.recipientTin });
		if (!route || route.routeCommitment !== record.request.recipientRouteCommitment || route.routeVersion !== record.request.recipientRouteVersion)
			throw new ServiceError("EVIDENCE_INCONSISTENT", "The recipient route is no longer active", { reason: "ROUTE_MISMATCH" });

		const existing = await authorizations.get(record.id);
		if (existing && Date.parse(existing.authorization.expiresAt) > now.getTime()) {
			if (existing.authorization.crankerPubkey === crankerPubkey) return existing.authorization;
			// A signed authorization cannot be revoked: the next holder waits until the last one lapses.
			throw new ServiceError("INVALID_TRANSITION", "A payout authorization issued under an earlier lease is still valid", {
				authorizationExpiresAt: existing.authorization.expiresAt
			});
		}
		const doc: AuthorizationDoc = { id: record.id, issuedAt: now.toISOString(), authorization: buildPayoutAuthorization({ ...record, lease }, now, signer) };
		const stored = existing ? await authorizations.update(record.id, { issuedAt: existing.issuedAt }, doc) : await authorizations.insert(doc);
		if (stored) return doc.authorization;
		// A concurrent request of the same holder stored one first: answer with that one.
		const winner = await authorizations.get(record.id);
		if (winner && winner.authorization.crankerPubkey === crankerPubkey) return winner.authorization;
		throw new ServiceError("VERSION_CONFLICT", "The authorization changed concurrently; ask again");
	}

	return {
		name: "leases",
		dependencies: ["mempool", "crankers", "tin"],
		mixins: [
			storeMixin(config, "leases", async store => {
				authorizations = await store.collection<AuthorizationDoc>({ name: "payout_authorizations", fields: { issuedAt: "text" } });
			}),
			sweeperMixin("lease expiry", config.sweepIntervalMs, () => broker.call("mempool.releaseExpiredLeases"))
		],

		actions: {
			/** PATCH /intents/{id}/status */
			updateStatus: {
				params: updateStatusParams,
				async handler(ctx: Context<UpdateStatusRequest & { id: string }>) {
					const standing = await ctx.call<{ online: boolean; roles: string[] }, object>("crankers.standing", { crankerPubkey: ctx.params.crankerPubkey });
					const crankerAllowed = standing.online && standing.roles.includes("settlement");
					// SPEC §2.4: an intent that expires before SUBMITTED is REJECTED/EXPIRED, whatever the sweep's timing.
					await ctx.call("mempool.expireIfDue", { id: ctx.params.id }).catch(() => false);
					return ctx.call("mempool.updateStatus", { ...ctx.params, crankerAllowed });
				}
			},

			/** POST /internal/settlement-authorizations/settlement */
			authorizePayout: {
				params: payoutAuthorizationParams,
				async handler(ctx: Context<{ workId: string; crankerPubkey: string }>) {
					const record = await ctx.call<IntentRecord | null, object>("mempool.get", { id: ctx.params.workId });
					if (!record) throw new ServiceError("NOT_FOUND", `Intent ${ctx.params.workId} not found`);
					return issue(record, ctx.params.crankerPubkey, ctx);
				}
			}
		},

		created() {
			broker = this.broker;
		},

		async started() {
			let keypair;
			try {
				keypair = loadOrCreateAuthorityKeypair(config.nodeAuthorityKeypairPath, config.dataDir);
			} catch (err) {
				throw new ConfigError(`Node authority keypair: ${(err as Error).message}`);
			}
			const sign = createSigner(keypair.value);
			signer = { publicKey: keypair.value.publicKey, sign };
			if (keypair.generated) this.logger.info(`Generated the Node authority keypair into ${keypair.source} (public key ${keypair.value.publicKey}).`);
			else this.logger.info(`Node authority public key ${keypair.value.publicKey} (from ${keypair.source}).`);
		}
	};
}
