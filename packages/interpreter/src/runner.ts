/**
 * `createInterpreterRunner`: a LanguageRunner from an InterpreterSpec. Warm
 * calls go through the pool; one-shot calls start the same driver through
 * `runSandboxed`; batches are chunked across workers with hang isolation.
 */
import { availableParallelism, endianness } from 'node:os';
import {
  type BatchOptions,
  batchByCalls,
  type CallOptions,
  type ColumnResults,
  checkColumnArguments,
  type ExternalFn,
  ExtFnError,
  isAllNumbers,
  type RowResult,
  type RunnerProbe,
  rowResultsToColumns,
  type Value,
} from '@improv/extfn-core';
import {
  assertSandboxAvailable,
  DEFAULT_LIMITS,
  policyFor,
  probeSandbox,
  runSandboxed,
  type SandboxLimits,
  type SandboxPolicy,
  spawnSandboxed,
} from '@improv/extfn-sandbox';
import { callHeader, columnRows, schedule, valueRows } from './batch.js';
import { type DriverError, encodeFrame, type Frame, FrameReader, isReadyFrame } from './frames.js';
import { functionKey } from './key.js';
import { driverErrorToExtFnError, ResponseShapeError, resultsFromJsonFrame } from './marshal.js';
import { Pool } from './pool.js';
import type {
  InterpreterDefaults,
  InterpreterRunner,
  InterpreterRunnerOptions,
  InterpreterSpec,
  InterpreterStats,
  ResolvedInterpreter,
} from './types.js';
import { driverPreamble, LoadFailure, Worker, WorkerFailure } from './worker.js';

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

/** One request for `SubprocessRunner.request`. */
export interface WorkerRequest {
  header: Record<string, unknown>;
  payload?: Uint8Array | undefined;
  /** Rows in the request: sizes the response's byte budget. */
  rows: number;
  timeoutMs: number;
  signal?: AbortSignal | undefined;
  /**
   * A batch lane keeps its worker between chunks while no one else waits
   * (or for a time slice when someone does), instead of a pool round trip
   * per chunk. The lane releases `lease.worker` when it ends.
   */
  lease?: Lease;
  /**
   * Reads the response while the worker is still held: a ResponseShapeError
   * (an answer that does not fit the request) kills the worker and rejects
   * with WorkerFailure `malformed`, so a batch retries the rows one by one.
   */
  decode?: (frame: Frame) => void;
}

export interface Lease {
  worker?: Worker | undefined;
  since: number;
}

/** A lane gives its worker back when others wait and it has held it this long (amortises a start). */
const LEASE_SLICE_MS = 100;

/** Everything the batch and call paths need from the runner. */
export interface RunnerContext {
  readonly pool: Pool;
  readonly maxOutputBytes: number;
  readonly chunkMs: number;
  readonly f64: boolean;
  /** Measured milliseconds per row by function key, so the next batch starts at the right chunk size. */
  readonly perRowMs: Map<string, number>;
  /** Runs one request on a pooled worker for `fn`; see SubprocessRunner.request. */
  request(fn: ExternalFn, key: string, request: WorkerRequest): Promise<Frame>;
  /** A worker failure, load failure or anything else as the ExtFnError of `fn`. */
  toError(fn: ExternalFn, error: unknown, timeoutMs: number): ExtFnError;
}

class SubprocessRunner implements InterpreterRunner, RunnerContext {
  readonly specificationVersion = 'v1' as const;
  readonly language: string;
  readonly packageName: string;
  readonly capabilities: { isolated: boolean; warmWorkers: boolean; batch: boolean };
  readonly pool: Pool;
  readonly maxOutputBytes: number;
  readonly chunkMs: number;
  readonly f64: boolean;
  readonly perRowMs = new Map<string, number>();
  #spec: InterpreterSpec;
  #options: InterpreterRunnerOptions;
  #interpreter: Promise<ResolvedInterpreter | undefined> | undefined;
  #loadErrors = new Map<string, DriverError>();
  #oneShots = new Set<AbortController>();
  #started = 0;
  #closed = false;
  /** The policy for which the interpreter was found and the sandbox proved usable. */
  #preparedFor: SandboxPolicy | undefined;

