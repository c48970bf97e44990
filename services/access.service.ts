/**
 * access: owns threshold-access nonces (SPEC §9). A wallet proves control with a signed, fresh
 * message; each of its nonces can be consumed once, even by concurrent duplicate requests.
 */
import type { Context, Service, ServiceSchema } from "moleculer";
import type { ThresholdAccessGrant } from "../lib/answers";
import { buildThresholdAccessMessage } from "../lib/canonical";
import type { Config } from "../lib/config";
import { verifySignature } from "../lib/ed25519";
import { ServiceError } from "../lib/errors";
import { consumeNonceParams } from "../lib/schemas";
import type { Collection } from "../lib/store";
import { callKey, isOwnWrite } from "./replay";
import { storeMixin } from "../mixins/store.mixin";

/** SPEC §9: issuedAt within ±5 minutes of the Node's clock, bounds included. */
const ACCESS_WINDOW_MS = 5 * 60_000;

interface ConsumedNonce {
	/** `<wallet>:<nonce>`: the unique key makes consumption one-time. */
	id: string;
	wallet: string;
	nonce: string;
	consumedAt: string;
	/** The call that consumed it (services/replay.ts). */
	callKey?: string | null;
}

interface AccessVars {
	consumed: Collection<ConsumedNonce>;
}

type AccessThis = Service & AccessVars;

export function accessService(config: Config): ServiceSchema<Record<string, never>, Record<string, never>, AccessVars, AccessThis> {
	return {
		name: "access",
		mixins: [
			storeMixin<AccessThis>(config, "access", async function (this: AccessThis, store) {
				this.consumed = await store.collection<ConsumedNonce>({ name: "threshold_access_nonces", fields: {} });
			})
		],

		actions: {
			/** POST /threshold-access/nonces/consume */
			consume: {
				params: consumeNonceParams,
				async handler(this: AccessThis, ctx: Context<{ wallet: string; nonce: string; issuedAt: string; signature: string }>): Promise<ThresholdAccessGrant> {
					const { wallet, nonce, issuedAt, signature } = ctx.params;
					const now = new Date();
					if (Math.abs(now.getTime() - Date.parse(issuedAt)) > ACCESS_WINDOW_MS) throw new ServiceError("EXPIRED", "issuedAt is more than 5 minutes away from the Node's clock");
					if (!verifySignature(wallet, buildThresholdAccessMessage({ wallet, nonce, issuedAt }), signature))
						throw new ServiceError("INVALID_SIGNATURE", "The signature is not the wallet's signature of the access message");
					const record: ConsumedNonce = { id: `${wallet}:${nonce}`, wallet, nonce, consumedAt: now.toISOString(), callKey: callKey(ctx) };
					if (await this.consumed.insert(record)) return { wallet, nonce, consumedAt: record.consumedAt };
					// A retry of the call that consumed it gets that call's answer; anyone else is refused.
					const existing = await this.consumed.get(record.id);
					if (existing && isOwnWrite(ctx, existing.callKey)) return { wallet, nonce, consumedAt: existing.consumedAt };
					throw new ServiceError("NONCE_REUSED", "This wallet already consumed the nonce", { wallet, nonce });
				}
			}
		}
	};
}
