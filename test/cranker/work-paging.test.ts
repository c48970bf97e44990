/**
 * A settlement Cranker's view of the work list when much of it is work it cannot take: intents
 * for more than any Cranker holds, which anyone may sign and which stay VERIFIED up to a day. It
 * pages on past them, round after round, and an intent the event stream announces is tried first,
 * wherever it lies in the list. A Node of its own, so that the list holds only what this file puts
 * there.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { loadCrankerConfig } from "../../cranker/config";
import { NodeClient } from "../../cranker/node-client";
import { buildHeartbeatMessage } from "../../lib/canonical";
import { createSigner } from "../../lib/ed25519";
import { keypairSigningKey } from "../../lib/http-signature";
import { Harness, waitFor } from "./harness";

const h = new Harness();
/** More than one round reads (five pages of 100). */
const UNPAYABLE = 520;
/** The mint of the unpayable intents, and of the first test's payment. */
let mint: ReturnType<Harness["chain"]["createMint"]>;
/** The mint of the oldest intent, which the second test's Cranker holds (and the first's does not). */
let otherMint: typeof mint;
let oldest: { id: string };
/** The mint of an intent older than the unpayable ones, for more than the third test's Cranker holds at first. */
let thirdMint: typeof mint;
let passedOver: { id: string };

const executed = (id: string, timeoutMs: number) =>
	waitFor(async () => ((await h.client.getIntent(id)).status === "executed" ? true : null), timeoutMs, `intent ${id} executed`);

/**
 * A settlement Cranker of its own key that stays online and renews its lease on `id` until it
 * gives it back (release) or stops.
 */
async function leaseHolder(id: string) {
	const config = loadCrankerConfig(h.crankerEnv(await h.crankerKey(otherMint)), []);
	const node = new NodeClient(config.nodeUrl, config.workerApiKey, keypairSigningKey(config.keypair));
	const pubkey = config.keypair.publicKey;
	const sign = createSigner(config.keypair);
	const heartbeat = async () => {
		const body = { crankerPubkey: pubkey, roles: ["settlement"], liquidity: [], sentAt: new Date().toISOString() };
		await node.heartbeat({ ...body, signature: sign(buildHeartbeatMessage(body)) });
	};
	await heartbeat();
	const { stateVersion } = await node.updateStatus(id, { status: "CRANKER_LEASED", crankerPubkey: pubkey, expectedVersion: 3 });
	const renew = () => node.updateStatus(id, { status: "CRANKER_LEASED", crankerPubkey: pubkey, expectedVersion: stateVersion });
	// One renewal at a time, so that the release never races one (a 409 for the version it read).
	let renewal: Promise<unknown> = Promise.resolve();
	const keepAlive = setInterval(() => (renewal = renewal.then(heartbeat).then(renew).catch(() => {})), 1000);
	const stop = async () => {
		clearInterval(keepAlive);
		await renewal;
	};
	return {
		stop,
		release: async () => {
			await stop();
			await node.updateStatus(id, { status: "VERIFIED", crankerPubkey: pubkey, expectedVersion: stateVersion });
		}
	};
}

beforeAll(async () => {
	await h.start();
	mint = h.chain.createMint(6);
	otherMint = h.chain.createMint(6);
	thirdMint = h.chain.createMint(6);
	oldest = await h.pay(otherMint, "1000");
	passedOver = await h.pay(thirdMint, "1000");
	for (let i = 0; i < UNPAYABLE; i++) await h.pay(mint, "8000000");
}, 120_000);
afterAll(() => h.stop());

/** A Cranker process polling once a minute, returned once its first round has read five work pages (its metrics count them). */
async function pagingCranker(env: Record<string, string>) {
	const run = h.crankerProcess({ ...env, POLL_INTERVAL_MS: "60000", CRANKER_METRICS_PORT: "0" });
	const port = Number((await waitFor(() => /"message":"metrics and health served".*"port":(\d+)/.exec(run.output()), 10_000, "the metrics port"))[1]);
	const workReads = async () => {
		const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
		return text.split("\n").filter(line => line.startsWith("scs_cranker_node_requests_total{") && line.includes('route="/intent-work"')).reduce((sum, line) => sum + Number(line.split(" ").at(-1)), 0);
	};
	// Its first round reads five pages; the next poll is a minute away.
	await waitFor(async () => (run.output().includes("following the Node's event stream") && (await workReads()) >= 5 ? true : null), 20_000, "a first round of five pages");
	return run;
}

