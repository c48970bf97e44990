/**
 * verifier: verification of signed payment authorizations (SPEC §1). Stateless and horizontally
 * scaled; callers reach it with the Shard strategy keyed by the sender's wallet, so a sender's
 * intents stay on one verifier (and its key caches) while the pool grows. The ed25519 equation is
 * solved on VERIFY_THREADS worker threads (lib/verify-pool.ts), off the event loop that takes
 * requests; the strict checks and the rest of SPEC §1 run here.
 */
import type { Context, Service, ServiceSchema } from "moleculer";
import { ACTION_CALL_OPTIONS } from "../lib/bus-groups";
import type { Config } from "../lib/config";
import type { CreateIntentRequest } from "../lib/intents";
import type { ActiveRoute } from "../lib/registry";
import type { SlotObserver } from "../lib/slot-observer";
import { sha256HexNative } from "../lib/digest";
import { verifySignature } from "../lib/ed25519";
import { FailureStreak } from "../lib/failure-streak";
import { INTAKE_BATCH_MAX } from "../lib/intake";
import { verifyPaymentAuthorizationWith, type VerificationContext, type VerificationResult } from "../lib/verification";
import { VerifyPool, type VerifyFallback } from "../lib/verify-pool";
import { verifierMetrics } from "./metrics";
import { internal } from "./internal";
import { processChain } from "./process-chain";

/** Routes change rarely; the TTL bounds how long a lost change event can leave a stale entry. */
const ROUTE_CACHE_TTL_MS = 5000;
/**
 * Routes kept at most, then the lapsed ones forgotten (all, if none has lapsed): every body that
 * passes the schema names a TIN of its sender's choosing and is looked up before its signature is
 * checked, so without a bound unsigned bodies naming new TINs would grow the cache for good.
 */
const ROUTE_CACHE_LIMIT = 10_000;

/** A verdict, who gave it, and the request's transactionCommitment (computed here once, stored by the mempool). */
export type VerifierAnswer = VerificationResult & { verifiedBy: string; transactionCommitment: string };

interface VerifierSettings {
	verifyThreads: number;
}

interface VerifierVars {
	routeCache: Map<string, { route: ActiveRoute; until: number }>;
	/**
	 * registry.routeChanged events heard, numbered: per TIN the number of its last, and that of the
	 * map's last clear. A read of a route that a change of its TIN overtook is read again.
	 */
	routeChanges: { last: number; byTin: Map<string, number>; clearedAt: number };
	slots: SlotObserver;
	/** Null with VERIFY_THREADS=0: the equation is solved on the event loop. */
	pool: VerifyPool | null;
	metrics: ReturnType<typeof verifierMetrics>;
	/** Requests of a batch that could not be decided: told once a minute, not per batch. */
	undecided: FailureStreak;
}

/** What the log says of a fallback (the metric counts every signature). */
const FALLBACK_LINES: Record<VerifyFallback, string> = {
	worker_lost: "A verify worker thread was lost; the signatures it had were verified on the event loop, and a new thread took its place",
	unmatched_answer: "A verify worker thread answered for other jobs than it was sent; those signatures were verified on the event loop"
};

interface VerifierMethods {
	answer(ctx: Context, request: CreateIntentRequest): Promise<VerifierAnswer>;
	routeOf(ctx: Context, tin: string, signedVersion: number): Promise<ActiveRoute | null>;
	decide(request: CreateIntentRequest, context: () => Promise<VerificationContext>): Promise<VerificationResult & { transactionCommitment: string }>;
}

type VerifierThis = Service<VerifierSettings> & VerifierVars & VerifierMethods;

