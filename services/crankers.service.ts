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
import { associatedTokenAccount, MAX_ACCOUNTS_PER_READ, type NodeChain } from "../lib/chain";
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
/** Token accounts derived per liquidity reading, at about 0.4 ms of CPU each: new keys cannot buy the Node's CPU with heartbeats. */
const DERIVATIONS_PER_READING = 100;
/** Attempts of a heartbeat or a reading to store itself while the other moves the record. */
const WRITE_ATTEMPTS = 3;

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
	/** What counts: with SOLANA_RPC_URL, of each mint the smaller of the report and the last reading (boundedBy). */
	liquidity: Liquidity;
	/**
	 * A settlement Cranker's last report, with SOLANA_RPC_URL, and each mint's associated token
	 * account once the liquidity read has derived it.
	 */
	reported?: ReportedHolding[] | null;
	/** Its associated token accounts as the Node last read them; a reading counts while younger than CRANKER_TTL_MS. */
	held?: LiquidityReading | null;
	/** `held.at`, as a field the writes compare-and-set on: a heartbeat never puts back an older reading. */
	heldAt?: string | null;
	/** Its first heartbeat since its record was made: the earliest go first when not all can be read. */
	firstSeenAt?: string;
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

/** A settlement Cranker's balance of each mint it reported, as read on chain at `at`. */
interface LiquidityReading {
	at: string;
	balances: Liquidity;
}

