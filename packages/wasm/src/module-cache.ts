/**
 * Compiled modules by body, compiled once per distinct body in compile
 * workers under a deadline. The main thread only screens a body (prefix and
 * size, see screenBody) and looks it up; assembling, reading, validating and
 * compiling run in a worker that is terminated when it overruns, so a body
 * can neither block the host's event loop nor take longer than its call.
 */
import { MAX_TIMEOUT_MS } from '@improv/extfn-core';
import { screenBody, screenedLength } from './body.js';
import type { Compiled, CompileOptions } from './compile.js';
import { PoolClosedError, type PoolWorker, WorkerExitError, WorkerPool } from './pool.js';

/** The compile worker program, built from src/compile-worker.ts into dist/ (beside src/). */
export const compileWorkerUrl = new URL('../dist/compile-worker.js', import.meta.url);

/** A caller's deadline passed while its body was compiling. */
export class CompileTimeoutError extends Error {
  override name = 'CompileTimeoutError';
  constructor(readonly ms: number) {
    super(`compiling the module took longer than ${ms} ms`);
  }
}

/** The caller's signal fired while it waited for a compile. */
export class CompileAbortedError extends Error {
  override name = 'CompileAbortedError';
  constructor(override readonly cause: unknown) {
    super('aborted while compiling');
  }
}

export interface CompileDeadline {
  /** How long this caller waits for the compile once a compile worker has it. */
  timeoutMs: number;
  signal?: AbortSignal | undefined;
}

/** A body's verdict, and how long this caller waited for a compile worker to produce it. */
export interface CompileOutcome {
  compiled: Compiled;
  /** Time from a compile worker taking the body to the verdict; 0 for a cache hit. */
  compileMs: number;
}

interface Entry {
  /** Set once compiled or refused: refusals are remembered, since the same body fails the same way. */
  result?: Compiled;
  /** The compile under way, shared by every caller waiting for this body. */
  job?: Promise<Compiled>;
  /** Settles when a compile worker has taken the job: waiting for one is not the body's doing. */
  started?: Promise<void>;
  /** Callers waiting for the job; when the last one leaves (deadline, abort), the job is stopped. */
  waiters: number;
  stop?: () => void;
}

export interface ModuleCacheOptions {
  compile: CompileOptions;
  maxEntries: number;
  /** Compile worker threads. */
  workers: number;
  idleTimeoutMs: number;
}

export class ModuleCache {
  #entries = new Map<string, Entry>();
  readonly #pool: WorkerPool;
  /** Bodies compiled (or refused) so far: a cache hit does not count. */
  compiles = 0;

