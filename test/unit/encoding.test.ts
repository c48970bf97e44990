/** Wire encodings of SPEC §0. */
import {
	AMOUNT_PATTERN,
	HEX64_PATTERN,
	IDENTIFIER_PATTERN,
	NONCE_PATTERN,
	canonicalJson,
	decodeBase58,
	encodeBase58,
	isAmount,
	isBase58OfLength,
	isIsoTime,
	sha256Hex
} from "../../lib/encoding";

describe("isAmount", () => {
	it.each(["0", "1", "1500000", "18446744073709551615", "10000000000000000000"])("accepts %s", value => {
		expect(isAmount(value)).toBe(true);
	});

	it.each([
		["u64 max + 1", "18446744073709551616"],
		["20 nines", "99999999999999999999"],
		["21 digits", "100000000000000000000"],
		["a leading zero", "01"],
		["two zeros", "00"],
		["a negative", "-1"],
		["a plus sign", "+1"],
		["a decimal point", "1.0"],
		["an exponent", "1e6"],
		["a space", " 1"],
		["a trailing newline", "1\n"],
		["hex", "0x10"],
		["empty", ""]
	])("refuses %s", (_label, value) => {
		expect(isAmount(value)).toBe(false);
	});

	it("AMOUNT_PATTERN is the SPEC's pattern", () => {
		expect(AMOUNT_PATTERN).toBe("^(0|[1-9][0-9]{0,19})$");
	});
});

describe("isIsoTime", () => {
	it("accepts what Date.prototype.toISOString writes", () => {
		for (const ms of [0, Date.parse("2026-11-21T18:00:00.000Z"), Date.parse("2024-02-29T23:59:59.999Z"), Date.now()])
			expect(isIsoTime(new Date(ms).toISOString())).toBe(true);
	});

	it.each([
		["no milliseconds", "2026-11-21T18:00:00Z"],
		["a +00:00 offset", "2026-11-21T18:00:00.000+00:00"],
		["a +01:00 offset", "2026-11-21T19:00:00.000+01:00"],
		["no zone", "2026-11-21T18:00:00.000"],
		["a lowercase z", "2026-11-21T18:00:00.000z"],
		["February 31st", "2026-02-31T00:00:00.000Z"],
		["February 29th of a common year", "2026-02-29T00:00:00.000Z"],
		["month 13", "2026-13-01T00:00:00.000Z"],
		["hour 24", "2026-11-21T24:00:00.000Z"],
		["second 60", "2026-11-21T18:00:60.000Z"],
		["a space instead of T", "2026-11-21 18:00:00.000Z"],
		["microseconds", "2026-11-21T18:00:00.000000Z"],
		["a date only", "2026-11-21"],
		["an extended year", "+002026-11-21T18:00:00.000Z"],
		["empty", ""]
	])("refuses %s", (_label, value) => {
		expect(isIsoTime(value)).toBe(false);
	});
});

describe("base58", () => {
	it("encodes and decodes, keeping leading zero bytes as leading 1s", () => {
		const bytes = Uint8Array.from([0, 0, 1, 2, 3, 255]);
		const text = encodeBase58(bytes);
		expect(text.startsWith("11")).toBe(true);
		expect(decodeBase58(text)).toEqual(bytes);
		expect(encodeBase58(new Uint8Array(32))).toBe("11111111111111111111111111111111");
	});

	it("decodes a known address to 32 bytes", () => {
		// The USDC mint on Solana: base58 of a 32-byte public key.
		expect(decodeBase58("EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v")).toHaveLength(32);
	});

	it.each(["0", "O", "I", "l", "abc!", "ab cd", "é"])("decodeBase58 returns null for %p", value => {
		expect(decodeBase58(value)).toBeNull();
	});

	it("isBase58OfLength checks the decoded length exactly", () => {
		const of = (n: number) => encodeBase58(new Uint8Array(n).fill(9));
		expect(isBase58OfLength(of(32), 32)).toBe(true);
		expect(isBase58OfLength(of(31), 32)).toBe(false);
		expect(isBase58OfLength(of(33), 32)).toBe(false);
		expect(isBase58OfLength(of(64), 64)).toBe(true);
		expect(isBase58OfLength(of(63), 64)).toBe(false);
		expect(isBase58OfLength(of(65), 64)).toBe(false);
		expect(isBase58OfLength(of(32), 64)).toBe(false);
		expect(isBase58OfLength("", 32)).toBe(false);
		expect(isBase58OfLength(`0${of(32).slice(1)}`, 32)).toBe(false);
	});

	it("isBase58OfLength, which does not decode, agrees with decoding at every edge of the byte lengths", () => {
		const decodesTo = (value: string, length: number) => decodeBase58(value)?.length === length;
		const alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";
		const candidates: string[] = ["", "1", "11", "2", "z", "zz"];
		for (let n = 0; n <= 66; n++) {
			const least = new Uint8Array(n + 1);
			least[0] = 1; // 256^n
			const most = new Uint8Array(n).fill(255); // 256^n − 1
			for (const bytes of [least, most]) {
				const text = encodeBase58(bytes);
				// Each bound, one step either side of it in its last digit, and the same with zero bytes in front.
				const last = alphabet.indexOf(text[text.length - 1]);
				const steps = [last - 1, last + 1].filter(i => i >= 0 && i < alphabet.length).map(i => text.slice(0, -1) + alphabet[i]);
				for (const value of [text, ...steps]) candidates.push(value, `1${value}`, `111${value}`);
			}
		}
		for (let i = 0; i < 2000; i++) {
			const random = encodeBase58(Uint8Array.from({ length: 1 + (i % 70) }, (_, k) => (k < i % 3 ? 0 : Math.floor(Math.random() * 256))));
			candidates.push(random, random.slice(1), `${random}z`, `1${random}`);
		}
		for (const value of candidates) for (const length of [0, 1, 31, 32, 33, 63, 64, 65, 66]) expect([value, length, isBase58OfLength(value, length)]).toEqual([value, length, decodesTo(value, length)]);
		const address = encodeBase58(new Uint8Array(32).fill(9));
		// Letters outside the alphabet, in numerals of the right length too (where only the alphabet can refuse them).
		const misspelt = ["0", "O", "I", "l"].flatMap(letter => [letter, `${letter}${address.slice(1)}`, `${address.slice(0, 20)}${letter}${address.slice(21)}`, `${address.slice(0, -1)}${letter}`]);
		for (const value of [...misspelt, `${address}!`, ` ${address}`, `${address}\n`]) expect([value, isBase58OfLength(value, 32)]).toEqual([value, false]);
	});
});

