/**
 * The gateway alone, over real HTTP, with stand-ins for its neighbours: POST /intents, which the
 * front door serves, hands the submissions of one intake window to receiver.submitMany in one
 * call and answers each request with its own submission's outcome; GET /intent-work asks a
 * mempool in its own process for the whole list in one page.
 */
import { Errors, ServiceBroker, type Context } from "moleculer";
import { loadConfig } from "../../lib/config";
import { requestDigest } from "../../lib/digest";
import { newId } from "../../lib/ids";
import { INTAKE_BATCH_ENOUGH, decidedRecord, type Submission, type SubmissionAnswer } from "../../lib/intake";
import { toPublicView, toWorkerView, type CreateIntentRequest, type WorkPage } from "../../lib/intents";
import { brokerOptions } from "../../moleculer.config";
import type { StoredEvent } from "../../lib/store";
import { TIN_OPERATION_EVENT_TYPE } from "../../lib/tin-operations";
import { newWebhookRecord, toWebhookView } from "../../lib/webhooks";
import { apiService } from "../../services/api.service";
import { newRoute, newWallet, signedIntent } from "../helpers/fixtures";
import { httpClient, tempDir } from "../helpers/node";
import { openStream } from "../helpers/sse";

const route = newRoute();

/** What the stand-in receiver answers a submission; by default 201 with a view that echoes the request. */
type Decide = (request: CreateIntentRequest) => SubmissionAnswer;
const created: Decide = request => ({ status: 201, view: viewOf(request) });

/** The record a verified submission is stored as. */
function recordOf(request: CreateIntentRequest) {
	const at = request.senderAuthorizationIssuedAt;
	return decidedRecord({ id: newId("int"), request, requestDigest: requestDigest(request), transactionCommitment: request.transactionCommitment!, epoch: 1, at, intakeCall: null }, { ok: true });
}

/** The public view the receiver would answer. */
const viewOf = (request: CreateIntentRequest) => toPublicView(recordOf(request));

async function startGateway(env: Record<string, string>, decide: { current: Decide | Error }, neighbours: (broker: ServiceBroker) => void = () => {}) {
	const batches: Submission[][] = [];
	const config = loadConfig({ PORT: "0", DATA_DIR: tempDir(), WORKER_API_KEYS: "test-worker-key-0123456789", RATE_LIMIT_PER_MIN: "0", ...env });
	// The broker's own settings (its validator's messages among them), without a log.
	const broker = new ServiceBroker({ ...brokerOptions(config), logger: false });
	broker.createService(apiService(config));
	broker.createService({
		name: "receiver",
		actions: {
			submitMany: {
				visibility: "public",
				handler(ctx: Context<{ submissions: Submission[] }>): SubmissionAnswer[] {
					batches.push(ctx.params.submissions);
					const answer = decide.current;
					if (answer instanceof Error) throw answer;
					return ctx.params.submissions.map(({ request }) => answer(request));
				}
			}
		}
	});
	neighbours(broker);
	await broker.start();
	const api = broker.getLocalService("api") as unknown as { server: { address(): { port: number } } };
	return { broker, batches, http: httpClient(`http://127.0.0.1:${api.server.address().port}`) };
}

