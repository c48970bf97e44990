/**
 * The distributed deployment's settings, checked without a server: MongoDB URLs that weaken
 * durability are refused at start, transient driver errors are told from bugs, every index ends
 * in _id and every query shape needs one that serves it, NATS credentials reach the URL, and a
 * tls:// URL requires TLS (against a stand-in that answers without it).
 */
import net from "node:net";
import os from "node:os";
import { ServiceBroker } from "moleculer";
import { MongoClient, MongoNetworkError, MongoOperationTimeoutError, MongoServerError, MongoServerSelectionError, MongoWriteConcernError } from "mongodb";
import { newBusKeyring } from "../../lib/bus-signatures";
import { ConfigError, loadConfig } from "../../lib/config";
import { StoreUnavailableError } from "../../lib/store";
import { DURABLE_OPTIONS, assertDurableClient, closeClient, indexDescriptions, isTransientMongoError, storeError } from "../../lib/store/mongodb";
import { mongoUrlWeakenings, mongoUrlWithDatabase } from "../../lib/store/mongo-url";
import { servingIndex, type CollectionSpec } from "../../lib/store/port";
import { brokerOptions, natsTransporter } from "../../moleculer.config";

const REPLICA_SET = "mongodb://app:secret@mongodb-0.mongodb:27017,mongodb-1.mongodb:27017,mongodb-2.mongodb:27017/scs?replicaSet=rs0&authSource=admin";

describe("MONGO_URL durability", () => {
	test.each([
		["journal=false", /journal=false/],
		["j=false", /journal=false/],
		["w=1", /w=1/],
		["w=0", /w=0/],
		["readPreference=secondary", /readPreference=secondary/],
		["readPreference=nearest", /readPreference=nearest/],
		["retryWrites=false", /retryWrites=false/],
		["readConcernLevel=local", /readConcernLevel=local/],
		["wtimeoutMS=0", /wtimeoutMS=0/],
		["wtimeout=0", /wtimeout=0/],
		["readConcernLevel=linearizable", /readConcernLevel=linearizable/],
		["W=1", /w=1/]
	])("refuses %s unless MONGO_ALLOW_WEAK_DURABILITY=true", (option, message) => {
		const url = `${REPLICA_SET}&${option}`;
		expect(mongoUrlWeakenings(url).join("; ")).toMatch(message);
		expect(() => loadConfig({ MONGO_URL: url })).toThrow(ConfigError);
		expect(() => loadConfig({ MONGO_URL: url })).toThrow(/MONGO_ALLOW_WEAK_DURABILITY/);
		expect(loadConfig({ MONGO_URL: url, MONGO_ALLOW_WEAK_DURABILITY: "true" }).mongoUrl).toBe(url);
	});

	test("accepts what keeps durability, or says it again", () => {
		for (const url of [REPLICA_SET, `${REPLICA_SET}&w=majority&journal=true&retryWrites=true&readPreference=primary&readConcernLevel=majority&wtimeoutMS=5000`]) {
			expect(mongoUrlWeakenings(url)).toEqual([]);
			expect(loadConfig({ MONGO_URL: url }).store).toBe("mongodb");
		}
	});

	test("a client whose URL won over the durable options is refused (the driver reads j and wtimeout before them)", () => {
		const settings = (url: string) => new MongoClient(url, DURABLE_OPTIONS);
		expect(() => assertDurableClient(settings(REPLICA_SET))).not.toThrow();
		expect(() => assertDurableClient(settings(`${REPLICA_SET}&j=false&w=1&retryWrites=false`))).not.toThrow();
		expect(settings(`${REPLICA_SET}&j=false`).writeConcern).toMatchObject({ w: "majority", journal: true, wtimeoutMS: 5000 });
		expect(() => assertDurableClient(settings(`${REPLICA_SET}&wtimeout=0`))).toThrow(/durability/);
		expect(() => assertDurableClient(settings(`${REPLICA_SET}&readConcernLevel=local`))).toThrow(/durability/);
	});

	test("a database name replaces the URL's, hosts and options kept", () => {
		expect(mongoUrlWithDatabase(REPLICA_SET, "scs_test_1")).toBe(REPLICA_SET.replace("/scs?", "/scs_test_1?"));
		expect(mongoUrlWithDatabase("mongodb://localhost:27017", "db")).toBe("mongodb://localhost:27017/db");
		expect(mongoUrlWithDatabase("mongodb://localhost:27017/?replicaSet=rs0", "db")).toBe("mongodb://localhost:27017/db?replicaSet=rs0");
	});
});

