/**
 * The Settler against a compromised Node: a stand-in that answers work items the sender never
 * signed, or changes a signed one in its lease answer, with a payout authorization it would sign
 * for anything; or that offers an intent again while the settlement a Cranker signed for it, before
 * it restarted, is still in flight. The Cranker pays out of its own liquidity, so it checks the
 * sender's signature itself, and keeps what it signed in its journal.
 */
import fs from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import { createKeyPairSignerFromBytes, generateKeyPairSigner, getSignatureFromTransaction, type Address, type Blockhash } from "@solana/kit";
import { Chain } from "../../cranker/chain";
import type { CrankerConfig } from "../../cranker/config";
import { SettlementJournal } from "../../cranker/journal";
import { createLogger } from "../../cranker/log";
import { NodeApiError, type NodeClient } from "../../cranker/node-client";
import { Settler } from "../../cranker/settler";
import { LocalChain } from "../../devkit/local-chain";
import { payoutNullifier } from "../../lib/canonical";
import { createSigner, generateKeypair, type Keypair } from "../../lib/ed25519";
import { encodeBase58 } from "../../lib/encoding";
import { decidedRecord } from "../../lib/intake";
import { toWorkerView, type IntentRecord, type MempoolIntent } from "../../lib/intents";
import { buildPayoutAuthorization } from "../../lib/payout";
import { creditAccountAddress, DEFAULT_SETTLEMENT_PROGRAM_ID, signMemoTransaction } from "../../lib/settlement";
import { iso, MINT, newRoute, newWallet, signedIntent } from "../helpers/fixtures";
import { startLyingRpc, RpcRefusal, type LyingRpc } from "../helpers/lying-rpc";
import { tempDir } from "../helpers/node";
import { waitFor } from "./harness";

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
			const lease = { crankerPubkey: signer.address, leasedAt: new Date().toISOString(), expiresAt: new Date(Date.now() + 60_000).toISOString() };
			return update.status === "CRANKER_LEASED" ? leaseAnswer({ ...current, lease }) : current;
		},
		async payoutAuthorization() {
			calls.push("payoutAuthorization");
			throw new Error("a compromised Node would sign anything: never asked here");
		}
	} as unknown as NodeClient;
	// Only where its history starts (the genesis), before a lease: nothing of the payment.
	const chain = new Proxy({}, { get: (_, name) => () => (name === "historyStartsAt" ? Promise.resolve(0) : Promise.reject(new Error(`the chain was asked ${String(name)}`))) }) as Chain;
	const lines: string[] = [];
	const signer = await generateKeyPairSigner();
	const settler = new Settler(node, chain, signer, { mints: [MINT] } as unknown as CrankerConfig, createLogger({}, line => lines.push(line)), () => false, await SettlementJournal.open(tempDir("scs-journal-"), signer.address));
	let current: MempoolIntent;
	return {
		calls,
		lines,
		settle: (intent: MempoolIntent) => settler.settle((current = intent))
	};
}

const route = newRoute();

/** What a Cranker reported to the Node: each status update as sent. */
type Reported = { status: string; transactionSignature?: string; reason?: string }[];

/**
 * A compromised Node: every move accepted, whatever the intent's state, the intent (`current()`,
 * as a work item) shown leased to `holder` for `leaseMs`, and a payout authorization for each lease.
 */
function compromisedNode(current: () => IntentRecord, holder: string, authority: Keypair, leaseMs = 60_000): { node: NodeClient; reported: Reported } {
	const reported: Reported = [];
	const lease = () => ({ crankerPubkey: holder, leasedAt: new Date().toISOString(), expiresAt: new Date(Date.now() + leaseMs).toISOString() });
	const shown = (receiverStatus: string) => {
		const offered = toWorkerView(current());
		return { ...offered, receiverStatus, lease: lease(), stateVersion: offered.stateVersion + reported.length };
	};
	const node = {
		async updateStatus(_id: string, update: Reported[number]) {
			reported.push(update);
			return shown(update.status);
		},
		intent: async () => shown("CRANKER_LEASED"),
		payoutAuthorization: async () => buildPayoutAuthorization({ ...current(), lease: lease() }, new Date(), { publicKey: authority.publicKey, sign: createSigner(authority) })
	} as unknown as NodeClient;
	return { node, reported };
}

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

