/**
 * The plugin interface a language runner implements. Versioned on purpose:
 * every runner declares `specificationVersion`, and core refuses one it does
 * not implement (today only 'v1' exists) with a message naming both versions,
 * instead of calling methods whose contract it does not know.
 */
import type { ExternalFn } from './descriptor.js';
import { ExtFnError } from './errors.js';
import type { Column } from './typed-columns.js';
import { describeMismatch, isPlainValueOf, isValueOf, type Value } from './value.js';

/** One call's outcome in a batch: its value, or its own error. */
export type RowResult = Value | ExtFnError;

/**
 * What a columnar call gives: one result per row in a column of the return
 * type (a Float64Array for numbers, see typed-columns.ts), and the failed
 * rows' errors by row index.
 */
export interface ColumnResults<C extends Column = Float64Array> {
  /** One result per row; the slot of a failed row is NaN (numbers) or 0 / '' / 0 ns. */
  values: C;
  errors: Map<number, ExtFnError>;
}

/**
 * Checks what a runner returned against the declared return type. Never
 * throws: a result that cannot be read (a getter that throws, a revoked
 * Proxy) is that row's Runtime error like any other wrong result.
 */
export function checkResult(fn: ExternalFn, result: unknown): RowResult {
  try {
    if (isPlainValueOf(result, fn.returnType)) return result;
    if (ExtFnError.isInstance(result)) return result.withFunctionName(fn.name);
    if (isValueOf(result, fn.returnType)) return result;
  } catch {
    // described below, as a value that cannot be read
  }
  const got = describeMismatch(result, fn.returnType);
  return ExtFnError.runtime(fn.name, `result expected ${fn.returnType}, got ${got}`, {
    expected: fn.returnType,
    got,
  });
}

/**
 * Per-row results of an all-number function as columns. Each row passes
 * `checkResult`, so a runner that returns something other than a number
 * gives that row an error instead of a silent NaN.
 */
export function rowResultsToColumns(fn: ExternalFn, results: readonly unknown[]): ColumnResults {
  const values = new Float64Array(results.length);
  const errors = new Map<number, ExtFnError>();
  for (let i = 0; i < results.length; i++) {
    const result = checkResult(fn, results[i]);
    if (ExtFnError.isInstance(result)) {
      values[i] = Number.NaN;
      errors.set(i, result);
    } else values[i] = (result as { value: number }).value;
  }
  return { values, errors };
}

/** Columns back as one RowResult per row: a number Value, or the row's error. */
export function columnsToRowResults(
  values: Float64Array,
  errors: Iterable<readonly [number, ExtFnError]>,
): RowResult[] {
  const results: RowResult[] = new Array(values.length);
  for (let i = 0; i < values.length; i++) results[i] = { type: 'number', value: values[i]! };
  for (const [i, error] of errors) results[i] = error;
  return results;
}

export interface CallOptions {
  /** Wall-clock deadline for this call, in milliseconds (per row in a batch). */
  timeoutMs: number;
  /** Cancels the call; the runner kills what it started for it. */
  signal?: AbortSignal;
  /**
   * `warm` (default) lets the runner reuse a long-lived worker for this
   * function; `oneShot` asks for a fresh process that ends with the call.
   */
  mode?: 'warm' | 'oneShot';
}

export interface WarmUpOptions {
  /** The mode the calls will ask for (undefined: the runner's default). */
  mode?: 'warm' | 'oneShot';
  /** The registry's deadline for a call: a bound for work a call would do first (compiling a body). */
  timeoutMs?: number;
}

export interface BatchOptions extends CallOptions {
  /** Called as rows complete, with the count done so far and the total. */
  onProgress?: (done: number, total: number) => void;
  /**
   * `callColumns` / `callTypedColumns` only: the column of the return type,
   * as long as the columns, that the caller wants the results in (core has
   * checked it). A runner may write each chunk's results straight into it and
   * return it as `values`; core copies into it when the runner returns another.
   */
  into?: Column;
}

export interface RunnerCapabilities {
  /** Bodies run inside an OS sandbox (bubblewrap) or an equivalent isolate. */
  readonly isolated: boolean;
  /** Keeps warm workers between calls. */
  readonly warmWorkers: boolean;
  /** Implements `callBatch` natively (otherwise core calls `call` per row). */
  readonly batch: boolean;
  /**
   * Runs `vectorized: true` functions on whole columns. Core refuses a
   * vectorized function for a runner without it (the body would otherwise
   * be run on single values it was not written for).
   */
  readonly vectorized?: boolean;
}

