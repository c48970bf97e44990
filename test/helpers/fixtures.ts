/**
 * Test fixtures built the way a sender's device and a Cranker build them: @noble/curves signs,
 * the service verifies with node:crypto.
 */
import { ed25519 } from "@noble/curves/ed25519.js";
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { buildHeartbeatMessage, buildPaymentMessage, buildThresholdAccessMessage, buildTinOperationMessage } from "../../lib/canonical";
import { encodeBase58, sha256Hex } from "../../lib/encoding";
import { crankerRequestOf, crankerRouteOf, type CrankerRequest } from "../../lib/cranker-call";
import { RequestSigner, signRequest, type RequestSigningKey } from "../../lib/http-signature";
import type { CreateIntentRequest } from "../../lib/intents";
import type { GenesisRoute } from "../../lib/registry";
import { tinFromSequence } from "../../lib/tin";

export interface Wallet {
	address: string;
	secretKey: Uint8Array;
	sign(message: string): string;
}

/** Every wallet the tests made, by address: a request naming a crankerPubkey is signed with its key. */
const wallets = new Map<string, Wallet>();

export function newWallet(): Wallet {
	const secretKey = ed25519.utils.randomSecretKey();
	const wallet: Wallet = {
		address: encodeBase58(ed25519.getPublicKey(secretKey)),
		secretKey,
		sign: message => encodeBase58(ed25519.sign(new TextEncoder().encode(message), secretKey))
	};
	wallets.set(wallet.address, wallet);
	return wallet;
}

export function walletOf(address: string): Wallet {
	const wallet = wallets.get(address);
	if (!wallet) throw new Error(`no test wallet has the address ${address}`);
	return wallet;
}

/** The wallet as the key that signs its HTTP requests (SPEC §6.1). */
export function signingKey(wallet: Wallet): RequestSigningKey {
	return { keyid: wallet.address, sign: data => ed25519.sign(data, wallet.secretKey) };
}

/** Each wallet's request signer: as a Cranker's, it signs a repeated request with a later `created`, not as a replay. */
const requestSigners = new Map<string, RequestSigner>();

/**
 * The call meta with which the gateway passes on a Cranker's request to `action`: the request the
 * wallet signs for the action's route, `params` its path parameters and body (SPEC §6.1).
 */
export async function crankerCallMeta(
	wallet: Wallet,
	action: string,
	params: Record<string, unknown>,
	{ base = "http://127.0.0.1:3000", created }: { base?: string; created?: Date } = {}
): Promise<{ crankerRequest: CrankerRequest }> {
	const route = crankerRouteOf(action);
	if (!route) throw new Error(`${action} is not a Cranker action`);
	const [method, template] = route.split(" ") as [string, string];
	const body: Record<string, unknown> = { ...params };
	const path = template.replace(/:(\w+)/g, (_match, name: string) => {
		delete body[name];
		return encodeURIComponent(String(params[name]));
	});
	const url = `${base}${path}`;
	const bytes = Buffer.from(JSON.stringify(body));
		const signer = requestSigners.get(wallet.address) ?? requestSigners.set(wallet.address, new RequestSigner(signingKey(wallet))).get(wallet.address)!;
	const headers = created ? await signRequest({ method, url, body: bytes }, signingKey(wallet), created) : await signer.sign({ method, url, body: bytes });
	return { crankerRequest: crankerRequestOf(method, url, Object.fromEntries(Object.entries(headers).map(([name, value]) => [name, [value]])), bytes) };
}

export const MINT = encodeBase58(new Uint8Array(32).fill(7));

let tinSequence = 100_000_000 + Math.floor(Math.random() * 1_000_000);
export function newRoute(overrides: Partial<GenesisRoute> = {}): GenesisRoute {
	return {
		tin: tinFromSequence(tinSequence++),
		routeCommitment: sha256Hex(randomBytes(16)),
		routeVersion: 1,
		policyCommitment: sha256Hex(randomBytes(16)),
		...overrides
	};
}

export function writeSeedFile(dir: string, routes: unknown): string {
	const file = path.join(dir, "registry-seed.json");
	fs.writeFileSync(file, typeof routes === "string" ? routes : JSON.stringify(routes));
	return file;
}

