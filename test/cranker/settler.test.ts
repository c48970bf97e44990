/**
 * The Settler against a compromised Node: a stand-in that answers work items the sender never
 * signed, or changes a signed one in its lease answer, with a payout authorization it would sign
 * for anything. The Cranker pays out of its own liquidity, so it checks the sender's signature
 * itself; nothing reaches the chain (a stand-in that fails the test when asked anything).
 */
import { generateKeyPairSigner } from "@solana/kit";
import type { CrankerConfig } from "../../cranker/config";
import { createLogger } from "../../cranker/log";
import type { NodeClient } from "../../cranker/node-client";
import { Settler } from "../../cranker/settler";
import type { Chain } from "../../cranker/chain";
import { decidedRecord } from "../../lib/intake";
import { toWorkerView, type MempoolIntent } from "../../lib/intents";
import { newRoute, newWallet, signedIntent } from "../helpers/fixtures";

/** A work item as the Node lists it: the worker view of a VERIFIED intent of this request. */
function workItem(request: ReturnType<typeof signedIntent>): MempoolIntent {
	const at = new Date().toISOString();
	return toWorkerView(decidedRecord({ id: "int_0123456789abcdef0123456789abcdef", request, requestDigest: "0".repeat(64), transactionCommitment: request.transactionCommitment!, epoch: 1, at, intakeCall: null }, { ok: true }));
}

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
	const settler = new Settler(node, chain, await generateKeyPairSigner(), {} as CrankerConfig, createLogger({}, line => lines.push(line)), () => false);
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
