/**
 * The SDK against a service it cannot trust (a compromised gateway, a man in the middle): a
 * stand-in HTTP server answers what such a service would. The SDK signs only what the app asked
 * for, in the form the service accepts, and takes no answer about another record for its own.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { inspect } from "node:util";
import { LocalKeypairSigner, SettlementClient, type PaymentParams, type Signer } from "../../sdk";
import { MINT, newRoute, uniqueId } from "../helpers/fixtures";

/** A stand-in service: `answer` decides each request's answer. */
async function standInService(answer: (req: http.IncomingMessage, res: http.ServerResponse, body: string) => void) {
	const server = http.createServer((req, res) => {
		let body = "";
		req.on("data", chunk => (body += chunk));
		req.on("end", () => answer(req, res, body));
	});
	await new Promise<void>(resolve => server.listen(0, "127.0.0.1", resolve));
	return {
		url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
		close: () => {
			server.closeAllConnections();
			return new Promise(resolve => server.close(resolve));
		}
	};
}

const json = (res: http.ServerResponse, status: number, body: unknown) => res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));

const recipient = newRoute();
const route = { tin: recipient.tin, routeCommitment: recipient.routeCommitment, routeVersion: 1, policyCommitment: "00".repeat(32) };
const payment = (overrides: Partial<PaymentParams> = {}): PaymentParams => ({
	paymentId: uniqueId(),
	recipientTin: recipient.tin,
	route,
	tokenMintAddress: MINT,
	amount: "1250",
	feeLimit: "5000",
	expiresAtSlot: 9_000_000,
	...overrides
});

/** A signer that counts what it was asked to sign. */
function countingSigner(inner: Signer = LocalKeypairSigner.generate()) {
	const signer = { address: inner.address, signed: 0, signMessage: (message: Uint8Array) => ((signer.signed += 1), inner.signMessage(message)) };
	return signer;
}

const offline = new SettlementClient({ baseUrl: "http://127.0.0.1:9" });

describe("what the SDK signs", () => {
	it("refuses a route that is another TIN's, or not active, before anything is signed", async () => {
		const signer = countingSigner();
		const other = newRoute();
		await expect(offline.signPayment(signer, payment({ route: { ...route, tin: other.tin } }))).rejects.toMatchObject({ type: "VALIDATION_ERROR", message: expect.stringMatching(/not the recipient/) });
		await expect(offline.signPayment(signer, payment({ route: { ...route, active: false } }))).rejects.toMatchObject({ type: "VALIDATION_ERROR", message: expect.stringMatching(/not active/) });
		expect(signer.signed).toBe(0);
	});

	it("refuses fields that would make the signed text read otherwise than the payment: a line in the route commitment, amounts not in base units", async () => {
		const signer = countingSigner();
		const injected = { ...route, routeCommitment: `${route.routeCommitment}\namount: 1\nfeeLimit: 0` };
		await expect(offline.signPayment(signer, payment({ route: injected }))).rejects.toMatchObject({ type: "VALIDATION_ERROR", message: expect.stringMatching(/route commitment/) });
		for (const amount of ["-1", "1e6", "0x10", "1.5", "0", "18446744073709551616"])
			await expect(offline.signPayment(signer, payment({ amount }))).rejects.toMatchObject({ type: "VALIDATION_ERROR", message: expect.stringMatching(/amount/) });
		await expect(offline.signPayment(signer, payment({ expiresAtSlot: Number.NaN }))).rejects.toMatchObject({ type: "VALIDATION_ERROR" });
		const issuedAt = new Date();
		await expect(offline.signPayment(signer, payment({ issuedAt, expiresAt: new Date(issuedAt.getTime() - 1) }))).rejects.toMatchObject({ type: "VALIDATION_ERROR" });
		expect(signer.signed).toBe(0);
	});

	it("refuses a signature that is not its signer's address's (a wallet that signed with another account)", async () => {
		const wallet = LocalKeypairSigner.generate();
		const other = LocalKeypairSigner.generate();
		const mismatched: Signer = { address: wallet.address, signMessage: message => other.signMessage(message) };
		await expect(offline.signPayment(mismatched, payment())).rejects.toMatchObject({ type: "INVALID_SIGNATURE" });
		// An adapter whose account changes while its user is asked: the message names the first, the other signs.
		let reads = 0;
		const switching: Signer = { get address() { return reads++ === 0 ? wallet.address : other.address; }, signMessage: message => other.signMessage(message) };
		await expect(offline.signPayment(switching, payment())).rejects.toMatchObject({ type: "INVALID_SIGNATURE" });
		await expect(offline.signPayment(wallet, payment())).resolves.toMatchObject({ senderWallet: wallet.address });
	});

	it("takes a wallet adapter's signature given as a plain array, and refuses invalid Dates and a validity past 24 h before signing", async () => {
		const wallet = LocalKeypairSigner.generate();
		const arrays: Signer = { address: wallet.address, signMessage: async message => Array.from(await wallet.signMessage(message)) as unknown as Uint8Array };
		await expect(offline.signPayment(arrays, payment())).resolves.toMatchObject({ senderWallet: wallet.address });
		const signer = countingSigner();
		await expect(offline.signPayment(signer, payment({ issuedAt: new Date(Number.NaN) }))).rejects.toMatchObject({ type: "VALIDATION_ERROR" });
		const issuedAt = new Date();
		await expect(offline.signPayment(signer, payment({ issuedAt, expiresAt: new Date(issuedAt.getTime() + 25 * 3600_000) }))).rejects.toMatchObject({ type: "VALIDATION_ERROR", message: expect.stringMatching(/24 h/) });
		expect(signer.signed).toBe(0);
	});

	it("keeps a local keypair's seed out of JSON and of logged objects", () => {
		const signer = LocalKeypairSigner.generate();
		expect(JSON.parse(JSON.stringify(signer))).toEqual({ address: signer.address });
		expect(Object.keys(signer)).toEqual(["address"]);
		expect(inspect(signer, { showHidden: true, depth: 5 })).not.toMatch(/seed|Uint8Array/);
	});
});

