/**
 * A bounded pool of worker threads that run WebAssembly. Workers start on
 * demand, are handed out one task at a time, shut down after an idle period,
 * and are terminated — never reused — when a task overruns or is aborted.
 * Idle workers are unref'd so they never keep the host process alive.
 */
import type { Worker } from 'node:worker_threads';
import type { CompiledModule } from './compile.js';

export interface PoolOptions {
  size: number;
  /** The worker program (default: the WebAssembly driver, `drivers/wasm-worker.mjs`). */
  url?: URL;
  /** What its errors call a worker, e.g. `wasm worker` or `wasm compile worker`. */
  label?: string;
  idleTimeoutMs: number;
  /** Stack of each worker thread, in MiB (deep recursion traps as a stack overflow). */
  stackSizeMb: number;
}

export class PoolClosedError extends Error {
  override name = 'PoolClosedError';
  constructor() {
    super('the wasm runner is closed');
  }
}

/** The worker went away (terminated, crashed) before it answered. */
export class WorkerExitError extends Error {
  override name = 'WorkerExitError';
}

type Reply = Record<string, unknown> & { id: number };

const MAX_MODULES_PER_WORKER = 256; // the same bound as in drivers/wasm-worker.mjs

let workerModule: Promise<typeof import('node:worker_threads')> | undefined;
/** The worker program, shipped in the package's `drivers/` beside `dist/` and `src/`. */
export const workerUrl = new URL('../drivers/wasm-worker.mjs', import.meta.url);

export class PoolWorker {
  /**
   * `progress[0]`: -2 before a task is picked up, -1 while instantiating, else the row running.
   * Typed non-generic: `Int32Array<SharedArrayBuffer>` in the published .d.ts needs TypeScript 5.7.
   */
  readonly progress: Int32Array = new Int32Array(new SharedArrayBuffer(4));
  /** Module keys this worker holds, in the order it received them. */
  readonly modules = new Set<string>();
  #worker!: Worker;
  #pending = new Map<number, { resolve: (r: Reply) => void; reject: (e: Error) => void }>();
  #nextId = 1;
  #exitReason: Error | undefined;
  idleTimer: NodeJS.Timeout | undefined;
  /** Set once the worker was terminated or exited; it is never used again. */
  dead = false;

