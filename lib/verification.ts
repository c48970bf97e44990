/**
 * Verification of a payment authorization (SPEC §1), as one pure function. The checks run in
 * the SPEC's order and the first failure is the answer: message binding, funding mode,
 * signature, expiry, route. The nonce, the last check, belongs to the mempool that owns nonces.
 */
import { MAX_VALIDITY_MS, SUPPORTED_FUNDING_MODE, buildPaymentMessage, buildTinOperationMessage, type TinOperationFields } from "./canonical";
import { verifySignature } from "./ed25519";
import type { RejectionReason } from "./errors";
import type { CreateIntentRequest } from "./intents";
import { isSignedRoute, type ActiveRoute } from "./registry";

/** How far a signer's clock may run from the Node's (SPEC §1: issuedAt at most 60 s ahead). */
export const MAX_CLOCK_SKEW_MS = 60_000;

/**
 * Refusals after which a body holds no paymentId and leaves no record (SPEC §2.1: only a signer
 * holds a paymentId): a message that does not bind the request or whose times are malformed, an
 * unsupported funding mode, a signature that does not verify.
 */
export const UNRECORDED_REJECTIONS: ReadonlySet<string> = new Set<RejectionReason>(["INVALID_MESSAGE", "INVALID_SIGNATURE", "UNSUPPORTED_FUNDING_MODE"]);

export type VerificationResult = { ok: true } | { ok: false; reason: RejectionReason; detail: string };

export interface VerificationContext {
	nowMs: number;
	/** Latest slot observed on chain; null when none has been observed yet. */
	latestSlot: number | null;
	/** The TIN's active route, or null when the TIN is not in the registry. */
	route: ActiveRoute | null;
}

function refuse(reason: RejectionReason, detail: string): VerificationResult {
	return { ok: false, reason, detail };
}

/**
 * SPEC §1's time window, shared by every signed message that carries one (payment intents, TIN
 * operations): issuedAt at most 60 s ahead and at most 24 h of validity (else INVALID_MESSAGE),
 * expiresAt still ahead (else EXPIRED).
 */
export function checkValidityWindow(issuedAtIso: string, expiresAtIso: string, nowMs: number): { ok: true } | { ok: false; reason: "INVALID_MESSAGE" | "EXPIRED"; detail: string } {
	const issuedAt = Date.parse(issuedAtIso);
	const expiresAt = Date.parse(expiresAtIso);
	if (issuedAt > nowMs + MAX_CLOCK_SKEW_MS) return { ok: false, reason: "INVALID_MESSAGE", detail: "issuedAt is more than 60 s in the future" };
	if (expiresAt - issuedAt > MAX_VALIDITY_MS) return { ok: false, reason: "INVALID_MESSAGE", detail: "the validity is longer than 24 h" };
	if (expiresAt <= nowMs) return { ok: false, reason: "EXPIRED", detail: "expiresAt has passed" };
	return { ok: true };
}

/** Verifies on this thread: the whole of SPEC §1 but the nonce. */
export function verifyPaymentAuthorization(request: CreateIntentRequest, context: VerificationContext): VerificationResult {
	const binding = messageBinding(request);
	if (!binding.ok) return { ok: false, reason: binding.reason, detail: binding.detail };
	if (!verifySignature(request.senderWallet, binding.message, request.senderAuthorizationSignature)) return INVALID_SIGNATURE;
	return contextChecks(request, context);
}

/**
 * Whether `request` says what its sender signed: its message the canonical one of its fields (so
 * its amount, mint, TIN, route and expiry), its commitment that message's, and the sender's strict
 * signature of it. No clock: what a Cranker checks of a work item, whatever its own time.
 */
export function isSenderSigned(request: CreateIntentRequest): boolean {
	const binding = messageBinding(request);
	return binding.ok && verifySignature(request.senderWallet, binding.message, request.senderAuthorizationSignature);
}

/**
 * Whether a TIN operation is its owner's: the owner's strict signature of its SPEC §5 message. No
 * clock, as for a payment (isSenderSigned).
 */
export function isOwnerSigned(request: TinOperationFields & { ownerSignature: string }): boolean {
	return verifySignature(request.ownerWallet, buildTinOperationMessage(request), request.ownerSignature);
}

