/**
 * Settles one intent, and finishes intents whose Cranker vanished after submitting.
 *
 * The rules that keep a payment from settling twice:
 * - the intent is reported SUBMITTED with the transaction's signature *before* the transaction is
 *   sent, so a Cranker that dies afterwards leaves a SUBMITTED intent that no sweep hands out again;
 * - before building, the chain is searched for a transaction carrying this payout nullifier's memo
 *   (SPEC §11's second guard), and one found is reported instead of sending another;
 * - every signed settlement is kept in this Cranker's journal (journal.ts) before it is reported or
 *   sent, and one kept for the same payout nullifier is sent again, the same bytes, while it can
 *   still land: a Node that offers the intent again (after a restart, say) does not get a second;
 * - a transaction is only declared dropped (and the intent returned to VERIFIED) once its
 *   blockhash has expired, i.e. once it can no longer land; the Node checks that on its own chain
 *   view too, and answers 409 SUBMISSION_LIVE while it cannot see it yet: the Cranker waits and
 *   asks again.
 */
import { address, getSignatureFromTransaction, isSolanaError, SOLANA_ERROR__JSON_RPC__SERVER_ERROR_MIN_CONTEXT_SLOT_NOT_REACHED, type Address, type KeyPairSigner, type Transaction } from "@solana/kit";
import { BackendBehindError } from "../lib/chain";
import { isAmount, isIsoTime } from "../lib/encoding";
import type { IntentState, MempoolIntent } from "../lib/intents";
import { payoutAuthorizationProblem, type PayoutAuthorization } from "../lib/payout";
import { creditAccountAddress, expectedSettlementOf, settlementMemo, settlementMismatches, signSettlementTransaction } from "../lib/settlement";
import { checkValidityWindow, isSenderSigned } from "../lib/verification";
import { HistoryTooLongError, type Chain, type Lifetime } from "./chain";
import type { CrankerConfig } from "./config";
import type { SettlementJournal, SignedSettlementRecord } from "./journal";
import type { Logger } from "./log";
import type { CrankerMetrics } from "./metrics";
import { NodeApiError, type NodeClient } from "./node-client";
import { rememberLatest } from "./recent";

/** What authorize answers when the Node refused the payout by rejecting the intent itself. */
const ENDED_BY_NODE = Symbol("ended by the Node");

/**
 * "unsigned": the work item is not a payment its sender signed, as it reads, or not one the Node
 * could have accepted; left alone, never leased.
 */
export type SettleResult = "confirmed" | "rejected" | "released" | "dropped" | "lost" | "unsigned";

/** After SIGTERM, how long a sent settlement is watched before it is left SUBMITTED for another Cranker. */
const STOP_WAIT_MS = 20_000;
/**
 * Blocks past its last landing height after which a settlement is no longer watched: the Node may
 * take its drop for live a while (BLOCKHASH_LIFETIME_BLOCKS past its own reading), but not for good,
 * and the round's other work waits meanwhile. Left SUBMITTED, the orphan rounds report it later.
 */
const WATCH_PAST_EXPIRY_BLOCKS = 600n;
/**
 * Blocks past its last landing height before a settlement this Cranker signed is taken for one that
 * can no longer land, and another may be signed: one RPC answer (a height from a backend ahead of
 * the one that answers the status) must not be enough to pay twice.
 */
const SIGN_AGAIN_AFTER_BLOCKS = 150n;
/** Without a submission slot, slots are counted as at most this long (Solana's target is 400 ms). */
const SLOT_MS_UPPER_BOUND = 1000;
/** The Node keeps reasons up to 512 characters. */
const MAX_REASON_LENGTH = 500;
/**
 * An orphan whose landed transaction is not its settlement waits for an operator: it is looked at
 * again this rarely, not at every orphan round (an RPC read and an error line each time), and at
 * most this many are remembered.
 */
const OPERATOR_RECHECK_MS = 10 * 60_000;
const OPERATOR_CASES_MAX = 10_000;
/**
 * No settlement of an intent lands before its sender signed it: the chain is searched back to the
 * signed issue time, less this for a sender's clock running ahead.
 */
const SENDER_CLOCK_SLACK_S = 3600;

