/** The epoch Merkle root (SPEC §8), against vectors computed outside the code (Python hashlib). */
import { createHash } from "node:crypto";
import { EMPTY_ROOT, byId, merkleRoot } from "../../lib/merkle";

/** sha256("0") … sha256("4"), hex. */
const COMMITMENTS = [
	"5feceb66ffc86f38d952786c6d696c79c2dbc239dd4e91b46729d73a27fb57e9",
	"6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b",
	"d4735e3a265e16eee03f59718b9b5d03019c07d8b6c51f90da3a666eec13ab35",
	"4e07408562bedb8b60ce05c1decfe3ad16b72230967de01f640b7e4729b49fce",
	"4b227777d4dd1fc61c6f884f48641d02b4d121d3fd328cb08b5531fcacdabf8a"
];

describe("merkleRoot", () => {
	it("is 64 zeros without leaves", () => {
		expect(merkleRoot([])).toBe("0".repeat(64));
		expect(EMPTY_ROOT).toBe("0".repeat(64));
	});

	it.each([
		[1, "13a77175e35eb1d9da91ee14df0d7772cea71289800206e2b45c882ecb06efbf"],
		[2, "bbb441530bdded54e6e2bfcdc829819ff39b30768eb9f023071dffc16b410f10"],
		[3, "8be871f13785b4c81a1700459c76ac2b3ae2caebb7876c376e223c6adff98c47"],
		[5, "4e23fb40d8876f1299cca9b3c28432a01b11d1a20126606914612892ff2e09a7"]
	])("matches the known root of %i leaves (odd levels carry their last node up)", (count, root) => {
		expect(merkleRoot(COMMITMENTS.slice(0, count))).toBe(root);
	});

	it("built leaf by leaf, equals the level-by-level construction of SPEC §8 for every count up to 300", () => {
		const hash = (...parts: Buffer[]) => createHash("sha256").update(Buffer.concat(parts)).digest();
		const levelByLevel = (commitments: string[]): string => {
			if (!commitments.length) return EMPTY_ROOT;
			let level = commitments.map(c => hash(Buffer.from([0]), Buffer.from(c, "hex")));
			while (level.length > 1) level = Array.from({ length: Math.ceil(level.length / 2) }, (_, i) => (level[2 * i + 1] ? hash(Buffer.from([1]), level[2 * i], level[2 * i + 1]) : level[2 * i]));
			return level[0].toString("hex");
		};
		const commitments = Array.from({ length: 300 }, (_, i) => hash(Buffer.from(String(i))).toString("hex"));
		for (let count = 0; count <= 300; count++) expect(merkleRoot(commitments.slice(0, count))).toBe(levelByLevel(commitments.slice(0, count)));
	});

	it("depends on leaf order", () => {
		expect(merkleRoot([COMMITMENTS[1], COMMITMENTS[0]])).not.toBe(merkleRoot(COMMITMENTS.slice(0, 2)));
	});
});

describe("byId", () => {
	it("sorts by string order of id, not locale order", () => {
		const ids = ["int_b", "int_B", "int_a", "int_10", "int_9"].map(id => ({ id }));
		expect([...ids].sort(byId).map(x => x.id)).toEqual(["int_10", "int_9", "int_B", "int_a", "int_b"]);
	});
});
