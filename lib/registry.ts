/** Registry routes (SPEC §5): a TIN's active route, and the genesis seed file that imports them. */
import { Type, type Static } from "@sinclair/typebox";
import { HEX64_PATTERN, isBase58OfLength } from "./encoding";
import { isValidTin } from "./tin";
import { Hex64, IsoTime, Tin, Version, named } from "./wire-formats";

export interface ActiveRoute {
	tin: string;
	routeCommitment: string;
	routeVersion: number;
	policyCommitment: string;
}

/** Whether `route`, a TIN's active route (null: none), is the one a payment was signed for. */
export function isSignedRoute(route: ActiveRoute | null, request: { recipientRouteCommitment: string; recipientRouteVersion: number }): boolean {
	return route !== null && route.routeCommitment === request.recipientRouteCommitment && route.routeVersion === request.recipientRouteVersion;
}

export interface RouteRecord extends ActiveRoute {
	/** The registry keys routes by TIN. */
	id: string;
	ownerWallet: string | null;
	active: boolean;
	updatedAt: string;
	/** The TIN operation whose finalization wrote this version (none for a genesis route). */
	lastOperationId?: string;
}

export interface GenesisRoute extends ActiveRoute {
	ownerWallet?: string;
}

/** Public view of GET /registry/tins/{tin}. */
export const RegistryRouteSchema = Type.Object(
	{ tin: Tin, routeCommitment: Hex64, routeVersion: Version, policyCommitment: Hex64, active: Type.Boolean(), updatedAt: IsoTime },
	named("RegistryRoute", "A TIN's active route")
);
export type RegistryRoute = Static<typeof RegistryRouteSchema>;

export function toRouteView(route: RouteRecord): RegistryRoute {
	return {
		tin: route.tin,
		routeCommitment: route.routeCommitment,
		routeVersion: route.routeVersion,
		policyCommitment: route.policyCommitment,
		active: route.active,
		updatedAt: route.updatedAt
	};
}

/** Parses and checks a genesis file's content; throws with every problem found, entry by entry. */
export function parseRegistrySeed(content: string): GenesisRoute[] {
	let entries: unknown;
	try {
		entries = JSON.parse(content);
	} catch (err) {
		throw new Error(`not valid JSON (${(err as Error).message})`);
	}
	if (!Array.isArray(entries)) throw new Error("must be a JSON array of routes");
	const problems: string[] = [];
	const seen = new Set<string>();
	const hex64 = new RegExp(HEX64_PATTERN);
	entries.forEach((entry: unknown, index) => {
		const at = `entry ${index}`;
		if (!entry || typeof entry !== "object" || Array.isArray(entry)) return problems.push(`${at}: not an object`);
		const route = entry as Record<string, unknown>;
		const unknown = Object.keys(route).filter(k => !["tin", "routeCommitment", "routeVersion", "policyCommitment", "ownerWallet"].includes(k));
		if (unknown.length) problems.push(`${at}: unknown field(s) ${unknown.join(", ")}`);
		if (typeof route.tin !== "string" || !isValidTin(route.tin)) problems.push(`${at}: tin must be a 10-digit Luhn-valid TIN`);
		else if (seen.has(route.tin)) problems.push(`${at}: tin ${route.tin} appears twice`);
		else seen.add(route.tin);
		if (typeof route.routeCommitment !== "string" || !hex64.test(route.routeCommitment)) problems.push(`${at}: routeCommitment must be 64 lowercase hex`);
		if (typeof route.policyCommitment !== "string" || !hex64.test(route.policyCommitment)) problems.push(`${at}: policyCommitment must be 64 lowercase hex`);
		if (!Number.isSafeInteger(route.routeVersion) || (route.routeVersion as number) < 1) problems.push(`${at}: routeVersion must be an integer ≥ 1`);
		if (route.ownerWallet !== undefined && (typeof route.ownerWallet !== "string" || !isBase58OfLength(route.ownerWallet, 32)))
			problems.push(`${at}: ownerWallet must be a base58 32-byte address`);
	});
	if (problems.length) throw new Error(problems.join("; "));
	return entries as GenesisRoute[];
}
