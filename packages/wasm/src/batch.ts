/**
 * The batch fast path. Rows become f64 columns in one SharedArrayBuffer that
 * every worker sees (no copies, no transfers); workers run a tight loop over
 * a range of rows and write results in place. A watchdog reads each worker's
 * `progress` cell: a row that runs past the deadline gets Timeout, its worker
 * is terminated, and the rest of its range goes to a fresh worker — so one
 * hung row costs one row, never its neighbours.
 */
import type { BatchOptions, ColumnResults, ExternalFn, RowResult, Value } from '@improv/extfn-core';
import { columnsToRowResults, ExtFnError } from '@improv/extfn-core';
import type { CompiledModule } from './compile.js';
import { PoolClosedError, type PoolWorker, WorkerExitError, type WorkerPool } from './pool.js';

/** Largest range one worker takes at a time: small enough for progress and balance. */
const MAX_CHUNK = 65_536;

/**
 * Characters of the body's own trap messages (improv_error) one batch brings
 * in, each distinct message counted once; past it a row's error is its trap
 * alone. Without it a body could answer every row with a 4 KB message: 1 M
 * rows, 4 GB in the host.
 */
export const MAX_BATCH_MESSAGE_CHARS = 4 * 1_048_576;

interface Range {
  start: number;
  end: number;
  /** Times this range's worker died before starting it. */
  attempts?: number;
}

class Aborted extends Error {}

/** How often the watchdog looks at a busy worker, for a per-row deadline. */
export function watchdogInterval(timeoutMs: number): number {
  return Math.min(250, Math.max(2, Math.floor(timeoutMs / 8)));
}

/** Packs rows of number Values into `arity` columns, then a result column, then a trap flag per row. */
export function packColumns(rows: readonly (readonly Value[])[], arity: number): SharedArrayBuffer {
  const n = rows.length;
  const buffer = new SharedArrayBuffer((arity + 1) * n * 8 + n);
  for (let k = 0; k < arity; k++) {
    const column = new Float64Array(buffer, k * n * 8, n);
    for (let i = 0; i < n; i++) column[i] = (rows[i]![k] as { value: number }).value;
  }
  return buffer;
}

/** Copies caller columns into a shared buffer laid out as packColumns lays it out. */
export function copyColumns(columns: readonly Float64Array[], n: number): SharedArrayBuffer {
  const buffer = new SharedArrayBuffer((columns.length + 1) * n * 8 + n);
  columns.forEach((column, k) => {
    new Float64Array(buffer, k * n * 8, n).set(column.subarray(0, n));
  });
  return buffer;
}

/**
 * What a columnar run gives: results in place, and the rows that failed. A
 * failed row's slot holds whatever the run left there; core's RunnerHandle
 * sets it to NaN before `evalColumns` returns.
 */
export type ColumnsOutcome = ColumnResults;

/** A failure to get a worker from the pool, as the ExtFnError of `fn`. */
export function acquireFailure(
  fn: ExternalFn,
  error: unknown,
  signal: AbortSignal | undefined,
): ExtFnError {
  if (error instanceof PoolClosedError) return ExtFnError.runtime(fn.name, 'the runner is closed');
  if (signal?.aborted) return ExtFnError.aborted(fn.name, signal.reason);
  return ExtFnError.runtime(fn.name, `could not start a wasm worker: ${(error as Error).message}`, {
    cause: error,
  });
}

export async function runBatch(
  pool: WorkerPool,
  compiled: CompiledModule,
  fn: ExternalFn,
  rows: readonly (readonly Value[])[],
  options: BatchOptions,
): Promise<RowResult[]> {
  const n = rows.length;
  const { values, errors } = await runColumns(
    pool,
    compiled,
    fn,
    packColumns(rows, compiled.signature.params.length),
    n,
    options,
  );
  return columnsToRowResults(values, errors);
}

/**
 * Runs `n` rows held in `buffer` (arity columns, result column, trap flags)
 * across the pool. Every row ends with a value or an entry in `errors`.
 */
