/**
 * The `wasm` LanguageRunner: checks a descriptor against the numeric ABI,
 * compiles its body once, and runs calls and batches on worker threads.
 */
import { availableParallelism } from 'node:os';
import type {
  BatchOptions,
  CallOptions,
  ExternalFn,
  LanguageRunner,
  RowResult,
  RunnerCapabilities,
  RunnerProbe,
  Value,
  WarmUpOptions,
} from '@improv/extfn-core';
import {
  checkColumnArguments,
  DEFAULT_TIMEOUT_MS,
  ExtFnError,
  isAllNumbers,
  MAX_TIMEOUT_MS,
} from '@improv/extfn-core';
import { acquireFailure, type ColumnsOutcome, copyColumns, runBatch, runColumns } from './batch.js';
import { DEFAULT_MAX_BODY_BYTES, formatBytes } from './body.js';
import { type Compiled, type CompiledModule, ENTRY_POINT, WASM_PAGE_BYTES } from './compile.js';
import {
  CompileAbortedError,
  CompileTimeoutError,
  compileWorkerUrl,
  ModuleCache,
} from './module-cache.js';
import {
  PoolClosedError,
  type PoolWorker,
  WorkerExitError,
  WorkerPool,
  workerUrl,
} from './pool.js';
import { webAssembly } from './webassembly.js';

export const PACKAGE_NAME = '@improv/extfn-wasm';

export interface WasmRunnerOptions {
  /** Most linear memory a module may have, declared or grown, in bytes (default 16 MiB, rounded down to 64 KiB pages). */
  maxMemoryBytes?: number;
  /** Most elements a table may have, declared or grown (default 65 536). */
  maxTableElements?: number;
  /**
   * One allocation budget per module, in bytes: the estimated host memory of
   * everything a module declares (tables and memories up to their ceilings,
   * globals, segments, exports, functions with their code and locals), judged
   * before it is compiled. A module above it is a Runtime error naming the
   * declaration that broke it. Default 64 MiB, or maxMemoryBytes + 48 MiB when
   * that is more, so that one memory at its ceiling always fits.
   */
  moduleBudgetBytes?: number;
  /** Worker threads running WebAssembly (default: one per core). */
  workers?: number;
  /** A worker idle this long is shut down (default 30 s). */
  idleTimeoutMs?: number;
  /** Stack of each worker thread in MiB (default 4): how deep recursion goes before it traps. */
  stackSizeMb?: number;
  /** Distinct compiled bodies kept (default 256, least recently used out). */
  maxModules?: number;
  /**
   * Largest body accepted, in bytes: the UTF-8 text after `wat:`, or the
   * decoded binary of a `wasm:` body (default 1 MiB). Larger bodies are a
   * Runtime error before any work is done on them.
   */
  maxBodyBytes?: number;
  /**
   * Keep one instance per worker for modules with memory, tables or mutable
   * globals too (default false: such a module gets a fresh instance per
   * call, an instantiation each). Faster, but a body that keeps state between
   * calls then gives results that depend on which calls ran before it on the
   * same worker. A trap always discards the instance.
   */
  reuseInstances?: boolean;
}

export const DEFAULT_MAX_MEMORY_BYTES = 16 * 1024 * 1024;
export const DEFAULT_MAX_TABLE_ELEMENTS = 65_536;
export const DEFAULT_MODULE_BUDGET_BYTES = 64 * 1_048_576;
/** Room beside a memory at its ceiling in the default budget, when maxMemoryBytes is raised. */
const BUDGET_BESIDE_MEMORY = 48 * 1_048_576;

export { DEFAULT_MAX_BODY_BYTES };

/** Counters for tests, `doctor` and benchmarks. */
export interface WasmRunnerStats {
  /** Distinct bodies compiled (or refused) so far. */
  compiledBodies: number;
  /** Worker threads ever started, one-shot ones included. */
  workersStarted: number;
  /** Worker threads alive now (starting, idle or busy), one-shot ones included. */
  workersAlive: number;
  /** Worker threads running a call or a batch range right now. */
  workersBusy: number;
  /** Compile worker threads ever started (they assemble and compile new bodies). */
  compileWorkersStarted: number;
  /** Compile worker threads alive now. */
  compileWorkersAlive: number;
}

