/**
 * The network service (it owns nothing) beside this process's metrics service and small stand-ins
 * for the owners whose figures it shapes: the mempool's totals and counts, the open epoch, the
 * Crankers' summary and the TIN owner's registry check.
 */
import { ServiceBroker, type ServiceSchema } from "moleculer";
import type { MempoolStatus, Metrics, NetworkOverview, SettlementNetwork } from "../../lib/answers";
import { loadConfig } from "../../lib/config";
import { ServiceError } from "../../lib/errors";
import { totalsFromTally } from "../../lib/intent-totals";
import { INTENT_STATES, type IntentState } from "../../lib/intents";
import { isMetricSnapshot, metricsService } from "../../services/metrics";
import { networkService } from "../../services/network.service";
import { waitFor } from "../../devkit/process";
import { MINT } from "../helpers/fixtures";

const OTHER_MINT = "So11111111111111111111111111111111111111112";
const counts = Object.fromEntries(INTENT_STATES.map((state, i) => [state, i + 1])) as Record<IntentState, number>;
const epoch = { epoch: 3, startedAt: "2026-11-26T00:00:00.000Z", intents: { pending: 4, executed: 1, canceled: 0 }, volume: {} };
const crankers = { online: 2, total: 5, byRole: { settlement: 2, verifier: 1, submitter: 0 }, mints: { [MINT]: { liquidity: "700", crankersOnline: 2 }, [OTHER_MINT]: { liquidity: "0", crankersOnline: 1 } } };
/** What the stand-in TIN owner's registry check does: pass, or throw this. */
let registryFailure: Error | null = null;

const standIns: ServiceSchema[] = [
	{
		name: "mempool",
		actions: {
			counts: () => counts,
			totals: () => totalsFromTally({ "live:VERIFIED": 4n, "live:CRANKER_LEASED": 2n, settled: 9n, lapsedLeases: 1n })
		}
	},
	{ name: "epochs", actions: { status: () => epoch } },
	{ name: "crankers", actions: { summary: () => crankers, onlineCount: () => crankers.online } },
	{
		name: "tin",
		actions: {
			check: () => {
				if (registryFailure) throw registryFailure;
				return { ok: true };
			}
		}
	}
];

let broker: ServiceBroker;
beforeAll(async () => {
	broker = new ServiceBroker({ logger: false });
	for (const standIn of standIns) broker.createService(standIn);
	broker.createService(metricsService());
	broker.createService(networkService(loadConfig({ SOLANA_CLUSTER: "solana-localnet" })));
	await broker.start();
});
afterAll(() => broker.stop());
afterEach(() => void (registryFailure = null));

test("POST /: the sections asked for, and only those", async () => {
	expect(await broker.call<MempoolStatus>("network.status")).toEqual({ ok: true, healthy: true, counts, epoch, crankersOnline: 2 });
	const onlyCounts = await broker.call<MempoolStatus, object>("network.status", { include: ["counts"] });
	expect(onlyCounts).toMatchObject({ ok: true, counts });
	expect(onlyCounts.epoch).toBeUndefined();
	expect(onlyCounts.crankersOnline).toBeUndefined();
});

test("the overview counts intents by public status, and the liquidity per mint", async () => {
	const overview = await broker.call<NetworkOverview>("network.overview");
	const sum = (states: IntentState[]) => states.reduce((total, state) => total + counts[state], 0);
	expect(overview).toEqual({
		crankers: { online: 2, total: 5, byRole: crankers.byRole },
		liquidity: { [MINT]: "700", [OTHER_MINT]: "0" },
		intents: { pending: sum(["RECEIVED", "NODE_VERIFYING", "VERIFIED", "CRANKER_LEASED", "SUBMITTED"]), executed: counts.CONFIRMED, canceled: counts.REJECTED },
		epoch
	});
});

test("settlement networks: a mint some online Cranker offers liquidity in, on SOLANA_CLUSTER; an unreadable registry is REGISTRY_INVALID", async () => {
	expect(await broker.call<SettlementNetwork[]>("network.settlementNetworks")).toEqual([{ network: "solana-localnet", tokenMintAddress: MINT, ready: true, liquidity: "700", crankersOnline: 2 }]);
	registryFailure = new Error("the TIN store is gone");
	await expect(broker.call("network.settlementNetworks")).rejects.toMatchObject({ type: "REGISTRY_INVALID", message: "The registry cannot be read" });
	registryFailure = new ServiceError("REGISTRY_INVALID", "route 1234567897 is invalid");
	await expect(broker.call("network.settlementNetworks")).rejects.toMatchObject({ type: "REGISTRY_INVALID", message: "route 1234567897 is invalid" });
});

