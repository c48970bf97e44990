/** TIN rules of SPEC §0 and the sequence allocation of SPEC §5. */
import { firstOutside, isValidTin, luhnCheckDigit, sequenceOf, tinFromSequence, withSequences } from "../../lib/tin";

/** An independent Luhn check over all ten digits (the textbook form: sum mod 10 = 0). */
function luhnValid(digits: string): boolean {
	let sum = 0;
	for (let i = 0; i < digits.length; i++) {
		let d = Number(digits[digits.length - 1 - i]);
		if (i % 2 === 1) {
			d *= 2;
			if (d > 9) d -= 9;
		}
		sum += d;
	}
	return sum % 10 === 0;
}

describe("isValidTin", () => {
	it.each(["4000000002", "1234567897", "1000000008", "9999999999"])("accepts %s", tin => {
		expect(isValidTin(tin)).toBe(true);
	});

	it.each(["4000000001", "1234567890", "1234567898", "1000000000"])("refuses %s (wrong check digit)", tin => {
		expect(isValidTin(tin)).toBe(false);
	});

	it("refuses a leading 0, even with a correct Luhn digit", () => {
		expect(luhnValid("0000000000")).toBe(true);
		expect(luhnValid("0234567899")).toBe(true);
		expect(isValidTin("0000000000")).toBe(false);
		expect(isValidTin("0234567899")).toBe(false);
	});

	it.each([
		["9 digits", "123456789"],
		["11 digits", "12345678970"],
		["a letter", "12345678a7"],
		["a space", " 1234567897"],
		["a trailing newline", "1234567897\n"],
		["a sign", "+123456789"],
		["full-width digits", "１２３４５６７８９７"],
		["empty", ""]
	])("refuses %s", (_label, value) => {
		expect(isValidTin(value)).toBe(false);
	});

	it("detects every single-digit substitution of a valid TIN", () => {
		for (const tin of ["4000000002", "1234567897", "1000000008", "9876543217"]) {
			expect(isValidTin(tin)).toBe(true);
			let checked = 0;
			for (let position = 0; position < 10; position++) {
				for (let digit = 0; digit <= 9; digit++) {
					if (tin[position] === String(digit)) continue;
					const mistyped = tin.slice(0, position) + digit + tin.slice(position + 1);
					expect({ mistyped, valid: isValidTin(mistyped) }).toEqual({ mistyped, valid: false });
					checked++;
				}
			}
			expect(checked).toBe(90);
		}
	});

	it("agrees with an independent Luhn check on a range of TINs", () => {
		for (let n = 123_456_000; n < 123_457_000; n++) {
			for (let check = 0; check <= 9; check++) {
				const candidate = `${n}${check}`;
				expect(isValidTin(candidate)).toBe(luhnValid(candidate));
			}
		}
	});
});

describe("luhnCheckDigit", () => {
	it("gives the SPEC examples' check digits", () => {
		expect(luhnCheckDigit("400000000")).toBe(2);
		expect(luhnCheckDigit("123456789")).toBe(7);
		expect(luhnCheckDigit("100000000")).toBe(8);
	});
});

describe("tinFromSequence", () => {
	it("100000000 → 1000000008 (SPEC §5)", () => {
		expect(tinFromSequence(100000000)).toBe("1000000008");
	});

	it("123456789 → 1234567897 and 999999999 → 9999999999", () => {
		expect(tinFromSequence(123456789)).toBe("1234567897");
		expect(tinFromSequence(999999999)).toBe("9999999999");
	});

	it("always produces a valid TIN", () => {
		for (let s = 100_000_000; s < 100_002_000; s += 7) expect(isValidTin(tinFromSequence(s))).toBe(true);
	});

	it.each([99_999_999, 1_000_000_000, 0, -100000000, 100000000.5, Number.NaN])("refuses sequence %p (not 9 digits)", sequence => {
		expect(() => tinFromSequence(sequence)).toThrow(RangeError);
	});
});

describe("seeded sequence runs", () => {

	it("gathers the seeded sequence numbers into sorted runs that neither overlap nor touch, over several seeds", () => {
		const first = withSequences([], [100_000_005, 100_000_001, 100_000_002, 100_000_002, 100_000_009]);
		expect(first).toStrictEqual([
			{ start: 100_000_001, end: 100_000_003 },
			{ start: 100_000_005, end: 100_000_006 },
			{ start: 100_000_009, end: 100_000_010 }
		]);
		// A second seed that fills the gaps joins the runs it touches.
		expect(withSequences(first, [100_000_003, 100_000_004, 100_000_010])).toStrictEqual([
			{ start: 100_000_001, end: 100_000_006 },
			{ start: 100_000_009, end: 100_000_011 }
		]);
		expect(first).toHaveLength(3);
		expect(withSequences(first, [])).toStrictEqual(first);
		expect(sequenceOf(tinFromSequence(100_000_009))).toBe(100_000_009);
	});

	it("gives the first sequence number outside every run: the end of the run that holds n, else n", () => {
		const runs = withSequences([], [100_000_001, 100_000_002, 100_000_005, 999_999_999]);
		expect(firstOutside([], 100_000_000)).toBe(100_000_000);
		expect(firstOutside(runs, 100_000_000)).toBe(100_000_000);
		expect(firstOutside(runs, 100_000_001)).toBe(100_000_003);
		expect(firstOutside(runs, 100_000_002)).toBe(100_000_003);
		expect(firstOutside(runs, 100_000_003)).toBe(100_000_003);
		expect(firstOutside(runs, 100_000_005)).toBe(100_000_006);
		expect(firstOutside(runs, 100_000_006)).toBe(100_000_006);
		// Past the last sequence number: the caller refuses it (LIMIT_REACHED).
		expect(firstOutside(runs, 999_999_999)).toBe(1_000_000_000);
	});
});
