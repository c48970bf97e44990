/**
 * Schemas of the answers built in the services (epochs, network, crankers, access, receiver) and
 * by the gateway itself (errors, health). The services' handlers return their `Static` types, so
 * the compiler holds each builder to its schema; GET /openapi.json publishes the same schemas.
 * Answers built in a domain module have their schema there (lib/intents.ts, lib/tin-operations.ts,
 * lib/registry.ts, lib/payout.ts).
 */
import { Type, type Static } from "@sinclair/typebox";
import { ERROR_STATUS } from "./errors";
import { INTENT_STATES, PUBLIC_STATUSES } from "./intents";
import { CRANKER_ROLES } from "./schemas";
import { Address, Amount, Count, Dictionary, Hex64, IsoTime, Keyed, Nonce, Nullable, StringEnum, Version, named } from "./wire-formats";

const CountByState = Keyed(INTENT_STATES, Count, { description: "Live intents per internal state" });
const VolumeByMint = Dictionary(Amount, { description: "Amount per token mint, in base units" });

// ---------------------------------------------------------------------------------------------
// The gateway's own answers

/** Every error (SPEC §7); a validation error lists the failing fields in `data`. */
export const ErrorBodySchema = Type.Object(
	{
		name: Type.String({ description: "The type in CamelCase ending in Error" }),
		message: Type.String(),
		code: Type.Integer({ minimum: 400, maximum: 599, description: "The HTTP status" }),
		type: StringEnum(Object.keys(ERROR_STATUS) as (keyof typeof ERROR_STATUS)[]),
		data: Type.Optional(
			Type.Union([
				Type.Array(
					Type.Object({
						type: Type.String(),
						field: Type.String({ description: "The failing field; for fields a schema does not list (objectStrict), their names; `$body`, `$query` when the input as a whole is refused" }),
						message: Type.String(),
						expected: Type.Optional(Type.Unknown()),
						actual: Type.Optional(Type.Unknown())
					}),
					{ description: "VALIDATION_ERROR: the failing fields" }
				),
				Type.Object({}, { additionalProperties: true, description: "Details of the refusal, such as reason, stateVersion or paymentId" })
			])
		)
	},
	named("Error")
);

export const LivenessSchema = Type.Object({ status: Type.Literal("live") }, named("Liveness"));
export const ReadinessSchema = Type.Object({ status: Type.Literal("ready") }, named("Readiness"));

/** GET /openapi.json: the outline of an OpenAPI 3.1 document (its parts are described by the 3.1 specification). */
export const OpenApiDocumentSchema = Type.Object(
	{
		openapi: Type.Literal("3.1.0"),
		info: Type.Object({ title: Type.String(), version: Type.String() }),
		paths: Dictionary(Dictionary(Type.Object({ operationId: Type.String(), summary: Type.String() }))),
		components: Type.Object({ schemas: Dictionary(Type.Object({})) })
	},
	{ $id: "OpenApiDocument" }
);

// ---------------------------------------------------------------------------------------------
// Epochs

export const EpochStatusSchema = Type.Object(
	{
		epoch: Version,
		startedAt: IsoTime,
		intents: Type.Object({ received: Count, executed: Count, canceled: Count }, { additionalProperties: false }),
		volume: Dictionary(Amount, { description: "Executed amount per token mint, in base units" })
	},
	named("EpochStatus", "The open epoch, over the live intents of it and earlier epochs: what the next close archives")
);
export type EpochStatus = Static<typeof EpochStatusSchema>;

export const EpochCloseResultSchema = Type.Object(
	{
		epoch: Version,
		startedAt: IsoTime,
		closedAt: IsoTime,
		executed: Count,
		canceled: Count,
		volume: VolumeByMint,
		root: Hex64,
		archived: Count
	},
	named("EpochCloseResult", "A closed epoch: what it archived and the Merkle root of its executed intents")
);
export type EpochCloseResult = Static<typeof EpochCloseResultSchema>;

// ---------------------------------------------------------------------------------------------
// Observation routes

