/**
 * The registry an engine holds: descriptors by name, the installed runners,
 * the pure-result cache, and the checks every call passes before a process
 * is started.
 */

import {
  argumentsNotArray,
  argumentsUnreadable,
  argumentTypes,
  columnsNotArray,
  describeGiven,
  rowsNotArray,
} from './argument-shapes.js';
import { closedError, graceMs, MAX_TIMER_DELAY_MS } from './backstop.js';
import {
  type ArgumentsKey,
  argumentsKey,
  type CacheOptions,
  functionDigest,
  ResultCache,
} from './cache.js';
import { type ExternalFn, parseExternalFn } from './descriptor.js';
import { describeThrown, ExtFnError, RowErrors, toExtFnError } from './errors.js';
import { checkEvalOptions, isTimeout, MAX_TIMEOUT_MS } from './eval-options.js';
import {
  type BatchOptions,
  type CallOptions,
  type ColumnResults,
  checkResult,
  type LanguageRunner,
  type RowResult,
  type RunnerProbe,
} from './language-runner.js';
import { listedNames, quoted, shownName } from './limits.js';
import { RunnerHandle } from './runner-handle.js';
import {
  type Column,
  cellsHold,
  checkInto,
  checkTypedColumns,
  fillFailed,
  newColumn,
  readCell,
  unrepresentable,
  writeCell,
} from './typed-columns.js';
import { describeMismatch, isValueOf, type Value, type ValueType } from './value.js';

export const DEFAULT_TIMEOUT_MS = 5_000;
export { MAX_TIMEOUT_MS };

/** The registry's own default deadline, checked once at construction. */
function checkDefaultTimeout(ms: number): number {
  if (!isTimeout(ms)) {
    throw new RangeError(
      `new Registry: timeoutMs must be a number of milliseconds in (0, ${MAX_TIMEOUT_MS}], got ${String(ms)}`,
    );
  }
  return ms;
}

export interface RegistryOptions {
  /** The runners this engine installed, one per language. */
  runners?: readonly LanguageRunner[];
  /** Default wall-clock deadline per call (default 5 000 ms). */
  timeoutMs?: number;
  /** Pure-result cache bounds, or `false` to turn caching off. */
  cache?: CacheOptions | false;
  /** Descriptors to register straight away. */
  functions?: readonly unknown[];
}

export interface EvalOptions {
  /** Overrides the registry's deadline for this call (per row in a batch). */
  timeoutMs?: number;
  signal?: AbortSignal;
  /** `oneShot` forces a fresh process for this call; default reuses warm workers. */
  mode?: 'warm' | 'oneShot';
  /** Set false to bypass the pure-result cache for this call. */
  cache?: boolean;
}

export interface RegistryWarmUpOptions {
  /** The mode the calls will ask for (default: warm workers). */
  mode?: 'warm' | 'oneShot';
  /** The calls' deadline (default: the registry's), bounding what a call would do first (compiling a body). */
  timeoutMs?: number;
  /** Stops waiting (the starts under way finish and idle as usual). */
  signal?: AbortSignal;
}

/** What `Registry.warmUp` says of one function. */
export interface WarmUpResult {
  name: string;
  /** Its calls find what they need started (or its runner starts nothing per function). */
  warm: boolean;
  /** Why nothing is kept warm for it, when its runner says so (one-shot mode, no room). */
  reason?: string;
  /** What its calls would fail with (no interpreter, a body that does not load). */
  error?: ExtFnError;
}

export interface EvalBatchOptions extends EvalOptions {
  onProgress?: (done: number, total: number) => void;
}

export interface EvalColumnsOptions extends EvalBatchOptions {
  /**
   * Rows whose cells are already errors (say an upstream measure failed):
   * they are not evaluated, and each gets its error back in the result.
   */
  errors?: ReadonlyMap<number, ExtFnError>;
  /**
   * The result column to write into: the return type's column class (see
   * typed-columns.ts), as long as the argument columns. An engine that
   * refreshes the same measure again and again passes the same column each
   * time, so results land in memory already touched instead of a fresh
   * column (on a VM, first-touch page faults can cost more than the work).
   * It is also what comes back as `values`; every row is overwritten (failed
   * rows get the fill: NaN, 0, '', 0 ns).
   */
  into?: Column;
}

