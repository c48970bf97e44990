/**
 * A process's probes follow its bus connection: Moleculer's transit says connected through an
 * outage, so readiness did too (a review). A real nats-server, stopped, then started again with
 * rotated passwords, which the client is refused with until it gives up for good. And the bus's
 * permission refusals: of a process's own subjects (another NAMESPACE), and of an answer's subject
 * that a packet's sender chose.
 */
import { ServiceBroker } from "moleculer";
import { connect, type NatsConnection } from "nats";
import { NatsServer, natsServerAvailable } from "../../devkit/cluster";
import { freePort, waitFor } from "../../devkit/process";
import { natsTransporter } from "../../moleculer.config";
import { probeAnswer, watchBus } from "../../services/health";
import { sleep } from "../helpers/node";

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

	it("a NAMESPACE other than the one the bus's permissions name: its subscriptions refused at start, it is not live (only a restart subscribes again)", async () => {
		const { NATS_USER, NATS_PASSWORD } = nats.credentials("gateway");
		const stray = new ServiceBroker({ namespace: `${namespace}x`, nodeID: "gateway.stray", logger: false, transporter: natsTransporter(nats.url, NATS_USER, NATS_PASSWORD) });
		try {
			await stray.start();
			// As index.ts does: watched once started, after the refusals of its subscriptions came.
			watchBus(stray);
			await waitFor(() => probeAnswer("live", stray).status === 503, 5000, "not live while its subscriptions are refused", 50);
			expect(probeAnswer("live", stray)).toMatchObject({ body: { type: "NOT_READY", message: expect.stringContaining("refused") } });
			expect(probeAnswer("ready", stray).status).toBe(503);
		} finally {
			await stray.stop();
		}
	}, 60_000);

	it("a packet naming a sender whose subject the bus refuses this process (a review's replay) leaves it ready: another node cannot take it out of service", async () => {
		const { NATS_USER, NATS_PASSWORD } = nats.credentials("owners");
		const target = new ServiceBroker({ namespace, nodeID: "owners.target", logger: false, transporter: natsTransporter(nats.url, NATS_USER, NATS_PASSWORD) });
		const gateway = nats.credentials("gateway");
		const attacker = await connect({ servers: nats.url, user: gateway.NATS_USER, pass: gateway.NATS_PASSWORD });
		try {
			await target.start();
			watchBus(target);
			const refusals: string[] = [];
			void (async () => {
				for await (const status of (target.transit!.tx as unknown as { client: NatsConnection }).client.status()) if (status.data === "PERMISSIONS_VIOLATION") refusals.push(String(status.type));
			})();
			// A call from "gateway..x": the answer goes to MOL-<ns>.RES.gateway..x, which no permission matches.
			const call = { ver: "5", sender: "gateway..x", id: "r1", action: "no.such", params: {}, meta: {}, timeout: 1000, level: 1, tracing: null, parentID: null, requestID: "r1", caller: null, stream: false };
			attacker.publish(`MOL-${namespace}.REQ.owners.target`, JSON.stringify(call));
			await attacker.flush();
			await waitFor(() => refusals.length > 0, 5000, "the bus refused the answer's subject", 20);
			await sleep(200);
			expect([probeAnswer("live", target).status, probeAnswer("ready", target).status]).toEqual([200, 200]);
		} finally {
			await attacker.close();
			await target.stop();
		}
	}, 60_000);
});
