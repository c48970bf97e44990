/**
 * The crankers service alone, on a real SQLite file: a broker with just this owner, called as the
 * gateway calls it, with the request signer's key in `meta` (the gateway verified the request's
 * signature; the heartbeat must be signed by that same key). Real ed25519 signatures throughout.
 */
import { randomBytes } from "node:crypto";
import { ServiceBroker } from "moleculer";
import { LocalChain, LOCAL_CLUSTER } from "../../devkit/local-chain";
import { waitFor } from "../../devkit/process";
import { loadConfig } from "../../lib/config";
import { BUS_SIGNATURE_TTL_MS, newBusKeyring } from "../../lib/bus-signatures";
import { MAX_CLOCK_SKEW_S } from "../../lib/http-signature";
import { crankersService } from "../../services/crankers.service";
import { sweepMetrics } from "../../services/metrics";
import { MINT, crankerCallMeta, iso, newWallet, signedHeartbeat, walletOf, type Wallet } from "../helpers/fixtures";
import { sleep, tempDir } from "../helpers/node";

async function startCrankers(env: Record<string, string> = {}) {
	const broker = new ServiceBroker({ logger: false });
	broker.createService(crankersService(loadConfig({ DATA_DIR: tempDir(), SWEEP_INTERVAL_MS: "50", ...env })));
	await broker.start();
	return {
		broker,
		/** A heartbeat as the gateway hands it over: from a request signed by `signer`. */
		heartbeat: async (heartbeat: ReturnType<typeof signedHeartbeat>, signer = heartbeat.crankerPubkey) =>
			broker.call<{ online: boolean; liquidity: { tokenMintAddress: string; available: string }[] }, object>("crankers.heartbeat", heartbeat, { meta: await crankerCallMeta(walletOf(signer), "crankers.heartbeat", heartbeat) }),
		standing: (cranker: Wallet) => broker.call<{ online: boolean; roles: string[] }, object>("crankers.standing", { crankerPubkey: cranker.address }),
		summary: () => broker.call<{ online: number; total: number; byRole: Record<string, number>; mints: Record<string, { liquidity: string; crankersOnline: number }> }>("crankers.summary")
	};
}