/** Of each mint reported, the smaller of the report and the reading (0 for a mint the reading lacks). */
function boundedBy(reported: Liquidity, held: LiquidityReading | null): Liquidity {
	const balances = new Map(held?.balances.map(entry => [entry.tokenMintAddress, BigInt(entry.available)]));
	return reported.map(({ tokenMintAddress, available }) => {
		const onChain = balances.get(tokenMintAddress) ?? 0n;
		const report = BigInt(available);
		return { tokenMintAddress, available: (onChain < report ? onChain : report).toString() };
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
	totals: CrankerTotals<CrankerDoc>;
	/** The store time up to which this replica has folded heartbeats in. */
	caughtUpTo: string;
	/** Null without SOLANA_RPC_URL: a settlement Cranker's liquidity is then its word. */
	chain: NodeChain | null;
	/** When the next liquidity reading may start (performance.now()): readings keep to LIQUIDITY_READS_PER_SECOND. */
	nextReadingAt: number;
}

interface CrankersMethods {
	isOnline(doc: CrankerDoc, nowMs: number): boolean;
	isOperator(pubkey: string): boolean;
	onlineCutoff(nowMs: number): string;
	toView(doc: CrankerDoc, nowMs: number): CrankerHeartbeatRecord;
	accept(ctx: Context<HeartbeatRequest>): Promise<CrankerHeartbeatRecord>;
	provenLiquidity(hb: HeartbeatRequest, stored: CrankerDoc | null, nowMs: number): Pick<CrankerDoc, "liquidity" | "reported" | "held" | "heldAt">;
	readLiquidity(): Promise<void>;
	storeReading(doc: CrankerDoc, reported: ReportedHolding[], at: string, amountOf: Map<string, bigint>): Promise<void>;
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
			sweeperMixin<CrankersThis>("cranker liquidity", config.sweepIntervalMs, function (this: CrankersThis) {
				return this.readLiquidity();
			}),
			// The store last: Moleculer starts a service's last mixin first and stops it last (store.mixin.ts).
			storeMixin<CrankersThis>(config, "crankers", async function (this: CrankersThis, store) {
				// The tally counts the stored records (online or not) for `total`, the same on every replica.
				this.crankers = await store.collection<CrankerDoc>({ name: "crankers", fields: { lastSentAt: "text", lastSeenAt: "text", heldAt: "text" }, indexes: [["lastSeenAt"]], tally: () => ({ records: 1n }) });
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

				for (let attempt = 1; ; attempt++) {
					// What the liquidity reading left (with SOLANA_RPC_URL): the reading and the accounts derived.
					const stored = this.chain ? await this.crankers.get(hb.crankerPubkey) : null;
					const doc: CrankerDoc = {
						id: hb.crankerPubkey,
						crankerPubkey: hb.crankerPubkey,
						roles: hb.roles,
						...this.provenLiquidity(hb, stored, now.getTime()),
						...(this.chain ? { firstSeenAt: stored?.firstSeenAt ?? now.toISOString() } : {}),
						version: hb.version ?? null,
						lastSentAt: hb.sentAt,
						lastSeenAt: now.toISOString(),
						callKey: callKey(ctx)
					};
					// Accepted only when newer than the last accepted one, and over the reading it was built on;
					// the conditions make replays and races safe.
					const expected = { lastSentAt: { lt: hb.sentAt }, ...(this.chain ? { heldAt: stored?.heldAt ?? null } : {}) };
					if ((await this.crankers.insert(doc)) || (await this.crankers.update(doc.id, expected, doc))) {
						this.totals.seen(doc);
						return this.toView(doc, now.getTime());
					}
					const current = await this.crankers.get(doc.id);
					// A retry of the call that stored this heartbeat answers as that call did.
					if (current && isOwnWrite(ctx, current.callKey)) return this.toView(current, Date.parse(current.lastSeenAt));
					if (!current || current.lastSentAt >= hb.sentAt) throw new ServiceError("STALE_HEARTBEAT", "sentAt is not newer than the last accepted heartbeat");
					// A newer reading landed meanwhile: this heartbeat is built again on it.
					if (attempt === WRITE_ATTEMPTS) throw new ServiceError("VERSION_CONFLICT", "The Cranker's record changed concurrently; send the heartbeat again");
				}
			},

			/**
			 * A settlement Cranker's liquidity as far as the chain bears it out: of each mint, what it
			 * reports or what its associated token account held at the last liquidity reading, the
			 * smaller. Its word alone would let a key holder show a mint ready that no Cranker can pay. A
			 * reading older than CRANKER_TTL_MS, or none yet, counts 0; the heartbeat itself still counts
			 * (the TIN roles and leases need no balance). A heartbeat reads nothing: many keys would
			 * spend the Node's RPC quota and CPU.
			 */
			provenLiquidity(this: CrankersThis, hb, stored, nowMs) {
				if (!this.chain || !hb.roles.includes("settlement") || hb.liquidity.length === 0) return { liquidity: hb.liquidity, reported: null, held: stored?.held ?? null, heldAt: stored?.heldAt ?? null };
				const accounts = new Map(stored?.reported?.map(holding => [holding.tokenMintAddress, holding.account]));
				const reported = hb.liquidity.map(entry => {
					const account = accounts.get(entry.tokenMintAddress);
					return account ? { ...entry, account } : entry;
				});
				const held = stored?.held ?? null;
				const fresh = held && Date.parse(held.at) + this.settings.crankerTtlMs > nowMs ? held : null;
				return { reported, held, heldAt: stored?.heldAt ?? null, liquidity: boundedBy(reported, fresh) };
			},

			/**
			 * A reading of the associated token accounts of every settlement Cranker online at once
			 * (NodeChain.tokenAmounts sends its reads together), so that tokens moved from one key to
			 * another count once: a key that gave them away is read as empty in the same reading that
			 * finds them under the other. Readings follow each other no faster than
			 * LIQUIDITY_READS_PER_SECOND reads of MAX_ACCOUNTS_PER_READ accounts allow, and one reads
			 * at most what half of CRANKER_TTL_MS allows, the Crankers first seen earliest first: a
			 * flood of new keys makes readings rarer, never partial for the Crankers already there.
			 * Accounts not derived yet are derived DERIVATIONS_PER_READING at a time, earliest first, and
			 * count 0 meanwhile. Each record keeps the newest reading, whichever replica took it.
			 */
			async readLiquidity(this: CrankersThis) {
				if (!this.chain || performance.now() < this.nextReadingAt) return;
				// The Crankers online as the liveness sweep last folded them in (every replica's, with replicas).
				this.totals.expire(this.onlineCutoff(Date.now()));
				const firstSeen = (doc: CrankerDoc) => doc.firstSeenAt ?? "";
				const online = [...this.totals.contributions()].filter(doc => doc.reported?.length).sort((a, b) => (firstSeen(a) < firstSeen(b) ? -1 : firstSeen(a) > firstSeen(b) ? 1 : 0));
				const rate = config.liquidityReadsPerSecond;
				const maxAccounts = Math.max(1, Math.floor((rate * this.settings.crankerTtlMs) / 2000)) * MAX_ACCOUNTS_PER_READ;
				const read: { doc: CrankerDoc; reported: ReportedHolding[] }[] = [];
				let accounts = 0;
				let derivations = 0;
				for (const doc of online) {
					if (accounts + doc.reported!.length > maxAccounts) break;
					const owner = toAddress(doc.crankerPubkey);
					const reported: ReportedHolding[] = [];
					for (const holding of doc.reported!) {
						if (holding.account || derivations === DERIVATIONS_PER_READING) reported.push(holding);
						else {
							derivations++;
							reported.push({ ...holding, account: await associatedTokenAccount(owner, toAddress(holding.tokenMintAddress)) });
						}
					}
					accounts += reported.length;
					read.push({ doc, reported });
				}
				const holdings = read.flatMap(({ doc, reported }) =>
					reported.flatMap(holding => (holding.account ? [{ owner: toAddress(doc.crankerPubkey), mint: toAddress(holding.tokenMintAddress), account: toAddress(holding.account) }] : []))
				);
				if (holdings.length === 0) return;
				const startedAt = performance.now();
				const at = new Date().toISOString();
				const amounts = await this.chain.tokenAmounts(holdings);
				this.nextReadingAt = startedAt + (Math.ceil(holdings.length / MAX_ACCOUNTS_PER_READ) * 1000) / rate;
				const amountOf = new Map(holdings.map((holding, i) => [`${holding.owner}/${holding.mint}`, amounts[i]]));
				await Promise.all(read.map(({ doc, reported }) => this.storeReading(doc, reported, at, amountOf)));
			},

			/**
			 * Stores a reading on a Cranker's record unless a newer one is there, over whatever heartbeat
			 * came meanwhile (compare-and-set on lastSentAt and heldAt, tried again as they move).
			 */
			async storeReading(this: CrankersThis, doc, reported, at, amountOf) {
				const accounts = new Map(reported.map(holding => [holding.tokenMintAddress, holding.account]));
				let current: CrankerDoc | null = doc;
				for (let attempt = 1; current && (current.heldAt ?? "") < at && attempt <= WRITE_ATTEMPTS; attempt++) {
					const mine = (current.reported ?? []).map(holding => ({ ...holding, account: holding.account ?? accounts.get(holding.tokenMintAddress) }));
					const held: LiquidityReading = {
						at,
						balances: mine.flatMap(({ tokenMintAddress }) => {
							const amount = amountOf.get(`${current!.crankerPubkey}/${tokenMintAddress}`);
							return amount === undefined ? [] : [{ tokenMintAddress, available: amount.toString() }];
						})
					};
					const next: CrankerDoc = { ...current, reported: current.reported ? mine : current.reported, held, heldAt: at, liquidity: current.reported ? boundedBy(current.reported, held) : current.liquidity };
					if (await this.crankers.update(current.id, { lastSentAt: current.lastSentAt, heldAt: current.heldAt ?? null }, next)) return void this.totals.seen(next);
					current = await this.crankers.get(current.id);
				}
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
			this.totals = new CrankerTotals<CrankerDoc>(CRANKER_ROLES);
			this.caughtUpTo = "";
			this.chain = processChain(this.broker, config).reads;
			this.nextReadingAt = 0;
		}
	};
}
