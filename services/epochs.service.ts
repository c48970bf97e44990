/**
 * epochs: owns the epoch sequence (SPEC §8). Epochs are numbered from 1. Closing epoch E opens
 * E + 1, has the mempool archive every terminal intent of E or earlier, and records the Merkle
 * root of the executed ones. A close is resumable: it is marked `closing` first, and a close left
 * half-done by a crash is finished at the next start (or minute).
 */
import type { Context, ServiceBroker, ServiceSchema } from "moleculer";
import type { Config } from "../lib/config";
import { ServiceError } from "../lib/errors";
import type { Collection } from "../lib/store";
import { storeMixin } from "../mixins/store.mixin";
import { sweeperMixin } from "../mixins/sweeper.mixin";

export interface EpochCloseResult {
	epoch: number;
	startedAt: string;
	closedAt: string;
	executed: number;
	canceled: number;
	volume: Record<string, string>;
	root: string;
	archived: number;
}

interface EpochDoc {
	/** The epoch number as a string. */
	id: string;
	epoch: number;
	status: "open" | "closing" | "closed";
	startedAt: string;
	closedAt: string | null;
	result: EpochCloseResult | null;
}

const ARCHIVE_BATCH = 500;
/** SPEC §8: the age check runs at start and every minute. */
const CHECK_INTERVAL_MS = 60_000;

export function epochsService(config: Config): ServiceSchema {
	let epochs: Collection<EpochDoc>;
	let broker: ServiceBroker;

	async function openEpoch(): Promise<EpochDoc> {
		const [open] = await epochs.list({ where: { status: "open" }, orderBy: ["epoch", "desc"], limit: 1 });
		if (!open) throw new ServiceError("NOT_READY", "No epoch is open");
		return open;
	}

	/** Steps after the `closing` mark; each is idempotent, so a resumed close repeats them safely. */
	async function finishClose(closing: EpochDoc, closedAt: string): Promise<EpochCloseResult> {
		const next: EpochDoc = { id: String(closing.epoch + 1), epoch: closing.epoch + 1, status: "open", startedAt: closedAt, closedAt: null, result: null };
		if (await epochs.insert(next)) broker.broadcast("epochs.opened", { epoch: next.epoch });
		while ((await broker.call<number, object>("mempool.archiveTerminal", { epoch: closing.epoch, limit: ARCHIVE_BATCH })) > 0);
		const summary = await broker.call<Pick<EpochCloseResult, "executed" | "canceled" | "volume" | "root">, object>("mempool.archiveSummary", { epoch: closing.epoch });
		const result: EpochCloseResult = { epoch: closing.epoch, startedAt: closing.startedAt, closedAt, ...summary, archived: summary.executed + summary.canceled };
		await epochs.update(closing.id, { status: "closing" }, { ...closing, status: "closed", closedAt, result });
		const stored = await epochs.get(closing.id);
		return stored?.result ?? result;
	}

	/** Closes the open epoch; exactly one of concurrent callers wins, the others get 409. */
	async function close(expectedEpoch?: number): Promise<EpochCloseResult> {
		const open = await openEpoch();
		if (expectedEpoch !== undefined && open.epoch !== expectedEpoch) throw new ServiceError("INVALID_TRANSITION", `Epoch ${expectedEpoch} is not open`);
		const closedAt = new Date().toISOString();
		const closing: EpochDoc = { ...open, status: "closing", closedAt };
		if (!(await epochs.update(open.id, { status: "open" }, closing))) throw new ServiceError("INVALID_TRANSITION", `Epoch ${open.epoch} is already being closed`, { epoch: open.epoch });
		return finishClose(closing, closedAt);
	}

	/** At start and every minute: finish interrupted closes, and close an epoch older than EPOCH_DURATION_MS. */
	async function maintain(): Promise<void> {
		for (const closing of await epochs.list({ where: { status: "closing" } })) await finishClose(closing, closing.closedAt ?? new Date().toISOString());
		const open = await openEpoch();
		if (Date.parse(open.startedAt) + config.epochDurationMs <= Date.now()) await close(open.epoch).catch(err => {
			if ((err as ServiceError).type !== "INVALID_TRANSITION") throw err;
		});
	}

	return {
		name: "epochs",
		dependencies: ["mempool"],
		mixins: [
			storeMixin(config, "epochs", async store => {
				epochs = await store.collection<EpochDoc>({ name: "epochs", fields: { epoch: "integer", status: "text" }, unique: [["epoch"]], indexes: [["status", "epoch"]] });
				// The first start opens epoch 1; insert() is a no-op on every later start.
				await epochs.insert({ id: "1", epoch: 1, status: "open", startedAt: new Date().toISOString(), closedAt: null, result: null });
			}),
			sweeperMixin("epoch", CHECK_INTERVAL_MS, () => maintain())
		],

		actions: {
			/** Internal: the open epoch. */
			current: {
				params: {},
				async handler(): Promise<{ epoch: number; startedAt: string }> {
					const { epoch, startedAt } = await openEpoch();
					return { epoch, startedAt };
				}
			},

			/** GET /epoch/status: EpochStatus over the intents the next close will archive. */
			status: {
				params: { $$strict: true },
				async handler(ctx: Context) {
					const { epoch, startedAt } = await openEpoch();
					const totals = await ctx.call<{ intents: object; volume: object }>("mempool.epochTotals");
					return { epoch, startedAt, ...totals };
				}
			},

			/** POST /epoch/close */
			close: {
				params: { $$strict: true },
				handler: () => close()
			}
		},

		created() {
			broker = this.broker;
		},

		async started() {
			await maintain();
		}
	};
}