describe("heartbeats", () => {
	let crankers: Awaited<ReturnType<typeof startCrankers>>;
	beforeEach(async () => (crankers = await startCrankers()));
	afterEach(() => crankers.broker.stop());

	test("a heartbeat its Cranker signed, in a request that Cranker signed, makes it online with its roles and liquidity", async () => {
		const cranker = newWallet();
		expect(await crankers.heartbeat(signedHeartbeat(cranker, ["settlement", "verifier"]))).toMatchObject({ crankerPubkey: cranker.address, online: true });
		expect(await crankers.standing(cranker)).toEqual({ online: true, roles: ["settlement", "verifier"] });
		expect(await crankers.summary()).toMatchObject({ online: 1, total: 1, byRole: { settlement: 1, verifier: 1 }, mints: { [MINT]: { liquidity: "1000000000", crankersOnline: 1 } } });
	});

	test("a heartbeat in a request another key signed, or whose own signature does not verify, is refused and stores nothing", async () => {
		const cranker = newWallet();
		await expect(crankers.heartbeat(signedHeartbeat(cranker), newWallet().address)).rejects.toMatchObject({ type: "FORBIDDEN", data: { reason: "keyid-mismatch" } });
		const forged = { ...signedHeartbeat(cranker), signature: signedHeartbeat(newWallet()).signature };
		await expect(crankers.heartbeat(forged)).rejects.toMatchObject({ type: "INVALID_SIGNATURE" });
		// Signed, but over other roles than it claims.
		await expect(crankers.heartbeat({ ...signedHeartbeat(cranker, ["settlement"]), roles: ["verifier"] })).rejects.toMatchObject({ type: "INVALID_SIGNATURE" });
		expect(await crankers.standing(cranker)).toEqual({ online: false, roles: [] });
		expect(await crankers.summary()).toMatchObject({ online: 0, total: 0 });
	});

	test("only a newer heartbeat than the last accepted is accepted: a replay, an older one or one a minute off the clock is STALE_HEARTBEAT", async () => {
		const cranker = newWallet();
		const first = signedHeartbeat(cranker, ["settlement"], { sentAt: iso(-1000) });
		await crankers.heartbeat(first);
		await expect(crankers.heartbeat(first)).rejects.toMatchObject({ type: "STALE_HEARTBEAT" });
		await expect(crankers.heartbeat(signedHeartbeat(cranker, ["verifier"], { sentAt: iso(-2000) }))).rejects.toMatchObject({ type: "STALE_HEARTBEAT" });
		await expect(crankers.heartbeat(signedHeartbeat(cranker, ["verifier"], { sentAt: iso(61_000) }))).rejects.toMatchObject({ type: "STALE_HEARTBEAT" });
		expect((await crankers.standing(cranker)).roles).toEqual(["settlement"]);
		await crankers.heartbeat(signedHeartbeat(cranker, ["verifier"]));
		expect((await crankers.standing(cranker)).roles).toEqual(["verifier"]);
	});

	test("the same heartbeat sent five times at once is accepted once", async () => {
		const heartbeat = signedHeartbeat(newWallet());
		const outcomes = await Promise.allSettled(Array.from({ length: 5 }, () => crankers.heartbeat(heartbeat)));
		expect(outcomes.filter(outcome => outcome.status === "fulfilled")).toHaveLength(1);
		expect(outcomes.filter(outcome => outcome.status === "rejected").map(outcome => (outcome as PromiseRejectedResult).reason.type)).toEqual(Array(4).fill("STALE_HEARTBEAT"));
		expect(await crankers.summary()).toMatchObject({ online: 1, total: 1 });
	});

	test("a signed heartbeat sent again on the bus, naming the first call's parent, is a replay: a refused one cannot take effect later", async () => {
		const cranker = newWallet();
		// sentAt just over 60 s ahead: refused (STALE_HEARTBEAT), its signature admitted all the same.
		const ahead = signedHeartbeat(cranker, ["settlement"], { sentAt: iso(61_500) });
		const meta = await crankerCallMeta(cranker, "crankers.heartbeat", ahead);
		const fromParent = (parentID: string) =>
			crankers.broker.call("crankers.heartbeat", ahead, { meta, parentCtx: { id: parentID, level: 1, meta: {}, requestID: parentID } as never }).then(
				() => "accepted",
				(error: { type?: string; data?: { reason?: string } }) => `${error.type} ${error.data?.reason ?? ""}`.trim()
			);
		expect(await fromParent("gateway-request-1")).toBe("STALE_HEARTBEAT");
		await sleep(2000); // inside the Node's 60 s now
		expect(await fromParent("gateway-request-1")).toBe("FORBIDDEN replayed");
		expect(await fromParent("another-parent")).toBe("FORBIDDEN replayed");
		expect(await crankers.standing(cranker)).toEqual({ online: false, roles: [] });
	});

	test("a request signature is admitted once; the same one again within its window is a replay", async () => {
		const admit = (signature: string, created: number) => crankers.broker.call("crankers.admitSignature", { keyid: newWallet().address, signature, created });
		const now = Math.floor(Date.now() / 1000);
		await expect(admit("sig-a", now)).resolves.toBe(true);
		await expect(admit("sig-a", now)).rejects.toMatchObject({ type: "FORBIDDEN", data: { reason: "replayed" } });
		// One whose window is over on every replica's clock is forgotten by the next sweep (the gateway refuses it as too old anyway).
		const windowOver = now - MAX_CLOCK_SKEW_S - BUS_SIGNATURE_TTL_MS / 1000 - 5;
		await admit("sig-old", windowOver);
		await waitFor(() => admit("sig-old", windowOver).catch(() => false), 5000, "the expired signature forgotten");
		await expect(admit("sig-a", now)).rejects.toMatchObject({ type: "FORBIDDEN" });
	});

	test("a sweep forgets up to 10,000 expired signatures, not a batch of 500: a flood of signed calls cannot outgrow the pruning (a review)", async () => {
		await crankers.broker.stop();
		crankers = await startCrankers({ SWEEP_INTERVAL_MS: "1500" });
		const windowOver = Math.floor(Date.now() / 1000) - MAX_CLOCK_SKEW_S - BUS_SIGNATURE_TTL_MS / 1000 - 5;
		const keyid = newWallet().address;
		for (let batch = 0; batch < 6; batch++)
			await Promise.all(Array.from({ length: 250 }, (_, i) => crankers.broker.call("crankers.admitSignature", { keyid, signature: `sig-${batch}-${i}`, created: windowOver })));
		const forgotten = async () => (await sweepMetrics(crankers.broker).get()).values.find(({ labels }) => labels.result === "signatures-forgotten")?.value ?? 0;
		// The first sweep that forgets any forgets all 1,500.
		await waitFor(async () => (await forgotten()) > 0, 5000, "a sweep");
		expect(await forgotten()).toBe(1500);
	});

	test("a signature whose window is over on this replica's clock is still remembered while another replica, its clock up to a minute behind, accepts it", async () => {
		const admit = (signature: string, created: number) => crankers.broker.call("crankers.admitSignature", { keyid: newWallet().address, signature, created });
		// Signed 110 s ago: a replica whose clock is 60 s behind reads 50 s, and would accept it again (a lease renewal, say).
		const created = Math.floor(Date.now() / 1000) - 110;
		await expect(admit("sig-renewal", created)).resolves.toBe(true);
		await sleep(300);
		await expect(admit("sig-renewal", created)).rejects.toMatchObject({ type: "FORBIDDEN", data: { reason: "replayed" } });
	});
});