test("a lease answer that is another signed payment under the work item's id (a larger amount, another mint) is given back, not paid (a review)", async () => {
	const signed = workItem(signedIntent(newWallet(), route));
	for (const fields of [{ amount: "999999999" }, { tokenMintAddress: "So11111111111111111111111111111111111111112" }]) {
		const other = workItem(signedIntent(newWallet(), route, fields));
		const settler = await settlerWith(intent => ({ ...other, id: intent.id, lease: intent.lease, receiverStatus: "CRANKER_LEASED", stateVersion: intent.stateVersion + 1 }));
		expect(await settler.settle(signed)).toBe("released");
		expect(settler.calls).toEqual(["CRANKER_LEASED", "VERIFIED"]);
		expect(settler.lines.join("\n")).toMatch(/another payment than the work item it listed/);
	}
});

test("a work item in a mint this Cranker does not pay out in (CRANKER_MINTS) is not leased (a review)", async () => {
	const settler = await settlerWith(intent => intent);
	expect(await settler.settle(workItem(signedIntent(newWallet(), route, { tokenMintAddress: "So11111111111111111111111111111111111111112" })))).toBe("unsigned");
	expect(settler.calls).toEqual([]);
	expect(settler.lines.join("\n")).toMatch(/does not pay out in \(CRANKER_MINTS\)/);
});

test("a lease answer that is another intent, or another holder's lease, is not paid (nor given back: it is not this lease)", async () => {
	const signed = workItem(signedIntent(newWallet(), route));
	const other = { ...workItem(signedIntent(newWallet(), route)), id: "int_f123456789abcdef0123456789abcdef" };
	for (const answer of [(intent: MempoolIntent) => ({ ...other, lease: intent.lease }), (intent: MempoolIntent) => ({ ...intent, lease: { ...intent.lease!, crankerPubkey: newWallet().address } })]) {
		const settler = await settlerWith(answer);
		expect(await settler.settle(signed)).toBe("lost");
		expect(settler.calls).toEqual(["CRANKER_LEASED"]);
	}
});

test("a signed work item whose amount, times or slot the Node would not have taken (read otherwise, or never expiring) is not leased: a review's replay", async () => {
	for (const fields of [{ amount: "0x64" }, { senderAuthorizationExpiresAt: "2999-01-01T00:00:00" }, { senderAuthorizationExpiresAt: "soon" }, { expiresAtSlot: 2 ** 60 }]) {
		const request = signedIntent(newWallet(), route, fields as never);
		const settler = await settlerWith(intent => intent);
		expect(await settler.settle(workItem(request))).toBe("unsigned");
		expect(settler.calls).toEqual([]);
		expect(settler.lines.join("\n")).toMatch(/malformed amount, time or slot/);
	}
});

test("a signed work item issued ahead of the clock, which would cut the chain search for an earlier settlement short, is not leased", async () => {
	const ahead = workItem(signedIntent(newWallet(), route, { senderAuthorizationIssuedAt: iso(2 * 3600_000), senderAuthorizationExpiresAt: iso(3 * 3600_000) }));
	const settler = await settlerWith(intent => intent);
	expect(await settler.settle(ahead)).toBe("unsigned");
	expect(settler.calls).toEqual([]);
	expect(settler.lines.join("\n")).toMatch(/not a payment the Node could have accepted: issuedAt is more than 60 s in the future/);
});

test("a work item without its transactionCommitment, which the settlement's memo and the chain search need, is not leased", async () => {
	const { transactionCommitment: _omitted, ...uncommitted } = workItem(signedIntent(newWallet(), route));
	const settler = await settlerWith(intent => intent);
	expect(await settler.settle(uncommitted as MempoolIntent)).toBe("unsigned");
	expect(settler.calls).toEqual([]);
});