/**
 * A credit account whose history was too long to search is not searched again for this long, then
 * twice as long after each failure more, up to the maximum; at most this many are remembered.
 */
const CROWDED_FIRST_WAIT_MS = 30_000;
const CROWDED_MAX_WAIT_MS = 10 * 60_000;
const CROWDED_ACCOUNTS_MAX = 10_000;

/** Transactions carrying a payment's memo are read this many at a time: anyone can write copies of it. */
const CANDIDATE_READS_AT_ONCE = 8;
/** The payments whose copies read are remembered, the latest ones, and how many copies of each at most (about 15 MB in all). */
const PAYMENTS_WITH_COPIES_MAX = 100;
const COPIES_REMEMBERED_MAX = 1_000;

/** More copies of a payment's memo on its credit account than a Cranker can read within half a lease. */
class CandidatesTooManyError extends Error {
	override name = "CandidatesTooManyError";
}

type ReportFields = { transactionSignature?: string; slot?: number; lastValidBlockHeight?: number; reason?: string };

/** Where the search for an earlier settlement of `intent` starts: unix seconds. */
const searchFromOf = (intent: MempoolIntent) => Math.floor(Date.parse(intent.senderAuthorizationIssuedAt) / 1000) - SENDER_CLOCK_SLACK_S;
const sleep = (ms: number) => new Promise(resolve => setTimeout(resolve, ms));
const isRefusal = (err: unknown) => err instanceof NodeApiError && err.status >= 400 && err.status < 500;

export class Settler {
	private readonly me: string;
	/** Orphans left for an operator, by intent id: when to look at each again (performance.now()). */
	private readonly leftForOperator = new Map<string, number>();
	/**
	 * Credit accounts whose history was too long to search: until when they are left, how long the
	 * last wait was (performance.now() and ms), and the shortest search that failed (back to `since`, unix seconds).
	 */
	private readonly crowded = new Map<string, { until: number; waitMs: number; since: number }>();
	/** Per payment memo, the transactions carrying it that were read and are not its settlement. */
	private readonly notTheSettlement = new Map<string, Set<string>>();

	constructor(
		private readonly node: NodeClient,
		private readonly chain: Chain,
		private readonly signer: KeyPairSigner,
		private readonly config: CrankerConfig,
		private readonly log: Logger,
		/** True once SIGTERM arrived: a lease not yet submitted is released instead of settled. */
		private readonly stopping: () => boolean,
		private readonly journal: SettlementJournal,
		private readonly metrics: CrankerMetrics | null = null,
		/** Told the settlement program each payout answer names (worker.ts takes no more work while it is another). */
		private readonly programNamed: (program: string) => void = () => {}
	) {
		this.me = signer.address;
	}

