/**
 * Core's wrapper around a runner, so that a runner author cannot get the
 * lifecycle wrong: close runs once, nothing runs after close, every failure
 * becomes an ExtFnError, `callBatch` exists even when the runner has none, and
 * a batch the runner never finishes is cut off (see backstop.ts).
 */
import {
  ABORT_WAIT_MS,
  batchSilenceMs,
  type CutOffs,
  closedError,
  guardCall,
  Shutdown,
  withBackstop,
} from './backstop.js';
import { batchByCalls } from './batch-by-calls.js';
import type { ExternalFn } from './descriptor.js';
import { ExtFnError, toExtFnError } from './errors.js';
import {
  type BatchOptions,
  type CallOptions,
  type ColumnResults,
  type LanguageRunner,
  type RowResult,
  type RunnerProbe,
  rowResultsToColumns,
  type WarmUpOptions,
} from './language-runner.js';
import { type Column, copyColumn, fillFailed, newColumn } from './typed-columns.js';
import { describeMismatch, Value } from './value.js';

/** Failed rows read NaN, and every error is an ExtFnError addressed to the function. */
function checkColumns(
  fn: ExternalFn,
  values: Float64Array,
  errors: Map<number, unknown>,
): ColumnResults {
  const checked = new Map<number, ExtFnError>();
  for (const [row, error] of errors) {
    values[row] = Number.NaN;
    checked.set(row, toExtFnError(error, fn.name));
  }
  return { values, errors: checked };
}

/**
 * Throws (failing every row) when a columnar answer's errors are not keyed
 * by row indexes of the batch: a runner's off-by-one would otherwise put a
 * row's error on no row, or on a property of the result column.
 */
function checkErrorRows(method: string, errors: Map<unknown, unknown>, rowCount: number): void {
  for (const row of errors.keys()) {
    if (!Number.isInteger(row) || (row as number) < 0 || (row as number) >= rowCount) {
      const shown = typeof row === 'string' ? JSON.stringify(row) : String(row);
      throw new Error(
        `${method} returned an error for row ${shown}, outside the batch's rows [0, ${rowCount})`,
      );
    }
  }
}

/**
 * A typed result column's cells that its class does not make valid: a text
 * column's cell that is not a string, a boolean byte other than 0 and 1.
 * Each is that row's Runtime error, as a wrong result from `call` is.
 */
function checkTypedCells(fn: ExternalFn, values: Column, errors: Map<number, ExtFnError>): void {
  const type = fn.returnType;
  if (type !== 'text' && type !== 'boolean') return;
  const cells = values as ArrayLike<unknown>;
  for (let i = 0; i < cells.length; i++) {
    const cell = cells[i];
    if (type === 'text' ? typeof cell === 'string' : (cell as number) <= 1) continue;
    if (errors.has(i)) continue;
    const got =
      type === 'text' ? describeMismatch(cell, 'text') : `the byte ${String(cell)} (0 or 1)`;
    errors.set(
      i,
      ExtFnError.runtime(fn.name, `result expected ${type}, got ${got}`, {
        expected: type,
        got,
      }),
    );
  }
}

/** Results in the caller's `into` column (copied there when the runner wrote another). */
function intoColumn<C extends Column>(
  results: ColumnResults<C>,
  options: BatchOptions,
): ColumnResults<C> {
  if (!options.into || results.values === options.into) return results;
  return { values: copyColumn(results.values, options.into) as C, errors: results.errors };
}

/** The same options, with progress reports also counted as a sign of life. */
function withAlive(options: BatchOptions, alive: () => void): BatchOptions {
  const report = options.onProgress;
  return {
    ...options,
    onProgress: (done, total) => {
      alive();
      report?.(done, total);
    },
  };
}

/**
 * A batch's options with a signal that also aborts when core gives up on it
 * (`giveUp`: the backstop, the registry closing): the runner then stops work
 * no one waits for, and writes no result into the caller's `into` column
 * after the call has settled.
 */
function withGiveUp(options: BatchOptions): {
  options: BatchOptions;
  giveUp(reason: unknown): void;
} {
  const controller = new AbortController();
  const signal = options.signal
    ? AbortSignal.any([options.signal, controller.signal])
    : controller.signal;
  return { options: { ...options, signal }, giveUp: (reason) => controller.abort(reason) };
}

