/**
 * payouts: owns the one-time payout authorizations (SPEC §2.5), signed with the Node's authority
 * key. It decides no lease rule: the mempool, which owns intents and their leases, says whether a
 * Cranker holds a live lease; this service checks the route and issues or repeats the authorization.
 */
import type { Context, Service, ServiceSchema } from "moleculer";
import { ConfigError, type Config } from "../lib/config";
import { createSigner } from "../lib/ed25519";
import { ServiceError } from "../lib/errors";
import { maySettle, type LeasedIntentRecord } from "../lib/intents";
import { buildPayoutAuthorization, type PayoutAuthorization } from "../lib/payout";
import { isSignedRoute, type ActiveRoute } from "../lib/registry";
import { payoutAuthorizationParams } from "../lib/schemas";
import { loadOrCreateAuthorityKeypair } from "../lib/secrets";
import type { Collection } from "../lib/store";
import { isSenderSigned } from "../lib/verification";
import { crankerSignedMixin } from "../mixins/cranker-signed.mixin";
import { storeMixin } from "../mixins/store.mixin";
import { isServed, workersOnly } from "./internal";
import { payoutMetrics, type PayoutResult } from "./metrics";

interface AuthorizationDoc {
	/** The intent id: one authorization per intent, replaced only once it has expired. */
	id: string;
	issuedAt: string;
	/**
	 * Null: the mark of an intent whose signed route was replaced before any authorization, set before
	 * the mempool rejects it. Both take the id by insert, so an authorization and a rejection for a
	 * replaced route exclude each other, however their requests interleave.
	 */
	authorization: PayoutAuthorization | null;
}

interface PayoutsVars {
	authorizations: Collection<AuthorizationDoc>;
	/** The Node authority key, loaded at start: a service variable, never a setting (settings are published to every node). */
	signer: { publicKey: string; sign: (message: string) => string };
	metrics: ReturnType<typeof payoutMetrics>;
}

interface PayoutsMethods {
	issue(record: LeasedIntentRecord, ctx: Context): Promise<{ authorization: PayoutAuthorization; result: PayoutResult }>;
	rejectReplacedRoute(record: LeasedIntentRecord, route: ActiveRoute, ctx: Context): Promise<boolean>;
}

type PayoutsThis = Service & PayoutsVars & PayoutsMethods;

/** The refusal of an intent whose signed route is no longer live; `rejected`: this request ended it. */
function routeReplaced(rejected: boolean): ServiceError {
	return new ServiceError("EVIDENCE_INCONSISTENT", "The recipient route is no longer active", { reason: "ROUTE_MISMATCH", ...(rejected ? { state: "REJECTED" } : {}) });
}

