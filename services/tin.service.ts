/**
 * tin: owns the registry of TIN routes and the TIN operations pipeline (SPEC §5). Resolves a TIN
 * to its active route, imports the genesis routes at start, takes signed create/update
 * operations, and moves them through the Cranker stages; finalizing activates the route.
 */
import fs from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import type { Context, Service, ServiceSchema } from "moleculer";
import type { NodeChain } from "../lib/chain";
import { judgeChainEvidence, readChain, type ChainObservation } from "../lib/chain-evidence";
import { ConfigError, type Config } from "../lib/config";
import { requestDigest } from "../lib/digest";
import { ServiceError } from "../lib/errors";
import { newId } from "../lib/ids";
import { parseRegistrySeed, toRouteView, type ActiveRoute, type RouteRecord } from "../lib/registry";
import { answersJsonTexts, forCaller, type TakesJsonTexts } from "../lib/json-text";
import { TIN_STAGES, address, createTinOperationParams, limit, tin, tinStageParams, type TinStage } from "../lib/schemas";
import { readRegistrySubmission } from "../lib/settlement";
import { firstOutside, sequenceOf, tinFromSequence, withSequences, type SequenceRun } from "../lib/tin";
import {
	TIN_OPERATION_STATES,
	applyStage,
	decideStage,
	finalizedRoute,
	finishedFinalization,
	markFinalizing,
	newTinOperation,
	tinOperationEvent,
	toPublicTinOperation,
	toTinOperationView,
	type CrankerStanding,
	type StagePolicy,
	type TinOperationRecord,
	type TinOperationRequest,
	type TinOperationState
} from "../lib/tin-operations";
import { StoreUnavailableError, listInPages, type Collection, type Where } from "../lib/store";
import { checkValidityWindow, isOwnerSigned } from "../lib/verification";
import { eventNotifier, outboxMixin } from "../mixins/outbox.mixin";
import { storeMixin } from "../mixins/store.mixin";
import { crankerSignedMixin } from "../mixins/cranker-signed.mixin";
import { sweeperMixin } from "../mixins/sweeper.mixin";
import { sweepMetrics } from "./metrics";
import { internal, workersOnly } from "./internal";
import { processChain } from "./process-chain";

const ROUTES_COLLECTION = {
	name: "registry_routes",
	fields: { tin: "text", active: "integer", routeVersion: "integer" },
	unique: [["tin"]]
} as const;

const OPERATIONS_COLLECTION = {
	name: "tin_operations",
	fields: { operationId: "text", status: "text", intentType: "text", createdAt: "text", verifiedBy: "text", feeCommittedBy: "text", finalizing: "text" },
	unique: [["operationId"]],
	// One per filter of the public list (status, intent_type, both, neither), each ending in its order,
	// one for a submitter's registry work (anyone can add operations, so no read may scan them), and
	// one of the begun finalizations, for the sweep that finishes abandoned ones.
	indexes: [["status", "createdAt"], ["createdAt"], ["intentType", "createdAt"], ["status", "intentType", "createdAt"], ["feeCommittedBy", "status", "createdAt"], ["finalizing"]],
	// Each status change writes its event in the same write (tinOperationEvent).
	outbox: true,
	// What the public list and the work lists answer for each operation, kept as text by every write.
	views: { public: { version: 1, build: toPublicTinOperation }, worker: { version: 1, build: toTinOperationView } },
	// Every stage that changes a view moves the status (marking a finalization changes no view).
	viewStamp: ["status"]
} as const;

/**
 * The version of its TIN's route each finalized operation made, written once: unique by operation
 * (a second finisher of the same operation finds it) and by TIN and version (two operations of one
 * TIN take two versions). A finisher that resumes late, after later operations, cannot write its
 * route again on top of theirs: the route only moves forward to a version taken here.
 */
const ROUTE_VERSIONS_COLLECTION = {
	name: "registry_route_versions",
	fields: { tin: "text", routeVersion: "integer" },
	unique: [["tin", "routeVersion"]],
	// The newest version of a TIN (the unique group's index may be partial: no list walks it).
	indexes: [["tin", "routeVersion"]]
} as const;

/**
 * Who a TIN belongs to before it has a route: a create that was handed it, or the genesis seed
 * that is importing it. Written once (its id is the TIN), so an import and an allocation of one
 * TIN, even at the same moment on two replicas, cannot both have it (SPEC §5: a TIN is never
 * allocated twice).
 */
const TIN_CLAIMS_COLLECTION = { name: "registry_tin_claims", fields: { by: "text" }, indexes: [["by"]] } as const;

/** Genesis claims read per page as a process learns the seeded runs. */
const SEEDED_CLAIMS_PAGE = 1000;

/**
 * Per TIN, the newest update its owner signed (by `issuedAt`, then arrival), raised by
 * compare-and-set as updates are submitted: one read tells whether an update is superseded,
 * whatever became of the newer one. An update the owner signed later never lets an earlier one go
 * live, even once it failed: else a Cranker that can fail an operation could fail the owner's
 * newer update and finish the older one, bringing back a route the owner moved away from.
 */
const UPDATE_HEADS_COLLECTION = { name: "registry_update_heads", fields: { operationRecordId: "text" } } as const;

