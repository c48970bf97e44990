/**
 * The distributed deployment with real processes: nats-server, an owners process, verifier
 * processes and a gateway. Sharded verification, a verifier killed under load, a verifier stopped
 * with SIGTERM under load, NATS itself restarted, and the SQLite single-owner refusal.
 */
import type { BusGroup } from "../../lib/bus-groups";
import type { CreateIntentRequest } from "../../lib/intents";
import { newRoute, newWallet, signedHeartbeat, signedIntent, writeSeedFile, type Wallet } from "../helpers/fixtures";
import { API_KEY, crankerClient, httpClient, tempDir, worker, type Http } from "../helpers/node";
import { freePort, waitFor } from "../../devkit/process";
import { ServiceBroker } from "moleculer";
import { connect } from "nats";
import { randomBytes } from "node:crypto";
import { Cluster, natsServerAvailable } from "../../devkit/cluster";
import { actForWorker, busGuard } from "../../services/bus-guard";
import { busSignature } from "../../lib/bus-signatures";
import { mongoUrlWithDatabase } from "../../lib/store/mongo-url";
import net from "node:net";
import os from "node:os";
import { itWithPromtool, promtoolCheck } from "../helpers/promtool";
import { openStream, type SseEvent } from "../helpers/sse";

jest.setTimeout(120_000);

const route = newRoute();
// In CI a missing nats-server is a failure, not a skip (.ci/run installs it).
const describeWithNats = natsServerAvailable || process.env.CI ? describe : describe.skip;
const NATS_MAX_PAYLOAD = 512 * 1024;
if (!natsServerAvailable) console.warn("Cluster tests NOT RUN: nats-server is not installed (.ci/run installs it with apt-get).");

type HistoryEntry = { state: string; by?: string };

/**
 * A broker of this test on the cluster's bus, signed in with a group's credentials (the gateway's
 * unless said), with the bus guard of our processes and that group's signing key: a call whose meta
 * `actForWorker` marked proves that worker key, as a compromised gateway, which holds the keys, could.
 */
function gatewayOnTheBus(cluster: Cluster, name: string, group: BusGroup = "gateway"): ServiceBroker {
	const { NATS_USER, NATS_PASSWORD } = cluster.nats.credentials(group);
	return new ServiceBroker({
		namespace: cluster.namespace,
		nodeID: `${group}.${name}-${process.pid}`,
		transporter: { type: "NATS", options: { url: cluster.nats.url.replace("nats://", `nats://${NATS_USER}:${NATS_PASSWORD}@`) } },
		serializer: "JSON",
		logger: false,
		middlewares: [busGuard({ busKeys: cluster.nats.busKeys.keys(group), callKeys: null, workerApiKeys: [], admitUngrouped: false })]
	});
}

/** A raw NATS client with the gateway's credentials: what a compromised gateway pod could read and publish. */
function gatewaySniffer(cluster: Cluster) {
	return connect({ servers: cluster.nats.url, user: "gateway", pass: cluster.nats.credentials("gateway").NATS_PASSWORD });
}

/** The owners process's node id, as the other nodes know it. */
const ownersNodeId = (cluster: Cluster) => `owners.${os.hostname()}-${cluster.owners.child.pid}`;

/** Submits every intent with `concurrency` requests in flight; answers the HTTP statuses and ids. */
async function submitAll(http: Http, intents: CreateIntentRequest[], concurrency: number, onProgress?: (done: number) => void) {
	const results: { status: number; id?: string }[] = [];
	let next = 0;
	await Promise.all(
		Array.from({ length: concurrency }, async () => {
			while (next < intents.length) {
				const intent = intents[next++];
				const response = await http("POST", "/intents", intent).catch(() => ({ status: 0, body: {} as { id?: string } }));
				results.push({ status: response.status, id: response.body?.id });
				onProgress?.(results.length);
			}
		})
	);
	return results;
}

/** Every intent ends VERIFIED exactly once (history), none left RECEIVED or NODE_VERIFYING. */
async function allVerifiedOnce(http: Http, ids: string[], timeoutMs = 30_000) {
	return waitFor(async () => {
		const records = await Promise.all(ids.map(async id => (await http("GET", `/intents/${id}`, undefined, worker)).body));
		if (records.some(record => record.receiverStatus !== "VERIFIED")) return null;
		return records;
	}, timeoutMs, "every intent VERIFIED", 200).then(records => {
		for (const record of records) expect(record.history.filter((entry: HistoryEntry) => entry.state === "VERIFIED")).toHaveLength(1);
		return records;
	});
}

const verifierOf = (record: { history: HistoryEntry[] }) => record.history.find(entry => entry.state === "VERIFIED")?.by;

