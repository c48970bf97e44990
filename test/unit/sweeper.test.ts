/** The sweeper mixin with a real broker: a failing sweep is logged, counted and retried, never thrown. */
import { ServiceBroker } from "moleculer";
import { sweeperMixin } from "../../mixins/sweeper.mixin";
import { sweepFailureMetrics } from "../../services/metrics";

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