interface UpdateHead {
	/** The TIN. */
	id: string;
	operationRecordId: string;
	issuedAt: string;
	createdAt: string;
}

/** Compare-and-set rounds of raiseUpdateHead before it gives up (503, retried by the caller). */
const HEAD_RAISE_ATTEMPTS = 50;

/** Whether `a` was signed after `b` by its owner (or at the same instant, and arrived after). */
const signedAfter = (a: { issuedAt: string; createdAt: string }, b: TinOperationRecord) =>
	a.issuedAt > b.request.issuedAt || (a.issuedAt === b.request.issuedAt && a.createdAt > b.createdAt);

/** Seed entries imported at once. */
const GENESIS_SLICE = 100;

interface TinClaim {
	id: string;
	by: "create" | "genesis";
}

/** A finalization that must not begin: its update was signed before the one that set the TIN's newest route (`by`). */
class Superseded extends Error {
	constructor(readonly by: TinOperationRecord) {
		super(`superseded by ${by.operationId}`);
	}
}

/** A finalized operation's route version (its id is the operation's). */
interface RouteVersionRecord {
	id: string;
	tin: string;
	routeVersion: number;
	route: RouteRecord;
}

/** A finalization marked this long ago is abandoned (its replica crashed): a live one takes milliseconds, 8 s at worst on MongoDB. */
const FINALIZATION_ABANDONED_MS = 60_000;
/**
 * How long after its `submitted` report a submitted operation may be finalized: its transaction,
 * sent then on a recent blockhash, lands within a couple of minutes or never; the rest is room for
 * a Node, its chain endpoint or the submitter that was down when the report was due.
 */
const FINALIZE_WITHIN_MS = 60 * 60_000;

/**
 * Abandoned finalizations read at a time: each read stays bounded, though a sweep reads on until
 * it has tried every one (each must be finished anyway, and they are few: each needs a fee and a
 * submission).
 */
const FINALIZATION_SWEEP_PAGE = 100;

/**
 * Some abandoned finalizations could not be finished; the others were, and the next sweep tries
 * these again. The message names the oldest, not how many (scs_sweep_results_total counts them), so
 * that the sweeper tells the same failure once a minute, not at every sweep.
 */
class UnfinishedFinalizationsError extends Error {
	constructor(
		readonly count: number,
		oldestId: string,
		override readonly cause: Error
	) {
		super(`TIN finalizations left half-done could not be finished (the next sweep tries again); the oldest: ${oldestId}: ${cause.message}`);
		this.name = "UnfinishedFinalizationsError";
	}
}

/** SPEC §5: the first TIN of the sequence is tinFromSequence(100000000) = 1000000008. */
const FIRST_SEQUENCE = 100_000_000;
const LAST_SEQUENCE = 999_999_999;

interface SequenceDoc {
	id: string;
	next: number;
}

/** Action names of the stage routes: "fee-committed" → "feeCommitted". */
const stageAction = (stage: TinStage) => stage.replace(/-([a-z])/g, (_m, c: string) => c.toUpperCase());

interface TinSettings {
	/** Who may take a stage, and the fees (SPEC §5). */
	policy: StagePolicy;
	registrySeedFile: Config["registrySeedFile"];
	/** How long after its `submitted` report a submitted operation may still be finalized. */
	finalizeWithinMs: number;
}

interface TinVars {
	routes: Collection<RouteRecord>;
	routeVersions: Collection<RouteVersionRecord>;
	operations: Collection<TinOperationRecord>;
	sequence: Collection<SequenceDoc>;
	claims: Collection<TinClaim>;
	updateHeads: Collection<UpdateHead>;
	/**
	 * The sequence numbers of the seeded TINs (the genesis claims), as runs: an allocation steps
	 * over a run in one compare-and-set, so that the first create after a large seed costs no more
	 * than any other, on every replica, whether it imported the seed or not.
	 */
	seededRuns: SequenceRun[];
	/** The read of the genesis claims under way, and the one waiting to start after it (readSeededRuns). */
	seededRunsRead: Promise<void> | null;
	seededRunsNext: Promise<void> | null;
	/** The Node's own view of the chain; without SOLANA_RPC_URL a finalization is not checked on chain. */
	chain: NodeChain | null;
	/** Tells the gateways that new TIN operation events are committed (coalesced: see eventNotifier). */
	notifyEvents: () => void;
}

type StageParams = { id: string; crankerPubkey: string; transactionSignature?: string; feeAmount?: string; reason?: string };

