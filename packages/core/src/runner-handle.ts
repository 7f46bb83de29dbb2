/**
 * Core's wrapper around a runner, so that a runner author cannot get the
 * lifecycle wrong: close runs once, nothing runs after close, every failure
 * becomes an ExtFnError, `callBatch` exists even when the runner has none, and
 * a batch the runner never finishes is cut off (see backstop.ts).
 */
import { batchSilenceMs, guardCall, withBackstop } from './backstop.js';
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
import { Value } from './value.js';

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
 * (`giveUp`): the runner then stops work no one waits for, and writes no
 * result into the caller's `into` column after the call has settled.
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

/** Longest core waits for a runner's `prepare` before checking a batch. */
const PREPARE_WAIT_MS = 2_000;

export class RunnerHandle {
  readonly language: string;
  readonly runner: LanguageRunner;
  #owned: boolean;
  #closing: Promise<void> | undefined;

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
    if (this.#closing || !this.runner.onRegister) return;
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
    if (this.#closing || !this.runner.prepare) return undefined;
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
    if (this.#closing) return ExtFnError.runtime(fn.name, 'the runner is closed');
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

  call(fn: ExternalFn, args: readonly Value[], options: CallOptions): Promise<Value> {
    if (this.#closing) return Promise.reject(ExtFnError.runtime(fn.name, 'the runner is closed'));
    if (options.signal?.aborted)
      return Promise.reject(ExtFnError.aborted(fn.name, options.signal.reason));
    try {
      return Promise.resolve(this.runner.call(fn, args, options));
    } catch (error) {
      return Promise.reject(error); // a runner that throws synchronously
    }
  }

  /** Never rejects for a row's failure: each row gets its Value or its ExtFnError. */
  async callBatch(
    fn: ExternalFn,
    rows: readonly (readonly Value[])[],
    options: BatchOptions,
  ): Promise<RowResult[]> {
    if (this.#closing) throw ExtFnError.runtime(fn.name, 'the runner is closed');
    if (this.runner.callBatch) {
      const callBatch = this.runner.callBatch.bind(this.runner);
      const run = withGiveUp(options);
      try {
        const results = await withBackstop(
          (alive) => callBatch(fn, rows, withAlive(run.options, alive)),
          batchSilenceMs(options.timeoutMs),
          () => {
            const timeout = ExtFnError.timeout(fn.name, options.timeoutMs);
            run.giveUp(timeout);
            return rows.map(() => timeout);
          },
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
    return batchByCalls(fn, rows, options, (args) =>
      guardCall(fn, this.call(fn, args, options), options.timeoutMs, options.signal),
    );
  }

  /** Never rejects for a row's failure: failed rows are NaN in `values` with their error in `errors`. */
  async callColumns(
    fn: ExternalFn,
    columns: readonly Float64Array[],
    options: BatchOptions,
  ): Promise<ColumnResults> {
    if (this.#closing) throw ExtFnError.runtime(fn.name, 'the runner is closed');
    const rowCount = columns[0]?.length ?? 0;
    if (!this.runner.callColumns) {
      const rows = Array.from({ length: rowCount }, (_, i) =>
        columns.map((column) => Value.number(column[i]!)),
      );
      // callBatch's results are unchecked here: rowResultsToColumns checks each row's type.
      return intoColumn(rowResultsToColumns(fn, await this.callBatch(fn, rows, options)), options);
    }
    const callColumns = this.runner.callColumns.bind(this.runner);
    const run = withGiveUp(options);
    try {
      const { values, errors } = await withBackstop(
        (alive) => callColumns(fn, columns, withAlive(run.options, alive)),
        batchSilenceMs(options.timeoutMs),
        () => {
          const timeout = ExtFnError.timeout(fn.name, options.timeoutMs);
          run.giveUp(timeout);
          throw timeout;
        },
      );
      if (
        !(values instanceof Float64Array) ||
        values.length !== rowCount ||
        !(errors instanceof Map)
      ) {
        throw new Error(`callColumns returned a malformed result for ${rowCount} rows`);
      }
      return checkColumns(fn, intoColumn({ values, errors }, options).values, errors);
    } catch (error) {
      const failure = toExtFnError(error, fn.name);
      return {
        values: ((options.into as Float64Array | undefined) ?? new Float64Array(rowCount)).fill(
          Number.NaN,
        ),
        errors: new Map(Array.from({ length: rowCount }, (_, i) => [i, failure])),
      };
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
    if (this.#closing) throw ExtFnError.runtime(fn.name, 'the runner is closed');
    const rowCount = columns[0]?.length ?? 0;
    const callTypedColumns = this.runner.callTypedColumns!.bind(this.runner);
    const run = withGiveUp(options);
    try {
      const { values, errors } = await withBackstop(
        (alive) => callTypedColumns(fn, columns, withAlive(run.options, alive)),
        batchSilenceMs(options.timeoutMs),
        () => {
          const timeout = ExtFnError.timeout(fn.name, options.timeoutMs);
          run.giveUp(timeout);
          throw timeout;
        },
      );
      const expected = newColumn(fn.returnType, 0).constructor;
      if (
        values?.constructor !== expected ||
        values.length !== rowCount ||
        !(errors instanceof Map)
      ) {
        throw new Error(`callTypedColumns returned a malformed result for ${rowCount} rows`);
      }
      for (const [row, error] of errors) {
        if (!ExtFnError.isInstance(error)) errors.set(row, toExtFnError(error, fn.name));
      }
      const out = intoColumn({ values, errors }, options);
      if (options.into) fillFailed(fn.returnType, out.values, errors);
      return out;
    } catch (error) {
      const failure = toExtFnError(error, fn.name);
      const values = newColumn(fn.returnType, rowCount);
      return {
        values: options.into ? copyColumn(values, options.into) : values,
        errors: new Map(Array.from({ length: rowCount }, (_, i) => [i, failure])),
      };
    }
  }

  close(): Promise<void> {
    if (!this.#owned) return Promise.resolve();
    this.#closing ??= Promise.resolve().then(() => this.runner.close?.());
    return this.#closing;
  }
}
