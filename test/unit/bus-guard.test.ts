/**
 * The bus guard's reading of announcements (INFO), the packets as the transit hands them over: a
 * node is believed only for services its group may run, and only for actions named after them.
 */
import { randomBytes } from "node:crypto";
import { Serializers, Utils } from "moleculer";
import { busCallKey, busCallProof, busGroupOf, isBusCallProof, workerCallKey } from "../../lib/bus-groups";
import { BUS_SIGNATURE_TTL_MS, SIGNATURE_CHECKS_PER_SECOND, SignedPackets, SigningClock, busSignature, newBusKeyring } from "../../lib/bus-signatures";
import { actForWorker, busGuard } from "../../services/bus-guard";
import { startNode, type TestNode } from "../helpers/node";

const ring = newBusKeyring();

/** The namespace of the nodes of these tests. */
const NAMESPACE = "t";

/** A packet's payload as `sender` sends it, signed with its group's key (`at`: when; `target`: its addressee), or with `group`'s. */
function signed<P extends { sender: string }>(cmd: string, payload: P, { at, group, target = null }: { at?: number; group?: Parameters<typeof ring.keys>[0]; target?: string | null } = {}): P {
	const signer = group ?? busGroupOf(payload.sender);
	return signer ? { ...payload, busSignature: busSignature(ring.keys(signer).signing, { namespace: NAMESPACE, cmd, sender: payload.sender, target, payload }, at) } : payload;
}

type Service = { name: string; fullName?: string; version?: number; actions?: Record<string, { name: string; [option: string]: unknown }>; events?: unknown };
const service = (name: string, actions: string[], extra: Partial<Service> = {}): Service => ({ name, fullName: name, actions: Object.fromEntries(actions.map(action => [action, { name: action }])), ...extra });

/** The services a node announcing `services` as `sender` is believed for. */
function believed(sender: string, services: Service[], options = { admitUngrouped: false }): string[] {
	return passedOn(sender, services, options).map(s => s.name);
}

/** The services of that announcement as the guard passes them on to Moleculer. */
function passedOn(sender: string, services: Service[], options = { admitUngrouped: false }): Service[] {
	const guard = busGuard({ busKeys: ring.keys("intake"), callKeys: null, workerApiKeys: [], ...options }) as unknown as { created(broker: object): void; transitMessageHandler(next: (cmd: string, packet: object) => unknown): (cmd: string, packet: object) => unknown };
	guard.created({ namespace: NAMESPACE, nodeID: "intake.receiver", logger: { warn: () => undefined } });
	let passed: Service[] = [];
	guard.transitMessageHandler((_cmd, packet) => (passed = (packet as { payload: { services: Service[] } }).payload.services))("INFO", { type: "INFO", payload: signed("INFO", { sender, services }) });
	return passed;
}