describe("a settlement Cranker's liquidity, with SOLANA_RPC_URL: as much as the chain bears out", () => {
	const chain = new LocalChain({ slotMs: 50 });
	let crankers: Awaited<ReturnType<typeof startCrankers>>;
	beforeAll(() => chain.start());
	afterAll(() => chain.stop());
	beforeEach(async () => (crankers = await startCrankers({ SOLANA_RPC_URL: chain.url, SOLANA_CLUSTER: LOCAL_CLUSTER })));
	afterEach(() => {
		chain.clearFaults();
		return crankers.broker.stop();
	});

	const reporting = (amounts: Record<string, string>) => Object.entries(amounts).map(([tokenMintAddress, available]) => ({ tokenMintAddress, available }));

	/** A settlement Cranker holding `amount` of a new mint and reporting as much, once a reading has counted it. */
	async function countedCranker(amount: bigint) {
		const cranker = newWallet();
		const mint = chain.createMint();
		await chain.fundTokens(cranker.address, mint, amount);
		const beat = () => crankers.heartbeat(signedHeartbeat(cranker, ["settlement"], { liquidity: reporting({ [mint]: String(amount) }) }));
		await beat();
		await mintsBecome({ [mint]: { liquidity: String(amount), crankersOnline: 1 } });
		return { cranker, mint, beat };
	}

	/** Runs `beat` again and again, `pauseMs` apart, while `body` runs. */
	async function whileBeating(beat: () => Promise<unknown>, pauseMs: number, body: () => Promise<void>) {
		let beating = true;
		const beats = (async () => {
			while (beating) {
				await beat();
				await sleep(pauseMs);
			}
		})();
		try {
			await body();
		} finally {
			beating = false;
			await beats;
		}
	}

	/** The figures once the next liquidity reads have counted `expected` (a read every SWEEP_INTERVAL_MS, 50 ms here). */
	const mintsBecome = (expected: object) => waitFor(async () => JSON.stringify((await crankers.summary()).mints) === JSON.stringify(expected), 5000);

	test("each mint counts what the Cranker reports or what its associated token account holds, the smaller: a mint it holds none of is not offered", async () => {
		const cranker = newWallet();
		const [held, empty] = [chain.createMint(), chain.createMint()];
		const madeUp = newWallet().address;
		await chain.fundTokens(cranker.address, held, 5000n);
		// Its word: a billion of each, in a heartbeat it signed. Nothing counts before the chain is read.
		const answer = await crankers.heartbeat(signedHeartbeat(cranker, ["settlement"], { liquidity: reporting({ [held]: "1000000000", [empty]: "1000000000", [madeUp]: "1000000000" }), sentAt: iso(-1000) }));
		expect(answer).toMatchObject({ online: true, liquidity: reporting({ [held]: "0", [empty]: "0", [madeUp]: "0" }) });
		await mintsBecome({ [held]: { liquidity: "5000", crankersOnline: 1 }, [empty]: { liquidity: "0", crankersOnline: 0 }, [madeUp]: { liquidity: "0", crankersOnline: 0 } });

		// Reporting less than it holds (kept back for fees, say) is its own choice, and counts at once.
		await crankers.heartbeat(signedHeartbeat(cranker, ["settlement"], { liquidity: reporting({ [held]: "70" }) }));
		expect((await crankers.summary()).mints).toEqual({ [held]: { liquidity: "70", crankersOnline: 1 } });
	});

	test("tokens moved from one key to another count once: both keys are read together, not each at its own heartbeat (a review)", async () => {
		const [first, second] = [newWallet(), newWallet()];
		const mint = chain.createMint();
		await chain.fundTokens(first.address, mint, 5000n);
		await crankers.heartbeat(signedHeartbeat(first, ["settlement"], { liquidity: reporting({ [mint]: "5000" }) }));
		await mintsBecome({ [mint]: { liquidity: "5000", crankersOnline: 1 } });
		// The same 5,000 move to a second key of the same holder, which beats at once.
		await chain.fundTokens(first.address, mint, 0n);
		await chain.fundTokens(second.address, mint, 5000n);
		await crankers.heartbeat(signedHeartbeat(second, ["settlement"], { liquidity: reporting({ [mint]: "5000" }) }));
		const seen: string[] = [];
		for (let i = 0; i < 10; i++, await sleep(50)) seen.push((await crankers.summary()).mints[mint]?.liquidity);
		expect(seen.filter(liquidity => liquidity !== "5000" && liquidity !== "0")).toEqual([]);
		await mintsBecome({ [mint]: { liquidity: "5000", crankersOnline: 1 } });
	});

	test("a Cranker that beats without pause cannot keep a reading its account no longer bears out: every figure is bound to the latest reading", async () => {
		const cranker = newWallet();
		const mint = chain.createMint();
		await chain.fundTokens(cranker.address, mint, 5000n);
		const beat = () => crankers.heartbeat(signedHeartbeat(cranker, ["settlement"], { liquidity: reporting({ [mint]: "5000" }) })).catch(() => undefined);
		await whileBeating(beat, 0, async () => {
			await mintsBecome({ [mint]: { liquidity: "5000", crankersOnline: 1 } });
			await chain.fundTokens(cranker.address, mint, 0n);
			await mintsBecome({ [mint]: { liquidity: "0", crankersOnline: 0 } });
		});
	});

	test("a heartbeat counts against the reading that landed while it was stored, not the one before (a review)", async () => {
		const { cranker, mint, beat } = await countedCranker(5000n);
		await chain.fundTokens(cranker.address, mint, 0n);
		// The next heartbeat's write stalls until a reading of 0 has landed.
		const records = (crankers.broker.getLocalService("crankers") as unknown as { crankers: { update(...args: unknown[]): Promise<boolean> } }).crankers;
		const update = records.update;
		records.update = async (...args) => {
			records.update = update;
			await mintsBecome({ [mint]: { liquidity: "0", crankersOnline: 0 } });
			return update.apply(records, args);
		};
		expect((await beat()).liquidity).toEqual(reporting({ [mint]: "0" }));
		expect((await crankers.summary()).mints).toEqual({ [mint]: { liquidity: "0", crankersOnline: 0 } });
	});

	test("derivations take turns that go on from one reading to the next: a hundred keys ahead with new mints cannot keep a Cranker's account from being derived (a review)", async () => {
		await crankers.broker.stop();
		// Room in a reading for all of them: 200 reads of 100 accounts.
		crankers = await startCrankers({ SOLANA_RPC_URL: chain.url, SOLANA_CLUSTER: LOCAL_CLUSTER, LIQUIDITY_READS_PER_SECOND: "200" });
		const mint = chain.createMint();
		const honest = newWallet();
		await chain.fundTokens(honest.address, mint, 9n);
		// 150 keys ahead of it, with 64 accounts each to derive: 9,600, at 100 a reading.
		for (let i = 0; i < 150; i++) await crankers.heartbeat(signedHeartbeat(newWallet(), ["settlement"], { liquidity: reporting(Object.fromEntries(Array.from({ length: 64 }, () => [newWallet().address, "1000"]))) }));
		await sleep(5);
		const derived = (crankers.broker.getLocalService("crankers") as unknown as { tokenAccounts: Map<string, string> }).tokenAccounts;
		const derivedBefore = derived.size;
		await crankers.heartbeat(signedHeartbeat(honest, ["settlement"], { liquidity: reporting({ [mint]: "9" }) }));
		await waitFor(async () => (await crankers.summary()).mints[mint]?.liquidity === "9", 20_000);
		// Its turn came within a few readings after it arrived, not after the others' thousands of accounts.
		expect(derived.size - derivedBefore).toBeLessThanOrEqual(1000);
	});

	test("a reading the chain does not answer leaves the last one counting until it is CRANKER_TTL_MS old, then 0; the Cranker is online all the same", async () => {
		await crankers.broker.stop();
		crankers = await startCrankers({ SOLANA_RPC_URL: chain.url, SOLANA_CLUSTER: LOCAL_CLUSTER, CRANKER_TTL_MS: "1500" });
		const [cranker, newcomer] = [newWallet(), newWallet()];
		const mint = chain.createMint();
		await chain.fundTokens(cranker.address, mint, 5000n);
		await chain.fundTokens(newcomer.address, mint, 5000n);
		await crankers.heartbeat(signedHeartbeat(cranker, ["settlement"], { liquidity: reporting({ [mint]: "1000000000" }), sentAt: iso(-1000) }));
		await mintsBecome({ [mint]: { liquidity: "5000", crankersOnline: 1 } });

		chain.injectFault("getMultipleAccounts", "http-500", 100_000);
		const failedAt = performance.now();
		await crankers.heartbeat(signedHeartbeat(newcomer, ["settlement"], { liquidity: reporting({ [mint]: "1000000000" }), sentAt: iso(-500) }));
		expect(await crankers.standing(newcomer)).toEqual({ online: true, roles: ["settlement"] });
		// The last reading, not what it reports, bounds what it reports now; the newcomer, never read, counts 0.
		await crankers.heartbeat(signedHeartbeat(cranker, ["settlement"], { liquidity: reporting({ [mint]: "1000000000" }), sentAt: iso(-500) }));
		expect((await crankers.summary()).mints).toEqual({ [mint]: { liquidity: "5000", crankersOnline: 1 } });

		// The Cranker keeps beating; the sweep lets the reading go once it is too old.
		await whileBeating(() => crankers.heartbeat(signedHeartbeat(cranker, ["settlement"], { liquidity: reporting({ [mint]: "1000000000" }) })), 200, async () => {
			await mintsBecome({ [mint]: { liquidity: "0", crankersOnline: 0 } });
			expect(performance.now() - failedAt).toBeGreaterThan(1000);
			expect(await crankers.standing(cranker)).toEqual({ online: true, roles: ["settlement"] });
			chain.clearFaults();
			await mintsBecome({ [mint]: { liquidity: "5000", crankersOnline: 1 } });
		});
	});

	test("heartbeats read nothing; readings ask for at most LIQUIDITY_READS_PER_SECOND reads a second, however often the sweep runs, the Crankers settling longest first, and the others count 0 (a review)", async () => {
		await crankers.broker.stop();
		// One read of 100 accounts a second, with a sweep every 10 ms.
		crankers = await startCrankers({ SOLANA_RPC_URL: chain.url, SOLANA_CLUSTER: LOCAL_CLUSTER, LIQUIDITY_READS_PER_SECOND: "1", SWEEP_INTERVAL_MS: "10" });
		const mint = chain.createMint();
		const honest = newWallet();
		await chain.fundTokens(honest.address, mint, 7n);
		await crankers.heartbeat(signedHeartbeat(honest, ["settlement"], { liquidity: reporting({ [mint]: "7" }), sentAt: iso(-1000) }));
		await mintsBecome({ [mint]: { liquidity: "7", crankersOnline: 1 } });

		const flood = Array.from({ length: 150 }, () => newWallet());
		for (const key of flood) await chain.fundTokens(key.address, mint, 100n);
		const readsBefore = chain.calls.get("getMultipleAccounts") ?? 0;
		const startedAt = performance.now();
		for (const key of flood) await crankers.heartbeat(signedHeartbeat(key, ["settlement"], { liquidity: reporting({ [mint]: "1000000000" }) }));
		// The honest Cranker and the first 99 of the flood fill the reading; the 51 after them count 0.
		const counted = { [mint]: { liquidity: String(7 + 99 * 100), crankersOnline: 100 } };
		await mintsBecome(counted);
		await sleep(1100);
		expect((await crankers.summary()).mints).toEqual(counted);
		const reads = (chain.calls.get("getMultipleAccounts") ?? 0) - readsBefore;
		expect(reads).toBeGreaterThanOrEqual(1);
		expect(reads).toBeLessThanOrEqual(Math.ceil((performance.now() - startedAt) / 1000) + 1);
	});

	test("past what a reading holds, accounts are shared out equally: a Cranker beside keys with large reports is still read (a review)", async () => {
		await crankers.broker.stop();
		// 100 accounts a reading.
		crankers = await startCrankers({ SOLANA_RPC_URL: chain.url, SOLANA_CLUSTER: LOCAL_CLUSTER, LIQUIDITY_READS_PER_SECOND: "1" });
		const large = () => reporting(Object.fromEntries(Array.from({ length: 64 }, () => [newWallet().address, "1000"])));
		await crankers.heartbeat(signedHeartbeat(newWallet(), ["settlement"], { liquidity: large() }));
		await crankers.heartbeat(signedHeartbeat(newWallet(), ["settlement"], { liquidity: large() }));
		// Settling last, with one mint: 1 + 49 + 50 accounts, not the first two whole and nothing of it.
		const honest = newWallet();
		const mint = chain.createMint();
		await chain.fundTokens(honest.address, mint, 7n);
		await crankers.heartbeat(signedHeartbeat(honest, ["settlement"], { liquidity: reporting({ [mint]: "7" }) }));
		await waitFor(async () => (await crankers.summary()).mints[mint]?.liquidity === "7", 5000);
	});

	test("with more Crankers than a reading has accounts, those settling longest get one each, whatever their reports' length, and a place lasts only while settling without a break: keys back from offline queue behind (a review)", async () => {
		await crankers.broker.stop();
		// 100 accounts a reading, for 101 Crankers.
		crankers = await startCrankers({ SOLANA_RPC_URL: chain.url, SOLANA_CLUSTER: LOCAL_CLUSTER, LIQUIDITY_READS_PER_SECOND: "1", CRANKER_TTL_MS: "1500" });
		const banked = Array.from({ length: 100 }, () => newWallet());
		const beatBanked = () => Promise.all(banked.map(key => crankers.heartbeat(signedHeartbeat(key, ["settlement"], { liquidity: reporting({ [newWallet().address]: "1000" }) }))));
		// They settle first, then go silent past CRANKER_TTL_MS.
		await beatBanked();
		await sleep(1600);
		const stayed = newWallet();
		const mint = chain.createMint();
		await chain.fundTokens(stayed.address, mint, 5n);
		// Two mints, where the others report one: its first is read.
		const beatStayed = () => crankers.heartbeat(signedHeartbeat(stayed, ["settlement"], { liquidity: reporting({ [mint]: "5", [chain.createMint()]: "5" }) }));
		await beatStayed();
		await whileBeating(async () => (await beatStayed(), await beatBanked()), 300, async () => {
			await waitFor(async () => (await crankers.summary()).mints[mint]?.liquidity === "5", 8000);
		});
	});

	test("a token account derived once stays with its Cranker: dropped from memory (the cache full), it comes back from the record at the next heartbeat", async () => {
		const { cranker, beat } = await countedCranker(40n);
		await beat();
		const service = crankers.broker.getLocalService("crankers") as unknown as { tokenAccounts: Map<string, string>; crankers: { get(id: string): Promise<{ reported: { account?: string }[] }> } };
		const account = (await service.crankers.get(cranker.address)).reported[0].account;
		expect(account).toEqual(expect.any(String));
		service.tokenAccounts.clear();
		await beat();
		expect((await service.crankers.get(cranker.address)).reported[0].account).toBe(account);
		expect(service.tokenAccounts.size).toBe(1);
	});

	test("keys that report new mints at every heartbeat take their turn at the derivations, so a Cranker after them is still derived and counted (a review)", async () => {
		const mint = chain.createMint();
		const [greedy, greedier, honest] = [newWallet(), newWallet(), newWallet()];
		await chain.fundTokens(honest.address, mint, 9n);
		// 64 mints never seen before at each heartbeat: more than a reading's 100 derivations between them.
		const fresh = () => reporting(Object.fromEntries(Array.from({ length: 64 }, () => [newWallet().address, "1000"])));
		await whileBeating(() => Promise.all([greedy, greedier].map(key => crankers.heartbeat(signedHeartbeat(key, ["settlement"], { liquidity: fresh() })))), 20, async () => {
			await sleep(100);
			await crankers.heartbeat(signedHeartbeat(honest, ["settlement"], { liquidity: reporting({ [mint]: "9" }) }));
			await waitFor(async () => (await crankers.summary()).mints[mint]?.liquidity === "9", 5000);
		});
	});

	test("a record stored without a reading (by a Node without SOLANA_RPC_URL, or an earlier version) counts 0 once the Node has a chain, until read (a review)", async () => {
		await crankers.broker.stop();
		const dataDir = tempDir();
		const cranker = newWallet();
		const mint = chain.createMint();
		await chain.fundTokens(cranker.address, mint, 100n);
		const unread = await startCrankers({ DATA_DIR: dataDir });
		await unread.heartbeat(signedHeartbeat(cranker, ["settlement"], { liquidity: reporting({ [mint]: "1000000000" }), sentAt: iso(-1000) }));
		expect((await unread.summary()).mints).toEqual({ [mint]: { liquidity: "1000000000", crankersOnline: 1 } });
		await unread.broker.stop();

		chain.injectFault("getMultipleAccounts", "http-500", 100_000);
		crankers = await startCrankers({ DATA_DIR: dataDir, SOLANA_RPC_URL: chain.url, SOLANA_CLUSTER: LOCAL_CLUSTER });
		// Folded in from the store at start, before any heartbeat to this process.
		expect((await crankers.summary()).mints).toEqual({ [mint]: { liquidity: "0", crankersOnline: 0 } });
		chain.clearFaults();
		await mintsBecome({ [mint]: { liquidity: "100", crankersOnline: 1 } });
	});
});