export interface WasmRunner extends LanguageRunner {
  readonly language: 'wasm';
  callBatch(
    fn: ExternalFn,
    rows: readonly (readonly Value[])[],
    options: BatchOptions,
  ): Promise<RowResult[]>;
  stats(): WasmRunnerStats;
  /**
   * LanguageRunner's optional columnar fast path, always present here: one
   * Float64Array per argument in, one Float64Array of results out, failed
   * rows in `errors` (the same errors `callBatch` gives those rows). No Value
   * objects are made, so this is what an engine with numeric columns should call.
   */
  callColumns(
    fn: ExternalFn,
    columns: readonly Float64Array[],
    options: BatchOptions,
  ): Promise<ColumnsOutcome>;
  close(): Promise<void>;
}

export type { ColumnsOutcome };

const ABI = `wasm bodies use a numeric ABI: ${ENTRY_POINT} takes one f64 per argument and returns one f64, so every argument and the result must be declared number`;

function positive(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isFinite(value) || value <= 0)
    throw new RangeError(`wasm(): ${name} must be a positive number, got ${value}`);
  return value;
}

class Runner implements WasmRunner {
  readonly specificationVersion = 'v1' as const;
  readonly language = 'wasm' as const;
  readonly packageName = PACKAGE_NAME;
  readonly capabilities: RunnerCapabilities = { isolated: true, warmWorkers: true, batch: true };
  readonly #modules: ModuleCache;
  readonly #pool: WorkerPool;
  readonly #oneShot = new Set<PoolWorker>();

