/**
 * `createInterpreterRunner`: a LanguageRunner from an InterpreterSpec. It
 * routes each call — warm calls and batches through the scheduler and
 * `dispatch` to pooled workers, one-shot calls (`one-shot.ts`) and the probe
 * (`probe.ts`) through `runDriverOnce` — and owns what is per runner: the
 * options, the resolved interpreter, remembered load errors, counters.
 */
import { availableParallelism, endianness } from 'node:os';
import { getHeapStatistics } from 'node:v8';
import {
  type BatchOptions,
  batchByCalls,
  type CallOptions,
  type Column,
  type ColumnResults,
  checkColumnArguments,
  checkResult,
  checkTypedColumns,
  type ExternalFn,
  ExtFnError,
  isAllNumbers,
  newColumn,
  type RowResult,
  type RunnerCapabilities,
  type RunnerProbe,
  readCell,
  rowResultsToColumns,
  unrepresentable,
  type Value,
  type WarmUpOptions,
  writeCell,
} from '@improv/extfn-core';
import {
  assertSandboxAvailable,
  DEFAULT_LIMITS,
  policyFor,
  probeSandbox,
  type SandboxLimits,
  type SandboxOptions,
  type SandboxPolicy,
  zygoteEnabled,
} from '@improv/extfn-sandbox';
import {
  type DispatchWorker,
  dispatch,
  endLease,
  type Lease,
  mayQueue,
  toExtFnError,
  type WorkerRequest,
} from './dispatch.js';
import { LoadFailure } from './failures.js';
import type { DriverError, Frame, FrameHeader } from './frames.js';
import { loadErrorToExtFnError, resultsFromJsonFrame } from './from-driver.js';
import { functionKey } from './key.js';
import { oneShotCall } from './one-shot.js';
import { Pool } from './pool.js';
import { probeInterpreter } from './probe.js';
import { unusableChoiceError } from './resolve.js';
import { callHeader, columnRows, typedColumnRows, valueRows } from './row-sources.js';
import { type SchedulerContext, schedule } from './scheduler.js';
import { startWorker } from './start-worker.js';
import { Timings, timingsFor } from './timings.js';
import type {
  InterpreterDefaults,
  InterpreterRunner,
  InterpreterRunnerOptions,
  InterpreterSpec,
  InterpreterStats,
  ResolvedInterpreter,
} from './types.js';
import type { WarmWorker } from './warm-worker.js';
import { ZygoteStarts } from './zygote-starts.js';

const DEFAULT_IDLE_MS = 30_000;
const DEFAULT_STARTUP_MS = 15_000;
const DEFAULT_WORKER_CPU_SECONDS = 3_600;
/** Load errors (syntax errors) are deterministic: remember a few so a bad body does not respawn per call. */
const LOAD_ERRORS_KEPT = 256;

export function createInterpreterRunner(
  spec: InterpreterSpec,
  options: InterpreterRunnerOptions = {},
): InterpreterRunner {
  return new SubprocessRunner(spec, options);
}

/**
 * A runner whose warm workers come from `launch` instead of interpreters:
 * the seam tests use to drive the real runner, scheduler and pool with fake
 * workers. Not exported from the package.
 */
export function createRunnerWithLaunch(
  spec: InterpreterSpec,
  options: InterpreterRunnerOptions,
  launch: (key: string, fn: ExternalFn, signal: AbortSignal | undefined) => Promise<DispatchWorker>,
): InterpreterRunner {
  return new SubprocessRunner(spec, options, launch);
}

/** The spec's defaults under the caller's options; an option set to `undefined` counts as not set. */
function withDefaults(
  defaults: InterpreterDefaults | undefined,
  options: InterpreterRunnerOptions,
): InterpreterRunnerOptions {
  const merged: Record<string, unknown> = { ...defaults };
  for (const [name, value] of Object.entries(options)) {
    if (value !== undefined) merged[name] = value;
  }
  return merged as InterpreterRunnerOptions;
}

/**
 * A batch's result budget (InterpreterRunnerOptions.maxBatchResultBytes):
 * the option, checked, or a quarter of Node's heap limit up to 1 GiB, so a
 * batch of huge results ends with typed errors before the host runs out of
 * memory.
 */
