/** The bus's groups: who may serve what, node ids NATS can tell apart, and each user's subjects. */
import { randomBytes } from "node:crypto";
import { BUS_GROUPS, busCallKey, busCallProof, busGroupOf, busGroupServing, busNodeId, busSubscriptions, isBusCallProof, mayServe, natsAuthorization } from "../../lib/bus-groups";
import { SERVICE_FACTORIES } from "../../services";

describe("bus groups", () => {
	test("every service belongs to a group, and the gateway's serves none of the owners' or verifiers'", () => {
		const grouped = new Set(Object.values(BUS_GROUPS).flat());
		expect(Object.keys(SERVICE_FACTORIES).filter(name => !grouped.has(name as never))).toEqual([]);
		for (const service of ["mempool", "crankers", "tin", "webhooks", "payouts", "verifier", "receiver"]) expect({ service, served: mayServe("gateway", service) }).toEqual({ service, served: false });
		// Each process answers for its own metrics, whatever its group.
		for (const group of Object.keys(BUS_GROUPS) as (keyof typeof BUS_GROUPS)[]) expect(mayServe(group, "metrics")).toBe(true);
	});

	test("a node id claims the group before its first dot; an id of no known group claims none", () => {
		expect(busNodeId("owners", "pod-1.local-7")).toBe("owners.pod-1.local-7");
		expect(busGroupOf("owners.pod-1.local-7")).toBe("owners");
		for (const id of ["owners", "ownersx.pod", "pod-1", ".owners", "Owners.pod", "__proto__.x", "constructor.x"]) expect({ id, group: busGroupOf(id) }).toEqual({ id, group: null });
	});

	test("a harness finds the first group that runs all its services", () => {
		expect(busGroupServing(["api"])).toBe("gateway");
		expect(busGroupServing(["api", "receiver"])).toBe("intake");
		expect(() => busGroupServing(["api", "mempool"])).toThrow(/no bus group/);
	});

	test("a user may subscribe to its own group's nodes and to the broadcasts only", () => {
		const subjects = busSubscriptions("gateway");
		expect(subjects).toContain("*.REQ.gateway.>");
		expect(subjects).toContain("*.RES.gateway.>");
		expect(subjects).toContain("*.HEARTBEAT");
		expect(subjects.filter(subject => !subject.includes(".gateway.")).every(subject => /^\*\.[A-Z]+$/.test(subject))).toBe(true);
		expect(subjects.some(subject => subject.includes(">") && !subject.includes(".gateway."))).toBe(false);
	});

	test("the nats.conf block has a user per group, with its password and its subscriptions", () => {
		const block = natsAuthorization(group => `$NATS_PASSWORD_${group.toUpperCase()}`);
		for (const group of Object.keys(BUS_GROUPS) as (keyof typeof BUS_GROUPS)[])
			expect(block).toContain(`{ user: ${group}, password: $NATS_PASSWORD_${group.toUpperCase()}, permissions: { subscribe: [${busSubscriptions(group).map(s => `"${s}"`).join(", ")}] } }`);
		expect(block).not.toMatch(/no_auth_user|publish/);
	});

	test("a call's proof holds for its own action and id, under the key derived from the shared secret only", () => {
		const secret = randomBytes(32);
		const key = busCallKey(secret);
		expect(key.equals(secret)).toBe(false);
		const proof = busCallProof(key, "mempool.receive", "id-1");
		expect(isBusCallProof(key, "mempool.receive", "id-1", proof)).toBe(true);
		expect(isBusCallProof(key, "mempool.receiveMany", "id-1", proof)).toBe(false);
		expect(isBusCallProof(key, "mempool.receive", "id-2", proof)).toBe(false);
		expect(isBusCallProof(busCallKey(randomBytes(32)), "mempool.receive", "id-1", proof)).toBe(false);
		for (const wrong of [undefined, null, 1, {}, "", proof.slice(1), `${proof}=`]) expect(isBusCallProof(key, "mempool.receive", "id-1", wrong)).toBe(false);
	});
});
