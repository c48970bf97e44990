/** @type {import('jest').Config} */
module.exports = {
	testEnvironment: "node",
	roots: ["<rootDir>/test"],
	testMatch: ["**/*.test.ts"],
	transform: {
		// @noble and @scure ship ESM only; ts-jest compiles them to CommonJS for jest's module system.
		"^.+\\.(ts|js|mjs)$": ["ts-jest", { tsconfig: "tsconfig.json" }]
	},
	transformIgnorePatterns: ["/node_modules/(?!(@noble|@scure)/)"],
	testTimeout: 30000,
	// Integration suites each start a broker, a gateway and SQLite files: keep them from starving each other on 2 cores.
	maxWorkers: 2
};