export function batchResultBytes(option: number | undefined): number {
  if (option === undefined)
    return Math.min(2 ** 30, Math.floor(getHeapStatistics().heap_size_limit / 4));
  if (typeof option !== 'number' || !(option >= 1)) {
    throw new RangeError(
      `maxBatchResultBytes must be a number of bytes of at least 1, got ${String(option)}: leave it out for a quarter of the heap limit`,
    );
  }
  return option;
}

/** The `load` request: what the driver is given of a function (docs/protocol.md). */
export function loadHeader(fn: ExternalFn, maxOutputBytes: number): FrameHeader {
  return {
    op: 'load',
    fn: {
      name: fn.name,
      body: fn.body,
      argTypes: fn.argTypes,
      returnType: fn.returnType,
      ...(fn.vectorized === true ? { vectorized: true } : {}),
    },
    maxOutputBytes,
  };
}

/**
 * A batch's result array (or text column) made once its first requests are
 * out (the next turn of the event loop), while the workers run them, or when
 * a chunk needs it first: its n slots' pages fault in as it is made
 * (milliseconds at 10⁵ rows on a VM), then off the batch's critical path.
 */
function madeSoon<T>(make: () => T): () => T {
  let made: T | undefined;
  const get = (): T => (made ??= make());
  setImmediate(get);
  return get;
}

class SubprocessRunner implements InterpreterRunner, SchedulerContext {
  readonly specificationVersion = 'v1' as const;
  readonly language: string;
  readonly packageName: string;
  /** `isolated` follows the policy in force: false once the sandbox fell back to rlimits only. */
  get capabilities(): RunnerCapabilities {
    return {
      isolated: this.#policyInForce === 'restricted',
      warmWorkers: true,
      batch: true,
      vectorized: this.#spec.vectorized === true,
    };
  }
  readonly pool: Pool<DispatchWorker>;
  readonly maxOutputBytes: number;
  /** See InterpreterRunnerOptions.maxBatchResultBytes. */
  readonly maxBatchResultBytes: number;
  readonly retireAfterBusyMs: number;
  readonly chunkMs: number;
  readonly lanes: number;
  readonly f64: boolean;
  /** The driver serves `callcols` (binary columns of every type). */
  readonly cols: boolean;
  /** Measured time per row by function key: this process's for the interpreter setting (see #timings). */
  get perRowMs(): Map<string, number> {
    return this.#timings().perRowMs;
  }
  /** The runner's own figures until its interpreter is known, then its setting's (see timings.ts). */
  #ownTimings = new Timings();
  /** The setting's figures, for the interpreter found and policy in force they were looked up for. */
  #shared: { found: ResolvedInterpreter; policy: SandboxPolicy; timings: Timings } | undefined;
  #spec: InterpreterSpec;
  #options: InterpreterRunnerOptions;
  #interpreter: Promise<ResolvedInterpreter | undefined> | undefined;
  /** What `#interpreter` found, once it has. */
  #found: ResolvedInterpreter | undefined;
  #loadErrors = new Map<string, DriverError>();
  #oneShots = new Set<AbortController>();
  #started = 0;
  #closed = false;
  /** Where restricted workers are cloned from, when the spec has a zygote program. */
  // spares are made only while this runner's pool has nothing under way (spare-workers.ts)
  #zygotes = new ZygoteStarts(() => this.pool.idle());
  /** Worker starts under way (`#launch` until the worker is ready or failed). */
  #starting = 0;
  /** The policy for which the interpreter was found and the sandbox proved usable. */
  #preparedFor: SandboxPolicy | undefined;
  /** What the sandbox probe says is really in force (the fallback, where it applied). */
  #policyInForce: SandboxPolicy;

