#!/usr/bin/env node
// The lean ideal: the least work a correct, durable POST /intents must do, on plain node:http.
// A yardstick to run beside the service in the same benchmark run, never a part of the product.
// It is the team's performance reference, kept here (its code unchanged) so that npm run bench:intents
// can run it; npm run bench:intents starts it itself. By hand, from the project root (modules
// resolve from it, or from PROJECT_DIR):
//   node bench/lean-ideal.js PORT DATA_DIR REGISTRY_SEED_FILE
// Env: LEAN_VERIFY_WORKERS=n (verify in n worker threads), LEAN_SYNC=FULL|NORMAL|NONE.
// It does not do the strict small-order key checks of SPEC §0 (their cost is one byte compare).
// The request handling: shape checks,
// canonical message rebuild + sha256 (node:crypto), ed25519 verify (cached KeyObject), time
// window + route check, then ONE better-sqlite3 INSERT per request (WAL, synchronous=FULL) with
// group commit per event-loop turn (BEGIN IMMEDIATE at the turn's first write, COMMIT in
// setImmediate, each answer sent only after its commit) -- the same durability as the service.
const fs = require("node:fs");
const path = require("node:path");
const { createPublicKey, verify, createHash, randomBytes } = require("node:crypto");
// Modules come from the project the reference runs beside (its node_modules), so both use the same builds.
const fromProject = (name) => require(require.resolve(name, { paths: [process.env.PROJECT_DIR || process.cwd()] }));
const Database = fromProject("better-sqlite3");
const { base58 } = fromProject("@scure/base");

const SPKI = Buffer.from("302a300506032b6570032100", "hex");
const HEADER = "Settlement Coordination Payment Authorization";
const KEYS = [["paymentId", "paymentId"], ["sender", "senderWallet"], ["recipientTin", "recipientTin"], ["recipientRouteCommitment", "recipientRouteCommitment"],
  ["recipientRouteVersion", "recipientRouteVersion"], ["tokenMint", "tokenMintAddress"], ["amount", "amount"], ["feeLimit", "feeLimit"], ["fundingMode", "senderFundingMode"],
  ["nonce", "senderAuthorizationNonce"], ["issuedAt", "senderAuthorizationIssuedAt"], ["expiresAt", "senderAuthorizationExpiresAt"], ["expiresAtSlot", "expiresAtSlot"]];
const RE = { id: /^[A-Za-z0-9_-]{8,128}$/, nonce: /^[A-Za-z0-9_-]{16,128}$/, hex: /^[0-9a-f]{64}$/, amount: /^(0|[1-9][0-9]{0,19})$/, tin: /^[1-9][0-9]{9}$/,
  iso: /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/, b58: /^[1-9A-HJ-NP-Za-km-z]{32,88}$/ };
const ALLOWED = new Set([...KEYS.map(k => k[1]), "senderAuthorizationMessage", "senderAuthorizationSignature", "transactionCommitment", "recipientHash"]);

function shapeError(b) {
  if (!b || typeof b !== "object" || Array.isArray(b)) return "body";
  for (const k of Object.keys(b)) if (!ALLOWED.has(k)) return k;
  const s = (k, re) => typeof b[k] === "string" && re.test(b[k]);
  if (!s("paymentId", RE.id)) return "paymentId";
  if (!s("senderAuthorizationNonce", RE.nonce)) return "nonce";
  if (!s("recipientRouteCommitment", RE.hex)) return "routeCommitment";
  if (b.transactionCommitment !== undefined && !s("transactionCommitment", RE.hex)) return "transactionCommitment";
  if (!s("amount", RE.amount) || b.amount === "0" || !s("feeLimit", RE.amount)) return "amount";
  if (!s("recipientTin", RE.tin)) return "tin";
  if (!s("senderAuthorizationIssuedAt", RE.iso) || !s("senderAuthorizationExpiresAt", RE.iso)) return "time";
  if (!s("senderWallet", RE.b58) || !s("tokenMintAddress", RE.b58) || !s("senderAuthorizationSignature", RE.b58)) return "base58";
  if (typeof b.senderAuthorizationMessage !== "string" || b.senderAuthorizationMessage.length > 4096) return "message";
  if (!Number.isSafeInteger(b.recipientRouteVersion) || b.recipientRouteVersion < 1 || !Number.isSafeInteger(b.expiresAtSlot) || b.expiresAtSlot < 0) return "integers";
  if (typeof b.senderFundingMode !== "string") return "fundingMode";
  return null;
}