test("a credit account whose history is too long to search in half the lease: the lease is given back, nothing signed, and the account left a while", async () => {
	// Anyone may name a credit account in transactions of their own: every page of its history is full, and recent.
	const history = http.createServer((req, res) => {
		let body = "";
		req.on("data", chunk => (body += chunk));
		req.on("end", () => {
			const blockTime = Math.floor(Date.now() / 1000);
			const entries = Array.from({ length: 1000 }, (_, i) => ({ signature: encodeBase58(Buffer.alloc(64, (i % 250) + 1)), slot: 1000 - i, err: null, memo: null, blockTime, confirmationStatus: "finalized" }));
			const { id, method } = JSON.parse(body) as { id: unknown; method: string };
			// Its history from the genesis (a block without a time); every page of signatures full.
			const position = { absoluteSlot: 1000, blockHeight: 1000, epoch: 0, slotIndex: 1000, slotsInEpoch: 432_000, transactionCount: null };
			const result = method === "getFirstAvailableBlock" ? 0 : method === "getBlockTime" ? null : method === "getEpochInfo" ? position : entries;
			res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ jsonrpc: "2.0", id, result }));
		});
	});
	await new Promise<void>(resolve => history.listen(0, "127.0.0.1", resolve));
	const authority = generateKeypair();
	const signer = await generateKeyPairSigner();
	const record = verifiedRecord(signedIntent(newWallet(), route));
	const offered = toWorkerView(record);
	const lease = { crankerPubkey: signer.address, leasedAt: new Date().toISOString(), expiresAt: new Date(Date.now() + 4000).toISOString() };
	const reported: { status: string; reason?: string }[] = [];
	const node = {
		async updateStatus(id: string, update: { status: string; reason?: string }) {
			reported.push(update);
			return { ...toWorkerView(records.get(id)!), receiverStatus: update.status, lease: update.status === "CRANKER_LEASED" ? lease : null, stateVersion: offered.stateVersion + reported.length };
		},
		async payoutAuthorization(id: string) {
			return buildPayoutAuthorization({ ...records.get(id)!, lease }, new Date(), { publicKey: authority.publicKey, sign: createSigner(authority) });
		}
	} as unknown as NodeClient;
	const records = new Map<string, IntentRecord>([[record.id, record]]);
	const offer = (request: ReturnType<typeof signedIntent>, id: string) => {
		const next = { ...verifiedRecord(request), id };
		records.set(id, next);
		return toWorkerView(next);
	};
	const config = { mints: [MINT], settlementProgramId: DEFAULT_SETTLEMENT_PROGRAM_ID, nodeAuthorityPubkey: authority.publicKey, rpcTimeoutMs: 1000 } as unknown as CrankerConfig;
	const journal = await SettlementJournal.open(tempDir("scs-journal-"), signer.address);
	try {
		const chain = new Chain(`http://127.0.0.1:${(history.address() as AddressInfo).port}`, 5000);
		const settler = new Settler(node, chain, signer, config, createLogger({}, () => {}), () => false, journal);
		expect(await settler.settle(offered)).toBe("released");
		// Given back while the lease still held: a search that ran on would have signed after it lapsed.
		expect(Date.now()).toBeLessThan(Date.parse(lease.expiresAt));
		expect(reported.map(update => update.status)).toEqual(["CRANKER_LEASED", "VERIFIED"]);
		expect(reported[1].reason).toMatch(/is longer than this Cranker can read in time/);
		expect(journal.size).toBe(0);
		// Another payment to the same recipient and mint, whose search reaches as far back, is not
		// leased while the account is left alone; one signed later, with a shorter search, is tried.
		const next = offer(signedIntent(newWallet(), route, { senderAuthorizationIssuedAt: record.request.senderAuthorizationIssuedAt }), "int_1123456789abcdef0123456789abcdef");
		expect(await settler.settle(next)).toBe("unsigned");
		expect(reported).toHaveLength(2);
		const later = offer(signedIntent(newWallet(), route, { senderAuthorizationIssuedAt: iso(2000) }), "int_2123456789abcdef0123456789abcdef");
		expect(await settler.settle(later)).toBe("released");
		expect(reported.map(update => update.status)).toEqual(["CRANKER_LEASED", "VERIFIED", "CRANKER_LEASED", "VERIFIED"]);
		expect(reported[3].reason).toMatch(/is longer than this Cranker can read in time/);
	} finally {
		await journal.close();
		await new Promise(resolve => history.close(resolve));
	}
});

