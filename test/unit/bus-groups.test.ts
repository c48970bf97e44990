/** The bus's groups: who may serve what, node ids NATS can tell apart, and each user's subjects. */
import { randomBytes } from "node:crypto";
import { BUS_CALL_PROOF_TTL_MS, BUS_GROUPS, busCallKey, busCallProof, busGroupOf, busGroupServing, busNodeId, busPublications, busSubscriptions, isBusCallProof, isNodeId, mayServe, natsAuthorization } from "../../lib/bus-groups";
import { SERVICE_FACTORIES } from "../../services";

describe("bus groups", () => {
	test("every service belongs to a group, and the gateway's serves none of the owners' or verifiers'", () => {
		const grouped = new Set(Object.values(BUS_GROUPS).flat());
		expect(Object.keys(SERVICE_FACTORIES).filter(name => !grouped.has(name as never))).toEqual([]);
		for (const service of ["mempool", "crankers", "tin", "webhooks", "payouts", "verifier", "receiver"]) expect({ service, served: mayServe("gateway", service) }).toEqual({ service, served: false });
		// Each process answers for its own metrics, whatever its group.
		for (const group of Object.keys(BUS_GROUPS) as (keyof typeof BUS_GROUPS)[]) expect(mayServe(group, "metrics")).toBe(true);
	});

	test("a node id is of the deployment's form: nothing NATS's protocol would split", () => {
		for (const id of ["owners.pod-1.local-7", "intake.x_1", "pod-1"]) expect(isNodeId(id)).toBe(true);
		for (const id of [undefined, 1, "", ".owners", "owners.x 0\r\nUNSUB 1", "owners.x\tA", "owners.*", "owners.>", "a".repeat(201), "gateway.x\u2028", "gateway..x", "gateway.x.", "gateway.x..y"]) expect({ id, ok: isNodeId(id) }).toEqual({ id, ok: false });
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

	test("a user may subscribe to its own group's nodes and to the broadcasts of its namespace only", () => {
		const subjects = busSubscriptions("gateway", "prod");
		expect(subjects).toContain("MOL-prod.REQ.gateway.>");
		expect(subjects).toContain("MOL-prod.RES.gateway.>");
		expect(subjects).toContain("MOL-prod.HEARTBEAT");
		expect(subjects.every(subject => subject.startsWith("MOL-prod."))).toBe(true);
		expect(subjects.filter(subject => subject.includes(">")).every(subject => subject.endsWith(".gateway.>"))).toBe(true);
		expect(busSubscriptions("owners", "")).toContain("MOL.REQ.owners.>");
	});

	test("a user may publish Moleculer's packets of its namespace, and nothing else (no JetStream API)", () => {
		const subjects = busPublications("prod");
		expect(subjects).toEqual(expect.arrayContaining(["MOL-prod.REQ.>", "MOL-prod.RES.>", "MOL-prod.INFO", "MOL-prod.INFO.>", "MOL-prod.HEARTBEAT"]));
		expect(subjects.every(subject => subject.startsWith("MOL-prod."))).toBe(true);
	});

	test("the nats.conf block has a user per group, with its password and its permissions", () => {
		const block = natsAuthorization(group => `$NATS_PASSWORD_${group.toUpperCase()}`, "prod");
		const list = (subjects: string[]) => subjects.map(s => `"${s}"`).join(", ");
		for (const group of Object.keys(BUS_GROUPS) as (keyof typeof BUS_GROUPS)[])
			expect(block).toContain(`{ user: ${group}, password: $NATS_PASSWORD_${group.toUpperCase()}, permissions: { publish: [${list(busPublications("prod"))}], subscribe: [${list(busSubscriptions(group, "prod"))}] } }`);
		expect(block).not.toMatch(/no_auth_user/);
	});

	test("a call's proof holds for its own call (action, id, sender, parameters), fresh, under the key derived from the shared secret only", () => {
		const secret = randomBytes(32);
		const key = busCallKey(secret);
		expect(key.equals(secret)).toBe(false);
		const call = { action: "mempool.receive", id: "id-1", sender: "intake.a", target: "owners.b", params: { epoch: 3, items: [{ call: "c" }] } };
		const at = Date.now();
		const proof = busCallProof(key, call, at);
		expect(isBusCallProof(key, call, proof, { now: at })).toBe(true);
		// The addressee digests the parameters as the bus's JSON gives them.
		expect(isBusCallProof(key, { ...call, params: JSON.parse(JSON.stringify(call.params)) }, proof, { now: at })).toBe(true);
		for (const other of [{ action: "mempool.receiveMany" }, { id: "id-2" }, { sender: "gateway.a" }, { target: "owners.c" }, { params: { epoch: 4, items: [{ call: "c" }] } }])
			expect({ other, proven: isBusCallProof(key, { ...call, ...other }, proof, { now: at }) }).toEqual({ other, proven: false });
		expect(isBusCallProof(busCallKey(randomBytes(32)), call, proof, { now: at })).toBe(false);
		// Fresh: within BUS_CALL_PROOF_TTL_MS either way (clocks differ), not after.
		expect(isBusCallProof(key, call, proof, { now: at + BUS_CALL_PROOF_TTL_MS })).toBe(true);
		expect(isBusCallProof(key, call, proof, { now: at + BUS_CALL_PROOF_TTL_MS + 1 })).toBe(false);
		expect(isBusCallProof(key, call, proof, { now: at - BUS_CALL_PROOF_TTL_MS - 1 })).toBe(false);
		const mac = proof.slice(proof.indexOf(".") + 1);
		for (const wrong of [undefined, null, 1, {}, "", mac, `.${mac}`, `${at + 1}.${mac}`, `x.${mac}`, proof.slice(0, -1), `${proof}=`])
			expect({ wrong, proven: isBusCallProof(key, call, wrong, { now: at }) }).toEqual({ wrong, proven: false });
	});
});