  constructor(
    spec: InterpreterSpec,
    callerOptions: InterpreterRunnerOptions,
    launch?: (
      key: string,
      fn: ExternalFn,
      signal: AbortSignal | undefined,
    ) => Promise<DispatchWorker>,
  ) {
    this.#spec = spec;
    const options = withDefaults(spec.defaults, callerOptions);
    this.#options = options;
    this.language = spec.language;
    this.packageName = spec.packageName;
    this.#policyInForce = options.policy ?? policyFor(process.env);
    this.maxOutputBytes =
      options.maxOutputBytes ?? this.#limits().stdoutBytes ?? DEFAULT_LIMITS.stdoutBytes;
    this.maxBatchResultBytes = batchResultBytes(options.maxBatchResultBytes);
    // retire at half the lifetime CPU budget
    this.retireAfterBusyMs = this.#workerCpuSeconds() * 500;
    this.chunkMs = options.chunkMs ?? 5;
    this.f64 =
      (spec.f64 === true || spec.f64 === 'in') && options.f64 !== false && endianness() === 'LE';
    this.cols = spec.columns === true && options.f64 !== false && endianness() === 'LE';
    this.pool = new Pool(
      options.maxWorkers ?? availableParallelism(),
      options.idleMs ?? DEFAULT_IDLE_MS,
      launch ?? ((key, fn, signal) => this.#launch(key, fn, signal)),
      options.maxLiveWorkers,
    );
    this.lanes = this.pool.max;
    this.pool.startsFork = () => this.#zygoteUsable() && this.#zygotes.forking();
    this.pool.startTimes = () => this.#timings().starts;
    this.pool.forkReady = () => this.#zygotes.forksReady();
  }

  /**
   * What this process has measured of this runner's interpreter setting
   * (language package, interpreter and the library directories it may read,
   * policy in force), shared with every
   * runner of the same setting; the runner's own before the interpreter is
   * found.
   */
  #timings(): Timings {
    const found = this.#found;
    if (!found) return this.#ownTimings;
    const policy = this.#policyInForce;
    // Looked up again only when what it depends on changed: it is read at every chunk.
    if (this.#shared?.found !== found || this.#shared.policy !== policy) {
      const setting = JSON.stringify([
        this.#spec.packageName,
        found.path,
        found.readOnlyPaths ?? [],
        policy,
      ]);
      this.#shared = { found, policy, timings: timingsFor(setting) };
    }
    return this.#shared.timings;
  }