describe("a settlement signed before the Cranker restarted", () => {
	const chain = new LocalChain({ slotMs: 100, blockhashValiditySlots: 300 });
	/** Every journal a test opened, closed after it (their locks are renewed on a timer). */
	const opened: SettlementJournal[] = [];
	const openJournal = async (dir: string, pubkey: string) => {
		const journal = await SettlementJournal.open(dir, pubkey, { waitForLockMs: 0 });
		opened.push(journal);
		return journal;
	};
	beforeAll(() => chain.start());
	afterEach(() => Promise.all(opened.splice(0).map(journal => journal.close())));
	afterAll(() => chain.stop());

	/**
	 * A Cranker whose first settlement of a signed intent goes out and does not land yet (a slow
	 * leader), and which dies right then; and a Node that offers the intent again, VERIFIED, to the
	 * same Cranker once it is back, with the same journal directory.
	 */
	async function crashAfterFirstSend(wallet = newWallet(), nonce?: string) {
		const mint = chain.createMint(6);
		const keys = generateKeypair();
		chain.fundLamports(keys.publicKey);
		await chain.fundTokens(keys.publicKey, mint, 10n ** 12n);
		const signer = await createKeyPairSignerFromBytes(keys.secretKey);
		const authority = generateKeypair();
		const request = signedIntent(wallet, route, { tokenMintAddress: mint, expiresAtSlot: chain.slot + 100_000, ...(nonce ? { senderAuthorizationNonce: nonce } : {}) });
		let record = verifiedRecord(request);
		let offered = toWorkerView(record);
		const config = { mints: [mint], settlementProgramId: DEFAULT_SETTLEMENT_PROGRAM_ID, nodeAuthorityPubkey: authority.publicKey, pollIntervalMs: 50 } as unknown as CrankerConfig;
		const { node, reported } = compromisedNode(() => record, signer.address, authority);
		const stateDir = tempDir("scs-journal-");
		const firstJournal = await openJournal(stateDir, signer.address);
		const settlerOn = (rpc: Chain, journal: SettlementJournal) => new Settler(node, rpc, signer, config, createLogger({}, () => {}), () => false, journal);

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
		void settlerOn(dying, firstJournal).settle(offered);
		await firstSend;
		// A later slot, so that a settlement signed again could not be the same bytes by chance.
		chain.advance(1);
		const nullifier = payoutNullifier(request.senderWallet, request.senderAuthorizationNonce);
		const creditAccount = await creditAccountAddress(request.recipientRouteCommitment, mint as Address);
		return {
			offered,
			reported,
			nullifier,
			creditAccount,
			amount: BigInt(request.amount),
			/** The Node offers another intent from now on (its record and work item). */
			offer(next: IntentRecord) {
				record = next;
				offered = toWorkerView(next);
				return offered;
			},
			/** The Cranker again, as after a restart: its lock given up (a killed process's goes stale), its journal read from disk. */
			async restarted(rpcUrl = chain.url) {
				await firstJournal.close();
				const journal = await openJournal(stateDir, signer.address);
				return { settler: settlerOn(new Chain(rpcUrl, 5000), journal), journal };
			},
			stateDir,
			signer,
			mint,
			wallet
		};
	}

	test("is sent again, not signed a second time, when the Node offers its intent again while it can still land", async () => {
		const first = await crashAfterFirstSend();
		const [submitted] = first.reported.filter(report => report.status === "SUBMITTED");
		expect(submitted.transactionSignature).toBeDefined();

		expect(await (await first.restarted()).settler.settle(first.offered)).toBe("confirmed");
		// The slow leader lands what it held: it was the same transaction, so nothing more lands.
		chain.landDropped();
		const landed = chain.landedWithMemoEnding(first.nullifier);
		expect(landed.map(tx => tx.signature)).toEqual([submitted.transactionSignature]);
		expect(chain.tokenBalance(first.creditAccount)).toBe(first.amount);
		expect(first.reported.filter(report => report.status === "SUBMITTED").map(report => report.transactionSignature)).toEqual([submitted.transactionSignature, submitted.transactionSignature]);
	});

	test("is replaced by a new one only once its blockhash has expired, by a margin, when it can no longer land", async () => {
		const first = await crashAfterFirstSend();
		const { settler } = await first.restarted();
		// Just past its last landing height: one height read from a backend ahead of the one that
		// answers the status is no proof yet. Sent again and watched, the same bytes, then dropped.
		chain.advance(301);
		expect(await settler.settle(first.offered)).toBe("dropped");
		expect(new Set(first.reported.filter(report => report.status === "SUBMITTED").map(report => report.transactionSignature)).size).toBe(1);
		chain.advance(150);
		expect(await settler.settle(first.offered)).toBe("confirmed");
		expect(chain.landDropped()).toBe(0);
		const signatures = first.reported.filter(report => report.status === "SUBMITTED").map(report => report.transactionSignature);
		expect(new Set(signatures).size).toBe(2);
		expect(chain.landedWithMemoEnding(first.nullifier).map(tx => tx.signature)).toEqual([signatures.at(-1)]);
		expect(chain.tokenBalance(first.creditAccount)).toBe(first.amount);
	});

	/**
	 * `first`'s payment offered again to its Cranker restarted on a backend behind (`lies` of it):
	 * refused, then, answered as of the slot it showed, settled; paid once in all.
	 */
	async function paidOnceThroughBackendBehind(first: Awaited<ReturnType<typeof crashAfterFirstSend>>, lies: (lagging: LyingRpc) => void, refusal: RegExp) {
		const lagging = await startLyingRpc(chain.url);
		lies(lagging);
		try {
			const { settler } = await first.restarted(lagging.url);
			// Given back, as a refusal to pay is (left a while by the work loop), nothing signed.
			expect(await settler.settle(first.offered)).toBe("released");
			expect(first.reported.at(-1)).toMatchObject({ status: "VERIFIED", reason: expect.stringMatching(refusal) });
			expect(first.reported.filter(report => report.status === "SUBMITTED")).toHaveLength(1);
			lagging.honest();
			expect(await settler.settle(first.offered)).toBe("confirmed");
		} finally {
			await lagging.close();
		}
		expect(chain.landedWithMemoEnding(first.nullifier)).toHaveLength(1);
		expect(chain.tokenBalance(first.creditAccount)).toBe(first.amount);
	}

	test("is not signed again on the word of a backend behind the one that showed the height: a search and a status from before that slot are refused (a review)", async () => {
		const first = await crashAfterFirstSend();
		// The slow leader lands it after all; the chain goes on far past its last landing height.
		expect(chain.landDropped()).toBe(1);
		chain.advance(451);
		// Another backend behind the same URL, which has not seen the slots since it was signed: it would
		// list none of its history and know nothing of its signature.
		const behind = BigInt(chain.slot - 460);
		await paidOnceThroughBackendBehind(
			first,
			lagging => {
				lagging.lie("getSignaturesForAddress", params => ((params[1] as { minContextSlot?: number } | undefined)?.minContextSlot ?? 0) > behind ? new RpcRefusal(-32016, "Minimum context slot has not been reached") : []);
				lagging.lie("getSignatureStatuses", () => ({ context: { slot: Number(behind) }, value: [null] }));
			},
			/Minimum context slot|a backend behind/
		);
		// The one that landed was reported, not another signed.
		expect(new Set(first.reported.filter(report => report.status === "SUBMITTED").map(report => report.transactionSignature)).size).toBe(1);
	});

	test("is not taken for one that can no longer land on a status from a backend behind the height it was read with (a review)", async () => {
		const first = await crashAfterFirstSend();
		// Never landed, and far past its last landing height: as of the slot shown, a new one may be signed.
		chain.advance(451);
		await paidOnceThroughBackendBehind(first, lagging => lagging.lie("getSignatureStatuses", (_params, truth) => ({ ...(truth as object), context: { slot: chain.slot - 460 } })), /a backend behind/);
	});

	test("under the same payout nullifier, another payment is given back while the first may still land", async () => {
		const wallet = newWallet();
		const nonce = `nonce_${Date.now()}`;
		const first = await crashAfterFirstSend(wallet, nonce);
		// The same sender and nonce, another amount: a second payment the chain would know by the same nullifier.
		const other = first.offer(verifiedRecord(signedIntent(wallet, route, { tokenMintAddress: first.mint, amount: "2500000", senderAuthorizationNonce: nonce, expiresAtSlot: chain.slot + 100_000 })));
		expect(await (await first.restarted()).settler.settle(other)).toBe("released");
		expect(first.reported.map(report => report.status)).toEqual(["CRANKER_LEASED", "SUBMITTED", "CRANKER_LEASED", "VERIFIED"]);
		chain.landDropped();
		expect(chain.landedWithMemoEnding(first.nullifier)).toHaveLength(1);
		expect(chain.tokenBalance(first.creditAccount)).toBe(first.amount);
	});

	test("a settlement whose journal entry could not be saved is not reported or sent, and is not in the journal", async () => {
		const first = await crashAfterFirstSend();
		const { settler, journal } = await first.restarted();
		// The first settlement has expired (by the margin), so a new one is signed; its save fails (a directory where the file goes).
		chain.advance(451);
		fs.rmSync(journal.file);
		fs.mkdirSync(journal.file);
		const sends = chain.calls.get("sendTransaction") ?? 0;
		await expect(settler.settle(first.offered)).rejects.toThrow(/EISDIR/);
		expect(chain.calls.get("sendTransaction") ?? 0).toBe(sends);
		expect(first.reported.map(report => report.status)).toEqual(["CRANKER_LEASED", "SUBMITTED", "CRANKER_LEASED", "VERIFIED"]);
		// Still the first settlement's record in memory, not the unsaved one.
		expect(journal.signedFor(first.nullifier)?.signature).toBe(first.reported[1].transactionSignature);
		fs.rmdirSync(journal.file);
	});

	test("a second process on the same key and directory does not start while the first holds the journal", async () => {
		const signer = await generateKeyPairSigner();
		const dir = tempDir("scs-journal-");
		const holder = await openJournal(dir, signer.address);
		await expect(SettlementJournal.open(dir, signer.address, { waitForLockMs: 0 })).rejects.toThrow(/another Cranker process holds the settlement journal/);
		await holder.close();
		await openJournal(dir, signer.address);
	});

	test("a Cranker whose journal lock another process took writes nothing more over that process's journal", async () => {
		const signer = await generateKeyPairSigner();
		const dir = tempDir("scs-journal-");
		let lost = false;
		const stalled = await SettlementJournal.open(dir, signer.address, { onLockLost: () => (lost = true) });
		opened.push(stalled);
		// As after a stall past the lock's staleness: another process takes the lock over and keeps a settlement.
		fs.rmSync(`${stalled.file}.lock`, { recursive: true });
		const taker = await openJournal(dir, signer.address);
		const lifetime = { blockhash: encodeBase58(new Uint8Array(32).fill(3)) as Blockhash, lastValidBlockHeight: 100n };
		const transaction = await signMemoTransaction(signer, "a settlement", lifetime);
		await taker.keep({ payoutNullifier: "ab".repeat(32), transactionCommitment: "cd".repeat(32), signature: getSignatureFromTransaction(transaction), slot: 1, signedAt: Date.now(), lifetime, transaction });
		await waitFor(async () => lost || null, 15_000, "the stalled Cranker sees its lock lost");
		await expect(stalled.forgetExpired(10n ** 12n, Date.now() + 3600_000)).rejects.toThrow(/lock was lost/);
		expect(() => stalled.signedFor("ab".repeat(32))).toThrow(/lock was lost/);
		expect(JSON.parse(fs.readFileSync(taker.file, "utf8"))).toHaveLength(1);
	});

	test("a journal that cannot be read, or holds bytes this Cranker did not sign, stops the start", async () => {
		const first = await crashAfterFirstSend();
		await first.restarted();
		const file = path.join(first.stateDir, `settlements-${first.signer.address}.json`);
		const stored = JSON.parse(fs.readFileSync(file, "utf8")) as { wireTransaction: string }[];
		expect(stored).toHaveLength(1);
		const other = await generateKeyPairSigner();
		// Another key's journal file: the bytes it holds are not signed by `other`.
		fs.copyFileSync(file, path.join(first.stateDir, `settlements-${other.address}.json`));
		await expect(SettlementJournal.open(first.stateDir, other.address, { waitForLockMs: 0 })).rejects.toThrow(/unreadable \(the transaction of .* is not the one it names\)/);
		fs.writeFileSync(path.join(first.stateDir, `settlements-${other.address}.json`), "{ not json");
		await expect(SettlementJournal.open(first.stateDir, other.address, { waitForLockMs: 0 })).rejects.toThrow(/unreadable \(not JSON\)/);
	});

	test("a settlement is forgotten only once the chain is past its blockhash and ten minutes have passed since it was signed", async () => {
		const first = await crashAfterFirstSend();
		const { journal } = await first.restarted();
		const record = journal.signedFor(first.nullifier)!;
		const past = record.lifetime.lastValidBlockHeight + 1n;
		await journal.forgetExpired(past, record.signedAt + 5 * 60_000);
		await journal.forgetExpired(record.lifetime.lastValidBlockHeight, record.signedAt + 11 * 60_000);
		expect(journal.size).toBe(1);
		await journal.forgetExpired(past, record.signedAt + 11 * 60_000);
		expect(journal.size).toBe(0);
		await journal.close();
		expect((await openJournal(first.stateDir, first.signer.address)).size).toBe(0);
	});
});