  constructor(readonly options: ModuleCacheOptions) {
    this.#pool = new WorkerPool({
      size: options.workers,
      idleTimeoutMs: options.idleTimeoutMs,
      stackSizeMb: 4,
      url: compileWorkerUrl,
      label: 'wasm compile worker',
    });
  }

  /** The settled verdict on a body, if there is one; marks it recently used. */
  lookup(body: string): Compiled | undefined {
    const entry = this.#entries.get(body);
    if (entry?.result === undefined) return undefined;
    this.#entries.delete(body);
    this.#entries.set(body, entry);
    return entry.result;
  }

  /**
   * The compiled module for a body, or why it is refused. Callers of the same
   * body share one compile; each waits at most its own `timeoutMs` once a
   * compile worker has the body, and the compile is stopped (its worker
   * terminated) when the last caller stops waiting. Rejects with
   * CompileTimeoutError, CompileAbortedError, PoolClosedError or an Error of
   * the compile worker itself; none of those is remembered.
   */
  async get(body: string, deadline: CompileDeadline): Promise<CompileOutcome> {
    const known = this.lookup(body);
    if (known) return { compiled: known, compileMs: 0 };
    const entry = this.#entries.get(body) ?? this.#start(body);
    if (entry.result) return { compiled: entry.result, compileMs: 0 };
    const { timeoutMs, signal } = deadline;
    if (signal?.aborted) throw new CompileAbortedError(signal.reason);
    entry.waiters++;
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    try {
      const aborted = new Promise<never>((_, reject) => {
        if (!signal) return;
        onAbort = () => reject(new CompileAbortedError(signal.reason));
        signal.addEventListener('abort', onAbort, { once: true });
      });
      await Promise.race([entry.started, entry.job, aborted]);
      const began = performance.now();
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new CompileTimeoutError(timeoutMs)),
          Math.min(timeoutMs, MAX_TIMEOUT_MS),
        );
      });
      const compiled = await Promise.race([entry.job!, aborted, late]);
      return { compiled, compileMs: performance.now() - began };
    } finally {
      clearTimeout(timer);
      if (onAbort) signal?.removeEventListener('abort', onAbort);
      entry.waiters--;
      // Nobody wants this compile any more: stop it rather than let it run on.
      if (entry.waiters === 0 && entry.result === undefined) entry.stop?.();
    }
  }

  #start(body: string): Entry {
    const entry: Entry = { waiters: 0 };
    try {
      // Prefix and size are judged here, cheaply: a refused body never reaches a worker.
      screenBody(body, this.options.compile.maxBodyBytes);
    } catch (error) {
      entry.result = { ok: false, message: (error as Error).message };
      // A body refused on its length alone is refused again in O(1): not kept, so the cache holds no huge strings.
      if (body.length > screenedLength(this.options.compile.maxBodyBytes)) return entry;
    }
    this.compiles++;
    this.#entries.set(body, entry);
    if (this.#entries.size > this.options.maxEntries) {
      this.#entries.delete(this.#entries.keys().next().value!);
    }
    if (entry.result) return entry;
    const controller = new AbortController();
    entry.stop = () => {
      // Forget it now, not when its worker has exited: a caller arriving meanwhile starts afresh.
      if (this.#entries.get(body) === entry) this.#entries.delete(body);
      controller.abort();
    };
    let started!: () => void;
    entry.started = new Promise<void>((resolve) => {
      started = resolve;
    });
    entry.job = this.#compile(body, controller.signal, started).then(
      (result) => {
        entry.result = result;
        entry.stop = undefined;
        return result;
      },
      (error: unknown) => {
        entry.stop = undefined;
        if (this.#entries.get(body) === entry) this.#entries.delete(body);
        throw error;
      },
    );
    entry.job.catch(() => {}); // its waiters see the failure; with none left, nobody needs to
    return entry;
  }

  /** One compile in one compile worker, terminated when `signal` fires. */
  async #compile(body: string, signal: AbortSignal, started: () => void): Promise<Compiled> {
    const worker: PoolWorker = await this.#pool.acquire(signal);
    const onStop = () => void this.#pool.discard(worker, new WorkerExitError('compile stopped'));
    signal.addEventListener('abort', onStop, { once: true });
    try {
      const reply = worker.request({ body, options: this.options.compile });
      started();
      const { compiled, failure } = await reply;
      if (typeof failure === 'string') throw new Error(failure);
      return compiled as Compiled;
    } catch (error) {
      if (signal.aborted) throw new CompileAbortedError(signal.reason);
      throw error;
    } finally {
      signal.removeEventListener('abort', onStop);
      if (!worker.dead) this.#pool.release(worker);
    }
  }

  get closed(): boolean {
    return this.#pool.closed;
  }

  get size(): number {
    return this.#entries.size;
  }

  /** Compile workers ever started, and alive now. */
  get workers(): { started: number; alive: number } {
    return { started: this.#pool.started, alive: this.#pool.count };
  }

  /** Stops every compile (its callers get PoolClosedError) and forgets every module. */
  async close(): Promise<void> {
    await this.#pool.close();
    this.#entries.clear();
  }
}

export { PoolClosedError };
