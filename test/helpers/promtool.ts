/**
 * `promtool check metrics` (Prometheus's own linter) on a scrape. CI installs promtool (Debian
 * package prometheus): there a missing promtool fails the suite; elsewhere those tests are
 * skipped with a note.
 */
import { spawnSync } from "node:child_process";

export const promtoolAvailable = spawnSync("promtool", ["--version"]).status === 0;

/** `it` when promtool can run (or on CI, where its absence must fail), else `it.skip` with a note. */
export const itWithPromtool: jest.It = promtoolAvailable || process.env.CI ? it : it.skip;
if (!promtoolAvailable) {
	if (process.env.CI) console.error("promtool is NOT installed, and CI requires it: the promtool checks fail.");
	else console.warn("promtool checks NOT RUN: promtool is not installed (Debian package prometheus; .ci/run installs it).");
}

/** promtool's verdict on an exposition: its exit status and whatever it printed (nothing when the text is clean). */
export function promtoolCheck(text: string): { status: number | null; output: string } {
	const run = spawnSync("promtool", ["check", "metrics"], { input: text, encoding: "utf8" });
	if (run.error) throw new Error(`promtool could not run: ${run.error.message}`);
	return { status: run.status, output: `${run.stdout}${run.stderr}`.trim() };
}