// Variants (env): LEAN_SYNC=FULL (default) | NORMAL | NONE (no store at all);
// LEAN_VERIFY_WORKERS=n verifies in n worker threads (batched per event-loop turn) instead of inline.
const SYNC = process.env.LEAN_SYNC || "FULL";
const VERIFY_WORKERS = Number(process.env.LEAN_VERIFY_WORKERS || 0);
const WORKER_SRC = `
const { parentPort } = require("node:worker_threads");
const { createPublicKey, verify } = require("node:crypto");
const SPKI = Buffer.from("302a300506032b6570032100", "hex");
const keys = new Map();
parentPort.on("message", jobs => {
  const out = new Array(jobs.length);
  for (let i = 0; i < jobs.length; i++) {
    const j = jobs[i];
    let k = keys.get(j.w);
    if (!k) { k = createPublicKey({ key: Buffer.concat([SPKI, j.pub]), format: "der", type: "spki" }); keys.set(j.w, k); }
    let ok = false; try { ok = verify(null, Buffer.from(j.m, "utf8"), k, j.s); } catch {}
    out[i] = [j.id, ok];
  }
  parentPort.postMessage(out);
});`;
function createVerifyPool(n) {
  const { Worker } = require("node:worker_threads");
  const workers = Array.from({ length: n }, () => new Worker(WORKER_SRC, { eval: true }));
  const waiting = new Map(); let seq = 0, batch = [], scheduled = false, rr = 0;
  for (const w of workers) { w.unref(); w.on("message", out => { for (const [id, ok] of out) { waiting.get(id)(ok); waiting.delete(id); } }); }
  function flush() { scheduled = false; const jobs = batch; batch = []; const per = Math.ceil(jobs.length / n);
    for (let i = 0; i < jobs.length; i += per) workers[rr++ % n].postMessage(jobs.slice(i, i + per)); }
  return { verify(wallet, pub, message, sig) { return new Promise(resolve => { const id = seq++; waiting.set(id, resolve); batch.push({ id, w: wallet, pub, m: message, s: sig });
    if (!scheduled) { scheduled = true; setImmediate(flush); } }); }, close() { for (const w of workers) w.terminate(); } };
}

// LEAN_DB_WORKER=1: the store lives in a worker thread (same schema, WAL, synchronous=FULL); the
// main thread sends each event-loop turn's rows as one message, the worker commits them as one
// transaction (fsync) and answers; the main thread keeps parsing/verifying meanwhile.
const DB_WORKER = process.env.LEAN_DB_WORKER === "1";
const DB_WORKER_SRC = `
const { parentPort, workerData } = require("node:worker_threads");
const Database = require(workerData.sqlite);
const db = new Database(workerData.file);
db.pragma("journal_mode = WAL"); db.pragma("synchronous = FULL");
db.exec(workerData.schema);
const insert = db.prepare("INSERT OR IGNORE INTO intents VALUES (?,?,?,?,?,?,?,?,?,?)");
const many = db.transaction(rows => rows.map(r => insert.run(...r).changes === 1));
parentPort.on("message", m => { if (m === "close") { db.close(); return parentPort.close(); } parentPort.postMessage({ seq: m.seq, ok: many(m.rows) }); });`;