describe("the bus guard believes an announcement", () => {
	test("for the services the sender's group may run", () => {
		expect(believed("owners.pod-1", [service("mempool", ["mempool.get"]), service("metrics", ["metrics.snapshot"])])).toEqual(["mempool", "metrics"]);
		expect(believed("gateway.pod-1", [service("mempool", ["mempool.get"]), service("verifier", ["verifier.verifyMany"]), service("api", ["api.rest"])])).toEqual(["api"]);
		expect(believed("pod-1", [service("metrics", ["metrics.snapshot"])])).toEqual([]);
		// A previous version's node (no group in its id), believed during the roll from the one-user bus only.
		expect(believed("pod-1", [service("mempool", ["mempool.get"])], { admitUngrouped: true })).toEqual(["mempool"]);
	});

	test("not for actions named after another service (Moleculer files an action under its announced name)", () => {
		// A node that may run api announcing the verifier's and the mempool's actions under it: the review's replay.
		expect(believed("gateway.pod-1", [service("api", ["verifier.verifyMany", "mempool.get"])])).toEqual([]);
		expect(believed("gateway.pod-1", [service("metrics", ["metrics.snapshot", "mempool.get"])])).toEqual([]);
		// An action whose key and name differ, a versioned or renamed service.
		expect(believed("gateway.pod-1", [{ name: "api", fullName: "api", actions: { "api.rest": { name: "mempool.get" } } }])).toEqual([]);
		expect(believed("owners.pod-1", [service("mempool", ["mempool.get"], { version: 2, fullName: "v2.mempool" })])).toEqual([]);
		expect(believed("owners.pod-1", [service("mempool", ["mempool.get"], { fullName: "verifier" })])).toEqual([]);
	});

	test("with only the events its service handles: a peer's event name is a pattern in every emit of every process (the review's replay)", () => {
		// What Moleculer does with an announced name at each emit: this one throws, in whatever emits it.
		expect(() => Utils.match("events.appended", "a*(")).toThrow(SyntaxError);
		const hostile = {
			x: { name: "a*(" },
			"(.|.|.|.)*!?": { name: "(.|.|.|.)*!?" },
			y: { name: 7 },
			// Its own event, under another key, or in another group's balancing (the delivery workers').
			"events.appended": { name: "events.appended", group: "webhook-delivery" },
			"registry.routeChanged": { name: "registry.routeChanged" },
			"$services.changed": { name: "$services.changed", params: { a: "string" } }
		};
		expect(passedOn("gateway.evil-1", [service("api", [], { events: hostile }), service("metrics", [], { events: { "events.appended": { name: "events.appended" } } })])).toEqual([
			service("api", [], { events: { "$services.changed": { name: "$services.changed" } } }),
			service("metrics", [], { events: {} })
		]);
		for (const events of [null, "a*(", ["a*("], 7]) expect(passedOn("verifier.evil-1", [service("verifier", [], { events })])).toEqual([service("verifier", [], { events: {} })]);
		// A node of no group (BUS_ADMIT_UNGROUPED) is believed for any service, not for any event.
		expect(passedOn("pod-1", [service("mempool", [], { events: hostile })], { admitUngrouped: true })).toEqual([service("mempool", [], { events: {} })]);
	});

	test("with its actions rebuilt from their names: how to call one is the service's own, never a peer's (the review's replay)", () => {
		// A Shard strategy whose cache of 50 million entries Moleculer allocates at once, a timeout of 1 ms,
		// retries without end, a strategy that breaks every call, and fresh names at every announcement.
		const hostile = { strategy: "Shard", strategyOptions: { cacheSize: 5e7, vnodes: 1e8 }, timeout: 1, retryPolicy: { enabled: true, retries: 1e9 }, bulkhead: { enabled: true, concurrency: 0 } };
		expect(passedOn("gateway.evil-1", [service("api", [], { actions: { "api.intentWork": { name: "api.intentWork", visibility: "public", ...hostile }, "api.z1": { name: "api.z1", ...hostile } } })])).toEqual([
			service("api", [], { actions: { "api.intentWork": { name: "api.intentWork", visibility: "public" } }, events: {} })
		]);
		expect(passedOn("verifier.evil-1", [service("verifier", [], { actions: { "verifier.verifyMany": { name: "verifier.verifyMany", strategy: "register", strategyOptions: { shardKey: "x" } } } })])[0].actions).toEqual({
			"verifier.verifyMany": { name: "verifier.verifyMany", strategy: "Shard", strategyOptions: { shardKey: "requests.0.senderWallet" } }
		});
		// A parameter schema larger or deeper than any of ours (GET /openapi.json reads it) is left out; the action stays.
		const deep = Array.from({ length: 20 }).reduce<object>(inner => ({ type: "object", props: { a: inner } }), { type: "string" });
		for (const params of [deep, Object.fromEntries(Array.from({ length: 2000 }, (_, i) => [`p${i}`, "string"]))])
			expect(passedOn("gateway.evil-1", [service("api", [], { actions: { "api.openapi": { name: "api.openapi", params } } })])[0].actions).toEqual({ "api.openapi": { name: "api.openapi" } });
		// An action the previous version's owners serve, which this version's gateway still calls.
		expect(Object.keys(passedOn("owners.old-1", [service("webhooks", ["webhooks.list"])])[0].actions as object)).toEqual(["webhooks.list"]);
		// A visibility Moleculer does not know is no action of ours.
		expect(passedOn("gateway.evil-1", [service("api", [], { actions: { "api.openapi": { name: "api.openapi", visibility: { a: 1 } } } })])[0].actions).toEqual({});
	});

	describe("for every action and event the services announce", () => {
		let node: TestNode;
		beforeAll(async () => (node = await startNode()));
		afterAll(() => node.stop());

		test("each one kept, under its name, called as the service declares it", () => {
			type Announced = Service & { actions: Record<string, { name: string; visibility?: string; params?: object; strategy?: string; strategyOptions?: { shardKey?: string }; timeout?: number; responseType?: string; answersJsonTexts?: true }>; events: Record<string, unknown> };
			const announced = (node.broker.registry.getLocalNodeInfo(true) as unknown as { services: Announced[] }).services.filter(s => !s.name.startsWith("$"));
			expect(announced.length).toBeGreaterThan(10);
			const sender = (name: string) => `${["owners", "intake", "verifier"].find(group => passedOn(`${group}.pod-1`, [service(name, [])]).length)}.pod-1`;
			for (const { name, actions, events } of announced) {
				const [believedService] = passedOn(sender(name), [{ name, fullName: name, actions, events }]) as Announced[];
				expect(Object.keys(believedService.events)).toEqual(Object.keys(events));
				expect(Object.keys(believedService.actions)).toEqual(Object.keys(actions));
				for (const [action, { visibility, params, strategy, strategyOptions, timeout, responseType, answersJsonTexts }] of Object.entries(actions))
					expect(believedService.actions[action]).toEqual({
						name: action,
						...(visibility ? { visibility } : {}),
						...(params ? { params } : {}),
						...(strategy ? { strategy, strategyOptions: { shardKey: strategyOptions!.shardKey } } : {}),
						...(timeout ? { timeout } : {}),
						...(answersJsonTexts ? { responseType, answersJsonTexts } : {})
					});
			}
		});
	});
});