	/** Leases `intent` (a VERIFIED work item) and settles it. "lost" when another Cranker got it first. */
	async settle(intent: MempoolIntent): Promise<SettleResult> {
		// The Node's word is not the sender's: this Cranker pays out of its own liquidity.
		if (this.notPayable(intent)) return "unsigned";
		// Its recipient's credit account was too crowded to search as far back a moment ago: nor is it
		// leased now. One that needs a shorter search (signed later) is tried.
		const searchFrom = searchFromOf(intent);
		const crowded = this.crowded.get(await this.creditAccountOf(intent));
		if (crowded && crowded.until > performance.now() && searchFrom <= crowded.since) return "unsigned";
		// The search for an earlier settlement finds nothing only as far back as the endpoint's history
		// reaches: a pruned ledger shows none made before it starts (a Node restored from a backup may
		// list a paid intent again, and the journal forgets a settlement ten minutes after it is
		// signed). Such a payment is not leased; an endpoint that cannot tell fails the attempt, unleased.
		const historyStart = await this.chain.historyStartsAt();
		if (historyStart > searchFrom) {
			this.log.warn("not leased: SOLANA_RPC_URL's history starts after this payment was signed, so a settlement of it made before then would not show", { intent: intent.id, historyStartsAt: new Date(historyStart * 1000).toISOString() });
			return "unsigned";
		}
		const askedAt = performance.now();
		let leased: MempoolIntent;
		try {
			leased = await this.node.updateStatus(intent.id, { status: "CRANKER_LEASED", crankerPubkey: this.me, expectedVersion: intent.stateVersion });
		} catch (err) {
			if (isRefusal(err)) return "lost";
			throw err;
		}
		// The lease asked for, held by this Cranker: what else the Node answers is nothing to pay (nor to give back: it is not this lease).
		if (leased.id !== intent.id || leased.lease?.crankerPubkey !== this.me) {
			this.log.warn("the Node answered the lease with another intent or holder: left alone", { intent: intent.id });
			return "lost";
		}
		// The payment chosen, whose mint and amount this Cranker offered to pay: another signed one
		// under its id (in another mint the key holds, for more) is given back, not paid.
		if (leased.transactionCommitment !== intent.transactionCommitment) {
			this.log.warn("the Node answered the lease with another payment than the work item it listed: given back", { intent: intent.id });
			return this.release(leased, "the Node answered the lease with another payment than the work item it listed");
		}
		this.metrics?.leases.inc();
		this.log.info("leased", { intent: leased.id, amount: leased.amount, mint: leased.tokenMintAddress });
		// Anyone may crowd a credit account's history: the search for an earlier settlement stops
		// halfway through the lease (its length by the Node's clock, counted on this one's from when
		// it was asked), or earlier so that two RPC calls' time is left after it, and the lease is
		// given back, rather than a settlement signed after the lease lapsed.
		const leaseMs = leased.lease ? Date.parse(leased.lease.expiresAt) - Date.parse(leased.lease.leasedAt) : NaN;
		const searchMs = Math.min(leaseMs / 2, leaseMs - 2 * this.config.rpcTimeoutMs);
		const searchUntil = askedAt + (Number.isFinite(searchMs) ? Math.max(0, searchMs) : 0);
		try {
			return await this.settleLeased(leased, searchUntil);
		} catch (err) {
			// Anything unexpected before the SUBMITTED report: give the lease back so another Cranker can try.
			const current = await this.node.intent(leased.id).catch(() => null);
			if (current?.receiverStatus === "CRANKER_LEASED" && current.lease?.crankerPubkey === this.me) await this.release(current, `cranker error: ${(err as Error).message}`);
			// An endpoint behind itself: given back like any refusal to pay, so that it is left a while, not leased and searched again each round.
			if (err instanceof BackendBehindError || isSolanaError(err, SOLANA_ERROR__JSON_RPC__SERVER_ERROR_MIN_CONTEXT_SLOT_NOT_REACHED)) return "released";
			throw err;
		}
	}

