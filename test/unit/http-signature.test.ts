/**
 * lib/http-signature: the RFC 9421 signature base and ed25519 signature of Appendix B.2.6 through
 * http-message-signatures, the derived components of §2.2.1/§2.2.2, RFC 9530's Content-Digest,
 * and the SPEC §6.1 profile end to end with each refusal.
 */
import { createHash, createPrivateKey, createPublicKey, sign as cryptoSign } from "node:crypto";
import { httpbis } from "http-message-signatures";
import { createSigner, generateKeypair, verifySignature, type Keypair } from "../../lib/ed25519";
import { decodeBase58, encodeBase58 } from "../../lib/encoding";
import {
	COVERED_COMPONENTS,
	MAX_CLOCK_SKEW_S,
	SIGNATURE_LABEL,
	contentDigest,
	signRequest,
	verifyRequestSignature,
	type RequestSigningKey,
	type SignatureCheck
} from "../../lib/http-signature";

describe("RFC 9421 Appendix B.2.6: signing a request using ed25519, through http-message-signatures", () => {
	/** RFC 9421 B.1.4, test-key-ed25519. */
	const privateKey = createPrivateKey(
		"-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF\n-----END PRIVATE KEY-----"
	);
	const publicKey = Buffer.from("JrQLj5P/89iXES9+vFgrIy29clF9CC/oPPsw3c5D0bs=", "base64");
	const request = {
		method: "POST",
		url: "http://example.com/foo?param=Value&Pet=dog",
		headers: {
			Host: "example.com",
			Date: "Tue, 20 Apr 2021 02:07:55 GMT",
			"Content-Type": "application/json",
			"Content-Digest": "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:",
			"Content-Length": "18"
		}
	};
	const fields = ["date", "@method", "@path", "@authority", "content-type", "content-length"];
	const signatureInput = '("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519"';
	const expectedBase = [
		'"date": Tue, 20 Apr 2021 02:07:55 GMT',
		'"@method": POST',
		'"@path": /foo',
		'"@authority": example.com',
		'"content-type": application/json',
		'"content-length": 18',
		`"@signature-params": ${signatureInput}`
	].join("\n");
	const expectedSignature = "wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==";

	it("the test key's public half is the RFC's", () => {
		expect(createPublicKey(privateKey).export({ format: "der", type: "spki" }).subarray(-32).equals(publicKey)).toBe(true);
	});

	it("createSignatureBase + formatSignatureBase give the RFC's signature base", () => {
		const base = httpbis.createSignatureBase({ fields }, request);
		base.push(['"@signature-params"', [signatureInput]]);
		expect(httpbis.formatSignatureBase(base)).toBe(expectedBase);
	});

	it("signMessage signs that base, and ed25519 (deterministic) gives the RFC's signature", async () => {
		let signed: Buffer | undefined;
		const result = await httpbis.signMessage(
			{
				key: {
					id: "test-key-ed25519",
					sign: async data => {
						signed = data;
						return cryptoSign(null, data, privateKey);
					}
				},
				name: "sig-b26",
				fields,
				params: ["created", "keyid"],
				paramValues: { created: new Date(1618884473 * 1000) }
			},
			request
		);
		expect(signed?.toString("utf8")).toBe(expectedBase);
		const headers: Record<string, string | string[]> = result.headers;
		expect(headers["Signature-Input"]).toBe(`sig-b26=${signatureInput}`);
		expect(headers["Signature"]).toBe(`sig-b26=:${expectedSignature}:`);
	});

	it("lib/ed25519's verifySignature accepts the RFC's signature over the base, and refuses a changed base", () => {
		const signature = encodeBase58(Buffer.from(expectedSignature, "base64"));
		expect(verifySignature(encodeBase58(publicKey), expectedBase, signature)).toBe(true);
		expect(verifySignature(encodeBase58(publicKey), expectedBase.replace("POST", "PUT"), signature)).toBe(false);
	});
});

describe("RFC 9421 §2.2.1 and §2.2.2: the derived components the profile covers", () => {
	it('POST /path?param=value HTTP/1.1, Host: www.example.com (https) → "@method": POST, "@target-uri": https://www.example.com/path?param=value', () => {
		const base = httpbis.createSignatureBase(
			{ fields: ["@method", "@target-uri"] },
			{ method: "POST", url: "https://www.example.com/path?param=value", headers: { Host: "www.example.com" } }
		);
		expect(httpbis.formatSignatureBase(base)).toBe('"@method": POST\n"@target-uri": https://www.example.com/path?param=value');
	});
});

