import { jsonArrayBuffer } from "../../lib/json-text";

/** What jsonArrayBuffer must equal: the UTF-8 of the joined (and wrapped) texts, as Node encodes strings. */
const joined = (texts: string[], before = "", after = "") => Buffer.from(`[${texts.map(text => before + text + after).join(",")}]`, "utf8");

describe("jsonArrayBuffer", () => {
	const cases: [string, string[]][] = [
		["no texts", []],
		["one", ['{"a":1}']],
		["several, with text of 2, 3 and 4 bytes a character", ['{"name":"Zoë"}', '"€"', '{"memo":"𝄞 ok"}', "null"]],
		["ASCII, then one text that is not (the second pass)", ['{"a":"plain"}', '{"b":"plain"}', '{"c":"naïve"}', '{"d":"plain"}']],
		["only the last text is not ASCII", ['"a"', '"b"', '"ß"']],
		["a lone surrogate, encoded as U+FFFD", ['"\ud800"', '"ok"']]
	];

	test.each(cases)("is the UTF-8 of the joined array: %s", (_name, texts) => {
		const buffer = jsonArrayBuffer(texts);
		expect(buffer.equals(joined(texts))).toBe(true);
		expect(JSON.parse(buffer.toString("utf8"))).toStrictEqual(JSON.parse(joined(texts).toString("utf8")));
	});

	test.each(cases)("wraps each text in the item's before and after: %s", (_name, texts) => {
		const wrap = { before: '{"intent":', after: ',"leaseTtlMs":30000}' };
		const buffer = jsonArrayBuffer(texts, wrap);
		expect(buffer.equals(joined(texts, wrap.before, wrap.after))).toBe(true);
		expect(JSON.parse(buffer.toString("utf8"))).toStrictEqual(texts.map(text => ({ intent: JSON.parse(Buffer.from(text).toString("utf8")) as unknown, leaseTtlMs: 30000 })));
	});

	test("a wrapper that is not ASCII is measured exactly", () => {
		const wrap = { before: '{"ü":', after: ',"€":1}' };
		expect(jsonArrayBuffer(["1", "2"], wrap).equals(joined(["1", "2"], wrap.before, wrap.after))).toBe(true);
	});
});
