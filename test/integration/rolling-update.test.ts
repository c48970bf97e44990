/**
 * A rolling update runs gateways and owners of two versions side by side. Owners of this version
 * answer a list's items as the JSON texts of their kept views only to a gateway that says it takes
 * them (`jsonTexts` in its call's meta), and whole objects to one of the previous version; a
 * gateway of this version takes either. A gateway of the previous version routes POST /intents to
 * receiver.submit, one submission at a time: this receiver still takes them so; and this gateway
 * hands submissions one by one to a receiver of the previous version, which has no submitMany.
 */
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Context, Service } from "moleculer";
import ApiGateway from "moleculer-web";
import type { IntentWorkItem } from "../../lib/intents";
import { receiverService } from "../../services/receiver.service";
import { newRoute, newWallet, signedIntent, signedTinOperation, writeSeedFile } from "../helpers/fixtures";
import { startNode, tempDir, worker, type TestNode } from "../helpers/node";

/** The previous version's gateway, as far as the list routes go: no meta, its own GET /intent-work over pages of whole items. */
function previousGateway(): Parameters<TestNode["broker"]["createService"]>[0] {
	return {
		name: "previousgw",
		mixins: [ApiGateway],
		settings: {
			port: 0,
			ip: "127.0.0.1",
			routes: [
				{
					path: "/",
					mappingPolicy: "restrict",
					aliases: { "POST /intents": "receiver.submit", "GET /intents": "mempool.list", "GET /tin-operations/verification-work": "tin.verificationWork", "GET /intent-work": "previousgw.intentWork" }
				}
			]
		},
		actions: {
			intentWork: {
				params: { limit: { type: "number", convert: true } },
				async handler(ctx: Context<{ limit: number }>) {
					const work: IntentWorkItem[] = [];
					while (work.length < ctx.params.limit) {
						const size = Math.min(2, ctx.params.limit - work.length);
						const last = work[work.length - 1]?.intent;
						const page = await ctx.call<IntentWorkItem[], object>("mempool.workPage", { limit: size, ...(last ? { after: { createdAt: last.createdAt, id: last.id } } : {}) });
						work.push(...page);
						if (page.length < size) break;
					}
					return work;
				}
			}
		}
	};
}

describe("owners of this version behind a gateway of the previous one", () => {
	let node: TestNode;
	let previous: string;
	const route = newRoute();

	beforeAll(async () => {
		const dataDir = tempDir();
		node = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]) }, dataDir);
		const gateway = node.broker.createService(previousGateway()) as Service & { server: Server };
		await node.broker.waitForServices(["previousgw"]);
		await new Promise(resolve => (gateway.server.listening ? resolve(null) : gateway.server.once("listening", resolve)));
		previous = `http://127.0.0.1:${(gateway.server.address() as AddressInfo).port}`;
	});
	afterAll(() => node?.stop());

	test("its POST /intents reaches this receiver: 201 with the location, 200 for the same body, the refusals as this gateway answers them", async () => {
		const request = signedIntent(newWallet(), route);
		const post = (body: object) => fetch(`${previous}/intents`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
		const created = await post(request);
		const view = (await created.json()) as { id: string; receiverStatus: string };
		expect([created.status, created.headers.get("location"), view.receiverStatus]).toEqual([201, `/intents/${view.id}`, "VERIFIED"]);
		const again = await post(request);
		expect([again.status, await again.json()]).toEqual([200, view]);
		const unknownTin = signedIntent(newWallet(), newRoute());
		const refused = await post(unknownTin);
		expect([refused.status, ((await refused.json()) as { type: string }).type]).toEqual([422, "UNKNOWN_TIN"]);
	});

	test("they answer whole objects, the same as this gateway's texts", async () => {
		for (let i = 0; i < 5; i++) expect((await node.http("POST", "/intents", signedIntent(newWallet(), route))).status).toBe(201);
		expect((await node.http("POST", "/tin-operations", signedTinOperation(newWallet(), { intentType: "create" }))).status).toBe(201);
		for (const path of ["/intents?limit=10", "/tin-operations/verification-work?limit=10", "/intent-work?limit=5"]) {
			const res = await fetch(previous + path);
			expect(res.status).toBe(200);
			const items = (await res.json()) as unknown[];
			expect(items.length).toBeGreaterThan(0);
			expect(items.every(item => typeof item === "object")).toBe(true);
			expect(items).toStrictEqual((await node.http("GET", path, undefined, worker)).body);
		}
	});
});