/** Settles a columns batch that was cut off: its caller's catch fails every row with it. */
const rejectWith = (error: ExtFnError): never => {
  throw error;
};

/** `failure` for each of `rowCount` rows, by row index (one instance between them). */
function everyRow(rowCount: number, failure: ExtFnError): Map<number, ExtFnError> {
  return new Map(Array.from({ length: rowCount }, (_, i) => [i, failure]));
}

/**
 * The aborted error, when the caller's signal is aborted already: a batch
 * then settles at once with it on every row, as one whose runner is cut off
 * after an abort does, and the runner is not called (a native batch path
 * would otherwise start work only to be cut off ABORT_WAIT_MS later).
 */
function abortedAlready(fn: ExternalFn, options: BatchOptions): ExtFnError | undefined {
  const { signal } = options;
  return signal?.aborted ? ExtFnError.aborted(fn.name, signal.reason) : undefined;
}

/** An all-number columnar batch whose every row failed with `failure`: NaN in `into` or a fresh column. */
function failedColumns(
  rowCount: number,
  options: BatchOptions,
  failure: ExtFnError,
): ColumnResults {
  const values = (options.into as Float64Array | undefined) ?? new Float64Array(rowCount);
  return { values: values.fill(Number.NaN), errors: everyRow(rowCount, failure) };
}

/** A typed columnar batch whose every row failed with `failure`: the fill, in `into` when given. */
function failedTypedColumns(
  fn: ExternalFn,
  rowCount: number,
  options: BatchOptions,
  failure: ExtFnError,
): ColumnResults<Column> {
  const values = newColumn(fn.returnType, rowCount);
  return {
    values: options.into ? copyColumn(values, options.into) : values,
    errors: everyRow(rowCount, failure),
  };
}

/** Longest core waits for a runner's `prepare` before checking a batch. */
const PREPARE_WAIT_MS = 2_000;

export class RunnerHandle {
  readonly language: string;
  readonly runner: LanguageRunner;
  #owned: boolean;
  #closing: Promise<void> | undefined;
  /** Ends the waits in flight when the registry closes. */
  #shutdown = new Shutdown();

  constructor(runner: LanguageRunner, { owned = true }: { owned?: boolean } = {}) {
    if (typeof runner !== 'object' || runner === null) {
      throw new TypeError(
        `a runner must be an object implementing LanguageRunner, got ${String(runner)}`,
      );
    }
    if (runner.specificationVersion !== 'v1') {
      throw new TypeError(
        `runner ${String(runner.language)} implements specification ${String(runner.specificationVersion)}; this core supports v1`,
      );
    }
    if (typeof runner.language !== 'string' || typeof runner.call !== 'function') {
      throw new TypeError('a runner needs a string `language` and a `call` method');
    }
    this.runner = runner;
    this.language = runner.language.toLowerCase();
    this.#owned = owned;
  }

  /** The runner's cache salt: '' when it has none, undefined when asking failed (then nothing is cached). */
  async cacheSalt(): Promise<string | undefined> {
    try {
      return String((await this.runner.cacheSalt?.()) ?? '');
    } catch {
      return undefined;
    }
  }