describe("the bus guard, on a call to an action that changes state", () => {
	const key = busCallKey(randomBytes(32));
	type Call = { sender: string; action: string; id: string; params?: unknown; meta?: unknown; stream?: boolean; seq?: number };
	/** An owner's guard, every action of which has `flags` (keyHoldersOnly unless said): whether each call passed on, or was refused. */
	function owner(options: { admitUngrouped?: boolean; workerApiKeys?: string[]; flags?: object; callKeys?: Buffer[] } = {}) {
		const refused: unknown[] = [];
		const guard = busGuard({ busKeys: ring.keys("owners"), callKeys: options.callKeys ?? [key], workerApiKeys: options.workerApiKeys ?? [], admitUngrouped: options.admitUngrouped ?? false }) as unknown as {
			created(broker: object): void;
			transitMessageHandler(next: (cmd: string, packet: { payload: Call }) => unknown): (cmd: string, packet: object) => unknown;
		};
		const action = options.flags ?? { keyHoldersOnly: true };
		guard.created({ namespace: NAMESPACE, nodeID: "owners.a", logger: { warn: () => undefined }, registry: { getActionEndpointByNodeId: () => ({ action }) }, transit: { sendResponse: (...args: unknown[]) => refused.push(args[5]) } });
		return (call: Call) => {
			let passed: Call | null = null;
			refused.length = 0;
			guard.transitMessageHandler((_cmd, received) => (passed = received.payload))("REQ", { type: "REQ", payload: call });
			return { passed: passed as Call | null, refused: refused.map(err => (err as { type: string }).type) };
		};
	}
	const params = { epoch: 1 };
	const proven = (call: Omit<Call, "meta">, target = "owners.a") => ({ ...call, meta: { busCallProof: busCallProof(key, { ...call, target, params: call.params }) } });

	test("runs it with a fresh proof of the call, once, and drops the proof from the meta", () => {
		const receive = owner();
		const call = { sender: "intake.x", action: "mempool.receive", id: "c1", params };
		const sent = proven(call);
		expect(receive({ ...sent, meta: { ...sent.meta, other: 1 } })).toEqual({ passed: expect.objectContaining({ meta: { other: 1 } }), refused: [] });
		// The same proof again, from anyone: refused.
		expect(receive(sent).refused).toEqual(["FORBIDDEN"]);
	});

	test("refuses it without a proof, with another call's, with other parameters, or with no meta at all", () => {
		const receive = owner();
		const call = { sender: "intake.x", action: "mempool.receive", id: "c1", params };
		for (const meta of [{}, proven({ ...call, id: "c2" }).meta, proven({ ...call, action: "mempool.receiveMany" }).meta, proven({ ...call, sender: "intake.y" }).meta, proven(call, "owners.b").meta, undefined, null, "x"])
			expect(receive({ ...call, meta })).toEqual({ passed: null, refused: ["FORBIDDEN"] });
		expect(receive({ ...proven(call), params: { epoch: 2 } }).refused).toEqual(["FORBIDDEN"]);
	});

	test("under rotation (WEBHOOK_SECRETS_KEY lists two keys) takes a proof under either, and no other", () => {
		const newer = busCallKey(randomBytes(32));
		const receive = owner({ callKeys: [newer, key] });
		const call = { sender: "intake.x", action: "mempool.receive", id: "r1", params };
		expect(receive(proven(call)).refused).toEqual([]);
		const underNewer = { ...call, id: "r2", meta: { busCallProof: busCallProof(newer, { ...call, id: "r2", target: "owners.a" }) } };
		expect(receive(underNewer).refused).toEqual([]);
		const underOther = { ...call, id: "r3", meta: { busCallProof: busCallProof(busCallKey(randomBytes(32)), { ...call, id: "r3", target: "owners.a" }) } };
		expect(receive(underOther).refused).toEqual(["FORBIDDEN"]);
	});

	test("refuses a stream (no action takes one; its chunks would wait in memory)", () => {
		const receive = owner();
		expect(receive({ ...proven({ sender: "intake.x", action: "mempool.receive", id: "s1", params }), stream: true, seq: 0 }).refused).toEqual(["FORBIDDEN"]);
		expect(receive({ sender: "gateway.x", action: "mempool.get", id: "s2", seq: 5 }).refused).toEqual(["FORBIDDEN"]);
		// Any truthy `stream` opens one in Moleculer, kept until its sender leaves: one that never came never does.
		// To an action any peer may call: the review's replay.
		const read = owner({ flags: {} });
		for (const stream of [1, "x", {}]) expect(read({ sender: "verifier.ghost-1", action: "mempool.get", id: `s-${String(stream)}`, stream } as never)).toEqual({ passed: null, refused: ["FORBIDDEN"] });
		expect(read({ sender: "verifier.ghost-1", action: "mempool.get", id: "s-0", stream: false }).passed).not.toBeNull();
		expect(receive({ ...proven({ sender: "intake.x", action: "mempool.receive", id: "s3", params }), stream: false }).refused).toEqual([]);
	});

	test("drops an answer that streams (a verifier's answer to the intake's call, its chunks held until it leaves: a review's replay)", () => {
		const guard = busGuard({ busKeys: ring.keys("intake"), callKeys: null, workerApiKeys: [], admitUngrouped: false }) as unknown as { created(broker: object): void; transitMessageHandler(next: (cmd: string, packet: object) => unknown): (cmd: string, packet: object) => unknown };
		guard.created({ namespace: NAMESPACE, nodeID: "intake.a", logger: { warn: () => undefined } });
		const passed: unknown[] = [];
		const receive = guard.transitMessageHandler((_cmd, packet) => passed.push(packet));
		for (const streamed of [{ stream: true, seq: 0 }, { stream: 1 }, { stream: false, seq: 2 }]) receive("RES", { type: "RES", payload: { sender: "verifier.x", id: "r1", success: true, data: "x", ...streamed } });
		expect(passed).toEqual([]);
		receive("RES", { type: "RES", payload: { sender: "verifier.x", id: "r2", success: true, data: [], stream: false } });
		expect(passed).toHaveLength(1);
	});

	test("gives no waiver to a sender of no group, BUS_ADMIT_UNGROUPED or not (a packet names whatever sender it likes)", () => {
		expect(owner()({ sender: "intake-pod-1", action: "mempool.receive", id: "c1", params, meta: {} })).toEqual({ passed: null, refused: [] });
		expect(owner({ admitUngrouped: true })({ sender: "intake-pod-1", action: "mempool.receive", id: "c1", params, meta: {} }).refused).toEqual(["FORBIDDEN"]);
	});

	describe("made for a worker", () => {
		const workerApiKey = randomBytes(24).toString("hex");
		const forWorker = (call: Omit<Call, "meta">, apiKey = workerApiKey, target = "owners.a") => ({ ...call, meta: { workerCallProof: busCallProof(workerCallKey(apiKey), { ...call, target, params: call.params }) } });
		const workerAction = () => owner({ workerApiKeys: [randomBytes(24).toString("hex"), workerApiKey], flags: { workersOnly: true } });
		const call = { sender: "gateway.x", action: "epochs.close", id: "w1", params: {} };

		test("a workersOnly action runs with a fresh proof under one of the worker keys, once, or with the key holders' proof", () => {
			const close = workerAction();
			const sent = forWorker(call);
			expect(close(sent)).toEqual({ passed: expect.objectContaining({ meta: {} }), refused: [] });
			expect(close(sent).refused).toEqual(["FORBIDDEN"]);
			expect(close(proven({ ...call, sender: "intake.x", id: "w2" })).refused).toEqual([]);
		});

		test("a workersOnly action refuses a call without a worker's proof (a verifier's), under another key, or of another call", () => {
			const close = workerAction();
			for (const meta of [{}, undefined, forWorker(call, randomBytes(24).toString("hex")).meta, forWorker({ ...call, id: "w3" }).meta, forWorker(call, workerApiKey, "owners.b").meta, forWorker({ ...call, action: "webhooks.remove" }).meta])
				expect(close({ ...call, meta })).toEqual({ passed: null, refused: ["FORBIDDEN"] });
			expect(close({ ...forWorker(call), params: { epoch: 9 } }).refused).toEqual(["FORBIDDEN"]);
		});

		test("a call's meta.worker (the worker's view) is believed with a worker's proof only", () => {
			const view = owner({ workerApiKeys: [workerApiKey], flags: {} });
			const read = { sender: "gateway.x", action: "mempool.view", id: "v1", params: { id: "i1" } };
			expect(view({ ...read, meta: { worker: true } }).passed).toMatchObject({ meta: {} });
			expect(view({ ...read, meta: { worker: true } }).passed!.meta).not.toHaveProperty("worker");
			expect(view({ ...read, meta: { worker: "yes" } }).passed!.meta).not.toHaveProperty("worker");
			// What every public call says when no key came with it: nothing to check.
			expect(view({ ...read, meta: { worker: false } }).passed).toMatchObject({ meta: { worker: false } });
			const proven = forWorker({ ...read, id: "v2" });
			expect(view({ ...proven, meta: { ...proven.meta, worker: true } }).passed).toMatchObject({ meta: { worker: true } });
			// Seen once: the same proof again is a public read.
			expect(view({ ...proven, meta: { ...proven.meta, worker: true } }).passed!.meta).not.toHaveProperty("worker");
		});

		test("a worker's proof opens no keyHoldersOnly action", () => {
			const receive = owner({ workerApiKeys: [workerApiKey] });
			expect(receive(forWorker({ sender: "gateway.x", action: "mempool.receive", id: "w4", params })).refused).toEqual(["FORBIDDEN"]);
		});
	});

	test("drops, unanswered, a call from a sender not of the deployment's form (NATS's protocol would split it) or in its own name", () => {
		const receive = owner();
		for (const sender of ["gateway.x 0\r\n\r\nUNSUB 1\r\nPUB MOL.INFO.gateway.y", "gateway.*", "", "owners.a"])
			expect({ sender, ...receive({ ...proven({ sender, action: "mempool.receive", id: "c9", params }) }) }).toEqual({ sender, passed: null, refused: [] });
	});

	test("drops an announcement in its own node's name, which Moleculer would take for an id conflict and stop the process", () => {
		const guard = busGuard({ busKeys: ring.keys("owners"), callKeys: null, workerApiKeys: [], admitUngrouped: false }) as unknown as { created(broker: object): void; transitMessageHandler(next: (cmd: string, packet: object) => unknown): (cmd: string, packet: object) => unknown };
		const warnings: string[] = [];
		guard.created({ namespace: NAMESPACE, nodeID: "owners.a", logger: { warn: (line: string) => warnings.push(line) } });
		const passed: string[] = [];
		const handle = guard.transitMessageHandler(cmd => passed.push(cmd));
		for (const cmd of ["INFO", "DISCONNECT", "HEARTBEAT", "REQ", "EVENT", "RES"]) handle(cmd, { type: cmd, payload: { sender: "owners.a", instanceID: "other", services: [] } });
		handle("INFO", { type: "INFO", payload: signed("INFO", { sender: "owners.b", services: [] }) });
		// An announcement whose services are not a list is no announcement.
		handle("INFO", { type: "INFO", payload: signed("INFO", { sender: "owners.c", services: "x" }) });
		expect(passed).toEqual(["INFO"]);
		// Silently: a node's own broadcasts come back to it.
		expect(warnings).toEqual([]);
		// A sender of no deployment's form is worth a warning, once a minute.
		handle("HEARTBEAT", { type: "HEARTBEAT", payload: { sender: "x y" } });
		handle("HEARTBEAT", { type: "HEARTBEAT", payload: { sender: "x z" } });
		expect(warnings).toHaveLength(1);
	});
});

