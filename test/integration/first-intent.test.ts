/**
 * The newcomer's first payment (README): `npm run example:intent` against a service started on
 * examples/registry-seed.json signs with a fresh key, submits, and prints the status and a curl
 * command that repeats the same request.
 */
import { spawn } from "node:child_process";
import path from "node:path";
import { startNode, type TestNode } from "../helpers/node";

const root = path.resolve(__dirname, "../..");
let node: TestNode;

beforeAll(async () => {
	node = await startNode({ REGISTRY_SEED_FILE: path.join(root, "examples/registry-seed.json") });
});
afterAll(() => node.stop());

function runExample(env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
	return new Promise(resolve => {
		const child = spawn(process.execPath, [path.join(root, "dist/examples/first-intent.js")], { env: { PATH: process.env.PATH ?? "", ...env } });
		let stdout = "";
		let stderr = "";
		child.stdout.on("data", chunk => (stdout += chunk));
		child.stderr.on("data", chunk => (stderr += chunk));
		child.on("exit", code => resolve({ code, stdout, stderr }));
	});
}

test("signs, submits and prints the status and the equivalent curl, which replays the same record", async () => {
	const { code, stdout, stderr } = await runExample({ BASE_URL: node.url });
	expect(stderr).toBe("");
	expect(code).toBe(0);
	const id = /^intent\s+(int_[0-9a-f]+)$/m.exec(stdout)?.[1];
	expect(id).toBeDefined();
	expect(stdout).toMatch(/^status\s+pending$/m);
	const body = /-d '(.*)'$/m.exec(stdout)?.[1];
	const replay = await node.http("POST", "/intents", JSON.parse(body!));
	expect(replay.status).toBe(200);
	expect(replay.body.id).toBe(id);
	expect((await node.http("GET", `/intents/${id}`)).body.status).toBe("pending");
});

test("without a service it says how to start one, and exits 1", async () => {
	const { code, stderr } = await runExample({ BASE_URL: "http://127.0.0.1:9" });
	expect(code).toBe(1);
	expect(stderr).toMatch(/REGISTRY_SEED_FILE=examples\/registry-seed.json npm start/);
});
