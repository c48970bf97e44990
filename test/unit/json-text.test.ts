import { jsonArrayBuffer } from "../../lib/json-text";

describe("jsonArrayBuffer", () => {
	test.each([
		["no texts", []],
		["one", ['{"a":1}']],
		["several, with text of 2, 3 and 4 bytes a character", ['{"name":"Zoë"}', '"€"', '{"memo":"𝄞 ok"}', "null"]]
	])("is the UTF-8 of the joined array: %s", (_name, texts) => {
		const buffer = jsonArrayBuffer(texts);
		expect(buffer.equals(Buffer.from(`[${texts.join(",")}]`, "utf8"))).toBe(true);
		expect(JSON.parse(buffer.toString("utf8"))).toStrictEqual(texts.map(text => JSON.parse(text)));
	});
});