  /** Passes the notice on (see LanguageRunner.onRegister): nothing after close, never a throw. */
  onRegister(fn: ExternalFn): void {
    if (this.#shutdown.closed || !this.runner.onRegister) return;
    try {
      this.runner.onRegister(fn);
    } catch {
      // a notice: the calls meet and report whatever failed here
    }
  }

  /**
   * Passes the hint on (see LanguageRunner.prepare): nothing after close,
   * never a throw; a promise (the start needs a lookup first) settles, never
   * rejects, and at most PREPARE_WAIT_MS later, so a slow lookup cannot hold
   * the batch up longer than it would anyway.
   */
  prepare(fn: ExternalFn, mode: CallOptions['mode']): Promise<void> | undefined {
    if (this.#shutdown.closed || !this.runner.prepare) return undefined;
    try {
      const started = this.runner.prepare(fn, mode === undefined ? {} : { mode });
      if (!started || typeof (started as Promise<void>).then !== 'function') return undefined;
      // a hint: the calls that follow start what they need and report its failure
      let timer: NodeJS.Timeout | undefined;
      const bounded = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, PREPARE_WAIT_MS);
        (started as Promise<void>).then(resolve, resolve as () => void);
      });
      return bounded.finally(() => clearTimeout(timer));
    } catch {
      return undefined;
    }
  }

  /**
   * The runner's `warmUp`, never rejecting: undefined when ready (or the
   * runner starts nothing per function), a reason when it keeps nothing
   * warm, or the ExtFnError the calls would get.
   */
  async warmUp(fn: ExternalFn, options: WarmUpOptions): Promise<string | ExtFnError | undefined> {
    if (this.#shutdown.closed) return closedError(fn.name);
    if (!this.runner.warmUp) return undefined;
    try {
      const why = await this.runner.warmUp(fn, options);
      return typeof why === 'string' ? why : undefined;
    } catch (error) {
      return toExtFnError(error, fn.name);
    }
  }

  async probe(): Promise<RunnerProbe> {
    try {
      return await this.runner.probe();
    } catch (error) {
      return {
        language: this.language,
        available: false,
        detail: `probe failed: ${error instanceof Error ? error.message : String(error)}`,
      };
    }
  }

  /**
   * One call, guarded: it settles with the runner's answer, or with a
   * Timeout at the deadline plus grace, `aborted` when the caller's signal
   * aborts, or the closed error when the runner has not answered
   * ABORT_WAIT_MS after the registry closed. Unlike a batch, the runner is
   * not told when core gives up on it: it gets the caller's own signal (or
   * none), since a signal per call of its own would cost about 20 µs on
   * Node 20 (an AbortSignal's construction), a fifth of a warm call, on
   * every call, for runners that break their contract (a runner ends a call
   * at its deadline itself).
   */
  call(fn: ExternalFn, args: readonly Value[], options: CallOptions): Promise<Value> {
    if (this.#shutdown.closed) return Promise.reject(closedError(fn.name));
    const { signal } = options;
    if (signal?.aborted) return Promise.reject(ExtFnError.aborted(fn.name, signal.reason));
    let work: Promise<Value>;
    try {
      work = Promise.resolve(this.runner.call(fn, args, options));
    } catch (error) {
      work = Promise.reject(error); // a runner that throws synchronously
    }
    return guardCall(fn, work, options.timeoutMs, signal, this.#shutdown);
  }

  /** Waits for `promise` (the runner's warmUp) as for a call: a Timeout, an abort, a close. */
  guard<T>(
    fn: ExternalFn,
    promise: Promise<T>,
    timeoutMs: number,
    signal: AbortSignal | undefined,
  ): Promise<T> {
    return guardCall(fn, promise, timeoutMs, signal, this.#shutdown);
  }

  /** Never rejects for a row's failure: each row gets its Value or its ExtFnError. */
  async callBatch(
    fn: ExternalFn,
    rows: readonly (readonly Value[])[],
    options: BatchOptions,
  ): Promise<RowResult[]> {
    if (this.#shutdown.closed) throw closedError(fn.name);
    const aborted = abortedAlready(fn, options);
    if (aborted) return rows.map(() => aborted);
    if (this.runner.callBatch) {
      const callBatch = this.runner.callBatch.bind(this.runner);
      try {
        const results = await this.#cutOffBatch(
          fn,
          options,
          (guarded) => callBatch(fn, rows, guarded),
          (error) => rows.map(() => error),
        );
        if (!Array.isArray(results) || results.length !== rows.length) {
          throw new Error(
            `callBatch returned ${Array.isArray(results) ? results.length : typeof results} results for ${rows.length} rows`,
          );
        }
        return results;
      } catch (error) {
        const failure = toExtFnError(error, fn.name);
        return rows.map(() => failure);
      }
    }
    return batchByCalls(fn, rows, options, (args) => this.call(fn, args, options));
  }

  /** Never rejects for a row's failure: failed rows are NaN in `values` with their error in `errors`. */
  async callColumns(
    fn: ExternalFn,
    columns: readonly Float64Array[],
    options: BatchOptions,
  ): Promise<ColumnResults> {
    if (this.#shutdown.closed) throw closedError(fn.name);
    const rowCount = columns[0]?.length ?? 0;
    const aborted = abortedAlready(fn, options);
    if (aborted) return failedColumns(rowCount, options, aborted);
    if (!this.runner.callColumns) {
      const rows = Array.from({ length: rowCount }, (_, i) =>
        columns.map((column) => Value.number(column[i]!)),
      );
      // callBatch's results are unchecked here: rowResultsToColumns checks each row's type.
      return intoColumn(rowResultsToColumns(fn, await this.callBatch(fn, rows, options)), options);
    }
    const callColumns = this.runner.callColumns.bind(this.runner);
    try {
      const { values, errors } = await this.#cutOffBatch(
        fn,
        options,
        (guarded) => callColumns(fn, columns, guarded),
        rejectWith,
      );
      if (
        !(values instanceof Float64Array) ||
        values.length !== rowCount ||
        !(errors instanceof Map)
      ) {
        throw new Error(`callColumns returned a malformed result for ${rowCount} rows`);
      }
      checkErrorRows('callColumns', errors, rowCount);
      return checkColumns(fn, intoColumn({ values, errors }, options).values, errors);
    } catch (error) {
      return failedColumns(rowCount, options, toExtFnError(error, fn.name));
    }
  }

  /** Whether the runner has its own typed-columns path. */
  get hasTypedColumns(): boolean {
    return typeof this.runner.callTypedColumns === 'function';
  }

  /**
   * The runner's own typed-columns path (see `hasTypedColumns`). Never
   * rejects for a row's failure; a broken answer fails every row.
   */
  async callTypedColumns(
    fn: ExternalFn,
    columns: readonly Column[],
    options: BatchOptions,
  ): Promise<ColumnResults<Column>> {
    if (this.#shutdown.closed) throw closedError(fn.name);
    const rowCount = columns[0]?.length ?? 0;
    const aborted = abortedAlready(fn, options);
    if (aborted) return failedTypedColumns(fn, rowCount, options, aborted);
    const callTypedColumns = this.runner.callTypedColumns!.bind(this.runner);
    try {
      const { values, errors } = await this.#cutOffBatch(
        fn,
        options,
        (guarded) => callTypedColumns(fn, columns, guarded),
        rejectWith,
      );
      const expected = newColumn(fn.returnType, 0).constructor;
      if (
        values?.constructor !== expected ||
        values.length !== rowCount ||
        !(errors instanceof Map)
      ) {
        throw new Error(`callTypedColumns returned a malformed result for ${rowCount} rows`);
      }
      checkErrorRows('callTypedColumns', errors, rowCount);
      for (const [row, error] of errors) {
        if (!ExtFnError.isInstance(error)) errors.set(row, toExtFnError(error, fn.name));
      }
      checkTypedCells(fn, values, errors);
      const out = intoColumn({ values, errors }, options);
      fillFailed(fn.returnType, out.values, errors);
      return out;
    } catch (error) {
      return failedTypedColumns(fn, rowCount, options, toExtFnError(error, fn.name));
    }
  }

  /**
   * A runner's own batch path under core's cut-offs: the backstop (no sign
   * of life for batchSilenceMs), and the caller's abort and the registry
   * closing, each ABORT_WAIT_MS later for the runner to answer with what it
   * finished. When one fires the runner is told to give up (its signal
   * aborts) and the batch settles as `settle` says for that error.
   */
  #cutOffBatch<T>(
    fn: ExternalFn,
    options: BatchOptions,
    start: (guarded: BatchOptions) => Promise<T>,
    settle: (error: ExtFnError) => T,
  ): Promise<T> {
    const run = withGiveUp(options);
    const every = (error: ExtFnError): T => {
      run.giveUp(error);
      return settle(error);
    };
    const { signal } = options;
    const cutOffs: CutOffs<T> = {
      signal,
      onAbort: () => every(ExtFnError.aborted(fn.name, signal?.reason)),
      abortWaitMs: ABORT_WAIT_MS,
      shutdown: this.#shutdown,
      onClose: () => every(closedError(fn.name)),
      closeWaitMs: ABORT_WAIT_MS,
    };
    return withBackstop(
      (alive) => start(withAlive(run.options, alive)),
      batchSilenceMs(options.timeoutMs),
      () => every(ExtFnError.timeout(fn.name, options.timeoutMs)),
      cutOffs,
    );
  }

  /**
   * Closes the runner once; calls in flight that it has not answered
   * ABORT_WAIT_MS later settle with the closed error (their runner signal
   * aborted), and calls after get it at once.
   */
  close(): Promise<void> {
    this.#shutdown.close();
    if (!this.#owned) return Promise.resolve();
    this.#closing ??= Promise.resolve().then(() => this.runner.close?.());
    return this.#closing;
  }
}