interface Entry {
  fn: ExternalFn;
  digest: string;
}

/**
 * Checks a row against the descriptor: arity, then each argument's type.
 * Returns the error, or undefined when the row is fine.
 */
export function checkArguments(fn: ExternalFn, args: readonly Value[]): ExtFnError | undefined {
  let i = -1;
  try {
    if (!Array.isArray(args)) return argumentsNotArray(fn, args);
    if (args.length !== fn.argTypes.length) {
      return ExtFnError.arityMismatch(fn.name, fn.argTypes.length, args.length);
    }
    for (i = 0; i < args.length; i++) {
      const expected = fn.argTypes[i]!;
      const arg = args[i];
      if (isPlainArgument(arg, expected)) continue; // the hot path: numbers, booleans, text
      if (!isValueOf(arg, expected)) {
        return ExtFnError.typeMismatch(fn.name, i + 1, expected, describeMismatch(arg, expected));
      }
    }
    return undefined;
  } catch (error) {
    // a getter that throws, a revoked Proxy: the caller's input, not a runner's failure
    return i < 0 || i >= fn.argTypes.length
      ? argumentsUnreadable(fn, error)
      : ExtFnError.typeMismatch(
          fn.name,
          i + 1,
          fn.argTypes[i]!,
          `a value that cannot be read (${describeThrown(error)})`,
        );
  }
}

/**
 * `isPlainValueOf` for an argument or a result, with the primitive's `typeof` spelt out
 * per type: a switch V8 compiles to compares, where a lookup of the type's
 * primitive by name costs a generic keyed load per argument.
 */
function isPlainArgument(arg: unknown, type: ValueType): arg is Value {
  if (typeof arg !== 'object' || arg === null || (arg as { type?: unknown }).type !== type) {
    return false;
  }
  const value = (arg as { value?: unknown }).value;
  switch (type) {
    case 'text':
      return typeof value === 'string';
    case 'number':
      return typeof value === 'number';
    case 'boolean':
      return typeof value === 'boolean';
    default:
      return false;
  }
}

/** True when every argument and the result are numbers: the columnar (f64) paths apply. */
export function isAllNumbers(fn: ExternalFn): boolean {
  return fn.returnType === 'number' && fn.argTypes.every((t) => t === 'number');
}

/** Checks columns for a columnar call: an all-number function, one Float64Array per argument, equal lengths. */
export function checkColumnArguments(
  fn: ExternalFn,
  columns: readonly Float64Array[],
): ExtFnError | undefined {
  if (!isAllNumbers(fn)) {
    const declared = `(${argumentTypes(fn)}) -> ${fn.returnType}`;
    return ExtFnError.runtime(
      fn.name,
      `columnar calls need a function whose arguments and result are all numbers; this one is ${declared} — use evalBatch`,
    );
  }
  if (!Array.isArray(columns)) return columnsNotArray(fn, columns);
  if (columns.length !== fn.argTypes.length) {
    return ExtFnError.arityMismatch(fn.name, fn.argTypes.length, columns.length);
  }
  const rowCount = columns[0]?.length ?? 0;
  for (let k = 0; k < columns.length; k++) {
    const column = columns[k];
    if (!(column instanceof Float64Array) || column.length !== rowCount) {
      const got =
        column instanceof Float64Array
          ? `a column of ${column.length} rows (column 1 has ${rowCount})`
          : 'something other than a Float64Array';
      return ExtFnError.typeMismatch(fn.name, k + 1, 'number', got);
    }
  }
  return undefined;
}

export class Registry {
  readonly timeoutMs: number;
  readonly cache: ResultCache | undefined;
  #functions = new Map<string, Entry>();
  #runners = new Map<string, RunnerHandle>();
  #closed = false;
  #closing: Promise<void> | undefined;