	private async settleLeased(leased: MempoolIntent, searchUntil: number): Promise<SettleResult> {
		// The lease's answer is the Node's word again: what is paid is what it says now.
		const notPayable = this.notPayable(leased);
		if (notPayable) return this.release(leased, notPayable);
		const authorization = await this.authorize(leased);
		if (authorization === ENDED_BY_NODE) {
			this.log.info("the Node rejected the intent when it refused its payout", { intent: leased.id });
			this.metrics?.settlements.inc({ outcome: "rejected" });
			return "rejected";
		}
		if (typeof authorization === "string") return this.release(leased, authorization);

		const creditAccount = await this.creditAccountOf(leased);
		const searchFrom = searchFromOf(leased);
		// Where the chain stands before anything is read of this payment: every later answer must come
		// from at least there, so that a backend behind another (one URL, several backends) cannot hide
		// a settlement that landed before, in the search or in a status.
		const position = await this.chain.position();
		let landed: { signature: string; slot: number } | null;
		try {
			landed = await this.settlementOnChain(leased, creditAccount, authorization.payoutNullifier, searchFrom, searchUntil, position.slot);
		} catch (err) {
			// Given back: the copies of this payment's memo hold back this payment only; a crowded
			// history, every payment to the credit account, which is left for a while.
			if (err instanceof CandidatesTooManyError) return this.release(leased, err.message);
			if (!(err instanceof HistoryTooLongError)) throw err;
			this.leaveCrowded(creditAccount, searchFrom);
			return this.release(leased, err.message);
		}
		this.crowded.delete(creditAccount);
		if (landed) {
			this.log.warn("a settlement with this payout nullifier is already on chain: reporting it instead of sending another", { intent: leased.id, signature: landed.signature });
			return this.reportLanded(leased, landed.signature, landed.slot);
		}
		// Its own earlier settlement only now, never in place of the search: nothing on chain keeps two
		// transfers apart by nullifier, and the search is what finds another Cranker's that landed.
		const earlier = this.journal.signedFor(authorization.payoutNullifier);
		const again = earlier ? await this.settleAgain(leased, earlier, position) : null;
		if (again) return again;

		const decimals = await this.chain.mintDecimals(leased.tokenMintAddress);
		const lifetime = await this.chain.latestBlockhash();
		// Read after the blockhash, so `slot` is never later than the blockhash's own slot: others add the lifetime to it.
		const slot = await this.chain.slot();
		if (Date.parse(leased.senderAuthorizationExpiresAt) <= Date.now() || BigInt(leased.expiresAtSlot) <= slot) return this.finish(leased, "REJECTED", { reason: "EXPIRED" });
		if (this.stopping()) return this.release(leased, "cranker stopping");
		const { transaction } = await signSettlementTransaction(
			{
				cranker: this.signer,
				mint: address(leased.tokenMintAddress),
				decimals,
				amount: BigInt(leased.amount),
				recipientRouteCommitment: leased.recipientRouteCommitment,
				transactionCommitment: leased.transactionCommitment,
				payoutNullifier: authorization.payoutNullifier,
				programId: this.config.settlementProgramId
			},
			lifetime
		);
		const signature = getSignatureFromTransaction(transaction);
		await this.journal.keep({ payoutNullifier: authorization.payoutNullifier, transactionCommitment: leased.transactionCommitment, signature, slot: Number(slot), signedAt: Date.now(), lifetime, transaction });
		// Reported before it is sent: from here on no sweep returns the intent to VERIFIED.
		const submitted = await this.report(leased, "SUBMITTED", { transactionSignature: signature, slot: Number(slot), lastValidBlockHeight: Number(lifetime.lastValidBlockHeight) });
		if (!submitted) return "lost";
		this.log.info("submitted", { intent: leased.id, signature });
		return this.land(submitted, transaction, lifetime);
	}

	/**
	 * `earlier`, the settlement this Cranker signed for the same payout nullifier, settles the lease
	 * while it can still land: reported and sent again, the same bytes. Null once it can no longer
	 * land and never did: then a new one may be signed.
	 */
	private async settleAgain(leased: MempoolIntent, earlier: SignedSettlementRecord, position: { height: bigint; slot: bigint }): Promise<SettleResult | null> {
		const samePayment = earlier.transactionCommitment === leased.transactionCommitment;
		// Height first, then the signature, as of that height's slot at least: a transaction not seen
		// after its blockhash expired can never land.
		if (position.height > earlier.lifetime.lastValidBlockHeight + SIGN_AGAIN_AFTER_BLOCKS) {
			const state = await this.chain.signatureState(earlier.signature, position.slot);
			if (state.kind === "unknown" || state.kind === "failed") return null;
			// The nullifier is the payment's key on chain: spent by another payment, it pays no other.
			if (state.kind === "landed") return samePayment ? this.reportLanded(leased, earlier.signature, Number(state.slot)) : this.release(leased, "this payout nullifier was spent by another payment");
			return this.release(leased, "a settlement signed before is still being processed");
		}
		if (!samePayment) return this.release(leased, "a settlement signed for another payment with this payout nullifier may still land");
		this.log.warn("this Cranker signed a settlement for this intent that may still land: sending it again instead of signing another", { intent: leased.id, signature: earlier.signature });
		const submitted = await this.report(leased, "SUBMITTED", { transactionSignature: earlier.signature, slot: earlier.slot, lastValidBlockHeight: Number(earlier.lifetime.lastValidBlockHeight) });
		return submitted ? this.land(submitted, earlier.transaction, earlier.lifetime) : "lost";
	}

	/**
	 * Reports `signature`, a transaction that already landed (in `slot`), as the lease's submission,
	 * then settles it. The slot tells the Node how far back the chain's history must reach before it
	 * takes the signature's absence for a drop.
	 */
	private async reportLanded(leased: MempoolIntent, signature: string, slot: number): Promise<SettleResult> {
		// It landed already: the current height bounds when it could have.
		const submitted = await this.report(leased, "SUBMITTED", { transactionSignature: signature, slot, lastValidBlockHeight: Number(await this.chain.blockHeight()) });
		return submitted ? this.finishLanded(submitted, signature) : "lost";
	}