/** What a runner reports about this machine, for `doctor` and error messages. */
export interface RunnerProbe {
  readonly language: string;
  readonly available: boolean;
  /** One line a person can read: what was found, or what is missing. */
  readonly detail: string;
  readonly interpreter?: { readonly path: string; readonly version?: string };
  /** The protection that will apply, e.g. `bubblewrap 0.8.0, seccomp, rlimits, uid 65534`. */
  readonly protection?: string;
  /** What to do when something is missing. */
  readonly fix?: string;
  /** The libraries bodies may use (host-allowed), with their versions. */
  readonly libraries?: readonly {
    readonly name: string;
    readonly version: string;
    readonly path: string;
  }[];
}

export interface LanguageRunner {
  readonly specificationVersion: 'v1';
  /** The language id descriptors use, lower case (`python`, `wasm`, `lua`…). */
  readonly language: string;
  /** The npm package that provides it, for `doctor`, probes and error messages. */
  readonly packageName: string;
  readonly capabilities: RunnerCapabilities;

  /** Whether the runner can work here. Never throws; never runs a body. */
  probe(): Promise<RunnerProbe>;

  /**
   * What decides results here besides the function and its arguments (a
   * digest of the library versions bodies may import): part of every
   * pure-result cache key, so an upgrade never serves a stale result.
   * Optional; memoise it (asked once per `eval`/`evalBatch` of a pure
   * function). A rejection means "do not cache this call".
   */
  cacheSalt?(): Promise<string>;

  /**
   * Told when a function of its language is registered (a model loading): a
   * runner may begin, in the background, what a host process does once
   * before its first call — find the interpreter, probe the sandbox — so
   * that the first refresh does not wait for it. Optional. Never throws,
   * never starts a worker or runs a body, reports nothing: what fails is
   * met and reported again by the calls.
   */
  onRegister?(fn: ExternalFn): void;

  /**
   * A hint that calls of `fn` are coming (a batch core is about to check):
   * a runner may start what they will need — an interpreter lookup, a
   * worker — so that start-up overlaps core's checks. Optional. Never
   * throws, never runs a body, reports nothing: a start that fails is left
   * for the calls themselves to make again and report. `mode` is the mode
   * the calls will ask for (undefined: the runner's default).
   *
   * It may return a promise when what it starts needs asynchronous work
   * first (a new runner's interpreter lookup): core then waits for it before
   * its checks, so the start is under way while they run instead of after
   * them. It must settle as soon as the start is under way (not when it is
   * done), and its rejection is ignored.
   */
  prepare?(fn: ExternalFn, options?: Pick<CallOptions, 'mode'>): void | Promise<void>;

  /**
   * Starts what calls of `fn` need and resolves once it is ready — for a
   * runner with warm workers, an idle worker with the body loaded — so that
   * a refresh soon after (an engine calls `Registry.warmUp` when it loads a
   * model) does not wait for an interpreter start. Never runs a body.
   * Resolves undefined when ready, or with a short reason when the runner
   * keeps nothing warm for it (one-shot mode, no room among the workers it
   * keeps alive); rejects with the ExtFnError the calls would get (no
   * interpreter, no sandbox, a body that does not load). Optional: core
   * counts a runner without it as having nothing to start.
   */
  warmUp?(fn: ExternalFn, options?: WarmUpOptions): Promise<string | undefined>;

  /**
   * Evaluates one call. Core has already checked arity and argument types.
   * Resolves to a Value of `fn.returnType`, or rejects with an ExtFnError
   * (anything else is wrapped as Runtime by core).
   */
  call(fn: ExternalFn, args: readonly Value[], options: CallOptions): Promise<Value>;

  /**
   * Evaluates many calls of one function: `result[i]` is exactly what
   * `call(fn, rows[i])` would give — its Value or its ExtFnError. Optional.
   */
  callBatch?(
    fn: ExternalFn,
    rows: readonly (readonly Value[])[],
    options: BatchOptions,
  ): Promise<RowResult[]>;

  /**
   * The columnar fast path, for functions whose arguments and result are all
   * numbers: `columns[k][i]` is argument k of row i. Optional: core falls back
   * to `callBatch`. Per-row semantics are those of `call`.
   */
  callColumns?(
    fn: ExternalFn,
    columns: readonly Float64Array[],
    options: BatchOptions,
  ): Promise<ColumnResults>;

  /**
   * Typed columns of any value type (see typed-columns.ts; cells already
   * checked by core) without a Value per cell on the way in. Optional: core
   * falls back to `callBatch`. Per-row semantics are those of `call`.
   */
  callTypedColumns?(
    fn: ExternalFn,
    columns: readonly Column[],
    options: BatchOptions,
  ): Promise<ColumnResults<Column>>;

  /** Ends every process and worker the runner started. Called once by core. */
  close?(): Promise<void>;
}

export function isLanguageRunner(x: unknown): x is LanguageRunner {
  if (typeof x !== 'object' || x === null) return false;
  const r = x as Partial<LanguageRunner>;
  return (
    r.specificationVersion === 'v1' &&
    typeof r.language === 'string' &&
    typeof r.call === 'function' &&
    typeof r.probe === 'function'
  );
}
