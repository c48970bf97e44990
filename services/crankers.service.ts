/**
 * crankers: owns Cranker admission (SPEC §6, §6.1): signed heartbeats, liveness, roles and
 * liquidity (as far as the chain bears it out), and the request signatures already seen (replay
 * protection). A Cranker is online while its last accepted heartbeat is younger than
 * CRANKER_TTL_MS; records silent for CRANKER_RETENTION_MS are pruned.
 */
import type { Address } from "@solana/kit";
import type { Context, Service, ServiceSchema } from "moleculer";
import type { CrankerHeartbeatAnswer, CrankerHeartbeatRecord } from "../lib/answers";
import { buildHeartbeatMessage } from "../lib/canonical";
import { MAX_ACCOUNTS_PER_READ, type NodeChain } from "../lib/chain";
import { associatedTokenAccount } from "../lib/settlement";
import type { Config } from "../lib/config";
import { CrankerTotals } from "../lib/cranker-totals";
import { ConditionStreaks } from "../lib/failure-streak";
import { verifySignature } from "../lib/ed25519";
import { ServiceError } from "../lib/errors";
import { BUS_SIGNATURE_TTL_MS } from "../lib/bus-signatures";
import { MAX_CLOCK_SKEW_S } from "../lib/http-signature";
import { CRANKER_ROLES, address, heartbeatParams, type CrankerRole } from "../lib/schemas";
import { listInPages, removeInBatches, type Collection } from "../lib/store";
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
/**
 * Records pruned per store call, and calls per sweep: up to 10,000 a sweep (a second by default),
 * where one batch a sweep let signed calls (each leaves its signature for two minutes) at more than
 * 500 a second grow the table for good (a review); still bounded, so that the sweep's other work
 * and a stop wait for little.
 */
const PRUNE_BATCH = 500;
const PRUNE_BATCHES_PER_SWEEP = 20;
/** Token accounts derived a second at most, at about 0.4 ms of CPU each: new keys cannot buy the Node's CPU with heartbeats. */
const DERIVATIONS_PER_SECOND = 100;
/** Derived token accounts kept in memory, the oldest dropped first (records keep their Cranker's too). */
const TOKEN_ACCOUNTS_KEPT = 200_000;

type Liquidity = { tokenMintAddress: string; available: string }[];

interface HeartbeatRequest {
	crankerPubkey: string;
	roles: CrankerRole[];
	liquidity: Liquidity;
	version?: string;
	sentAt: string;
	signature: string;
}

interface CrankerDoc {
	id: string;
	crankerPubkey: string;
	roles: CrankerRole[];
	/** As counted when stored: with SOLANA_RPC_URL, of each mint the smaller of the report and the reading then (bound). */
	liquidity: Liquidity;
	/** With SOLANA_RPC_URL, a settlement Cranker's report, with each mint's associated token account once derived. */
	reported?: ReportedHolding[] | null;
	/** Since when it has been online as a settlement Cranker without a break: the longest go first when not all can be read. */
	settlingSince?: string | null;
	version: string | null;
	lastSentAt: string;
	lastSeenAt: string;
	/** The call that stored this heartbeat (services/replay.ts). */
	callKey?: string | null;
}

interface ReportedHolding {
	tokenMintAddress: string;
	available: string;
	account?: string;
}

/** A record as this process counts it: its liquidity bound to this process's latest reading (`boundAt`: which binding). */
type Counted = CrankerDoc & { boundAt?: number };

/** The token accounts of some settlement Crankers online, read at one moment. */
interface LiquidityReading {
	/** Date.now() as it began. */
	at: number;
	/** The Crankers it took. */
	crankers: Set<string>;
	/** `owner/mint` → amount. */
	amounts: Map<string, bigint>;
}

const holdingKey = (owner: string, mint: string) => `${owner}/${mint}`;

/** What a settlement Cranker reports, whoever stored it: a record of an earlier version, or of a Node without a chain, has no `reported`. */
const reportOf = (doc: CrankerDoc): ReportedHolding[] => doc.reported ?? doc.liquidity;

