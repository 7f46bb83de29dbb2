/**
 * Batches: rows go to warm workers in chunks sized to take about `chunkMs`,
 * on every worker the pool allows. A chunk whose worker times out, dies,
 * writes a malformed frame or too much output is re-run one row per request
 * (hang isolation): only the row that really hangs gets Timeout, every
 * other row still gets exactly what `eval` would give it.
 */
import {
  type BatchOptions,
  type ExternalFn,
  ExtFnError,
  type RowResult,
  type Value,
} from '@improv/extfn-core';
import { type Frame, RawJson } from './frames.js';
import {
  isAllNumbers,
  resultsFromF64Frame,
  resultsFromJsonFrame,
  rowsJsonText,
  rowsToF64,
} from './marshal.js';
import type { Lease, RunnerContext } from './runner.js';
import { WorkerFailure } from './worker.js';

/** Largest chunk in rows, whatever the timing says. */
const MAX_CHUNK = 32_768;
/**
 * A chunk is sized to take milliseconds, so it gets a deadline of its own:
 * this many times its expected time, at least CHUNK_DEADLINE_FLOOR_MS, at
 * most the per-row deadline. Past it the chunk's rows are re-run one by one
 * with the full per-row deadline, so a hanging row costs about one deadline,
 * not two, and no row gets less time than `timeoutMs`.
 */
const CHUNK_DEADLINE_FACTOR = 50;
const CHUNK_DEADLINE_FLOOR_MS = 1_000;
/** Failures that one of the chunk's rows may have caused: retry the rows one by one. */
const ROW_FAILURES = new Set(['timeout', 'exited', 'malformed', 'output']);

/** A `call` request for rows, rendered in one pass; `plain` lets a driver skip per-argument conversion. */
export function callHeader(rows: readonly (readonly Value[])[]): Record<string, unknown> {
  const { text, plain } = rowsJsonText(rows);
  return plain
    ? { op: 'call', plain: true, rows: new RawJson(text) }
    : { op: 'call', rows: new RawJson(text) };
}

export async function runBatch(
  ctx: RunnerContext,
  fn: ExternalFn,
  key: string,
  rows: readonly (readonly Value[])[],
  options: BatchOptions,
): Promise<RowResult[]> {
  const n = rows.length;
  const results: (RowResult | undefined)[] = new Array(n);
  const f64 = ctx.f64 && isAllNumbers(fn);
  const lanes = Math.max(1, Math.min(ctx.pool.max, n));
  const singles: number[] = [];
  let next = 0;
  // What the last batch of this function learnt: start at its chunk size instead of ramping from 1.
  let perRowMs: number | undefined = ctx.perRowMs.get(key);
  let size = perRowMs === undefined ? 1 : MAX_CHUNK;
  let done = 0;
  let stopped: ExtFnError | undefined;

  const hasWork = () => stopped === undefined && (singles.length > 0 || next < n);

  const takeChunk = (): number[] => {
    if (perRowMs !== undefined) {
      const target = Math.max(1, Math.round(ctx.chunkMs / Math.max(perRowMs, 1e-6)));
      size = Math.min(target, size * 8, MAX_CHUNK);
    }
    const fair = Math.ceil((n - next) / lanes);
    const count = Math.max(1, Math.min(size, fair));
    const indices = new Array<number>(Math.min(count, n - next));
    for (let k = 0; k < indices.length; k++) indices[k] = next + k;
    next += indices.length;
    return indices;
  };

  const send = async (indices: number[], lease: Lease): Promise<RowResult[]> => {
    const subset = indices.map((i) => rows[i]!);
    const timeoutMs =
      indices.length > 1 && perRowMs !== undefined
        ? Math.min(
            options.timeoutMs,
            Math.max(CHUNK_DEADLINE_FLOOR_MS, CHUNK_DEADLINE_FACTOR * perRowMs * indices.length),
          )
        : options.timeoutMs;
    const request = { rows: subset.length, timeoutMs, signal: options.signal, lease };
    const frame: Frame = f64
      ? await ctx.request(fn, key, {
          ...request,
          header: { op: 'callf64', rows: subset.length },
          payload: rowsToF64(subset, fn.argTypes.length),
        })
      : await ctx.request(fn, key, { ...request, header: callHeader(subset) });
    // Request time only (not waiting for or starting a worker): what a chunk's size controls.
    const sample = (frame.elapsedMs ?? 0) / indices.length;
    perRowMs = perRowMs === undefined ? sample : 0.5 * perRowMs + 0.5 * sample;
    return f64
      ? resultsFromF64Frame(fn, frame, subset.length)
      : resultsFromJsonFrame(fn, frame, subset.length);
  };

  const lane = async () => {
    const lease: Lease = { since: 0 };
    try {
      await laneLoop(lease);
    } finally {
      if (lease.worker) ctx.pool.release(lease.worker, lease.worker.alive);
    }
  };
  const laneLoop = async (lease: Lease) => {
    while (hasWork()) {
      const single = singles.length > 0;
      const indices = single ? [singles.shift()!] : takeChunk();
      try {
        const out = await send(indices, lease);
        for (let k = 0; k < indices.length; k++) results[indices[k]!] = out[k];
      } catch (error) {
        if (
          options.signal?.aborted ||
          (error instanceof WorkerFailure && error.reason === 'aborted')
        ) {
          stopped = ExtFnError.aborted(fn.name, options.signal?.reason);
          break;
        }
        if (
          indices.length > 1 &&
          error instanceof WorkerFailure &&
          ROW_FAILURES.has(error.reason)
        ) {
          singles.unshift(...indices); // hang isolation: one row per request, on fresh workers
          spawnLanes();
          continue;
        }
        const failure = ctx.toError(fn, error, options.timeoutMs);
        if (
          indices.length === 1 &&
          error instanceof WorkerFailure &&
          ROW_FAILURES.has(error.reason)
        ) {
          results[indices[0]!] = failure; // this row's own failure
        } else {
          stopped = failure; // cannot start workers at all: every remaining row gets it
          break;
        }
      }
      done += indices.length;
      options.onProgress?.(done, n);
    }
  };

  const running = new Set<Promise<void>>();
  function spawnLanes() {
    while (running.size < lanes && hasWork()) {
      const p: Promise<void> = lane().finally(() => running.delete(p));
      running.add(p);
    }
  }
  spawnLanes();
  while (running.size > 0) await Promise.all([...running]);

  for (let i = 0; i < n; i++) {
    if (results[i] === undefined)
      results[i] = stopped ?? ExtFnError.runtime(fn.name, 'row was not evaluated');
  }
  if (perRowMs !== undefined) {
    ctx.perRowMs.delete(key);
    ctx.perRowMs.set(key, perRowMs); // most recent last; the oldest goes past a bound
    if (ctx.perRowMs.size > 1024) ctx.perRowMs.delete(ctx.perRowMs.keys().next().value!);
  }
  if (done < n) options.onProgress?.(n, n); // the rest were settled at once (aborted, closed)
  return results as RowResult[];
}