export function verifierService(config: Config): ServiceSchema<VerifierSettings, VerifierMethods, VerifierVars, VerifierThis> {
	return {
		name: "verifier",
		settings: { verifyThreads: config.verifyThreads },

		actions: {
			verify: internal({
				...ACTION_CALL_OPTIONS["verifier.verify"],
				// Shape-checked at intake by the receiver (createIntentParams), the only caller.
				params: { request: "object" },
				handler(this: VerifierThis, ctx: Context<{ request: CreateIntentRequest }>): Promise<VerifierAnswer> {
					return this.answer(ctx, ctx.params.request);
				}
			}),

			/**
			 * The intake's batches: each request answered as `verify` answers it, in order, or null
			 * when it could not be decided now (its TIN's route unreadable, say): that one is then
			 * recorded RECEIVED for the sweep, as when no verifier answers, and its batch is not
			 * failed with it. A batch goes where the intents of its first sender go, and the receiver
			 * makes its batches of the senders one verifier has (receiver.verifyAll), so each sender
			 * still meets one verifier.
			 */
			verifyMany: internal({
				...ACTION_CALL_OPTIONS["verifier.verifyMany"],
				params: { requests: { type: "array", min: 1, max: INTAKE_BATCH_MAX, items: "object" } },
				async handler(this: VerifierThis, ctx: Context<{ requests: CreateIntentRequest[] }>): Promise<(VerifierAnswer | null)[]> {
					const settled = await Promise.allSettled(ctx.params.requests.map(request => this.answer(ctx, request)));
					const failure = settled.find(result => result.status === "rejected");
					if (failure) {
						const line = this.undecided.failed(`Requests could not be verified now, and are recorded RECEIVED for the sweep: ${(failure.reason as Error).message}`);
						if (line) this.logger.warn(line);
					} else {
						const line = this.undecided.succeeded();
						if (line) this.logger.info(`Verifying every request of a batch ${line}`);
					}
					return settled.map(result => (result.status === "fulfilled" ? result.value : null));
				}
			})
		},

		events: {
			"registry.routeChanged": {
				params: { tin: "string" },
				handler(this: VerifierThis, ctx: Context<{ tin: string }>) {
					const { tin } = ctx.params;
					const changes = this.routeChanges;
					changes.last++;
					// Bounded as the cache is; a read in flight across the clear reads again, as for a change.
					if (changes.byTin.size >= ROUTE_CACHE_LIMIT && !changes.byTin.has(tin)) {
						changes.byTin.clear();
						changes.clearedAt = changes.last;
					}
					changes.byTin.set(tin, changes.last);
					this.routeCache.delete(tin);
				}
			}
		},

		methods: {
			async answer(this: VerifierThis, ctx, request) {
				// The route once the signature holds: a forgery reads none (and fills no cache), even while the registry cannot be read.
				const answer = await this.decide(request, async () => {
					const route = await this.routeOf(ctx, request.recipientTin, request.recipientRouteVersion);
					return { nowMs: Date.now(), latestSlot: this.slots.latest(), route };
				});
				this.metrics.checks.inc({ result: answer.ok ? "ok" : "refused" });
				return { ...answer, verifiedBy: `verifier@${ctx.broker.nodeID}` };
			},

			/**
			 * The TIN's active route, cached a few seconds; a TIN without one is not cached. A payment
			 * signed for a version the cache has not seen reads it again: the route may have gone live an
			 * instant ago, before its registry.routeChanged came, and its refusal would be for good.
			 */
			async routeOf(this: VerifierThis, ctx, tin, signedVersion) {
				const cached = this.routeCache.get(tin);
				if (cached && cached.until > Date.now() && cached.route.routeVersion >= signedVersion) return cached.route;
				const changes = this.routeChanges;
				const changedSince = (seen: number) => Math.max(changes.byTin.get(tin) ?? 0, changes.clearedAt) > seen;
				const read = () => ctx.call<ActiveRoute | null, object>("tin.resolve", { tin });
				let seen = changes.last;
				let route = await read();
				if (changedSince(seen)) {
					// A change of this TIN announced while the read was out may be newer than what it read:
					// read again, else the replaced route would be cached (and payments signed for it
					// verified) for the TTL; and another change during that read leaves it uncached.
					seen = changes.last;
					route = await read();
					if (changedSince(seen)) return route;
				}
				if (!route) return null;
				const now = Date.now();
				if (this.routeCache.size >= ROUTE_CACHE_LIMIT && !this.routeCache.has(tin)) {
					// With a 5 s life, the routes in use are few: the lapsed go first.
					for (const [key, entry] of this.routeCache) if (entry.until <= now) this.routeCache.delete(key);
					if (this.routeCache.size >= ROUTE_CACHE_LIMIT) this.routeCache.clear();
				}
				this.routeCache.set(tin, { route, until: now + ROUTE_CACHE_TTL_MS });
				return route;
			},

			decide(this: VerifierThis, request, context) {
				const { pool } = this;
				return verifyPaymentAuthorizationWith(pool ? (...args) => pool.verify(...args) : verifySignature, request, context, sha256HexNative);
			}
		} satisfies VerifierMethods & ThisType<VerifierThis>,

		created(this: VerifierThis) {
			this.routeCache = new Map();
			this.routeChanges = { last: 0, byTin: new Map(), clearedAt: 0 };
			this.undecided = new FailureStreak();
			this.metrics = verifierMetrics(this.broker);
			this.slots = processChain(this.broker, config).slots;
			this.pool = null;
		},

		async started(this: VerifierThis) {
			if (this.settings.verifyThreads > 0) {
				// Each a separate incident (a new thread takes over), told once a minute at most per reason, with how many since.
				const told = { worker_lost: { atMs: -Infinity, since: 0 }, unmatched_answer: { atMs: -Infinity, since: 0 } };
				this.pool = new VerifyPool(this.settings.verifyThreads, (reason, jobs) => {
					this.metrics.fallbacks.inc({ reason }, jobs);
					const last = told[reason];
					last.since++;
					if (performance.now() - last.atMs < 60_000) return;
					this.logger.warn(last.since > 1 ? `${FALLBACK_LINES[reason]} (${last.since} times since the last such line)` : FALLBACK_LINES[reason]);
					last.atMs = performance.now();
					last.since = 0;
				});
			}
			await processChain(this.broker, config).start(this);
		},

		async stopped(this: VerifierThis) {
			processChain(this.broker, config).stop(this);
			await this.pool?.close();
			this.pool = null;
		}
	};
}