  constructor(spec: InterpreterSpec, callerOptions: InterpreterRunnerOptions) {
    this.#spec = spec;
    const options = withDefaults(spec.defaults, callerOptions);
    this.#options = options;
    this.language = spec.language;
    this.packageName = spec.packageName;
    const policy = options.policy ?? policyFor(process.env);
    this.capabilities = { isolated: policy === 'restricted', warmWorkers: true, batch: true };
    this.maxOutputBytes =
      options.maxOutputBytes ?? this.#limits().stdoutBytes ?? DEFAULT_LIMITS.stdoutBytes;
    this.chunkMs = options.chunkMs ?? 5;
    this.f64 = spec.f64 === true && options.f64 !== false && endianness() === 'LE';
    this.pool = new Pool(
      options.maxWorkers ?? availableParallelism(),
      options.idleMs ?? DEFAULT_IDLE_MS,
      (key, fn, signal) => this.#launch(key, fn, signal),
    );
  }

  stats(): InterpreterStats {
    const { live, peak, killed, queued } = this.pool.counters();
    return { started: this.#started, live, peak, killed, queued };
  }

  workerPids(): number[] {
    return this.pool.pids();
  }

  async probe(): Promise<RunnerProbe> {
    const language = this.language;
    let interpreter: ResolvedInterpreter | undefined;
    try {
      interpreter = await this.#resolve();
    } catch (error) {
      return {
        language,
        available: false,
        detail: `could not look for the interpreter: ${String(error)}`,
      };
    }
    if (!interpreter) {
      return {
        language,
        available: false,
        detail: `no ${language} interpreter found`,
        fix: this.#installHint(),
      };
    }
    const sandbox = await probeSandbox({ policy: this.#policy(), ...this.#bwrap() });
    const base = { language, interpreter: { path: interpreter.path }, protection: sandbox.summary };
    if (!sandbox.ok) {
      return {
        ...base,
        available: false,
        detail: sandbox.problem ?? sandbox.summary,
        ...(sandbox.fix ? { fix: sandbox.fix } : {}),
      };
    }
    // Start the driver (no body) under the real sandbox: proves the interpreter runs there and reads its version.
    try {
      const result = await runSandboxed({
        ...this.#sandboxOptions(interpreter, 'probe', this.#limits()),
        timeoutMs: this.#spec.startupTimeoutMs ?? DEFAULT_STARTUP_MS,
        stdin: Buffer.concat([
          driverPreamble(this.#spec.driverSource),
          encodeFrame({ op: 'exit' }),
        ]),
      });
      const ready = new FrameReader().push(result.stdout)[0]?.header;
      if (!isReadyFrame(ready)) {
        return {
          ...base,
          available: false,
          detail: `the driver did not start: ${result.stderr.trim().split('\n').pop() ?? `exit ${result.exitCode}`}`,
        };
      }
      const version = typeof ready.version === 'string' ? ready.version : undefined;
      return {
        ...base,
        available: true,
        interpreter: { path: interpreter.path, ...(version ? { version } : {}) },
        detail: `${language} ${version ?? ''} at ${interpreter.path}`.replace(/ +/g, ' '),
      };
    } catch (error) {
      const e = error as ExtFnError;
      return { ...base, available: false, detail: e.message, ...(e.fix ? { fix: e.fix } : {}) };
    }
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
    const results: RowResult[] = new Array(rows.length);
    const source = valueRows(fn, rows, results, this.f64 && isAllNumbers(fn));
    await schedule(this, fn, key, source, options);
    return results;
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
    const values = new Float64Array(n);
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

  async close(): Promise<void> {
    this.#closed = true;
    for (const controller of this.#oneShots) controller.abort(new Error('the runner is closed'));
    await this.pool.close();
  }

  /**
   * One request on a warm worker for `fn`. A worker that fails is killed and
   * replaced; a worker that died while it had served earlier requests is
   * retried once on a fresh one (its state, not this request, may be at fault).
   */
  async request(fn: ExternalFn, key: string, request: WorkerRequest): Promise<Frame> {
    const { header, payload, rows, timeoutMs, signal, lease, decode } = request;
    for (let attempt = 0; ; attempt++) {
      let worker = lease?.worker;
      if (!worker?.alive) {
        if (worker) this.pool.release(worker, false);
        // Waiting for a slot is bounded like the registry's own backstop, so a call
        // the caller gave up on does not run later for nothing.
        worker = await this.pool.acquire(key, fn, signal, timeoutMs + 2_000);
        if (lease) {
          lease.worker = worker;
          lease.since = performance.now();
        }
      }
      const fresh = worker.requests === 0;
      let keep = false;
      try {
        const frame = await worker.request(header, payload, {
          deadlineMs: timeoutMs,
          signal,
          budget: rows * (this.maxOutputBytes + 64) + 1024 * 1024,
        });
        try {
          decode?.(frame);
        } catch (error) {
          if (!(error instanceof ResponseShapeError)) throw error;
          void worker.kill(); // it answered out of protocol: not to be trusted with another request
          throw new WorkerFailure('malformed', error.message);
        }
        keep = worker.busyMs < this.#workerCpuSeconds() * 500; // retire at half the CPU budget
        return frame;
      } catch (error) {
        if (attempt === 0 && !fresh && error instanceof WorkerFailure && error.reason === 'exited')
          continue;
        throw error;
      } finally {
        const held =
          keep &&
          lease !== undefined &&
          (!this.pool.hasWaiters() || performance.now() - lease.since < LEASE_SLICE_MS);
        if (!held) {
          if (lease) lease.worker = undefined;
          this.pool.release(worker, keep);
        }
      }
    }
  }

  toError(fn: ExternalFn, error: unknown, timeoutMs: number): ExtFnError {
    if (ExtFnError.isInstance(error)) return error.withFunctionName(fn.name);
    if (error instanceof LoadFailure) return driverErrorToExtFnError(fn, error.error);
    if (error instanceof WorkerFailure) {
      if (ExtFnError.isInstance(error.cause)) return error.cause.withFunctionName(fn.name);
      switch (error.reason) {
        case 'closed':
          return ExtFnError.runtime(fn.name, 'the runner is closed');
        case 'timeout':
          return ExtFnError.timeout(fn.name, timeoutMs);
        case 'aborted':
          return ExtFnError.aborted(fn.name, error.abortReason);
        case 'output':
          return ExtFnError.runtime(fn.name, 'output too large', {
            limit: 'output',
            ...(error.stderr ? { stderr: error.stderr } : {}),
          });
        default: {
          const limit = error.limit ? ` (${error.limit} limit)` : '';
          return ExtFnError.runtime(fn.name, `${error.message}${limit}`, {
            ...(error.stderr ? { stderr: error.stderr } : {}),
            ...(error.limit ? { limit: error.limit } : {}),
            cause: error,
          });
        }
      }
    }
    const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    return ExtFnError.runtime(fn.name, `runner failed: ${message}`, { cause: error });
  }

  // ---- starting interpreters -------------------------------------------------

  async #launch(key: string, fn: ExternalFn, signal: AbortSignal | undefined): Promise<Worker> {
    const interpreter = await this.#resolve();
    if (!interpreter) throw this.#unavailable(fn);
    const limits = { ...this.#limits(), cpuSeconds: Math.ceil(this.#workerCpuSeconds()) };
    const process = spawnSandboxed(this.#sandboxOptions(interpreter, fn.name, limits));
    this.#started++;
    const worker = new Worker(key, process, this.#spec.driverSource);
    const startupMs = this.#spec.startupTimeoutMs ?? DEFAULT_STARTUP_MS;
    try {
      await worker.ready(startupMs, signal);
      const frame = await worker.request(this.#loadHeader(fn), undefined, {
        deadlineMs: startupMs,
        signal,
        budget: 1024 * 1024,
      });
      if (frame.header.error !== undefined) {
        const error = frame.header.error as DriverError;
        this.#rememberLoadError(key, error);
        throw new LoadFailure(error);
      }
      if (frame.header.ok !== true) {
        throw new WorkerFailure(
          'malformed',
          `unexpected load response ${JSON.stringify(frame.header).slice(0, 200)}`,
        );
      }
      worker.requests = 0; // `load` does not count as history for the retry rule
      return worker;
    } catch (error) {
      await worker.kill();
      // A worker that dies before it is ready says nothing about any row: report it as a
      // start failure, so a batch fails once instead of retrying row by row.
      if (
        error instanceof WorkerFailure &&
        error.reason !== 'aborted' &&
        error.reason !== 'closed' &&
        error.reason !== 'startup'
      ) {
        const failure = new WorkerFailure(
          'startup',
          `${error.message} while starting`,
          error.stderr,
          error.limit,
        );
        failure.cause = error;
        throw failure;
      }
      throw error;
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
    const signal = options.signal
      ? AbortSignal.any([options.signal, controller.signal])
      : controller.signal;
    this.#started++;
    let stdout: Buffer;
    let stderr: string;
    let exit: string;
    let limit: ExtFnError['limit'];
    try {
      const result = await runSandboxed({
        ...this.#sandboxOptions(interpreter, fn.name, this.#limits()),
        timeoutMs: options.timeoutMs,
        signal,
        stdin: Buffer.concat([
          driverPreamble(this.#spec.driverSource),
          encodeFrame({ ...this.#loadHeader(fn), id: 1 }),
          encodeFrame({ ...callHeader([args]), id: 2 }),
          encodeFrame({ op: 'exit' }),
        ]),
      });
      ({ stdout, stderr, limit } = result);
      exit = result.signal
        ? `was killed by ${result.signal}`
        : `exited with code ${result.exitCode}`;
    } catch (error) {
      if (controller.signal.aborted && !options.signal?.aborted)
        throw ExtFnError.runtime(fn.name, 'the runner is closed');
      throw this.toError(fn, error, options.timeoutMs);
    } finally {
      this.#oneShots.delete(controller);
      release();
    }
    let frames: Frame[];
    try {
      frames = new FrameReader(Number.MAX_SAFE_INTEGER).push(stdout);
    } catch (error) {
      throw ExtFnError.runtime(fn.name, (error as Error).message, { stderr });
    }
    // Exactly ready, then the answers to requests 1 and 2, as a warm worker would
    // send them: anything else (a body writing to the protocol channel) fails the
    // call the same way it fails a warm worker.
    const unexpected = frames.find((f, k) =>
      k === 0 ? f.header.ready === undefined : f.header.id !== k,
    );
    if (unexpected) {
      throw ExtFnError.runtime(
        fn.name,
        `unexpected frame from the driver: ${JSON.stringify(unexpected.header).slice(0, 200)}`,
        { stderr },
      );
    }
    const load = frames[1];
    if (load?.header.error !== undefined)
      throw driverErrorToExtFnError(fn, load.header.error as DriverError);
    const answer = frames[2];
    if (!answer) {
      const why = limit ? ` (${limit} limit)` : '';
      throw ExtFnError.runtime(fn.name, `the interpreter ${exit} before answering${why}`, {
        stderr,
        ...(limit ? { limit } : {}),
      });
    }
    const result = resultsFromJsonFrame(fn, answer, 1)[0]!;
    if (ExtFnError.isInstance(result)) throw result;
    return result;
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

  /** How a call of `fn` runs: its mode, its worker key, and the load error every call of it gets, if any. */
  #route(
    fn: ExternalFn,
    options: CallOptions,
  ): { mode: 'warm' | 'oneShot'; key: string; loadError: ExtFnError | undefined } {
    const mode = options.mode ?? this.#options.mode ?? 'warm';
    const key = functionKey(fn);
    const loadError = this.#loadErrors.get(key);
    return { mode, key, loadError: loadError && driverErrorToExtFnError(fn, loadError) };
  }

  #loadHeader(fn: ExternalFn): Record<string, unknown> {
    return {
      op: 'load',
      fn: { name: fn.name, body: fn.body, argTypes: fn.argTypes, returnType: fn.returnType },
      maxOutputBytes: this.maxOutputBytes,
    };
  }

  #sandboxOptions(
    interpreter: ResolvedInterpreter,
    functionName: string,
    limits: Partial<SandboxLimits>,
  ) {
    return {
      command: interpreter.path,
      args: this.#spec.args,
      ...(this.#spec.env ? { env: this.#spec.env } : {}),
      policy: this.#policy(),
      limits,
      ...(interpreter.readOnlyPaths ? { readOnlyPaths: interpreter.readOnlyPaths } : {}),
      ...this.#bwrap(),
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

  #unavailable(fn: ExternalFn): ExtFnError {
    const fix = this.#installHint();
    return new ExtFnError(
      'LanguageUnavailable',
      `function ${fn.name}: no ${this.language} interpreter was found for ${this.packageName}; ${fix}`,
      { functionName: fn.name, language: this.language, fix },
    );
  }

  /** Interpreter found and sandbox usable, or a typed error — before any process for the body starts. */
  async #prepare(fn: ExternalFn): Promise<void> {
    const policy = this.#policy();
    if (this.#preparedFor === policy) return; // the hot path of warm calls: nothing to await
    const interpreter = await this.#resolve();
    if (!interpreter) throw this.#unavailable(fn);
    await assertSandboxAvailable({ policy, ...this.#bwrap(), functionName: fn.name });
    this.#preparedFor = policy;
  }

  #resolve(): Promise<ResolvedInterpreter | undefined> {
    if (!this.#interpreter) {
      const pending = this.#spec.resolveInterpreter();
      this.#interpreter = pending;
      // Not found (or failed) is not remembered: installing the interpreter later should work.
      pending.then(
        (found) => {
          if (!found && this.#interpreter === pending) this.#interpreter = undefined;
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
