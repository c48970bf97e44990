/**
 * Real processes for tests (and `npm run bench:cluster`): spawning a compiled script with its
 * output captured, a free loopback port, polling until something holds. No service imports, so
 * the benchmark build can include it alone.
 */
import { spawn, type ChildProcess } from "node:child_process";
import net from "node:net";

export interface ScriptProcess {
	child: ChildProcess;
	/** Everything it printed so far, stdout and stderr. */
	output(): string;
	exited: Promise<number | null>;
}

/** `node <script> ...args` with only PATH and `env` in its environment; TEST_LOG=1 echoes its stdout under `name`. */
export function spawnScript(script: string, env: Record<string, string>, args: string[] = [], name = script, wrapper: readonly string[] = []): ScriptProcess {
	// A wrapper (valgrind and its options, say) runs Node itself: `wrapper... node script args...`.
	const [command, ...prefix] = [...wrapper, process.execPath];
	const child = spawn(command, [...prefix, script, ...args], { env: { PATH: process.env.PATH ?? "", ...env }, stdio: ["ignore", "pipe", "pipe"] });
	let output = "";
	child.stdout!.on("data", chunk => (output += chunk));
	child.stderr!.on("data", chunk => (output += chunk));
	if (process.env.TEST_LOG) child.stdout!.on("data", chunk => process.stdout.write(`[${name}] ${chunk}`));
	const exited = new Promise<number | null>(resolve => child.once("exit", code => resolve(code)));
	return { child, output: () => output, exited };
}

export async function freePort(): Promise<number> {
	const server = net.createServer();
	await new Promise<void>(resolve => server.listen(0, "127.0.0.1", resolve));
	const { port } = server.address() as net.AddressInfo;
	await new Promise(resolve => server.close(resolve));
	return port;
}

/** Polls `probe` every `intervalMs` until it answers something truthy, and answers that; throws after `timeoutMs`. */
export async function waitFor<T>(probe: () => T | Promise<T>, timeoutMs: number, what = "condition", intervalMs = 100): Promise<Exclude<T, null | undefined | false>> {
	const deadline = Date.now() + timeoutMs;
	for (;;) {
		const value = await probe();
		if (value) return value as Exclude<T, null | undefined | false>;
		if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
		await new Promise(resolve => setTimeout(resolve, intervalMs));
	}
}