interface TinMethods {
	importGenesis(file: string): Promise<number>;
	readSeededRuns(): Promise<void>;
	addGenesisClaims(): Promise<void>;
	claimForGenesis(tin: string): Promise<boolean>;
	activeRoute(tin: string): Promise<RouteRecord | null>;
	allocateTin(): Promise<string>;
	mustGetOperation(id: string): Promise<TinOperationRecord>;
	submit(ctx: Context<TinOperationRequest, { $statusCode?: number }>): Promise<ReturnType<typeof toPublicTinOperation>>;
	replay(ctx: Context<unknown, { $statusCode?: number }>, existing: TinOperationRecord, requestDigest: string): Promise<ReturnType<typeof toPublicTinOperation>>;
	moveStage(ctx: Context<StageParams>, stage: TinStage): Promise<ReturnType<typeof toTinOperationView>>;
	raiseUpdateHead(record: TinOperationRecord): Promise<void>;
	supersedingOperation(record: TinOperationRecord, routes: readonly (RouteRecord | null | undefined)[]): Promise<TinOperationRecord | null>;
	failSuperseded(record: TinOperationRecord, by: TinOperationRecord): Promise<never>;
	failOperation(record: TinOperationRecord, reason: string, refusal: string): Promise<never>;
	finalize(record: TinOperationRecord, finalized: TinOperationRecord): Promise<TinOperationRecord>;
	activate(marked: TinOperationRecord, finalized: TinOperationRecord): Promise<{ record: TinOperationRecord; moved: boolean }>;
	routeVersionOf(marked: TinOperationRecord, at: string, beginning?: boolean): Promise<RouteVersionRecord>;
	newestClaim(tin: string): Promise<RouteVersionRecord | null>;
	newestRoutes(tin: string): Promise<(RouteRecord | null | undefined)[]>;
	advanceRoute(version: RouteVersionRecord): Promise<boolean>;
	reconcile(markedBefore: Date): Promise<number>;
	observeRegistrySubmission(record: TinOperationRecord): Promise<ChainObservation[] | null>;
	workList(where: Where, limit: number, meta: TakesJsonTexts): Promise<string[] | unknown[]>;
}

type TinThis = Service<TinSettings> & TinVars & TinMethods;

const stageActions = Object.fromEntries(
	TIN_STAGES.map(stage => [
		stageAction(stage),
		workersOnly({
			params: tinStageParams,
			handler(this: TinThis, ctx: Context<StageParams>) {
				return this.moveStage(ctx, stage);
			}
		})
	])
);