describe("MongoDB errors at the store boundary", () => {
	const server = (fields: Record<string, unknown>) => new MongoServerError({ message: "server says no", ...fields });

	test("no primary, a lost connection, a timed-out majority write: transient (503)", () => {
		expect(isTransientMongoError(new MongoNetworkError("socket closed"))).toBe(true);
		expect(isTransientMongoError(new MongoServerSelectionError("no primary", { type: "ReplicaSetNoPrimary" } as never))).toBe(true);
		// With timeoutMS in the URL (client-side operation timeouts) the driver throws this one instead.
		expect(isTransientMongoError(new MongoOperationTimeoutError("Timed out during server selection"))).toBe(true);
		expect(isTransientMongoError(server({ code: 10107, codeName: "NotWritablePrimary" }))).toBe(true);
		expect(isTransientMongoError(server({ code: 189, codeName: "PrimarySteppedDown" }))).toBe(true);
		expect(isTransientMongoError(new MongoWriteConcernError({ writeConcernError: { code: 64, errmsg: "waiting for replication timed out", errInfo: { wtimeout: true } } } as never))).toBe(true);
	});

	test("any failure on a client its process is closing is a 503, whatever its class: calls in flight fail in many ways as it closes", async () => {
		const client = new MongoClient("mongodb://127.0.0.1:1", { serverSelectionTimeoutMS: 5000 });
		const inFlight = client.db("scs").collection("intents").findOne({}).catch(err => storeError(err, client));
		const bug = new Error("Cannot call commitTransaction after calling abortTransaction");
		expect(storeError(bug, client)).toBe(bug);
		await closeClient(client);
		expect(await inFlight).toBeInstanceOf(StoreUnavailableError);
		expect(storeError(await client.db("scs").collection("intents").findOne({}).catch(err => err), client)).toBeInstanceOf(StoreUnavailableError);
		expect(storeError(bug, client)).toMatchObject({ name: "StoreUnavailableError", cause: bug });
		expect(storeError(bug, new MongoClient("mongodb://127.0.0.1:1"))).toBe(bug);
	});

	test("a duplicate key that comes with a write-concern error is transient: neither taken nor written is known", () => {
		expect(isTransientMongoError(server({ code: 11000 }))).toBe(false);
		expect(isTransientMongoError(server({ code: 11000, writeConcernError: { code: 64, errmsg: "waiting for replication timed out" } }))).toBe(true);
	});

	test("anything else is a bug (500), never a client error", () => {
		expect(isTransientMongoError(server({ code: 2, codeName: "BadValue" }))).toBe(false);
		expect(isTransientMongoError(server({ code: 409 }))).toBe(false);
		expect(isTransientMongoError(new Error("plain"))).toBe(false);
	});
});

describe("indexes", () => {
	const spec: CollectionSpec = {
		name: "things",
		fields: { state: "text", createdAt: "text", owner: "text", rank: "integer", ok: "boolean" },
		unique: [["owner"]],
		indexes: [["state", "createdAt"], ["createdAt"]],
		sparseIndexes: [["rank"]]
	};

	test("every MongoDB index ends in _id, the tie-break of every ordered list; unique groups bind present values only", () => {
		expect(indexDescriptions(spec)).toEqual([
			{ name: "u_owner", key: { owner: 1 }, unique: true, partialFilterExpression: { owner: { $gte: "" } } },
			{ name: "i_state_createdAt_id", key: { state: 1, createdAt: 1, _id: 1 } },
			{ name: "i_createdAt_id", key: { createdAt: 1, _id: 1 } },
			{ name: "s_rank_id", key: { rank: 1, _id: 1 }, partialFilterExpression: { rank: { $gte: -Infinity } } }
		]);
		expect(Object.keys(indexDescriptions(spec)[1].key)).toEqual(["state", "createdAt", "_id"]);
	});

	test.each([
		[{ state: "A" }, ["createdAt", "asc"], ["state", "createdAt", "id"]],
		[{ state: { in: ["A", "B"] }, rank: { gt: 1 } }, ["createdAt", "desc"], ["state", "createdAt", "id"]],
		[{ createdAt: { lt: "x" } }, ["createdAt", "asc"], ["createdAt", "id"]],
		[{}, ["createdAt", "asc"], ["createdAt", "id"]],
		[{ state: "A", rank: { gt: 1 } }, undefined, ["state", "createdAt", "id"]],
		[{ createdAt: { gt: "x" } }, undefined, ["createdAt", "id"]],
		[{ owner: "o", state: "A" }, undefined, ["owner"]],
		[{ id: "x", rank: 1 }, undefined, ["id"]],
		[{}, ["id", "asc"], ["id"]],
		// The sparse index, for a query that sets its field to a value (so inside the index).
		[{ rank: 1 }, ["id", "asc"], ["rank", "id"]],
		[{ rank: 1 }, undefined, ["rank", "id"]]
	] as const)("servingIndex(%j, %j) is %j", (where, orderBy, key) => {
		expect(servingIndex(spec, where as never, orderBy as never).key).toEqual(key);
	});

	test.each([
		// Not in the sparse index: documents without a rank, and those a range leaves open.
		[{ rank: null }, ["id", "asc"]],
		[{ rank: { gt: 1 } }, undefined],
		[{}, ["rank", "asc"]],
		[{ state: "A" }, ["rank", "asc"]],
		[{ createdAt: "x" }, ["state", "asc"]],
		[{ state: "A", owner: "o" }, ["createdAt", "asc"]]
	] as const)("no index serves %j ordered by %j", (where, orderBy) => {
		expect(() => servingIndex(spec, where as never, orderBy as never)).toThrow(/no index serves/);
	});
});