	/** The payout authorization, checked against the lease; a string is the reason to release instead, ENDED_BY_NODE none to. */
	private async authorize(leased: MempoolIntent): Promise<PayoutAuthorization | string | typeof ENDED_BY_NODE> {
		let authorization: PayoutAuthorization;
		try {
			authorization = await this.node.payoutAuthorization(leased.id, this.me);
		} catch (err) {
			if (!isRefusal(err)) throw err;
			// Its route was replaced: the Node rejected the intent, and there is no lease left to give back.
			const { type, data } = err as NodeApiError;
			if ((data as { state?: unknown } | undefined)?.state === "REJECTED") return ENDED_BY_NODE;
			return `no payout authorization: ${type}`;
		}
		const { programId: _programId, ...settlement } = expectedSettlementOf(leased, this.config.settlementProgramId);
		const problem = payoutAuthorizationProblem(authorization, { ...settlement, workId: leased.id, crankerPubkey: this.me }, this.config.nodeAuthorityPubkey, Date.now());
		if (problem) return `payout authorization refused: ${problem}`;
		// An older Node names none. The one that checks the settlement names its program here, just before it is signed.
		const named = (authorization as { settlementProgramId?: unknown }).settlementProgramId;
		if (typeof named === "string") {
			this.programNamed(named);
			if (named !== this.config.settlementProgramId) return `the Node checks settlements against program ${named}, not SETTLEMENT_PROGRAM_ID`;
		}
		return authorization;
	}

	/** Sends and watches `transaction` until it lands, fails, or its blockhash expires. */
	private async land(submitted: MempoolIntent, transaction: Transaction, lifetime: Lifetime): Promise<SettleResult> {
		const signature = getSignatureFromTransaction(transaction);
		let stopDeadline: number | null = null;
		let refusal: string | null = null;
		for (let poll = 0; ; poll++) {
			if (this.stopping()) {
				// Stopping: wait for the outcome a while, then leave it SUBMITTED for finishOrphans (safe either way).
				stopDeadline ??= performance.now() + STOP_WAIT_MS;
				if (performance.now() > stopDeadline) return "lost";
			}
			if (poll % 4 === 0 && refusal === null) {
				// Send, then re-broadcast the same signed bytes now and then: it can land at most once.
				const outcome = await this.chain.send(transaction).catch(err => {
					this.log.warn("sendTransaction failed; watching the signature", { intent: submitted.id, error: (err as Error).message });
					return null;
				});
				// Refused by preflight on the first send: it was never forwarded. The Node lets it go only
				// once it can no longer land (its blockhash expired), so it is watched until then, unsent.
				// (A refused re-broadcast proves nothing: the first copy may still land.)
				if (poll === 0 && outcome?.kind === "refused") refusal = outcome.detail;
			}
			const state = await this.chain.signatureState(signature).catch(() => null);
			if (state?.kind === "landed") return this.finishLanded(submitted, signature);
			if (state?.kind === "failed") return this.finish(submitted, "REJECTED", { reason: `ONCHAIN_FAILED: ${state.detail}` });
			const position = await this.chain.position().catch(() => null);
			const height = position?.height ?? null;
			if (height !== null && height > lifetime.lastValidBlockHeight + WATCH_PAST_EXPIRY_BLOCKS) {
				this.log.warn("a settlement its blockhash outlived long ago is still not ended (the Node takes its drop for live, or the RPC shows it pending): left SUBMITTED for the orphan rounds", { intent: submitted.id, signature });
				return "lost";
			}
			if (height !== null && height > lifetime.lastValidBlockHeight) {
				// The blockhash has expired: one last look, as of that height's slot, then the transaction can never land.
				const last = await this.chain.signatureState(signature, position!.slot).catch(() => null);
				if (last === null) {
					await sleep(this.config.pollIntervalMs / 2);
					continue;
				}
				if (last.kind === "landed") return this.finishLanded(submitted, signature);
				if (last.kind === "failed") return this.finish(submitted, "REJECTED", { reason: `ONCHAIN_FAILED: ${last.detail}` });
				if (last.kind === "unknown") {
					this.log.warn("transaction dropped: its blockhash expired before it landed", { intent: submitted.id, signature });
					const reason = refusal === null ? "DROPPED: blockhash expired before the transaction landed" : `DROPPED: refused in preflight: ${refusal}`;
					const dropped = await this.drop(submitted, reason);
					if (dropped !== "live") return dropped;
					// The Node's chain view has not passed the height yet: ask again shortly.
				}
			}
			await sleep(this.config.pollIntervalMs / 2);
		}
	}