test("CRANKER_OPERATORS: a Cranker not listed is refused, however well signed", async () => {
	const operator = newWallet();
	const crankers = await startCrankers({ CRANKER_OPERATORS: operator.address });
	try {
		await expect(crankers.heartbeat(signedHeartbeat(newWallet()))).rejects.toMatchObject({ type: "CRANKER_NOT_ALLOWED" });
		await crankers.heartbeat(signedHeartbeat(operator));
		expect(await crankers.summary()).toMatchObject({ online: 1, total: 1 });
	} finally {
		await crankers.broker.stop();
	}
});

test("a Cranker silent for CRANKER_TTL_MS is offline and leaves the figures; silent for CRANKER_RETENTION_MS, its record is pruned", async () => {
	const crankers = await startCrankers({ CRANKER_TTL_MS: "300", CRANKER_RETENTION_MS: "2000" });
	try {
		const cranker = newWallet();
		await crankers.heartbeat(signedHeartbeat(cranker));
		expect(await crankers.summary()).toMatchObject({ online: 1, total: 1 });
		await sleep(400);
		expect(await crankers.standing(cranker)).toEqual({ online: false, roles: ["settlement"] });
		expect(await crankers.summary()).toEqual({ online: 0, total: 1, byRole: { settlement: 0, verifier: 0, submitter: 0 }, mints: {} });
		expect(await crankers.broker.call("crankers.onlineCount")).toBe(0);
		await waitFor(async () => (await crankers.summary()).total === 0, 5000, "the record pruned");
		expect(await crankers.standing(cranker)).toEqual({ online: false, roles: [] });
	} finally {
		await crankers.broker.stop();
	}
});

