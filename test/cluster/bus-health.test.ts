/**
 * A process's probes follow its bus connection: Moleculer's transit says connected through an
 * outage, so readiness did too (a review). A real nats-server, stopped, then started again with
 * rotated passwords, which the client is refused with until it gives up for good.
 */
import { ServiceBroker } from "moleculer";
import { NatsServer, natsServerAvailable } from "../../devkit/cluster";
import { freePort, waitFor } from "../../devkit/process";
import { natsTransporter } from "../../moleculer.config";
import { probeAnswer, watchBus } from "../../services/health";

const describeWithNats = natsServerAvailable || process.env.CI ? describe : describe.skip;

describeWithNats("the probes and the bus", () => {
	const namespace = `bus${process.pid}`;
	let nats: NatsServer;
	let broker: ServiceBroker;

	beforeAll(async () => {
		nats = new NatsServer(await freePort(), { namespace });
		await nats.start();
		const { NATS_USER, NATS_PASSWORD } = nats.credentials("gateway");
		const transporter = natsTransporter(nats.url, NATS_USER, NATS_PASSWORD);
		transporter.opts.reconnectTimeWait = 200;
		broker = new ServiceBroker({ namespace, nodeID: "gateway.probes", logger: false, transporter });
		await broker.start();
		watchBus(broker);
	});

	afterAll(async () => {
		await broker?.stop().catch(() => {});
		await nats?.stop();
	});

	it("not ready while the bus is away, ready again once it is back; not live once the client gave up for good", async () => {
		const status = (probe: "live" | "ready") => probeAnswer(probe, broker).status;
		expect([status("live"), status("ready")]).toEqual([200, 200]);
		await nats.stop();
		await waitFor(() => status("ready") === 503, 5000, "not ready without the bus", 20);
		expect(probeAnswer("ready", broker)).toMatchObject({ body: { type: "NOT_READY", message: expect.stringContaining("bus connection is down") }, headers: { "retry-after": "1" } });
		expect(status("live")).toBe(200);
		await nats.start();
		await waitFor(() => status("ready") === 200, 10_000, "ready with the bus back", 50);
		// A rotated password: the client is refused, gives up, and only a restart can take the new one.
		await nats.stop();
		nats.rotatePasswords();
		await nats.start();
		await waitFor(() => status("live") === 503, 20_000, "not live once the client gave up", 100);
		expect(probeAnswer("live", broker)).toMatchObject({ body: { type: "NOT_READY", message: expect.stringContaining("closed for good") }, headers: { "retry-after": "1" } });
		expect(status("ready")).toBe(503);
	});

	it("not ready while the bus refuses its subjects: a NAMESPACE other than the one the bus's permissions name", async () => {
		const { NATS_USER, NATS_PASSWORD } = nats.credentials("gateway");
		const stray = new ServiceBroker({ namespace: `${namespace}x`, nodeID: "gateway.stray", logger: false, transporter: natsTransporter(nats.url, NATS_USER, NATS_PASSWORD) });
		try {
			await stray.start();
			watchBus(stray);
			await waitFor(() => probeAnswer("ready", stray).status === 503, 15_000, "not ready while every subject is refused", 50);
			expect(probeAnswer("ready", stray)).toMatchObject({ body: { type: "NOT_READY", message: expect.stringContaining("refuses") } });
			expect(probeAnswer("live", stray).status).toBe(200);
		} finally {
			await stray.stop();
		}
	}, 60_000);
});
