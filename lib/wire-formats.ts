/**
 * The value formats of SPEC §0 as TypeBox schemas: the building blocks of every answer's schema
 * (JSON Schema at run time, for GET /openapi.json; TypeScript types through `Static`, for the code
 * that builds the answers). Request bodies are checked by fastest-validator (lib/schemas.ts) with
 * the same patterns from lib/encoding.ts and lib/tin.ts.
 */
import { Type, type SchemaOptions, type Static, type TSchema, type TUnsafe } from "@sinclair/typebox";
import { AMOUNT_PATTERN, BASE58_PATTERN, HEX64_PATTERN, IDENTIFIER_PATTERN, NONCE_PATTERN } from "./encoding";
import { TIN_PATTERN } from "./tin";

export const Amount = Type.String({ pattern: AMOUNT_PATTERN, description: "Decimal string of base units (u64)" });
export const Address = Type.String({ pattern: BASE58_PATTERN, maxLength: 128, description: "Base58 ed25519 public key (32 bytes)" });
export const Signature = Type.String({ pattern: BASE58_PATTERN, maxLength: 128, description: "Base58 ed25519 signature (64 bytes)" });
export const Hex64 = Type.String({ pattern: HEX64_PATTERN, description: "64 lowercase hex characters (a SHA-256 digest)" });
export const Identifier = Type.String({ pattern: IDENTIFIER_PATTERN });
export const Nonce = Type.String({ pattern: NONCE_PATTERN });
/** ISO-8601 UTC with milliseconds, as `Date.prototype.toISOString` writes it. */
export const IsoTime = Type.String({ format: "date-time", maxLength: 24 });
export const Tin = Type.String({ pattern: TIN_PATTERN, description: "10-digit TIN with a Luhn check digit" });
export const Slot = Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER });
export const Count = Type.Integer({ minimum: 0 });
export const Version = Type.Integer({ minimum: 1, maximum: Number.MAX_SAFE_INTEGER });

/** A string out of a fixed list, as a plain `enum` (what client generators turn into a union). */
export function StringEnum<const T extends readonly string[]>(values: T, options: SchemaOptions = {}): TUnsafe<T[number]> {
	return Type.Unsafe<T[number]>({ ...options, type: "string", enum: [...values] });
}

/** An object whose keys are data (mints, roles): `additionalProperties`, which generators read as a record. */
export function Dictionary<T extends TSchema>(values: T, options: SchemaOptions = {}): TUnsafe<Record<string, Static<T>>> {
	return Type.Unsafe<Record<string, Static<T>>>({ ...options, type: "object", additionalProperties: values });
}

/** An object with exactly the given keys, each holding `value` (a count per state, say). */
export function Keyed<const K extends readonly string[], T extends TSchema>(keys: K, value: T, options: SchemaOptions = {}): TUnsafe<Record<K[number], Static<T>>> {
	return Type.Unsafe<Record<K[number], Static<T>>>({
		...options,
		type: "object",
		properties: Object.fromEntries(keys.map(key => [key, value])),
		required: [...keys],
		additionalProperties: false
	});
}

export function Nullable<T extends TSchema>(schema: T) {
	return Type.Union([schema, Type.Null()]);
}

/** Options of a named schema: `$id` becomes its name under `components.schemas` of the OpenAPI document. */
export function named(name: string, description?: string): SchemaOptions {
	return { $id: name, additionalProperties: false, ...(description ? { description } : {}) };
}