test("with replicas, a heartbeat another replica stamped long before it was stored (a slow MongoDB write) is counted once stored", async () => {
	// A transporter says replicas may share the store; this broker runs without one.
	const crankers = await startCrankers({ TRANSPORTER: "nats://127.0.0.1:4222", NATS_USER: "owners", ...newBusKeyring().env("owners"), SERVICES: "crankers", WEBHOOK_SECRETS_KEY: randomBytes(32).toString("base64"), WORKER_API_KEYS: randomBytes(24).toString("hex") });
	try {
		await crankers.heartbeat(signedHeartbeat(newWallet()));
		await sleep(200);
		// Stored now by the other replica, stamped 20 s ago: still within CRANKER_TTL_MS (30 s).
		const late = newWallet();
		const stampedAt = new Date(Date.now() - 20_000).toISOString();
		const store = (crankers.broker.getLocalService("crankers") as unknown as { crankers: { insert(doc: object): Promise<boolean> } }).crankers;
		await store.insert({ id: late.address, crankerPubkey: late.address, roles: ["verifier"], liquidity: [], version: null, lastSentAt: stampedAt, lastSeenAt: stampedAt, callKey: "other-replica" });
		await waitFor(async () => (await crankers.summary()).online === 2, 3000, "the late heartbeat counted");
		expect(await crankers.summary()).toMatchObject({ online: 2, byRole: { settlement: 1, verifier: 1 } });
	} finally {
		await crankers.broker.stop();
	}
});

test("a restarted owner counts the Crankers online from its store", async () => {
	const dataDir = tempDir();
	// No sweep in the test's time: the figures come from the catch-up at start.
	const first = await startCrankers({ DATA_DIR: dataDir, SWEEP_INTERVAL_MS: "60000" });
	try {
		await first.heartbeat(signedHeartbeat(newWallet(), ["settlement"]));
		await first.heartbeat(signedHeartbeat(newWallet(), ["verifier"]));
	} finally {
		await first.broker.stop();
	}
	const second = await startCrankers({ DATA_DIR: dataDir, SWEEP_INTERVAL_MS: "60000" });
	try {
		expect(await second.summary()).toMatchObject({ online: 2, total: 2, byRole: { settlement: 1, verifier: 1 } });
	} finally {
		await second.broker.stop();
	}
});
