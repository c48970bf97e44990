/**
 * What the chain must show before the Node lets a submission go (SPEC §2.4, §5): a confirmation
 * only on a landed transaction that is exactly the settlement, a "dropped" only once the
 * transaction can never land, a rejection only once it failed or can never land. Pure: the
 * caller reads the chain (lib/chain.ts) and passes what it saw.
 */
import { ServiceError } from "./errors";

export type ChainEvidence =
	/** CONFIRMED, TIN `finalized`: a confirmed, successful transaction with exactly the expected content. */
	| "landed"
	/** SUBMITTED → VERIFIED: the blockhash expired, and the chain does not know the signature or knows it failed. */
	| "cannot-land"
	/** SUBMITTED → REJECTED: the transaction failed on chain, or can never land. */
	| "failed-or-cannot-land";

/** A transaction's status as the chain reports it; `pending` is seen but not yet confirmed. */
export type SignatureStatus = "landed" | "failed" | "pending" | "unknown";

/** What a transaction the chain has does to the settlement expected. */
export interface SettlementReading {
	/** Why it is not exactly the settlement (empty when it is). */
	mismatches: string[];
	/** Whether it touches the settlement at all (its memo, or a transfer to its credit account). */
	related: boolean;
	/** The endpoint lists the signature but gave no transaction for it (yet): nothing was read. */
	notGiven?: true;
}

export interface ChainObservation {
	/** Read before the status: a transaction not seen after that height had expired can never land. */
	blockHeight: number;
	status: SignatureStatus;
	/** For a transaction the chain has (landed or failed), when it was read. */
	content?: SettlementReading;
	/** For a signature the chain does not know, when asked: the first slot whose transactions the endpoint still shows. */
	historyFrom?: number;
}

/**
 * Accepts the evidence (answering whether the chain was checked at all) or throws the SPEC's
 * refusal. `observations` are what each RPC endpoint showed, null when no chain is configured:
 * only a confirmation can then be recorded, on the signed Cranker's word. Every endpoint's
 * observation must bear the evidence out; the first that does not gives the refusal.
 * `lastLandingHeight` is the last block height at which the submission could still land;
 * `earliestLandingSlot` a slot at or before the first at which it could land.
 */
export function judgeChainEvidence(need: ChainEvidence, observations: readonly ChainObservation[] | null, lastLandingHeight: number | undefined, earliestLandingSlot?: number): boolean {
	if (!observations?.length) {
		if (need === "landed") return false;
		throw new ServiceError("CHAIN_UNAVAILABLE", "No chain is configured to prove the transaction can no longer land (SOLANA_RPC_URL)");
	}
	for (const observation of observations) judgeObservation(need, observation, lastLandingHeight, earliestLandingSlot);
	return true;
}

/** Throws unless one endpoint's observation bears the evidence out. */
function judgeObservation(need: ChainEvidence, observation: ChainObservation, lastLandingHeight: number | undefined, earliestLandingSlot: number | undefined): void {
	const { status, content } = observation;
	// A reported signature the chain has, but whose transaction does not touch this settlement, was
	// never this submission: it says nothing about whether the real one can still land.
	const unrelated = (status === "landed" || status === "failed") && content?.related === false;
	// A submission without a known last landing height can never be proven dead. A failed one moved
	// nothing, and once past that height it cannot land again either (as far as the confirmed chain
	// tells, as for one never seen): it may go back to VERIFIED too, or a failure whose holder never
	// returns would keep the payment SUBMITTED for good.
	const pastLanding = lastLandingHeight !== undefined && observation.blockHeight > lastLandingHeight;
	// A signature the chain does not know proves nothing unless its history reaches back to when
	// the transaction could first land: a ledger pruned past that has forgotten a landed one too,
	// and taking it for dropped would have the intent paid again.
	const forgotten = status === "unknown" && !(observation.historyFrom !== undefined && earliestLandingSlot !== undefined && observation.historyFrom <= earliestLandingSlot);
	if (need !== "landed" && pastLanding && forgotten) {
		// Reported while no chain was configured: nothing tells how far back the history must reach.
		if (earliestLandingSlot === undefined)
			throw new ServiceError("CHAIN_UNAVAILABLE", "The Node read no slot when this submission was reported: it cannot show that the transaction never landed", { reason: "NO_SUBMISSION_READING" });
		throw new ServiceError("CHAIN_UNAVAILABLE", "An RPC endpoint of SOLANA_RPC_URL keeps no history back to the submission: it cannot show that the transaction never landed", {
			reason: "RPC_HISTORY_TOO_SHORT",
			...(observation.historyFrom !== undefined ? { firstAvailableSlot: observation.historyFrom } : {}),
			slotAtSubmission: earliestLandingSlot
		});
	}
	const cannotLand = ((status === "unknown" && !forgotten) || status === "failed" || unrelated) && pastLanding;
	switch (need) {
		case "landed":
			if (status === "failed") throw new ServiceError("SETTLEMENT_MISMATCH", "The transaction failed on chain");
			if (status !== "landed") throw new ServiceError("NOT_ON_CHAIN", "The transaction is not confirmed on chain");
			if (content?.notGiven) throw new ServiceError("NOT_ON_CHAIN", "An RPC endpoint lists the transaction but gives none for it yet");
			if (!content || content.mismatches.length) throw new ServiceError("SETTLEMENT_MISMATCH", "The transaction is not this settlement", { problems: content?.mismatches ?? [] });
			return;
		case "cannot-land":
			if (!cannotLand) throw liveSubmission(observation, lastLandingHeight);
			return;
		case "failed-or-cannot-land":
			// A transaction that moved money for this settlement (even the wrong amount) is for an operator, not a rejection.
			if (status === "landed" && !unrelated) throw new ServiceError("INVALID_TRANSITION", "The transaction landed and touches this settlement: report it CONFIRMED, or leave it to an operator");
			if ((status !== "failed" || unrelated) && !cannotLand) throw liveSubmission(observation, lastLandingHeight);
	}
}

/** A read of the chain whose failure is the Node's 503 CHAIN_UNAVAILABLE (never a guess about the chain). */
export async function readChain<T>(read: () => Promise<T>): Promise<T> {
	try {
		return await read();
	} catch (err) {
		// The chain's own refusal (endpoints on another cluster) is told as it is.
		if (err instanceof ServiceError && err.type === "CHAIN_UNAVAILABLE") throw err;
		throw new ServiceError("CHAIN_UNAVAILABLE", "The chain could not be read", { reason: (err as Error).name });
	}
}

function liveSubmission(observation: ChainObservation, lastLandingHeight: number | undefined): ServiceError {
	return new ServiceError("SUBMISSION_LIVE", "The submitted transaction may still land", {
		status: observation.status,
		blockHeight: observation.blockHeight,
		...(lastLandingHeight !== undefined ? { lastLandingHeight } : {})
	});
}
