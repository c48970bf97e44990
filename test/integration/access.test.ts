/** POST /threshold-access/nonces/consume (SPEC §9) over HTTP: proof, window, one-time use, races. */
import { iso, newWallet, signedAccessProof } from "../helpers/fixtures";
import { startNode, type TestNode } from "../helpers/node";

let node: TestNode;
beforeAll(async () => {
	node = await startNode();
});
afterAll(() => node.stop());

const consume = (body: unknown) => node.http("POST", "/threshold-access/nonces/consume", body);

describe("POST /threshold-access/nonces/consume", () => {
	it("consumes a nonce once for a valid proof, and refuses its reuse with 409 NONCE_REUSED", async () => {
		const wallet = newWallet();
		const body = signedAccessProof(wallet);
		const first = await consume(body);
		expect(first.status).toBe(200);
		expect(first.body).toEqual({ wallet: wallet.address, nonce: body.nonce, consumedAt: expect.any(String) });
		expect((await consume(body)).body).toMatchObject({ code: 409, type: "NONCE_REUSED" });
		// The same nonce string is another wallet's to use.
		expect((await consume(signedAccessProof(newWallet(), body.nonce))).status).toBe(200);
	});

	it("lets exactly one of many concurrent duplicates through", async () => {
		const body = signedAccessProof(newWallet());
		const answers = await Promise.all(Array.from({ length: 10 }, () => consume(body)));
		expect(answers.filter(a => a.status === 200)).toHaveLength(1);
		expect(answers.filter(a => a.status === 409 && a.body.type === "NONCE_REUSED")).toHaveLength(9);
	});

	it("checks the ±5 minute window (400 EXPIRED) before the signature, and the signature (400 INVALID_SIGNATURE) before reuse", async () => {
		const wallet = newWallet();
		expect((await consume(signedAccessProof(wallet, undefined, iso(-5 * 60_000 - 2000)))).body).toMatchObject({ code: 400, type: "EXPIRED" });
		expect((await consume(signedAccessProof(wallet, undefined, iso(5 * 60_000 + 2000)))).body).toMatchObject({ code: 400, type: "EXPIRED" });
		expect((await consume(signedAccessProof(wallet, undefined, iso(-4 * 60_000)))).status).toBe(200);
		const forged = { ...signedAccessProof(wallet), signature: newWallet().sign("anything") };
		expect((await consume(forged)).body).toMatchObject({ code: 400, type: "INVALID_SIGNATURE" });
		const expiredAndForged = { ...signedAccessProof(wallet, undefined, iso(-10 * 60_000)), signature: forged.signature };
		expect((await consume(expiredAndForged)).body.type).toBe("EXPIRED");
		// A refused proof consumed nothing: the nonce is still free.
		const good = signedAccessProof(wallet, forged.nonce);
		expect((await consume(good)).status).toBe(200);
	});

	it("refuses bad shapes with 422 and consumes nothing", async () => {
		const wallet = newWallet();
		const body = signedAccessProof(wallet);
		for (const bad of [{ nonce: "short" }, { wallet: "nope" }, { issuedAt: "yesterday" }, { extra: 1 }, { signature: wallet.address }]) {
			const answer = await consume({ ...body, ...bad });
			expect(answer.status).toBe(422);
			expect(answer.body.type).toBe("VALIDATION_ERROR");
		}
		expect((await consume(body)).status).toBe(200);
	});
});
