/**
 * What the Cranker reads as its liquidity, against the local chain: the associated token account of
 * each mint it pays out in, and nothing another account, a frozen one or an unlisted mint holds.
 */
import { AccountState } from "@solana-program/token";
import { address } from "@solana/kit";
import { Chain } from "../../cranker/chain";
import { generateKeypair } from "../../lib/ed25519";
import { LocalChain } from "../../devkit/local-chain";

const local = new LocalChain();
beforeAll(() => local.start());
afterAll(() => local.stop());

test("liquidity is the associated account of each listed mint: 0 when missing or frozen, other accounts and mints not read", async () => {
	const owner = address(generateKeypair().publicKey);
	const [paid, frozen, missing, unlisted] = [6, 6, 6, 0].map(decimals => local.createMint(decimals));
	await local.fundTokens(owner, paid, 500n);
	// Another token account of the same mint, opened by anyone for the owner: not what it pays from.
	await local.fundTokens(owner, paid, 10n ** 12n, { at: address(generateKeypair().publicKey) });
	await local.fundTokens(owner, frozen, 700n, { state: AccountState.Frozen });
	await local.fundTokens(owner, unlisted, 10n ** 18n);

	const balances = await new Chain(local.url).tokenBalances(owner, [paid, frozen, missing]);
	expect(balances).toEqual(new Map([[paid, 500n], [frozen, 0n], [missing, 0n]]));
	expect(local.calls.get("getMultipleAccounts")).toBe(1);
});
