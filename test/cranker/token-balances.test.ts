/**
 * What the Cranker reads as its liquidity, against the local chain: the associated token account of
 * each mint it pays out in, and nothing another account, a frozen one or an unlisted mint holds;
 * an answer cut short is a failed read; a listed mint it can never pay in is told.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
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

test("an answer that is not one entry per account asked is a failed read, not empty accounts", async () => {
	const owner = address(generateKeypair().publicKey);
	const mints = [local.createMint(6), local.createMint(6)];
	// A stand-in RPC (a proxy cutting the answer short) that answers one entry for two accounts.
	const server = http.createServer((req, res) => {
		let body = "";
		req.on("data", chunk => (body += chunk));
		req.on("end", () => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ jsonrpc: "2.0", id: JSON.parse(body).id, result: { context: { slot: 1 }, value: [null] } })));
	});
	await new Promise<void>(resolve => server.listen(0, "127.0.0.1", resolve));
	try {
		const chain = new Chain(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
		await expect(chain.tokenBalances(owner, mints)).rejects.toThrow("getMultipleAccounts answered 1 entries for 2 accounts");
	} finally {
		await new Promise(resolve => server.close(resolve));
	}
});

test("a listed mint it can never pay in is told: missing on this chain, another program's, or not a mint", async () => {
	const mint = local.createMint(6);
	const missing = address(generateKeypair().publicKey);
	const wallet = address(generateKeypair().publicKey);
	local.fundLamports(wallet);
	const tokenAccount = await local.fundTokens(wallet, mint, 1n);
	expect(await new Chain(local.url).mintProblems([mint, missing, wallet, tokenAccount])).toEqual([
		`${missing} does not exist on this chain (is SOLANA_RPC_URL on the Node's cluster?)`,
		`${wallet} is not a classic SPL Token mint (another program owns it)`,
		`${tokenAccount} is an SPL Token account but not a mint`
	]);
});
