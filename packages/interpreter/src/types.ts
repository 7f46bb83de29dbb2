/**
 * The public shape of @improv/extfn-interpreter: what a language package
 * describes (`InterpreterSpec`) and what an engine may tune (`InterpreterRunnerOptions`).
 * Everything else (framing, workers, the pool, batches) is written once here.
 */
import type {
  BatchOptions,
  ColumnResults,
  ExternalFn,
  LanguageRunner,
  RowResult,
  Value,
} from '@improv/extfn-core';
import type { SandboxLimits, SandboxPolicy } from '@improv/extfn-sandbox';

/** A resolved interpreter: an absolute, real (symlink-free) path the sandbox can read. */
export interface ResolvedInterpreter {
  /** Absolute real path of the executable. */
  readonly path: string;
  /** Extra host directories to bind read-only (e.g. an interpreter prefix outside /usr). */
  readonly readOnlyPaths?: readonly string[];
}

/** What a language package tells the interpreter machinery about its language. */
export interface InterpreterSpec {
  /** Language id descriptors use, lower case (`python`, `r`, `julia`, `pure`). */
  readonly language: string;
  /** The npm package, named in LanguageUnavailable messages (`@improv/extfn-python`). */
  readonly packageName: string;
  /**
   * Finds the interpreter: explicit option > environment variable
   * (`IMPROV_EXTFN_PYTHON`, …) > PATH lookup, as an absolute real path.
   * `undefined` means not installed → LanguageUnavailable, and no process is started.
   * Called once per runner and memoised (a rejected promise is retried next call).
   */
  resolveInterpreter(): Promise<ResolvedInterpreter | undefined>;
  /**
   * Command-line arguments after the interpreter path: a constant bootstrap
   * that reads one line `N\n` then `N` bytes of driver source from stdin and
   * runs it (never the body, never a value). See docs/protocol.md.
   */
  readonly args: readonly string[];
  /** The driver program (protocol v1), sent on stdin after the bootstrap starts. */
  readonly driverSource: string;
  /**
   * The zygote program for this interpreter (the driver with the zygote's
   * loop after it: Python), asked for only when a zygote boots: restricted
   * warm workers are then cloned from a sandboxed zygote instead of each
   * starting a tree (zygote-starts.ts).
   */
  readonly zygoteProgram?: (interpreterPath: string) => Promise<string>;
  /** Determinism variables added to the sandbox's clean environment (e.g. PYTHONHASHSEED=0). */
  readonly env?: Readonly<Record<string, string>>;
  /** Per-language sandbox limits (Julia needs a large address space). */
  readonly limits?: Partial<SandboxLimits>;
  /**
   * The driver implements `callf64` (binary f64 columns for all-number
   * functions). `'in'`: it reads the binary columns but answers with JSON
   * `values`, as for `call`. Either way the runner also reads a JSON answer
   * to `callf64` (a driver that could not open a binary stdout). Default false.
   */
  readonly f64?: boolean | 'in';
  /**
   * The driver runs `vectorized: true` functions on whole columns (see
   * docs/protocol.md). Without it the runner does not claim the capability
   * and core refuses vectorized functions for it. Default false.
   */
  readonly vectorized?: boolean;
  /**
   * The interpreter's stdout is a real pipe (a FIFO) rather than a socket, so
   * the driver can reopen `/proc/self/fd/1` (R writes binary frames that way).
   * Passed to the sandbox as `stdoutPipe` for warm workers, one-shot calls and the probe.
   */
  readonly stdoutPipe?: boolean;
  /**
   * The driver implements `callcols` (binary columns of every value type,
   * docs/protocol.md): batches and typed columns of functions that are not
   * all numbers use it instead of JSON `call` frames. Default false.
   */
  readonly columns?: boolean;
  /** How long the interpreter may take to print its `ready` frame (default 15 000 ms). */
  readonly startupTimeoutMs?: number;
  /** One line telling a user how to install the interpreter, for probe and LanguageUnavailable. */
  readonly installHint?: string;
  /**
   * This language's own defaults for tuning options (R: longer chunks, Julia:
   * a longer idle time), applied under the caller's options: an option the
   * caller sets (not `undefined`) wins.
   */
  readonly defaults?: InterpreterDefaults;
}

/** The runner options a language may give a default of its own: tuning only, never the policy or limits. */
export type InterpreterDefaults = Readonly<
  Partial<Pick<InterpreterRunnerOptions, 'chunkMs' | 'idleMs' | 'maxWorkers' | 'workerCpuSeconds'>>
>;

