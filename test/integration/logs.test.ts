/**
 * What the service writes to its log, from the real process (dist/index.js): a start-up that fits
 * on a screen and ends with the one summary line, one access line per request at info with the
 * request id the client sent (and returned), and LOG_FORMAT=json as one JSON object per line.
 */
import path from "node:path";
import { freePort, spawnScript, waitFor, type ScriptProcess } from "../../devkit/process";
import { API_KEY, tempDir } from "../helpers/node";

const ROOT = path.resolve(__dirname, "../..");
const running: ScriptProcess[] = [];
afterAll(async () => {
	for (const proc of running) if (proc.child.exitCode === null) proc.child.kill("SIGKILL");
});

async function start(env: Record<string, string>): Promise<{ proc: ScriptProcess; url: string }> {
	const port = await freePort();
	const proc = spawnScript(path.join(ROOT, "dist/index.js"), { PORT: String(port), DATA_DIR: tempDir(), WORKER_API_KEYS: API_KEY, LOG_LEVEL: "info", ...env });
	running.push(proc);
	await waitFor(() => proc.output().includes("listening on port"), 20_000, "the service to listen", 20);
	return { proc, url: `http://127.0.0.1:${port}` };
}

test("start-up fits on a screen and names version, port, store, services and where the secrets are", async () => {
	const { proc } = await start({});
	const lines = proc.output().trim().split("\n");
	expect(lines.length).toBeLessThanOrEqual(30);
	expect(lines[lines.length - 1]).toMatch(/Settlement Coordination Service \d+\.\d+\.\d+ listening on port \d+: services all; store sqlite in \S+; worker keys WORKER_API_KEYS; authority keypair \S+node-authority-keypair\.json\./);
	expect(proc.output()).not.toContain(API_KEY);
});

test("one access line per request at info, with the client's x-request-id, which comes back in the answer", async () => {
	const { proc, url } = await start({});
	const answer = await fetch(`${url}/intents/int_missing`, { headers: { "x-request-id": "req-log-test-1" } });
	expect(answer.status).toBe(404);
	expect(answer.headers.get("x-request-id")).toBe("req-log-test-1");
	await fetch(`${url}/health/ready`);
	const line = await waitFor(() => proc.output().split("\n").find(l => l.includes("GET /intents/int_missing")), 5000, "the access line");
	expect(line).toMatch(/INFO .*GET \/intents\/int_missing 404 \d+\.\dms request=req-log-test-1$/);
	// Probes stay out of the info log.
	expect(proc.output()).not.toMatch(/GET \/health\/ready 200/);
});

test("a request the client leaves before its answer is whole (an event stream it closes) is logged and counted, as 499", async () => {
	const { proc, url } = await start({});
	const leave = new AbortController();
	const stream = await fetch(`${url}/events`, { headers: { "x-api-key": API_KEY, "x-request-id": "req-log-left" }, signal: leave.signal });
	expect(stream.status).toBe(200);
	await stream.body!.getReader().read();
	leave.abort();
	const line = await waitFor(() => proc.output().split("\n").find(l => l.includes("GET /events")), 5000, "the access line");
	expect(line).toMatch(/INFO .*GET \/events 499 \d+\.\dms request=req-log-left$/);
	const metrics = await (await fetch(`${url}/metrics?format=prometheus`)).text();
	expect(metrics).toMatch(/^scs_http_requests_total\{[^}]*route="\/events"[^}]*status="499"[^}]*\} 1$/m);
});

test("access lines name the path as requested, also on routes moleculer-web rewrites (the health routes, at debug)", async () => {
	const { proc, url } = await start({ LOG_LEVEL: "debug" });
	expect((await fetch(`${url}/health/live?probe=1`)).status).toBe(200);
	const line = await waitFor(() => proc.output().split("\n").find(l => / GET \/health\/live 200 /.test(l)), 5000, "the health access line");
	expect(line).toMatch(/DEBUG .*GET \/health\/live 200 \d+\.\dms request=\S+$/);
	// Never the route-relative path moleculer-web leaves in req.url.
	expect(proc.output()).not.toMatch(/ GET \/live \d{3} /);
});

test("LOG_FORMAT=json: every line is one JSON object with an ISO time", async () => {
	const { proc, url } = await start({ LOG_FORMAT: "json" });
	await fetch(`${url}/epoch/status`);
	await waitFor(() => proc.output().includes("GET /epoch/status 200"), 5000, "the access line");
	const lines = proc.output().trim().split("\n");
	for (const line of lines) {
		const record = JSON.parse(line) as { time: string; level: string; message: string };
		expect(new Date(record.time).toISOString()).toBe(record.time);
		expect(typeof record.level).toBe("string");
		expect(typeof record.message).toBe("string");
	}
	expect(lines.some(line => (JSON.parse(line) as { message: string }).message.startsWith("GET /epoch/status 200 "))).toBe(true);
});
