/**
 * A Cranker's signed request as it travels from the gateway to the owner that acts on it
 * (SPEC §6.1). The gateway checks the signature to refuse bad requests early; the owner checks it
 * again, with the route and the parameters it was called with, because the bus is not proof of
 * who is calling: a process that holds the bus credentials could otherwise name any Cranker.
 */
import { canonicalJson } from "./encoding";
import { ServiceError } from "./errors";
import { parseJsonBody } from "./json-body";
import { verifyRequestSignature, type SignatureCheck, type SignatureRefusalReason } from "./http-signature";

/** The routes on which a Cranker acts as itself, each with the action that serves it. */
export const CRANKER_ROUTES: Readonly<Record<string, string>> = Object.freeze({
	"PATCH /intents/:id/status": "mempool.updateStatus",
	"POST /internal/settlement-authorizations/settlement": "payouts.authorize",
	"POST /crankers/heartbeat": "crankers.heartbeat",
	"POST /tin-operations/:id/verified": "tin.verified",
	"POST /tin-operations/:id/fee-committed": "tin.feeCommitted",
	"POST /tin-operations/:id/submitted": "tin.submitted",
	"POST /tin-operations/:id/finalized": "tin.finalized",
	"POST /tin-operations/:id/failed": "tin.failed",
	"POST /tin-operations/:id/rejected": "tin.rejected"
});

const ROUTE_OF_ACTION: ReadonlyMap<string, string> = new Map(Object.entries(CRANKER_ROUTES).map(([route, action]) => [action, route]));

/** The route ("METHOD /path/:param") a Cranker signs to call `action`; undefined for other actions. */
export function crankerRouteOf(action: string): string | undefined {
	return ROUTE_OF_ACTION.get(action);
}

/** What the gateway passes on (`meta.crankerRequest`): the signed parts of the request, exactly as received. */
export interface CrankerRequest {
	method: string;
	targetUri: string;
	/** `signature`, `signature-input` and `content-digest`, each with every line it was sent with. */
	headers: Record<string, string[]>;
	/** The body bytes, base64. */
	body: string;
}

const SIGNED_HEADERS = ["signature", "signature-input", "content-digest"] as const;
/** Far above any request the gateway admits (its body limit, in base64), so the check stays cheap. */
const MAX_FIELD_LENGTH = 1 << 20;

/** The signed parts of a request, from the headers as Node gives them (`headersDistinct`). */
export function crankerRequestOf(method: string, targetUri: string, headers: Record<string, string[] | undefined>, body: Buffer): CrankerRequest {
	const signed: Record<string, string[]> = {};
	for (const name of SIGNED_HEADERS) if (headers[name]) signed[name] = headers[name];
	return { method, targetUri, headers: signed, body: body.toString("base64") };
}

/** The 401 of a Cranker route whose request carries no signature (SPEC §6.1). */
export function unsignedRefusal(reason: SignatureRefusalReason = "missing"): ServiceError {
	return new ServiceError("UNAUTHORIZED", "This route takes an HTTP message signature (RFC 9421) by the Cranker named in crankerPubkey (docs/signing.md §6)", { reason });
}

/**
 * Checks that `request` is signed (within the window) by the key `crankerPubkey` names, and
 * answers the signature's details; throws the refusal (401 without a signature, 403 otherwise).
 */
export async function verifyCrankerRequest(request: CrankerRequest, crankerPubkey: unknown, nowMs: number): Promise<Extract<SignatureCheck, { ok: true }>> {
	const check = await verifyRequestSignature({ method: request.method, targetUri: request.targetUri, headers: request.headers, body: Buffer.from(request.body, "base64") }, nowMs);
	if (!check.ok) throw check.status === 401 ? unsignedRefusal(check.reason) : new ServiceError("FORBIDDEN", `The request signature is refused: ${check.detail}`, { reason: check.reason });
	if (crankerPubkey !== check.keyid) throw new ServiceError("FORBIDDEN", "The request is signed by another key than crankerPubkey", { reason: "keyid-mismatch" });
	return check;
}

/**
 * `meta.crankerRequest` as it came over the bus, or null when it is not one: whoever sent it may
 * have sent anything.
 */
export function asCrankerRequest(value: unknown): CrankerRequest | null {
	if (typeof value !== "object" || value === null) return null;
	const { method, targetUri, headers, body } = value as Record<string, unknown>;
	if (!isShortString(method) || !isShortString(targetUri) || !isShortString(body) || typeof headers !== "object" || headers === null) return null;
	const lines: Record<string, string[]> = {};
	for (const name of SIGNED_HEADERS) {
		const field = (headers as Record<string, unknown>)[name];
		if (field === undefined) continue;
		if (!Array.isArray(field) || !field.every(isShortString)) return null;
		lines[name] = field;
	}
	return { method, targetUri, headers: lines, body };
}

function isShortString(value: unknown): value is string {
	return typeof value === "string" && value.length <= MAX_FIELD_LENGTH;
}

/**
 * Why the parameters an owner was called with are not the request the Cranker signed, or null
 * when they are. They must be the signed route's (its method and path, behind `publicBaseUrl`
 * when one is set), and exactly the signed body's members together with the path's parameters,
 * as the gateway merges them (read as the gateway reads a body).
 */
export function unsignedParamsProblem(request: CrankerRequest, route: string, params: object, publicBaseUrl: string | null): string | null {
	const [method, template] = route.split(" ") as [string, string];
	if (request.method !== method) return `the request was signed for ${request.method}, not ${method}`;
	const path = signedPath(request.targetUri, publicBaseUrl);
	if (path === null) return "the signed URI is not this Node's";
	const pathParams = matchPath(template, path);
	if (pathParams === null) return `the request was signed for ${path}, not ${template}`;
	let body: unknown;
	try {
		// Read as the gateway reads a body: null members dropped, the same refusals.
		body = parseJsonBody(Buffer.from(request.body, "base64"));
	} catch {
		return "the signed body is not a JSON object the gateway takes";
	}
	return canonicalJson({ ...(body as object), ...pathParams }) === canonicalJson(params) ? null : "the parameters are not the signed ones";
}

/** The raw path of a target URI (no query, no fragment), behind `publicBaseUrl` when one is set. */
function signedPath(targetUri: string, publicBaseUrl: string | null): string | null {
	const rest = publicBaseUrl === null ? /^https?:\/\/[^/?#]*(\/.*)$/s.exec(targetUri)?.[1] : targetUri.startsWith(`${publicBaseUrl}/`) ? targetUri.slice(publicBaseUrl.length) : undefined;
	return rest !== undefined && !/[?#]/.test(rest) ? rest : null;
}

/** The path's parameters (decoded) when it matches the template segment for segment; null otherwise. */
function matchPath(template: string, path: string): Record<string, string> | null {
	const expected = template.split("/");
	const actual = path.split("/");
	if (expected.length !== actual.length) return null;
	const params: Record<string, string> = {};
	for (let i = 0; i < expected.length; i++) {
		if (!expected[i]!.startsWith(":")) {
			if (expected[i] !== actual[i]) return null;
			continue;
		}
		try {
			params[expected[i]!.slice(1)] = decodeURIComponent(actual[i]!);
		} catch {
			return null;
		}
	}
	return params;
}