describe("a gateway of this version in front of an owner of the previous one", () => {
	let node: TestNode;
	/** The previous version's mempool, as far as the lists go: whole objects whatever the caller says. */
	const intents = Array.from({ length: 150 }, (_, i) => ({ id: `int_${String(i).padStart(32, "0")}`, createdAt: new Date(Date.UTC(2026, 10, 23, 0, 0, i)).toISOString(), receiverStatus: "VERIFIED" }));
	beforeAll(async () => {
		node = await startNode({ SERVICES: "api" });
		node.broker.createService({
			name: "mempool",
			actions: {
				list: (ctx: Context<{ limit: number }>) => intents.slice(0, ctx.params.limit),
				workPage(ctx: Context<{ limit: number; after?: { id: string } }>): IntentWorkItem[] {
					const from = ctx.params.after ? intents.findIndex(intent => intent.id === ctx.params.after!.id) + 1 : 0;
					return intents.slice(from, from + ctx.params.limit).map(intent => ({ intent, leaseTtlMs: 30_000 }) as unknown as IntentWorkItem);
				}
			}
		});
		await node.broker.waitForServices(["mempool"]);
	});
	afterAll(() => node?.stop());

	test("it sends the objects it gets, and answers GET /intent-work with its whole items", async () => {
		const listed = await fetch(`${node.url}/intents?limit=3`, { headers: worker });
		expect(listed.status).toBe(200);
		expect(await listed.json()).toStrictEqual(intents.slice(0, 3));
		// The stand-in runs in the gateway's process, so it is asked for the whole list at once
		// (paging an old mempool's items by their last one: test/unit/intents.test.ts).
		const work = await fetch(`${node.url}/intent-work?limit=500`, { headers: worker });
		expect(work.status).toBe(200);
		expect(await work.json()).toStrictEqual(intents.map(intent => ({ intent, leaseTtlMs: 30_000 })));
	});
});

describe("a gateway of this version in front of a receiver of the previous one", () => {
	let node: TestNode;
	const route = newRoute();
	beforeAll(async () => {
		const dataDir = tempDir();
		node = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]), SERVICES: "api,verifier,mempool,payouts,crankers,tin,epochs,network" }, dataDir);
		// The previous receiver took one submission per call (receiver.submit) and had no batches.
		const previous = receiverService(node.config);
		delete (previous.actions as Record<string, unknown>).submitMany;
		node.broker.createService(previous);
		await node.broker.waitForServices(["receiver"]);
	});
	afterAll(() => node?.stop());

	test("POST /intents answers as with this receiver: 201 each (concurrently), 200 for the same body, the refusals", async () => {
		const requests = Array.from({ length: 6 }, () => signedIntent(newWallet(), route));
		const created = await Promise.all(requests.map(request => node.http("POST", "/intents", request)));
		expect(created.map(answer => [answer.status, answer.body.paymentId])).toEqual(requests.map(request => [201, request.paymentId]));
		expect(created[0].headers.get("location")).toBe(`/intents/${created[0].body.id}`);
		expect((await node.http("POST", "/intents", requests[0])).status).toBe(200);
		const forged = { ...requests[1], paymentId: "pay_forged_0001", senderAuthorizationSignature: newWallet().sign(requests[1].senderAuthorizationMessage) };
		expect((await node.http("POST", "/intents", forged)).body).toMatchObject({ code: 400, type: "INVALID_MESSAGE" });
		expect((await node.http("POST", "/intents", signedIntent(newWallet(), newRoute()))).body).toMatchObject({ code: 422, type: "UNKNOWN_TIN" });
	});
});