export interface InterpreterRunnerOptions {
  /**
   * Most interpreter processes working at once for this runner (starting, in
   * a request or held by a batch between chunks; one-shot calls too), all
   * functions together. Default: one per core.
   */
  maxWorkers?: number;
  /**
   * Most interpreter processes alive at once, idle warm workers included:
   * idle workers of other functions stay warm beyond `maxWorkers` up to this
   * bound (memory, not CPU), and are evicted past it. Default: `maxWorkers` + 4;
   * never below `maxWorkers`.
   */
  maxLiveWorkers?: number;
  /** A worker idle this long is shut down (default 30 000 ms). */
  idleMs?: number;
  /** Sandbox policy; default `policyFor(process.env)` read at each start — the host's, never the model's. */
  policy?: SandboxPolicy;
  /** Overrides on top of the spec's limits (one-shot calls and warm workers). */
  limits?: Partial<SandboxLimits>;
  /**
   * CPU seconds a warm worker may use over its whole life (RLIMIT_CPU is
   * cumulative, so a per-call value would kill a healthy worker after a few
   * thousand calls). Per-call protection comes from the wall-clock deadline
   * of each request. A worker is retired once its busy time reaches half of
   * this. Whole seconds (rounded up). Default 3 600.
   */
  workerCpuSeconds?: number;
  /** Per-row output cap the driver enforces, in bytes (default: the sandbox's stdout cap, 1 MiB). */
  maxOutputBytes?: number;
  /**
   * Bytes of results one batch (evalBatch, evalColumns) may bring into the
   * host, counted as the drivers' answers arrive: each row's result is capped
   * (`maxOutputBytes`), but 10^5 rows of 1 MiB texts would not fit in any
   * host. Past it the batch stops: rows answered keep their results, the
   * others get a Runtime error with limit `output`. Default: a quarter of
   * Node's heap limit, at most 1 GiB.
   */
  maxBatchResultBytes?: number;
  /** Default mode when a call does not say (default `warm`). */
  mode?: 'warm' | 'oneShot';
  /**
   * Use binary frames (`callf64` for all-number functions, `callcols` for
   * the others) for batches and columns when the driver supports them
   * (default true). False sends JSON frames.
   */
  f64?: boolean;
  /** Target time per batch chunk in milliseconds (default 5). */
  chunkMs?: number;
  /**
   * Send a batch lane's next chunk to its worker before the current chunk's
   * answer arrives, so the worker does not wait while the host reads one and
   * encodes the next (default true). False waits for each answer (for comparisons).
   */
  pipeline?: boolean;
  /** Path of bwrap (tests point it at nothing to test fail-closed). */
  bwrapPath?: string;
}

/** Counters for tests, `doctor` and benchmarks. */
export interface InterpreterStats {
  /** Interpreter processes started so far (warm workers and one-shot calls). */
  readonly started: number;
  /** Warm workers alive now. */
  readonly live: number;
  /** Most processes working at once so far (workers starting or in use, one-shot calls): what `maxWorkers` bounds. */
  readonly peak: number;
  /** Warm workers killed and replaced (timeout, crash, malformed frame, abort, output). */
  readonly killed: number;
  /** Callers waiting for a worker now. */
  readonly queued: number;
  /** Warm workers started from a zygote (they count in `started` too). */
  readonly zygoteStarts?: number;
  /** Of those, the workers that began as the zygote's spares (forked ahead while nothing ran). */
  readonly spareStarts?: number;
  /** Spare workers the zygote holds ready now, for any runner of the same setting. */
  readonly spares?: number;
  /** The zygote's state: not used, starting, ready (its pid), or off and why. */
  readonly zygote?: string;
}

/** A LanguageRunner backed by sandboxed interpreter processes. */
export interface InterpreterRunner extends LanguageRunner {
  /** Always present: rows through warm workers in chunks, with hang isolation. */
  callBatch(
    fn: ExternalFn,
    rows: readonly (readonly Value[])[],
    options: BatchOptions,
  ): Promise<RowResult[]>;
  /**
   * Always present: number columns through the same scheduler as `callBatch`,
   * over `callf64` frames when the driver has them (JSON frames otherwise).
   */
  callColumns(
    fn: ExternalFn,
    columns: readonly Float64Array[],
    options: BatchOptions,
  ): Promise<ColumnResults>;
  /** Counters (never blocks). */
  stats(): InterpreterStats;
  /** Host pids of the live warm workers' sandbox processes (for tests that check nothing survives). */
  workerPids(): number[];
  /** Ends every worker. Idempotent; calls after close reject. */
  close(): Promise<void>;
}