describe("POST /intents through the front door", () => {
	const decide: { current: Decide | Error } = { current: created };
	let gateway: Awaited<ReturnType<typeof startGateway>>;
	// A window long enough that requests sent together surely fall into one.
	beforeAll(async () => (gateway = await startGateway({ INTAKE_WINDOW_MS: "250" }, decide)));
	afterAll(() => gateway.broker.stop());
	beforeEach(() => {
		decide.current = created;
		gateway.batches.length = 0;
	});

	test("the submissions of one window go to the receiver in one call, and each request gets its own answer", async () => {
		// Fewer than make a batch leave early.
		const requests = Array.from({ length: INTAKE_BATCH_ENOUGH - 1 }, () => signedIntent(newWallet(), route));
		const answers = await Promise.all(requests.map(request => gateway.http("POST", "/intents", request)));
		expect(gateway.batches.map(batch => batch.length)).toEqual([requests.length]);
		answers.forEach((answer, i) => {
			expect([answer.status, answer.body.paymentId, answer.headers.get("location")]).toEqual([201, requests[i].paymentId, `/intents/${answer.body.id}`]);
		});
		// Each submission carries a key of its own.
		expect(new Set(gateway.batches[0].map(submission => submission.call)).size).toBe(requests.length);
	});

	test("a refused submission gets its error, and the others of its batch their answers", async () => {
		const requests = Array.from({ length: 4 }, () => signedIntent(newWallet(), route));
		const refused = requests[2].paymentId;
		decide.current = request =>
			request.paymentId === refused ? { refused: { type: "NONCE_REUSED", message: "The authorization nonce was already used by this sender", data: { id: "int_x", paymentId: refused } } } : created(request);
		const answers = await Promise.all(requests.map(request => gateway.http("POST", "/intents", request)));
		expect(answers.map(answer => answer.status)).toEqual([201, 201, 409, 201]);
		expect(answers[2].body).toEqual({ name: "NonceReusedError", message: "The authorization nonce was already used by this sender", code: 409, type: "NONCE_REUSED", data: { id: "int_x", paymentId: refused } });
	});

	test("a batch that fails fails each of its requests with that failure, and the next batch goes on", async () => {
		decide.current = new Errors.ServiceNotAvailableError({ action: "receiver.submitMany" });
		const failed = await Promise.all([0, 1, 2].map(() => gateway.http("POST", "/intents", signedIntent(newWallet(), route))));
		expect(failed.map(answer => [answer.status, answer.body.type, answer.headers.get("retry-after")])).toEqual(Array(3).fill([503, "NOT_READY", "1"]));
		decide.current = created;
		expect((await gateway.http("POST", "/intents", signedIntent(newWallet(), route))).status).toBe(201);
	});

	test("a body the schema refuses is answered at once and never handed over", async () => {
		const answer = await gateway.http("POST", "/intents", { ...signedIntent(newWallet(), route), amount: "01" });
		expect(answer.body).toMatchObject({ code: 422, type: "VALIDATION_ERROR", data: [{ field: "amount", type: "stringPattern" }, { field: "amount", type: "u64" }] });
		expect(gateway.batches).toEqual([]);
	});
});

test(`a batch of ${INTAKE_BATCH_ENOUGH} leaves without waiting out its window`, async () => {
	const decide: { current: Decide | Error } = { current: created };
	// A window longer than the test may take: its answers come only if the batch leaves early.
	const gateway = await startGateway({ INTAKE_WINDOW_MS: "60000" }, decide);
	try {
		const answers = await Promise.all(Array.from({ length: INTAKE_BATCH_ENOUGH }, () => gateway.http("POST", "/intents", signedIntent(newWallet(), route))));
		expect(answers.map(answer => answer.status)).toEqual(Array(INTAKE_BATCH_ENOUGH).fill(201));
		expect(gateway.batches.map(batch => batch.length)).toEqual([INTAKE_BATCH_ENOUGH]);
	} finally {
		await gateway.broker.stop();
	}
});

test("INTAKE_WINDOW_MS=0: the submissions of one event-loop turn make a batch", async () => {
	const decide: { current: Decide | Error } = { current: created };
	const gateway = await startGateway({ INTAKE_WINDOW_MS: "0" }, decide);
	try {
		// One request at a time: each is its own turn, so its own batch.
		for (let i = 0; i < 3; i++) expect((await gateway.http("POST", "/intents", signedIntent(newWallet(), route))).status).toBe(201);
		expect(gateway.batches.map(batch => batch.length)).toEqual([1, 1, 1]);
	} finally {
		await gateway.broker.stop();
	}
});