function createCore(dataDir, seedFile) {
  fs.mkdirSync(dataDir, { recursive: true });
  const routes = new Map(JSON.parse(fs.readFileSync(seedFile, "utf8")).map(r => [r.tin, r]));
  const db = new Database(SYNC === "NONE" ? ":memory:" : path.join(dataDir, "lean.sqlite"));
  db.pragma("journal_mode = WAL");
  db.pragma(`synchronous = ${SYNC === "NONE" ? "OFF" : SYNC}`);
  const pool = VERIFY_WORKERS > 0 ? createVerifyPool(VERIFY_WORKERS) : null;
  const SCHEMA = `CREATE TABLE IF NOT EXISTS intents (id TEXT PRIMARY KEY, paymentId TEXT NOT NULL, senderWallet TEXT NOT NULL, nonce TEXT NOT NULL, state TEXT NOT NULL,
    stateVersion INTEGER NOT NULL, createdAt TEXT NOT NULL, expiresAt TEXT NOT NULL, expiresAtSlot INTEGER NOT NULL, doc TEXT NOT NULL);
    CREATE UNIQUE INDEX IF NOT EXISTS u_payment ON intents (paymentId);
    CREATE UNIQUE INDEX IF NOT EXISTS u_nonce ON intents (senderWallet, nonce);
    CREATE INDEX IF NOT EXISTS i_state_created ON intents (state, createdAt);`;
  db.exec(SCHEMA);
  let dbw = null;
  if (DB_WORKER) {
    const { Worker } = require("node:worker_threads");
    const w = new Worker(DB_WORKER_SRC, { eval: true, workerData: { file: path.join(dataDir, "lean-w.sqlite"), schema: SCHEMA, sqlite: require.resolve("better-sqlite3", { paths: [process.env.PROJECT_DIR || process.cwd()] }) } });
    const pending = new Map(); let seq = 0, rows = [], waiters = [], scheduled = false;
    w.on("message", m => { const ws = pending.get(m.seq); pending.delete(m.seq); ws.forEach((r, i) => r(m.ok[i])); });
    const flush = () => { scheduled = false; const s = seq++; pending.set(s, waiters); w.postMessage({ seq: s, rows }); rows = []; waiters = []; };
    dbw = { insert: row => new Promise(resolve => { rows.push(row); waiters.push(resolve); if (!scheduled) { scheduled = true; setImmediate(flush); } }), close: () => w.postMessage("close") };
  }
  const insert = db.prepare("INSERT OR IGNORE INTO intents VALUES (?,?,?,?,?,?,?,?,?,?)");
  const byPayment = db.prepare("SELECT doc FROM intents WHERE paymentId = ?");
  // Group commit: one transaction per event-loop turn.
  let waiting = [], scheduled = false;
  function commit() {
    scheduled = false;
    const batch = waiting; waiting = [];
    try { if (db.inTransaction) db.exec("COMMIT"); } catch (e) { if (db.inTransaction) db.exec("ROLLBACK"); for (const w of batch) w.reject(e); return; }
    for (const w of batch) w.resolve(w.value);
  }
  function write(fn) {
    if (SYNC === "NONE") return Promise.resolve(true);
    if (!db.inTransaction) db.exec("BEGIN IMMEDIATE");
    if (!scheduled) { scheduled = true; setImmediate(commit); }
    let value;
    try { value = fn(); } catch (e) { return Promise.reject(e); }
    return new Promise((resolve, reject) => waiting.push({ resolve, reject, value }));
  }
  const keys = new Map();
  function keyOf(address) {
    let k = keys.get(address);
    if (k !== undefined) return k;
    try { const raw = base58.decode(address); k = raw.length === 32 ? createPublicKey({ key: Buffer.concat([SPKI, raw]), format: "der", type: "spki" }) : null; } catch { k = null; }
    keys.set(address, k);
    return k;
  }
  const err = (status, type, message) => ({ status, body: { name: "ServiceError", message, code: status, type } });

  /** Handles a parsed body; resolves { status, body } (201 only after the fsynced commit). */
  async function handle(b) {
    const bad = shapeError(b);
    if (bad) return err(422, "VALIDATION_ERROR", `invalid field ${bad}`);
    let text = `${HEADER}\nversion: 1`;
    for (const [key, field] of KEYS) text += `\n${key}: ${b[field]}`;
    const commitment = createHash("sha256").update(text).digest("hex");
    const message = `${text}\ntransactionCommitment: ${commitment}`;
    if (b.senderAuthorizationMessage !== message || (b.transactionCommitment !== undefined && b.transactionCommitment !== commitment)) return err(400, "INVALID_MESSAGE", "not canonical");
    if (b.senderFundingMode !== "wallet_only_v2") return err(400, "UNSUPPORTED_FUNDING_MODE", "funding mode");
    let sig = null;
    try { sig = base58.decode(b.senderAuthorizationSignature); } catch {}
    if (pool) {
      let pub = null;
      try { pub = base58.decode(b.senderWallet); } catch {}
      if (!pub || pub.length !== 32 || !sig || sig.length !== 64 || !(await pool.verify(b.senderWallet, pub, message, sig))) return err(400, "INVALID_SIGNATURE", "bad signature");
    } else {
      const key = keyOf(b.senderWallet);
      if (!key || !sig || sig.length !== 64 || !verify(null, Buffer.from(message, "utf8"), key, sig)) return err(400, "INVALID_SIGNATURE", "bad signature");
    }
    const now = Date.now(), issued = Date.parse(b.senderAuthorizationIssuedAt), expires = Date.parse(b.senderAuthorizationExpiresAt);
    if (issued > now + 60_000 || expires - issued > 86_400_000) return err(400, "INVALID_MESSAGE", "validity window");
    if (expires <= now) return err(400, "EXPIRED", "expired");
    const route = routes.get(b.recipientTin);
    if (!route) return err(422, "UNKNOWN_TIN", "unknown tin");
    if (route.routeCommitment !== b.recipientRouteCommitment || route.routeVersion !== b.recipientRouteVersion) return err(422, "ROUTE_MISMATCH", "route");
    const at = new Date(now).toISOString();
    const id = `int_${randomBytes(16).toString("hex")}`;
    const record = { id, paymentId: b.paymentId, state: "VERIFIED", stateVersion: 3, senderWallet: b.senderWallet, transactionCommitment: commitment, createdAt: at, updatedAt: at,
      expiresAt: b.senderAuthorizationExpiresAt, expiresAtSlot: b.expiresAtSlot, request: b, history: [{ state: "RECEIVED", at }, { state: "NODE_VERIFYING", at }, { state: "VERIFIED", at, by: "lean" }] };
    const row = [id, b.paymentId, b.senderWallet, b.senderAuthorizationNonce, "VERIFIED", 3, at, b.senderAuthorizationExpiresAt, b.expiresAtSlot, JSON.stringify(record)];
    const inserted = dbw ? await dbw.insert(row) : await write(() => insert.run(...row).changes === 1);
    if (!inserted) {
      const row = byPayment.get(b.paymentId);
      if (!row) return err(409, "NONCE_REUSED", "nonce already used");
      const existing = JSON.parse(row.doc);
      return JSON.stringify(existing.request) === JSON.stringify(b) ? { status: 200, body: view(existing) } : err(409, "IDEMPOTENCY_CONFLICT", "paymentId reused");
    }
    return { status: 201, body: view(record), location: `/intents/${id}` };
  }
  function view(r) {
    const q = r.request;
    return { id: r.id, paymentId: r.paymentId, status: "pending", receiverStatus: r.state, recipientTin: q.recipientTin, tokenMintAddress: q.tokenMintAddress, amount: q.amount,
      feeLimit: q.feeLimit, senderWallet: q.senderWallet, expiresAt: q.senderAuthorizationExpiresAt, expiresAtSlot: q.expiresAtSlot, transactionCommitment: r.transactionCommitment,
      createdAt: r.createdAt, updatedAt: r.updatedAt, epoch: 1 };
  }
  const count = db.prepare("SELECT COUNT(*) AS n FROM intents");
  return { handle, close: () => { commit(); db.close(); pool?.close(); dbw?.close(); }, counts: () => ({ VERIFIED: count.get().n }) };
}