export const MempoolStatusSchema = Type.Object(
	{
		ok: Type.Literal(true),
		healthy: Type.Boolean(),
		counts: Type.Optional(CountByState),
		epoch: Type.Optional(EpochStatusSchema),
		crankersOnline: Type.Optional(Count)
	},
	named("MempoolStatusResponse", "Only the sections asked for")
);
export type MempoolStatus = Static<typeof MempoolStatusSchema>;

export const MetricsSchema = Type.Object(
	{
		uptimeSeconds: Count,
		startedAt: IsoTime,
		intents: CountByState,
		settled: Type.Object({ count: Count, volume: VolumeByMint }, { additionalProperties: false }),
		/**
		 * verified and rejected come from the store, the same on every replica; unrecorded is summed
		 * over the receivers running now, and the latencies are the slowest receiver's.
		 */
		verification: Type.Object(
			{ verified: Count, rejected: Count, unrecorded: Count, p50Ms: Type.Number({ minimum: 0 }), p99Ms: Type.Number({ minimum: 0 }) },
			{ additionalProperties: false }
		),
		leases: Type.Object({ active: Count, expired: Count }, { additionalProperties: false })
	},
	named("MetricsResponse")
);
export type Metrics = Static<typeof MetricsSchema>;

export const NetworkOverviewSchema = Type.Object(
	{
		crankers: Type.Object({ online: Count, total: Count, byRole: Dictionary(Count) }, { additionalProperties: false }),
		liquidity: Dictionary(Amount, { description: "Liquidity of the online settlement Crankers per token mint" }),
		intents: Keyed(PUBLIC_STATUSES, Count),
		epoch: EpochStatusSchema
	},
	named("NetworkOverview")
);
export type NetworkOverview = Static<typeof NetworkOverviewSchema>;

export const SettlementNetworkSchema = Type.Object(
	{ network: Type.String(), tokenMintAddress: Address, ready: Type.Literal(true), liquidity: Amount, crankersOnline: Count },
	named("SettlementNetwork")
);
export type SettlementNetwork = Static<typeof SettlementNetworkSchema>;

// ---------------------------------------------------------------------------------------------
// Crankers, threshold access, the verification sweep

export const CrankerHeartbeatRecordSchema = Type.Object(
	{
		crankerPubkey: Address,
		roles: Type.Array(StringEnum(CRANKER_ROLES)),
		liquidity: Type.Array(Type.Object({ tokenMintAddress: Address, available: Amount }, { additionalProperties: false })),
		version: Nullable(Type.String()),
		lastSeenAt: IsoTime,
		online: Type.Boolean()
	},
	named("CrankerHeartbeatRecord")
);
export type CrankerHeartbeatRecord = Static<typeof CrankerHeartbeatRecordSchema>;

/**
 * The answer to a heartbeat: the record, and the settlement program this Node checks settlements
 * against, so that a Cranker set to another one stops before it pays a credit account the Node
 * never counts. Optional: an owner of an earlier version, in a rolling update, answers without it.
 */
export const CrankerHeartbeatAnswerSchema = Type.Object(
	{ ...CrankerHeartbeatRecordSchema.properties, settlementProgramId: Type.Optional(Address) },
	named("CrankerHeartbeatAnswer")
);
export type CrankerHeartbeatAnswer = Static<typeof CrankerHeartbeatAnswerSchema>;

export const ThresholdAccessGrantSchema = Type.Object({ wallet: Address, nonce: Nonce, consumedAt: IsoTime }, named("ThresholdAccessGrant"));
export type ThresholdAccessGrant = Static<typeof ThresholdAccessGrantSchema>;

export const WakeStatusSchema = Type.Object(
	{ picked: Count, verified: Count, rejected: Count, pending: Count, verifierUnavailable: Type.Boolean() },
	named("WakeStatus", "What one verification sweep did")
);
export type WakeStatus = Static<typeof WakeStatusSchema>;
export const WakeResultSchema = Type.Object({ ok: Type.Literal(true), status: WakeStatusSchema }, named("WakeResult"));
export type WakeResult = Static<typeof WakeResultSchema>;
