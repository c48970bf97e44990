/**
 * CORS for the public routes only (CORS_ORIGINS). Worker routes never answer CORS: a browser never
 * holds a worker key. A preflight is answered here and never reaches an action.
 */

export interface CorsPolicy {
	/** Origins allowed exactly (scheme, host and port), e.g. https://app.example.com. */
	origins: ReadonlySet<string>;
	/** The public routes, as "METHOD /path/:param". */
	routes: readonly string[];
}

/** What the gateway does with a request: a preflight's answer, or the headers an actual request gets. */
export type CorsDecision =
	| { kind: "none" }
	| { kind: "preflight"; status: 204 | 403; headers: Record<string, string> }
	| { kind: "actual"; headers: Record<string, string> };

/** Headers a browser app may send on the public routes (last-event-id: resuming an event stream), and read back. */
const ALLOWED_HEADERS = "content-type, content-encoding, x-request-id, last-event-id";
// The rate-limit names are moleculer-web's own (X-Rate-Limit-Limit, -Remaining, -Reset).
const EXPOSED_HEADERS = "x-request-id, retry-after, location, x-rate-limit-limit, x-rate-limit-remaining, x-rate-limit-reset";

function matcher(route: string): { method: string; path: RegExp } {
	const [method, path] = route.split(" ");
	const pattern = path
		.split("/")
		.map(segment => (segment.startsWith(":") ? "[^/]+" : segment.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")))
		.join("/");
	return { method, path: new RegExp(`^${pattern}/?$`) };
}

export function corsPolicy(origins: readonly string[], routes: readonly string[]): CorsPolicy & { match(method: string, path: string): boolean } {
	const matchers = routes.map(matcher);
	return {
		origins: new Set(origins),
		routes,
		match: (method, path) => matchers.some(m => m.method === method && m.path.test(path))
	};
}

/**
 * The decision for one request: `path` without its query. Every OPTIONS request is answered here:
 * 204 with the CORS headers for a preflight from an allowed origin about a public route, else 403
 * without them, which a browser reports as a CORS refusal.
 */
export function decideCors(policy: ReturnType<typeof corsPolicy>, method: string, path: string, origin: string | undefined, requestedMethod: string | undefined): CorsDecision {
	const allowedOrigin = origin !== undefined && policy.origins.has(origin);
	// Every OPTIONS request ends here: moleculer-web would otherwise route one that names a method
	// in access-control-request-method to that method's action, and run it.
	if (method === "OPTIONS") {
		if (!allowedOrigin || requestedMethod === undefined || !policy.match(requestedMethod.toUpperCase(), path)) return { kind: "preflight", status: 403, headers: { vary: "Origin" } };
		return {
			kind: "preflight",
			status: 204,
			headers: {
				"access-control-allow-origin": origin,
				"access-control-allow-methods": requestedMethod.toUpperCase(),
				"access-control-allow-headers": ALLOWED_HEADERS,
				"access-control-max-age": "600",
				vary: "Origin"
			}
		};
	}
	if (!allowedOrigin || !policy.match(method, path)) return { kind: "none" };
	return { kind: "actual", headers: { "access-control-allow-origin": origin, "access-control-expose-headers": EXPOSED_HEADERS, vary: "Origin" } };
}
