/**
 * A first payment for a newcomer: signs a payment intent with a fresh local key, submits it to a
 * running service, and prints its status and the equivalent curl command.
 *
 *   REGISTRY_SEED_FILE=examples/registry-seed.json npm start     # in one terminal
 *   npm run example:intent                                         # in another
 *
 * BASE_URL (default http://localhost:3000), TIN (default 1234567897, in the example seed), MINT,
 * AMOUNT and EXPIRES_AT_SLOT choose what is paid. The intent stays VERIFIED until a settlement
 * Cranker leases it (see the README's Cranker section).
 */
import { randomBytes } from "node:crypto";
import { LocalKeypairSigner, SettlementClient, SettlementError } from "../sdk";

/** An example mint (32 bytes of 7, base58): any mint is accepted; only a Cranker's liquidity makes one settle. */
const EXAMPLE_MINT = "US517G5965aydkZ46HS38QLi7UQiSojurfbQfKCELFx";

async function main(): Promise<void> {
	const baseUrl = (process.env.BASE_URL ?? "http://localhost:3000").replace(/\/+$/, "");
	const tin = process.env.TIN ?? "1234567897";
	const client = new SettlementClient({ baseUrl });
	const readiness = await client.checkReadiness();
	if (!readiness.canSubmit) throw new Error(`no service ready at ${baseUrl}: start one with REGISTRY_SEED_FILE=examples/registry-seed.json npm start`);

	const route = await client.resolveTin(tin);
	const signer = LocalKeypairSigner.generate();
	const intent = await client.signPayment(signer, {
		paymentId: `pay_${randomBytes(12).toString("hex")}`,
		recipientTin: tin,
		route,
		tokenMintAddress: process.env.MINT ?? EXAMPLE_MINT,
		amount: process.env.AMOUNT ?? "1000",
		feeLimit: "5000",
		expiresAtSlot: Number(process.env.EXPIRES_AT_SLOT ?? 1_000_000_000)
	});
	const record = await client.submit(intent);

	console.log(`sender (fresh local key)  ${signer.address}`);
	console.log(`recipient TIN             ${tin} (route version ${route.routeVersion})`);
	console.log(`intent                    ${record.id}`);
	console.log(`status                    ${record.status}`);
	console.log(`\nThe same request with curl (it answers 200 with the same record: paymentId is idempotent):\n`);
	console.log(`curl -sS -X POST ${baseUrl}/intents -H 'content-type: application/json' -d '${JSON.stringify(intent)}'`);
	console.log(`\nIts status later:  curl -sS ${baseUrl}/intents/${record.id}`);
}

main().catch(err => {
	const detail = err instanceof SettlementError ? `${err.type}: ${err.message}` : (err as Error).message;
	process.stderr.write(`example:intent failed: ${detail}\n`);
	process.exit(1);
});