describe("NATS credentials", () => {
	const bus = newBusKeyring().env("verifier");
	const options = (env: Record<string, string>) => brokerOptions(loadConfig({ SERVICES: "verifier", ...bus, ...env })).transporter as unknown as { opts: { url: string } };

	test("go into every transporter URL (Moleculer takes them from the URL only)", () => {
		expect(options({ TRANSPORTER: "nats://nats:4222", NATS_USER: "verifier", NATS_PASSWORD: "p0-._~" }).opts.url).toBe("nats://verifier:p0-._~@nats:4222");
		expect(options({ TRANSPORTER: "nats://a:4222, nats://b:4222", NATS_USER: "verifier", NATS_PASSWORD: "p" }).opts.url).toBe("nats://verifier:p@a:4222,nats://verifier:p@b:4222");
	});

	test("a tls:// TRANSPORTER requires TLS: a plaintext server in its place is refused before the credentials go out (a review)", async () => {
		// Stands in for whatever answers at the bus's address without TLS: a NATS INFO, then it listens.
		const received: string[] = [];
		const posing = net.createServer(socket => {
			socket.on("data", chunk => received.push(chunk.toString()));
			socket.on("error", () => {});
			socket.write(`INFO {"server_id":"posing","version":"2.10.0","proto":1,"host":"127.0.0.1","port":4222,"max_payload":1048576}\r\n`);
		});
		await new Promise<void>(resolve => posing.listen(0, "127.0.0.1", resolve));
		const { port } = posing.address() as net.AddressInfo;
		const transporter = options({ TRANSPORTER: `tls://127.0.0.1:${port}`, NATS_USER: "verifier", NATS_PASSWORD: "bus-password-0123" });
		expect(transporter.opts).toMatchObject({ tls: {} });
		expect(options({ TRANSPORTER: "nats://nats:4222", NATS_USER: "verifier", NATS_PASSWORD: "p" }).opts).not.toHaveProperty("tls");
		// The scheme in any case (a URL's scheme is case-insensitive, and the config takes TLS://).
		expect(options({ TRANSPORTER: "TLS://nats:4222", NATS_USER: "verifier", NATS_PASSWORD: "p" }).opts).toMatchObject({ tls: {}, url: "TLS://verifier:p@nats:4222" });
		// No reconnection: its timer would outlive the test.
		const broker = new ServiceBroker({ nodeID: "tls-check", logger: false, transit: { disableReconnect: true }, transporter: natsTransporter(`tls://127.0.0.1:${port}`, "verifier", "bus-password-0123") });
		const started = broker.start().then(
			() => "connected",
			(err: Error) => err.message
		);
		try {
			await Promise.race([started, new Promise(resolve => setTimeout(resolve, 1500))]);
			expect(received.join("")).not.toContain("bus-password-0123");
		} finally {
			await broker.stop().catch(() => {});
			posing.close();
		}
	});

	test("on the bus, a node id starts with its group, which NATS permissions match as a subject token", () => {
		const options = brokerOptions(loadConfig({ TRANSPORTER: "nats://nats:4222", NATS_USER: "verifier", SERVICES: "verifier", ...bus }));
		expect(options.nodeID).toBe(`verifier.${os.hostname()}-${process.pid}`);
		expect(options.internalServices).toBe(false);
		expect(brokerOptions(loadConfig({})).nodeID).toBe(`${os.hostname()}-${process.pid}`);
	});

	test("a TRANSPORTER that is not nats:// URLs, or holds credentials, is refused without echoing it", () => {
		for (const bad of ["nats://u:secret@nats:4222", "http://nats:4222", "nats//nats", "nats://a:4222,::"]) {
			expect(() => loadConfig({ TRANSPORTER: bad })).toThrow(/TRANSPORTER/);
			try {
				loadConfig({ TRANSPORTER: bad });
			} catch (err) {
				expect((err as Error).message).not.toContain("secret");
			}
		}
	});

	test("only URL-safe credentials are accepted", () => {
		for (const bad of ["p@ss", "a:b", "with space", "sl/ash", "q?x"]) expect(() => loadConfig({ NATS_PASSWORD: bad })).toThrow(/NATS_PASSWORD/);
	});
});
