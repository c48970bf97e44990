/**
 * The sweeper mixin with a real broker: a failing sweep is logged, counted and retried, never
 * thrown; and every owner's sweeps run only while its store is open.
 */
import { ServiceBroker } from "moleculer";
import { waitFor } from "../../devkit/process";
import { loadConfig } from "../../lib/config";
import { isStoreMixin } from "../../mixins/store.mixin";
import { sweeperMixin } from "../../mixins/sweeper.mixin";
import { SERVICE_FACTORIES } from "../../services";
import { sweepFailureMetrics } from "../../services/metrics";
import { tempDir } from "../helpers/node";

test("a sweep that throws counts in scs_sweep_failures_total{sweep} and runs again at its next interval", async () => {
	const broker = new ServiceBroker({ logger: false });
	let runs = 0;
	broker.createService({
		name: "stand-in",
		mixins: [
			sweeperMixin("stand in", 20, async () => {
				runs++;
				throw new Error("the store is gone");
			})
		]
	});
	await broker.start();
	try {
		await new Promise(resolve => setTimeout(resolve, 150));
	} finally {
		await broker.stop();
	}
	const { values } = await sweepFailureMetrics(broker).get();
	expect(runs).toBeGreaterThanOrEqual(3);
	expect(values).toEqual([expect.objectContaining({ labels: { sweep: "stand-in" }, value: runs })]);
});

test("a sweep failing again and again is logged once, and once when it works again", async () => {
	const lines: string[] = [];
	const logged = jest.spyOn(console, "warn").mockImplementation((...args: unknown[]) => void lines.push(args.join(" ")));
	const informed = jest.spyOn(console, "log").mockImplementation((...args: unknown[]) => void lines.push(args.join(" ")));
	const broker = new ServiceBroker({ logger: { type: "Console", options: { level: "info", formatter: "simple" } } });
	let failing = true;
	let runs = 0;
	broker.createService({
		name: "stand-in",
		mixins: [
			sweeperMixin("stand in", 10, async () => {
				runs++;
				if (failing) throw new Error("the owner is down");
			})
		]
	});
	await broker.start();
	try {
		await waitFor(() => runs >= 10, 5000, "ten failed sweeps");
		failing = false;
		const failed = runs;
		await waitFor(() => runs >= failed + 2, 5000, "a sweep that works");
	} finally {
		await broker.stop();
		logged.mockRestore();
		informed.mockRestore();
	}
	const sweepLines = lines.filter(line => line.includes("stand in sweep"));
	expect(sweepLines).toHaveLength(2);
	expect(sweepLines[0]).toContain("stand in sweep failed: the owner is down");
	expect(sweepLines[1]).toMatch(/stand in sweep works again after \d+ failures over \d+ s/);
});

describe("an owner's sweeps and its store", () => {
	test("Moleculer starts a service's last mixin first and stops it last", async () => {
		const order: string[] = [];
		const hooks = (name: string) => ({ started: () => void order.push(`${name} started`), stopped: () => void order.push(`${name} stopped`) });
		const broker = new ServiceBroker({ logger: false });
		broker.createService({ name: "stand-in", mixins: [hooks("first"), hooks("last")] });
		await broker.start();
		await broker.stop();
		expect(order).toEqual(["last started", "first started", "first stopped", "last stopped"]);
	});

	test("so every owner lists its store last: open before any sweep starts, closed after the last one ended", () => {
		const config = loadConfig({ DATA_DIR: tempDir() });
		const owners = Object.entries(SERVICE_FACTORIES)
			.map(([name, factory]) => [name, factory(config).mixins ?? []] as const)
			.filter(([, mixins]) => mixins.some(isStoreMixin));
		expect(owners.map(([name]) => name).sort()).toEqual(["access", "crankers", "epochs", "mempool", "payouts", "tin", "webhooks"]);
		for (const [name, mixins] of owners) expect([name, mixins.findIndex(isStoreMixin)]).toEqual([name, mixins.length - 1]);
		// Nor is one inside another mixin, where this order would not show it.
		const inner = (mixin: unknown): unknown[] => (mixin as { mixins?: unknown[] }).mixins ?? [];
		const storeInside = (mixins: readonly unknown[]): boolean => mixins.some(mixin => inner(mixin).some(isStoreMixin) || storeInside(inner(mixin)));
		for (const factory of Object.values(SERVICE_FACTORIES)) expect(storeInside(factory(config).mixins ?? [])).toBe(false);
	});
});
