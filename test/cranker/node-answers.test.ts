/**
 * The Cranker reading a compromised (or broken) Node's answers: a stand-in HTTP server in place
 * of the Node, the Cranker's real client and loops, a real local chain for its liquidity. What
 * the Node answers is read with a bound, and an item it cannot weigh is passed over.
 */
import fs from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import type { Address } from "@solana/kit";
import { loadCrankerConfig } from "../../cranker/config";
import { createLogger } from "../../cranker/log";
import { MAX_ANSWER_BYTES, NodeApiError, NodeClient } from "../../cranker/node-client";
import { Cranker } from "../../cranker/worker";
import { LocalChain } from "../../devkit/local-chain";
import { createSigner, generateKeypair } from "../../lib/ed25519";
import { keypairSigningKey } from "../../lib/http-signature";
import { buildTinOperationMessage } from "../../lib/canonical";
import { toWorkerView, type LeasedIntentRecord, type MempoolIntent } from "../../lib/intents";
import { buildPayoutAuthorization } from "../../lib/payout";
import { decidedRecord } from "../../lib/intake";
import { newRoute, newWallet, signedIntent } from "../helpers/fixtures";
import { tempDir } from "../helpers/node";
import { waitFor } from "./harness";

/** A request to the stand-in Node, with its body read. */
type NodeRequest = http.IncomingMessage & { body: string };

/** A stand-in Node: `answer` decides each request's answer; every request is recorded. */
async function standInNode(answer: (req: NodeRequest, res: http.ServerResponse) => void) {
	const requests: string[] = [];
	const server = http.createServer((req, res) => {
		requests.push(`${req.method} ${req.url}`);
		let body = "";
		req.on("data", chunk => (body += chunk));
		req.on("end", () => answer(Object.assign(req, { body }), res));
	});
	await new Promise<void>(resolve => server.listen(0, "127.0.0.1", resolve));
	return {
		url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
		requests,
		close: () => {
			server.closeAllConnections();
			return new Promise(resolve => server.close(resolve));
		}
	};
}

const json = (res: http.ServerResponse, status: number, body: unknown) => res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));

test("an answer past MAX_ANSWER_BYTES is refused, not read to its end", async () => {
	let written = 0;
	const node = await standInNode((_req, res) => {
		res.writeHead(200, { "content-type": "application/json" });
		const chunk = Buffer.alloc(1024 * 1024, 0x20);
		// An endless answer: only a reader that stops can get past it.
		const write = () => {
			while (res.writable && res.write(chunk)) written += chunk.length;
			if (res.writable) res.once("drain", write);
		};
		write();
	});
	try {
		const client = new NodeClient(node.url, "key", keypairSigningKey(generateKeypair()), 0);
		const refusal = await client.intentWork(20).catch((err: unknown) => err);
		expect(refusal).toBeInstanceOf(NodeApiError);
		expect(refusal).toMatchObject({ type: "ANSWER_TOO_LARGE", status: 502 });
		expect(written).toBeLessThan(4 * MAX_ANSWER_BYTES);
	} finally {
		await node.close();
	}
});

test("a redirect is not followed: the worker key and the request signature stay with the Node (a review: fetch took them to any origin, http:// included)", async () => {
	const elsewhere: string[] = [];
	const other = await standInNode((req, res) => {
		elsewhere.push(String(req.headers["x-api-key"] ?? "") + String(req.headers.signature ?? ""));
		json(res, 200, []);
	});
	const node = await standInNode((_req, res) => res.writeHead(307, { location: `${other.url}/intent-work` }).end());
	try {
		const client = new NodeClient(node.url, "worker-key-0123456789", keypairSigningKey(generateKeypair()), 0);
		await expect(client.intentWork(20)).rejects.toMatchObject({ type: "NODE_UNAVAILABLE" });
		await expect(client.heartbeat({})).rejects.toMatchObject({ type: "NODE_UNAVAILABLE" });
		await expect(client.eventStream("", "", AbortSignal.timeout(5000))).rejects.toMatchObject({ type: "NODE_UNAVAILABLE" });
		expect(elsewhere).toEqual([]);
	} finally {
		await node.close();
		await other.close();
	}
});

