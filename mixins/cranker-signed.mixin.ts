/**
 * The owner's own check of a Cranker action (SPEC §6.1): before the action runs, the request the
 * gateway passed on (`meta.crankerRequest`) must be signed by the Cranker that `crankerPubkey`
 * names, for this action's route, with exactly these parameters, and not used before. The
 * gateway checked it too, but anything that can publish on the bus can call an owner: the
 * signature, not the caller, says which Cranker acts.
 */
import type { Context, Service, ServiceSchema } from "moleculer";
import { asCrankerRequest, crankerRouteOf, unsignedParamsProblem, verifyCrankerRequest } from "../lib/cranker-call";
import { ServiceError } from "../lib/errors";

export interface CrankerSignedMeta {
	crankerRequest?: unknown;
}

export function crankerSignedMixin(publicBaseUrl: string | null, actions: readonly string[]): Partial<ServiceSchema> {
	async function checkSignedCall(this: Service, ctx: Context<{ crankerPubkey?: unknown }, CrankerSignedMeta>): Promise<void> {
		const action = ctx.action?.name ?? "";
		const route = crankerRouteOf(action);
		if (!route) throw new Error(`${action} has no Cranker route in lib/cranker-call.ts`);
		const request = asCrankerRequest(ctx.meta.crankerRequest);
		if (!request) throw new ServiceError("UNAUTHORIZED", "This action acts as a Cranker: it takes the Cranker's signed request", { reason: "missing" });
		const check = await verifyCrankerRequest(request, ctx.params.crankerPubkey, Date.now());
		const problem = unsignedParamsProblem(request, route, ctx.params, publicBaseUrl);
		if (problem) throw new ServiceError("FORBIDDEN", `The request signature does not cover this call: ${problem}`, { reason: "not-signed" });
		await ctx.call("crankers.admitSignature", { keyid: check.keyid, signature: check.signature, created: check.created });
	}
	return { hooks: { before: Object.fromEntries(actions.map(action => [action, checkSignedCall])) } };
}