  constructor(options: RegistryOptions = {}) {
    this.timeoutMs = checkDefaultTimeout(options.timeoutMs ?? DEFAULT_TIMEOUT_MS);
    this.cache = options.cache === false ? undefined : new ResultCache(options.cache);
    for (const runner of options.runners ?? []) this.addRunner(runner);
    for (const fn of options.functions ?? []) this.register(fn);
  }

  /** Installs a runner for its language (one per language). */
  addRunner(runner: LanguageRunner): void {
    this.#assertOpen();
    const handle = new RunnerHandle(runner);
    if (this.#runners.has(handle.language)) {
      throw new Error(`a runner for language "${handle.language}" is already installed`);
    }
    this.#runners.set(handle.language, handle);
    for (const { fn } of this.#functions.values()) {
      if (fn.language === handle.language) handle.onRegister(fn);
    }
  }

  /** The languages with a runner installed. */
  get languages(): string[] {
    return [...this.#runners.keys()];
  }

  /** What each installed runner reports about this machine. */
  probe(): Promise<RunnerProbe[]> {
    return Promise.all([...this.#runners.values()].map((r) => r.probe()));
  }

  /**
   * Adds or replaces a descriptor (ours or the engine's serde form); returns
   * the one it replaced. Throws InvalidDescriptorError naming each bad field.
   * A language with no runner installed is accepted, since `addRunner` may
   * install one later; until then its calls fail with LanguageUnavailable
   * naming the language, the installed runners and the package to install.
   */
  register(descriptor: ExternalFn | unknown): ExternalFn | undefined {
    this.#assertOpen();
    const fn = parseExternalFn(descriptor);
    const previous = this.#functions.get(fn.name)?.fn;
    this.#functions.set(fn.name, { fn, digest: functionDigest(fn) });
    // its runner may begin what its first call would otherwise wait for (onRegister)
    this.#runners.get(fn.language)?.onRegister(fn);
    return previous;
  }

  unregister(name: string): ExternalFn | undefined {
    const previous = this.#functions.get(name)?.fn;
    this.#functions.delete(name);
    return previous;
  }

  get(name: string): ExternalFn | undefined {
    return this.#functions.get(name)?.fn;
  }

  get size(): number {
    return this.#functions.size;
  }

  get names(): string[] {
    return [...this.#functions.keys()];
  }

  /** Evaluates one call. Rejects with an ExtFnError, never anything else. */
  async eval(name: string, args: readonly Value[], options: EvalOptions = {}): Promise<Value> {
    try {
      const entry = this.#lookup(name);
      const { fn } = entry;
      const timeoutMs = checkEvalOptions(fn.name, options, this.timeoutMs);
      const invalid = checkArguments(fn, args);
      if (invalid) throw invalid;
      const runner = this.#runnerFor(fn);
      const salted = this.#cacheDigest(entry, runner, options);
      // Await only when a runner salt is asked for: an uncached call reaches the runner synchronously.
      const digest = typeof salted === 'object' ? await salted : salted;
      const cache = digest === undefined ? undefined : this.cache;
      const cacheKey = cache ? argumentsKey(args) : undefined;
      if (cache) {
        const hit = cache.get(digest!, cacheKey!);
        if (hit !== undefined) return hit;
      }
      const result = await invoke(runner, fn, args, { ...options, timeoutMs });
      if (ExtFnError.isInstance(result)) throw result;
      cache?.set(digest!, cacheKey!, result);
      return result;
    } catch (error) {
      throw unreadableInput(error, name);
    }
  }

  /**
   * Evaluates one function over many rows: `result[i]` is exactly what
   * `eval(name, rows[i])` would give — its Value, or its ExtFnError (a row
   * that is not an array of Values is its own ArityMismatch). Only an unknown
   * name, bad options, `rows` not an array, a missing runner or a closed
   * registry reject the whole call.
   */
  async evalBatch(
    name: string,
    rows: readonly (readonly Value[])[],
    options: EvalBatchOptions = {},
  ): Promise<RowResult[]> {
    try {
      const entry = this.#lookup(name);
      const { fn } = entry;
      const timeoutMs = checkEvalOptions(fn.name, options, this.timeoutMs);
      if (!Array.isArray(rows)) throw rowsNotArray(fn, rows);
      const runner = this.#runnerFor(fn);
      const total = rows.length;
      const salted = this.#cacheDigest(entry, runner, options);
      const digest = typeof salted === 'object' ? await salted : salted;
      const cache = digest === undefined ? undefined : this.cache;
      // Before the checks below, so that a worker start overlaps them; not when the
      // first row is cached (the rest likely are: a start would be for nothing).
      if (
        total > 0 &&
        !options.signal?.aborted &&
        !(cache && isCached(cache, digest!, fn, rows[0]!))
      ) {
        const preparing = runner.prepare(fn, options.mode);
        if (preparing) await preparing;
      }
      // The common batch sends every row: then the runner's array is the result
      // and nothing else of the batch's length is made (a fresh array's pages
      // fault in, which on a VM costs more than the loop). `results` and
      // `pending` (typed, not push(): this loop runs once per cell of a refresh)
      // are made at the first row settled here, an invalid one or a cache hit.
      let results: RowResult[] | undefined;
      let pending: Int32Array | undefined;
      const keys: ArgumentsKey[] | undefined = cache ? new Array(total) : undefined;
      let count = 0;
      const rowErrors = new RowErrors();
      rowErrors.begin();
      try {
        for (let i = 0; i < total; i++) {
          const args = rows[i]!;
          let settled: RowResult | undefined = checkArguments(fn, args);
          if (settled !== undefined) settled = rowErrors.share(settled);
          else if (cache) {
            const key = argumentsKey(args);
            settled = cache.get(digest!, key);
            if (settled === undefined) keys![count] = key;
          }
          if (settled === undefined) {
            if (pending) pending[count] = i;
            count++;
            continue;
          }
          if (!pending) {
            results = new Array(total);
            pending = new Int32Array(total);
            for (let j = 0; j < count; j++) pending[j] = j; // every row before this one is pending
          }
          results![i] = settled;
        }
      } finally {
        rowErrors.end();
      }
      const settled = total - count;
      options.onProgress?.(settled, total);
      if (count === 0) return results ?? [];
      const batchOptions: BatchOptions = { ...options, timeoutMs };
      if (options.onProgress) {
        const report = options.onProgress;
        batchOptions.onProgress = (done) => report(settled + done, total);
      }
      const todo = pending ? Array.from(pending.subarray(0, count), (i) => rows[i]!) : rows;
      const computed = await runner.callBatch(fn, todo, batchOptions);
      // Checked in place when they are the results (RunnerHandle made sure of the
      // length), unless the runner handed back an array that cannot be written.
      const out = results ?? (Object.isFrozen(computed) ? computed.slice() : computed);
      rowErrors.begin();
      try {
        for (let j = 0; j < count; j++) {
          const value = computed[j];
          let result: RowResult;
          try {
            result = isPlainArgument(value, fn.returnType) ? value : checkResult(fn, value);
          } catch {
            result = checkResult(fn, value); // a result whose getter throws: its row's error
          }
          if (result !== value && ExtFnError.isInstance(result)) result = rowErrors.share(result);
          const row = pending ? pending[j]! : j;
          if (result !== value || pending) out[row] = result;
          if (cache && !ExtFnError.isInstance(result)) cache.set(digest!, keys![j]!, result);
        }
      } finally {
        rowErrors.end();
      }
      return out;
    } catch (error) {
      throw unreadableInput(error, name);
    }
  }

  /**
   * The columnar fast path for functions whose arguments and result are all
   * numbers: one Float64Array per argument in, one Float64Array of results
   * out, and the failed rows' errors by index (their slot in `values` is NaN).
   * Same per-row semantics as `evalBatch`, without a Value object per cell;
   * it neither reads nor fills the pure-result cache.
   */
  async evalColumns<C extends Column = Float64Array>(
    name: string,
    columns: readonly Column[],
    options: EvalColumnsOptions = {},
  ): Promise<ColumnResults<C>> {
    try {
      const entry = this.#lookup(name);
      const { fn } = entry;
      const { errors: errorsIn, into, ...rest } = options ?? {};
      const timeoutMs = checkEvalOptions(fn.name, rest, this.timeoutMs);
      const rowCount = Array.isArray(columns) ? (columns[0]?.length ?? 0) : 0;
      if (rowCount > (errorsIn?.size ?? 0) && !rest.signal?.aborted) {
        // Before the column checks, so that a worker start overlaps them (not for a
        // runner that would refuse the function: #runnerFor below says why).
        const runner = this.#runners.get(fn.language);
        if (fn.vectorized !== true || runner?.runner.capabilities.vectorized === true) {
          const preparing = runner?.prepare(fn, rest.mode);
          if (preparing) await preparing;
        }
      }
      const invalid =
        checkTypedColumns(fn, columns, errorsIn) ??
        (into === undefined ? undefined : checkInto(fn, into, columns));
      if (invalid) throw invalid;
      const runner = this.#runnerFor(fn);
      const batchOptions: BatchOptions = { ...rest, timeoutMs };
      if (isAllNumbers(fn) && !errorsIn?.size) {
        const out = await runner.callColumns(fn, columns as Float64Array[], {
          ...batchOptions,
          ...(into ? { into } : {}),
        });
        return out as ColumnResults<C>;
      }
      const out = await evalTypedColumns(runner, fn, columns, errorsIn, batchOptions, into);
      return out as ColumnResults<C>;
    } catch (error) {
      throw unreadableInput(error, name);
    }
  }

  /**
   * Starts what the calls of these functions need (default: every one
   * registered) and resolves once it is ready — for runners with warm
   * workers, an idle worker each with its body loaded — so that a refresh
   * soon after does not wait for interpreter starts: call it when a model
   * is loaded. No body runs. One result per name, in order; a function that
   * cannot start gets the ExtFnError its calls would get, and the others
   * still start (a function whose language has no runner gets the error
   * its calls get too; one whose runner never settles, a Timeout past the
   * deadline plus grace, as a call). Rejects only for an unknown name, bad
   * options or a closed registry (before anything starts), or when `signal`
   * aborts.
   */
  async warmUp(
    names: readonly string[] = this.names,
    options: RegistryWarmUpOptions = {},
  ): Promise<WarmUpResult[]> {
    if (!Array.isArray(names) || names.some((name) => typeof name !== 'string')) {
      const at = Array.isArray(names) ? names.findIndex((name) => typeof name !== 'string') : -1;
      const shown =
        at >= 0
          ? `an array holding ${describeGiven(names[at])} at ${at}`
          : typeof names === 'string'
            ? quoted(names)
            : describeGiven(names);
      throw ExtFnError.runtime(
        'warmUp',
        `names must be an array of registered function names, got ${shown}`,
        { fix: 'pass e.g. ["hypot"], or nothing for every function registered' },
      );
    }
    const timeoutMs = checkEvalOptions(warmUpLabel(names), options, this.timeoutMs);
    const fns = names.map((name) => {
      const { fn } = this.#lookup(name);
      try {
        return { fn, runner: this.#runnerFor(fn) };
      } catch (error) {
        return { fn, failure: error as ExtFnError }; // no runner for it: what its calls get
      }
    });
    const { signal } = options;
    // Aborted already: rejects as an abort would, and starts nothing only to leave it idle.
    const first = signal?.aborted ? fns.find((f) => f.runner) : undefined;
    if (first) throw ExtFnError.aborted(first.fn.name, signal!.reason);
    const asked = { timeoutMs, ...(options.mode === undefined ? {} : { mode: options.mode }) };
    return Promise.all(
      fns.map(async ({ fn, runner, failure }): Promise<WarmUpResult> => {
        let outcome: string | ExtFnError | undefined = failure;
        if (runner) {
          // As a call's: a Timeout past the deadline plus grace, an abort rejects the whole warm-up.
          try {
            outcome = await runner.guard(fn, runner.warmUp(fn, asked), timeoutMs, signal);
          } catch (error) {
            if (signal?.aborted) throw error;
            outcome = error as ExtFnError;
          }
        }
        if (outcome === undefined) return { name: fn.name, warm: true };
        if (typeof outcome === 'string') return { name: fn.name, warm: false, reason: outcome };
        return { name: fn.name, warm: false, error: outcome };
      }),
    );
  }

  /**
   * Ends every runner's processes. The registry cannot be used afterwards:
   * calls made after it reject with a Runtime error (the registry is closed),
   * and calls in flight that a runner has not answered ABORT_WAIT_MS (2 s)
   * after it settle with that error too. Calling it again gives the same
   * promise. It waits for each runner's `close` for at most CLOSE_WAIT_MS or
   * the registry's deadline plus grace, whichever is longer; a runner that
   * fails to close, or does not within that, makes it reject with an
   * ExtFnError naming the runner (the other runners are closed all the same).
   */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    this.#closed = true;
    const runners = [...this.#runners.values()];
    this.#runners.clear();
    this.cache?.clear();
    // at most what a Node timer holds: a longer delay fires at once (TimeoutOverflowWarning)
    const waitMs = Math.min(
      MAX_TIMER_DELAY_MS,
      Math.max(CLOSE_WAIT_MS, this.timeoutMs + graceMs(this.timeoutMs)),
    );
    const outcomes = await Promise.allSettled(runners.map((r) => closeWithin(r, waitMs)));
    const failed = outcomes.find((o) => o.status === 'rejected');
    if (failed) throw (failed as PromiseRejectedResult).reason;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  #assertOpen(): void {
    if (this.#closed) {
      throw new ExtFnError('Runtime', 'this Registry is closed', {
        fix: 'register functions and add runners before Registry.close(), or on a new Registry',
      });
    }
  }

  #lookup(name: string): Entry {
    if (typeof name !== 'string') throw nameNotString(name, this.names);
    if (this.#closed) throw closedError(name);
    const entry = this.#functions.get(name);
    if (!entry) throw ExtFnError.notFound(name, this.names);
    return entry;
  }

  #runnerFor(fn: ExternalFn): RunnerHandle {
    // closed while the call waited (for a cache salt, a prepare): say so, not "no runner"
    if (this.#closed) throw closedError(fn.name);
    const runner = this.#runners.get(fn.language);
    if (!runner) throw ExtFnError.languageUnavailable(fn.name, fn.language, this.languages);
    if (fn.vectorized === true && runner.runner.capabilities.vectorized !== true) {
      throw ExtFnError.runtime(
        fn.name,
        `the ${fn.language} runner (${runner.runner.packageName}) has no vectorized functions: drop \`vectorized: true\` and write the body for one row`,
        {
          fix: 'remove `vectorized: true` from the descriptor, or use a runner with vectorized functions (python, r, julia)',
        },
      );
    }
    return runner;
  }

  /**
   * The cache group of a call, or undefined when it is not cached: the
   * function's digest, salted with what its runner says also decides results
   * (library versions), so an upgrade never serves a stale result.
   */
  #cacheDigest(
    entry: Entry,
    runner: RunnerHandle,
    options: EvalOptions,
  ): string | undefined | Promise<string | undefined> {
    if (!this.cache || !entry.fn.pure || options.cache === false) return undefined;
    if (!runner.runner.cacheSalt) return entry.digest;
    return runner
      .cacheSalt()
      .then((salt) =>
        salt === undefined ? undefined : salt ? `${entry.digest}.${salt}` : entry.digest,
      );
  }
}

/**
 * Typed columns, or columns with error cells in: the rows still to evaluate
 * go through the runner's columnar path (all numbers) or as Value rows
 * through its batch path, and come back in a column of the return type.
 */
async function evalTypedColumns(
  runner: RunnerHandle,
  fn: ExternalFn,
  columns: readonly Column[],
  errorsIn: ReadonlyMap<number, ExtFnError> | undefined,
  options: BatchOptions,
  into: Column | undefined,
): Promise<ColumnResults<Column>> {
  const total = columns[0]?.length ?? 0;
  // No cell in error: the runner's typed path takes the columns as they are (and makes the
  // result column, or writes into the caller's).
  if (!errorsIn?.size && !isAllNumbers(fn) && runner.hasTypedColumns && cellsHold(fn, columns)) {
    return runner.callTypedColumns(fn, columns, into ? { ...options, into } : options);
  }
  const values = into ?? newColumn(fn.returnType, total);
  const errors = new Map<number, ExtFnError>();
  const pending = new Int32Array(total);
  let count = 0;
  for (let i = 0; i < total; i++) {
    const given = errorsIn?.get(i);
    if (given) errors.set(i, given);
    else pending[count++] = i;
  }
  const todo = pending.subarray(0, count);
  // The rows still to evaluate, compacted, through the runner's columnar path
  // (all numbers) or its typed path: error cells in cost no Value per cell.
  if (isAllNumbers(fn)) {
    const part = columns.map((column) => rowsOf(column, todo)) as Float64Array[];
    const out = await runner.callColumns(fn, part, options);
    return scatter(fn, todo, out, { values, errors });
  }
  if (count > 0 && runner.hasTypedColumns) {
    const part = columns.map((column) => rowsOf(column, todo));
    if (cellsHold(fn, part)) {
      const out = await runner.callTypedColumns(fn, part, options);
      return scatter(fn, todo, out, { values, errors });
    }
  }
  const rows: Value[][] = [];
  const rowOf: number[] = [];
  const rowErrors = new RowErrors();
  rowErrors.begin();
  try {
    for (const i of todo) {
      const row: Value[] = new Array(columns.length);
      let failed: ExtFnError | undefined;
      for (let k = 0; k < columns.length && !failed; k++) {
        const cell = readCell(fn, columns, k, i);
        if (ExtFnError.isInstance(cell)) failed = rowErrors.share(cell);
        else row[k] = cell;
      }
      if (failed) errors.set(i, failed);
      else {
        rows.push(row);
        rowOf.push(i);
      }
    }
  } finally {
    rowErrors.end();
  }
  const results = rows.length ? await runner.callBatch(fn, rows, options) : [];
  rowErrors.begin();
  try {
    for (let j = 0; j < rowOf.length; j++) {
      const result = checkResult(fn, results[j]);
      if (ExtFnError.isInstance(result)) errors.set(rowOf[j]!, rowErrors.share(result));
      else if (!writeCell(values, rowOf[j]!, result))
        errors.set(rowOf[j]!, rowErrors.share(unrepresentable(fn, result)));
    }
  } finally {
    rowErrors.end();
  }
  if (into) fillFailed(fn.returnType, values, errors);
  return { values, errors };
}

/** Results of the compacted rows `todo`, put back in their places; failed rows filled. */
function scatter(
  fn: ExternalFn,
  todo: Int32Array,
  out: ColumnResults<Column>,
  into: ColumnResults<Column>,
): ColumnResults<Column> {
  const target = into.values as unknown as unknown[];
  const got = out.values as unknown as ArrayLike<unknown>;
  for (let j = 0; j < todo.length; j++) target[todo[j]!] = got[j];
  for (const [j, error] of out.errors) into.errors.set(todo[j]!, error);
  fillFailed(fn.returnType, into.values, into.errors);
  return into;
}

/** Rows `rows` of `column`, in order, as a column of its kind. */
function rowsOf(column: Column, rows: Int32Array): Column {
  // loops, not Array.from with a map: that walks an iterator, several times slower at 10^5 rows
  const source = column as unknown as ArrayLike<unknown>;
  const out = (
    Array.isArray(column)
      ? new Array(rows.length)
      : new (column.constructor as Float64ArrayConstructor)(rows.length)
  ) as unknown[];
  for (let j = 0; j < rows.length; j++) out[j] = source[rows[j]!];
  return out as unknown as Column;
}

/** Whether a row is valid and its result is in the cache. */
function isCached(
  cache: ResultCache,
  digest: string,
  fn: ExternalFn,
  args: readonly Value[],
): boolean {
  return (
    checkArguments(fn, args) === undefined && cache.get(digest, argumentsKey(args)) !== undefined
  );
}

/** Runs one checked call through a runner and checks what comes back. Never throws. */
async function invoke(
  runner: RunnerHandle,
  fn: ExternalFn,
  args: readonly Value[],
  options: CallOptions,
): Promise<RowResult> {
  try {
    return checkResult(fn, await runner.call(fn, args, options));
  } catch (error) {
    return toExtFnError(error, fn.name);
  }
}

/** The least `close` waits for a runner's `close` before it gives up on it. */
const CLOSE_WAIT_MS = 30_000;

/** A runner's close, bounded and typed: an ExtFnError naming the runner when it fails or hangs. */
function closeWithin(runner: RunnerHandle, waitMs: number): Promise<void> {
  const { language, packageName } = runner.runner;
  const who = `the ${language} runner (${String(packageName)})`;
  return new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      reject(
        new ExtFnError(
          'Timeout',
          `${who} did not close within ${waitMs} ms; its processes may still be running`,
          { language, ms: waitMs, limit: 'wall-clock' },
        ),
      );
    }, waitMs);
    timer.unref?.();
    runner.close().then(
      () => {
        clearTimeout(timer);
        resolve();
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(
          new ExtFnError('Runtime', `${who} failed to close: ${describeThrown(error)}`, {
            language,
            cause: error,
          }),
        );
      },
    );
  });
}