describe("sha256Hex", () => {
	it("gives the known digests (sha256sum) as 64 lowercase hex", () => {
		expect(sha256Hex("")).toBe("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
		expect(sha256Hex("abc")).toBe("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
		expect(sha256Hex(Uint8Array.of(0x61, 0x62, 0x63))).toBe("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
		expect(new RegExp(HEX64_PATTERN).test(sha256Hex("x"))).toBe(true);
	});

	it("hashes strings as UTF-8", () => {
		// printf '%s' 'ü' | sha256sum
		expect(sha256Hex("ü")).toBe(sha256Hex(Buffer.from([0xc3, 0xbc])));
	});
});

describe("canonicalJson", () => {
	it("is independent of key order, recursively", () => {
		const a = { b: 1, a: { y: [1, { q: 1, p: 2 }], x: "s" }, c: null };
		const b = { c: null, a: { x: "s", y: [1, { p: 2, q: 1 }] }, b: 1 };
		expect(canonicalJson(a)).toBe(canonicalJson(b));
		expect(canonicalJson(a)).toBe('{"a":{"x":"s","y":[1,{"p":2,"q":1}]},"b":1,"c":null}');
	});

	it("keeps array order and tells different values apart", () => {
		expect(canonicalJson([1, 2])).not.toBe(canonicalJson([2, 1]));
		expect(canonicalJson({ a: "1" })).not.toBe(canonicalJson({ a: 1 }));
		expect(canonicalJson({ a: 1 })).not.toBe(canonicalJson({ a: 1, b: 2 }));
	});

	it("drops undefined fields, as JSON does", () => {
		expect(canonicalJson({ a: 1, b: undefined })).toBe(canonicalJson({ a: 1 }));
	});

	it("escapes strings as JSON", () => {
		expect(canonicalJson({ 'k"': 'v"\n' })).toBe('{"k\\"":"v\\"\\n"}');
	});

	it("orders keys by UTF-16 code units, as the digests of stored records were made", () => {
		expect(canonicalJson({ b: 1, é: 2, B: 3, a: 4, "": 5, "😀": 6, ｚ: 7 })).toBe('{"":5,"B":3,"a":4,"b":1,"é":2,"😀":6,"ｚ":7}');
	});
});

describe("identifier patterns", () => {
	it("paymentId: 8–128 chars of [A-Za-z0-9_-]", () => {
		const re = new RegExp(IDENTIFIER_PATTERN);
		expect(re.test("a".repeat(8))).toBe(true);
		expect(re.test("a".repeat(7))).toBe(false);
		expect(re.test("a".repeat(128))).toBe(true);
		expect(re.test("a".repeat(129))).toBe(false);
		expect(re.test("pay_kat-01")).toBe(true);
		expect(re.test("pay kat 01")).toBe(false);
	});

	it("nonce: 16–128 chars of [A-Za-z0-9_-]", () => {
		const re = new RegExp(NONCE_PATTERN);
		expect(re.test("n".repeat(16))).toBe(true);
		expect(re.test("n".repeat(15))).toBe(false);
		expect(re.test("n".repeat(128))).toBe(true);
		expect(re.test("n".repeat(129))).toBe(false);
		expect(re.test(`${"n".repeat(15)}:`)).toBe(false);
	});
});