test("a success answer that is not a JSON object or list is not taken for a yes", async () => {
	const answers = ["OK", "", "null", "true"];
	const node = await standInNode((_req, res) => res.writeHead(200, { "content-type": "application/json" }).end(answers.shift()));
	try {
		const client = new NodeClient(node.url, "key", keypairSigningKey(generateKeypair()), 0);
		for (let i = 0; i < 4; i++) await expect(client.heartbeat({})).rejects.toMatchObject({ type: "BAD_ANSWER", status: 502 });
	} finally {
		await node.close();
	}
});

test("a read a gateway turned away unserved is asked once more at once; a write, another failure, or a second turn-away is not", async () => {
	// What the Node answers next, in order; then []. A closed connection: a pooled one reused as a
	// draining gateway closes it. Before, a work round failed on either and waited for the next poll.
	const next: ("close" | "shutting down" | "failed")[] = [];
	const node = await standInNode((_req, res) => {
		const answer = next.shift();
		if (answer === "close") return res.socket!.destroy();
		if (answer === "shutting down") return json(res, 503, { name: "ServiceError", message: "The service is shutting down", code: 503, type: "SHUTTING_DOWN" });
		if (answer === "failed") return json(res, 500, { name: "ServiceError", message: "Internal error", code: 500, type: "INTERNAL_ERROR" });
		json(res, 200, []);
	});
	try {
		const wallet = generateKeypair();
		const retries: string[] = [];
		const client = new NodeClient(node.url, "key", keypairSigningKey(wallet), 0, (_path, reason) => retries.push(reason));
		for (const turnAway of ["close", "shutting down"] as const) {
			next.push(turnAway);
			expect(await client.intentWork(20)).toEqual([]);
			expect(node.requests.splice(0)).toEqual(["GET /intent-work?limit=20", "GET /intent-work?limit=20"]);
		}
		expect(retries).toEqual([expect.stringMatching(/fetch failed|other side closed|socket/), "HTTP 503 SHUTTING_DOWN"]);
		next.push("close", "close");
		await expect(client.intentWork(20)).rejects.toMatchObject({ type: "NODE_UNAVAILABLE" });
		expect(node.requests.splice(0)).toHaveLength(2);
		// A failure that is no turn-away is not asked again without time to retry.
		next.push("failed");
		await expect(client.intentWork(20)).rejects.toMatchObject({ type: "NODE_UNAVAILABLE" });
		expect(node.requests.splice(0)).toHaveLength(1);
		// A write may have been acted on before its connection went: only a caller that gives it time retries it.
		next.push("close");
		await expect(client.updateStatus("int_x", { status: "CRANKER_LEASED", crankerPubkey: wallet.publicKey, expectedVersion: 3 }, 0)).rejects.toMatchObject({ type: "NODE_UNAVAILABLE" });
		expect(node.requests.splice(0)).toEqual(["PATCH /intents/int_x/status"]);
	} finally {
		await node.close();
	}
});

test("warns at start when NODE_URL is plain http to another host, where the worker key can be read on the way (a review)", async () => {
	const dir = tempDir("scs-node-answers-");
	const keyFile = path.join(dir, "cranker.json");
	fs.writeFileSync(keyFile, JSON.stringify([...generateKeypair().secretKey]));
	const warned = async (nodeUrl: string) => {
		const lines: string[] = [];
		const config = loadCrankerConfig({ KEYPAIR_PATH: keyFile, NODE_URL: nodeUrl, WORKER_API_KEY: "key", NODE_AUTHORITY_PUBKEY: generateKeypair().publicKey, SOLANA_RPC_URL: "http://127.0.0.1:9", CRANKER_STATE_DIR: dir }, ["--roles", "verifier"]);
		const cranker = await Cranker.create(config, createLogger({}, line => lines.push(line)));
		cranker.start();
		await cranker.stop();
		return lines.some(line => line.includes("NODE_URL is plain http to another host"));
	};
	expect(await warned("http://node.invalid:3000")).toBe(true);
	expect(await warned("https://node.invalid")).toBe(false);
	expect(await warned("http://127.0.0.1:9")).toBe(false);
	expect(await warned("http://localhost:9")).toBe(false);
});

