/**
 * epochs: owns the epoch sequence (SPEC §8). Epochs are numbered from 1; this service opens the
 * first one on first start and tells which one is current.
 */
import type { ServiceSchema } from "moleculer";
import type { Config } from "../lib/config";
import type { Collection } from "../lib/store";
import { storeMixin } from "../mixins/store.mixin";

interface EpochDoc {
	id: string;
	epoch: number;
	startedAt: string;
	closedAt: string | null;
}

export function epochsService(config: Config): ServiceSchema {
	let epochs: Collection<EpochDoc>;

	return {
		name: "epochs",
		mixins: [
			storeMixin(config, "epochs", async store => {
				epochs = await store.collection<EpochDoc>({ name: "epochs", fields: { epoch: "integer", closedAt: "text" }, unique: [["epoch"]] });
				// The first start opens epoch 1; insert() is a no-op on every later start.
				await epochs.insert({ id: "1", epoch: 1, startedAt: new Date().toISOString(), closedAt: null });
			})
		],

		actions: {
			/** Internal: the open epoch. */
			current: {
				params: {},
				async handler(): Promise<{ epoch: number; startedAt: string }> {
					const [open] = await epochs.list({ where: { closedAt: null }, orderBy: ["epoch", "desc"], limit: 1 });
					return { epoch: open.epoch, startedAt: open.startedAt };
				}
			}
		}
	};
}