describe("the bus guard, on a call it sends", () => {
	const key = busCallKey(randomBytes(32));
	type Sent = { type: string; target: string | null; payload: { action: string; id: string; params: unknown; meta: Record<string, unknown> } };
	function send(target: string | null, callKey: Buffer | null = key, workerApiKey?: string) {
		const guard = busGuard({ busKeys: ring.keys("intake"), callKeys: callKey && [callKey], workerApiKeys: [], admitUngrouped: false }) as unknown as { created(broker: object): void; transitPublish(next: (packet: Sent) => unknown): (packet: Sent) => unknown };
		guard.created({ namespace: NAMESPACE, nodeID: "intake.me" });
		let published: Sent | null = null;
		const meta = { other: 1 };
		if (workerApiKey) actForWorker(meta, workerApiKey);
		guard.transitPublish(packet => (published = packet))({ type: "REQ", target, payload: { action: "mempool.receive", id: "c1", params: { epoch: 1 }, meta } });
		return { published: published as Sent | null, meta };
	}

	test("proves every call to a node of the intake or the owners, bound to its addressee, without touching the context's meta", () => {
		const { published, meta } = send("owners.b");
		const proof = published!.payload.meta.busCallProof;
		expect(isBusCallProof(key, { action: "mempool.receive", id: "c1", sender: "intake.me", target: "owners.b", params: { epoch: 1 } }, proof)).toBe(true);
		expect(meta).toEqual({ other: 1 });
		expect(send("verifier.b").published!.payload.meta).toEqual({ other: 1 });
		expect(send("owners.b", null).published!.payload.meta).toEqual({ other: 1 });
	});

	test("proves a call made for a worker with the worker's key, to the intake and the owners only; the key never leaves the process", () => {
		const workerApiKey = randomBytes(24).toString("hex");
		const { published } = send("owners.b", null, workerApiKey);
		const call = { action: "mempool.receive", id: "c1", sender: "intake.me", target: "owners.b", params: { epoch: 1 } };
		expect(isBusCallProof(workerCallKey(workerApiKey), call, published!.payload.meta.workerCallProof)).toBe(true);
		expect(published!.payload.meta.busCallProof).toBeUndefined();
		expect(JSON.stringify(published)).not.toContain(workerApiKey);
		expect(Object.keys(JSON.parse(JSON.stringify(published!.payload.meta)))).toEqual(["other", "workerCallProof"]);
		expect(JSON.parse(JSON.stringify(send("verifier.b", null, workerApiKey).published!.payload.meta))).toEqual({ other: 1 });
	});

	test("publishes nothing to an addressee of another form (a subject NATS's protocol would split)", () => {
		expect(send("owners.b\r\nUNSUB 1").published).toBeNull();
	});
});

