/**
 * crankers: owns Cranker admission (SPEC §6, §6.1): signed heartbeats, liveness, roles and
 * liquidity (as far as the chain bears it out), and the request signatures already seen (replay
 * protection). A Cranker is online while its last accepted heartbeat is younger than
 * CRANKER_TTL_MS; records silent for CRANKER_RETENTION_MS are pruned.
 */
import { address as toAddress } from "@solana/kit";
import type { Context, Service, ServiceSchema } from "moleculer";
import type { CrankerHeartbeatRecord } from "../lib/answers";
import { buildHeartbeatMessage } from "../lib/canonical";
import type { NodeChain } from "../lib/chain";
import type { Config } from "../lib/config";
import { CrankerTotals } from "../lib/cranker-totals";
import { verifySignature } from "../lib/ed25519";
import { ServiceError } from "../lib/errors";
import { BUS_SIGNATURE_TTL_MS } from "../lib/bus-signatures";
import { MAX_CLOCK_SKEW_S } from "../lib/http-signature";
import { CRANKER_ROLES, address, heartbeatParams, type CrankerRole } from "../lib/schemas";
import { listInPages, type Collection } from "../lib/store";
import { sweepMetrics } from "./metrics";
import { callKey, isOwnWrite } from "./replay";
import { storeMixin } from "../mixins/store.mixin";
import { crankerSignedMixin } from "../mixins/cranker-signed.mixin";
import { sweeperMixin } from "../mixins/sweeper.mixin";
import { internal, keyHoldersOnly, workersOnly } from "./internal";
import { processChain } from "./process-chain";

const MAX_HEARTBEAT_SKEW_MS = 60_000;
/** Heartbeats read per page when a replica folds in what was stored since its last look. */
const CATCH_UP_PAGE = 500;
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
	/**
	 * The Cranker's associated token accounts as the Node last read them (SOLANA_RPC_URL): what a
	 * heartbeat the Node does not read may count, while the reading is younger than CRANKER_TTL_MS.
	 */
	held?: LiquidityReading | null;
	version: string | null;
	lastSentAt: string;
	lastSeenAt: string;
	/** The call that stored this heartbeat (services/replay.ts). */
	callKey?: string | null;
}

/** A settlement Cranker's balance of each mint it reported, as read on chain at `at`. */
interface LiquidityReading {
	at: string;
	balances: HeartbeatRequest["liquidity"];
}

/** A request signature seen within its validity window, keyed by the signature itself. */
interface SeenSignature {
	id: string;
	keyid: string;
	/** The end of the window in which some owner might still accept the signature: then it can go. */
	expiresAt: string;
}

interface CrankersSettings {
	crankerTtlMs: number;
	crankerRetentionMs: number;
	/** Replicas may share the store (a transporter): each look reads every heartbeat still counted (catchUp). */
	replicated: boolean;
}

interface CrankersVars {
	crankers: Collection<CrankerDoc>;
	seenSignatures: Collection<SeenSignature>;
	sweeps: ReturnType<typeof sweepMetrics>;
	/** CRANKER_OPERATORS: the Crankers admitted; empty admits any. */
	operators: Set<string>;
	/**
	 * The figures of the Crankers online, kept running so the public routes answer without a scan.
	 * Every replica folds in the heartbeats stored since its last look, its own and the other
	 * replicas' alike (catchUp, each sweep), so replicas agree within SWEEP_INTERVAL_MS.
	 */
	totals: CrankerTotals;
	/** The store time up to which this replica has folded heartbeats in. */
	caughtUpTo: string;
	/** Null without SOLANA_RPC_URL: a settlement Cranker's liquidity is then its word. */
	chain: NodeChain | null;
	/** The liquidity reads this process may still make (a token bucket: LIQUIDITY_READS_PER_SECOND, as many at once). */
	liquidityReads: { tokens: number; at: number };
}

