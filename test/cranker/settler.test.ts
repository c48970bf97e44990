/**
 * The Settler against a compromised Node: a stand-in that answers work items the sender never
 * signed, or changes a signed one in its lease answer, with a payout authorization it would sign
 * for anything; or that offers an intent again while the settlement a Cranker signed for it, before
 * it restarted, is still in flight. The Cranker pays out of its own liquidity, so it checks the
 * sender's signature itself, and keeps what it signed in its journal.
 */
import { createKeyPairSignerFromBytes, generateKeyPairSigner, type Address } from "@solana/kit";
import { Chain } from "../../cranker/chain";
import type { CrankerConfig } from "../../cranker/config";
import { SettlementJournal } from "../../cranker/journal";
import { createLogger } from "../../cranker/log";
import type { NodeClient } from "../../cranker/node-client";
import { Settler } from "../../cranker/settler";
import { LocalChain } from "../../devkit/local-chain";
import { payoutNullifier } from "../../lib/canonical";
import { createSigner, generateKeypair } from "../../lib/ed25519";
import { decidedRecord } from "../../lib/intake";
import { toWorkerView, type IntentRecord, type MempoolIntent } from "../../lib/intents";
import { buildPayoutAuthorization } from "../../lib/payout";
import { creditAccountAddress, DEFAULT_SETTLEMENT_PROGRAM_ID } from "../../lib/settlement";
import { newRoute, newWallet, signedIntent } from "../helpers/fixtures";
import { tempDir } from "../helpers/node";

/** The stored record of a VERIFIED intent of this request. */
function verifiedRecord(request: ReturnType<typeof signedIntent>): IntentRecord {
	const at = new Date().toISOString();
	return decidedRecord({ id: "int_0123456789abcdef0123456789abcdef", request, requestDigest: "0".repeat(64), transactionCommitment: request.transactionCommitment!, epoch: 1, at, intakeCall: null }, { ok: true });
}

/** A work item as the Node lists it: the worker view of a VERIFIED intent of this request. */
const workItem = (request: ReturnType<typeof signedIntent>): MempoolIntent => toWorkerView(verifiedRecord(request));

async function settlerWith(leaseAnswer: (intent: MempoolIntent) => MempoolIntent) {
	const calls: string[] = [];
	const node = {
		async updateStatus(_id: string, update: { status: string }) {
			calls.push(update.status);
			return update.status === "CRANKER_LEASED" ? leaseAnswer(current) : current;
		},
		async payoutAuthorization() {
			calls.push("payoutAuthorization");
			throw new Error("a compromised Node would sign anything: never asked here");
		}
	} as unknown as NodeClient;
	const chain = new Proxy({}, { get: (_, name) => () => Promise.reject(new Error(`the chain was asked ${String(name)}`)) }) as Chain;
	const lines: string[] = [];
	const signer = await generateKeyPairSigner();
	const settler = new Settler(node, chain, signer, {} as CrankerConfig, createLogger({}, line => lines.push(line)), () => false, await SettlementJournal.open(tempDir("scs-journal-"), signer.address));
	let current: MempoolIntent;
	return {
		calls,
		lines,
		settle: (intent: MempoolIntent) => settler.settle((current = intent))
	};
}

const route = newRoute();

test("a work item whose sender never signed it (a forged message, amount and route) is not leased, let alone paid", async () => {
	const forged = { ...workItem(signedIntent(newWallet(), route)), amount: "999999999", recipientRouteCommitment: "ab".repeat(32) };
	const settler = await settlerWith(intent => intent);
	expect(await settler.settle(forged)).toBe("unsigned");
	expect(settler.calls).toEqual([]);
	expect(settler.lines.join("\n")).toMatch(/not a payment its sender signed/);
});

test("a signed work item the Node changes in its lease answer is given back, not paid", async () => {
	const signed = workItem(signedIntent(newWallet(), route));
	const settler = await settlerWith(intent => ({ ...intent, amount: "999999999", receiverStatus: "CRANKER_LEASED", stateVersion: intent.stateVersion + 1 }));
	expect(await settler.settle(signed)).toBe("released");
	expect(settler.calls).toEqual(["CRANKER_LEASED", "VERIFIED"]);
});