/** The CreateIntentRequest JSON schema (for Fastify/ajv), equivalent to the shape checks above. */
const bodySchema = { type: "object", additionalProperties: false,
  required: ["paymentId", "recipientTin", "recipientRouteCommitment", "recipientRouteVersion", "tokenMintAddress", "senderWallet", "senderAuthorizationMessage",
    "senderAuthorizationSignature", "senderAuthorizationNonce", "senderAuthorizationIssuedAt", "senderAuthorizationExpiresAt", "amount", "feeLimit", "expiresAtSlot", "senderFundingMode"],
  properties: { paymentId: { type: "string", pattern: RE.id.source }, recipientTin: { type: "string", pattern: RE.tin.source }, recipientRouteCommitment: { type: "string", pattern: RE.hex.source },
    recipientRouteVersion: { type: "integer", minimum: 1 }, tokenMintAddress: { type: "string", pattern: RE.b58.source }, senderWallet: { type: "string", pattern: RE.b58.source },
    senderAuthorizationMessage: { type: "string", maxLength: 4096 }, senderAuthorizationSignature: { type: "string", pattern: RE.b58.source },
    senderAuthorizationNonce: { type: "string", pattern: RE.nonce.source }, senderAuthorizationIssuedAt: { type: "string", pattern: RE.iso.source },
    senderAuthorizationExpiresAt: { type: "string", pattern: RE.iso.source }, amount: { type: "string", pattern: RE.amount.source }, feeLimit: { type: "string", pattern: RE.amount.source },
    expiresAtSlot: { type: "integer", minimum: 0 }, senderFundingMode: { type: "string", maxLength: 64 }, recipientHash: { type: "string", maxLength: 64 }, transactionCommitment: { type: "string", pattern: RE.hex.source } } };



