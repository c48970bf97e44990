/**
 * Builds the publishable SDK into sdk/dist (run by `npm run build:sdk` at the repo root and by the
 * package's prepack):
 *   dist/index.mjs, dist/index.cjs  esbuild bundles of sdk/index.ts with the lib/ modules it uses
 *                                   inlined; npm dependencies stay imports (package.json lists them)
 *   dist/types/{sdk,lib}/*.d.ts     declarations for `require` (tsc), .d.mts twins for `import`
 *   index.d.ts                      the types for resolvers that ignore `exports` (TypeScript's node10)
 *   LICENSE                         the repository's, shipped with the package
 * package.json has `exports` only, no main/types/module: those would also apply to this
 * repository's own `import … from "../sdk"`, which must stay the source (sdk/index.ts), not dist.
 * Nothing in dist refers to a file outside the package: the build fails if something does.
 */
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

const sdk = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(sdk, "..");
const dist = path.join(sdk, "dist");
const types = path.join(dist, "types");
// esbuild and typescript are the repository's dev dependencies, not the package's.
const require = createRequire(path.join(root, "package.json"));
const esbuild = require("esbuild");

fs.rmSync(dist, { recursive: true, force: true });

const common = { entryPoints: [path.join(sdk, "index.ts")], bundle: true, packages: "external", platform: "neutral", target: "es2022", logLevel: "warning", legalComments: "inline" };
await Promise.all([
	esbuild.build({ ...common, format: "esm", outfile: path.join(dist, "index.mjs") }),
	esbuild.build({ ...common, format: "cjs", outfile: path.join(dist, "index.cjs") })
]);

execFileSync(process.execPath, [require.resolve("typescript/bin/tsc"), "-p", path.join(sdk, "tsconfig.build.json")], { stdio: "inherit" });

/**
 * tsc keeps the sources' extensionless relative specifiers, which node16/nodenext resolution refuses
 * in ESM: each .d.ts gets explicit `.js` specifiers, and a .d.mts twin with `.mjs` ones, so an
 * `import` of the package sees ESM types and a `require` CJS types.
 */
const relativeSpecifier = /(\bfrom\s+|\bimport\s*\(\s*)(["'])(\.{1,2}\/[^"']+)\2/g;
const declarations = fs.readdirSync(types, { recursive: true }).map(String).filter(file => file.endsWith(".d.ts"));
for (const file of declarations) {
	const absolute = path.join(types, file);
	const source = fs.readFileSync(absolute, "utf8");
	const withExtension = ext => source.replace(relativeSpecifier, (_, keyword, quote, specifier) => {
		const target = path.resolve(path.dirname(absolute), `${specifier}.d.ts`);
		if (!target.startsWith(types + path.sep) || !fs.existsSync(target)) throw new Error(`${file} refers to ${specifier}, which is not in the package`);
		return `${keyword}${quote}${specifier}${ext}${quote}`;
	});
	fs.writeFileSync(absolute, withExtension(".js"));
	fs.writeFileSync(absolute.replace(/\.d\.ts$/, ".d.mts"), withExtension(".mjs"));
}

// Every package the bundles or the declarations import must be a dependency of the package (lib/
// may start using one), and no bundle may import a file: lib/ is inlined.
const { dependencies } = JSON.parse(fs.readFileSync(path.join(sdk, "package.json"), "utf8"));
const packageOf = specifier => specifier.split("/").slice(0, specifier.startsWith("@") ? 2 : 1).join("/");
const importSpecifier = /(?:\bfrom\s*|\brequire\(\s*|\bimport\(\s*)["']([^"']+)["']/g;
for (const file of ["index.mjs", "index.cjs", ...declarations.flatMap(d => [`types/${d}`, `types/${d.replace(/\.d\.ts$/, ".d.mts")}`])]) {
	for (const [, specifier] of fs.readFileSync(path.join(dist, file), "utf8").matchAll(importSpecifier)) {
		if (specifier.startsWith(".") ? !file.startsWith("types/") : !(packageOf(specifier) in dependencies)) throw new Error(`dist/${file} imports ${specifier}, which the package does not ship or depend on`);
	}
}

// Beside sdk/index.ts, which TypeScript prefers inside the repository; in the package it is alone.
fs.writeFileSync(path.join(sdk, "index.d.ts"), `export * from "./dist/types/sdk/index.js";\n`);
fs.copyFileSync(path.join(root, "LICENSE"), path.join(sdk, "LICENSE"));

const esm = fs.readFileSync(path.join(dist, "index.mjs"));
console.log(`sdk/dist: index.mjs ${esm.length} B (gzip ${gzipSync(esm).length} B), index.cjs ${fs.statSync(path.join(dist, "index.cjs")).size} B, ${declarations.length} declaration files`);
