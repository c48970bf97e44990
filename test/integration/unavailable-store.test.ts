/**
 * A store that cannot answer now answers 503 NOT_READY with retry-after, mapped at the owner's
 * store boundary, and leaves nothing behind: here the mempool's real SQLite file is held by
 * another writer for longer than busy_timeout, as a stalled disk or a second process would.
 */
import Database from "better-sqlite3";
import path from "node:path";
import type { GenesisRoute } from "../../lib/registry";
import { newRoute, newWallet, signedIntent, writeSeedFile } from "../helpers/fixtures";
import { startNode, tempDir, type TestNode } from "../helpers/node";

let node: TestNode;
let route: GenesisRoute;

beforeAll(async () => {
	const dataDir = tempDir();
	route = newRoute();
	node = await startNode({ REGISTRY_SEED_FILE: writeSeedFile(dataDir, [route]) }, dataDir);
});
afterAll(() => node.stop());

test("a busy store: 503 NOT_READY with retry-after, no database detail, and the same request succeeds once it is free", async () => {
	const request = signedIntent(newWallet(), route);
	const holder = new Database(path.join(node.dataDir, "mempool.sqlite"));
	holder.exec("BEGIN IMMEDIATE");
	let refused;
	try {
		refused = await node.http("POST", "/intents", request);
	} finally {
		holder.exec("ROLLBACK");
		holder.close();
	}
	expect(refused.status).toBe(503);
	expect(refused.headers.get("retry-after")).toBe("1");
	expect(refused.body).toMatchObject({ type: "NOT_READY", code: 503 });
	expect(JSON.stringify(refused.body)).not.toMatch(/sqlite|busy|locked/i);

	const accepted = await node.http("POST", "/intents", request);
	expect(accepted.status).toBe(201);
	expect((await node.http("GET", "/metrics")).body.intents.VERIFIED).toBe(1);
}, 30_000);