	/**
	 * This settlement, if the credit account's history since `since` holds it: of the transactions
	 * that carry its memo, the one that is it. Anyone can write that memo, so each is read, a few at
	 * once, within the search's time (`until`; the first ones whatever the time): one read and shown
	 * to be something else is passed over. One that cannot be read now (an RPC error, a backend that
	 * lists it but has no transaction to give yet, bytes that are not it) may be this settlement, and
	 * paying beside it could pay twice: that throws, and the lease is given back.
	 */
	private async settlementOnChain(intent: MempoolIntent, creditAccount: Address, payoutNullifier: string, since: number, until: number, seenSlot: bigint): Promise<{ signature: string; slot: number } | null> {
		const expected = expectedSettlementOf(intent, this.config.settlementProgramId);
		const memo = settlementMemo(intent.transactionCommitment, payoutNullifier);
		// Copies read at an earlier lease of this payment are not read again: a landed transaction does not change.
		let notIt = this.notTheSettlement.get(memo);
		if (!notIt) rememberLatest(this.notTheSettlement, memo, (notIt = new Set()), PAYMENTS_WITH_COPIES_MAX);
		const candidates = (await this.chain.findSettlements(creditAccount, memo, since, until, seenSlot)).filter(({ signature }) => !notIt.has(signature));
		const isThisSettlement = async ({ signature }: { signature: string }) => {
			const contents = await this.chain.transactionContents(signature).catch((err: Error) => err);
			if (contents instanceof Error || !contents || contents.notShown) {
				const why = contents instanceof Error ? contents.message : !contents ? "the RPC gave no transaction for it" : contents.unreadable;
				throw new Error(`transaction ${signature} carries this payment's memo and could not be read (${why}): not paying beside what may be this settlement`);
			}
			if ((await settlementMismatches(contents, expected)).length === 0) return true;
			if (notIt.size < COPIES_REMEMBERED_MAX) notIt.add(signature);
			return false;
		};
		for (let at = 0; at < candidates.length; at += CANDIDATE_READS_AT_ONCE) {
			if (at > 0 && performance.now() > until) throw new CandidatesTooManyError(`more transactions carry this payment's memo than this Cranker can read in time (${at} read)`);
			const part = candidates.slice(at, at + CANDIDATE_READS_AT_ONCE);
			const verdicts = await Promise.all(part.map(isThisSettlement));
			const found = part.find((_, i) => verdicts[i]);
			if (found) return found;
		}
		return null;
	}

	/** Whether `signature` is a successful transaction doing exactly this intent's settlement. */
	private async isSettlementOf(intent: MempoolIntent, signature: string): Promise<boolean> {
		const contents = await this.chain.transactionContents(signature).catch(() => null);
		return !!contents && (await settlementMismatches(contents, expectedSettlementOf(intent, this.config.settlementProgramId))).length === 0;
	}

	/**
	 * A landed transaction is checked against the intent (memo, mint, amount, credit account) before
	 * CONFIRMED; one that is not its settlement is left for an operator (`onLeft`, then "lost").
	 */
	private async finishLanded(submitted: MempoolIntent, signature: string, onLeft: () => void = () => {}): Promise<SettleResult> {
		if (!(await this.isSettlementOf(submitted, signature))) {
			this.log.error("landed transaction is not this settlement; leaving it for an operator", { intent: submitted.id, signature });
			onLeft();
			return "lost";
		}
		const state = await this.chain.signatureState(signature);
		const slot = state.kind === "landed" ? Number(state.slot) : undefined;
		const result = await this.finish(submitted, "CONFIRMED", { transactionSignature: signature, ...(slot !== undefined ? { slot } : {}) });
		if (result === "confirmed") this.log.info("confirmed", { intent: submitted.id, signature, slot });
		return result;
	}