/**
 * What escapes a call's checks that is not an ExtFnError: reading the
 * caller's input threw (an options getter, a Proxy column). A Runtime
 * ExtFnError, so that a call rejects with nothing else.
 */
function unreadableInput(error: unknown, name: unknown): ExtFnError {
  if (ExtFnError.isInstance(error)) return error;
  const label = typeof name === 'string' ? shownName(name) : describeGiven(name);
  return ExtFnError.runtime(
    label,
    `reading the call's arguments or options threw: ${describeThrown(error)}`,
    { cause: error, fix: 'pass plain arrays, columns and option objects (no getters that throw)' },
  );
}

/** Who a warm-up's option errors name: its functions, the first three of a longer list. */
function warmUpLabel(names: readonly string[]): string {
  return names.length === 0 ? 'warmUp' : listedNames(names, 3);
}

/** A function name that is not a string: NotFound, saying what was given. */
function nameNotString(name: unknown, registered: readonly string[]): ExtFnError {
  const given = describeGiven(name);
  return new ExtFnError('NotFound', `a function name must be a string, got ${given}`, {
    got: given,
    available: registered,
    fix: 'pass the name the function was registered under, e.g. registry.names[0]',
  });
}

export interface StandaloneEvalOptions extends EvalOptions {
  /** The runners to choose from; the caller keeps them and closes them. */
  runners: readonly LanguageRunner[];
}

/**
 * Evaluates a descriptor once, without a registry: validation, dispatch and
 * the result check are the same. The runners are not closed; one-shot mode is
 * the default so no worker is left behind.
 */
export async function evaluate(
  descriptor: ExternalFn | unknown,
  args: readonly Value[],
  options: StandaloneEvalOptions,
): Promise<Value> {
  const fn = parseExternalFn(descriptor);
  const timeoutMs = checkEvalOptions(fn.name, options, DEFAULT_TIMEOUT_MS);
  const invalid = checkArguments(fn, args);
  if (invalid) throw invalid;
  const runner = options.runners.find((r) => r.language === fn.language);
  if (!runner) {
    throw ExtFnError.languageUnavailable(
      fn.name,
      fn.language,
      options.runners.map((r) => r.language),
    );
  }
  const handle = new RunnerHandle(runner, { owned: false });
  const result = await invoke(handle, fn, args, {
    timeoutMs,
    mode: options.mode ?? 'oneShot',
    ...(options.signal ? { signal: options.signal } : {}),
  });
  if (ExtFnError.isInstance(result)) throw result;
  return result;
}