export async function runColumns(
  pool: WorkerPool,
  compiled: CompiledModule,
  fn: ExternalFn,
  buffer: SharedArrayBuffer,
  n: number,
  options: BatchOptions,
): Promise<ColumnsOutcome> {
  const arity = compiled.signature.params.length;
  const out = new Float64Array(buffer, arity * n * 8, n);
  const trapped = new Uint8Array(buffer, (arity + 1) * n * 8, n);
  const errors = new Map<number, ExtFnError>();
  const finished = new Uint8Array(n);
  const { timeoutMs, signal, onProgress } = options;
  let done = 0;
  /** The count last given to onProgress: it only goes up. */
  let reported = 0;
  /** Rows a running range has already evaluated (its worker's progress cell, read by the watchdog). */
  const inRange = new Map<Range, number>();
  /** Characters of the body's own messages this batch may still bring in (see MAX_BATCH_MESSAGE_CHARS). */
  let messageChars = MAX_BATCH_MESSAGE_CHARS;
  /** One error per distinct message: rows that fail alike share it. */
  const made = new Map<string, ExtFnError>();
  const trapError = (message: string): ExtFnError => {
    let error = made.get(message);
    if (!error) {
      error = ExtFnError.runtime(fn.name, message);
      made.set(message, error);
    }
    return error;
  };
  /** Set when every remaining row shares one fate (instantiation failed or hung, abort, close). */
  let everyRow: ExtFnError | undefined;

  const lanes = Math.max(1, Math.min(pool.options.size, n));
  const chunk = Math.max(1, Math.min(MAX_CHUNK, Math.ceil(n / (lanes * 4))));
  const queue: Range[] = [];
  for (let start = 0; start < n; start += chunk)
    queue.push({ start, end: Math.min(n, start + chunk) });

  const busy = new Set<PoolWorker>();
  /** Gives every row not yet finished the same error, and stops the workers on it. */
  const failAll = (error: ExtFnError) => {
    everyRow ??= error;
    for (const w of busy) void pool.discard(w, new Aborted());
  };
  const onAbort = () => failAll(ExtFnError.aborted(fn.name, signal?.reason));
  if (signal?.aborted) onAbort();
  else signal?.addEventListener('abort', onAbort, { once: true });

  /**
   * Reports the rows done: settled ranges, and the rows running ranges have
   * passed (so that a long range shows progress as it goes, and core's
   * silence bound never takes a working batch for a stalled one).
   */
  const report = () => {
    let count = done;
    for (const rows of inRange.values()) count += rows;
    if (count <= reported) return;
    reported = count;
    onProgress?.(count, n);
  };

  const settle = (start: number, end: number) => {
    finished.fill(1, start, end);
    done += end - start;
    report();
  };

  /** Runs one range on one worker, watching for a hung row. Returns the range left to do, if any. */
  const runRange = async (worker: PoolWorker, range: Range): Promise<Range | undefined> => {
    const { start, end } = range;
    let lastSeen = -3;
    let since = performance.now();
    let hung: number | undefined;
    const timer = setInterval(() => {
      const row = Atomics.load(worker.progress, 0);
      const now = performance.now();
      if (row !== lastSeen) {
        lastSeen = row;
        since = now;
        if (row > start) {
          inRange.set(range, Math.min(row, end) - start);
          report();
        }
      } else if (row >= -1 && hung === undefined && now - since >= timeoutMs) {
        hung = row;
        if (row === -1) {
          // Instantiation (a start function) hung; without imports it would hang for every row.
          failAll(ExtFnError.timeout(fn.name, timeoutMs));
        } else {
          void pool.discard(worker, new WorkerExitError(`row ${row} passed its deadline`));
        }
      }
    }, watchdogInterval(timeoutMs));
    try {
      const reply = await worker.request(
        {
          op: 'batch',
          arity,
          rows: n,
          start,
          end,
          buffer,
          messageChars: Math.max(0, messageChars),
          messageLimit: MAX_BATCH_MESSAGE_CHARS,
        },
        compiled,
      );
      inRange.delete(range);
      if (typeof reply.messageChars === 'number') messageChars -= reply.messageChars;
      if (typeof reply.failure === 'string') {
        failAll(ExtFnError.runtime(fn.name, reply.failure));
        return undefined;
      }
      const messages = reply.messages as string[];
      for (const [row, k] of reply.traps as [number, number][]) {
        errors.set(row, trapError(messages[k]!));
      }
      settle(start, end);
      return undefined;
    } catch (error) {
      inRange.delete(range);
      if (pool.closed) failAll(ExtFnError.runtime(fn.name, 'the runner is closed'));
      if (everyRow) return undefined; // aborted, closed or a hung start: those rows get that error
      const reached = Math.min(hung ?? Atomics.load(worker.progress, 0), end);
      if (reached < start) {
        // The worker died before its first row: try again, but not forever.
        const attempts = (range.attempts ?? 0) + 1;
        if (attempts < 3) return { start, end, attempts };
        for (let i = start; i < end; i++) {
          errors.set(
            i,
            ExtFnError.runtime(fn.name, `the wasm worker stopped: ${(error as Error).message}`),
          );
        }
        settle(start, end);
        return undefined;
      }
      // Rows before `reached` are done; those that trapped lost their message with the worker, so run them again.
      for (let i = start; i < reached; i++) {
        if (trapped[i]) queue.push({ start: i, end: i + 1 });
        else {
          finished[i] = 1;
          done++;
        }
      }
      if (reached === end) {
        report();
        return undefined;
      }
      errors.set(
        reached,
        hung === reached
          ? ExtFnError.timeout(fn.name, timeoutMs)
          : ExtFnError.runtime(fn.name, `the wasm worker stopped: ${(error as Error).message}`),
      );
      settle(reached, reached + 1);
      return reached + 1 < end ? { start: reached + 1, end } : undefined;
    } finally {
      clearInterval(timer);
    }
  };

  const lane = async () => {
    for (;;) {
      if (everyRow) return;
      const range = queue.shift();
      if (!range) return;
      let worker: PoolWorker;
      try {
        worker = await pool.acquire(signal);
      } catch (error) {
        everyRow ??= acquireFailure(fn, error, signal);
        return;
      }
      if (everyRow) {
        pool.release(worker);
        return;
      }
      busy.add(worker);
      const rest = await runRange(worker, range);
      busy.delete(worker);
      if (!worker.dead) pool.release(worker);
      if (rest) queue.unshift(rest);
    }
  };

  try {
    await Promise.all(Array.from({ length: Math.min(lanes, queue.length) }, lane));
  } finally {
    signal?.removeEventListener('abort', onAbort);
  }

  if (done < n) {
    const fate = everyRow ?? ExtFnError.runtime(fn.name, 'the row was not evaluated');
    for (let i = 0; i < n; i++) if (!finished[i] && !errors.has(i)) errors.set(i, fate);
  }
  return { values: out, errors };
}
