/**
 * The bus guard's reading of announcements (INFO), the packets as the transit hands them over: a
 * node is believed only for services its group may run, and only for actions named after them.
 */
import { randomBytes } from "node:crypto";
import { busCallKey, busCallProof } from "../../lib/bus-groups";
import { busGuard } from "../../services/bus-guard";

type Service = { name: string; fullName?: string; version?: number; actions?: Record<string, { name: string }> };
const service = (name: string, actions: string[], extra: Partial<Service> = {}): Service => ({ name, fullName: name, actions: Object.fromEntries(actions.map(action => [action, { name: action }])), ...extra });

/** The services a node announcing `services` as `sender` is believed for. */
function believed(sender: string, services: Service[], options = { admitUngrouped: false }): string[] {
	const guard = busGuard({ callKey: null, ...options }) as unknown as { transitMessageHandler(next: (cmd: string, packet: object) => unknown): (cmd: string, packet: object) => unknown };
	const passed = guard.transitMessageHandler((_cmd, packet) => packet)("INFO", { type: "INFO", payload: { sender, services } }) as { payload: { services: Service[] } };
	return passed.payload.services.map(s => s.name);
}

describe("the bus guard believes an announcement", () => {
	test("for the services the sender's group may run", () => {
		expect(believed("owners.pod-1", [service("mempool", ["mempool.get"]), service("metrics", ["metrics.snapshot"])])).toEqual(["mempool", "metrics"]);
		expect(believed("gateway.pod-1", [service("mempool", ["mempool.get"]), service("verifier", ["verifier.verifyMany"]), service("api", ["api.rest"])])).toEqual(["api"]);
		expect(believed("pod-1", [service("metrics", ["metrics.snapshot"])])).toEqual([]);
		// A previous version's node (no group in its id), during the roll from the one-user bus only.
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
});

describe("the bus guard, on a call to an action that changes state", () => {
	const key = busCallKey(randomBytes(32));
	/** The guard of an owner whose every action is keyHoldersOnly: whether it passed the call on, or refused it. */
	function receive(packet: { sender: string; action: string; id: string; meta?: unknown }, options: { admitUngrouped?: boolean } = {}) {
		const refused: unknown[] = [];
		const guard = busGuard({ callKey: key, admitUngrouped: options.admitUngrouped ?? false }) as unknown as {
			created(broker: object): void;
			transitMessageHandler(next: (cmd: string, packet: { payload: { meta: object } }) => unknown): (cmd: string, packet: object) => unknown;
		};
		guard.created({ nodeID: "owners.a", registry: { getActionEndpointByNodeId: () => ({ action: { keyHoldersOnly: true } }) }, transit: { sendResponse: (...args: unknown[]) => refused.push(args[5]) } });
		let passed: { meta: object } | null = null;
		guard.transitMessageHandler((_cmd, received) => (passed = received.payload))("REQ", { type: "REQ", payload: packet });
		return { passed, refused: refused.map(err => (err as { type: string; data: unknown }).type) };
	}
	const proven = (action: string, id: string) => ({ busCallProof: busCallProof(key, action, id) });

	test("runs it with the key holders' proof over its action and id, and drops the proof from the meta", () => {
		expect(receive({ sender: "intake.x", action: "mempool.receive", id: "c1", meta: { ...proven("mempool.receive", "c1"), other: 1 } })).toEqual({ passed: expect.objectContaining({ meta: { other: 1 } }), refused: [] });
	});

	test("refuses it without one, with another call's, or with no meta at all", () => {
		for (const meta of [{}, proven("mempool.receive", "c2"), proven("mempool.receiveMany", "c1"), undefined, null, "x"])
			expect(receive({ sender: "gateway.x", action: "mempool.receive", id: "c1", meta })).toEqual({ passed: null, refused: ["FORBIDDEN"] });
	});

	test("runs an ungrouped (previous version's) node's call unproven only while BUS_ADMIT_UNGROUPED is set", () => {
		expect(receive({ sender: "intake-pod-1", action: "mempool.receive", id: "c1", meta: {} }).refused).toEqual(["FORBIDDEN"]);
		expect(receive({ sender: "intake-pod-1", action: "mempool.receive", id: "c1", meta: {} }, { admitUngrouped: true }).refused).toEqual([]);
		expect(receive({ sender: "gateway.x", action: "mempool.receive", id: "c1", meta: {} }, { admitUngrouped: true }).refused).toEqual(["FORBIDDEN"]);
	});
});