export function tinService(config: Config): ServiceSchema<TinSettings, TinMethods, TinVars, TinThis> {
	return {
		name: "tin",
		dependencies: ["crankers"],
		settings: {
			policy: { allowSingleCrankerTins: config.allowSingleCrankerTins, createFee: config.tinCreateFee, updateFee: config.tinUpdateFee },
			registrySeedFile: config.registrySeedFile,
			finalizeWithinMs: FINALIZE_WITHIN_MS
		},
		mixins: [
			crankerSignedMixin(config.publicBaseUrl, TIN_STAGES.map(stageAction)),
			outboxMixin<TinThis>("tin_operations", config, service => service.operations),
			// A replica that crashed while finalizing leaves its mark while the others run on.
			sweeperMixin<TinThis>("tin finalization", config.sweepIntervalMs, function (this: TinThis) {
				return this.reconcile(new Date(Date.now() - FINALIZATION_ABANDONED_MS));
			}),
			// The store last: Moleculer starts a service's last mixin first and stops it last (store.mixin.ts).
			storeMixin<TinThis>(config, "tin", async function (this: TinThis, store) {
				this.routes = await store.collection<RouteRecord>(ROUTES_COLLECTION);
				this.routeVersions = await store.collection<RouteVersionRecord>(ROUTE_VERSIONS_COLLECTION);
				this.operations = await store.collection<TinOperationRecord>(OPERATIONS_COLLECTION);
				this.sequence = await store.collection<SequenceDoc>({ name: "tin_sequence", fields: { next: "integer" } });
				this.claims = await store.collection<TinClaim>(TIN_CLAIMS_COLLECTION);
				this.updateHeads = await store.collection<UpdateHead>(UPDATE_HEADS_COLLECTION);
			})
		],

		actions: {
			/** Internal: the active route of a TIN, or null. */
			resolve: internal({
				params: { tin: tin() },
				async handler(this: TinThis, ctx: Context<{ tin: string }>): Promise<ActiveRoute | null> {
					const route = await this.activeRoute(ctx.params.tin);
					return route && { tin: route.tin, routeCommitment: route.routeCommitment, routeVersion: route.routeVersion, policyCommitment: route.policyCommitment };
				}
			}),

			/** Internal: proves the registry can be read (one bounded read); 503 REGISTRY_INVALID otherwise. */
			check: internal({
				params: {},
				async handler(this: TinThis): Promise<true> {
					try {
						await this.routes.list({ limit: 1 });
						return true;
					} catch {
						throw new ServiceError("REGISTRY_INVALID", "The registry cannot be read");
					}
				}
			}),

			/** GET /registry/tins/{tin} */
			getRoute: {
				params: { $$strict: true, tin: tin() },
				async handler(this: TinThis, ctx: Context<{ tin: string }>) {
					const route = await this.activeRoute(ctx.params.tin);
					if (!route) throw new ServiceError("NOT_FOUND", `TIN ${ctx.params.tin} has no active route`);
					return toRouteView(route);
				}
			},

			/** POST /tin-operations */
			submitOperation: {
				params: createTinOperationParams,
				handler(this: TinThis, ctx: Context<TinOperationRequest, { $statusCode?: number }>) {
					return this.submit(ctx);
				}
			},

			/** GET /tin-operations?status=&intent_type=&limit= (newest first), the kept public views' JSON texts. */
			listOperations: answersJsonTexts({
				params: {
					$$strict: true,
					status: { type: "enum", values: [...TIN_OPERATION_STATES], optional: true },
					intent_type: { type: "enum", values: ["create", "update"], optional: true },
					limit: limit()
				},
				async handler(this: TinThis, ctx: Context<{ status?: TinOperationState; intent_type?: string; limit: number }, TakesJsonTexts>) {
					const where: Where = { ...(ctx.params.status ? { status: ctx.params.status } : {}), ...(ctx.params.intent_type ? { intentType: ctx.params.intent_type } : {}) };
					return forCaller((await this.operations.listViews("public", { where, orderBy: ["createdAt", "desc"], limit: ctx.params.limit })).map(row => row.json), ctx.meta);
				}
			}),

			/** GET /tin-operations/{id} */
			getOperation: {
				params: { $$strict: true, id: { type: "string", max: 64 } },
				async handler(this: TinThis, ctx: Context<{ id: string }>) {
					return toPublicTinOperation(await this.mustGetOperation(ctx.params.id));
				}
			},

			/** GET /tin-operations/verification-work */
			verificationWork: workersOnly(answersJsonTexts({
				params: { $$strict: true, limit: limit() },
				handler(this: TinThis, ctx: Context<{ limit: number }, TakesJsonTexts>) {
					return this.workList({ status: "PENDING_VERIFICATION" }, ctx.params.limit, ctx.meta);
				}
			})),

			/** GET /tin-operations/fee-work?operator_pubkey= : VERIFIED, without those the operator verified. */
			feeWork: workersOnly(answersJsonTexts({
				params: { $$strict: true, limit: limit(), operator_pubkey: { ...address(), optional: true } },
				handler(this: TinThis, ctx: Context<{ limit: number; operator_pubkey?: string }, TakesJsonTexts>) {
					const operator = ctx.params.operator_pubkey;
					return this.workList({ status: "VERIFIED", ...(operator ? { verifiedBy: { ne: operator } } : {}) }, ctx.params.limit, ctx.meta);
				}
			})),

			/** GET /tin-operations/registry-work?operator_pubkey= : FEE_COMMITTED and SUBMITTED, only the operator's fees. */
			registryWork: workersOnly(answersJsonTexts({
				params: { $$strict: true, limit: limit(), operator_pubkey: { ...address(), optional: true } },
				handler(this: TinThis, ctx: Context<{ limit: number; operator_pubkey?: string }, TakesJsonTexts>) {
					const operator = ctx.params.operator_pubkey;
					return this.workList({ status: { in: ["FEE_COMMITTED", "SUBMITTED"] }, ...(operator ? { feeCommittedBy: operator } : {}) }, ctx.params.limit, ctx.meta);
				}
			})),

			/** POST /tin-operations/{id}/<stage> */
			...stageActions
		},

		methods: {
			async importGenesis(file) {
				let entries;
				try {
					entries = parseRegistrySeed(fs.readFileSync(file, "utf8"));
				} catch (err) {
					throw new ConfigError(`REGISTRY_SEED_FILE ${file} is invalid: ${(err as Error).message}`);
				}
				const updatedAt = new Date().toISOString();
				let imported = 0;
				const claimed: number[] = [];
				// In slices, so that a large seed shares commits instead of waiting out one per route.
				for (let start = 0; start < entries.length; start += GENESIS_SLICE) {
					const results = await Promise.all(
						entries.slice(start, start + GENESIS_SLICE).map(async entry => {
							if (!(await this.claimForGenesis(entry.tin))) {
								this.logger.warn(`Registry seed ${file}: TIN ${entry.tin} was handed out by the sequence (to a create, which may have failed), so it is not imported.`);
								return false;
							}
							claimed.push(sequenceOf(entry.tin));
							// insert() leaves an existing TIN as it is: importing twice changes nothing.
							return this.routes.insert({ ...entry, id: entry.tin, ownerWallet: entry.ownerWallet ?? null, active: true, updatedAt });
						})
					);
					imported += results.filter(Boolean).length;
				}
				this.seededRuns = withSequences(this.seededRuns, claimed);
				return imported;
			},

			/**
			 * Adds the genesis claims to the seeded runs by a read that starts after this call: one
			 * under way may have passed the claim its caller met. Callers that come while one waits to
			 * start share it.
			 */
			readSeededRuns() {
				return (this.seededRunsNext ??= (this.seededRunsRead ?? Promise.resolve()).then(() => {
					this.seededRunsNext = null;
					return (this.seededRunsRead = this.addGenesisClaims().finally(() => (this.seededRunsRead = null)));
				}));
			},

			/** The genesis claims in the store, read in pages, added to the seeded runs (they only grow). */
			async addGenesisClaims() {
				const seeded: number[] = [];
				try {
					for await (const claim of listInPages(this.claims, { where: { by: "genesis" }, orderBy: ["id", "asc"] }, SEEDED_CLAIMS_PAGE)) seeded.push(sequenceOf(claim.id));
				} catch (err) {
					// A cost, not a fault: creates step over the seeded TINs they meet one at a time meanwhile.
					return void this.logger.warn(`The seeded TINs could not be read (${(err as Error).message}); creates step over those they meet one at a time until the next read`);
				}
				this.seededRuns = withSequences(this.seededRuns, seeded);
			},

			/**
			 * Whether the seed may have `tin`: claimed for genesis now or before (an import that stopped
			 * before its route), or a route already there (left as it is), and not a create's. A TIN the
			 * sequence passed without a claim was handed out by a version of this service that kept none.
			 */
			async claimForGenesis(value) {
				for (;;) {
					const claim = await this.claims.get(value);
					if (claim) return claim.by === "genesis";
					// Imported before claims were kept: claimed now, so that the replicas' seeded runs, read
					// from the claims, hold it (a create would otherwise walk such a run one TIN at a time).
					if (await this.routes.get(value)) {
						await this.claims.insert({ id: value, by: "genesis" });
						return true;
					}
					const next = (await this.sequence.get("tin"))?.next ?? FIRST_SEQUENCE;
					if (Number(value.slice(0, 9)) < next) return false;
					// Refused: an allocation claimed it first, since the counter was read.
					if (await this.claims.insert({ id: value, by: "genesis" })) return true;
				}
			},

			async activeRoute(value) {
				const route = await this.routes.get(value);
				return route?.active ? route : null;
			},

			/**
			 * The next TIN of the sequence that the seed does not have; each is handed out once
			 * (compare-and-set on the counter), and claimed before it is (claimForGenesis).
			 */
			async allocateTin() {
				for (let runsRead = false; ; ) {
					const current = await this.sequence.get("tin");
					const n = current?.next ?? FIRST_SEQUENCE;
					// A seeded TIN is never a create's: the counter passes a run of them at once.
					const free = firstOutside(this.seededRuns, n);
					// Past 999999999 there is no 9-digit sequence number left: a clear refusal, and the counter stays.
					if (free > LAST_SEQUENCE) throw new ServiceError("LIMIT_REACHED", "Every TIN of the sequence has been allocated: no create can be taken");
					const taken = current ? await this.sequence.update("tin", { next: n }, { id: "tin", next: free + 1 }) : await this.sequence.insert({ id: "tin", next: free + 1 });
					if (!taken) continue; // another allocation moved the counter first
					const candidate = tinFromSequence(free);
					// Genesis routes keep theirs: imported (before claims were kept), or being imported.
					if (!(await this.routes.get(candidate)) && (await this.claims.insert({ id: candidate, by: "create" }))) return candidate;
					// A seeded TIN unknown to this process: another replica imported a seed since its runs were read.
					if (!runsRead && (await this.claims.get(candidate))?.by === "genesis") {
						runsRead = true;
						await this.readSeededRuns();
					}
				}
			},

			async mustGetOperation(id) {
				const record = await this.operations.get(id);
				if (!record) throw new ServiceError("NOT_FOUND", `TIN operation ${id} not found`);
				return record;
			},

			async submit(ctx) {
				const request = ctx.params;
				// Part of the schema check, which comes before idempotency.
				if ((request.intentType === "create") !== (request.tin === undefined))
					throw new ServiceError("VALIDATION_ERROR", "tin is absent for a create and required for an update", [
						{ type: "tin", field: "tin", message: "The 'tin' field is absent for a create and required for an update." }
					]);
				const digest = requestDigest(request);
				const existing = await this.operations.findOne({ operationId: request.operationId });
				if (existing) return this.replay(ctx, existing, digest);

				if (!isOwnerSigned(request))
					throw new ServiceError("INVALID_SIGNATURE", "ownerSignature is not ownerWallet's signature of the operation message");
				const now = Date.now();
				const window = checkValidityWindow(request.issuedAt, request.expiresAt, now);
				if (!window.ok) throw new ServiceError(window.reason, window.detail);
				if (request.intentType === "update") {
					const route = await this.activeRoute(request.tin!);
					if (!route) throw new ServiceError("UNKNOWN_TIN", `TIN ${request.tin} is not in the registry`);
					if (route.ownerWallet !== request.ownerWallet) throw new ServiceError("NOT_OWNER", "ownerWallet does not own this TIN's route");
				}

				const record = newTinOperation(newId("top"), request, request.tin ?? (await this.allocateTin()), digest, new Date(now).toISOString());
				if (await this.operations.insert(record, tinOperationEvent(null, record))) {
					if (record.intentType === "update") await this.raiseUpdateHead(record);
					this.notifyEvents();
					ctx.meta.$statusCode = 201;
					return toPublicTinOperation(record);
				}
				// A concurrent submission of the same operationId won; its TIN (if any) stays burned, never reused.
				const winner = await this.operations.findOne({ operationId: request.operationId });
				// MongoDB can refuse the duplicate before a majority read shows the winner: ask again, not a 500.
				if (!winner) throw new ServiceError("NOT_READY", "Another submission of this operationId is being stored; retry later", { operationId: request.operationId });
				return this.replay(ctx, winner, digest);
			},

			async replay(ctx, existing, requestDigest) {
				if (existing.requestDigest !== requestDigest)
					throw new ServiceError("IDEMPOTENCY_CONFLICT", "operationId was already used with a different request body", { operationId: existing.operationId });
				// The first submission may have stopped before raising it.
				if (existing.intentType === "update") await this.raiseUpdateHead(existing);
				ctx.meta.$statusCode = 200;
				return toPublicTinOperation(existing);
			},

			async moveStage(ctx, stage) {
				const { id, ...request } = ctx.params;
				const record = await this.mustGetOperation(id);
				const standing = await ctx.call<CrankerStanding, object>("crankers.standing", { crankerPubkey: request.crankerPubkey });
				const now = new Date();
				const decision = decideStage(record, stage, request, standing, this.settings.policy, now);
				if (decision.kind === "replay") return toTinOperationView(record);
				// A submission that stopped between storing the update and raising the head: raised now,
				// before any stage, failing included (else failing it would let an older one through).
				if (record.intentType === "update") await this.raiseUpdateHead(record);
				// The owner's signature holds until its expiresAt: no stage before the registry transaction moves it on after that.
				if ((stage === "verified" || stage === "fee-committed" || stage === "submitted") && Date.parse(record.request.expiresAt) <= now.getTime())
					return this.failOperation(record, `EXPIRED: the owner's signature expired at ${record.request.expiresAt}`, "The operation's signed expiresAt has passed");
				// A submitter that held `finalized` back would choose when the route goes live, weeks later:
				// it must come within the window of the `submitted` report, itself before expiresAt. (One
				// that sends its transaction long before reporting it still chooses, until expiresAt plus
				// the window: the owner's signed expiry bounds it.) One whose finalization began (marked)
				// is finished whenever.
				if (stage === "finalized" && !record.finalizing) {
					const reportedAt = Date.parse(record.history.find(entry => entry.status === "SUBMITTED")?.at ?? record.updatedAt);
					if (reportedAt + this.settings.finalizeWithinMs <= now.getTime())
						return this.failOperation(record, `EXPIRED: not finalized within ${Math.round(this.settings.finalizeWithinMs / 1000)} s of its submission`, "The operation was not finalized in time");
				}
				// Before its fee is paid, not only at its finalization: an update already superseded ends here.
				if (stage === "fee-committed" && record.intentType === "update") {
					const later = await this.supersedingOperation(record, await this.newestRoutes(record.tin));
					if (later) return this.failSuperseded(record, later);
				}
				if (stage === "finalized") {
					// As for an intent's CONFIRMED: the route goes live only on a landed registry transaction.
					const onChainChecked = judgeChainEvidence("landed", await this.observeRegistrySubmission(record), undefined);
					const history = [...decision.next.history];
					history[history.length - 1] = { ...history[history.length - 1], onChainChecked };
					return toTinOperationView(await this.finalize(record, { ...decision.next, history }));
				}
				// `finalizing: null` keeps every other stage off an operation whose finalization has begun.
				if (await this.operations.update(record.id, { status: record.status, finalizing: null }, decision.next, tinOperationEvent(record, decision.next))) {
					this.notifyEvents();
					return toTinOperationView(decision.next);
				}
				throw new ServiceError("INVALID_TRANSITION", "The operation moved while this stage was applied", { status: (await this.mustGetOperation(id)).status });
			},

			/**
			 * The update `record` must not replace: the TIN's update head (the newest its owner signed,
			 * whatever became of it), or the update that wrote one of `routes` (the TIN's live route and
			 * the newest version claimed), not failed, when its owner signed it after `record` (or at
			 * the same instant, and it was recorded after). Otherwise a submitter that held an older
			 * update back could finalize it after the owner had moved on (away from a compromised route,
			 * say) and bring the old route back. A route writer whose operation failed before its mark
			 * never went live, and blocks nothing. Null when none is later.
			 */
			async supersedingOperation(record, routes) {
				const head = await this.updateHeads.get(record.tin);
				if (head && head.operationRecordId !== record.id && signedAfter(head, record)) {
					const newer = await this.operations.get(head.operationRecordId);
					if (newer) return newer;
				}
				const writers = new Set(routes.map(route => route?.lastOperationId).filter((id): id is string => id !== undefined && id !== record.id));
				for (const id of writers) {
					const writer = await this.operations.get(id);
					// A create came first whatever the clocks said: an update needs its TIN.
					if (!writer || writer.intentType !== "update" || writer.status === "FAILED" || writer.status === "REJECTED") continue;
					if (signedAfter({ issuedAt: writer.request.issuedAt, createdAt: writer.createdAt }, record)) return writer;
				}
				return null;
			},

			/** Ends `record` FAILED (SUPERSEDED) and refuses its stage (409). */
			failSuperseded(record, later) {
				return this.failOperation(
					record,
					`SUPERSEDED: ${later.operationId}, an update of this TIN its owner signed later, came first`,
					"An update of this TIN that its owner signed after this one came first: this one does not replace it"
				);
			},

			/** Ends `record` FAILED with `reason`, as one compare-and-set, and refuses the stage asked (409, `refusal`). */
			async failOperation(record, reason, refusal) {
				const failed = applyStage(record, "FAILED", new Date().toISOString(), undefined, { failureReason: reason }, reason);
				if (await this.operations.update(record.id, { status: record.status, finalizing: null }, failed, tinOperationEvent(record, failed))) this.notifyEvents();
				const now = await this.mustGetOperation(record.id);
				throw new ServiceError("INVALID_TRANSITION", refusal, { status: now.status, ...(now.failureReason !== undefined ? { failureReason: now.failureReason } : {}) });
			},

			/**
			 * Makes `record` (a stored update) its TIN's update head when its owner signed it after the
			 * head's, by compare-and-set, tried again while other submissions move the head (each lost
			 * race is another's progress; a replica's read that lags its write is waited out, briefly).
			 */
			async raiseUpdateHead(record) {
				const head: UpdateHead = { id: record.tin, operationRecordId: record.id, issuedAt: record.request.issuedAt, createdAt: record.createdAt };
				for (let attempt = 0; ; attempt++) {
					if (attempt === HEAD_RAISE_ATTEMPTS) throw new ServiceError("NOT_READY", "The TIN's update head is moving too fast to be raised; retry");
					if (attempt > 0) await sleep(Math.random() * 10 * attempt);
					const current = await this.updateHeads.get(record.tin);
					if (!current) {
						if (await this.updateHeads.insert(head)) return;
					} else if (!signedAfter(current, record) && current.operationRecordId !== record.id) {
						if (await this.updateHeads.update(current.id, { operationRecordId: current.operationRecordId }, head)) return;
					} else return;
				}
			},

			/**
			 * Finalizes in steps, each a compare-and-set: take the operation's route version (so that
			 * versions follow the order finalizations began in, whenever each ends), mark the SUBMITTED
			 * operation `finalizing` with the FINALIZED entry it gets (from then on no other stage can move
			 * it), then activate: the route, then the operation. A crash after the mark is finished by the
			 * next start, the sweep, or the Cranker's finalize sent again, so a route never goes live for
			 * an operation that ends otherwise.
			 */
			async finalize(record, finalized) {
				let version: RouteVersionRecord;
				try {
					version = await this.routeVersionOf(record, finalized.updatedAt, true);
				} catch (err) {
					if (err instanceof Superseded) return this.failSuperseded(record, err.by);
					throw err;
				}
				const marked = markFinalizing(record, finalized);
				if (await this.operations.update(record.id, { status: "SUBMITTED", finalizing: null }, marked)) return (await this.activate(marked, finalized)).record;
				const current = await this.mustGetOperation(record.id);
				if (current.status === "FINALIZED") return current;
				// Marked already (a finalization under way, or left by a replica that died): finished alike.
				if (current.status === "SUBMITTED" && current.finalizing !== undefined) return (await this.activate(current, finishedFinalization(current))).record;
				// Unmarked and SUBMITTED still, though the mark lost: a read behind the write that won (MongoDB's
				// majority reads lag the primary). That finisher holds the version: it stays, and this call retries.
				if (current.status === "SUBMITTED") throw new ServiceError("NOT_READY", "The operation is being finalized by another call; retry for its outcome", { status: current.status });
				// It moved (a racing stage failed it): it never takes the version; a gap is left at worst.
				await this.routeVersions.remove(version.id);
				throw new ServiceError("INVALID_TRANSITION", "The operation moved while this stage was applied", { status: current.status });
			},

			/**
			 * Steps two and three of finalize(), each idempotent, so that any number of finishers of one
			 * operation, at any time, end alike: its route version taken once, the route moved forward to
			 * it (never back), the operation FINALIZED with that version; `moved` when this call moved it.
			 */
			async activate(marked, finalized) {
				let version = await this.routeVersionOf(marked, finalized.updatedAt);
				while (!(await this.advanceRoute(version))) {
					// That version went live for another operation, by a writer of the previous version (a
					// rolling update), which keeps no version records: this one takes the next.
					await this.routeVersions.remove(version.id);
					version = await this.routeVersionOf(marked, finalized.updatedAt);
				}
				const done: TinOperationRecord = { ...finalized, routeVersion: version.routeVersion };
				if (!(await this.operations.update(marked.id, { status: "SUBMITTED", finalizing: marked.finalizing ?? null }, done, tinOperationEvent(marked, done)))) return { record: await this.mustGetOperation(marked.id), moved: false };
				this.notifyEvents();
				this.broker.broadcast("registry.routeChanged", { tin: marked.tin });
				return { record: done, moved: true };
			},

			/**
			 * The route version `marked` made, or takes now: the one after the newest of its TIN. As a
			 * finalization begins, none is claimed for an update signed before the newest route's: it
			 * throws Superseded, naming that route's operation. The check and the claim are one step, since
			 * a version is claimed by a unique insert: a claim that lost to another is checked again
			 * against the winner.
			 */
			async routeVersionOf(marked, at, beginning = false) {
				for (;;) {
					const taken = await this.routeVersions.get(marked.id);
					if (taken) return taken;
					const current = await this.routes.get(marked.tin);
					// A route an earlier version of this service wrote, which kept no version records: its
					// record is written now, so that no later operation takes that version again.
					if (current?.lastOperationId && current.lastOperationId !== marked.id && !(await this.routeVersions.get(current.lastOperationId)))
						await this.routeVersions.insert({ id: current.lastOperationId, tin: current.tin, routeVersion: current.routeVersion, route: current });
					if (current?.lastOperationId === marked.id) {
						const legacy = { id: marked.id, tin: marked.tin, routeVersion: current.routeVersion, route: current };
						if (await this.routeVersions.insert(legacy)) return legacy;
						// Another operation took that version, which went live for this one: that one takes the next.
						const [other] = await this.routeVersions.list({ where: { tin: marked.tin, routeVersion: current.routeVersion }, limit: 1 });
						if (other && other.id !== marked.id) await this.routeVersions.remove(other.id);
						continue;
					}
					const newest = await this.newestClaim(marked.tin);
					const latest = newest && newest.routeVersion > (current?.routeVersion ?? 0) ? newest.route : current;
					if (beginning) {
						const later = await this.supersedingOperation(marked, [current, newest?.route]);
						if (later) throw new Superseded(later);
					}
					const route = finalizedRoute(latest, marked, at);
					const version = { id: marked.id, tin: marked.tin, routeVersion: route.routeVersion, route };
					// Refused: another finisher of this operation took its version, or another operation this one.
					if (await this.routeVersions.insert(version)) return version;
				}
			},

			/** The newest route version claimed for `tin`, live or going live; null when none is. */
			async newestClaim(tin) {
				const [newest] = await this.routeVersions.list({ where: { tin }, orderBy: ["routeVersion", "desc"], limit: 1 });
				return newest ?? null;
			},

			/** The TIN's live route and its newest claimed one: what supersedingOperation checks an update against. */
			async newestRoutes(tin) {
				const [current, newest] = await Promise.all([this.routes.get(tin), this.newestClaim(tin)]);
				return [current, newest?.route];
			},

			/**
			 * Moves the TIN's route to `version`, unless it is there or further already; false when that
			 * version went live for another operation (written by the previous version of this service).
			 */
			async advanceRoute(version) {
				for (;;) {
					const current = await this.routes.get(version.tin);
					if (current?.routeVersion === version.routeVersion && current.lastOperationId !== version.id) return false;
					if (current && current.routeVersion >= version.routeVersion) return true;
					if (current ? await this.routes.update(version.tin, { routeVersion: current.routeVersion }, version.route) : await this.routes.insert(version.route)) return true;
				}
			},

			/**
			 * Finishes the finalizations marked before `markedBefore`, which a crash interrupted: each ends
			 * as its own would have (finishedFinalization), so finishing one still under way is harmless.
			 * Pages of a bounded size, the oldest first. One that fails does not stop the others: the sweep
			 * then fails as a whole (UnfinishedFinalizationsError, counted and logged by the sweeper) once
			 * it has tried them all. A store that cannot answer ends it at once.
			 */
			async reconcile(markedBefore) {
				let finished = 0;
				let failed = 0;
				let oldestFailure: { id: string; error: Error } | undefined;
				try {
					for await (const record of listInPages(this.operations, { where: { finalizing: { lt: markedBefore.toISOString() } }, orderBy: ["finalizing", "asc"] }, FINALIZATION_SWEEP_PAGE)) {
						try {
							// Those the live finisher ends first, meanwhile, are not counted.
							if ((await this.activate(record, finishedFinalization(record))).moved) finished++;
						} catch (err) {
							if (err instanceof StoreUnavailableError) throw err;
							if (!failed++) oldestFailure = { id: record.id, error: err as Error };
						}
					}
				} finally {
					sweepMetrics(this.broker).inc({ sweep: "tin-finalization", result: "finished" }, finished);
					sweepMetrics(this.broker).inc({ sweep: "tin-finalization", result: "failed" }, failed);
					if (finished) this.logger.warn(`Finished ${finished} TIN finalization(s) left half-done.`);
				}
				if (oldestFailure) throw new UnfinishedFinalizationsError(failed, oldestFailure.id, oldestFailure.error);
				return finished;
			},

			/** What the chain shows of the operation's registry transaction (SPEC §5 `finalized`); null without a chain. */
			async observeRegistrySubmission(record) {
				const chain = this.chain;
				if (!chain) return null;
				return readChain(() => chain.observe(record.transactionSignature!, async contents => readRegistrySubmission(contents, record.operationId, record.request.routeCommitment, record.submittedBy!)));
			},

			/** The worker lists: oldest first, the kept worker views (as the caller takes them). */
			async workList(where, limitTo, meta) {
				return forCaller((await this.operations.listViews("worker", { where, orderBy: ["createdAt", "asc"], limit: limitTo })).map(row => row.json), meta);
			}
		} satisfies TinMethods & ThisType<TinThis>,

		created(this: TinThis) {
			this.seededRuns = [];
			this.seededRunsRead = null;
			this.seededRunsNext = null;
			this.chain = processChain(this.broker, config).reads;
			this.notifyEvents = eventNotifier(this.broker, "tin_operations");
		},

		async started(this: TinThis) {
			await this.readSeededRuns();
			if (this.settings.registrySeedFile) {
				const imported = await this.importGenesis(this.settings.registrySeedFile);
				this.logger.info(`Registry seed ${this.settings.registrySeedFile}: ${imported} new route(s) imported.`);
			}
			// One that cannot be finished (the sweep goes on trying) must not keep the owners from starting.
			await this.reconcile(new Date()).catch(err => {
				if (!(err instanceof UnfinishedFinalizationsError)) throw err;
				// The cause's stack too: a fault here may be a bug, not the store.
				this.logger.warn(err.message, err.cause);
			});
		}
	};
}