test("metrics: the store's figures as JSON, and as Prometheus text with each process's families labelled by node", async () => {
	const asked = Date.now();
	const json = await broker.call<Metrics>("network.metrics");
	const answered = Date.now();
	expect(json).toMatchObject({ intents: { VERIFIED: 4, CRANKER_LEASED: 2 }, settled: { count: 9 }, leases: { active: 2, expired: 1 }, verification: { unrecorded: 0 } });
	// Since this broker started, a moment ago.
	const since = Date.parse(json.startedAt);
	expect(asked - since).toBeLessThan(60_000);
	expect(json.uptimeSeconds).toBeGreaterThanOrEqual(Math.floor((asked - since) / 1000));
	expect(json.uptimeSeconds).toBeLessThanOrEqual(Math.floor((answered - since) / 1000));
	const text = await broker.call<string, object>("network.metrics", {}, { meta: { metricsForm: "prometheus" } });
	expect(text).toContain('scs_intents{state="VERIFIED"} 4');
	expect(text).toContain("scs_settled_intents_total 9");
	expect(text).toContain('scs_crankers_online{role="settlement"} 2');
	expect(text).toMatch(new RegExp(`process_start_time_seconds\\{node="${broker.nodeID}"\\}`));
});

test("metrics: requests that come while a collection is in flight share it: each process is asked once, not once per request (a review)", async () => {
	let asked = 0;
	const counting = jest.spyOn(broker, "call");
	try {
		const answers = await Promise.all(Array.from({ length: 20 }, () => broker.call<string, object>("network.metrics", {}, { meta: { metricsForm: "prometheus" } })));
		asked = counting.mock.calls.filter(([action]) => action === "metrics.snapshot").length;
		expect(new Set(answers).size).toBe(1);
	} finally {
		counting.mockRestore();
	}
	expect(asked).toBe(1);
});

test("metrics: each process asked is told in scs_metrics_node_up, 0 for one that answered no snapshot or too late (an operator's review)", async () => {
	const namespace = `node-up-${process.pid}-${Date.now()}`;
	const gateway = new ServiceBroker({ nodeID: "gateway", namespace, transporter: "Fake", logger: false });
	for (const standIn of standIns) gateway.createService(standIn);
	gateway.createService(metricsService());
	gateway.createService(networkService(loadConfig({ SOLANA_CLUSTER: "solana-localnet" })));
	const odd = new ServiceBroker({ nodeID: "odd", namespace, transporter: "Fake", logger: false });
	odd.createService({ name: "metrics", actions: { snapshot: () => [{ name: "not a family" }] } });
	const slow = new ServiceBroker({ nodeID: "slow", namespace, transporter: "Fake", logger: false });
	slow.createService({ name: "metrics", actions: { snapshot: () => new Promise(resolve => setTimeout(() => resolve([]), 2500)) } });
	try {
		await Promise.all([gateway.start(), odd.start(), slow.start()]);
		const metricsNodes = () => new Set(gateway.registry.getServiceList({ onlyAvailable: true }).filter(service => service.name === "metrics").map(service => service.nodeID)).size;
		await waitFor(() => metricsNodes() === 3, 5000, "the three processes' metrics services");
		const text = await gateway.call<string, object>("network.metrics", {}, { meta: { metricsForm: "prometheus" } });
		expect(text).toContain('scs_metrics_node_up{node="gateway"} 1');
		expect(text).toContain('scs_metrics_node_up{node="odd"} 0');
		expect(text).toContain('scs_metrics_node_up{node="slow"} 0');
	} finally {
		await Promise.all([gateway.stop(), odd.stop(), slow.stop()]);
	}
});

describe("isMetricSnapshot", () => {
	const family = { name: "scs_verifications_total", help: "Verdicts.", type: "counter", aggregator: "sum", values: [{ value: 3, labels: { outcome: "verified" } }] };

	test("takes what snapshot() sends, NaN and infinities as their text", async () => {
		const sent = await broker.call("metrics.snapshot", {});
		expect(isMetricSnapshot(sent)).toBe(true);
		expect(isMetricSnapshot([{ ...family, values: [{ value: "NaN", labels: {} }, { value: "-Infinity", labels: { le: "+Inf" }, metricName: "scs_x_bucket" }] }])).toBe(true);
	});

	test.each([
		["no array", null],
		["a family that is null", [null]],
		["a name Prometheus refuses", [{ ...family, name: "scs evil" }]],
		["a type Prometheus does not know", [{ ...family, type: "x" }]],
		["a label name Prometheus refuses", [{ ...family, values: [{ value: 1, labels: { "bad-label": "x" } }] }]],
		["a value that is no number", [{ ...family, values: [{ value: { n: 1 }, labels: {} }] }]],
		["a metric name Prometheus refuses", [{ ...family, values: [{ value: 1, labels: {}, metricName: "a b" }] }]],
		["more series than any process of ours has", [{ ...family, values: Array.from({ length: 20_001 }, (_, i) => ({ value: i, labels: { i: String(i) } })) }]]
	])("refuses %s", (_, answer) => expect(isMetricSnapshot(answer)).toBe(false));
});