interface CrankersMethods {
	isOnline(doc: CrankerDoc, nowMs: number): boolean;
	isOperator(pubkey: string): boolean;
	onlineCutoff(nowMs: number): string;
	toView(doc: CrankerDoc, nowMs: number): CrankerHeartbeatRecord;
	accept(ctx: Context<HeartbeatRequest>): Promise<CrankerHeartbeatRecord>;
	provenLiquidity(hb: HeartbeatRequest, now: Date): Promise<Pick<CrankerDoc, "liquidity" | "held">>;
	mayReadLiquidity(): boolean;
	catchUp(nowMs: number): Promise<void>;
	sweep(): Promise<void>;
}

type CrankersThis = Service<CrankersSettings> & CrankersVars & CrankersMethods;

export function crankersService(config: Config): ServiceSchema<CrankersSettings, CrankersMethods, CrankersVars, CrankersThis> {
	return {
		name: "crankers",
		settings: { crankerTtlMs: config.crankerTtlMs, crankerRetentionMs: config.crankerRetentionMs, replicated: !!config.transporter },
		mixins: [
			crankerSignedMixin(config.publicBaseUrl, ["heartbeat"]),
			sweeperMixin<CrankersThis>("cranker liveness", config.sweepIntervalMs, function (this: CrankersThis) {
				return this.sweep();
			}),
			// The store last: Moleculer starts a service's last mixin first and stops it last (store.mixin.ts).
			storeMixin<CrankersThis>(config, "crankers", async function (this: CrankersThis, store) {
				// The tally counts the stored records (online or not) for `total`, the same on every replica.
				this.crankers = await store.collection<CrankerDoc>({ name: "crankers", fields: { lastSentAt: "text", lastSeenAt: "text" }, indexes: [["lastSeenAt"]], tally: () => ({ records: 1n }) });
				this.seenSignatures = await store.collection<SeenSignature>({ name: "request_signatures", fields: { expiresAt: "text" }, indexes: [["expiresAt"]] });
				await this.catchUp(Date.now());
			})
		],

		actions: {
			/** POST /crankers/heartbeat (a signed Cranker request) */
			heartbeat: workersOnly({
				params: heartbeatParams,
				handler(this: CrankersThis, ctx: Context<HeartbeatRequest>) {
					return this.accept(ctx);
				}
			}),

			/**
			 * Internal, from the owner of a Cranker action (mixins/cranker-signed.mixin.ts): records a
			 * verified request signature, once. The same signature again within its validity window is
			 * a replay (SPEC §6.1), even from a call that names the same parent: whoever sent it on the
			 * bus chose that name, and no broker retries a call (moleculer.config.ts).
			 */
			admitSignature: keyHoldersOnly({
				params: { keyid: address(), signature: { type: "string", max: 128 }, created: { type: "number", integer: true } },
				async handler(this: CrankersThis, ctx: Context<{ keyid: string; signature: string; created: number }>): Promise<true> {
					const { keyid, signature, created } = ctx.params;
					// Kept while any owner may still accept it: MAX_CLOCK_SKEW_S on its own clock, which may be
					// behind the clock of the replica that sweeps by as much as the bus lets nodes differ.
					const expiresAt = new Date((created + MAX_CLOCK_SKEW_S) * 1000 + BUS_SIGNATURE_TTL_MS).toISOString();
					if (!(await this.seenSignatures.insert({ id: signature, keyid, expiresAt })))
						throw new ServiceError("FORBIDDEN", "This request signature was used before", { reason: "replayed" });
					return true;
				}
			}),

			/**
			 * Internal: the Cranker side of the observation routes: counts, online Crankers per role,
			 * and per mint the liquidity and number of online settlement Crankers offering it.
			 */
			summary: internal({
				params: {},
				async handler(this: CrankersThis) {
					this.totals.expire(this.onlineCutoff(Date.now()));
					return { ...this.totals.snapshot(), total: Number((await this.crankers.tally()).records ?? 0n) };
				}
			}),

			/** Internal: whether a Cranker is online (and an allowed operator) and which roles it has. */
			standing: internal({
				params: { crankerPubkey: address() },
				async handler(this: CrankersThis, ctx: Context<{ crankerPubkey: string }>): Promise<{ online: boolean; roles: CrankerRole[] }> {
					const doc = await this.crankers.get(ctx.params.crankerPubkey);
					const online = !!doc && this.isOnline(doc, Date.now()) && this.isOperator(doc.crankerPubkey);
					return { online, roles: doc?.roles ?? [] };
				}
			}),

			/** Internal: how many Crankers are online now. */
			onlineCount: internal({
				params: {},
				handler(this: CrankersThis): number {
					this.totals.expire(this.onlineCutoff(Date.now()));
					return this.totals.online;
				}
			})
		},

		methods: {
			isOnline(this: CrankersThis, doc, nowMs) {
				return Date.parse(doc.lastSeenAt) + this.settings.crankerTtlMs > nowMs;
			},

			isOperator(this: CrankersThis, pubkey) {
				return this.operators.size === 0 || this.operators.has(pubkey);
			},

			onlineCutoff(this: CrankersThis, nowMs) {
				return new Date(nowMs - this.settings.crankerTtlMs).toISOString();
			},

			toView(this: CrankersThis, doc, nowMs) {
				return { crankerPubkey: doc.crankerPubkey, roles: doc.roles, liquidity: doc.liquidity, version: doc.version, lastSeenAt: doc.lastSeenAt, online: this.isOnline(doc, nowMs) };
			},

			/** A heartbeat signed by its Cranker, an allowed operator, near the Node's clock and newer than the last accepted. */
			async accept(this: CrankersThis, ctx) {
				const hb = ctx.params;
				if (!verifySignature(hb.crankerPubkey, buildHeartbeatMessage(hb), hb.signature)) throw new ServiceError("INVALID_SIGNATURE", "The heartbeat signature does not verify");
				if (!this.isOperator(hb.crankerPubkey)) throw new ServiceError("CRANKER_NOT_ALLOWED", "This Cranker is not an allowed operator");
				const now = new Date();
				if (Math.abs(now.getTime() - Date.parse(hb.sentAt)) > MAX_HEARTBEAT_SKEW_MS) throw new ServiceError("STALE_HEARTBEAT", "sentAt is more than 60 s away from the Node's clock");

				const doc: CrankerDoc = {
					id: hb.crankerPubkey,
					crankerPubkey: hb.crankerPubkey,
					roles: hb.roles,
					...(await this.provenLiquidity(hb, now)),
					version: hb.version ?? null,
					lastSentAt: hb.sentAt,
					lastSeenAt: now.toISOString(),
					callKey: callKey(ctx)
				};
				// Accepted only when newer than the last accepted one; the condition makes replays and races safe.
				const inserted = await this.crankers.insert(doc);
				if (!inserted && !(await this.crankers.update(doc.id, { lastSentAt: { lt: hb.sentAt } }, doc))) {
					// A retry of the call that stored this heartbeat answers as that call did.
					const stored = await this.crankers.get(doc.id);
					if (stored && isOwnWrite(ctx, stored.callKey)) return this.toView(stored, Date.parse(stored.lastSeenAt));
					throw new ServiceError("STALE_HEARTBEAT", "sentAt is not newer than the last accepted heartbeat");
				}
				this.totals.seen(doc);
				return this.toView(doc, now.getTime());
			},

			/**
			 * A settlement Cranker's liquidity as far as the chain bears it out: of each mint, what it
			 * reports or what its associated token account holds (ChainReader.tokenBalances), the
			 * smaller. Its word alone would let a key holder show a mint ready that no Cranker can pay.
			 * A heartbeat not read (the chain does not answer, or the reads allowed are spent) is
			 * bounded by the last reading while that is younger than CRANKER_TTL_MS, and counts 0
			 * otherwise; the heartbeat itself still counts (the TIN roles and leases need no balance).
			 */
			async provenLiquidity(this: CrankersThis, hb, now) {
				if (!this.chain || !hb.roles.includes("settlement") || hb.liquidity.length === 0) return { liquidity: hb.liquidity, held: null };
				const mints = hb.liquidity.map(entry => toAddress(entry.tokenMintAddress));
				const read = this.mayReadLiquidity() ? await this.chain.tokenBalances(toAddress(hb.crankerPubkey), mints).catch(() => null) : null;
				let held: LiquidityReading | null;
				if (read) held = { at: now.toISOString(), balances: mints.map(mint => ({ tokenMintAddress: mint, available: read.get(mint)!.toString() })) };
				else {
					const last = (await this.crankers.get(hb.crankerPubkey))?.held;
					held = last && Date.parse(last.at) + this.settings.crankerTtlMs > now.getTime() ? last : null;
				}
				const balances = new Map(held?.balances.map(entry => [entry.tokenMintAddress, BigInt(entry.available)]));
				return {
					held,
					liquidity: hb.liquidity.map(({ tokenMintAddress, available }) => {
						const onChain = balances.get(tokenMintAddress) ?? 0n;
						const reported = BigInt(available);
						return { tokenMintAddress, available: (onChain < reported ? onChain : reported).toString() };
					})
				};
			},

			/**
			 * Whether a heartbeat's liquidity may be read now: one read per heartbeat would let a
			 * worker-key holder with many keys spend the Node's RPC quota, which its settlement checks
			 * need. A token bucket, so that no burst passes the rate.
			 */
			mayReadLiquidity(this: CrankersThis) {
				const rate = config.liquidityReadsPerSecond;
				const now = performance.now();
				const bucket = this.liquidityReads;
				bucket.tokens = Math.min(rate, bucket.tokens + ((now - bucket.at) * rate) / 1000);
				bucket.at = now;
				if (bucket.tokens < 1) return false;
				bucket.tokens -= 1;
				return true;
			},

			/**
			 * Folds in the heartbeats stored since the last look (an index range on lastSeenAt), a page
			 * at a time (keyset pages: heartbeats share milliseconds); one read twice changes nothing.
			 * With replicas, a heartbeat another replica stamped before a look may be stored after it,
			 * however long after (a MongoDB write retries, clocks differ): each look reads every one still
			 * counted, stamped within CRANKER_TTL_MS. That is one record per Cranker online, not per heartbeat.
			 */
			async catchUp(this: CrankersThis, nowMs) {
				const floor = this.onlineCutoff(nowMs);
				const from = this.caughtUpTo && !this.settings.replicated && this.caughtUpTo > floor ? this.caughtUpTo : floor;
				for await (const doc of listInPages(this.crankers, { where: { lastSeenAt: { gt: from } }, orderBy: ["lastSeenAt", "asc"] }, CATCH_UP_PAGE))
					if (this.isOperator(doc.crankerPubkey)) this.totals.seen(doc);
				this.caughtUpTo = new Date(nowMs).toISOString();
				this.totals.expire(floor);
			},

			/** Folds in new heartbeats, drops silent Crankers, prunes long-silent records and expired replay entries. */
			async sweep(this: CrankersThis) {
				const nowMs = Date.now();
				await this.catchUp(nowMs);
				const pruned = await this.crankers.removeWhere({ lastSeenAt: { lt: new Date(nowMs - this.settings.crankerRetentionMs).toISOString() } }, PRUNE_BATCH);
				const forgotten = await this.seenSignatures.removeWhere({ expiresAt: { lt: new Date(nowMs).toISOString() } }, PRUNE_BATCH);
				this.sweeps.inc({ sweep: "cranker-liveness", result: "pruned" }, pruned);
				this.sweeps.inc({ sweep: "cranker-liveness", result: "signatures-forgotten" }, forgotten);
			}
		} satisfies CrankersMethods & ThisType<CrankersThis>,

		created(this: CrankersThis) {
			this.sweeps = sweepMetrics(this.broker);
			this.operators = new Set(config.crankerOperators);
			this.totals = new CrankerTotals(CRANKER_ROLES);
			this.caughtUpTo = "";
			this.chain = processChain(this.broker, config).reads;
			this.liquidityReads = { tokens: config.liquidityReadsPerSecond, at: performance.now() };
		}
	};
}