export function payoutsService(config: Config): ServiceSchema<Record<string, never>, PayoutsMethods, PayoutsVars, PayoutsThis> {
	return {
		name: "payouts",
		dependencies: ["mempool", "tin", "crankers"],
		mixins: [
			crankerSignedMixin(config.publicBaseUrl, ["authorize"]),
			storeMixin<PayoutsThis>(config, "payouts", async function (this: PayoutsThis, store) {
				this.authorizations = await store.collection<AuthorizationDoc>({ name: "payout_authorizations", fields: { issuedAt: "text" } });
			})
		],

		actions: {
			/** POST /internal/settlement-authorizations/settlement (a signed Cranker request) */
			authorize: workersOnly({
				params: payoutAuthorizationParams,
				async handler(this: PayoutsThis, ctx: Context<{ workId: string; crankerPubkey: string }>) {
					const endTimer = this.metrics.duration.startTimer();
					try {
						const { workId, crankerPubkey } = ctx.params;
						const [record, standing] = await Promise.all([
							ctx.call<LeasedIntentRecord & { settlementProgramId?: string }, object>("mempool.leaseForPayout", { id: workId, crankerPubkey }),
							ctx.call<{ online: boolean; roles: string[] }, object>("crankers.standing", { crankerPubkey })
						]);
						// As for every move of a lease (mempool.updateStatus): a holder since gone offline, or
						// struck from CRANKER_OPERATORS, signs for no more payments, though its lease runs on.
						if (!maySettle(standing))
							throw new ServiceError("CRANKER_NOT_ALLOWED", "The Cranker is not online with the settlement role", { crankerPubkey });
						const { authorization, result } = await this.issue(record, ctx);
						this.metrics.results.inc({ result });
						// The mempool's, which checks the settlement (this process's own from a mempool of an earlier version).
						return { ...authorization, settlementProgramId: record.settlementProgramId ?? config.settlementProgramId };
					} catch (err) {
						const code = Number((err as { code?: unknown }).code);
						this.metrics.results.inc({ result: code >= 400 && code < 500 ? "refused" : "failed" });
						throw err;
					} finally {
						endTimer();
					}
				}
			})
		},

		methods: {
			/**
			 * The authorization for a leased record: the valid one again to its holder, or a fresh one. A
			 * new one for the same nullifier is issued only once the earlier has lapsed (a signed
			 * authorization cannot be revoked) and, since the mempool lets a submission go only when the
			 * chain proves it can no longer land, no earlier submission can land then.
			 */
			async issue(this: PayoutsThis, record, ctx) {
				const now = new Date();
				const route = await ctx.call<ActiveRoute | null, object>("tin.resolve", { tin: record.request.recipientTin });
				const existing = await this.authorizations.get(record.id);
				const issued = existing?.authorization ?? null;
				if (!isSignedRoute(route, record.request)) {
					// Only a newer route replaced the signed one; an older one is a registry read from behind.
					const rejected = route !== null && route.routeVersion > record.request.recipientRouteVersion && !issued && (await this.rejectReplacedRoute(record, route, ctx));
					throw routeReplaced(rejected);
				}
				// Marked replaced by a request that read a newer route: this one read the registry from behind.
				if (existing && !issued) throw routeReplaced(false);

				if (issued && Date.parse(issued.expiresAt) > now.getTime()) {
					if (issued.crankerPubkey === record.lease.crankerPubkey) return { authorization: issued, result: "repeated" };
					throw new ServiceError("INVALID_TRANSITION", "A payout authorization issued under an earlier lease is still valid", {
						authorizationExpiresAt: issued.expiresAt
					});
				}
				// The authority key signs only for what a sender signed, whatever reached the mempool: a
				// process that holds the bus credentials can mark any record verified (docs/security.md).
				if (!isSenderSigned({ ...record.request, transactionCommitment: record.transactionCommitment }))
					throw new ServiceError("EVIDENCE_INCONSISTENT", "The intent is not a payment its sender signed", { reason: "INVALID_SIGNATURE" });
				const authorization = buildPayoutAuthorization(record, now, this.signer);
				const doc: AuthorizationDoc = { id: record.id, issuedAt: now.toISOString(), authorization };
				const stored = existing ? await this.authorizations.update(record.id, { issuedAt: existing.issuedAt }, doc) : await this.authorizations.insert(doc);
				if (stored) return { authorization, result: "issued" };
				// A concurrent request of the same holder stored one first: answer with that one.
				const winner = await this.authorizations.get(record.id);
				if (winner && !winner.authorization) throw routeReplaced(false);
				if (winner?.authorization?.crankerPubkey === record.lease.crankerPubkey) return { authorization: winner.authorization, result: "repeated" };
				throw new ServiceError("VERSION_CONFLICT", "The authorization changed concurrently; ask again");
			},

			/**
			 * A newer route never gives way to an older one, so an intent signed for a replaced route can
			 * never be paid: the mempool ends it. Only while no authorization was ever issued for it,
			 * since a settlement sent under one might have landed. Whether it did.
			 */
			async rejectReplacedRoute(this: PayoutsThis, record, route, ctx) {
				// A mempool of an earlier version (a rolling update) has no such move: refused as before.
				if (!isServed(this.broker, "mempool.rejectReplacedRoute")) return false;
				// The mark first: an authorization that a request of the signed route is issuing right now
				// then either was stored before it (no rejection) or will not be (no authorization).
				const marked = (await this.authorizations.insert({ id: record.id, issuedAt: new Date().toISOString(), authorization: null })) || (await this.authorizations.get(record.id))?.authorization === null;
				if (!marked) return false;
				return ctx.call<boolean, object>("mempool.rejectReplacedRoute", { id: record.id, stateVersion: record.stateVersion, liveRouteVersion: route.routeVersion });
			}
		} satisfies PayoutsMethods & ThisType<PayoutsThis>,

		created(this: PayoutsThis) {
			this.metrics = payoutMetrics(this.broker);
		},

		async started(this: PayoutsThis) {
			let keypair;
			try {
				keypair = loadOrCreateAuthorityKeypair(config.nodeAuthorityKeypairPath, config.dataDir);
			} catch (err) {
				throw new ConfigError(`Node authority keypair: ${(err as Error).message}`);
			}
			this.signer = { publicKey: keypair.value.publicKey, sign: createSigner(keypair.value) };
			if (keypair.generated) this.logger.info(`Generated the Node authority keypair into ${keypair.source} (public key ${keypair.value.publicKey}).`);
			else this.logger.info(`Node authority public key ${keypair.value.publicKey} (from ${keypair.source}).`);
		}
	};
}