  static async start(options: PoolOptions, onExit: (w: PoolWorker) => void): Promise<PoolWorker> {
    workerModule ??= import('node:worker_threads');
    const { Worker } = await workerModule;
    const pw = new PoolWorker();
    const label = options.label ?? 'wasm worker';
    const worker = new Worker(options.url ?? workerUrl, {
      workerData: { progress: pw.progress },
      resourceLimits: { stackSizeMb: options.stackSizeMb },
      execArgv: [],
      stdout: false,
      stderr: false,
    });
    pw.#worker = worker;
    // Only our own listeners come off afterwards: removeAllListeners would also drop the
    // hooks Node uses to keep the message port referenced, and replies would stall.
    const listeners: {
      error?: (e: Error) => void;
      exit?: (code: number) => void;
      message?: (m: unknown) => void;
    } = {};
    try {
      await new Promise<void>((resolve, reject) => {
        listeners.error = (error) => reject(error);
        listeners.exit = (code) =>
          reject(new WorkerExitError(`the ${label} exited during start-up (code ${code})`));
        listeners.message = (m) => {
          if ((m as { op?: string })?.op === 'ready') resolve();
          else reject(new Error(`the ${label} sent ${JSON.stringify(m)} before it was ready`));
        };
        worker.once('error', listeners.error);
        worker.once('exit', listeners.exit);
        worker.once('message', listeners.message);
      });
    } finally {
      worker.off('error', listeners.error!);
      worker.off('exit', listeners.exit!);
      worker.off('message', listeners.message!);
    }
    worker.on('message', (reply: Reply) => {
      const waiter = pw.#pending.get(reply.id);
      pw.#pending.delete(reply.id);
      waiter?.resolve(reply);
    });
    worker.on('error', (error) => {
      pw.#exitReason = new WorkerExitError(`the ${label} failed: ${error.message}`);
    });
    worker.on('exit', (code) => {
      pw.dead = true;
      const reason = pw.#exitReason ?? new WorkerExitError(`the ${label} exited (code ${code})`);
      for (const waiter of pw.#pending.values()) waiter.reject(reason);
      pw.#pending.clear();
      onExit(pw);
    });
    worker.unref();
    return pw;
  }

  /** Sends one request; a module travels with it the first time this worker needs it. */
  request(message: Record<string, unknown>, compiled?: CompiledModule): Promise<Reply> {
    if (this.dead)
      return Promise.reject(this.#exitReason ?? new WorkerExitError('the wasm worker is gone'));
    const id = this.#nextId++;
    const payload: Record<string, unknown> = { ...message, id };
    if (compiled) {
      payload.key = compiled.key;
      payload.stateful = compiled.stateful;
      payload.fresh = compiled.fresh;
    }
    if (compiled && !this.modules.has(compiled.key)) {
      payload.module = compiled.module;
      this.modules.add(compiled.key);
      if (this.modules.size > MAX_MODULES_PER_WORKER)
        this.modules.delete(this.modules.values().next().value!);
    }
    this.progress[0] = -2;
    return new Promise<Reply>((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.#worker.postMessage(payload);
    });
  }

  /** Stops the thread now, even in the middle of a runaway loop. */
  terminate(reason: Error): Promise<void> {
    if (!this.#exitReason) this.#exitReason = reason;
    this.dead = true;
    clearTimeout(this.idleTimer);
    return this.#worker.terminate().then(() => undefined);
  }

  ref(): void {
    this.#worker.ref();
  }

  unref(): void {
    this.#worker.unref();
  }

  get threadId(): number {
    return this.#worker.threadId;
  }
}

interface Waiter {
  resolve: (w: PoolWorker) => void;
  reject: (e: Error) => void;
}

export class WorkerPool {
  #idle: PoolWorker[] = [];
  #all = new Set<PoolWorker>();
  /** Workers being started, counted against the bound; close() waits for them to end. */
  #starting = new Set<Promise<void>>();
  #waiters: Waiter[] = [];
  #closed = false;
  /** How many workers were ever started (tests check that killed ones are replaced). */
  started = 0;

  constructor(readonly options: PoolOptions) {}

  /** Workers alive or starting. Never above `options.size`. */
  get count(): number {
    return this.#all.size + this.#starting.size;
  }

  /** Workers handed out for a task right now. */
  get busy(): number {
    return this.#all.size - this.#idle.length;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** A worker for one task; waits when all are busy. Give it back with release or discard. */
  acquire(signal?: AbortSignal): Promise<PoolWorker> {
    if (this.#closed) return Promise.reject(new PoolClosedError());
    const idle = this.#idle.pop();
    if (idle) {
      clearTimeout(idle.idleTimer);
      idle.ref();
      return Promise.resolve(idle);
    }
    return new Promise<PoolWorker>((resolve, reject) => {
      const waiter: Waiter = { resolve, reject };
      if (signal) {
        const onAbort = () => {
          const at = this.#waiters.indexOf(waiter);
          if (at >= 0) this.#waiters.splice(at, 1);
          reject(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
        };
        signal.addEventListener('abort', onAbort, { once: true });
        waiter.resolve = (w) => {
          signal.removeEventListener('abort', onAbort);
          resolve(w);
        };
        waiter.reject = (e) => {
          signal.removeEventListener('abort', onAbort);
          reject(e);
        };
      }
      this.#waiters.push(waiter);
      this.#grow();
    });
  }

  /** A worker that is not part of the pool (one-shot calls); the caller terminates it. */
  async startDetached(): Promise<PoolWorker> {
    if (this.#closed) throw new PoolClosedError();
    const worker = await PoolWorker.start(this.options, () => {});
    this.started++;
    if (this.#closed) {
      await worker.terminate(new PoolClosedError());
      throw new PoolClosedError();
    }
    return worker;
  }

  release(worker: PoolWorker): void {
    if (worker.dead || !this.#all.has(worker)) return;
    const waiter = this.#waiters.shift();
    if (waiter) {
      waiter.resolve(worker);
      return;
    }
    worker.unref();
    this.#idle.push(worker);
    worker.idleTimer = setTimeout(() => this.#retire(worker), this.options.idleTimeoutMs);
    worker.idleTimer.unref();
  }

  /** Terminates a worker that overran, was aborted or is suspect; a waiter gets a new one. */
  discard(worker: PoolWorker, reason: Error): Promise<void> {
    this.#all.delete(worker);
    const done = worker.terminate(reason);
    this.#grow();
    return done;
  }

  #retire(worker: PoolWorker): void {
    const at = this.#idle.indexOf(worker);
    if (at < 0) return;
    this.#idle.splice(at, 1);
    this.#all.delete(worker);
    void worker.terminate(new WorkerExitError('the wasm worker was idle and shut down'));
  }

  /** Starts workers for waiters, up to the bound. */
  #grow(): void {
    while (
      !this.#closed &&
      this.#waiters.length > this.#starting.size &&
      this.count < this.options.size
    ) {
      const starting: Promise<void> = PoolWorker.start(this.options, (w) => this.#onExit(w)).then(
        (worker) => {
          this.#starting.delete(starting);
          this.started++;
          if (this.#closed) return worker.terminate(new PoolClosedError());
          this.#all.add(worker);
          worker.ref();
          this.release(worker);
        },
        (error: Error) => {
          this.#starting.delete(starting);
          // A worker could not start. With none alive, no waiter would ever be served: fail them all.
          if (this.#all.size === 0 && this.#starting.size === 0) {
            for (const waiter of this.#waiters.splice(0)) waiter.reject(error);
          } else {
            this.#waiters.shift()?.reject(error);
          }
        },
      );
      this.#starting.add(starting);
    }
  }

  #onExit(worker: PoolWorker): void {
    this.#all.delete(worker);
    const at = this.#idle.indexOf(worker);
    if (at >= 0) this.#idle.splice(at, 1);
    this.#grow();
  }

  /** Terminates every worker and fails every waiter. */
  async close(): Promise<void> {
    this.#closed = true;
    const error = new PoolClosedError();
    for (const waiter of this.#waiters.splice(0)) waiter.reject(error);
    const workers = [...this.#all];
    this.#all.clear();
    this.#idle = [];
    await Promise.all([...workers.map((w) => w.terminate(error)), ...this.#starting]);
  }
}
