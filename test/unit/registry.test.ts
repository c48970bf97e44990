/** The genesis seed file of SPEC §5 ("Genesis routes"). */
import { parseRegistrySeed, toRouteView, type RouteRecord } from "../../lib/registry";

const OWNER = "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM";
const HEX_A = "a".repeat(64);
const HEX_B = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";

const good = () => [
	{ tin: "1234567897", routeCommitment: HEX_A, routeVersion: 1, policyCommitment: HEX_B, ownerWallet: OWNER },
	{ tin: "4000000002", routeCommitment: HEX_B, routeVersion: 3, policyCommitment: HEX_A }
];

/** The message parseRegistrySeed throws for `content` (fails the test when it accepts it). */
function problem(content: unknown): string {
	const text = typeof content === "string" ? content : JSON.stringify(content);
	try {
		parseRegistrySeed(text);
	} catch (err) {
		return (err as Error).message;
	}
	throw new Error(`expected ${text} to be refused`);
}

describe("parseRegistrySeed", () => {
	it("accepts a good file and returns its routes", () => {
		expect(parseRegistrySeed(JSON.stringify(good()))).toEqual(good());
	});

	it("accepts an empty array and pretty-printed JSON", () => {
		expect(parseRegistrySeed("[]")).toEqual([]);
		expect(parseRegistrySeed(JSON.stringify(good(), null, 2))).toHaveLength(2);
	});

	it("refuses a file that is not JSON", () => {
		expect(problem("[{tin: 1234567897}]")).toMatch(/not valid JSON/);
		expect(problem("")).toMatch(/not valid JSON/);
	});

	it.each([
		["an object", { tin: "1234567897" }],
		["a string", "routes"],
		["null", null],
		["a number", 1]
	])("refuses a top-level %s", (_label, value) => {
		expect(problem(JSON.stringify(value))).toMatch(/must be a JSON array/);
	});

	it("refuses an entry that is not an object", () => {
		expect(problem([good()[0], "x"])).toMatch(/entry 1: not an object/);
		expect(problem([null])).toMatch(/entry 0: not an object/);
		expect(problem([[1]])).toMatch(/entry 0: not an object/);
	});

	it.each([
		["a wrong Luhn digit", "1234567890"],
		["a leading zero", "0234567899"],
		["9 digits", "123456789"],
		["a number instead of a string", 1234567897]
	])("refuses a TIN with %s", (_label, tin) => {
		expect(problem([{ ...good()[0], tin }])).toMatch(/entry 0: tin must be a 10-digit Luhn-valid TIN/);
	});

	it("refuses a missing TIN", () => {
		const { tin: _tin, ...rest } = good()[0];
		expect(problem([rest])).toMatch(/entry 0: tin must be/);
	});

	it("refuses a duplicate TIN, naming it and the entry", () => {
		const [a, b] = good();
		expect(problem([a, b, { ...a, routeVersion: 2 }])).toMatch(/entry 2: tin 1234567897 appears twice/);
	});

	it.each([
		["uppercase", "A".repeat(64)],
		["63 characters", "a".repeat(63)],
		["65 characters", "a".repeat(65)],
		["a non-hex character", `${"a".repeat(63)}g`],
		["a 0x prefix", `0x${"a".repeat(62)}`]
	])("refuses commitments with %s", (_label, hex) => {
		expect(problem([{ ...good()[0], routeCommitment: hex }])).toMatch(/entry 0: routeCommitment must be 64 lowercase hex/);
		expect(problem([{ ...good()[0], policyCommitment: hex }])).toMatch(/entry 0: policyCommitment must be 64 lowercase hex/);
	});

	it.each([
		["0", 0],
		["-1", -1],
		["1.5", 1.5],
		['"1"', "1"],
		["null", null],
		["2^53", 2 ** 53]
	])("refuses routeVersion %s", (_label, routeVersion) => {
		expect(problem([{ ...good()[0], routeVersion }])).toMatch(/entry 0: routeVersion must be an integer ≥ 1/);
	});

	it("refuses a missing routeVersion", () => {
		const { routeVersion: _v, ...rest } = good()[0];
		expect(problem([rest])).toMatch(/routeVersion must be/);
	});

	it("refuses unknown fields, naming them", () => {
		expect(problem([{ ...good()[0], owner: OWNER, active: true }])).toMatch(/entry 0: unknown field\(s\) owner, active/);
	});

	it.each([
		["not base58", "0OIl".repeat(8)],
		["31 bytes", "1111111111111111111111111111111"],
		["a hex string", HEX_A],
		["null", null],
		["a number", 42]
	])("refuses an ownerWallet that is %s", (_label, ownerWallet) => {
		expect(problem([{ ...good()[0], ownerWallet }])).toMatch(/entry 0: ownerWallet must be a base58 32-byte address/);
	});

	it("reports every problem of every entry at once", () => {
		const message = problem([
			{ ...good()[0], routeVersion: 0 },
			{ ...good()[1], tin: "4000000001", policyCommitment: "x", extra: 1 }
		]);
		expect(message).toContain("entry 0: routeVersion");
		expect(message).toContain("entry 1: unknown field(s) extra");
		expect(message).toContain("entry 1: tin must be");
		expect(message).toContain("entry 1: policyCommitment");
		expect(message).not.toContain("entry 0: tin");
	});
});

describe("toRouteView", () => {
	it("answers the public fields only (no owner, no id)", () => {
		const route: RouteRecord = {
			id: "1234567897",
			tin: "1234567897",
			routeCommitment: HEX_A,
			routeVersion: 2,
			policyCommitment: HEX_B,
			ownerWallet: OWNER,
			active: true,
			updatedAt: "2026-11-21T18:00:00.000Z"
		};
		expect(toRouteView(route)).toEqual({
			tin: "1234567897",
			routeCommitment: HEX_A,
			routeVersion: 2,
			policyCommitment: HEX_B,
			active: true,
			updatedAt: "2026-11-21T18:00:00.000Z"
		});
	});
});