describeWithNats("cluster over NATS (SQLite owners)", () => {
	let cluster: Cluster;
	let http: Http;
	const senders: Wallet[] = Array.from({ length: 24 }, () => newWallet());
	const intentsOf = (perSender: number) => senders.flatMap(sender => Array.from({ length: perSender }, () => signedIntent(sender, route)));

	beforeAll(async () => {
		const dir = tempDir();
		// Half NATS's default message limit: every message of these tests must still fit, and a list of
		// 500 intents (about 1 MB) must not need to.
		cluster = new Cluster({ verifiers: 3, seedFile: writeSeedFile(dir, [route]), workerApiKey: API_KEY, natsMaxPayload: NATS_MAX_PAYLOAD });
		await cluster.start();
		http = httpClient(cluster.gateway.url);
	});
	afterAll(() => cluster?.stop());

	it("spreads verification over every verifier, and a sender always goes to the same one", async () => {
		const results = await submitAll(http, intentsOf(3), 8);
		expect(results.map(r => r.status).filter(status => status !== 201)).toEqual([]);
		const records = await allVerifiedOnce(http, results.map(r => r.id!));
		const bySender = new Map<string, Set<string>>();
		for (const record of records) bySender.set(record.senderWallet, (bySender.get(record.senderWallet) ?? new Set()).add(verifierOf(record)!));
		for (const verifiers of bySender.values()) expect(verifiers.size).toBe(1);
		const used = new Set(records.map(verifierOf));
		expect(used.size).toBe(3);
		expect([...used].every(by => by?.startsWith("verifier@"))).toBe(true);
	});

	itWithPromtool("GET /metrics?format=prometheus on the gateway gathers every process's own series, labelled by node, and passes promtool", async () => {
		expect((await submitAll(http, [signedIntent(senders[0], route)], 1))[0].status).toBe(201);
		const response = await fetch(`${cluster.gateway.url}/metrics?format=prometheus`);
		expect(response.status).toBe(200);
		const text = await response.text();
		// A node id is its bus group, then host and pid (moleculer.config.ts).
		const nodeOf = (process: { group: string; child: { pid?: number } }) => `${process.group}.${os.hostname()}-${process.child.pid}`;
		const nodes = new Set([...text.matchAll(/^process_cpu_user_seconds_total\{node="([^"]+)"\}/gm)].map(match => match[1]));
		expect(nodes).toEqual(new Set([cluster.owners, cluster.gateway, ...cluster.verifiers].map(nodeOf)));
		// Each process's own families: the gateway's receiver counted the verdicts, the owners' mempool its sweeps.
		const value = (series: string) => Number(text.split("\n").find(line => line.startsWith(`${series} `))?.slice(series.length + 1));
		expect(value(`scs_verifications_total{outcome="verified",node="${nodeOf(cluster.gateway)}"}`)).toBeGreaterThan(0);
		expect(value(`scs_sweep_results_total{sweep="intent-expiry",result="expired",node="${nodeOf(cluster.owners)}"}`)).toBe(0);
		// The store's figures once, without a node; one HELP and TYPE per family whatever the number of nodes.
		expect(text.match(/^scs_intents\{state="VERIFIED"\} \d+$/gm)).toHaveLength(1);
		const types = text.split("\n").filter(line => line.startsWith("# TYPE "));
		expect(new Set(types).size).toBe(types.length);
		const { status, output } = promtoolCheck(text);
		expect(output).toBe("");
		expect(status).toBe(0);
	});

	itWithPromtool("a node answering a bad or made-up metrics snapshot breaks and falsifies nothing: its own series carry its node, the rest is left out, and scs_metrics_node_up says so (a review)", async () => {
		const rogue = gatewayOnTheBus(cluster, "metrics-liar");
		const madeUp = { name: "scs_verifications_total", help: "made up", type: "counter", aggregator: "sum", values: [{ value: 1e9, labels: { outcome: "unrecorded" } }] };
		let answer: unknown = [madeUp];
		rogue.createService({ name: "metrics", actions: { snapshot: () => answer } });
		await rogue.start();
		const prometheus = async () => {
			const response = await fetch(`${cluster.gateway.url}/metrics?format=prometheus`);
			expect(response.status).toBe(200);
			const text = await response.text();
			const { status, output } = promtoolCheck(text);
			expect([status, output]).toEqual([0, ""]);
			return text;
		};
		/** What the scrape says of the rogue node, line by line. */
		const rogueLines = async () => (await prometheus()).split("\n").filter(line => line.includes("metrics-liar"));
		try {
			// Its own figures, under its own node: the JSON figures take only the receivers'.
			await waitFor(async () => (await rogueLines()).some(line => /^scs_metrics_node_up\{node="[^"]*metrics-liar[^"]*"\} 1$/.test(line)), 10_000, "the gateway to ask the rogue node", 100);
			expect((await http("GET", "/metrics")).body.verification.unrecorded).toBeLessThan(1e9);
			// No snapshot, a name or a type Prometheus refuses, a store figure's name: left out whole.
			for (const lie of [null, [{ ...madeUp, name: "scs evil" }], [{ ...madeUp, type: "x" }], [{ ...madeUp, name: "scs_intents", values: [{ value: 1, labels: { state: "VERIFIED" } }] }]]) {
				answer = lie;
				expect(await rogueLines()).toEqual([expect.stringMatching(/^scs_metrics_node_up\{node="[^"]*metrics-liar[^"]*"\} 0$/)]);
				expect((await http("GET", "/metrics")).status).toBe(200);
			}
		} finally {
			await rogue.stop();
		}
	});

	it("GET /openapi.json documents the parameters of actions other processes run, as they announced them", async () => {
		const { status, body } = await http("GET", "/openapi.json");
		expect(status).toBe(200);
		// GET /intent-work (the gateway's own action) and GET /intents (the owners'): each with its `limit`.
		for (const route of ["/intent-work", "/intents"]) expect(body.paths[route].get.parameters.map((parameter: { name: string }) => parameter.name)).toContain("limit");
		expect(body.paths["/tin-operations/verification-work"].get.parameters.map((parameter: { name: string }) => parameter.name)).toContain("limit");
	});

	it("a verifier killed with SIGKILL under load: no intent lost, none stuck, none verified twice", async () => {
		const victim = cluster.verifiers[0];
		let killed = false;
		const results = await submitAll(http, intentsOf(5), 8, done => {
			if (done >= 30 && !killed) {
				killed = true;
				victim.child.kill("SIGKILL");
			}
		});
		expect(killed).toBe(true);
		// Accepted either verified (201) or recorded for the sweep (202); never an error.
		expect(results.filter(r => r.status !== 201 && r.status !== 202)).toEqual([]);
		await allVerifiedOnce(http, results.map(r => r.id!), 40_000);
		cluster.verifiers.splice(0, 1);
	});

	it("a verifier stopped with SIGTERM under load drains its in-flight calls and exits 0", async () => {
		const leaving = cluster.verifiers[0];
		let exit: Promise<number | null> | null = null;
		const results = await submitAll(http, intentsOf(4), 8, done => {
			if (done >= 20 && !exit) exit = leaving.signal("SIGTERM");
		});
		expect(await exit).toBe(0);
		expect(results.filter(r => r.status !== 201 && r.status !== 202)).toEqual([]);
		await allVerifiedOnce(http, results.map(r => r.id!));
		expect(leaving.log).toMatch(/SIGTERM received/);
		cluster.verifiers.splice(0, 1);
	});

	it("NATS restarted: the processes are not ready while it is away (a review: they were), the cluster reconnects, and nothing accepted before is lost", async () => {
		const before = await submitAll(http, intentsOf(1), 4);
		const readiness = async () => (await fetch(`${cluster.gateway.url}/health/ready`)).status;
		expect(await readiness()).toBe(200);
		await cluster.nats.stop();
		await waitFor(async () => (await readiness()) === 503, 5000, "the gateway to say it is not ready without the bus", 50);
		expect((await fetch(`${cluster.gateway.url}/health/live`)).status).toBe(200);
		await cluster.nats.start();
		await waitFor(async () => (await readiness()) === 200, 30_000, "the gateway ready again once the bus is back", 100);
		const after = await waitFor(async () => {
			const attempt = await submitAll(http, [signedIntent(senders[0], route)], 1);
			return attempt[0].status === 201 ? attempt : null;
		}, 30_000, "the cluster to verify again after the NATS restart", 200);
		const more = await submitAll(http, intentsOf(1), 4);
		expect(more.filter(r => r.status !== 201)).toEqual([]);
		await allVerifiedOnce(http, [...before, ...after, ...more].map(r => r.id!));
	});

	it("a second SQLite owner of a service refuses to start", async () => {
		const twin = cluster.node("twin", { SERVICES: "mempool" });
		expect(await twin.exited).toBe(1);
		expect(twin.log).toMatch(/another replica of "mempool" runs on .*: with SQLite a service has exactly one owner; set MONGO_URL/);
	});

	it("the bus admits only clients with its credentials", async () => {
		const attempt = (options: object) =>
			connect({ servers: cluster.nats.url, reconnect: false, timeout: 3000, ...options }).then(
				async connection => {
					await connection.close();
					return "connected";
				},
				(error: Error) => error.message
			);
		expect(await attempt({})).toMatch(/Authorization Violation/i);
		expect(await attempt({ user: "gateway", pass: "wrong" })).toMatch(/Authorization Violation/i);
		expect(await attempt({ user: "gateway", pass: cluster.nats.credentials("gateway").NATS_PASSWORD })).toBe("connected");
		// A process of ours started without them is refused by the bus too.
		const intruder = cluster.node("intruder", { SERVICES: "verifier", NATS_PASSWORD: "wrong" });
		try {
			await waitFor(() => /Authorization Violation/i.test(intruder.log), 15_000, "the bus's refusal");
		} finally {
			await intruder.signal("SIGKILL");
		}
	});

	it("a process holding the bus credentials (a compromised gateway, say) acts as no Cranker: the owners check the request signature themselves", async () => {
		const cranker = newWallet();
		const asCranker = crankerClient(cluster.gateway.url, cranker);
		expect((await asCranker("POST", "/crankers/heartbeat", signedHeartbeat(cranker, ["settlement"]))).status).toBe(200);
		const [{ id }] = await submitAll(http, [signedIntent(newWallet(), route)], 1);
		const [{ stateVersion }] = await allVerifiedOnce(http, [id!]);
		const lease = { status: "CRANKER_LEASED", crankerPubkey: cranker.address, expectedVersion: stateVersion };
		const rogue = gatewayOnTheBus(cluster, "rogue");
		await rogue.start();
		try {
			await rogue.waitForServices(["mempool"], 10_000);
			// What the owners took as proof before: the caller's word for which Cranker signed. Without the
			// worker key the call is not even taken; with it (a compromised gateway holds the keys), the
			// owners still ask for the Cranker's signed request.
			const claim = { crankerPubkey: cranker.address };
			await expect(rogue.call("mempool.updateStatus", { id, ...lease }, { meta: { ...claim } })).rejects.toMatchObject({ type: "FORBIDDEN", data: { reason: "unproven" } });
			const asWorker = { ...claim };
			actForWorker(asWorker, API_KEY);
			await expect(rogue.call("mempool.updateStatus", { id, ...lease }, { meta: asWorker })).rejects.toMatchObject({ type: "UNAUTHORIZED", data: { reason: "missing" } });
			expect((await http("GET", `/intents/${id}`)).body.receiverStatus).toBe("VERIFIED");
		} finally {
			await rogue.stop();
		}
		// The Cranker's own signed request, through the gateway, leases.
		expect((await asCranker("PATCH", `/intents/${id}/status`, lease)).body).toMatchObject({ receiverStatus: "CRANKER_LEASED" });
	});

	it("the gateway's bus credentials read no other group's traffic, take no owner's or verifier's calls, and read no broker options", async () => {
		const sniffer = await gatewaySniffer(cluster);
		const refused: string[] = [];
		const read: string[] = [];
		const prefix = `MOL-${cluster.namespace}`;
		for (const subject of [">", `${prefix}.REQ.owners.>`, `${prefix}.RES.intake.>`, `${prefix}.REQ.verifier.>`, `${prefix}.RES.>`])
			sniffer.subscribe(subject, { callback: (err, msg) => (err ? refused.push(subject) : read.push(msg.subject)) });
		// A broker that offers a verifier and a mempool of its own, under the gateway's group.
		const rogue = gatewayOnTheBus(cluster, "impostor");
		const called: string[] = [];
		rogue.createService({ name: "verifier", actions: { verifyMany: (ctx: { params: { requests: unknown[] } }) => (called.push("verifier.verifyMany"), ctx.params.requests.map(() => ({ ok: true, verifiedBy: "impostor" }))) } });
		rogue.createService({ name: "mempool", actions: { get: () => (called.push("mempool.get"), null), list: () => (called.push("mempool.list"), null) } });
		// And a service its group may run (api), announcing the verifier's and the mempool's actions under it.
		rogue.createService({
			name: "api",
			settings: { $noServiceNamePrefix: true },
			actions: {
				"verifier.verifyMany": (ctx: { params: { requests: unknown[] } }) => (called.push("api: verifier.verifyMany"), ctx.params.requests.map(() => ({ ok: true, verifiedBy: "impostor" }))),
				"mempool.get": () => (called.push("api: mempool.get"), null)
			}
		});
		await rogue.start();
		try {
			const owners = await waitFor(() => rogue.registry.getNodeList({ onlyAvailable: true, withServices: false }).find(node => node.id.startsWith("owners.")), 10_000, "the owners node");
			// Time for the gateway process to take in the impostor's announcement (INFO, sent on connect).
			await new Promise(resolve => setTimeout(resolve, 1000));
			const senders = Array.from({ length: 16 }, () => newWallet());
			const submitted = await submitAll(http, senders.map(sender => signedIntent(sender, route)), 8);
			expect(submitted.filter(r => r.status !== 201)).toEqual([]);
			for (const { id } of submitted) expect((await http("GET", `/intents/${id}`)).status).toBe(200);
			const verified = await allVerifiedOnce(http, submitted.map(r => r.id!));
			expect(verified.map(verifierOf)).not.toContain("impostor");
			expect(called).toEqual([]);
			// Moleculer's $node.options would hand out the owner's transporter URL, its bus password in it.
			await expect(rogue.call("$node.options", {}, { nodeID: owners.id })).rejects.toMatchObject({ name: "ServiceNotFoundError" });
			// Nor have the server copy those subjects to one it may read: JetStream, which this server runs
			// (k8s runs none), takes no order from it. Its answer would come to a subject the gateway reads.
			const answers: string[] = [];
			const answerSubject = `${prefix}.INFO.gateway.spy`;
			sniffer.subscribe(answerSubject, { callback: (_err, msg) => answers.push(new TextDecoder().decode(msg.data)) });
			sniffer.publish("$JS.API.STREAM.CREATE.SPY", JSON.stringify({ name: "SPY", subjects: [`${prefix}.REQ.owners.>`, `${prefix}.RES.>`] }), { reply: answerSubject });
			await sniffer.flush();
			await new Promise(resolve => setTimeout(resolve, 1000));
			expect(answers).toEqual([]);
			expect(refused.sort()).toEqual([">", `${prefix}.REQ.owners.>`, `${prefix}.REQ.verifier.>`, `${prefix}.RES.>`, `${prefix}.RES.intake.>`].sort());
			expect(read).toEqual([]);
		} finally {
			await rogue.stop();
			await sniffer.close();
		}
	});

	it("the gateway's bus credentials run no internal action that changes state: a forged verdict and a webhook lease are refused", async () => {
		const rogue = gatewayOnTheBus(cluster, "caller");
		await rogue.start();
		try {
			await rogue.waitForServices(["mempool", "epochs"], 10_000);
			const { epoch } = await rogue.call<{ epoch: number }, object>("epochs.current", {});
			// An intent no sender signed, handed to the mempool as the receiver hands a verified one.
			const forged = { ...signedIntent(newWallet(), route), senderAuthorizationSignature: Buffer.alloc(64, 7).toString("base64") };
			const verdict = { ok: true, verifiedBy: "verifier@forger" };
			await expect(rogue.call("mempool.receive", { request: forged, requestDigest: "0".repeat(64), epoch, verdict })).rejects.toMatchObject({ type: "FORBIDDEN", data: { reason: "unproven" } });
			const work = await http("GET", "/intent-work?limit=500", undefined, worker);
			expect(JSON.stringify(work.body)).not.toContain(forged.paymentId);
			// Nor can it hold the webhook deliveries' leases in a made-up worker's name.
			await expect(rogue.call("webhooks.claim", { leasedBy: "forger", nonce: "n".repeat(16), heads: {}, limit: 1 })).rejects.toMatchObject({ type: "FORBIDDEN", data: { reason: "unproven" } });
		} finally {
			await rogue.stop();
		}
	});

	it("a verifier's bus credentials act for no worker: the worker routes' actions refuse its calls, and the gateway's still run", async () => {
		const rogue = gatewayOnTheBus(cluster, "worker", "verifier");
		await rogue.start();
		try {
			await rogue.waitForServices(["mempool", "epochs", "webhooks", "tin", "receiver"], 10_000);
			const before = (await http("GET", "/epoch/status")).body as { epoch: number };
			const refused = { type: "FORBIDDEN", data: { reason: "unproven" } };
			await expect(rogue.call("epochs.close", {})).rejects.toMatchObject(refused);
			await expect(rogue.call("mempool.list", { limit: 500 })).rejects.toMatchObject(refused);
			await expect(rogue.call("mempool.workPage", { limit: 50 })).rejects.toMatchObject(refused);
			await expect(rogue.call("tin.verificationWork", { limit: 50 })).rejects.toMatchObject(refused);
			await expect(rogue.call("webhooks.remove", { id: "wh_00000000000000000000000000000000" })).rejects.toMatchObject(refused);
			await expect(rogue.call("receiver.wake", {})).rejects.toMatchObject(refused);
			// Nor through the gateway's own actions, which an intake node's proof would otherwise carry on.
			await expect(rogue.call("api.intentWork", { limit: 10 })).rejects.toMatchObject(refused);
			await expect(rogue.call("api.webhookList", { limit: 10 })).rejects.toMatchObject(refused);
			// moleculer-web's route actions are off: a route without the worker key could be added before the owners' actions.
			for (const action of ["api.addRoute", "api.removeRoute", "api.listAliases"]) await expect(rogue.call(action, { name: "worker" })).rejects.toMatchObject({ name: "ServiceNotFoundError" });
			expect((await http("GET", "/epoch/status")).body).toMatchObject({ epoch: before.epoch });
			// An intent's worker view, asked for with `worker` in the meta: the public view it is.
			const [{ id }] = await submitAll(http, [signedIntent(newWallet(), route)], 1);
			const publicView = (await http("GET", `/intents/${id}`)).body;
			expect((await http("GET", `/intents/${id}`, undefined, worker)).body).not.toEqual(publicView);
			expect(await rogue.call("mempool.view", { id }, { meta: { worker: true } })).toEqual(publicView);
			// Submissions handed to the intake over the bus are checked in full again: a field the gateway
			// refuses, beside a valid signature, is refused there too, and stores nothing.
			const [padded, plain] = [{ ...signedIntent(newWallet(), route), note: "x".repeat(2000) }, signedIntent(newWallet(), route)];
			const answers = await rogue.call<{ refused?: { type: string }; status?: number }[], object>("receiver.submitMany", { submissions: [{ request: padded, call: "c1" }, { request: plain, call: "c2" }] });
			expect(answers.map(answer => answer.refused?.type ?? answer.status)).toEqual(["VALIDATION_ERROR", 201]);
			expect((await http("GET", `/intents?limit=500`, undefined, worker)).body.map((intent: { paymentId: string }) => intent.paymentId)).not.toContain(padded.paymentId);
			// The same actions through the gateway, with the worker's key: its calls carry the proof.
			expect((await http("GET", "/intents?limit=5", undefined, worker)).status).toBe(200);
			expect((await http("GET", "/tin-operations/verification-work?limit=5", undefined, worker)).status).toBe(200);
			expect((await http("DELETE", "/webhooks/wh_00000000000000000000000000000000", undefined, worker)).status).toBe(404);
		} finally {
			await rogue.stop();
		}
	});

	/** One packet published with the gateway's bus credentials; `settleMs` later the owners still run and take an intent. */
	async function ownersServeAfter(subject: string, packet: string, settleMs: number) {
		const sniffer = await gatewaySniffer(cluster);
		try {
			sniffer.publish(subject, packet);
			await sniffer.flush();
			await new Promise(resolve => setTimeout(resolve, settleMs));
			expect(cluster.owners.child.exitCode).toBeNull();
			const [{ status }] = await submitAll(http, [signedIntent(newWallet(), route)], 1);
			expect(status).toBe(201);
		} finally {
			await sniffer.close();
		}
	}

	it("an announcement in an owner's own name, from the gateway's bus credentials, does not stop it", async () => {
		const ownersId = ownersNodeId(cluster);
		// Moleculer takes an announcement of its own id with another instance for a node id conflict, and
		// exits. Sent to the owner alone (the others drop it unsigned: the test after this one).
		const forged = { ver: "5", sender: ownersId, instanceID: "forged", services: [], seq: 1e12, ipList: [], hostname: "x", client: {}, config: {}, metadata: {} };
		await ownersServeAfter(`MOL-${cluster.namespace}.INFO.${ownersId}`, JSON.stringify(forged), 1000);
	});

	it("one call nesting 100,000 levels deep, from the gateway's bus credentials, stops no process (its answer's serializer overflowed the stack: a review's replay)", async () => {
		const deep = "[".repeat(100_000) + "]".repeat(100_000);
		const call = `{"ver":"5","sender":"gateway.deep-${process.pid}","id":"deep-1","action":"metrics.snapshot","params":{},"meta":{"x":${deep}},"timeout":5000,"level":1,"tracing":null,"parentID":null,"requestID":"deep-1","caller":null,"stream":false}`;
		await ownersServeAfter(`MOL-${cluster.namespace}.REQ.${ownersNodeId(cluster)}`, call, 1500);
	});

	it("one call whose meta makes its answer pass NATS's payload limit, from the gateway's bus credentials, stops no process (the answer's publish threw where nothing caught it: a review's replay)", async () => {
		// In the gateway's own name, which its credentials can take (docs/security.md): the owners believe it.
		const head = `{"ver":"5","sender":"gateway.${os.hostname()}-${cluster.gateway.child.pid}","id":"big-1","action":"metrics.snapshot","params":{},"timeout":5000,"level":1,"tracing":null,"parentID":null,"requestID":"big-1","caller":null,"stream":false,"meta":{"p":"`;
		const tail = '"}}';
		// Just under the server's limit (NATS_MAX_PAYLOAD here): the answer carries the meta back, and the snapshot on top.
		const call = head + "A".repeat(NATS_MAX_PAYLOAD - 256 - head.length - tail.length) + tail;
		await ownersServeAfter(`MOL-${cluster.namespace}.REQ.${ownersNodeId(cluster)}`, call, 1500);
	});

	it("a node's discovery request is answered once per window, however often the gateway's signing key sends it (each answer is a signed announcement of about 26 KB: a review's replay)", async () => {
		const sniffer = await gatewaySniffer(cluster);
		try {
			const gatewayId = `gateway.${os.hostname()}-${cluster.gateway.child.pid}`;
			const answers = sniffer.subscribe(`MOL-${cluster.namespace}.INFO.${gatewayId}`);
			let fromOwners = 0;
			void (async () => {
				for await (const message of answers) if (JSON.parse(new TextDecoder().decode(message.data)).sender === ownersNodeId(cluster)) fromOwners++;
			})();
			const signing = cluster.nats.busKeys.keys("gateway").signing;
			const startMs = Date.now();
			for (let i = 0; i < 30; i++) {
				const payload = {};
				const signature = busSignature(signing, { namespace: cluster.namespace, cmd: "DISCOVER", sender: gatewayId, target: null, payload }, startMs + i);
				sniffer.publish(`MOL-${cluster.namespace}.DISCOVER`, JSON.stringify({ ver: "5", sender: gatewayId, ...payload, busSignature: signature }));
			}
			await sniffer.flush();
			await new Promise(resolve => setTimeout(resolve, 1500));
			expect(fromOwners).toBeLessThanOrEqual(1);
			expect((await submitAll(http, [signedIntent(newWallet(), route)], 1))[0].status).toBe(201);
		} finally {
			await sniffer.close();
		}
	});

	it("the gateway's bus credentials and signing key speak for no other group's node: an owner announced emptied, or gone, stays", async () => {
		const sniffer = await gatewaySniffer(cluster);
		try {
			const ownersId = ownersNodeId(cluster);
			const gatewayKeys = cluster.nats.busKeys.keys("gateway");
			// What a compromised gateway can send to every node: its own group's signature, or none.
			const broadcast = async (cmd: string, payload: Record<string, unknown>) => {
				const signature = busSignature(gatewayKeys.signing, { namespace: cluster.namespace, cmd, sender: ownersId, target: null, payload });
				for (const packet of [payload, { ...payload, busSignature: signature }]) sniffer.publish(`MOL-${cluster.namespace}.${cmd}`, JSON.stringify({ ver: "5", sender: ownersId, ...packet }));
				await sniffer.flush();
			};
			// An announcement emptied of the owners' services, with a higher sequence: believed, it would hold
			// until the owners restart, heartbeats or not. Checked past a heartbeat.
			await broadcast("INFO", { instanceID: "forged", services: [], seq: 1e12, ipList: [], hostname: "x", client: {}, config: {}, metadata: {} });
			await new Promise(resolve => setTimeout(resolve, 2500));
			expect((await submitAll(http, [signedIntent(newWallet(), route)], 1))[0].status).toBe(201);
			// A goodbye in their name: believed, it would hold until their next heartbeat. Checked at once.
			await broadcast("DISCONNECT", {});
			await new Promise(resolve => setTimeout(resolve, 200));
			expect((await submitAll(http, [signedIntent(newWallet(), route)], 1))[0].status).toBe(201);
		} finally {
			await sniffer.close();
		}
	});

	it("one announcement from the gateway's bus credentials, naming an event Moleculer takes as a pattern, stops no process", async () => {
		const sniffer = await gatewaySniffer(cluster);
		try {
			// A service the gateway's group may run (api), that "handles" an event named `a*(`: every
			// process matches each event it emits against that name, as a regular expression that throws.
			const sender = `gateway.evil-${process.pid}`;
			const payload = {
				services: [{ name: "api", fullName: "api", settings: {}, metadata: {}, actions: {}, events: { x: { name: "a*(" } } }],
				instanceID: "evil",
				seq: 1,
				ipList: [],
				hostname: "x",
				client: { type: "nodejs", version: "0.15.2", langVersion: process.version },
				config: {},
				metadata: {}
			};
			const signature = busSignature(cluster.nats.busKeys.keys("gateway").signing, { namespace: cluster.namespace, cmd: "INFO", sender, target: null, payload });
			sniffer.publish(`MOL-${cluster.namespace}.INFO`, JSON.stringify({ ver: "5", sender, ...payload, busSignature: signature }));
			await sniffer.flush();
			await new Promise(resolve => setTimeout(resolve, 1000));
			// Each commit has the owners broadcast `events.appended`, and the others take it.
			const submitted = await submitAll(http, Array.from({ length: 4 }, () => signedIntent(newWallet(), route)), 2);
			expect(submitted.map(r => r.status)).toEqual([201, 201, 201, 201]);
			await allVerifiedOnce(http, submitted.map(r => r.id!));
			await new Promise(resolve => setTimeout(resolve, 1000));
			for (const node of [cluster.owners, cluster.gateway, ...cluster.verifiers]) expect(node.child.exitCode).toBeNull();
		} finally {
			await sniffer.close();
		}
	});

	it("a process that is still starting is live and not ready: its health routes listen before the broker starts", async () => {
		// A bus that does not answer keeps the broker starting; the probes must still find the process.
		const starting = cluster.node("starting", { SERVICES: "verifier", TRANSPORTER: `nats://127.0.0.1:${await freePort()}` });
		try {
			const port = Number((await waitFor(() => /Health routes on port (\d+)/.exec(starting.log), 10_000, "the health port"))[1]);
			expect((await fetch(`http://127.0.0.1:${port}/health/live`)).status).toBe(200);
			const ready = await fetch(`http://127.0.0.1:${port}/health/ready`);
			// The gateway's answer, SPEC §7's shape: the probes read any process alike.
			expect([ready.status, await ready.json()]).toEqual([503, expect.objectContaining({ type: "NOT_READY", code: 503 })]);
			const unknown = await fetch(`http://127.0.0.1:${port}/metrics`);
			expect([unknown.status, await unknown.json()]).toEqual([404, expect.objectContaining({ type: "NOT_FOUND", code: 404 })]);
			expect(starting.child.exitCode).toBeNull();
		} finally {
			await starting.signal("SIGKILL");
		}
	});

	it("event streams: any gateway replica serves them, and a client that resumes on another one with Last-Event-ID misses nothing", async () => {
		const second = await cluster.node("gateway-2", { SERVICES: "api,receiver,network", WORKER_API_KEYS: API_KEY }).ready();
		const headers = { "x-api-key": API_KEY };
		// Intents of the earlier tests may still be moving: only this test's count.
		const mine = new Set<string>();
		const ofMine = (events: SseEvent[]) => events.filter(e => mine.has(e.data.subject));
		const query = "/events?types=intent.status_changed&states=VERIFIED";
		const first = await openStream(`${cluster.gateway.url}${query}`, headers);
		expect(first.status).toBe(200);
		// Submitted through the other replica: the owners' notice reaches both gateways over NATS.
		const before = await submitAll(httpClient(second.url), intentsOf(1).slice(0, 10), 4);
		expect(before.every(r => r.status === 201)).toBe(true);
		for (const r of before) mine.add(r.id!);
		await waitFor(async () => ofMine(first.events).length >= 10 || null, 10_000, "the 10 events on the first replica");
		const seen = ofMine(first.events);
		expect(seen.map(e => e.data.subject).sort()).toEqual([...mine].sort());
		first.close();
		const after = await submitAll(http, intentsOf(1).slice(0, 5), 4);
		for (const r of after) mine.add(r.id!);
		// Resumed on the other replica after the 4th: the 6 it had not read and the 5 since, once each.
		const resumed = await openStream(`${second.url}${query}`, { ...headers, "last-event-id": seen[3].id! });
		await waitFor(async () => ofMine(resumed.events).length >= 11 || null, 10_000, "the 11 events on the second replica");
		await new Promise(resolve => setTimeout(resolve, 500));
		resumed.close();
		const rest = ofMine(resumed.events);
		expect(rest).toHaveLength(11);
		expect(rest.slice(0, 6).map(e => e.data.seq)).toEqual(seen.slice(4).map(e => e.data.seq));
		expect(rest.slice(6).map(e => e.data.subject).sort()).toEqual(after.map(r => r.id).sort());
		// An intent's own stream, on either replica: its current state first.
		for (const gateway of [cluster.gateway.url, second.url]) {
			const own = await openStream(`${gateway}/intents/${after[0].id}/events`);
			expect((await own.waitFor(1))[0]).toMatchObject({ event: "status", data: { id: after[0].id, receiverStatus: "VERIFIED" } });
			own.close();
		}
		await second.signal("SIGTERM");
	});

	it("a client that hangs up while its stream opens (the gateway awaiting the owners over NATS) leaves no stream slot taken", async () => {
		const gateway = await cluster.node("gateway-3", { SERVICES: "api,network", WORKER_API_KEYS: API_KEY, EVENT_STREAMS_MAX: "3", EVENT_STREAMS_PER_IP: "3" }).ready();
		const [{ id }] = await submitAll(http, intentsOf(1).slice(0, 1), 1);
		const { hostname, port } = new URL(gateway.url);
		for (let i = 0; i < 20; i++)
			await new Promise<void>(resolve => {
				const socket = net.connect(Number(port), hostname, () => {
					socket.write(`GET /intents/${id}/events HTTP/1.1\r\nHost: ${hostname}\r\n\r\n`);
					setImmediate(() => socket.destroy());
				});
				socket.on("close", () => resolve());
				socket.on("error", () => resolve());
			});
		await new Promise(resolve => setTimeout(resolve, 500));
		const streams = await Promise.all(Array.from({ length: 3 }, () => openStream(`${gateway.url}/intents/${id}/events`)));
		expect(streams.map(s => s.status)).toEqual([200, 200, 200]);
		for (const stream of streams) stream.close();
		await gateway.signal("SIGTERM");
	});

	it("GET /intent-work?limit=500 of the largest intents crosses the bus in pages", async () => {
		const long = (prefix: string) => `${prefix}${randomBytes(96).toString("base64url")}`.slice(0, 128);
		const big = senders.flatMap(sender => Array.from({ length: 21 }, () => signedIntent(sender, route, { paymentId: long("pay_"), senderAuthorizationNonce: long("nonce_"), amount: "18446744073709551615", feeLimit: "18446744073709551615" })));
		const results = await submitAll(http, big, 8);
		expect(results.filter(r => r.status !== 201)).toEqual([]);
		const work = await http("GET", "/intent-work?limit=500", undefined, worker);
		expect(work.status).toBe(200);
		expect(work.body).toHaveLength(500);
		// Well over the bus's message limit in one answer: only pages can have carried it.
		expect(JSON.stringify(work.body).length).toBeGreaterThan(1.5 * NATS_MAX_PAYLOAD);
		const ids = work.body.map((item: { intent: { id: string } }) => item.intent.id);
		expect(new Set(ids).size).toBe(500);
		const created = work.body.map((item: { intent: { createdAt: string } }) => item.intent.createdAt);
		expect([...created].sort()).toEqual(created);
		// A Cranker's next page: after= is resolved through the intents' owner, on the bus too.
		const after = await http("GET", `/intent-work?limit=100&after=${ids[199]}`, undefined, worker);
		expect(after.status).toBe(200);
		expect(after.body.map((item: { intent: { id: string } }) => item.intent.id)).toEqual(ids.slice(200, 300));
	});

	it("GET /intent-work of intents whose histories grew (leased and released with long reasons) still crosses the bus: pages end at a byte budget", async () => {
		const cranker = newWallet();
		const settle = crankerClient(cluster.gateway.url, cranker);
		expect((await settle("POST", "/crankers/heartbeat", signedHeartbeat(cranker))).status).toBe(200);
		const oldest: { intent: { id: string; stateVersion: number } }[] = (await http("GET", "/intent-work?limit=100", undefined, worker)).body;
		expect(oldest).toHaveLength(100);
		// Six rounds each, as Crankers that cannot pay (a chain outage, say) lease and give back: about 3.5 KB more per view.
		let next = 0;
		await Promise.all(
			Array.from({ length: 8 }, async () => {
				while (next < oldest.length) {
					const { id, stateVersion } = oldest[next++].intent;
					for (let round = 0, version = stateVersion; round < 6; round++, version += 2) {
						expect((await settle("PATCH", `/intents/${id}/status`, { status: "CRANKER_LEASED", crankerPubkey: cranker.address, expectedVersion: version })).status).toBe(200);
						const reason = `cannot pay now: ${"\"quoted\" ".repeat(60)}`.slice(0, 512);
						expect((await settle("PATCH", `/intents/${id}/status`, { status: "VERIFIED", crankerPubkey: cranker.address, expectedVersion: version + 1, reason })).status).toBe(200);
					}
				}
			})
		);
		const work = await http("GET", "/intent-work?limit=100", undefined, worker);
		expect(work.status).toBe(200);
		expect(work.body.map((item: { intent: { id: string } }) => item.intent.id)).toEqual(oldest.map(item => item.intent.id));
		// One page of 100 would have been over the bus's message limit (the gateway answered 500 before the byte budget).
		expect(JSON.stringify(work.body).length).toBeGreaterThan(NATS_MAX_PAYLOAD);
		expect(work.body.every((item: { intent: { history: unknown[] } }) => item.intent.history.length === 3 + 12)).toBe(true);
	});
});

const mongoUrl = process.env.MONGO_URL;
const describeWithMongo = natsServerAvailable && mongoUrl ? describe : describe.skip;
if (!mongoUrl) console.warn("Cluster tests on MongoDB NOT RUN: MONGO_URL is not set.");

describeWithMongo("cluster over NATS with MongoDB owners (two replicas)", () => {
	let cluster: Cluster;
	let http: Http;

	beforeAll(async () => {
		cluster = new Cluster({ verifiers: 2, seedFile: writeSeedFile(tempDir(), [route]), workerApiKey: API_KEY, mongoUrl: mongoUrlWithDatabase(mongoUrl!, `scs_cluster_${Date.now()}`) });
		await cluster.start();
		await cluster.node("owners-2", { SERVICES: "mempool,payouts,crankers,tin,epochs,access", REGISTRY_SEED_FILE: writeSeedFile(tempDir(), [route]) }).ready();
		http = httpClient(cluster.gateway.url);
	});
	afterAll(() => cluster?.stop());

	it("verifies through either owner replica, each intent exactly once", async () => {
		const senders = Array.from({ length: 10 }, () => newWallet());
		const results = await submitAll(http, senders.flatMap(sender => [signedIntent(sender, route), signedIntent(sender, route)]), 8);
		expect(results.filter(r => r.status !== 201)).toEqual([]);
		await allVerifiedOnce(http, results.map(r => r.id!));
	});

	it("both owner replicas report the same figures, whichever answers", async () => {
		// The gateway's calls alternate between the two mempools (round robin): every answer must agree.
		const answers = async (path: string, method = "GET") => {
			const bodies = [];
			for (let i = 0; i < 6; i++) bodies.push((await http(method, path, method === "POST" ? {} : undefined, worker)).body);
			return bodies;
		};
		const metrics = (await answers("/metrics")).map(m => ({ intents: m.intents, settled: m.settled, leases: m.leases, verified: m.verification.verified }));
		expect(new Set(metrics.map(m => JSON.stringify(m))).size).toBe(1);
		expect(new Set((await answers("/epoch/status")).map(s => JSON.stringify(s))).size).toBe(1);
		expect(new Set((await answers("/", "POST")).map(s => JSON.stringify(s.counts))).size).toBe(1);
		expect(metrics[0].intents.VERIFIED).toBeGreaterThanOrEqual(20);
	});

	it("both crankers replicas report the Crankers online, whichever took their heartbeats", async () => {
		const crankers = Array.from({ length: 4 }, () => newWallet());
		for (const cranker of crankers) expect((await crankerClient(cluster.gateway.url, cranker)("POST", "/crankers/heartbeat", signedHeartbeat(cranker))).status).toBe(200);
		// Each replica folds in the other's heartbeats on its next sweep (SWEEP_INTERVAL_MS 500).
		await new Promise(resolve => setTimeout(resolve, 1500));
		const overviews = [];
		for (let i = 0; i < 6; i++) overviews.push((await http("GET", "/network/overview")).body.crankers);
		expect(overviews.every(crankers => crankers.online === 4 && crankers.total === 4)).toBe(true);
	});
});