it("settles a payment behind more intents it cannot pay than a round reads", async () => {
	// A Cranker that read only the oldest twenty work items never saw the work behind them.
	const payable = await h.pay(mint, "1000");
	const cranker = await h.cranker(await h.crankerKey(mint, 7_000_000n));
	await executed(payable.id, 30_000);
	await h.stopCranker(cranker);
}, 60_000);

it("settles an intent the event stream announces even when it lies behind where its rounds have read to", async () => {
	// Another Cranker holds the oldest intent while this one's first round reads past it.
	const holder = await leaseHolder(oldest.id);
	try {
		// Its first round read five pages past the held intent.
		const run = await pagingCranker(h.crankerEnv(await h.crankerKey(otherMint, 7_000_000n)));
		// The holder gives the oldest intent back: VERIFIED again, announced, behind the Cranker's place.
		await holder.release();
		await executed(oldest.id, 15_000);
		run.child.kill("SIGTERM");
		expect(await run.exited).toBe(0);
	} finally {
		await holder.stop();
	}
}, 60_000);

it("reads from the oldest again once its balance on chain grows: work it passed over may be payable now", async () => {
	// Too little to pay the intent its first round passes over.
	const key = await h.crankerKey(thirdMint, 500n);
	const run = await pagingCranker(h.crankerEnv(key, { HEARTBEAT_INTERVAL_MS: "500" }));
	// Topped up: the next heartbeat reads more on chain, and the next round starts from the oldest
	// (else the intent waited for the end of the list and the next poll, a minute away).
	await h.chain.fundTokens(key.address, thirdMint, 5000n);
	await executed(passedOver.id, 15_000);
	run.child.kill("SIGTERM");
	expect(await run.exited).toBe(0);
}, 60_000);

it("reads the first page once a round from a gateway of the version before `after=` (a rolling update)", async () => {
	// That gateway refuses the parameter (422), as it refuses any it does not know; the rest passes.
	const reads: string[] = [];
	const oldGateway = http.createServer((req, res) => {
		const url = new URL(req.url ?? "/", "http://gateway");
		if (url.pathname === "/intent-work") {
			reads.push(url.searchParams.has("after") ? "after" : "first");
			if (url.searchParams.has("after")) {
				res.writeHead(422, { "content-type": "application/json" });
				return void res.end(JSON.stringify({ name: "ValidationError", message: "Parameters validation error!", code: 422, type: "VALIDATION_ERROR", data: [{ field: "after" }] }));
			}
		}
		const upstream = http.request(`${h.node.url}${req.url}`, { method: req.method, headers: req.headers }, answer => {
			res.writeHead(answer.statusCode ?? 502, answer.headers);
			answer.pipe(res);
		});
		upstream.on("error", () => res.destroy());
		req.pipe(upstream);
	});
	await new Promise<void>(resolve => oldGateway.listen(0, "127.0.0.1", resolve));
	try {
		const env = h.crankerEnv(await h.crankerKey(mint, 500n), { NODE_URL: `http://127.0.0.1:${(oldGateway.address() as AddressInfo).port}`, POLL_INTERVAL_MS: "60000" });
		const run = h.crankerProcess(env);
		await waitFor(() => (reads.length >= 2 ? true : null), 20_000, "a first round");
		// The round is over: the next poll is a minute away. (Before, a round read the first page three times, refused twice between.)
		await new Promise(resolve => setTimeout(resolve, 1500));
		expect(reads).toEqual(["first", "after"]);
		run.child.kill("SIGTERM");
		expect(await run.exited).toBe(0);
	} finally {
		oldGateway.closeAllConnections();
		oldGateway.close();
	}
}, 60_000);