describe("RFC 9530 Content-Digest", () => {
	const body = '{"hello": "world"}';

	it('contentDigest of {"hello": "world"} is the RFC\'s sha-256 value', () => {
		expect(contentDigest(body)).toBe("sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:");
		expect(contentDigest(new TextEncoder().encode(body))).toBe("sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:");
	});

	it("the same hashing gives RFC 9421 B.2.6's sha-512 value", () => {
		expect(createHash("sha512").update(body).digest("base64")).toBe(
			"WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew=="
		);
	});
});

describe("the SPEC §6.1 profile end to end", () => {
	const TARGET = "http://127.0.0.1:3000/intents/int_1/status";
	const BODY = JSON.stringify({ status: "PROCESSING", crankerPubkey: "x", expectedVersion: 1 });
	const NOW_S = 1_767_225_600;
	const NOW_MS = NOW_S * 1000 + 250;

	const keyFor = (keypair: Keypair) => {
		const sign = createSigner(keypair);
		return { keyid: keypair.publicKey, sign: (data: Uint8Array) => decodeBase58(sign(data))! };
	};
	const cranker = generateKeypair();
	const key = keyFor(cranker);

	const signed = (created: Date = new Date(NOW_S * 1000), body: string = BODY, signingKey: RequestSigningKey = key) =>
		signRequest({ method: "PATCH", url: TARGET, body }, signingKey, created);

	const verify = (headers: Record<string, string | string[] | undefined>, overrides: { method?: string; targetUri?: string; body?: string } = {}, nowMs = NOW_MS) =>
		verifyRequestSignature(
			{
				method: overrides.method ?? "PATCH",
				targetUri: overrides.targetUri ?? TARGET,
				headers,
				body: new TextEncoder().encode(overrides.body ?? BODY)
			},
			nowMs
		);

	const expectRefusal = (check: SignatureCheck, status: 401 | 403, reason: string) => {
		expect(check).toMatchObject({ ok: false, status, reason });
		if (!check.ok) expect(check.detail.length).toBeGreaterThan(0);
	};

	it("constants", () => {
		expect(SIGNATURE_LABEL).toBe("sig1");
		expect(COVERED_COMPONENTS).toEqual(["@method", "@target-uri", "content-digest"]);
		expect(MAX_CLOCK_SKEW_S).toBe(60);
	});

	it("signRequest writes the three headers in the profile's exact format", async () => {
		const headers = await signed();
		expect(Object.keys(headers).sort()).toEqual(["content-digest", "signature", "signature-input"]);
		expect(headers["content-digest"]).toBe(contentDigest(BODY));
		expect(headers["content-digest"]).toMatch(/^sha-256=:[A-Za-z0-9+/]{43}=:$/);
		expect(headers["signature-input"]).toMatch(
			/^sig1=\("@method" "@target-uri" "content-digest"\);created=\d+;keyid="[1-9A-HJ-NP-Za-km-z]{32,44}";alg="ed25519"$/
		);
		expect(headers["signature-input"]).toBe(`sig1=("@method" "@target-uri" "content-digest");created=${NOW_S};keyid="${cranker.publicKey}";alg="ed25519"`);
		expect(headers["signature"]).toMatch(/^sig1=:[A-Za-z0-9+/]{86}==:$/);
	});

	it("signRequest signs the RFC 9421 signature base of the profile", async () => {
		let base = "";
		const capturing = { keyid: key.keyid, sign: (data: Uint8Array) => ((base = Buffer.from(data).toString("utf8")), key.sign(data)) };
		const headers = await signed(undefined, undefined, capturing);
		expect(base).toBe(
			[
				'"@method": PATCH',
				`"@target-uri": ${TARGET}`,
				`"content-digest": ${contentDigest(BODY)}`,
				`"@signature-params": ("@method" "@target-uri" "content-digest");created=${NOW_S};keyid="${cranker.publicKey}";alg="ed25519"`
			].join("\n")
		);
		const signature = Buffer.from(headers["signature"]!.slice("sig1=:".length, -1), "base64");
		expect(verifySignature(cranker.publicKey, base, encodeBase58(signature))).toBe(true);
	});

	it("verifyRequestSignature accepts it, with the keyid, created and signature (the replay key)", async () => {
		const headers = await signed();
		const check = await verify(headers);
		expect(check).toEqual({ ok: true, keyid: cranker.publicKey, created: NOW_S, signature: headers["signature"]!.slice("sig1=:".length, -1) });
	});

	it("header names in any case, and a signing key that returns a Promise", async () => {
		const asyncKey = { keyid: key.keyid, sign: async (data: Uint8Array) => key.sign(data) };
		const headers = await signed(undefined, undefined, asyncKey);
		const check = await verify({
			"Content-Digest": headers["content-digest"],
			"Signature-Input": headers["signature-input"],
			SIGNATURE: headers["signature"]
		});
		expect(check.ok).toBe(true);
	});

	it("a request with a byte body signs and verifies", async () => {
		const body = Uint8Array.of(0, 1, 2, 250, 251, 252);
		const headers = await signRequest({ method: "POST", url: TARGET, body }, key, new Date(NOW_S * 1000));
		const check = await verifyRequestSignature({ method: "POST", targetUri: TARGET, headers, body }, NOW_MS);
		expect(check.ok).toBe(true);
	});

	describe("refusals", () => {
		let good: Record<string, string>;
		beforeAll(async () => {
			good = await signed();
		});
		const withInput = (input: string) => ({ ...good, "signature-input": input });
		const inputFor = (innerList: string) => `sig1=${innerList}`;
		const params = () => `created=${NOW_S};keyid="${cranker.publicKey}";alg="ed25519"`;

		it("no signature headers at all → 401 missing", async () => {
			expectRefusal(await verify({}), 401, "missing");
			expectRefusal(await verify({ "content-digest": good["content-digest"] }), 401, "missing");
			expectRefusal(await verify({ signature: undefined, "signature-input": undefined }), 401, "missing");
		});

		it("only one of Signature and Signature-Input → 403", async () => {
			expectRefusal(await verify({ "content-digest": good["content-digest"], signature: good["signature"] }), 403, "malformed");
			expectRefusal(await verify({ "content-digest": good["content-digest"], "signature-input": good["signature-input"] }), 403, "malformed");
		});

		it("a tampered body → digest-mismatch", async () => {
			expectRefusal(await verify(good, { body: BODY.replace("PROCESSING", "CONFIRMED") }), 403, "digest-mismatch");
			expectRefusal(await verify(good, { body: `${BODY} ` }), 403, "digest-mismatch");
		});

		it("a Content-Digest recomputed for a tampered body → bad-signature (the digest is signed)", async () => {
			const body = BODY.replace("PROCESSING", "CONFIRMED");
			expectRefusal(await verify({ ...good, "content-digest": contentDigest(body) }, { body }), 403, "bad-signature");
		});

		it("no Content-Digest, or one outside the profile → 403", async () => {
			const { "content-digest": _omitted, ...noDigest } = good;
			expectRefusal(await verify(noDigest), 403, "malformed");
			const sha512 = `sha-512=:${createHash("sha512").update(BODY).digest("base64")}:`;
			expectRefusal(await verify({ ...good, "content-digest": sha512 }), 403, "unsupported");
			expectRefusal(await verify({ ...good, "content-digest": `${good["content-digest"]}, ${sha512}` }), 403, "unsupported");
			expectRefusal(await verify({ ...good, "content-digest": "sha-256=abc" }), 403, "malformed");
			expectRefusal(await verify({ ...good, "content-digest": "sha-256=:AAAA:" }), 403, "digest-mismatch");
		});

		it("a tampered method or target URI → bad-signature", async () => {
			expectRefusal(await verify(good, { method: "POST" }), 403, "bad-signature");
			expectRefusal(await verify(good, { targetUri: "http://127.0.0.1:3000/intents/int_2/status" }), 403, "bad-signature");
			expectRefusal(await verify(good, { targetUri: `${TARGET}?x=1` }), 403, "bad-signature");
			expectRefusal(await verify(good, { targetUri: "https://127.0.0.1:3000/intents/int_1/status" }), 403, "bad-signature");
		});

		it("another key's signature under this keyid → bad-signature", async () => {
			const other = keyFor(generateKeypair());
			const forged = await signed(undefined, undefined, { keyid: cranker.publicKey, sign: other.sign });
			expect(forged["signature-input"]).toBe(good["signature-input"]);
			expectRefusal(await verify(forged), 403, "bad-signature");
		});

		it("a signature moved to another keyid → bad-signature", async () => {
			const other = generateKeypair().publicKey;
			expectRefusal(await verify(withInput(good["signature-input"]!.replace(cranker.publicKey, other))), 403, "bad-signature");
		});

		it(`created more than ${MAX_CLOCK_SKEW_S} s away (either direction) → stale; 59 s → ok`, async () => {
			for (const offset of [-61, 61, -3600, 86_400]) {
				const headers = await signed(new Date((NOW_S + offset) * 1000));
				expectRefusal(await verify(headers), 403, "stale");
			}
			for (const offset of [-59, 59]) {
				const headers = await signed(new Date((NOW_S + offset) * 1000));
				expect((await verify(headers)).ok).toBe(true);
			}
			// exactly 60 s is inside the window
			expect((await verify(good, {}, (NOW_S + 60) * 1000)).ok).toBe(true);
			expectRefusal(await verify(good, {}, (NOW_S + 60) * 1000 + 1), 403, "stale");
		});

		it("other, extra, missing or reordered covered components → unsupported", async () => {
			for (const list of [
				'("@method" "@target-uri" "content-digest" "content-type")',
				'("@method" "@target-uri")',
				'("@target-uri" "@method" "content-digest")',
				'("@method" "@path" "content-digest")',
				'("@method";req "@target-uri" "content-digest")',
				'("@method" "@target-uri" "content-digest";sf)',
				'("@method" "@target-uri" content-digest)',
				"()"
			]) {
				expectRefusal(await verify(withInput(inputFor(`${list};${params()}`))), 403, "unsupported");
			}
		});

		it('alg other than "ed25519", or extra parameters → unsupported', async () => {
			const list = '("@method" "@target-uri" "content-digest")';
			const base = `created=${NOW_S};keyid="${cranker.publicKey}"`;
			for (const extra of [
				';alg="hmac-sha256"',
				';alg="ED25519"',
				";alg=ed25519",
				`;alg="ed25519";expires=${NOW_S + 300}`,
				';alg="ed25519";nonce="abc"',
				';alg="ed25519";tag="x"'
			]) {
				expectRefusal(await verify(withInput(inputFor(`${list};${base}${extra}`))), 403, "unsupported");
			}
		});

		it("missing created, keyid or alg, or ill-typed ones → malformed", async () => {
			const list = '("@method" "@target-uri" "content-digest")';
			for (const parameters of [
				`keyid="${cranker.publicKey}";alg="ed25519"`,
				`created=${NOW_S};alg="ed25519"`,
				`created=${NOW_S};keyid="${cranker.publicKey}"`,
				`created="${NOW_S}";keyid="${cranker.publicKey}";alg="ed25519"`,
				`created=${NOW_S}.5;keyid="${cranker.publicKey}";alg="ed25519"`,
				// A Decimal of integral value: the parser gives the same number as the Integer.
				`created=${NOW_S}.0;keyid="${cranker.publicKey}";alg="ed25519"`,
				`keyid="${cranker.publicKey}"; created=${NOW_S}.000;alg="ed25519"`
			]) {
				expectRefusal(await verify(withInput(inputFor(`${list};${parameters}`))), 403, "malformed");
			}
		});

		it("a keyid that is not base58 of 32 bytes → malformed", async () => {
			const list = '("@method" "@target-uri" "content-digest")';
			for (const keyid of ["test-key-ed25519", encodeBase58(new Uint8Array(31).fill(7)), encodeBase58(new Uint8Array(33).fill(7)), "0OIl", ""]) {
				expectRefusal(await verify(withInput(inputFor(`${list};created=${NOW_S};keyid="${keyid}";alg="ed25519"`))), 403, "malformed");
			}
			expectRefusal(await verify(withInput(inputFor(`${list};created=${NOW_S};keyid=${cranker.publicKey};alg="ed25519"`))), 403, "malformed");
		});

		it("two signatures → unsupported; mismatched labels → malformed; another single label → unsupported", async () => {
			const sig = good["signature"]!.slice("sig1=".length);
			const input = good["signature-input"]!.slice("sig1=".length);
			expectRefusal(await verify({ ...good, signature: `sig1=${sig}, sig2=${sig}`, "signature-input": `sig1=${input}, sig2=${input}` }), 403, "unsupported");
			expectRefusal(await verify({ ...good, signature: `sig1=${sig}, sig2=${sig}` }), 403, "unsupported");
			expectRefusal(await verify({ ...good, signature: `sig2=${sig}` }), 403, "malformed");
			expectRefusal(await verify({ ...good, "signature-input": `sig2=${input}` }), 403, "malformed");
			expectRefusal(await verify({ ...good, signature: `sig2=${sig}`, "signature-input": `sig2=${input}` }), 403, "unsupported");
		});

		it("a header sent on two lines → 403", async () => {
			expectRefusal(await verify({ ...good, signature: [good["signature"]!, good["signature"]!] }), 403, "unsupported");
			expectRefusal(await verify({ ...good, "Signature-Input": good["signature-input"] }), 403, "unsupported");
		});

		it("a signature that is not 64 bytes, or not a byte sequence → malformed", async () => {
			const real = Buffer.from(good["signature"]!.slice("sig1=:".length, -1), "base64");
			for (const value of [
				`sig1=:${real.subarray(0, 63).toString("base64")}:`,
				`sig1=:${Buffer.concat([real, Buffer.of(0)]).toString("base64")}:`,
				"sig1=::",
				`sig1="${real.toString("base64")}"`,
				`sig1=(:${real.toString("base64")}:)`,
				`sig1=:${real.toString("base64")}:;x=1`,
				`sig1=${encodeBase58(real)}`
			]) {
				expectRefusal(await verify({ ...good, signature: value }), 403, "malformed");
			}
		});

		it("a Signature-Input member that is not an inner list → malformed", async () => {
			expectRefusal(await verify(withInput('sig1="@method"')), 403, "malformed");
			expectRefusal(await verify(withInput("sig1=1")), 403, "malformed");
		});

		it("garbage header values → 403 without throwing", async () => {
			const junk = "x".repeat(5000) + "\u0000\u00ff(;:=\"".repeat(1000);
			const bad = [
				{ ...good, signature: "???" },
				{ ...good, "signature-input": "???" },
				{ ...good, signature: junk },
				{ ...good, "signature-input": junk },
				{ ...good, "content-digest": junk },
				{ ...good, signature: `sig1=:${"A".repeat(10_000)}:` },
				{ ...good, signature: "sig1=:!!!!:" },
				{ ...good, "signature-input": "sig1=(" },
				{ ...good, "signature-input": 'sig1=("@method" "@target-uri" "content-digest");created=99999999999999999999' },
				{ ...good, "signature-input": "sig1=(\"@method\" \"@target-uri\" \"content-digest\");created=-1;keyid=\"\u00e9\"" },
				{ ...good, signature: "sig1=:AAAA:, sig1" },
				{ signature: "   ", "signature-input": junk },
				{ signature: 42 as unknown as string, "signature-input": good["signature-input"] }
			];
			for (const headers of bad) {
				const check = await verify(headers);
				expect(check.ok).toBe(false);
				if (!check.ok) expect(check.status).toBe(403);
			}
		});

		it("a small-order forgery (keyid = the identity point, R = identity, S = 0) → bad-signature (needs strict lib/ed25519)", async () => {
			const identity = "4uQeVj5tqViQh7yWWGStvkEG1Zmhx6uasJtWCJziofM";
			expect(Buffer.from(decodeBase58(identity)!).toString("hex")).toBe(`01${"00".repeat(31)}`);
			const forgery = Buffer.concat([Buffer.of(1), Buffer.alloc(63)]);
			const headers = await signed(undefined, undefined, { keyid: identity, sign: () => forgery });
			expect(headers["signature-input"]).toContain(`keyid="${identity}"`);
			expectRefusal(await verify(headers), 403, "bad-signature");
		});
	});
});