describe("what the SDK takes from the service", () => {
	it("takes no route of another TIN for the one asked", async () => {
		const other = newRoute();
		const service = await standInService((_req, res) => json(res, 200, { tin: other.tin, routeCommitment: other.routeCommitment, routeVersion: 3, policyCommitment: "00".repeat(32), active: true }));
		try {
			await expect(new SettlementClient({ baseUrl: service.url }).resolveTin(recipient.tin)).rejects.toMatchObject({ type: "ANSWER_MISMATCH" });
		} finally {
			await service.close();
		}
	});

	it("takes no record of another payment, or of other amounts, for the one it submitted", async () => {
		const signed = await offline.signPayment(LocalKeypairSigner.generate(), payment());
		const own = { id: "int_0123456789abcdef0123456789abcdef", status: "pending", ...signed };
		for (const record of [{ ...own, paymentId: uniqueId() }, { ...own, amount: "999999" }, { ...own, recipientTin: newRoute().tin }]) {
			const service = await standInService((_req, res) => json(res, 201, record));
			try {
				await expect(new SettlementClient({ baseUrl: service.url }).submit(signed)).rejects.toMatchObject({ type: "ANSWER_MISMATCH" });
			} finally {
				await service.close();
			}
		}
	});

	it("reads answers with a fetch that has no streaming body (React Native, polyfills)", async () => {
		const answer = { ...route, active: true, updatedAt: new Date().toISOString() };
		const plainFetch = (async () => ({ ok: true, status: 200, headers: new Headers({ "content-type": "application/json" }), body: null, text: async () => JSON.stringify(answer) })) as unknown as typeof fetch;
		await expect(new SettlementClient({ baseUrl: "http://service.invalid", fetch: plainFetch }).resolveTin(recipient.tin)).resolves.toMatchObject({ tin: recipient.tin });
	});

	it("checkReadiness is held to requestTimeoutMs, and an answer that is not a list is INVALID_ANSWER (a review's replay: it waited for good, and threw a TypeError)", async () => {
		const silent = await standInService(() => {});
		const notAList = await standInService((req, res) => json(res, 200, req.url === "/health/ready" ? { status: "ok" } : { networks: [] }));
		try {
			expect(await new SettlementClient({ baseUrl: silent.url, requestTimeoutMs: 300 }).checkReadiness()).toEqual({ canSubmit: false, canSettleNow: false });
			await expect(new SettlementClient({ baseUrl: notAList.url }).checkReadiness()).rejects.toMatchObject({ type: "INVALID_ANSWER" });
		} finally {
			await silent.close();
			await notAList.close();
		}
	});

	it("refuses a waitForStatus timeout or a streamSilenceMs a timer cannot keep, which ended every wait as it began (a review's replay)", async () => {
		for (const timeoutMs of [30 * 86_400_000, Number.NaN, 0]) await expect(offline.waitForStatus("int_0123456789abcdef0123456789abcdef", { timeoutMs })).rejects.toMatchObject({ type: "CONFIGURATION_ERROR" });
		for (const streamSilenceMs of [2 ** 31, Number.NaN]) expect(() => new SettlementClient({ baseUrl: "http://127.0.0.1:9", streamSilenceMs })).toThrow(expect.objectContaining({ type: "CONFIGURATION_ERROR" }));
		// A 429's retry-after past what a timer keeps (a review's replay: waited out, it fired at once, and the SDK polled back to back).
		const limited = await standInService((_req, res) => res.writeHead(429, { "content-type": "application/json", "retry-after": "99999999" }).end(JSON.stringify({ type: "RATE_LIMITED", message: "slow down" })));
		try {
			await expect(new SettlementClient({ baseUrl: limited.url }).resolveTin(recipient.tin)).rejects.toMatchObject({ code: 429, retryAfterMs: 2 ** 31 - 1 });
		} finally {
			await limited.close();
		}
		// Retried for good, back to back once its backoff passed what a timer keeps.
		for (const submitAttempts of [Number.NaN, Infinity, 0, 21]) expect(() => new SettlementClient({ baseUrl: "http://127.0.0.1:9", submitAttempts })).toThrow(expect.objectContaining({ type: "CONFIGURATION_ERROR" }));
	});

	it("takes requestTimeoutMs Infinity for no timeout, refuses one a timer cannot keep, and tells an error page too long to read by its status (a 503 stays one submit retries)", async () => {
		expect(() => new SettlementClient({ baseUrl: "http://127.0.0.1:9", requestTimeoutMs: 2 ** 31 })).toThrow(expect.objectContaining({ type: "CONFIGURATION_ERROR" }));
		expect(() => new SettlementClient({ baseUrl: "http://127.0.0.1:9", requestTimeoutMs: 0 })).toThrow(expect.objectContaining({ type: "CONFIGURATION_ERROR" }));
		let calls = 0;
		const slowThenHuge = await standInService((_req, res) => {
			calls++;
			if (calls === 1) return res.writeHead(503, { "content-type": "text/html" }).end("x".repeat(5 * 1024 * 1024));
			setTimeout(() => json(res, 200, { ...route, active: true, updatedAt: new Date().toISOString() }), 50);
		});
		try {
			const client = new SettlementClient({ baseUrl: slowThenHuge.url, requestTimeoutMs: Infinity });
			await expect(client.resolveTin(recipient.tin)).rejects.toMatchObject({ code: 503, type: "HTTP_ERROR" });
			await expect(client.resolveTin(recipient.tin)).resolves.toMatchObject({ tin: recipient.tin });
		} finally {
			await slowThenHuge.close();
		}
	});

	it("takes no other intent's executed status for the one it waits for, streamed or polled", async () => {
		const mine = "int_0123456789abcdef0123456789abcdef";
		const other = { id: "int_ffffffffffffffffffffffffffffffff", status: "executed", receiverStatus: "CONFIRMED" };
		for (const streams of [true, false]) {
			const service = await standInService((req, res) => {
				if (req.url?.endsWith("/events")) {
					if (!streams) return json(res, 404, { type: "NOT_FOUND", message: "no streams here" });
					res.writeHead(200, { "content-type": "text/event-stream" });
					return res.end(`id: 1\nevent: status\ndata: ${JSON.stringify(other)}\n\n`);
				}
				json(res, 200, other);
			});
			try {
				await expect(new SettlementClient({ baseUrl: service.url }).waitForStatus(mine, { timeoutMs: 5000 })).rejects.toMatchObject({ type: "ANSWER_MISMATCH" });
			} finally {
				await service.close();
			}
		}
	});

	it("given the signed request, takes no view of its intent whose payment fields are another's", async () => {
		const signed = await offline.signPayment(LocalKeypairSigner.generate(), payment());
		const id = "int_0123456789abcdef0123456789abcdef";
		const lying = { id, status: "executed", receiverStatus: "CONFIRMED", ...signed, amount: "1" };
		const service = await standInService((req, res) => (req.url?.endsWith("/events") ? json(res, 404, { type: "NOT_FOUND", message: "no streams here" }) : json(res, 200, lying)));
		try {
			const client = new SettlementClient({ baseUrl: service.url });
			await expect(client.waitForStatus(id, { timeoutMs: 5000, intent: signed })).rejects.toMatchObject({ type: "ANSWER_MISMATCH" });
			await expect(client.getIntent(id, signed)).rejects.toMatchObject({ type: "ANSWER_MISMATCH" });
			// Without it, only the id is checked.
			await expect(client.waitForStatus(id, { timeoutMs: 5000 })).resolves.toMatchObject({ status: "executed" });
			await expect(client.getIntent(id)).resolves.toMatchObject({ status: "executed" });
			await expect(client.getIntent("int_ffffffffffffffffffffffffffffffff")).rejects.toMatchObject({ type: "ANSWER_MISMATCH" });
		} finally {
			await service.close();
		}
	});

	it("checks the views of an intent it submitted against that payment, without being given it", async () => {
		const signed = await offline.signPayment(LocalKeypairSigner.generate(), payment());
		const id = "int_0123456789abcdef0123456789abcdef";
		// Every submission answered with the same id, each as its own payment's record.
		const service = await standInService((req, res, body) => {
			if (req.method === "POST") return json(res, 201, { id, status: "pending", receiverStatus: "VERIFIED", ...JSON.parse(body) });
			if (req.url?.endsWith("/events")) return json(res, 404, { type: "NOT_FOUND", message: "no streams here" });
			json(res, 200, { id, status: "executed", receiverStatus: "CONFIRMED", ...signed, amount: "1" });
		});
		try {
			const client = new SettlementClient({ baseUrl: service.url });
			expect((await client.submit(signed)).id).toBe(id);
			await expect(client.waitForStatus(id, { timeoutMs: 5000 })).rejects.toMatchObject({ type: "ANSWER_MISMATCH" });
			await expect(client.getIntent(id)).rejects.toMatchObject({ type: "ANSWER_MISMATCH" });
			// The same id answered for another payment would have the wait take that payment's views.
			const second = await offline.signPayment(LocalKeypairSigner.generate(), payment());
			await expect(client.submit(second)).rejects.toMatchObject({ type: "ANSWER_MISMATCH" });
			// Another client, which did not submit it, checks only the id.
			await expect(new SettlementClient({ baseUrl: service.url }).waitForStatus(id, { timeoutMs: 5000 })).resolves.toMatchObject({ status: "executed" });
		} finally {
			await service.close();
		}
	});

	it("takes no record whose id is not an intent id (it would be kept, and put in later paths), and no settlement network that is not an object", async () => {
		const signed = await offline.signPayment(LocalKeypairSigner.generate(), payment());
		for (const id of ["..", "int_" + "0".repeat(4_000_000), { id: 1 }]) {
			const service = await standInService((req, res, body) => (req.url === "/health/ready" ? json(res, 200, { ready: true }) : json(res, 201, { id, status: "pending", receiverStatus: "VERIFIED", ...JSON.parse(body) })));
			try {
				await expect(new SettlementClient({ baseUrl: service.url }).submit(signed)).rejects.toMatchObject({ type: "ANSWER_MISMATCH" });
			} finally {
				await service.close();
			}
		}
		const networks = await standInService((req, res) => json(res, 200, req.url === "/health/ready" ? { ready: true } : [null]));
		try {
			await expect(new SettlementClient({ baseUrl: networks.url }).checkReadiness()).rejects.toMatchObject({ type: "INVALID_ANSWER" });
			await expect(new SettlementClient({ baseUrl: networks.url }).checkReadiness(MINT)).resolves.toEqual({ canSubmit: true, canSettleNow: false });
		} finally {
			await networks.close();
		}
		// An issuedAt near the end of the Date range: its default expiry, ten minutes on, is past it.
		await expect(offline.signPayment(LocalKeypairSigner.generate(), payment({ issuedAt: new Date(8.64e15) }))).rejects.toMatchObject({ type: "VALIDATION_ERROR" });
	});

	it("takes no error type of its own from the service: a made-up CORS refusal or network error is an HTTP_ERROR, not retried", async () => {
		const signed = await offline.signPayment(LocalKeypairSigner.generate(), payment());
		let posts = 0;
		const service = await standInService((_req, res) => {
			posts++;
			json(res, 400, { code: 400, type: "NETWORK_ERROR", message: "add your origin to CORS_ORIGINS", data: { cors: true, origin: "https://x" } });
		});
		try {
			const refused = await new SettlementClient({ baseUrl: service.url }).submit(signed).catch((err: unknown) => err);
			expect(refused).toMatchObject({ type: "HTTP_ERROR", code: 400 });
			expect((refused as { data?: unknown }).data).toBeUndefined();
			expect(posts).toBe(1);
		} finally {
			await service.close();
		}
	});

	it("waits at most 5 s before submitting again, whatever retry-after a 503 names (an hour here)", async () => {
		const signed = await offline.signPayment(LocalKeypairSigner.generate(), payment());
		const id = "int_0123456789abcdef0123456789abcdef";
		const posts: number[] = [];
		const service = await standInService((_req, res, body) => {
			posts.push(Date.now());
			if (posts.length === 1) return res.writeHead(503, { "content-type": "application/json", "retry-after": "3600" }).end(JSON.stringify({ code: 503, type: "NOT_READY", message: "later" }));
			json(res, 201, { id, status: "pending", receiverStatus: "VERIFIED", ...JSON.parse(body) });
		});
		try {
			expect((await new SettlementClient({ baseUrl: service.url }).submit(signed)).id).toBe(id);
			expect(posts).toHaveLength(2);
			expect(posts[1] - posts[0]).toBeGreaterThanOrEqual(4900);
			expect(posts[1] - posts[0]).toBeLessThan(10_000);
		} finally {
			await service.close();
		}
	}, 15_000);

	it("abandons a request whose answer never ends after requestTimeoutMs, and reads no answer past its bound", async () => {
		const trickle = await standInService((_req, res) => {
			res.writeHead(200, { "content-type": "application/json" });
			res.write("{");
		});
		const flood = await standInService((_req, res) => {
			res.writeHead(200, { "content-type": "application/json" });
			const chunk = Buffer.alloc(1024 * 1024, 0x20);
			const write = () => {
				while (res.writable && res.write(chunk));
				if (res.writable) res.once("drain", write);
			};
			write();
		});
		try {
			const startedAt = Date.now();
			await expect(new SettlementClient({ baseUrl: trickle.url, requestTimeoutMs: 300 }).resolveTin(recipient.tin)).rejects.toMatchObject({ type: "NETWORK_ERROR" });
			expect(Date.now() - startedAt).toBeLessThan(5000);
			await expect(new SettlementClient({ baseUrl: flood.url }).resolveTin(recipient.tin)).rejects.toMatchObject({ type: "INVALID_ANSWER", message: expect.stringMatching(/passed \d+ bytes/) });
		} finally {
			await trickle.close();
			await flood.close();
		}
	});
});
