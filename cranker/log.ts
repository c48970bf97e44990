/** One JSON line per event on stdout. Never given a secret: keys, API keys and keypairs stay out of every field. */
export type LogFields = Record<string, unknown>;

export interface Logger {
	info(message: string, fields?: LogFields): void;
	warn(message: string, fields?: LogFields): void;
	error(message: string, fields?: LogFields): void;
}

export function createLogger(context: LogFields, write: (line: string) => void = line => process.stdout.write(line + "\n")): Logger {
	const emit = (level: string) => (message: string, fields: LogFields = {}) =>
		write(JSON.stringify({ time: new Date().toISOString(), level, message, ...context, ...fields }, (_, v) => (typeof v === "bigint" ? v.toString() : v)));
	return { info: emit("info"), warn: emit("warn"), error: emit("error") };
}