const http = require("node:http");
const [port, dataDir, seedFile] = [Number(process.argv[2]), process.argv[3], process.argv[4]];
const core = createCore(dataDir, seedFile);
const send = (res, status, obj, headers = {}) => { res.writeHead(status, { "content-type": "application/json; charset=utf-8", ...headers }); res.end(JSON.stringify(obj)); };
const server = http.createServer((req, res) => {
  const chunks = []; let size = 0;
  req.on("data", c => { size += c.length; if (size > 65536) req.destroy(); else chunks.push(c); });
  req.on("end", () => {
    if (req.method === "GET" && req.url === "/health/ready") return send(res, 200, { status: "ready" });
    if (req.method === "POST" && req.url === "/") return send(res, 200, { counts: core.counts() });
    if (req.method !== "POST" || req.url !== "/intents") return send(res, 404, { type: "NOT_FOUND" });
    if (!String(req.headers["content-type"] || "").startsWith("application/json")) return send(res, 422, { type: "VALIDATION_ERROR" });
    let b;
    try { b = JSON.parse(Buffer.concat(chunks).toString("utf8"), (k, v) => { if (k === "__proto__") throw new SyntaxError("__proto__"); return v; }); }
    catch { return send(res, 422, { type: "VALIDATION_ERROR" }); }
    core.handle(b).then(r => send(res, r.status, r.body, r.location ? { location: r.location } : {}), () => send(res, 500, { type: "INTERNAL_ERROR" }));
  });
});
server.listen(port, "127.0.0.1", () => console.log(`lean-http listening on ${port}`));
process.on("SIGTERM", () => { server.close(); server.closeAllConnections?.(); core.close(); process.exit(0); });