describe("the bus guard, on the packets that say who a node is and whether it lives", () => {
	type Payload = { sender: string; services?: unknown[]; seq?: number; cpu?: number; busSignature?: unknown; id?: string; success?: boolean; data?: unknown; meta?: unknown };
	function node(nodeID = "intake.me", { admitUngrouped = false, admitUnsigned = false } = {}, discoverer = { opts: { disableHeartbeatChecks: false } }) {
		const guard = busGuard({ busKeys: ring.keys(busGroupOf(nodeID)!), callKeys: null, workerApiKeys: [], admitUngrouped, admitUnsigned }) as unknown as {
			created(broker: object): void;
			transitMessageHandler(next: (cmd: string, packet: { payload: Payload }) => unknown): (cmd: string, packet: object) => unknown;
			transitPublish(next: (packet: { type: string; payload: Payload }) => unknown): (packet: object) => unknown;
			transporterReceive(next: (cmd: string, data: Buffer) => unknown): (cmd: string, data: Buffer) => unknown;
		};
		const warnings: string[] = [];
		/** The calls this node awaits an answer to, by id, with the node each went to (Moleculer's transit keeps them). */
		const pendingRequests = new Map<string, { nodeID: string | null }>();
		guard.created({ namespace: NAMESPACE, nodeID, logger: { warn: (line: string) => warnings.push(line) }, registry: { discoverer }, options: { heartbeatTimeout: 6 }, transit: { pendingRequests } });
		return {
			warnings,
			pendingRequests,
			/** The payload Moleculer is handed, or null: dropped. */
			receive(cmd: string, payload: Payload): Payload | null {
				let passed: Payload | null = null;
				guard.transitMessageHandler((_cmd, packet) => (passed = packet.payload))(cmd, { type: cmd, payload });
				return passed;
			},
			send(type: string, payload: Omit<Payload, "sender">, target: string | null = null) {
				let sent: { type: string; payload: Payload } | null = null;
				guard.transitPublish(packet => (sent = packet))({ type, target, payload });
				return sent as { type: string; payload: Payload } | null;
			},
			/** Whether raw bytes of `cmd` (so many zeros, or this text) reach the parser. */
			reads(cmd: string, bytes: number | string): boolean {
				let read = false;
				guard.transporterReceive(() => (read = true))(cmd, typeof bytes === "number" ? Buffer.alloc(bytes) : Buffer.from(bytes));
				return read;
			}
		};
	}
	const emptied = { sender: "owners.pod-1", services: [], seq: 1e12 };

	test("believes one signed by the group its sender names, fresh, and hands it on without the signature", () => {
		for (const cmd of ["INFO", "HEARTBEAT", "DISCONNECT", "DISCOVER", "PING", "PONG"]) {
			const passed = node().receive(cmd, signed(cmd, emptied));
			expect({ cmd, passed }).toEqual({ cmd, passed: emptied });
		}
	});

	test("drops one in another group's node's name, unsigned, signed by another group, stale, of another type or altered (the emptied announcement)", () => {
		const receiver = node();
		const now = Date.now();
		for (const payload of [emptied, signed("INFO", emptied, { group: "gateway" }), signed("INFO", emptied, { at: now - 61_000 }), signed("INFO", emptied, { at: now + 61_000 }), signed("HEARTBEAT", emptied), { ...signed("INFO", { ...emptied, seq: 1 }), seq: 1e12 }, { ...signed("INFO", emptied), sender: "owners.pod-2" }, { ...emptied, busSignature: "x.y" }])
			expect(receiver.receive("INFO", payload)).toBeNull();
		// Once a minute for each kind: a flood is one line, which names no more than the claimed sender.
		expect(receiver.warnings).toEqual([
			expect.stringMatching(/INFO packet in the name of owners.pod-1 carries no signature/),
			expect.stringMatching(/owners.pod-1 does not carry a signature of its sender's group/),
			expect.stringMatching(/owners.pod-1 is signed more than a minute from this node's clock/)
		]);
	});

	test("drops a replay: a packet taken already, one signed before the last taken from its sender, one signed for another node", () => {
		const receiver = node("intake.me");
		const now = Date.now();
		const [earlier, later] = [signed("HEARTBEAT", { sender: "owners.pod-1", cpu: 1 }, { at: now - 2000 }), signed("HEARTBEAT", { sender: "owners.pod-1", cpu: 2 }, { at: now - 1000 })];
		expect(receiver.receive("HEARTBEAT", later)).toMatchObject({ cpu: 2 });
		expect(receiver.receive("HEARTBEAT", later)).toBeNull();
		// A goodbye captured before a restart under the same node id is older than what the new process signed since.
		expect(receiver.receive("HEARTBEAT", earlier)).toBeNull();
		// Two packets signed in the same millisecond are both taken, each once.
		const [info, beat] = [signed("INFO", { sender: "owners.pod-1", services: [] }, { at: now }), signed("HEARTBEAT", { sender: "owners.pod-1", cpu: 3 }, { at: now })];
		expect([receiver.receive("INFO", info), receiver.receive("HEARTBEAT", beat), receiver.receive("INFO", info)].map(passed => passed !== null)).toEqual([true, true, false]);
		// An announcement a node sent to another (an answer to its discovery), broadcast again by that one.
		expect(receiver.receive("INFO", signed("INFO", { sender: "owners.pod-2", services: [] }, { target: "gateway.spy" }))).toBeNull();
		expect(receiver.receive("INFO", signed("INFO", { sender: "owners.pod-2", services: [] }, { target: "intake.me" }))).toMatchObject({ services: [] });
		// Another deployment's packet (another NAMESPACE) carries a signature of other bytes.
		const other = busSignature(ring.keys("owners").signing, { namespace: "other", cmd: "HEARTBEAT", sender: "owners.pod-3", target: null, payload: { sender: "owners.pod-3", cpu: 1 } });
		expect(receiver.receive("HEARTBEAT", { sender: "owners.pod-3", cpu: 1, busSignature: other })).toBeNull();
	});

	test("checks at most SIGNATURE_CHECKS_PER_SECOND signatures a second: a flood of made-up ones costs no more", () => {
		const now = Date.now();
		const packets = new SignedPackets(NAMESPACE, "intake.me", () => ring.keys("owners").groups.owners);
		const junk = (i: number) => `${now}::${Buffer.alloc(64, i % 251).toString("base64url")}`;
		const refusals = Array.from({ length: SIGNATURE_CHECKS_PER_SECOND + 5 }, (_, i) => packets.check("HEARTBEAT", `owners.pod-${i}`, { cpu: 1 }, junk(i), now));
		expect(refusals.filter(refusal => refusal === "forged")).toHaveLength(SIGNATURE_CHECKS_PER_SECOND);
		expect(refusals.slice(-5)).toEqual(Array(5).fill("busy"));
		expect(packets.check("HEARTBEAT", "owners.pod-x", { cpu: 1 }, junk(1), now + 1000)).toBe("forged");
	});

	test("takes one spelling of a signature only: a seen one spelled otherwise is no new packet", () => {
		const receiver = node("intake.me");
		const beat = signed("HEARTBEAT", { sender: "owners.pod-1", cpu: 1 });
		const [at, target, mac] = String((beat as { busSignature?: string }).busSignature).split(":");
		// The last base64url character holds 4 unused bits; a time may take leading zeros.
		const last = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".indexOf(mac.slice(-1));
		const respelled = [`0${at}:${target}:${mac}`, `${at}:${target}:${mac.slice(0, -1)}${"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[last ^ 1]}`];
		expect(receiver.receive("HEARTBEAT", beat)).not.toBeNull();
		for (const busSignature of respelled) expect({ busSignature, passed: receiver.receive("HEARTBEAT", { ...beat, busSignature }) }).toEqual({ busSignature, passed: null });
	});

	test("keeps the nodes it knows while a flood exhausts its checks: heartbeat expiry waits", () => {
		const discoverer = { opts: { disableHeartbeatChecks: false } };
		const receiver = node("intake.me", {}, discoverer);
		const now = Date.now();
		// The flood within one second of the clock: a loop that crossed into the next (a slow CI
		// machine) found a fresh budget there, and the test failed at random.
		const clock = jest.spyOn(Date, "now").mockReturnValue(now);
		try {
			for (let i = 0; i <= SIGNATURE_CHECKS_PER_SECOND; i++) receiver.receive("HEARTBEAT", { sender: `owners.flood-${i}`, cpu: 1, busSignature: `${now}::${Buffer.alloc(64, i % 251).toString("base64url")}` });
		} finally {
			clock.mockRestore();
		}
		expect(discoverer.opts.disableHeartbeatChecks).toBe(true);
		expect(receiver.warnings.some(line => /kept as they are until it stops/.test(line))).toBe(true);
	});

	test("remembers a bounded number of one sender's signatures of one millisecond", () => {
		const packets = new SignedPackets(NAMESPACE, "intake.me", () => ring.keys("owners").groups.owners);
		const at = Date.now();
		const beats = Array.from({ length: 70 }, (_, cpu) => signed("HEARTBEAT", { sender: "owners.pod-1", cpu }, { at }));
		const refusals = (beats as { busSignature?: string; sender: string; cpu: number }[]).map(({ busSignature: signature, ...payload }) => packets.check("HEARTBEAT", "owners.pod-1", payload, signature, at));
		expect(refusals.slice(0, 64)).toEqual(Array(64).fill(null));
		expect(refusals.slice(64)).toEqual(Array(6).fill("busy"));
	});

	test("remembers a bounded number of senders for each group: ids one group's key mints keep no other group's nodes out", () => {
		const packets = new SignedPackets(NAMESPACE, "intake.me", sender => ring.keys(busGroupOf(sender)!).groups[busGroupOf(sender)!]);
		const at = Date.now();
		const check = (sender: string, second: number) => {
			const { busSignature: signature, ...payload } = signed("HEARTBEAT", { sender, cpu: 1 }, { at }) as { busSignature?: string; sender: string; cpu: number };
			return packets.check("HEARTBEAT", sender, payload, signature, at + second * 1000);
		};
		// 2,500 gateway ids, within the budget of each second.
		const minted = Array.from({ length: 2501 }, (_, i) => check(`gateway.minted-${i}`, Math.floor(i / 900)));
		expect(minted.slice(0, 2500).every(refusal => refusal === null)).toBe(true);
		expect(minted[2500]).toBe("busy");
		expect(check("owners.new-pod", 3)).toBeNull();
	});

	test("a signing clock never goes back a little, and follows a clock set back by more than a signature holds", () => {
		const clock = new SigningClock();
		expect([clock.now(10_000), clock.now(9_000), clock.now(11_000)]).toEqual([10_000, 10_000, 11_000]);
		expect(clock.now(11_000 - BUS_SIGNATURE_TTL_MS - 1)).toBe(11_000 - BUS_SIGNATURE_TTL_MS - 1);
	});

	test("takes an answer from the node asked only, its meta from the intake and the owners only (the gateway sends its $statusCode and $responseHeaders), and no meta's own __proto__", () => {
		const receiver = node();
		const meta = { $statusCode: 302, $responseHeaders: { location: "https://elsewhere.example" }, $responseType: "text/html" };
		for (const [id, nodeID] of [["c1", "verifier.pod-1"], ["c2", "gateway.pod-1"], ["c3", "owners.pod-1"], ["c4", "intake.pod-1"], ["c5", "verifier.pod-1"]]) receiver.pendingRequests.set(id, { nodeID });
		expect(receiver.receive("RES", { sender: "verifier.pod-1", id: "c1", success: true, data: {}, meta })).toEqual({ sender: "verifier.pod-1", id: "c1", success: true, data: {} });
		expect(receiver.receive("RES", { sender: "gateway.pod-1", id: "c2", success: true, data: {}, meta })).not.toHaveProperty("meta");
		expect(receiver.receive("RES", { sender: "owners.pod-1", id: "c3", success: true, data: {}, meta })).toHaveProperty("meta", meta);
		expect(receiver.receive("RES", { sender: "intake.pod-1", id: "c4", success: true, data: {}, meta })).toHaveProperty("meta", meta);
		// The verifier that was asked, answering in an owner's name (the review's replay of the fix): dropped.
		expect(receiver.receive("RES", { sender: "owners.pod-1", id: "c5", success: true, data: {}, meta })).toBeNull();
		// An own __proto__ key of a kept meta is dropped, not made the prototype of the caller's meta.
		receiver.pendingRequests.set("c6", { nodeID: "owners.pod-1" });
		const passed = receiver.receive("RES", { sender: "owners.pod-1", id: "c6", success: true, data: {}, meta: JSON.parse('{"__proto__":{"worker":true},"a":1}') as object });
		expect(Object.hasOwn(passed!.meta as object, "__proto__")).toBe(false);
		expect(passed!.meta).toEqual({ a: 1 });
		const event = receiver.receive("EVENT", { sender: "owners.pod-1", meta: JSON.parse('{"__proto__":{"worker":true}}') as object });
		expect(Object.hasOwn(event!.meta as object, "__proto__")).toBe(false);
	});

	test("reads no packet nesting deeper than any of ours (its answer's serializer would overflow the stack and end the process)", () => {
		const receiver = node();
		const levels = (n: number) => `{"ver":"5","sender":"gateway.x","meta":{"x":${"[".repeat(n)}${"]".repeat(n)}}}`;
		expect(["REQ", "RES", "EVENT"].map(cmd => [receiver.reads(cmd, levels(60)), receiver.reads(cmd, levels(100_000))])).toEqual([[true, false], [true, false], [true, false]]);
	});

	test("reads no signed packet larger than any of ours", () => {
		const receiver = node();
		expect([receiver.reads("INFO", 128 * 1024), receiver.reads("INFO", 128 * 1024 + 1), receiver.reads("HEARTBEAT", 4096), receiver.reads("HEARTBEAT", 4097), receiver.reads("REQ", 900 * 1024)]).toEqual([true, false, true, false, true]);
	});

	test("takes an unsigned one from a node of no group during the roll from the one-user bus only, and from a grouped node during the roll to signatures only", () => {
		expect(node("intake.me", { admitUngrouped: true }).receive("HEARTBEAT", { sender: "pod-old", cpu: 1 })).toEqual({ sender: "pod-old", cpu: 1 });
		expect(node("intake.me", { admitUngrouped: true }).receive("HEARTBEAT", { sender: "owners.pod-1", cpu: 1 })).toBeNull();
		expect(node("intake.me", { admitUnsigned: true }).receive("HEARTBEAT", { sender: "owners.pod-1", cpu: 1 })).toEqual({ sender: "owners.pod-1", cpu: 1 });
		// A signature that is there is checked all the same.
		expect(node("intake.me", { admitUnsigned: true }).receive("HEARTBEAT", signed("HEARTBEAT", { sender: "owners.pod-1", cpu: 1 }, { group: "gateway" }))).toBeNull();
	});

	test("signs its own with its group's key, as the receivers check them; a call goes unsigned", () => {
		const sender = node("intake.me");
		const info = { services: [], seq: 3 };
		const sent = sender.send("INFO", info)!;
		// Sent as the transporter adds the protocol version and the sender, then read by another node.
		expect(node("owners.a").receive("INFO", { ...JSON.parse(JSON.stringify(sent.payload)), ver: "5", sender: "intake.me" })).toMatchObject({ seq: 3, sender: "intake.me" });
		// One sent to a node is taken by that node only.
		const answer = JSON.parse(JSON.stringify(sender.send("INFO", info, "owners.a")!.payload));
		expect([node("owners.b").receive("INFO", { ...answer, sender: "intake.me" }), node("owners.a").receive("INFO", { ...answer, sender: "intake.me" })].map(passed => passed !== null)).toEqual([false, true]);
		expect(info).toEqual({ services: [], seq: 3 });
		expect(sender.send("REQ", { action: "x" } as never)!.payload).not.toHaveProperty("busSignature");
	});

	test("sends a call's and an event's parentID and requestID as digests: ids of calls still awaited, which the addressee could answer in their node's name (a review's replay)", () => {
		const sender = node("intake.me");
		const ids = { parentID: "0b9a2f0e-5b1c-4d3e-9f00-000000000001", requestID: "0b9a2f0e-5b1c-4d3e-9f00-000000000002" };
		for (const type of ["REQ", "EVENT"]) {
			const [first, again] = [sender.send(type, { action: "x", ...ids } as never)!.payload, sender.send(type, { action: "x", ...ids } as never)!.payload] as unknown as (typeof ids)[];
			expect(JSON.stringify(first)).not.toContain(ids.parentID);
			expect(JSON.stringify(first)).not.toContain(ids.requestID);
			// The same for the same id: a repeat of a call is still told by its parent (services/replay.ts).
			expect(again).toEqual(first);
			expect(first.parentID).not.toBe(first.requestID);
		}
		expect(sender.send("REQ", { action: "x", parentID: null } as never)!.payload).toHaveProperty("parentID", null);
	});

	test("refuses to start with a serializer whose bytes it cannot scan, or with calls balanced by NATS (no node to check an answer against)", () => {
		const guard = () => busGuard({ busKeys: ring.keys("intake"), callKeys: null, workerApiKeys: [], admitUngrouped: false }) as unknown as { created(broker: object): void };
		const broker = { namespace: NAMESPACE, nodeID: "intake.me", logger: { warn: () => undefined } };
		expect(() => guard().created({ ...broker, serializer: new Serializers.JSON() })).not.toThrow();
		expect(() => guard().created({ ...broker, serializer: {} })).toThrow(/serializer must be JSON/);
		expect(() => guard().created({ ...broker, options: { disableBalancer: true } })).toThrow(/disableBalancer/);
	});
});