describe("the Cranker's work loop", () => {
	const chain = new LocalChain();
	let mint: Address;
	const keypair = generateKeypair();
	beforeAll(async () => {
		await chain.start();
		mint = chain.createMint(6);
		chain.fundLamports(keypair.publicKey);
		await chain.fundTokens(keypair.publicKey, mint, 10n ** 12n);
	});
	afterAll(() => chain.stop());

	/** A VERIFIED work item its sender signed, paying in `mint`. */
	function signedItem(id: string): MempoolIntent {
		const request = signedIntent(newWallet(), newRoute(), { tokenMintAddress: mint });
		return toWorkerView(decidedRecord({ id, request, requestDigest: "0".repeat(64), transactionCommitment: request.transactionCommitment!, epoch: 1, at: new Date().toISOString(), intakeCall: null }, { ok: true }));
	}

	/** Beside the settlement role and the stand-in's yes to every heartbeat. */
	interface Against {
		roles?: string;
		env?: Record<string, string>;
		heartbeat?: (req: NodeRequest, res: http.ServerResponse) => void;
	}

	/**
	 * A settlement Cranker against a stand-in Node answering `answer` (after its heartbeat and its
	 * empty orphan list), until it sends the request `awaited` (or `awaited()` holds); the requests it sent.
	 */
	async function crankerAgainst(answer: (req: NodeRequest, res: http.ServerResponse) => void, awaited: string | (() => boolean), { roles = "settlement", env = {}, heartbeat = (_req, res) => json(res, 200, {}) }: Against = {}) {
		const node = await standInNode((req, res) => {
			if (req.url === "/crankers/heartbeat") return heartbeat(req, res);
			if (req.url?.startsWith("/intents?")) return json(res, 200, []);
			answer(req, res);
		});
		const dir = tempDir("scs-node-answers-");
		const keyFile = path.join(dir, "cranker.json");
		fs.writeFileSync(keyFile, JSON.stringify([...keypair.secretKey]));
		const config = loadCrankerConfig(
			{ KEYPAIR_PATH: keyFile, CRANKER_MINTS: mint, NODE_URL: node.url, WORKER_API_KEY: "key", NODE_AUTHORITY_PUBKEY: generateKeypair().publicKey, SOLANA_RPC_URL: chain.url, POLL_INTERVAL_MS: "50", HEARTBEAT_INTERVAL_MS: "200", CRANKER_STATE_DIR: dir, ...env },
			["--roles", roles]
		);
		const cranker = await Cranker.create(config, createLogger({}, () => {}));
		try {
			cranker.start();
			await waitFor(async () => (typeof awaited === "string" ? node.requests.includes(awaited) : awaited()) || null, 10_000, String(awaited));
			return node.requests;
		} finally {
			await cranker.stop();
			await node.close();
		}
	}

	// The lease of the item the test waits for is lost to another Cranker, which ends the test's interest in it.
	const lost = (res: http.ServerResponse) => json(res, 409, { name: "ConflictError", type: "STATE_CONFLICT", message: "leased by another Cranker" });

	test("a stream resumed with a Last-Event-ID its Node refuses (a log restored behind it) is followed again from now, not asked with that id for good", async () => {
		const asked: (string | null)[] = [];
		const requests = await crankerAgainst((req, res) => {
			if (!req.url?.startsWith("/events?")) return json(res, 404, { type: "NOT_FOUND", message: "not here" });
			const lastEventId = req.headers["last-event-id"] ?? null;
			asked.push(lastEventId as string | null);
			// The first stream tells where it stands and ends; resumed from there, the Node's answer is that its log ends before it.
			if (asked.length === 1) return res.writeHead(200, { "content-type": "text/event-stream" }).end("retry: 10\n\nid: 7-0\n\n");
			if (lastEventId !== null)
				return json(res, 422, { name: "ServiceError", type: "VALIDATION_ERROR", message: "Last-Event-ID is not an id this stream sent", data: [{ type: "lastEventId", field: "Last-Event-ID" }] });
			res.writeHead(200, { "content-type": "text/event-stream" }).end("retry: 10\n\n");
		}, () => asked.length >= 3);
		expect(requests.filter(line => line.startsWith("GET /events"))).toHaveLength(asked.length);
		expect(asked.slice(0, 3)).toEqual([null, "7-0", null]);
	});

	test("a work item it cannot weigh (no amount, an amount that is not one) is passed over; the items behind it are still tried", async () => {
		const good = signedItem("int_0123456789abcdef0123456789abcdef");
		const malformed = [null, { intent: null }, { intent: { ...good, id: "int_1", amount: "a lot" } }, { intent: { ...good, id: "int_2", amount: 5 } }];
		const requests = await crankerAgainst((req, res) => {
			if (req.url?.startsWith("/intent-work")) return json(res, 200, [...malformed, { intent: good, leaseTtlMs: 30_000 }]);
			if (req.method === "PATCH") return lost(res);
			json(res, 404, { type: "NOT_FOUND", message: "not here" });
		}, `PATCH /intents/${good.id}/status`);
		expect(requests.filter(line => line.startsWith("PATCH"))).not.toContainEqual(expect.stringMatching(/int_[12]\//));
	});

	test("a work item whose settlement fails each time does not stop the items behind it", async () => {
		const failing = signedItem("int_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
		const next = signedItem("int_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb");
		await crankerAgainst((req, res) => {
			if (req.url?.startsWith("/intent-work")) return json(res, 200, [failing, next].map(intent => ({ intent, leaseTtlMs: 30_000 })));
			if (req.url === `/intents/${failing.id}/status`) return json(res, 200, { ...failing, receiverStatus: "CRANKER_LEASED", stateVersion: failing.stateVersion + 1, lease: { crankerPubkey: keypair.publicKey, leasedAt: new Date().toISOString(), expiresAt: new Date(Date.now() + 30_000).toISOString() } });
			// Its payout authorization is not an answer: the settlement fails, every round.
			if (req.url?.startsWith("/internal/settlement-authorizations")) return res.writeHead(200).end("not JSON");
			if (req.method === "PATCH") return lost(res);
			json(res, 404, { type: "NOT_FOUND", message: "not here" });
		}, `PATCH /intents/${next.id}/status`);
	});

	test("a payout answer naming another settlement program ends the round at its item: that lease is given back unsigned, and no item behind it is leased", async () => {
		// A Node redeployed with another program, whose heartbeat answers (an older replica's) name none.
		const authority = generateKeypair();
		const first = signedItem("int_cccccccccccccccccccccccccccccccc");
		const second = signedItem("int_dddddddddddddddddddddddddddddddd");
		const lease = { crankerPubkey: keypair.publicKey, leasedAt: new Date().toISOString(), expiresAt: new Date(Date.now() + 30_000).toISOString() };
		const leased = { ...first, receiverStatus: "CRANKER_LEASED", stateVersion: first.stateVersion + 1, lease };
		const authorization = buildPayoutAuthorization({ ...leased, request: first } as unknown as LeasedIntentRecord, new Date(), { publicKey: authority.publicKey, sign: createSigner(authority) });
		const sends = chain.calls.get("sendTransaction") ?? 0;
		let givenBackAt = 0;
		const requests = await crankerAgainst(
			(req, res) => {
				if (req.url?.startsWith("/intent-work")) return json(res, 200, [first, second].map(intent => ({ intent, leaseTtlMs: 30_000 })));
				if (req.url?.startsWith("/internal/settlement-authorizations")) return json(res, 200, { ...authorization, settlementProgramId: newWallet().address });
				if (req.url === `/intents/${first.id}/status`) {
					if (JSON.parse(req.body).status === "CRANKER_LEASED") return json(res, 200, leased);
					givenBackAt ||= Date.now();
					return json(res, 200, { ...first, stateVersion: first.stateVersion + 2 });
				}
				if (req.method === "PATCH") return lost(res);
				json(res, 404, { type: "NOT_FOUND", message: "not here" });
			},
			// Ten of its rounds after the lease went back.
			() => givenBackAt > 0 && Date.now() - givenBackAt > 500,
			{ env: { NODE_AUTHORITY_PUBKEY: authority.publicKey } }
		);
		expect(requests.filter(line => line.startsWith("PATCH"))).toEqual([`PATCH /intents/${first.id}/status`, `PATCH /intents/${first.id}/status`]);
		expect(chain.calls.get("sendTransaction") ?? 0).toBe(sends);
	});

	test("a heartbeat refused for a clock set ahead is not what the next ones count from: once the clock is set right, they are accepted again", async () => {
		// The Node's clock: this process's, read past the Cranker's.
		const nodeNow = () => performance.timeOrigin + performance.now();
		const clock = jest.spyOn(Date, "now").mockImplementation(() => nodeNow() + 10 * 60_000);
		const sentAts: string[] = [];
		let accepted = 0;
		await crankerAgainst(
			(_req, res) => json(res, 404, { type: "NOT_FOUND", message: "not here" }),
			() => accepted > 0,
			{
				heartbeat(req, res) {
					const { sentAt } = JSON.parse(req.body) as { sentAt: string };
					sentAts.push(sentAt);
					// Set right after two refusals.
					if (sentAts.length === 2) clock.mockRestore();
					if (Math.abs(Date.parse(sentAt) - nodeNow()) > 60_000) return json(res, 422, { name: "ServiceError", type: "STALE_HEARTBEAT", message: "sentAt is more than 60 s away from the Node's clock" });
					accepted++;
					json(res, 200, {});
				}
			}
		).finally(() => clock.mockRestore());
		expect(sentAts.length).toBeGreaterThanOrEqual(3);
	});

	describe("as a submitter of TIN operations, on a Node's word (a review's replays)", () => {
		const owner = newWallet();
		/** A TIN operation in `status` as the Node lists it, its fee committed by this Cranker unless said. */
		function operation(status: string, fields: Record<string, unknown> = {}, request: Record<string, unknown> = {}) {
			const body = { operationId: `op_${Math.random().toString(36).slice(2)}`, intentType: "create", ownerWallet: owner.address, routeCommitment: "ab".repeat(32), policyCommitment: "cd".repeat(32), issuedAt: new Date().toISOString(), expiresAt: new Date(Date.now() + 3600_000).toISOString(), ...request };
			const signed = { ...body, ownerSignature: owner.sign(buildTinOperationMessage(body as never)) };
			return { id: `tinop_${body.operationId}`, operationId: body.operationId, intentType: "create", status, updatedAt: new Date().toISOString(), request: signed, history: [], feeCommittedBy: keypair.publicKey, ...fields };
		}
		const sends = () => chain.calls.get("sendTransaction") ?? 0;
		const submittedSignatures = (requests: string[]) => requests.filter(line => line.endsWith("/submitted"));
		/**
		 * The Cranker's clock (performance.now()) and the chain, to move past its give-up on a
		 * transaction unseen (ten minutes and 300 blocks) when `passGiveUp` is called: no test waits
		 * that long. `restore` after.
		 */
		function giveUpClock() {
			const now = performance.now.bind(performance);
			let skewMs = 0;
			const clock = jest.spyOn(performance, "now").mockImplementation(() => now() + skewMs);
			return {
				passGiveUp() {
					skewMs = 10 * 60_000 + 1000;
					chain.advance(400);
				},
				restore: () => clock.mockRestore()
			};
		}

		test("signs nothing for an operation its owner did not sign, one whose fee another Cranker committed, whose id is not the signed one, or whose owner's signature expired", async () => {
			const forged = { ...operation("FEE_COMMITTED"), id: "tinop_forged" };
			forged.request = { ...forged.request, routeCommitment: "ef".repeat(32) };
			const others = { ...operation("FEE_COMMITTED", { feeCommittedBy: newWallet().address }), id: "tinop_others" };
			const renamed = { ...operation("FEE_COMMITTED"), id: "tinop_renamed", operationId: "op_another" };
			// Signed by its owner, and expired: an old operation replayed.
			const expired = operation("FEE_COMMITTED", {}, { issuedAt: new Date(Date.now() - 7200_000).toISOString(), expiresAt: new Date(Date.now() - 3600_000).toISOString() });
			const before = sends();
			let listed = 0;
			const requests = await crankerAgainst((req, res) => {
				if (req.url?.startsWith("/tin-operations/registry-work")) return (listed++, json(res, 200, [forged, others, renamed, expired]));
				if (req.url === `/tin-operations/${expired.id}/failed`) return json(res, 200, { ...expired, status: "FAILED" });
				if (req.url?.startsWith("/tin-operations/")) return json(res, 200, []);
				json(res, 404, { type: "NOT_FOUND", message: "not here" });
			}, () => listed >= 3, { roles: "submitter" });
			expect(submittedSignatures(requests)).toEqual([]);
			expect(sends()).toBe(before);
			// The expired one is failed, so that it leaves the work list (nothing of it was sent); the others are left alone.
			expect(requests.filter(line => line.endsWith("/failed"))).toEqual(expect.arrayContaining([`POST /tin-operations/${expired.id}/failed`]));
			expect(requests.filter(line => line.endsWith("/failed")).every(line => line.includes(expired.id))).toBe(true);
		});

		test("a registry transaction that landed is reported again, never signed again, however long the Node lists its operation to submit", async () => {
			const op = operation("FEE_COMMITTED", {}, { routeCommitment: "12".repeat(32) });
			const reported: string[] = [];
			let advanced = false;
			await crankerAgainst((req, res) => {
				if (req.url?.startsWith("/tin-operations/registry-work")) {
					// Once it landed, its blockhash expires: the Cranker asks the chain whether it landed, and reports it again.
					if (reported.length === 2 && !advanced) (advanced = true), chain.advance(400);
					return json(res, 200, [op]);
				}
				if (req.url === `/tin-operations/${op.id}/submitted`) {
					const { transactionSignature } = JSON.parse(req.body) as { transactionSignature: string };
					reported.push(transactionSignature);
					return json(res, 200, { ...op, status: "SUBMITTED", submittedBy: keypair.publicKey, transactionSignature });
				}
				if (req.url?.startsWith("/tin-operations/")) return json(res, 200, []);
				json(res, 404, { type: "NOT_FOUND", message: "not here" });
			}, () => reported.length >= 5, { roles: "submitter" });
			expect(advanced).toBe(true);
			expect(new Set(reported).size).toBe(1);
			expect(chain.landedWithMemoEnding(op.request.routeCommitment as string)).toHaveLength(1);
		});

		test("sends a registry transaction only once the Node shows its report, and signs it once however often the Node lists the operation", async () => {
			const op = operation("FEE_COMMITTED");
			const reported: string[] = [];
			const before = sends();
			// The same operation under another id too: what the owner signed is submitted once.
			const relisted = { ...op, id: `${op.id}_again` };
			await crankerAgainst((req, res) => {
				if (req.url?.startsWith("/tin-operations/registry-work")) return json(res, 200, [op, relisted]);
				if (req.url === `/tin-operations/${op.id}/submitted` || req.url === `/tin-operations/${relisted.id}/submitted`) {
					// Answered 200, but not recorded: the operation stays FEE_COMMITTED.
					reported.push((JSON.parse(req.body) as { transactionSignature: string }).transactionSignature);
					return json(res, 200, op);
				}
				if (req.url?.startsWith("/tin-operations/")) return json(res, 200, []);
				json(res, 404, { type: "NOT_FOUND", message: "not here" });
			}, () => reported.length >= 3, { roles: "submitter" });
			expect(new Set(reported).size).toBe(1);
			expect(sends()).toBe(before);
		});

		test("fails an operation it submitted before a restart once its transaction cannot land (unseen for ten minutes by its own clock and 300 blocks), rather than leave it SUBMITTED for good", async () => {
			const op = operation("SUBMITTED", { submittedBy: keypair.publicKey, transactionSignature: "4".repeat(87) });
			let failed: { reason?: string } | null = null;
			let listed = 0;
			const clock = giveUpClock();
			await crankerAgainst((req, res) => {
				if (req.url?.startsWith("/tin-operations/registry-work") && ++listed === 3) clock.passGiveUp();
				if (req.url?.startsWith("/tin-operations/registry-work")) return json(res, 200, failed ? [] : [op]);
				if (req.url === `/tin-operations/${op.id}/failed`) {
					failed = JSON.parse(req.body) as { reason?: string };
					return json(res, 200, { ...op, status: "FAILED" });
				}
				if (req.url?.startsWith("/tin-operations/")) return json(res, 200, []);
				json(res, 404, { type: "NOT_FOUND", message: "not here" });
			}, () => failed !== null, { roles: "submitter" }).finally(clock.restore);
			expect(failed).toMatchObject({ reason: expect.stringMatching(/^NOT_LANDED/) });
			expect(listed).toBeGreaterThanOrEqual(3);
		});

		test("an operation listed SUBMITTED with another transaction than the one it kept (a report recorded late) is failed once that one is unseen long enough, not left for good", async () => {
			const op = operation("FEE_COMMITTED", {}, { routeCommitment: "34".repeat(32) });
			let reported = 0;
			let listed = 0;
			let failed = false;
			const clock = giveUpClock();
			await crankerAgainst((req, res) => {
				if (req.url?.startsWith("/tin-operations/registry-work")) {
					if (failed) return json(res, 200, []);
					// First to submit (its report not shown: it keeps a transaction), then SUBMITTED with another one.
					if (reported === 0) return json(res, 200, [op]);
					if (++listed === 3) clock.passGiveUp();
					return json(res, 200, [{ ...op, status: "SUBMITTED", submittedBy: keypair.publicKey, transactionSignature: "5".repeat(87) }]);
				}
				if (req.url === `/tin-operations/${op.id}/submitted`) return (reported++, json(res, 200, op));
				if (req.url === `/tin-operations/${op.id}/failed`) return (failed = true), json(res, 200, { ...op, status: "FAILED" });
				if (req.url?.startsWith("/tin-operations/")) return json(res, 200, []);
				json(res, 404, { type: "NOT_FOUND", message: "not here" });
			}, () => failed, { roles: "submitter" }).finally(clock.restore);
			expect(reported).toBe(1);
		});

		test("an operation listed SUBMITTED with a transaction never seen is not failed while the one the Cranker sent for it is on chain", async () => {
			const op = operation("FEE_COMMITTED", {}, { routeCommitment: "56".repeat(32) });
			let sent: string | null = null;
			let listedAfter = 0;
			let failed = false;
			const clock = giveUpClock();
			await crankerAgainst((req, res) => {
				if (req.url?.startsWith("/tin-operations/registry-work")) {
					// Submitted, shown, sent and landed; then an inconsistent Node lists it with another transaction.
					if (sent === null || chain.landedWithMemoEnding(op.request.routeCommitment).length === 0) return json(res, 200, [op]);
					if (++listedAfter === 3) clock.passGiveUp();
					return json(res, 200, [{ ...op, status: "SUBMITTED", submittedBy: keypair.publicKey, transactionSignature: "5".repeat(87) }]);
				}
				if (req.url === `/tin-operations/${op.id}/submitted`) {
					sent = (JSON.parse(req.body) as { transactionSignature: string }).transactionSignature;
					return json(res, 200, { ...op, status: "SUBMITTED", submittedBy: keypair.publicKey, transactionSignature: sent });
				}
				if (req.url === `/tin-operations/${op.id}/failed`) return (failed = true), json(res, 200, { ...op, status: "FAILED" });
				if (req.url?.startsWith("/tin-operations/")) return json(res, 200, []);
				json(res, 404, { type: "NOT_FOUND", message: "not here" });
			}, () => listedAfter >= 6, { roles: "submitter" }).finally(clock.restore);
			expect(failed).toBe(false);
		});
	});

	test("a Last-Event-ID the Node never sends (not a header value) is not sent back, so the stream is not refused for good", async () => {
		const asked: (string | null)[] = [];
		await crankerAgainst((req, res) => {
			if (!req.url?.startsWith("/events?")) return json(res, 404, { type: "NOT_FOUND", message: "not here" });
			asked.push((req.headers["last-event-id"] as string | undefined) ?? null);
			res.writeHead(200, { "content-type": "text/event-stream" }).end(asked.length === 1 ? "retry: 10\n\nid: \u20ac\n\n" : "retry: 10\n\nid: 3-4\n\n");
		}, () => asked.length >= 3);
		expect(asked.slice(0, 3)).toEqual([null, null, "3-4"]);
	});
});
