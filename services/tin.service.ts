/**
 * tin: owns the registry of TIN routes and the TIN operations pipeline (SPEC §5). Resolves a TIN
 * to its active route, imports the genesis routes at start, takes signed create/update
 * operations, and moves them through the Cranker stages; finalizing activates the route.
 */
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import type { Context, ServiceSchema } from "moleculer";
import { buildTinOperationMessage } from "../lib/canonical";
import { nodeChainReader } from "../lib/chain";
import { judgeChainEvidence, readChain, type ChainObservation } from "../lib/chain-evidence";
import { ConfigError, type Config } from "../lib/config";
import { requestDigest } from "../lib/digest";
import { verifySignature } from "../lib/ed25519";
import { ServiceError } from "../lib/errors";
import { assertSignedBy } from "../lib/http-signature";
import { parseRegistrySeed, toRouteView, type ActiveRoute, type RouteRecord } from "../lib/registry";
import { answersJsonTexts } from "../lib/json-text";
import { TIN_STAGES, address, createTinOperationParams, limit, tin, tinStageParams, type TinStage } from "../lib/schemas";
import { readRegistrySubmission } from "../lib/settlement";
import { tinFromSequence } from "../lib/tin";
import {
	TIN_OPERATION_STATES,
	applyStage,
	decideStage,
	tinOperationEvent,
	toPublicTinOperation,
	toTinOperationView,
	type CrankerStanding,
	type TinOperationRecord,
	type TinOperationRequest,
	type TinOperationState
} from "../lib/tin-operations";
import type { Collection, Where } from "../lib/store";
import { checkValidityWindow } from "../lib/verification";
import { eventNotifier, outboxMixin } from "../mixins/outbox.mixin";
import { storeMixin } from "../mixins/store.mixin";
import { sweepMetrics } from "./metrics";
import { internal } from "./internal";

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
	// and one for a submitter's registry work: anyone can add operations, so no read may scan them.
	indexes: [["status", "createdAt"], ["createdAt"], ["intentType", "createdAt"], ["status", "intentType", "createdAt"], ["feeCommittedBy", "status", "createdAt"]],
	// Each status change writes its event in the same write (tinOperationEvent).
	outbox: true,
	// What the public list and the work lists answer for each operation, kept as text by every write.
	views: { public: { version: 1, build: toPublicTinOperation }, worker: { version: 1, build: toTinOperationView } }
} as const;

/** SPEC §5: the first TIN of the sequence is tinFromSequence(100000000) = 1000000008. */
const FIRST_SEQUENCE = 100_000_000;

interface SequenceDoc {
	id: string;
	next: number;
}

/** Action names of the stage routes: "fee-committed" → "feeCommitted". */
const stageAction = (stage: TinStage) => stage.replace(/-([a-z])/g, (_m, c: string) => c.toUpperCase());

