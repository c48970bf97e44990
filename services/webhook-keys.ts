/** WEBHOOK_SECRETS_KEY's derived keys (lib/webhooks.ts), for the webhooks owners, the event owners and the delivery workers. */
import type { Service } from "moleculer";
import type { Config } from "../lib/config";
import { loadOrCreateWebhookSecretsKey } from "../lib/secrets";
import { webhookKeys, type WebhookKeys } from "../lib/webhooks";

/** From WEBHOOK_SECRETS_KEY, or the key of DATA_DIR in the embedded mode (generated on first start). */
export function loadWebhookKeys(config: Config, logger: Service["logger"]): WebhookKeys {
	const key = loadOrCreateWebhookSecretsKey(config.webhookSecretsKeys, config.dataDir);
	if (key.generated) logger.info(`Generated the webhook secrets key into ${key.source}.`);
	return webhookKeys(key.value, config.webhookSecretsNextKeys);
}
