/**
 * Batches: rows go to warm workers in chunks sized to take about `chunkMs`,
 * on every worker the pool allows. A chunk whose worker times out, dies,
 * writes a malformed frame or too much output is re-run one row per request
 * (hang isolation): only the row that really hangs gets Timeout, every
 * other row still gets exactly what `eval` would give it.
 *
 * The scheduler (`schedule`) knows rows only by index: a `RowSource` turns a
 * range of rows into a request and stores a response, so rows of Values
 * (`evalBatch`) and number columns (`evalColumns`) share every rule above.
 */
import {
  type BatchOptions,
  type ExternalFn,
  ExtFnError,
  type RowResult,
  rowResultsToColumns,
  type Value,
} from '@improv/extfn-core';
import { type Frame, RawJson } from './frames.js';
import {
  columnsJsonText,
  columnsToF64,
  f64Results,
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

/** A request for a range of rows. */
export interface Encoded {
  header: Record<string, unknown>;
  payload?: Uint8Array;
}

/**
 * What a batch is made of, for the scheduler: how many rows, how rows
 * `start…start+count` become one request, and where results go.
 */
export interface RowSource {
  readonly count: number;
  encode(start: number, count: number): Encoded;
  /**
   * Stores the response for rows `start…start+count`; throws ResponseShapeError
   * when it does not fit (the request then fails as malformed, see WorkerRequest.decode).
   */
  decode(frame: Frame, start: number, count: number): void;
  /** Stores one row's error. */
  fail(row: number, error: ExtFnError): void;
}

/** A `call` request for rows, rendered in one pass; `plain` lets a driver skip per-argument conversion. */
export function callHeader(
  rows: readonly (readonly Value[])[],
  start = 0,
  end = rows.length,
): Record<string, unknown> {
  return jsonCall(rowsJsonText(rows, start, end));
}

function jsonCall({ text, plain }: { text: string; plain: boolean }): Record<string, unknown> {
  return plain
    ? { op: 'call', plain: true, rows: new RawJson(text) }
    : { op: 'call', rows: new RawJson(text) };
}

/** Rows of Values (evalBatch): JSON frames, or f64 frames when `f64` (all-number functions). */
export function valueRows(
  fn: ExternalFn,
  rows: readonly (readonly Value[])[],
  results: RowResult[],
  f64: boolean,
): RowSource {
  const arity = fn.argTypes.length;
  return {
    count: rows.length,
    encode: (start, count) =>
      f64
        ? {
            header: { op: 'callf64', rows: count },
            payload: rowsToF64(rows, arity, start, count),
          }
        : { header: callHeader(rows, start, start + count) },
    decode(frame, start, count) {
      const out = f64
        ? resultsFromF64Frame(fn, frame, count)
        : resultsFromJsonFrame(fn, frame, count);
      for (let k = 0; k < count; k++) results[start + k] = out[k]!;
    },
    fail(row, error) {
      results[row] = error;
    },
  };
}

/**
 * Number columns (evalColumns): f64 frames built from column slices and read
 * straight into `values`, or JSON frames written from the columns when the
 * driver has no f64 path. Failed rows are NaN in `values`, with their error in `errors`.
 */
export function columnRows(
  fn: ExternalFn,
  columns: readonly Float64Array[],
  values: Float64Array,
  errors: Map<number, ExtFnError>,
  f64: boolean,
): RowSource {
  const fail = (row: number, error: ExtFnError) => {
    values[row] = Number.NaN;
    errors.set(row, error);
  };
  return {
    count: values.length,
    encode: (start, count) =>
      f64
        ? { header: { op: 'callf64', rows: count }, payload: columnsToF64(columns, start, count) }
        : { header: jsonCall(columnsJsonText(columns, start, count)) },
    decode(frame, start, count) {
      if (f64) {
        const { numbers, errors: failed } = f64Results(fn, frame, count);
        values.set(numbers, start);
        for (const [k, error] of failed) fail(start + k, error);
        return;
      }
      const part = rowResultsToColumns(fn, resultsFromJsonFrame(fn, frame, count));
      values.set(part.values, start);
      for (const [k, error] of part.errors) fail(start + k, error);
    },
    fail,
  };
}

/** Runs every row of `source` on warm workers for `fn`; each row ends with a result or its error. */
export async function schedule(
  ctx: RunnerContext,
  fn: ExternalFn,
  key: string,
  source: RowSource,
  options: BatchOptions,
): Promise<void> {
  const n = source.count;
  const settled = new Uint8Array(n);
  const lanes = Math.max(1, Math.min(ctx.pool.max, n));
  let singles: number[] = [];
  let next = 0;
  // What the last batch of this function learnt: start at its chunk size instead of ramping from 1.
  let perRowMs: number | undefined = ctx.perRowMs.get(key);
  let size = perRowMs === undefined ? 1 : MAX_CHUNK;
  let done = 0;
  let stopped: ExtFnError | undefined;

  const hasWork = () => stopped === undefined && (singles.length > 0 || next < n);

  /** The next range: a row to retry alone, or a fresh chunk. */
  const take = (): [start: number, count: number] => {
    if (singles.length > 0) return [singles.shift()!, 1];
    if (perRowMs !== undefined) {
      const target = Math.max(1, Math.round(ctx.chunkMs / Math.max(perRowMs, 1e-6)));
      size = Math.min(target, size * 8, MAX_CHUNK);
    }
    const fair = Math.ceil((n - next) / lanes);
    const count = Math.min(Math.max(1, Math.min(size, fair)), n - next);
    const start = next;
    next += count;
    return [start, count];
  };

  const send = async (start: number, count: number, lease: Lease): Promise<void> => {
    const timeoutMs =
      count > 1 && perRowMs !== undefined
        ? Math.min(
            options.timeoutMs,
            Math.max(CHUNK_DEADLINE_FLOOR_MS, CHUNK_DEADLINE_FACTOR * perRowMs * count),
          )
        : options.timeoutMs;
    const frame = await ctx.request(fn, key, {
      ...source.encode(start, count),
      rows: count,
      timeoutMs,
      signal: options.signal,
      lease,
      // Decoded before the worker is kept: a response of the wrong shape fails it as malformed.
      decode: (response) => source.decode(response, start, count),
    });
    // Request time only (not waiting for or starting a worker): what a chunk's size controls.
    const sample = (frame.elapsedMs ?? 0) / count;
    perRowMs = perRowMs === undefined ? sample : 0.5 * perRowMs + 0.5 * sample;
    settled.fill(1, start, start + count);
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
      const [start, count] = take();
      try {
        await send(start, count, lease);
      } catch (error) {
        if (
          options.signal?.aborted ||
          (error instanceof WorkerFailure && error.reason === 'aborted')
        ) {
          stopped = ExtFnError.aborted(fn.name, options.signal?.reason);
          break;
        }
        const rowFailure = error instanceof WorkerFailure && ROW_FAILURES.has(error.reason);
        if (count > 1 && rowFailure) {
          // hang isolation: one row per request, on fresh workers
          singles = Array.from({ length: count }, (_, k) => start + k).concat(singles);
          spawnLanes();
          continue;
        }
        const failure = ctx.toError(fn, error, options.timeoutMs);
        if (count === 1 && rowFailure) {
          source.fail(start, failure); // this row's own failure
          settled[start] = 1;
        } else {
          stopped = failure; // cannot start workers at all: every remaining row gets it
          break;
        }
      }
      done += count;
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

  if (done < n) {
    const failure = stopped ?? ExtFnError.runtime(fn.name, 'row was not evaluated');
    for (let i = settled.indexOf(0); i >= 0 && i < n; i = settled.indexOf(0, i + 1)) {
      source.fail(i, failure);
    }
  }
  if (perRowMs !== undefined) {
    ctx.perRowMs.delete(key);
    ctx.perRowMs.set(key, perRowMs); // most recent last; the oldest goes past a bound
    if (ctx.perRowMs.size > 1024) ctx.perRowMs.delete(ctx.perRowMs.keys().next().value!);
  }
  if (done < n) options.onProgress?.(n, n); // the rest were settled at once (aborted, closed)
}