  stats(): InterpreterStats {
    const { live, peak, killed, queued } = this.pool.counters();
    const zygote = this.#spec.zygoteProgram === undefined ? {} : this.#zygotes.stats();
    return { started: this.#started, live, peak, killed, queued, ...zygote };
  }

  workerPids(): number[] {
    return this.pool.pids();
  }

  async probe(): Promise<RunnerProbe> {
    try {
      await this.#resolve();
    } catch (error) {
      // IMPROV_EXTFN_PYTHON=/nope/python3: what is wrong with it, and the fix
      const unusable = unusableChoiceError(error);
      if (unusable) {
        const { message: detail, fix } = unusable;
        return { language: this.language, available: false, detail, ...(fix ? { fix } : {}) };
      }
    }
    return probeInterpreter({
      language: this.language,
      resolve: () => this.#resolve(),
      installHint: this.#installHint(),
      policy: this.#policy(),
      ...this.#bwrap(),
      sandbox: (interpreter) => ({
        ...this.#sandboxOptions(interpreter, 'probe', this.#limits()),
        timeoutMs: this.#spec.startupTimeoutMs ?? DEFAULT_STARTUP_MS,
      }),
      driverSource: this.#spec.driverSource,
    });
  }

  /**
   * A function was registered (a model loading): what this host process does
   * once before its first call — the interpreter lookup, the sandbox probe,
   * which also boots the spawner (packages/sandbox) — begins now, in the
   * background, so that the first refresh does not wait for it (about half
   * of a new process's first refresh on a 2-core VM: docs/measurements/python.md).
   * Both are remembered for the process; no worker starts here.
   */
  onRegister(_fn: ExternalFn): void {
    const policy = this.#policy();
    if (this.#closed || this.#preparedFor === policy) return;
    this.#resolve().catch(() => {}); // a failure is met by the calls, which look again
    probeSandbox({ policy, ...this.#bwrap() }).catch(() => {});
  }

  /**
   * A batch of `fn` is coming (core calls this before its checks): find the
   * interpreter and probe the sandbox, and start the function's first warm
   * worker if it has none, so that start overlaps the checks — at once when
   * both are known already (a warm runner), else once they are. The batch's
   * first lane takes that worker (Pool.prestart). Nothing for a one-shot
   * call or a function whose body failed to load; a failure is left for the
   * batch to meet and report.
   */
  prepare(fn: ExternalFn, options: Pick<CallOptions, 'mode'> = {}): Promise<void> | undefined {
    if (this.#closed) return undefined;
    const { mode, key, loadError } = this.#route(fn, options);
    if (mode === 'oneShot' || loadError) return undefined;
    const start = () => {
      if (!this.#closed && !this.#loadErrors.has(key)) this.pool.prestart(key, fn);
    };
    if (this.#preparedFor === this.#policy() && this.#found) {
      start();
      return undefined;
    }
    // A new runner: core waits for the lookup and probe, and the worker's
    // spawn, then checks its rows while the interpreter boots.
    return this.#prepare(fn).then(start, () => {});
  }

  /**
   * Starts the function's first warm worker if it has none and waits until
   * it is ready (idle, its body loaded): see LanguageRunner.warmUp. Nothing
   * to keep warm for one-shot calls, or once `maxLiveWorkers` are alive.
   */
  async warmUp(fn: ExternalFn, options: WarmUpOptions = {}): Promise<string | undefined> {
    this.#assertOpen(fn);
    await this.#prepare(fn);
    const { mode, key, loadError } = this.#route(fn, options);
    if (mode === 'oneShot') return 'one-shot calls keep no worker';
    if (loadError) throw loadError;
    try {
      if (!(await this.pool.warm(key, fn))) {
        return `the runner keeps at most ${this.pool.maxLive} workers alive (maxLiveWorkers)`;
      }
    } catch (error) {
      throw this.toError(fn, error, this.#spec.startupTimeoutMs ?? DEFAULT_STARTUP_MS);
    }
    return undefined;
  }

  async call(fn: ExternalFn, args: readonly Value[], options: CallOptions): Promise<Value> {
    this.#assertOpen(fn);
    await this.#prepare(fn);
    const { mode, key, loadError } = this.#route(fn, options);
    if (mode === 'oneShot') return this.#oneShot(fn, args, options);
    if (loadError) throw loadError;
    let result: RowResult | undefined;
    try {
      await this.request(fn, key, {
        header: callHeader([args]),
        rows: 1,
        timeoutMs: options.timeoutMs,
        signal: options.signal,
        // Read while the worker is held, so an answer out of protocol retires it.
        decode: (frame) => {
          result = resultsFromJsonFrame(fn, frame, 1)[0];
        },
      });
    } catch (error) {
      throw this.toError(fn, error, options.timeoutMs);
    }
    if (ExtFnError.isInstance(result)) throw result;
    return result!;
  }

  async callBatch(
    fn: ExternalFn,
    rows: readonly (readonly Value[])[],
    options: BatchOptions,
  ): Promise<RowResult[]> {
    this.#assertOpen(fn);
    await this.#prepare(fn);
    const { mode, key, loadError } = this.#route(fn, options);
    if (mode === 'oneShot') return this.#oneShotBatch(fn, rows, options);
    if (loadError) return rows.map(() => loadError);
    const results = madeSoon((): RowResult[] => new Array(rows.length));
    const source = valueRows(fn, rows, results, this.f64 && isAllNumbers(fn), this.cols);
    await schedule(this, fn, key, source, options);
    source.finish?.();
    return results();
  }

  /**
   * The columnar path: `callf64` frames built from column slices, results
   * written straight into one Float64Array. A driver without f64 gets JSON
   * frames written from the columns, so R gains the same API with no Value per cell.
   */
  async callColumns(
    fn: ExternalFn,
    columns: readonly Float64Array[],
    options: BatchOptions,
  ): Promise<ColumnResults> {
    this.#assertOpen(fn);
    const invalid = checkColumnArguments(fn, columns);
    if (invalid) throw invalid;
    const n = columns[0]?.length ?? 0;
    await this.#prepare(fn);
    // The caller's result column (core checked it), reused across calls: no fresh pages to fault in.
    const values = (options.into as Float64Array | undefined) ?? new Float64Array(n);
    const errors = new Map<number, ExtFnError>();
    if (n === 0) return { values, errors };
    const { mode, key, loadError } = this.#route(fn, options);
    if (mode === 'oneShot' || loadError) {
      // Rare paths: a process per row, or every row the same load error.
      const rows = Array.from({ length: n }, (_, i) =>
        columns.map((column) => ({ type: 'number' as const, value: column[i]! })),
      );
      const results = loadError
        ? rows.map(() => loadError)
        : await this.#oneShotBatch(fn, rows, options);
      return rowResultsToColumns(fn, results);
    }
    await schedule(this, fn, key, columnRows(fn, columns, values, errors, this.f64), options);
    return { values, errors };
  }

  /**
   * Typed columns of other types: `callcols` frames of the column slices
   * when the driver has them, else JSON `call` frames written straight from
   * the columns (no Value per cell on the way in either way), results
   * written into a column of the return type.
   */
  async callTypedColumns(
    fn: ExternalFn,
    columns: readonly Column[],
    options: BatchOptions,
  ): Promise<ColumnResults<Column>> {
    this.#assertOpen(fn);
    const invalid = checkTypedColumns(fn, columns, undefined);
    if (invalid) throw invalid;
    const n = columns[0]?.length ?? 0;
    await this.#prepare(fn);
    // Every row is written (a failed row gets the fill), so a reused `into` needs no clearing.
    const { into } = options;
    const fresh = (): Column => newColumn(fn.returnType, n);
    const errors = new Map<number, ExtFnError>();
    if (n === 0) return { values: into ?? fresh(), errors };
    const { mode, key, loadError } = this.#route(fn, options);
    if (mode === 'oneShot' || loadError) {
      const values = into ?? fresh();
      // Rare paths: a process per row, or every row the same load error.
      const rows = Array.from({ length: n }, (_, i) =>
        columns.map((_, k) => readCell(fn, columns, k, i) as Value),
      );
      const results = loadError
        ? rows.map(() => loadError)
        : await this.#oneShotBatch(fn, rows, options);
      results.forEach((result, i) => {
        const checked = checkResult(fn, result);
        if (ExtFnError.isInstance(checked)) errors.set(i, checked);
        else if (!writeCell(values, i, checked)) errors.set(i, unrepresentable(fn, checked));
      });
      return { values, errors };
    }
    // A text result column is an array of n slots, made soon rather than now (a fixed-width
    // one is a typed array whose pages the results are read straight into).
    const values = into ?? (fn.returnType === 'text' && this.cols ? madeSoon(fresh) : fresh());
    const source = typedColumnRows(fn, columns, values, errors, this.cols);
    await schedule(this, fn, key, source, options);
    source.finish?.();
    return { values: typeof values === 'function' ? values() : values, errors };
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const controller of this.#oneShots) controller.abort(new Error('the runner is closed'));
    await this.pool.close();
    await this.#zygotes.close();
  }

  // ---- the scheduler's context ---------------------------------------------------

  request(fn: ExternalFn, key: string, request: WorkerRequest): Promise<Frame> {
    return dispatch(this, fn, key, request);
  }

  endLease(lease: Lease): void {
    endLease(this.pool, lease);
  }

  trackBacklog(
    key: string,
    estimateMs: () => number,
    leftMs?: () => number | undefined,
  ): () => void {
    return this.pool.trackBacklog(key, estimateMs, leftMs);
  }

  wouldServe(key: string, idleOnly?: boolean): boolean {
    return this.pool.wouldServe(key, idleOnly);
  }

  startsFork(): boolean {
    return this.pool.startsFork();
  }

  mayQueue(key: string, lease: Lease): boolean {
    return this.#options.pipeline !== false && mayQueue(this, key, lease);
  }

  toError(fn: ExternalFn, error: unknown, timeoutMs: number): ExtFnError {
    return toExtFnError(fn, error, timeoutMs);
  }

  // ---- starting interpreters -------------------------------------------------

  async #launch(key: string, fn: ExternalFn, signal: AbortSignal | undefined): Promise<WarmWorker> {
    // A body known not to load fails again without a process (a batch whose prepared start met it).
    const loadError = this.#loadErrors.get(key);
    if (loadError) throw new LoadFailure(loadError);
    // Without an await when the interpreter is known: the process starts before `prepare` returns.
    const interpreter = this.#found ?? (await this.#interpreterFor(fn));
    const limits = { ...this.#limits(), cpuSeconds: Math.ceil(this.#workerCpuSeconds()) };
    const sandbox = this.#sandboxOptions(interpreter, fn.name, limits);
    const startupMs = this.#spec.startupTimeoutMs ?? DEFAULT_STARTUP_MS;
    // a tree is spawned before this returns; a zygote booting is waited for
    let zygote = this.#zygoteFor(sandbox, startupMs);
    this.#starting++;
    try {
      if (zygote instanceof Promise) zygote = await zygote;
      return await startWorker({
        key,
        sandbox,
        zygote: zygote && { zygote, starts: this.#zygotes },
        driverSource: this.#spec.driverSource,
        load: loadHeader(fn, this.maxOutputBytes),
        startupMs,
        maxOutputBytes: this.maxOutputBytes,
        signal,
        onSpawned: () => {
          this.#started++;
        },
      });
    } catch (error) {
      if (error instanceof LoadFailure) this.#rememberLoadError(key, error.error);
      throw error;
    } finally {
      this.#starting--;
    }
  }

  async #oneShot(fn: ExternalFn, args: readonly Value[], options: CallOptions): Promise<Value> {
    const interpreter = (await this.#resolve())!;
    // A one-shot process takes a slot of the same bound as warm workers.
    let release: () => void;
    try {
      release = await this.pool.acquireSlot(options.signal, options.timeoutMs + 2_000);
    } catch (error) {
      throw this.toError(fn, error, options.timeoutMs);
    }
    const controller = new AbortController();
    this.#oneShots.add(controller);
    this.#started++;
    try {
      return await oneShotCall(fn, args, {
        ...options,
        sandbox: this.#sandboxOptions(interpreter, fn.name, this.#limits()),
        driverSource: this.#spec.driverSource,
        load: loadHeader(fn, this.maxOutputBytes),
        closing: controller.signal,
      });
    } finally {
      this.#oneShots.delete(controller);
      release();
    }
  }

  /** One-shot mode for a batch: each row its own process, as many at a time as the pool allows. */
  #oneShotBatch(
    fn: ExternalFn,
    rows: readonly (readonly Value[])[],
    options: BatchOptions,
  ): Promise<RowResult[]> {
    // #oneShot already rejects with the function's ExtFnError.
    const call = (args: readonly Value[]) => this.#oneShot(fn, args, options);
    return batchByCalls(fn, rows, options, call, this.pool.max);
  }

  // ---- helpers ------------------------------------------------------------------

  /** The zygote a restricted worker starts from, or the one booting (see zygote-starts.ts). */
  #zygoteFor(sandbox: Omit<SandboxOptions, 'timeoutMs'>, startupMs: number) {
    const program = this.#spec.zygoteProgram;
    if (program === undefined || !this.#zygoteUsable() || sandbox.policy !== 'restricted') {
      return undefined;
    }
    return this.#zygotes.zygoteFor(
      {
        sandbox,
        program: () => program(sandbox.command),
        maxWorkers: this.pool.maxLive,
        startupMs,
      },
      this.#starting,
    );
  }

  /** Whether this runner's warm workers may come from a zygote at all. */
  #zygoteUsable(): boolean {
    return (
      this.#spec.zygoteProgram !== undefined &&
      !this.#closed &&
      zygoteEnabled() &&
      this.#policyInForce === 'restricted'
    );
  }

  /** How a call of `fn` runs: its mode, its worker key, and the load error every call of it gets, if any. */
  #route(
    fn: ExternalFn,
    options: Pick<CallOptions, 'mode'>,
  ): { mode: 'warm' | 'oneShot'; key: string; loadError: ExtFnError | undefined } {
    const mode = options.mode ?? this.#options.mode ?? 'warm';
    const key = functionKey(fn);
    const loadError = this.#loadErrors.get(key);
    return { mode, key, loadError: loadError && loadErrorToExtFnError(fn, loadError) };
  }

  #sandboxOptions(
    interpreter: ResolvedInterpreter,
    functionName: string,
    limits: Partial<SandboxLimits>,
  ): Omit<SandboxOptions, 'timeoutMs'> {
    return {
      command: interpreter.path,
      args: this.#spec.args,
      ...(this.#spec.env ? { env: this.#spec.env } : {}),
      policy: this.#policy(),
      limits,
      ...(interpreter.readOnlyPaths ? { readOnlyPaths: interpreter.readOnlyPaths } : {}),
      ...this.#bwrap(),
      ...(this.#spec.stdoutPipe ? { stdoutPipe: true } : {}),
      functionName,
    };
  }

  #bwrap(): { bwrapPath?: string } {
    return this.#options.bwrapPath ? { bwrapPath: this.#options.bwrapPath } : {};
  }

  #policy(): SandboxPolicy {
    return this.#options.policy ?? policyFor(process.env);
  }

  #limits(): Partial<SandboxLimits> {
    return { ...this.#spec.limits, ...this.#options.limits };
  }

  #workerCpuSeconds(): number {
    return this.#options.workerCpuSeconds ?? DEFAULT_WORKER_CPU_SECONDS;
  }

  #installHint(): string {
    return (
      this.#spec.installHint ?? `install ${this.language} or point the runner at its interpreter`
    );
  }