/** The order in which settlement Crankers are read and derived: settling longest without a break first. */
const settlingRank = (doc: CrankerDoc) => `${doc.settlingSince ?? doc.lastSeenAt} ${doc.crankerPubkey}`;

/** What a reading takes of a Cranker's report. */
interface ReadingShare {
	doc: CrankerDoc;
	holdings: ReportedHolding[];
}

/**
 * `budget` accounts shared out among the settlement Crankers: each gets the first entries of its
 * report, all of them or an equal share of what is left, whichever is less, the smallest reports
 * first (so that what they leave goes to the larger). A key holder then needs about as many keys
 * as the budget has accounts to crowd an honest Cranker out. With more Crankers than that, one
 * account each to those settling longest.
 */
function sharedReading(settling: readonly CrankerDoc[], budget: number): ReadingShare[] {
	if (settling.length > budget) {
		const ranks = new Map(settling.map(doc => [doc, settlingRank(doc)]));
		return [...settling]
			.sort((a, b) => (ranks.get(a)! < ranks.get(b)! ? -1 : 1))
			.slice(0, budget)
			.map(doc => ({ doc, holdings: reportOf(doc).slice(0, 1) }));
	}
	const order = [...settling].sort((a, b) => reportOf(a).length - reportOf(b).length);
	let left = budget;
	// `left` stays at least the Crankers still to serve, so each gets one account or more.
	return order.map((doc, i) => {
		const share = Math.min(reportOf(doc).length, Math.floor(left / (order.length - i)));
		left -= share;
		return { doc, holdings: reportOf(doc).slice(0, share) };
	});
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
	/** Told in every heartbeat's answer: a Cranker set to another program would pay credit accounts this Node never counts. */
	settlementProgramId: string;
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
	totals: CrankerTotals<Counted>;
	/** The store time up to which this replica has folded heartbeats in. */
	caughtUpTo: string;
	/** Null without SOLANA_RPC_URL: a settlement Cranker's liquidity is then its word. */
	chain: NodeChain | null;
	/** This process's latest reading, null once older than CRANKER_TTL_MS (readLiquidity). */
	reading: LiquidityReading | null;
	/** Counts the changes of `reading`: a figure bound to a later one replaces the same heartbeat's earlier. */
	binding: number;
	/** When the next reading may begin (performance.now()): reads keep to LIQUIDITY_READS_PER_SECOND. */
	nextReadingAt: number;
	/** The settlingRank of the last Cranker given a derivation: the next turns begin after it. */
	derivedUpTo: string;
	/** When derivations may go on (performance.now()): DERIVATIONS_PER_SECOND. */
	nextDerivationAt: number;
	/** Crankers left out of a reading, told to the operator when it starts, as reminders, and when it ends. */
	readingLimit: ConditionStreaks;
	/** Derived associated token accounts, `owner/mint` → account (TOKEN_ACCOUNTS_KEPT). */
	tokenAccounts: Map<string, string>;
}

interface CrankersMethods {
	isOnline(doc: CrankerDoc, nowMs: number): boolean;
	isOperator(pubkey: string): boolean;
	onlineCutoff(nowMs: number): string;
	toView(doc: CrankerDoc, nowMs: number): CrankerHeartbeatRecord;
	accept(ctx: Context<HeartbeatRequest>): Promise<CrankerHeartbeatRecord>;
	withAccounts(owner: string, liquidity: Liquidity): ReportedHolding[];
	remember(owner: string, holdings: readonly ReportedHolding[]): void;
	keepAccount(owner: string, mint: string, account: string): void;
	bound(doc: CrankerDoc): Counted;
	readLiquidity(): Promise<void>;
	rebind(reading: LiquidityReading | null): void;
	deriveAccounts(shares: readonly ReadingShare[]): Promise<void>;
	catchUp(nowMs: number): Promise<void>;
	sweep(): Promise<void>;
}

type CrankersThis = Service<CrankersSettings> & CrankersVars & CrankersMethods;