	/**
	 * Finishes SUBMITTED intents whose holder's lease has lapsed (its Cranker died or stopped):
	 * confirms what landed, and returns to VERIFIED what can no longer land. One that failed on
	 * chain is rejected by its holder (this Cranker's own, after a restart); cancelling a payment
	 * for good is not another Cranker's call (SPEC §2.4), so another returns it to VERIFIED once its
	 * blockhash has expired, for another try.
	 */
	async finishOrphans(): Promise<void> {
		await this.forgetExpiredSettlements();
		const candidates = await this.node.intentIds("SUBMITTED", 500);
		for (const { id } of candidates) {
			if (this.stopping()) return;
			await this.finishOrphan(id).catch(err => this.log.warn("could not check an orphaned submission", { intent: id, error: (err as Error).message }));
		}
	}

	private async forgetExpiredSettlements(): Promise<void> {
		try {
			await this.journal.forgetExpired(await this.chain.blockHeight());
		} catch (err) {
			this.log.warn("could not forget expired settlements from the journal", { error: (err as Error).message });
		}
	}

	private async finishOrphan(id: string): Promise<void> {
		if ((this.leftForOperator.get(id) ?? 0) > performance.now()) return;
		const record = await this.node.intent(id);
		if (record.receiverStatus !== "SUBMITTED" || !record.submission) return;
		const mine = record.lease?.crankerPubkey === this.me;
		if (!mine && record.lease && Date.parse(record.lease.expiresAt) > Date.now()) return;
		const { transactionSignature, slot: submittedSlot, submittedAt, lastValidBlockHeight } = record.submission;
		// Height and slot first (one answer), then the signature as of that slot: a transaction not seen
		// after its blockhash expired can never land.
		const { height, slot } = await this.chain.position();
		const state = await this.chain.signatureState(transactionSignature, slot);
		// Left for an operator only when the transaction is not the settlement: a refused CONFIRMED (the
		// Node's chain view a moment behind, say) is tried again at the next round.
		if (state.kind === "landed") await this.finishLanded(record, transactionSignature, () => this.leaveForOperator(id));
		else if (state.kind === "failed" && mine) await this.finish(record, "REJECTED", { reason: `ONCHAIN_FAILED: ${state.detail}` });
		else if (state.kind === "unknown" || state.kind === "failed") {
			const expired =
				lastValidBlockHeight !== undefined
					? height > BigInt(lastValidBlockHeight)
					: submittedSlot !== undefined
						? slot > BigInt(submittedSlot + this.config.blockhashLifetimeSlots)
						: Date.now() > Date.parse(submittedAt) + this.config.blockhashLifetimeSlots * SLOT_MS_UPPER_BOUND;
			if (!expired) return;
			this.log.warn("orphaned submission can no longer land: returning the intent to VERIFIED", { intent: id, signature: transactionSignature });
			// The Node checks the same on its own chain view; SUBMISSION_LIVE means later, in another round.
			await this.drop(record, state.kind === "failed" ? `DROPPED: failed on chain (${state.detail}), and its blockhash expired` : "DROPPED: blockhash expired before the transaction landed");
		}
	}

	/**
	 * Why `intent` is not a payment to make, as it reads; null when it is one.
	 * - It must be one its sender signed: its message rebuilt from its fields (amount, mint, TIN,
	 *   route commitment, expiry…), that message's commitment, and the sender's strict signature of
	 *   it. The payout authorization is the Node's own word on the same fields, and a Node that
	 *   holds its authority key could sign one for anything.
	 * - Its signed validity window must be one the Node accepts (issued at most 60 s ahead of this
	 *   clock, valid at most 24 h): the chain search for an earlier settlement starts from its
	 *   issue time, and a time set ahead would cut it short.
	 */
	private notPayable(intent: MempoolIntent): string | null {
		let reason: string | null = null;
		// Its commitment is in the settlement's memo, by which the chain is searched: it must be there, and the message's.
		if (typeof intent.transactionCommitment !== "string" || !isSenderSigned(intent)) reason = "not a payment its sender signed";
		// Signed, but not as the Node takes it: an amount BigInt reads otherwise (0x64), a time Date.parse reads as NaN or in this machine's zone (never expiring).
		else if (!isAmount(intent.amount) || !isIsoTime(intent.senderAuthorizationIssuedAt) || !isIsoTime(intent.senderAuthorizationExpiresAt) || !Number.isSafeInteger(intent.expiresAtSlot))
			reason = "not a payment the Node could have accepted: malformed amount, time or slot";
		else if (!(this.config.mints as readonly string[]).includes(intent.tokenMintAddress)) reason = "a payment in a mint this Cranker does not pay out in (CRANKER_MINTS)";
		else {
			const window = checkValidityWindow(intent.senderAuthorizationIssuedAt, intent.senderAuthorizationExpiresAt, Date.now());
			if (!window.ok && window.reason === "INVALID_MESSAGE") reason = `not a payment the Node could have accepted: ${window.detail}`;
		}
		if (reason) this.log.warn(`${reason}: left alone`, { intent: intent.id });
		return reason;
	}