/**
 * Whether a body is its sender's, as a body that holds a paymentId must be: the checks whose
 * refusal leaves no record (UNRECORDED_REJECTIONS), the time window's shape taken at `nowMs`. Not
 * whether it is still valid (expiry, route, nonce).
 */
export function isSignedBody(request: CreateIntentRequest, nowMs: number): boolean {
	if (!isSenderSigned(request)) return false;
	const window = checkValidityWindow(request.senderAuthorizationIssuedAt, request.senderAuthorizationExpiresAt, nowMs);
	return window.ok || window.reason !== "INVALID_MESSAGE";
}

/**
 * The same checks in the same order, as the verifier runs them: the signature equation solved by
 * `verify` (a VerifyPool, off this thread), the message hashed by `hash` (node:crypto's on the
 * server), and the request's transactionCommitment answered with the verdict, so that nothing
 * builds the message a second time.
 */
export async function verifyPaymentAuthorizationWith(
	verify: (address: string, message: string, signature: string) => boolean | Promise<boolean>,
	request: CreateIntentRequest,
	context: () => VerificationContext | Promise<VerificationContext>,
	hash?: (text: string) => string
): Promise<VerificationResult & { transactionCommitment: string }> {
	const binding = messageBinding(request, hash);
	const { transactionCommitment } = binding;
	if (!binding.ok) return { ok: false, reason: binding.reason, detail: binding.detail, transactionCommitment };
	if (!(await verify(request.senderWallet, binding.message, request.senderAuthorizationSignature))) return { ...INVALID_SIGNATURE, transactionCommitment };
	// Read after the signature: the time and the slot are those of the verdict, and a forgery reads no route.
	return { ...contextChecks(request, await context()), transactionCommitment };
}

const INVALID_SIGNATURE = refuse("INVALID_SIGNATURE", "senderAuthorizationSignature is not senderWallet's signature of the message");

type Binding = { transactionCommitment: string } & ({ ok: true; message: string } | { ok: false; reason: RejectionReason; detail: string });

/** The message binds the request's fields, and the funding mode is one we settle. */
function messageBinding(request: CreateIntentRequest, hash?: (text: string) => string): Binding {
	const { message, transactionCommitment } = buildPaymentMessage(request, hash);
	const refuse = (reason: RejectionReason, detail: string): Binding => ({ ok: false, reason, detail, transactionCommitment });
	if (request.senderAuthorizationMessage !== message) return refuse("INVALID_MESSAGE", "senderAuthorizationMessage is not the canonical message of the request fields");
	if (request.transactionCommitment !== undefined && request.transactionCommitment !== transactionCommitment)
		return refuse("INVALID_MESSAGE", "transactionCommitment is not the commitment of the request fields");
	if (request.recipientHash !== undefined && request.recipientHash !== request.recipientTin) return refuse("INVALID_MESSAGE", "recipientHash must equal recipientTin");
	if (request.senderFundingMode !== SUPPORTED_FUNDING_MODE) return refuse("UNSUPPORTED_FUNDING_MODE", `senderFundingMode must be ${SUPPORTED_FUNDING_MODE}`);
	return { ok: true, message, transactionCommitment };
}

/** After the signature: the time window, the slot, the route. */
function contextChecks(request: CreateIntentRequest, context: VerificationContext): VerificationResult {
	const window = checkValidityWindow(request.senderAuthorizationIssuedAt, request.senderAuthorizationExpiresAt, context.nowMs);
	if (!window.ok) return window;
	if (context.latestSlot !== null && request.expiresAtSlot <= context.latestSlot)
		return refuse("EXPIRED", `expiresAtSlot ${request.expiresAtSlot} is not after the latest observed slot ${context.latestSlot}`);

	const { route } = context;
	if (!route) return refuse("UNKNOWN_TIN", `TIN ${request.recipientTin} is not in the registry`);
	if (!isSignedRoute(route, request))
		return refuse("ROUTE_MISMATCH", `the active route of TIN ${request.recipientTin} is version ${route.routeVersion}`);

	return { ok: true };
}