export function tinService(config: Config): ServiceSchema {
	let routes: Collection<RouteRecord>;
	let operations: Collection<TinOperationRecord>;
	let sequence: Collection<SequenceDoc>;
	let broker: Context["broker"];
	/** Tells the gateways that new TIN operation events are committed (coalesced: see eventNotifier). */
	let notifyEvents: () => void = () => {};
	const policy = { allowSingleCrankerTins: config.allowSingleCrankerTins, createFee: config.tinCreateFee, updateFee: config.tinUpdateFee };
	const chain = nodeChainReader(config.solanaRpcUrl);

	async function importGenesis(file: string): Promise<number> {
		let entries;
		try {
			entries = parseRegistrySeed(fs.readFileSync(file, "utf8"));
		} catch (err) {
			throw new ConfigError(`REGISTRY_SEED_FILE ${file} is invalid: ${(err as Error).message}`);
		}
		const updatedAt = new Date().toISOString();
		let imported = 0;
		for (const entry of entries) {
			// insert() leaves an existing TIN as it is: importing twice changes nothing.
			const route: RouteRecord = { ...entry, id: entry.tin, ownerWallet: entry.ownerWallet ?? null, active: true, updatedAt };
			if (await routes.insert(route)) imported++;
		}
		return imported;
	}

	async function activeRoute(value: string): Promise<RouteRecord | null> {
		const route = await routes.get(value);
		return route?.active ? route : null;
	}

	/** The next TIN of the sequence that no route holds; each is handed out once (compare-and-set on the counter). */
	async function allocateTin(): Promise<string> {
		for (;;) {
			const current = await sequence.get("tin");
			const n = current?.next ?? FIRST_SEQUENCE;
			const claimed = current ? await sequence.update("tin", { next: n }, { id: "tin", next: n + 1 }) : await sequence.insert({ id: "tin", next: n + 1 });
			if (!claimed) continue; // another allocation took n first
			const candidate = tinFromSequence(n);
			if (!(await routes.get(candidate))) return candidate; // genesis routes keep theirs
		}
	}

	async function mustGetOperation(id: string): Promise<TinOperationRecord> {
		const record = await operations.get(id);
		if (!record) throw new ServiceError("NOT_FOUND", `TIN operation ${id} not found`);
		return record;
	}

	/**
	 * Finalizes in three steps, each a compare-and-set: mark the SUBMITTED operation `finalizing`
	 * (from then on no other stage can move it), write the route (version + 1, naming the operation
	 * in lastOperationId), then move the operation to FINALIZED. A crash after the mark is finished
	 * by reconcile() at start, so a route never goes live for an operation that ends otherwise.
	 */
	async function finalize(record: TinOperationRecord, finalized: TinOperationRecord): Promise<TinOperationRecord> {
		const marked = { ...record, finalizing: finalized.updatedAt };
		if (!(await operations.update(record.id, { status: "SUBMITTED", finalizing: null }, marked))) {
			const current = await mustGetOperation(record.id);
			if (current.status === "FINALIZED") return current;
			throw new ServiceError("INVALID_TRANSITION", "The operation moved, or is being finalized, while this stage was applied", { status: current.status });
		}
		return activate(marked, finalized);
	}

	/** Steps two and three of finalize(): both idempotent, so a resumed finalization repeats them safely. */
	async function activate(marked: TinOperationRecord, finalized: TinOperationRecord): Promise<TinOperationRecord> {
		const { request } = marked;
		for (;;) {
			const current = await routes.get(marked.tin);
			if (current?.lastOperationId === marked.id) break;
			const next: RouteRecord = {
				id: marked.tin,
				tin: marked.tin,
				routeCommitment: request.routeCommitment,
				routeVersion: (current?.routeVersion ?? 0) + 1,
				policyCommitment: request.policyCommitment,
				ownerWallet: current?.ownerWallet ?? request.ownerWallet,
				active: true,
				updatedAt: finalized.updatedAt,
				lastOperationId: marked.id
			};
			if (current ? await routes.update(marked.tin, { routeVersion: current.routeVersion }, next) : await routes.insert(next)) break;
		}
		const route = (await routes.get(marked.tin))!;
		const done: TinOperationRecord = { ...finalized, routeVersion: route.routeVersion };
		delete done.finalizing;
		if (!(await operations.update(marked.id, { status: "SUBMITTED", finalizing: marked.finalizing ?? null }, done, tinOperationEvent(marked, done)))) return mustGetOperation(marked.id);
		notifyEvents();
		broker.broadcast("registry.routeChanged", { tin: marked.tin });
		return done;
	}

	/** Finishes finalizations a crash interrupted: SUBMITTED operations marked `finalizing`. */
	async function reconcile(): Promise<number> {
		let finished = 0;
		for (const record of await operations.list({ where: { status: "SUBMITTED", finalizing: { ne: null } } })) {
			await activate(record, applyStage(record, "FINALIZED", record.finalizing!, record.submittedBy ?? undefined));
			finished++;
		}
		return finished;
	}

	async function submit(ctx: Context<TinOperationRequest, { $statusCode?: number }>) {
		const request = ctx.params;
		// Part of the schema check, which comes before idempotency.
		if ((request.intentType === "create") !== (request.tin === undefined))
			throw new ServiceError("VALIDATION_ERROR", "tin is absent for a create and required for an update", [
				{ type: "tin", field: "tin", message: "The 'tin' field is absent for a create and required for an update." }
			]);
		const digest = requestDigest(request);
		const existing = await operations.findOne({ operationId: request.operationId });
		if (existing) return replay(ctx, existing, digest);

		if (!verifySignature(request.ownerWallet, buildTinOperationMessage(request), request.ownerSignature))
			throw new ServiceError("INVALID_SIGNATURE", "ownerSignature is not ownerWallet's signature of the operation message");
		const now = Date.now();
		const window = checkValidityWindow(request.issuedAt, request.expiresAt, now);
		if (!window.ok) throw new ServiceError(window.reason, window.detail);
		if (request.intentType === "update") {
			const route = await activeRoute(request.tin!);
			if (!route) throw new ServiceError("UNKNOWN_TIN", `TIN ${request.tin} is not in the registry`);
			if (route.ownerWallet !== request.ownerWallet) throw new ServiceError("NOT_OWNER", "ownerWallet does not own this TIN's route");
		}

		const at = new Date(now).toISOString();
		const record: TinOperationRecord = {
			id: `top_${randomBytes(16).toString("hex")}`,
			operationId: request.operationId,
			intentType: request.intentType,
			tin: request.tin ?? (await allocateTin()),
			status: "PENDING_VERIFICATION",
			requestDigest: digest,
			request,
			history: [{ status: "PENDING_VERIFICATION", at }],
			verifiedBy: null,
			feeCommittedBy: null,
			feeAmount: null,
			submittedBy: null,
			transactionSignature: null,
			createdAt: at,
			updatedAt: at
		};
		if (await operations.insert(record, tinOperationEvent(null, record))) {
			notifyEvents();
			ctx.meta.$statusCode = 201;
			return toPublicTinOperation(record);
		}
		// A concurrent submission of the same operationId won; its TIN (if any) stays burned, never reused.
		return replay(ctx, (await operations.findOne({ operationId: request.operationId }))!, digest);
	}

	function replay(ctx: Context<unknown, { $statusCode?: number }>, existing: TinOperationRecord, requestDigest: string) {
		if (existing.requestDigest !== requestDigest)
			throw new ServiceError("IDEMPOTENCY_CONFLICT", "operationId was already used with a different request body", { operationId: existing.operationId });
		ctx.meta.$statusCode = 200;
		return toPublicTinOperation(existing);
	}

	/** What the chain shows of the operation's registry transaction (SPEC §5 `finalized`); null without a chain. */
	async function observeRegistrySubmission(record: TinOperationRecord): Promise<ChainObservation | null> {
		if (!chain) return null;
		return readChain(() => chain.observe(record.transactionSignature!, async contents => readRegistrySubmission(contents, record.operationId, record.request.routeCommitment)));
	}

	async function moveStage(ctx: Context<{ id: string; crankerPubkey: string; transactionSignature?: string; feeAmount?: string; reason?: string }, { crankerPubkey?: string }>, stage: TinStage) {
		const { id, ...request } = ctx.params;
		assertSignedBy(ctx.meta, request.crankerPubkey);
		const record = await mustGetOperation(id);
		const standing = await ctx.call<CrankerStanding, object>("crankers.standing", { crankerPubkey: request.crankerPubkey });
		const decision = decideStage(record, stage, request, standing, policy, new Date());
		if (decision.kind === "replay") return toTinOperationView(record);
		if (stage === "finalized") {
			// As for an intent's CONFIRMED: the route goes live only on a landed registry transaction.
			const onChainChecked = judgeChainEvidence("landed", await observeRegistrySubmission(record), undefined);
			const history = [...decision.next.history];
			history[history.length - 1] = { ...history[history.length - 1], onChainChecked };
			return toTinOperationView(await finalize(record, { ...decision.next, history }));
		}
		// `finalizing: null` keeps every other stage off an operation whose finalization has begun.
		if (await operations.update(record.id, { status: record.status, finalizing: null }, decision.next, tinOperationEvent(record, decision.next))) {
			notifyEvents();
			return toTinOperationView(decision.next);
		}
		throw new ServiceError("INVALID_TRANSITION", "The operation moved while this stage was applied", { status: (await mustGetOperation(id)).status });
	}

	/** The worker lists: oldest first, the kept worker views' JSON texts. */
	async function workList(where: Where, limitTo: number): Promise<string[]> {
		return (await operations.listViews("worker", { where, orderBy: ["createdAt", "asc"], limit: limitTo })).map(row => row.json);
	}

	const stageActions = Object.fromEntries(
		TIN_STAGES.map(stage => [stageAction(stage), { params: tinStageParams, handler: (ctx: Parameters<typeof moveStage>[0]) => moveStage(ctx, stage) }])
	);

	return {
		name: "tin",
		dependencies: ["crankers"],
		mixins: [
			storeMixin(config, "tin", async store => {
				routes = await store.collection<RouteRecord>(ROUTES_COLLECTION);
				operations = await store.collection<TinOperationRecord>(OPERATIONS_COLLECTION);
				sequence = await store.collection<SequenceDoc>({ name: "tin_sequence", fields: { next: "integer" } });
			}),
			outboxMixin("tin_operations", config.eventRetentionMs, config.sweepIntervalMs, () => operations)
		],

		actions: {
			/** Internal: the active route of a TIN, or null. */
			resolve: internal({
				params: { tin: tin() },
				async handler(ctx: Context<{ tin: string }>): Promise<ActiveRoute | null> {
					const route = await activeRoute(ctx.params.tin);
					return route && { tin: route.tin, routeCommitment: route.routeCommitment, routeVersion: route.routeVersion, policyCommitment: route.policyCommitment };
				}
			}),

			/** Internal: proves the registry can be read (one bounded read); 503 REGISTRY_INVALID otherwise. */
			check: internal({
				params: {},
				async handler(): Promise<true> {
					try {
						await routes.list({ limit: 1 });
						return true;
					} catch {
						throw new ServiceError("REGISTRY_INVALID", "The registry cannot be read");
					}
				}
			}),

			/** GET /registry/tins/{tin} */
			getRoute: {
				params: { $$strict: true, tin: tin() },
				async handler(ctx: Context<{ tin: string }>) {
					const route = await activeRoute(ctx.params.tin);
					if (!route) throw new ServiceError("NOT_FOUND", `TIN ${ctx.params.tin} has no active route`);
					return toRouteView(route);
				}
			},

			/** POST /tin-operations */
			submitOperation: { params: createTinOperationParams, handler: submit },

			/** GET /tin-operations?status=&intent_type=&limit= (newest first) */
			listOperations: answersJsonTexts({
				params: {
					$$strict: true,
					status: { type: "enum", values: [...TIN_OPERATION_STATES], optional: true },
					intent_type: { type: "enum", values: ["create", "update"], optional: true },
					limit: limit()
				},
				async handler(ctx: Context<{ status?: TinOperationState; intent_type?: string; limit: number }>): Promise<string[]> {
					const where: Where = { ...(ctx.params.status ? { status: ctx.params.status } : {}), ...(ctx.params.intent_type ? { intentType: ctx.params.intent_type } : {}) };
					return (await operations.listViews("public", { where, orderBy: ["createdAt", "desc"], limit: ctx.params.limit })).map(row => row.json);
				}
			}),

			/** GET /tin-operations/{id} */
			getOperation: {
				params: { $$strict: true, id: { type: "string", max: 64 } },
				handler: async (ctx: Context<{ id: string }>) => toPublicTinOperation(await mustGetOperation(ctx.params.id))
			},

			/** GET /tin-operations/verification-work */
			verificationWork: answersJsonTexts({
				params: { $$strict: true, limit: limit() },
				handler: (ctx: Context<{ limit: number }>) => workList({ status: "PENDING_VERIFICATION" }, ctx.params.limit)
			}),

			/** GET /tin-operations/fee-work?operator_pubkey= : VERIFIED, without those the operator verified. */
			feeWork: answersJsonTexts({
				params: { $$strict: true, limit: limit(), operator_pubkey: { ...address(), optional: true } },
				handler(ctx: Context<{ limit: number; operator_pubkey?: string }>) {
					const operator = ctx.params.operator_pubkey;
					return workList({ status: "VERIFIED", ...(operator ? { verifiedBy: { ne: operator } } : {}) }, ctx.params.limit);
				}
			}),

			/** GET /tin-operations/registry-work?operator_pubkey= : FEE_COMMITTED and SUBMITTED, only the operator's fees. */
			registryWork: answersJsonTexts({
				params: { $$strict: true, limit: limit(), operator_pubkey: { ...address(), optional: true } },
				handler(ctx: Context<{ limit: number; operator_pubkey?: string }>) {
					const operator = ctx.params.operator_pubkey;
					return workList({ status: { in: ["FEE_COMMITTED", "SUBMITTED"] }, ...(operator ? { feeCommittedBy: operator } : {}) }, ctx.params.limit);
				}
			}),

			/** POST /tin-operations/{id}/<stage> */
			...stageActions
		},

		created() {
			broker = this.broker;
			notifyEvents = eventNotifier(broker, "tin_operations");
		},

		async started() {
			if (config.registrySeedFile) {
				const imported = await importGenesis(config.registrySeedFile);
				this.logger.info(`Registry seed ${config.registrySeedFile}: ${imported} new route(s) imported.`);
			}
			const finished = await reconcile();
			sweepMetrics(this.broker).inc({ sweep: "tin-finalization", result: "finished" }, finished);
			if (finished) this.logger.warn(`Finished ${finished} TIN finalization(s) a previous run left half-done.`);
		}
	};
}
