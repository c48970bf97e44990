/**
 * Imported first by the service's entry point (index.ts), before the service's own modules load.
 *
 * V8 pretenures an allocation site (allocates its objects in the old generation from then on) once
 * most of its objects survived a young collection, and keeps that decision. Here that happens by
 * chance: at start-up, or when a hundred event streams open at once. From then on the objects made
 * for each request (its parsed body, its answer's headers) went to the old generation, and kept
 * their short-lived children alive until the next full collection. In the runs measured (docs/performance.md,
 * Garbage collection), each young collection then promoted about 1 MB instead of 10 KB and paused
 * 3.5–4 ms instead of 1.5 ms, and the service spent 12–20 % more CPU per intent. Almost everything
 * this service allocates lives for one request (its lasting state is in the store), so it turns
 * this off, for the whole process: the verify threads too, whose allocations live for one batch.
 */
import v8 from "node:v8";

v8.setFlagsFromString("--no-allocation-site-pretenuring");