export function crankersService(config: Config): ServiceSchema<CrankersSettings, CrankersMethods, CrankersVars, CrankersThis> {
	return {
		name: "crankers",
		settings: { crankerTtlMs: config.crankerTtlMs, crankerRetentionMs: config.crankerRetentionMs, replicated: !!config.transporter, settlementProgramId: config.settlementProgramId },
		mixins: [
			crankerSignedMixin(config.publicBaseUrl, ["heartbeat"]),
			sweeperMixin<CrankersThis>("cranker liveness", config.sweepIntervalMs, function (this: CrankersThis) {
				return this.sweep();
			}),
			sweeperMixin<CrankersThis>("cranker liquidity", config.sweepIntervalMs, function (this: CrankersThis) {
				return this.readLiquidity();
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
				async handler(this: CrankersThis, ctx: Context<HeartbeatRequest>): Promise<CrankerHeartbeatAnswer> {
					return { ...(await this.accept(ctx)), settlementProgramId: this.settings.settlementProgramId };
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

				// With SOLANA_RPC_URL: whether it has been settling without a break, and its token accounts derived.
				const stored = this.chain ? await this.crankers.get(hb.crankerPubkey) : null;
				if (stored?.reported) this.remember(stored.crankerPubkey, stored.reported);
				const settling = hb.roles.includes("settlement") && hb.liquidity.length > 0;
				const settled = stored?.settlingSince && stored.roles.includes("settlement") && this.isOnline(stored, now.getTime());
				const doc: CrankerDoc = {
					id: hb.crankerPubkey,
					crankerPubkey: hb.crankerPubkey,
					roles: hb.roles,
					liquidity: hb.liquidity,
					...(this.chain
						? { reported: settling ? this.withAccounts(hb.crankerPubkey, hb.liquidity) : null, settlingSince: settling ? (settled ? stored.settlingSince : now.toISOString()) : null }
						: {}),
					version: hb.version ?? null,
					lastSentAt: hb.sentAt,
					lastSeenAt: now.toISOString(),
					callKey: callKey(ctx)
				};
				// Stored as counted now: a replica of the previous version takes `liquidity` as it is.
				doc.liquidity = this.bound(doc).liquidity;
				// Accepted only when newer than the last accepted one; the condition makes replays and races safe.
				const inserted = await this.crankers.insert(doc);
				if (!inserted && !(await this.crankers.update(doc.id, { lastSentAt: { lt: hb.sentAt } }, doc))) {
					// A retry of the call that stored this heartbeat answers as that call did.
					const current = await this.crankers.get(doc.id);
					if (current && isOwnWrite(ctx, current.callKey)) return this.toView(this.bound(current), Date.parse(current.lastSeenAt));
					// Pruned between the two writes (silent for CRANKER_RETENTION_MS): a first heartbeat again.
					if (current || !(await this.crankers.insert(doc))) throw new ServiceError("STALE_HEARTBEAT", "sentAt is not newer than the last accepted heartbeat");
				}
				// Bound once stored: a reading that landed while it was written counts, not the one before.
				const counted = this.bound(doc);
				this.totals.seen(counted);
				return this.toView(counted, now.getTime());
			},

			/** A report with each mint's associated token account, when derived already. */
			withAccounts(this: CrankersThis, owner, liquidity) {
				return liquidity.map(entry => {
					const account = this.tokenAccounts.get(holdingKey(owner, entry.tokenMintAddress));
					return account ? { ...entry, account } : entry;
				});
			},

			/** Keeps the token accounts derived for `owner` (by this process, or by any before: its record carries them). */
			remember(this: CrankersThis, owner, holdings) {
				for (const { tokenMintAddress, account } of holdings) if (account) this.keepAccount(owner, tokenMintAddress, account);
			},

			/** Keeps one derived account, the least recently kept dropped past TOKEN_ACCOUNTS_KEPT. */
			keepAccount(this: CrankersThis, owner, mint, account) {
				const key = holdingKey(owner, mint);
				this.tokenAccounts.delete(key);
				if (this.tokenAccounts.size >= TOKEN_ACCOUNTS_KEPT) this.tokenAccounts.delete(this.tokenAccounts.keys().next().value!);
				this.tokenAccounts.set(key, account);
			},

			/**
			 * A settlement Cranker's liquidity as far as the chain bears it out: of each mint, what it
			 * reports or what its associated token account held at this process's latest reading, the
			 * smaller (0 when the reading did not take it). Its word alone would let a key holder show a
			 * mint ready that no Cranker can pay. A heartbeat reads nothing: many keys would spend the
			 * Node's RPC quota. Without SOLANA_RPC_URL, the report as it is.
			 */
			bound(this: CrankersThis, doc) {
				if (!this.chain || !doc.roles.includes("settlement")) return doc;
				const amounts = this.reading?.amounts;
				const reported = reportOf(doc);
				const liquidity = reported.map(({ tokenMintAddress, available }) => {
					const onChain = amounts?.get(holdingKey(doc.crankerPubkey, tokenMintAddress)) ?? 0n;
					const report = BigInt(available);
					return { tokenMintAddress, available: (onChain < report ? onChain : report).toString() };
				});
				// The report kept beside what counts, so that the next binding starts from it again.
				return { ...doc, reported, liquidity, boundAt: this.binding };
			},

			/**
			 * Reads the associated token accounts of the settlement Crankers online at one moment
			 * (NodeChain.tokenAmounts sends its reads together), and binds every figure to that reading:
			 * tokens moved from one key to another count once, since the key that gave them away is read
			 * as empty in the same reading that finds them under the other. A reading takes at most
			 * LIQUIDITY_READS_PER_SECOND reads of MAX_ACCOUNTS_PER_READ accounts, and the next waits for
			 * the rate, whether this one failed or not. Past that many accounts they are shared out
			 * (sharedReading): mints not read count 0, told to the operator. A reading older than
			 * CRANKER_TTL_MS counts no more.
			 */
			async readLiquidity(this: CrankersThis) {
				if (!this.chain) return;
				const nowMs = Date.now();
				if (this.reading && this.reading.at + this.settings.crankerTtlMs <= nowMs) this.rebind(null);
				if (performance.now() < this.nextReadingAt) return;
				this.totals.expire(this.onlineCutoff(nowMs));
				const settling = [...this.totals.contributions()].filter(doc => doc.roles.includes("settlement") && reportOf(doc).length > 0);
				const shares = sharedReading(settling, config.liquidityReadsPerSecond * MAX_ACCOUNTS_PER_READ);
				const unread = settling.reduce((sum, doc) => sum + reportOf(doc).length, 0) - shares.reduce((sum, share) => sum + share.holdings.length, 0);
				this.readingLimit.report(
					"The liquidity reading",
					unread > 0,
					"leaves out token accounts of settlement Crankers, which count 0: they report more than LIQUIDITY_READS_PER_SECOND reads of 100 take; raise it, or set CRANKER_OPERATORS",
					`${unread} left out`
				);
				const holdings = shares.flatMap(({ doc, holdings }) =>
					holdings.flatMap(({ tokenMintAddress, account = this.tokenAccounts.get(holdingKey(doc.crankerPubkey, tokenMintAddress)) }) =>
						// Addresses checked when they came in (heartbeat schema) or derived here.
						account ? [{ owner: doc.crankerPubkey as Address, mint: tokenMintAddress as Address, account: account as Address }] : []
					)
				);
				this.nextReadingAt = performance.now() + (Math.ceil(holdings.length / MAX_ACCOUNTS_PER_READ) * 1000) / config.liquidityReadsPerSecond;
				try {
					const amounts = holdings.length ? await this.chain.tokenAmounts(holdings) : [];
					this.rebind({ at: nowMs, crankers: new Set(shares.map(({ doc }) => doc.crankerPubkey)), amounts: new Map(holdings.map(({ owner, mint }, i) => [holdingKey(owner, mint), amounts[i]])) });
				} finally {
					if (performance.now() >= this.nextDerivationAt) await this.deriveAccounts(shares);
				}
			},

			/** Makes `reading` the one figures count against, and binds again those it or the last one took. */
			rebind(this: CrankersThis, reading) {
				const before = this.reading?.crankers;
				this.reading = reading;
				this.binding++;
				for (const doc of [...this.totals.contributions()])
					if (before?.has(doc.crankerPubkey) || reading?.crankers.has(doc.crankerPubkey)) this.totals.seen(this.bound(doc));
			},

			/**
			 * Derives at most DERIVATIONS_PER_SECOND of the token accounts a reading would take and
			 * does not know yet, one per Cranker in turn, the turns going on from where the last ones
			 * stopped: keys that report new mints at every heartbeat cannot keep another Cranker's from
			 * its turn, nor buy the Node's CPU. They are read from the next reading on, and stored with
			 * the Cranker's next heartbeat.
			 */
			async deriveAccounts(this: CrankersThis, shares) {
				const waiting = shares
					.map(({ doc, holdings }) => ({ doc, mints: holdings.filter(({ tokenMintAddress, account }) => !account && !this.tokenAccounts.has(holdingKey(doc.crankerPubkey, tokenMintAddress))).map(holding => holding.tokenMintAddress) }))
					.filter(({ mints }) => mints.length > 0)
					.sort((a, b) => (settlingRank(a.doc) < settlingRank(b.doc) ? -1 : 1));
				const start = waiting.findIndex(({ doc }) => settlingRank(doc) > this.derivedUpTo);
				const inTurn = start > 0 ? [...waiting.slice(start), ...waiting.slice(0, start)] : waiting;
				const startedAt = performance.now();
				let derivations = 0;
				for (let turn = 0; derivations < DERIVATIONS_PER_SECOND && inTurn.some(({ mints }) => turn < mints.length); turn++)
					for (const { doc, mints } of inTurn) {
						if (turn >= mints.length || derivations === DERIVATIONS_PER_SECOND) continue;
						this.keepAccount(doc.crankerPubkey, mints[turn], await associatedTokenAccount(doc.crankerPubkey as Address, mints[turn] as Address));
						this.derivedUpTo = settlingRank(doc);
						derivations++;
					}
				this.nextDerivationAt = startedAt + (derivations * 1000) / DERIVATIONS_PER_SECOND;
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
					if (this.isOperator(doc.crankerPubkey)) {
						this.remember(doc.crankerPubkey, doc.reported ?? []);
						this.totals.seen(this.bound(doc));
					}
				this.caughtUpTo = new Date(nowMs).toISOString();
				this.totals.expire(floor);
			},

			/** Folds in new heartbeats, drops silent Crankers, prunes long-silent records and expired replay entries. */
			async sweep(this: CrankersThis) {
				const nowMs = Date.now();
				await this.catchUp(nowMs);
				const expired = { expiresAt: { lt: new Date(nowMs).toISOString() } };
				const forgotten = await removeInBatches(batch => this.seenSignatures.removeWhere(expired, batch), PRUNE_BATCH, PRUNE_BATCHES_PER_SWEEP);
				const longSilent = { lastSeenAt: { lt: new Date(nowMs - this.settings.crankerRetentionMs).toISOString() } };
				const pruned = await removeInBatches(batch => this.crankers.removeWhere(longSilent, batch), PRUNE_BATCH, PRUNE_BATCHES_PER_SWEEP);
				this.sweeps.inc({ sweep: "cranker-liveness", result: "pruned" }, pruned);
				this.sweeps.inc({ sweep: "cranker-liveness", result: "signatures-forgotten" }, forgotten);
			}
		} satisfies CrankersMethods & ThisType<CrankersThis>,

		created(this: CrankersThis) {
			this.sweeps = sweepMetrics(this.broker);
			this.operators = new Set(config.crankerOperators);
			this.totals = new CrankerTotals<Counted>(CRANKER_ROLES);
			this.caughtUpTo = "";
			this.chain = processChain(this.broker, config).reads;
			this.reading = null;
			this.binding = 0;
			this.nextReadingAt = 0;
			this.derivedUpTo = "";
			this.nextDerivationAt = 0;
			this.tokenAccounts = new Map();
			this.readingLimit = new ConditionStreaks(this.logger);
		}
	};
}