export const iso = (msFromNow: number) => new Date(Date.now() + msFromNow).toISOString();

export function uniqueId(prefix = "pay"): string {
	return `${prefix}_${randomBytes(9).toString("base64url")}`;
}

/** A correctly signed CreateIntentRequest; `fields` override what is signed, `after` what is sent. */
/**
 * A forgery of `real`: its sender's wallet and paymentId (and `fields`, an amount of 1 unless
 * given), its canonical message, signed by another key.
 */
export function forgedIntent(real: CreateIntentRequest, route: GenesisRoute, fields: Partial<CreateIntentRequest> = {}): CreateIntentRequest {
	return signedIntent({ ...newWallet(), address: real.senderWallet }, route, { paymentId: real.paymentId, amount: "1", ...fields });
}

export function signedIntent(
	wallet: Wallet,
	route: GenesisRoute,
	fields: Partial<CreateIntentRequest> = {},
	after: Partial<Record<keyof CreateIntentRequest, unknown>> = {}
): CreateIntentRequest {
	const base = {
		paymentId: uniqueId(),
		senderWallet: wallet.address,
		recipientTin: route.tin,
		recipientRouteCommitment: route.routeCommitment,
		recipientRouteVersion: route.routeVersion,
		tokenMintAddress: MINT,
		amount: "1500000",
		feeLimit: "5000",
		senderFundingMode: "wallet_only_v2",
		senderAuthorizationNonce: `nonce_${randomBytes(12).toString("base64url")}`,
		senderAuthorizationIssuedAt: iso(-1000),
		senderAuthorizationExpiresAt: iso(10 * 60_000),
		expiresAtSlot: 1_000_000,
		...fields
	};
	const { message, transactionCommitment } = buildPaymentMessage(base);
	const request: CreateIntentRequest = {
		...base,
		senderAuthorizationMessage: message,
		senderAuthorizationSignature: wallet.sign(message),
		transactionCommitment
	};
	return { ...request, ...after } as CreateIntentRequest;
}

export function signedHeartbeat(
	cranker: Wallet,
	roles: string[] = ["settlement"],
	overrides: Partial<{ sentAt: string; liquidity: { tokenMintAddress: string; available: string }[]; version: string }> = {}
) {
	const sentAt = overrides.sentAt ?? new Date().toISOString();
	return {
		crankerPubkey: cranker.address,
		roles,
		liquidity: overrides.liquidity ?? [{ tokenMintAddress: MINT, available: "1000000000" }],
		version: overrides.version ?? "test-1",
		sentAt,
		signature: cranker.sign(buildHeartbeatMessage({ crankerPubkey: cranker.address, roles, sentAt }))
	};
}

/** A TIN operation signed by `signer` (its owner unless `ownerWallet` says otherwise), with fresh commitments. */
export function signedTinOperation(
	signer: Wallet,
	fields: { intentType: "create" | "update"; tin?: string; ownerWallet?: string } & Partial<Record<"issuedAt" | "expiresAt" | "operationId", string>>
) {
	const body = {
		operationId: fields.operationId ?? uniqueId("op"),
		intentType: fields.intentType,
		...(fields.tin ? { tin: fields.tin } : {}),
		ownerWallet: fields.ownerWallet ?? signer.address,
		routeCommitment: sha256Hex(randomBytes(8)),
		policyCommitment: sha256Hex(randomBytes(8)),
		issuedAt: fields.issuedAt ?? iso(-1000),
		expiresAt: fields.expiresAt ?? iso(3600_000)
	};
	return { ...body, ownerSignature: signer.sign(buildTinOperationMessage(body)) };
}

/** A threshold-access proof: the wallet's signature of its one-time nonce at `issuedAt`. */
export function signedAccessProof(wallet: Wallet, nonce = uniqueId("nonce_0123456789"), issuedAt = iso(0)) {
	return { wallet: wallet.address, nonce, issuedAt, signature: wallet.sign(buildThresholdAccessMessage({ wallet: wallet.address, nonce, issuedAt })) };
}