	private creditAccountOf(intent: MempoolIntent): Promise<Address> {
		return creditAccountAddress(intent.recipientRouteCommitment, address(intent.tokenMintAddress), this.config.settlementProgramId);
	}

	private leaveCrowded(creditAccount: string, since: number): void {
		const last = this.crowded.get(creditAccount);
		const waitMs = Math.min(2 * (last?.waitMs ?? CROWDED_FIRST_WAIT_MS / 2), CROWDED_MAX_WAIT_MS);
		rememberLatest(this.crowded, creditAccount, { until: performance.now() + waitMs, waitMs, since: Math.max(since, last?.since ?? since) }, CROWDED_ACCOUNTS_MAX);
	}

	private leaveForOperator(id: string): void {
		rememberLatest(this.leftForOperator, id, performance.now() + OPERATOR_RECHECK_MS, OPERATOR_CASES_MAX);
	}

	private release(leased: MempoolIntent, reason: string): Promise<SettleResult> {
		this.log.info("releasing lease", { intent: leased.id, reason });
		return this.finish(leased, "VERIFIED", { reason });
	}

	private async finish(record: MempoolIntent, status: "CONFIRMED" | "REJECTED" | "VERIFIED", fields: ReportFields): Promise<SettleResult> {
		const done = await this.report(record, status, fields);
		if (!done) return "lost";
		return status === "CONFIRMED" ? "confirmed" : status === "REJECTED" ? "rejected" : "released";
	}

	/** Reports the submission dropped; "live" while the Node's own chain view cannot see it expired yet (409 SUBMISSION_LIVE). */
	private async drop(record: MempoolIntent, reason: string): Promise<"dropped" | "lost" | "live"> {
		try {
			return (await this.report(record, "VERIFIED", { reason }, true)) ? "dropped" : "lost";
		} catch (err) {
			if ((err as NodeApiError).type === "SUBMISSION_LIVE") return "live";
			throw err;
		}
	}

	private count(status: IntentState): void {
		if (status === "SUBMITTED") this.metrics?.submissions.inc();
		else if (status === "CONFIRMED" || status === "REJECTED") this.metrics?.settlements.inc({ outcome: status === "CONFIRMED" ? "confirmed" : "rejected" });
		else if (status === "VERIFIED") this.metrics?.settlements.inc({ outcome: "returned" });
	}

	/**
	 * One status update; a refusal (someone else moved it, the lease lapsed) is logged and answered
	 * null, except SUBMISSION_LIVE, which `passLive` callers handle.
	 */
	private async report(record: MempoolIntent, status: IntentState, fields: ReportFields, passLive = false): Promise<MempoolIntent | null> {
		const reason = fields.reason?.slice(0, MAX_REASON_LENGTH);
		try {
			const updated = await this.node.updateStatus(record.id, { status, crankerPubkey: this.me, expectedVersion: record.stateVersion, ...fields, ...(reason ? { reason } : {}) });
			this.count(status);
			return updated;
		} catch (err) {
			if (!isRefusal(err) || (passLive && (err as NodeApiError).type === "SUBMISSION_LIVE")) throw err;
			this.log.warn(`the Node refused ${status}`, { intent: record.id, type: (err as NodeApiError).type });
			return null;
		}
	}
}