  constructor(options: WasmRunnerOptions) {
    const memoryPages = Math.floor(
      positive('maxMemoryBytes', options.maxMemoryBytes, DEFAULT_MAX_MEMORY_BYTES) /
        WASM_PAGE_BYTES,
    );
    if (memoryPages > 65_536)
      throw new RangeError('wasm(): maxMemoryBytes is above 4 GiB, the 32-bit memory limit');
    const tableElements = Math.floor(
      positive('maxTableElements', options.maxTableElements, DEFAULT_MAX_TABLE_ELEMENTS),
    );
    const budgetBytes = Math.floor(
      positive(
        'moduleBudgetBytes',
        options.moduleBudgetBytes,
        Math.max(DEFAULT_MODULE_BUDGET_BYTES, memoryPages * WASM_PAGE_BYTES + BUDGET_BESIDE_MEMORY),
      ),
    );
    const idleTimeoutMs = positive('idleTimeoutMs', options.idleTimeoutMs, 30_000);
    const workers = Math.floor(positive('workers', options.workers, availableParallelism()));
    this.#modules = new ModuleCache({
      compile: {
        memoryPages,
        tableElements,
        budgetBytes,
        reuseInstances: options.reuseInstances === true,
        maxBodyBytes: Math.floor(
          positive('maxBodyBytes', options.maxBodyBytes, DEFAULT_MAX_BODY_BYTES),
        ),
      },
      maxEntries: Math.floor(positive('maxModules', options.maxModules, 256)),
      // New bodies are rare (once per distinct body): two threads keep one slow body from holding up the rest.
      workers: Math.min(2, workers),
      idleTimeoutMs,
    });
    this.#pool = new WorkerPool({
      size: workers,
      idleTimeoutMs,
      stackSizeMb: positive('stackSizeMb', options.stackSizeMb, 4),
    });
  }

  async probe(): Promise<RunnerProbe> {
    const { access } = await import('node:fs/promises');
    for (const program of [workerUrl, compileWorkerUrl]) {
      const present = await access(program).then(
        () => true,
        () => false,
      );
      if (!present) {
        return {
          language: this.language,
          available: false,
          detail: `the worker program ${program.pathname} is missing`,
          fix: `reinstall ${PACKAGE_NAME}: its drivers/ and dist/ folders must sit side by side`,
        };
      }
    }
    const available = webAssembly !== undefined && typeof SharedArrayBuffer === 'function';
    const { memoryPages, tableElements, budgetBytes, maxBodyBytes } = this.#modules.options.compile;
    return {
      language: this.language,
      available,
      detail: available
        ? `WebAssembly in Node ${process.versions.node} (V8 ${process.versions.v8}), on ${this.#pool.options.size} worker thread(s); bodies up to ${formatBytes(maxBodyBytes)}, assembled (wat: with wabt) and compiled on a compile worker`
        : 'this JavaScript runtime has no WebAssembly or SharedArrayBuffer',
      protection: `WebAssembly isolate: no imports allowed, memory ≤ ${memoryPages} pages (${(memoryPages * WASM_PAGE_BYTES) / 1048576} MiB), tables ≤ ${tableElements} elements, ${formatBytes(budgetBytes)} estimated allocation per module, worker threads terminated at the deadline`,
      ...(available ? {} : { fix: 'use Node.js 20.11 or later' }),
    };
  }

  stats(): WasmRunnerStats {
    return {
      compiledBodies: this.#modules.compiles,
      workersStarted: this.#pool.started,
      workersAlive: this.#pool.count + this.#oneShot.size,
      workersBusy: this.#pool.busy + this.#oneShot.size,
      compileWorkersStarted: this.#modules.workers.started,
      compileWorkersAlive: this.#modules.workers.alive,
    };
  }

  /**
   * The compiled module for a descriptor, or the error every call of it gets.
   * A new body is compiled on a compile worker under `timeoutMs` (Timeout
   * past it); `compileMs` says how much of the deadline that used.
   */
  async #prepare(
    fn: ExternalFn,
    timeoutMs: number,
    signal: AbortSignal | undefined,
  ): Promise<{ compiled: CompiledModule; compileMs: number }> {
    if (!isAllNumbers(fn)) {
      const types = `(${fn.argTypes.join(', ')}) -> ${fn.returnType}`;
      throw ExtFnError.runtime(fn.name, `${ABI}; this function declares ${types}`, {
        loadFailed: true,
      });
    }
    if (this.#pool.closed) throw ExtFnError.runtime(fn.name, 'the runner is closed');
    let compiled: Compiled | undefined = this.#modules.lookup(fn.body);
    let compileMs = 0;
    if (!compiled) {
      try {
        ({ compiled, compileMs } = await this.#modules.get(fn.body, { timeoutMs, signal }));
      } catch (error) {
        if (error instanceof CompileTimeoutError) throw ExtFnError.timeout(fn.name, timeoutMs);
        if (error instanceof CompileAbortedError) throw ExtFnError.aborted(fn.name, error.cause);
        if (error instanceof PoolClosedError || this.#pool.closed)
          throw ExtFnError.runtime(fn.name, 'the runner is closed');
        throw ExtFnError.runtime(
          fn.name,
          `could not compile the module: ${(error as Error).message}`,
          { cause: error },
        );
      }
    }
    // A body refused here fails every call alike: `loadFailed`, as an interpreter's load error.
    if (!compiled.ok) throw ExtFnError.runtime(fn.name, compiled.message, { loadFailed: true });
    const arity = compiled.value.signature.params.length;
    if (arity !== fn.argTypes.length) {
      throw ExtFnError.runtime(
        fn.name,
        `${ENTRY_POINT} takes ${arity} f64 parameter(s) but the function declares ${fn.argTypes.length} argument(s)`,
        { loadFailed: true },
      );
    }
    return { compiled: compiled.value, compileMs };
  }

  /**
   * Compiles the body (kept for its calls, or its refusal: the error they
   * get) and makes sure a run thread is up: see LanguageRunner.warmUp.
   */
  async warmUp(fn: ExternalFn, options: WarmUpOptions = {}): Promise<string | undefined> {
    await this.#prepare(fn, options.timeoutMs ?? DEFAULT_TIMEOUT_MS, undefined);
    if (options.mode === 'oneShot')
      return 'one-shot calls start a thread each (the body is compiled)';
    let worker: PoolWorker;
    try {
      worker = await this.#pool.acquire();
    } catch (error) {
      throw acquireFailure(fn, error, undefined);
    }
    this.#pool.release(worker);
    return undefined;
  }

  async call(fn: ExternalFn, args: readonly Value[], options: CallOptions): Promise<Value> {
    const { signal } = options;
    const { compiled, compileMs } = await this.#prepare(fn, options.timeoutMs, signal);
    // One deadline for the call: a new body's compile time comes out of its run's budget.
    const budgetMs = options.timeoutMs - compileMs;
    if (budgetMs <= 0) throw ExtFnError.timeout(fn.name, options.timeoutMs);
    const numbers = args.map((a) => (a as { value: number }).value);
    if (signal?.aborted) throw ExtFnError.aborted(fn.name, signal.reason);
    const oneShot = options.mode === 'oneShot';
    let worker: PoolWorker;
    try {
      if (oneShot) {
        worker = await this.#pool.startDetached();
        this.#oneShot.add(worker);
      } else {
        worker = await this.#pool.acquire(signal);
      }
    } catch (error) {
      throw acquireFailure(fn, error, signal);
    }
    if (signal?.aborted) {
      // Aborted while waiting for a worker: give it back unused.
      if (oneShot) {
        this.#oneShot.delete(worker);
        void worker.terminate(new WorkerExitError('aborted'));
      } else this.#pool.release(worker);
      throw ExtFnError.aborted(fn.name, signal.reason);
    }
    let outcome = 'ok' as 'ok' | 'timeout' | 'aborted';
    const stop = (why: 'timeout' | 'aborted') => {
      outcome = why;
      if (oneShot) void worker.terminate(new WorkerExitError(why));
      else void this.#pool.discard(worker, new WorkerExitError(why));
    };
    // setTimeout fires at once past MAX_TIMEOUT_MS; a deadline that long is no deadline.
    const timer = setTimeout(() => stop('timeout'), Math.min(budgetMs, MAX_TIMEOUT_MS));
    const onAbort = () => stop('aborted');
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const reply = await worker.request({ op: 'call', args: numbers }, compiled);
      if (reply.ok !== true) throw ExtFnError.runtime(fn.name, String(reply.message));
      return { type: 'number', value: reply.value as number };
    } catch (error) {
      if (outcome === 'timeout') throw ExtFnError.timeout(fn.name, options.timeoutMs);
      if (outcome === 'aborted') throw ExtFnError.aborted(fn.name, signal?.reason);
      if (ExtFnError.isInstance(error)) throw error;
      if (this.#pool.closed) throw ExtFnError.runtime(fn.name, 'the runner is closed');
      throw ExtFnError.runtime(fn.name, (error as Error).message, { cause: error });
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      if (oneShot) {
        this.#oneShot.delete(worker);
        if (!worker.dead) void worker.terminate(new WorkerExitError('one-shot call done'));
      } else if (!worker.dead) {
        this.#pool.release(worker);
      }
    }
  }

  async callBatch(
    fn: ExternalFn,
    rows: readonly (readonly Value[])[],
    options: BatchOptions,
  ): Promise<RowResult[]> {
    if (rows.length === 0) return [];
    let compiled: CompiledModule;
    try {
      // A new body's compile gets the deadline of one row.
      ({ compiled } = await this.#prepare(fn, options.timeoutMs, options.signal));
    } catch (error) {
      const failure = error as ExtFnError;
      options.onProgress?.(rows.length, rows.length);
      return rows.map(() => failure);
    }
    return runBatch(this.#pool, compiled, fn, rows, options);
  }

  async callColumns(
    fn: ExternalFn,
    columns: readonly Float64Array[],
    options: BatchOptions,
  ): Promise<ColumnsOutcome> {
    const invalid = checkColumnArguments(fn, columns);
    if (invalid) throw invalid;
    const n = columns[0]?.length ?? 0;
    const { compiled } = await this.#prepare(fn, options.timeoutMs, options.signal);
    if (n === 0) return { values: new Float64Array(0), errors: new Map() };
    return runColumns(this.#pool, compiled, fn, copyColumns(columns, n), n, options);
  }

  async close(): Promise<void> {
    const oneShot = [...this.#oneShot];
    this.#oneShot.clear();
    await Promise.all([
      this.#pool.close(),
      this.#modules.close(),
      ...oneShot.map((w) => w.terminate(new PoolClosedError())),
    ]);
  }
}

/**
 * The WebAssembly runner. Bodies are `wat:<text>` or `wasm:<base64>` modules
 * that export `improv_call` (f64 per argument → f64) and import nothing.
 */
export function wasm(options: WasmRunnerOptions = {}): WasmRunner {
  return new Runner(options);
}
