/**
 * MongoDB connection strings, read without the driver (the config checks them before anything connects).
 */

const DEFAULT_DATABASE = "scs";

/**
 * The database named by the path of a MongoDB connection string, or `scs`. Parsed by hand because
 * `new URL` rejects host lists (`mongodb://a:27017,b:27017/db`) and the driver falls back to `test`.
 */
export function mongoDatabaseName(url: string): string {
	const match = /^mongodb(?:\+srv)?:\/\/[^/?]*\/([^?]*)/.exec(url);
	return (match && decodeURIComponent(match[1])) || DEFAULT_DATABASE;
}

/**
 * What a MongoDB connection string would weaken of the durability the store sets (DURABLE_OPTIONS
 * in ./mongodb): each entry names the option and why it matters. Empty when nothing is weakened.
 */
export function mongoUrlWeakenings(url: string): string[] {
	const query = /\?([^#]*)/.exec(url)?.[1] ?? "";
	const options = new Map<string, string>();
	for (const pair of query.split("&").filter(Boolean)) {
		const [name, value = ""] = pair.split("=");
		options.set(decodeURIComponent(name).toLowerCase(), decodeURIComponent(value).toLowerCase());
	}
	const problems: string[] = [];
	const is = (name: string, test: (value: string) => boolean) => options.has(name) && test(options.get(name)!);
	if (is("journal", v => v !== "true") || is("j", v => v !== "true")) problems.push("journal=false acknowledges writes before they are on disk");
	if (is("w", v => v !== "majority")) problems.push(`w=${options.get("w")} acknowledges writes an election can roll back`);
	if (is("wtimeoutms", v => Number(v) === 0)) problems.push("wtimeoutMS=0 lets a write wait for a majority forever");
	if (is("wtimeout", v => Number(v) === 0)) problems.push("wtimeout=0 lets a write wait for a majority forever");
	if (is("readpreference", v => v !== "primary")) problems.push(`readPreference=${options.get("readpreference")} reads data that may not be the latest`);
	// Linearizable too: transactions inherit it, and the server refuses it in a transaction.
	if (is("readconcernlevel", v => v !== "majority")) problems.push(`readConcernLevel=${options.get("readconcernlevel")} reads writes that may be rolled back`);
	if (is("retrywrites", v => v === "false")) problems.push("retryWrites=false fails writes across every failover");
	return problems;
}


/** The same connection string naming database `name` instead (host lists and options kept). */
export function mongoUrlWithDatabase(url: string, name: string): string {
	const match = /^(mongodb(?:\+srv)?:\/\/[^/?]*)(?:\/[^?]*)?(\?.*)?$/.exec(url);
	if (!match) throw new Error("not a mongodb:// connection string");
	return `${match[1]}/${encodeURIComponent(name)}${match[2] ?? ""}`;
}
