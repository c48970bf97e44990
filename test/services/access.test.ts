/**
 * The access service alone, on a real SQLite file: a wallet's signed proof consumes its nonce once,
 * however many requests race for it, and a retry of the consuming call gets that call's answer.
 */
import { ServiceBroker, type Context } from "moleculer";
import { loadConfig } from "../../lib/config";
import { accessService } from "../../services/access.service";
import { iso, newWallet, signedAccessProof } from "../helpers/fixtures";
import { tempDir } from "../helpers/node";

type Proof = ReturnType<typeof signedAccessProof>;

let broker: ServiceBroker;
const consume = (proof: Proof, parentCtx?: Context) => broker.call<{ wallet: string; nonce: string; consumedAt: string }, object>("access.consume", proof, parentCtx ? { parentCtx } : {});

beforeAll(async () => {
	broker = new ServiceBroker({ logger: false });
	broker.createService(accessService(loadConfig({ DATA_DIR: tempDir() })));
	await broker.start();
});
afterAll(() => broker.stop());

test("a signed, fresh proof consumes its nonce once: the same proof again is NONCE_REUSED", async () => {
	const proof = signedAccessProof(newWallet());
	expect(await consume(proof)).toEqual({ wallet: proof.wallet, nonce: proof.nonce, consumedAt: expect.any(String) });
	await expect(consume(proof)).rejects.toMatchObject({ type: "NONCE_REUSED", data: { wallet: proof.wallet, nonce: proof.nonce } });
	// Another wallet's nonce of the same text is its own.
	expect(await consume(signedAccessProof(newWallet(), proof.nonce))).toMatchObject({ nonce: proof.nonce });
});

test("five requests racing with one proof: one consumes it, four are NONCE_REUSED", async () => {
	const proof = signedAccessProof(newWallet());
	const outcomes = await Promise.allSettled(Array.from({ length: 5 }, () => consume(proof)));
	expect(outcomes.filter(outcome => outcome.status === "fulfilled")).toHaveLength(1);
	expect(outcomes.filter(outcome => outcome.status === "rejected").map(outcome => (outcome as PromiseRejectedResult).reason.type)).toEqual(Array(4).fill("NONCE_REUSED"));
});

test("a retry of the call that consumed the nonce gets that call's answer", async () => {
	const proof = signedAccessProof(newWallet());
	const call = broker.ContextFactory.create(broker, null as never, {}, {}) as Context;
	const first = await consume(proof, call);
	expect(await consume(proof, call)).toEqual(first);
	await expect(consume(proof)).rejects.toMatchObject({ type: "NONCE_REUSED" });
});

test("a proof off the clock by more than 5 minutes, or not the wallet's, is refused and consumes nothing", async () => {
	const wallet = newWallet();
	const stale = signedAccessProof(wallet, undefined, iso(-5 * 60_000 - 5000));
	await expect(consume(stale)).rejects.toMatchObject({ type: "EXPIRED" });
	await expect(consume(signedAccessProof(wallet, undefined, iso(5 * 60_000 + 5000)))).rejects.toMatchObject({ type: "EXPIRED" });
	const proof = signedAccessProof(wallet);
	await expect(consume({ ...proof, signature: signedAccessProof(newWallet(), proof.nonce, proof.issuedAt).signature })).rejects.toMatchObject({ type: "INVALID_SIGNATURE" });
	await expect(consume({ ...stale, issuedAt: proof.issuedAt })).rejects.toMatchObject({ type: "INVALID_SIGNATURE" });
	// Neither refusal consumed the nonces: the wallet's own proofs of them still do.
	expect(await consume(proof)).toMatchObject({ nonce: proof.nonce });
	expect(await consume(signedAccessProof(wallet, stale.nonce))).toMatchObject({ nonce: stale.nonce });
});