test("GET /intent-work with the mempool in this process: the whole list in one page, each stored view inside its item", async () => {
	const views = Array.from({ length: 250 }, () => JSON.stringify(toWorkerView(recordOf(signedIntent(newWallet(), route)))));
	const asked: number[] = [];
	const gateway = await startGateway({}, { current: created }, broker =>
		broker.createService({
			name: "mempool",
			actions: {
				workPage: {
					visibility: "public",
					handler(ctx: Context<{ limit: number; after?: { id: string } }>): WorkPage {
						asked.push(ctx.params.limit);
						const from = ctx.params.after ? views.findIndex(view => (JSON.parse(view) as { id: string }).id === ctx.params.after!.id) + 1 : 0;
						const page = views.slice(from, from + ctx.params.limit);
						const last = page.length ? (JSON.parse(page[page.length - 1]) as { createdAt: string; id: string }) : null;
						return { intents: page, leaseTtlMs: 1234, last: last && { createdAt: last.createdAt, id: last.id } };
					}
				}
			}
		})
	);
	try {
		const { status, body } = await gateway.http("GET", "/intent-work?limit=500", undefined, { "x-api-key": "test-worker-key-0123456789" });
		expect(status).toBe(200);
		// Pages of WORK_PAGE are for a mempool across the bus; this one answers the list at once.
		expect(asked).toEqual([500]);
		expect(body).toEqual(views.map(view => ({ intent: JSON.parse(view) as unknown, leaseTtlMs: 1234 })));
	} finally {
		await gateway.broker.stop();
	}
});

test("GET /events with owners of the previous version (a rolling update): their logs stream from `events` and `latestEvent`, which they serve", async () => {
	const logs: Record<string, StoredEvent[]> = {
		mempool: [],
		tin: [1, 2, 3].map(seq => ({ seq, subject: `top_${seq}`, type: TIN_OPERATION_EVENT_TYPE, at: new Date().toISOString(), data: { previousState: null, state: "PENDING_VERIFICATION", view: { id: `top_${seq}` } } }))
	};
	const ownerOfThePreviousVersion = (name: string) => ({
		name,
		actions: {
			latestEvent: { visibility: "public" as const, handler: () => logs[name].at(-1) ?? null },
			events: { visibility: "public" as const, handler: (ctx: Context<{ after: number; limit: number }>) => logs[name].filter(event => event.seq > ctx.params.after).slice(0, ctx.params.limit) }
		}
	});
	const gateway = await startGateway({}, { current: created }, broker => {
		broker.createService(ownerOfThePreviousVersion("mempool"));
		broker.createService(ownerOfThePreviousVersion("tin"));
	});
	const port = (gateway.broker.getLocalService("api") as unknown as { server: { address(): { port: number } } }).server.address().port;
	const stream = await openStream(`http://127.0.0.1:${port}/events`, { "x-api-key": "test-worker-key-0123456789", "last-event-id": "0-0" });
	try {
		expect(stream.status).toBe(200);
		expect((await stream.waitFor(3)).map(event => [event.id, event.data.subject])).toEqual([["0-1", "top_1"], ["0-2", "top_2"], ["0-3", "top_3"]]);
	} finally {
		stream.close();
		await gateway.broker.stop();
	}
});

test("GET /webhooks with a webhooks owner of the previous version (a rolling update): its one list, not pages it cannot serve", async () => {
	const subscriptions = [1, 2].map(() => toWebhookView(newWebhookRecord({ url: "https://hooks.example.com/in", eventTypes: ["intent.status_changed"] }, { intents: 0, tin_operations: null }, new Date())));
	const asked: object[] = [];
	const gateway = await startGateway({}, { current: created }, broker =>
		broker.createService({
			name: "webhooks",
			actions: {
				list: {
					visibility: "public",
					handler(ctx: Context<{ limit: number }>) {
						asked.push(ctx.params);
						return subscriptions.slice(0, ctx.params.limit);
					}
				}
			}
		})
	);
	try {
		const { status, body } = await gateway.http("GET", "/webhooks?limit=100", undefined, { "x-api-key": "test-worker-key-0123456789" });
		expect({ status, body }).toEqual({ status: 200, body: subscriptions });
		expect(asked).toEqual([{ limit: 100 }]);
	} finally {
		await gateway.broker.stop();
	}
});
