/**
 * Expiry by slot over several RPC endpoints (SPEC §1): the real service with SOLANA_RPC_URL listing
 * three endpoints of the local chain (litesvm). The first (`liar`) passes everything through unless
 * told to lie about `getSlot`; the second passes everything through; the third is the chain.
 */
import { newRoute, newWallet, signedIntent, writeSeedFile } from "../helpers/fixtures";
import { API_KEY, sleep, startNode, tempDir, type TestNode } from "../helpers/node";
import { waitFor } from "../../devkit/process";
import { LocalChain, LOCAL_CLUSTER } from "../../devkit/local-chain";
import { startLyingRpc, type LyingRpc } from "../helpers/lying-rpc";
import type { GenesisRoute } from "../../lib/registry";

const POLL_MS = 100;
let chain: LocalChain;
let liar: LyingRpc;
let relay: LyingRpc;
let node: TestNode;
let route: GenesisRoute;
const sender = newWallet();
const worker = { "x-api-key": API_KEY };

beforeAll(async () => {
	chain = new LocalChain({ slotMs: 50 });
	await chain.start();
	liar = await startLyingRpc(chain.url);
	relay = await startLyingRpc(chain.url);
	route = newRoute();
	const dataDir = tempDir();
	node = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]), SOLANA_RPC_URL: `${liar.url},${relay.url},${chain.url}`, SOLANA_CLUSTER: LOCAL_CLUSTER, SLOT_POLL_INTERVAL_MS: String(POLL_MS) }, dataDir);
});

afterAll(async () => {
	await node?.stop();
	await liar?.close();
	await relay?.close();
	await chain?.stop();
});

// An endpoint's last answer counts until its next one: let the honest answers in before the next
// lie, or a lie just told by one endpoint and the next by another would make two liars of three.
afterEach(async () => {
	liar.honest();
	relay.honest();
	await Promise.all([polled(liar), polled(relay)]);
});

/** Lets every process that polls the slot (the verifier and the mempool) take a few readings from `endpoint`. */
async function polled(endpoint: LyingRpc) {
	const seen = endpoint.calls.get("getSlot") ?? 0;
	// Two processes poll it (the verifier and the mempool), each one call at a time.
	await waitFor(() => (endpoint.calls.get("getSlot") ?? 0) >= seen + 10, 10_000, "getSlot polls", 20);
	await sleep(POLL_MS);
}
const status = async (id: string) => (await node.http("GET", `/intents/${id}`)).body.receiverStatus as string;
const leasable = async (id: string) => ((await node.http("GET", "/intent-work?limit=500", undefined, worker)).body as { intent: { id: string } }[]).some(work => work.intent.id === id);

describe("one endpoint of three moves the slot neither way", () => {
	it.each([
		["first", () => liar],
		["second", () => relay]
	])("a slot made up far ahead by the %s endpoint expires nothing: intake takes the intent, and it stays leasable", async (_place, endpoint) => {
		endpoint().lie("getSlot", (_params, truth) => Number(truth) + 1_000_000);
		await polled(endpoint());
		const posted = await node.http("POST", "/intents", signedIntent(sender, route, { expiresAtSlot: chain.slot + 2_000 }));
		expect(posted.status).toBe(201);
		await polled(endpoint());
		expect(await status(posted.body.id)).toBe("VERIFIED");
		expect(await leasable(posted.body.id)).toBe(true);
	});

	it("a slot held behind keeps no intent open past its expiresAtSlot", async () => {
		const expiresAtSlot = chain.slot + 40;
		liar.lie("getSlot", () => expiresAtSlot - 30);
		await polled(liar);
		const posted = await node.http("POST", "/intents", signedIntent(sender, route, { expiresAtSlot }));
		expect(posted.status).toBe(201);
		await waitFor(() => chain.slot > expiresAtSlot, 10_000, `the chain past slot ${expiresAtSlot}`, 20);
		await waitFor(async () => (await status(posted.body.id)) === "REJECTED", 5_000, "the intent expired by slot", 50);
		expect((await node.http("GET", `/intents/${posted.body.id}`)).body.rejectionReason).toBe("EXPIRED");
		expect(await leasable(posted.body.id)).toBe(false);
	});
});