  /**
   * No interpreter: none on PATH (the install hint), or the one the user
   * chose names no executable (`unusable`, from resolveExecutable: which
   * option or variable, its value, what is wrong with it, and the fix).
   */
  #unavailable(fn: ExternalFn, unusable?: ExtFnError): ExtFnError {
    const fix = unusable ? unusable.fix : this.#installHint();
    const why = unusable ? `: ${unusable.message}` : ` was found for ${this.packageName}; ${fix}`;
    return new ExtFnError(
      'LanguageUnavailable',
      `function ${fn.name}: no ${this.language} interpreter${unusable ? ` for ${this.packageName}` : ''}${why}`,
      { functionName: fn.name, language: this.language, ...(fix ? { fix } : {}) },
    );
  }

  /** The interpreter, or the LanguageUnavailable error that says why there is none. */
  async #interpreterFor(fn: ExternalFn): Promise<ResolvedInterpreter> {
    let interpreter: ResolvedInterpreter | undefined;
    try {
      interpreter = await this.#resolve();
    } catch (error) {
      const unusable = unusableChoiceError(error);
      throw unusable ? this.#unavailable(fn, unusable) : error;
    }
    if (!interpreter) throw this.#unavailable(fn);
    return interpreter;
  }

  /** Interpreter found and sandbox usable, or a typed error — before any process for the body starts. */
  async #prepare(fn: ExternalFn): Promise<void> {
    const policy = this.#policy();
    if (this.#preparedFor === policy) return; // the hot path of warm calls: nothing to await
    // Both at once (each may start a process: the interpreter's path probe, the
    // sandbox's trial run); a missing interpreter is still the error reported first.
    const probing = assertSandboxAvailable({ policy, ...this.#bwrap(), functionName: fn.name });
    probing.catch(() => {}); // awaited below
    await this.#interpreterFor(fn);
    const probe = await probing;
    this.#policyInForce = probe.policy;
    this.#preparedFor = policy;
  }

  #resolve(): Promise<ResolvedInterpreter | undefined> {
    if (!this.#interpreter) {
      const pending = this.#spec.resolveInterpreter();
      this.#interpreter = pending;
      // Not found (or failed) is not remembered: installing the interpreter later should work.
      pending.then(
        (found) => {
          if (this.#interpreter !== pending) return;
          if (found) this.#found = found;
          else this.#interpreter = undefined;
        },
        () => {
          if (this.#interpreter === pending) this.#interpreter = undefined;
        },
      );
    }
    return this.#interpreter;
  }

  #rememberLoadError(key: string, error: DriverError): void {
    if (this.#loadErrors.size >= LOAD_ERRORS_KEPT) {
      this.#loadErrors.delete(this.#loadErrors.keys().next().value!);
    }
    this.#loadErrors.set(key, error);
  }

  #assertOpen(fn: ExternalFn): void {
    if (this.#closed) throw ExtFnError.runtime(fn.name, 'the runner is closed');
  }
}