describe("a settlement already on chain, offered again by the Node", () => {
	const chain = new LocalChain({ slotMs: 100, blockhashValiditySlots: 300 });
	const journals: SettlementJournal[] = [];
	beforeAll(() => chain.start());
	afterAll(async () => {
		await Promise.all(journals.map(journal => journal.close()));
		await chain.stop();
	});

	/**
	 * A funded Cranker with its own journal, before a compromised Node that offers `record` as
	 * VERIFIED at every ask, accepts every move, and leases for `leaseMs`.
	 */
	async function crankerFor(record: IntentRecord, mint: Address, reading: (rpc: Chain) => Chain = rpc => rpc, leaseMs = 60_000) {
		const keys = generateKeypair();
		chain.fundLamports(keys.publicKey);
		await chain.fundTokens(keys.publicKey, mint, 10n ** 12n);
		const signer = await createKeyPairSignerFromBytes(keys.secretKey);
		const authority = generateKeypair();
		const offered = toWorkerView(record);
		const { node, reported } = compromisedNode(() => record, signer.address, authority, leaseMs);
		const config = { mints: [mint], settlementProgramId: DEFAULT_SETTLEMENT_PROGRAM_ID, nodeAuthorityPubkey: authority.publicKey, pollIntervalMs: 50, rpcTimeoutMs: 1000 } as unknown as CrankerConfig;
		const journal = await SettlementJournal.open(tempDir("scs-journal-"), signer.address);
		journals.push(journal);
		return { settler: new Settler(node, reading(new Chain(chain.url, 5000)), signer, config, createLogger({}, () => {}), () => false, journal), node, reported, journal, offered };
	}

	/** A payment in a new mint, settled once by a Cranker of its own: what the Node then offers again. */
	async function paidOnce() {
		const mint = chain.createMint(6);
		const request = signedIntent(newWallet(), route, { tokenMintAddress: mint, expiresAtSlot: chain.slot + 100_000 });
		const record = verifiedRecord(request);
		const creditAccount = await creditAccountAddress(request.recipientRouteCommitment, mint);
		const first = await crankerFor(record, mint);
		expect(await first.settler.settle(first.offered)).toBe("confirmed");
		expect(chain.tokenBalance(creditAccount)).toBe(BigInt(request.amount));
		return { mint, request, record, creditAccount };
	}

	test("is not paid a second time when the chain cannot show a transaction that carries its memo (an RPC error, a backend without it yet, bytes that are not it): a review's replay", async () => {
		const { mint, request, record, creditAccount } = await paidOnce();

		const withoutTransaction = (rpc: Chain) => Object.assign(Object.create(rpc) as Chain, { transactionContents: async () => null });
		const failures: [string, (rpc: Chain) => Chain, () => void][] = [
			["an RPC error", rpc => rpc, () => chain.injectFault("getTransaction", "rpc-error", 1)],
			["a backend that lists it and has no transaction to give yet", withoutTransaction, () => {}],
			["bytes that are no transaction", rpc => rpc, () => chain.lieAboutTransactions(() => Uint8Array.from([1, 2, 3]))]
		];
		for (const [, reading, fail] of failures) {
			const second = await crankerFor(record, mint, reading);
			fail();
			await expect(second.settler.settle(second.offered)).rejects.toThrow(/carries this payment's memo and could not be read \(.+\): not paying beside/);
			chain.clearFaults();
			chain.lieAboutTransactions(null);
			expect(second.reported.map(update => update.status)).toEqual(["CRANKER_LEASED", "VERIFIED"]);
			expect(second.journal.size).toBe(0);
		}
		expect(chain.landedWithMemoEnding(payoutNullifier(request.senderWallet, request.senderAuthorizationNonce))).toHaveLength(1);
		expect(chain.tokenBalance(creditAccount)).toBe(BigInt(request.amount));
		// Read, it is this settlement: reported, not paid again.
		const third = await crankerFor(record, mint);
		expect(await third.settler.settle(third.offered)).toBe("confirmed");
		expect(third.reported.map(update => update.status)).toEqual(["CRANKER_LEASED", "SUBMITTED", "CONFIRMED"]);
		expect(chain.tokenBalance(creditAccount)).toBe(BigInt(request.amount));
	});

	test("is not leased again by a Cranker whose RPC's history starts after the payment was signed: a pruned ledger shows no settlement made before it (a review's replay)", async () => {
		const { mint, request, record, creditAccount } = await paidOnce();
		// The endpoint has pruned the slots the settlement landed in; the Node (restored from a backup) lists the intent again.
		chain.advance(10);
		chain.keepHistoryFrom(chain.slot);
		try {
			const second = await crankerFor(record, mint);
			expect(await second.settler.settle(second.offered)).toBe("unsigned");
			expect(second.reported).toEqual([]);
			expect(second.journal.size).toBe(0);
			// An endpoint that cannot tell where its history starts fails the attempt, unleased too.
			const third = await crankerFor(record, mint);
			chain.injectFault("getFirstAvailableBlock", "rpc-error", 1);
			await expect(third.settler.settle(third.offered)).rejects.toThrow();
			expect(third.reported).toEqual([]);
		} finally {
			chain.clearFaults();
			chain.keepHistoryFrom(0);
		}
		expect(chain.tokenBalance(creditAccount)).toBe(BigInt(request.amount));
	});

	test("a settlement whose drop its Node keeps calling live is watched only so long past its blockhash, then left SUBMITTED for the orphan rounds: the round goes on (a review's replay)", async () => {
		const mint = chain.createMint(6);
		const request = signedIntent(newWallet(), route, { tokenMintAddress: mint, expiresAtSlot: chain.slot + 100_000 });
		const cranker = await crankerFor(verifiedRecord(request), mint);
		// Every send is lost on the way; the Node answers each drop 409 SUBMISSION_LIVE, for good.
		chain.dropNextSends(1_000);
		const report = cranker.node.updateStatus.bind(cranker.node);
		let drops = 0;
		cranker.node.updateStatus = async (id, update, ...rest) => {
			if (update.status === "VERIFIED" && update.reason?.startsWith("DROPPED")) {
				// Its blockhash long expired by the second refusal.
				if (++drops === 2) chain.advance(700);
				throw new NodeApiError("the Node's chain view has not passed the submission's lifetime", 409, "SUBMISSION_LIVE");
			}
			const answer = await report(id, update, ...rest);
			// Past the blockhash's lifetime once submitted.
			if (update.status === "SUBMITTED") chain.advance(301);
			return answer;
		};
		try {
			const outcome = cranker.settler.settle(cranker.offered);
			expect(await Promise.race([outcome, new Promise(resolve => setTimeout(() => resolve("still watching"), 10_000))])).toBe("lost");
			expect(drops).toBeGreaterThanOrEqual(2);
			expect(cranker.reported.map(update => update.status)).toEqual(["CRANKER_LEASED", "SUBMITTED"]);
		} finally {
			chain.dropNextSends(0);
		}
	});

	test("copies of its memo on the credit account cost reads a few at a time within half the lease, then hold back this payment only (a review's replay)", async () => {
		const mint = chain.createMint(6);
		const request = signedIntent(newWallet(), route, { tokenMintAddress: mint, expiresAtSlot: chain.slot + 100_000 });
		// Copies anyone may land: each read shows a transaction that is not this settlement, 50 ms a read.
		const copies = Array.from({ length: 40 }, (_, i) => ({ signature: encodeBase58(Buffer.alloc(64, i + 1)), slot: 1000 - i }));
		let reads = 0;
		const copied = (rpc: Chain) =>
			Object.assign(Object.create(rpc) as Chain, {
				findSettlements: async () => copies,
				transactionContents: async () => (reads++, await new Promise(resolve => setTimeout(resolve, 50)), { memos: ["scs:v1:copy"], transfers: [] })
			});
		// A lease too short for any search (half of it is gone in RPC time): the first few are read all the same.
		const flooded = await crankerFor(verifiedRecord(request), mint, copied, 1000);
		const started = Date.now();
		expect(await flooded.settler.settle(flooded.offered)).toBe("released");
		expect(flooded.reported.map(update => update.status)).toEqual(["CRANKER_LEASED", "VERIFIED"]);
		expect(flooded.reported[1].reason).toMatch(/more transactions carry this payment's memo than this Cranker can read in time \(8 read\)/);
		expect(reads).toBe(8);
		expect(Date.now() - started).toBeLessThan(400);
		// Its credit account is not left alone, as a crowded history's is: the other payments to it go on.
		expect((flooded.settler as unknown as { crowded: Map<string, unknown> }).crowded.size).toBe(0);
		// Leased again, it reads the next copies, not the same ones again: copies landed once cost each lease nothing.
		expect(await flooded.settler.settle(flooded.offered)).toBe("released");
		expect(reads).toBe(16);
	});
});