describe("a settlement signed before the Cranker restarted", () => {
	const chain = new LocalChain({ slotMs: 100, blockhashValiditySlots: 300 });
	beforeAll(() => chain.start());
	afterAll(() => chain.stop());

	/**
	 * A Cranker whose first settlement of a signed intent goes out and does not land yet (a slow
	 * leader), and which dies right then; and a Node that offers the intent again, VERIFIED, to the
	 * same Cranker once it is back, with the same journal directory.
	 */
	async function crashAfterFirstSend() {
		const mint = chain.createMint(6);
		const keys = generateKeypair();
		chain.fundLamports(keys.publicKey);
		await chain.fundTokens(keys.publicKey, mint, 10n ** 12n);
		const signer = await createKeyPairSignerFromBytes(keys.secretKey);
		const authority = generateKeypair();
		const request = signedIntent(newWallet(), route, { tokenMintAddress: mint, expiresAtSlot: chain.slot + 100_000 });
		const record = verifiedRecord(request);
		const offered = toWorkerView(record);
		const config = { settlementProgramId: DEFAULT_SETTLEMENT_PROGRAM_ID, nodeAuthorityPubkey: authority.publicKey, pollIntervalMs: 50 } as unknown as CrankerConfig;
		// A compromised Node: every move accepted, whatever the intent's state, and a payout authorization for each lease.
		const reported: { status: string; transactionSignature?: string }[] = [];
		const lease = () => ({ crankerPubkey: signer.address, leasedAt: new Date().toISOString(), expiresAt: new Date(Date.now() + 60_000).toISOString() });
		const node = {
			async updateStatus(_id: string, update: { status: string; transactionSignature?: string }) {
				reported.push({ status: update.status, transactionSignature: update.transactionSignature });
				return { ...offered, receiverStatus: update.status, lease: lease(), stateVersion: offered.stateVersion + reported.length };
			},
			async payoutAuthorization() {
				return buildPayoutAuthorization({ ...record, lease: lease() }, new Date(), { publicKey: authority.publicKey, sign: createSigner(authority) });
			}
		} as unknown as NodeClient;
		const stateDir = tempDir("scs-journal-");
		const settlerOn = async (rpc: Chain) => new Settler(node, rpc, signer, config, createLogger({}, () => {}), () => false, await SettlementJournal.open(stateDir, signer.address));

		// The first life: every chain call after the send never answers, as if the process were killed then.
		let sent: () => void;
		const firstSend = new Promise<void>(resolve => (sent = resolve));
		let dead = false;
		const rpc = new Chain(chain.url, 5000);
		const dying = new Proxy(rpc, {
			get(target, name) {
				const value = Reflect.get(target, name) as unknown;
				if (typeof value !== "function") return value;
				return (...args: unknown[]) => {
					if (dead) return new Promise(() => {});
					const result = (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
					if (name === "send") void result.finally(() => ((dead = true), sent()));
					return result;
				};
			}
		});
		chain.dropNextSends(1);
		void (await settlerOn(dying)).settle(offered);
		await firstSend;
		const nullifier = payoutNullifier(request.senderWallet, request.senderAuthorizationNonce);
		const creditAccount = await creditAccountAddress(request.recipientRouteCommitment, mint as Address);
		return { offered, reported, nullifier, creditAccount, restarted: () => settlerOn(new Chain(chain.url, 5000)), amount: BigInt(request.amount) };
	}

	test("is sent again, not signed a second time, when the Node offers its intent again while it can still land", async () => {
		const first = await crashAfterFirstSend();
		const [submitted] = first.reported.filter(report => report.status === "SUBMITTED");
		expect(submitted.transactionSignature).toBeDefined();

		expect(await (await first.restarted()).settle(first.offered)).toBe("confirmed");
		// The slow leader lands what it held: it was the same transaction, so nothing more lands.
		chain.landDropped();
		const landed = chain.landedWithMemoEnding(first.nullifier);
		expect(landed.map(tx => tx.signature)).toEqual([submitted.transactionSignature]);
		expect(chain.tokenBalance(first.creditAccount)).toBe(first.amount);
		expect(first.reported.filter(report => report.status === "SUBMITTED").map(report => report.transactionSignature)).toEqual([submitted.transactionSignature, submitted.transactionSignature]);
	});

	test("is replaced by a new one only once its blockhash has expired, when it can no longer land", async () => {
		const first = await crashAfterFirstSend();
		chain.advance(301);
		expect(await (await first.restarted()).settle(first.offered)).toBe("confirmed");
		expect(chain.landDropped()).toBe(0);
		const signatures = first.reported.filter(report => report.status === "SUBMITTED").map(report => report.transactionSignature);
		expect(new Set(signatures).size).toBe(2);
		expect(chain.landedWithMemoEnding(first.nullifier).map(tx => tx.signature)).toEqual([signatures[1]]);
		expect(chain.tokenBalance(first.creditAccount)).toBe(first.amount);
	});
});
