/**
 * The bounded pool of warm workers for one runner. At most `max` workers
 * live at once, all functions together; a worker serves one function
 * (`key`) for its whole life; callers beyond the bound wait in FIFO order;
 * idle workers end after `idleMs`; an idle worker of another function is
 * evicted when a waiting caller needs the slot.
 */
import type { ExternalFn } from '@improv/extfn-core';
import { type Worker, WorkerFailure } from './worker.js';

export type Launch = (
  key: string,
  fn: ExternalFn,
  signal: AbortSignal | undefined,
) => Promise<Worker>;

interface Waiter {
  /** The function a worker is wanted for; undefined for a bare slot (a one-shot process). */
  key: string | undefined;
  signal: AbortSignal | undefined;
  /** Takes a free slot and serves the waiter (starts its worker, or hands over the slot). */
  grant(): void;
  /** Hands over an idle worker of the waiter's function. */
  reuse(worker: Worker): void;
  reject(error: unknown): void;
  onAbort?: () => void;
  timer?: NodeJS.Timeout;
}

export interface PoolCounters {
  live: number;
  /** Most slots taken at once (warm workers, starting ones and one-shot processes). */
  peak: number;
  killed: number;
  queued: number;
}

export class Pool {
  readonly max: number;
  readonly idleMs: number;
  #launch: Launch;
  /** Slots taken: live workers, workers being started, and one-shot processes. */
  #slots = 0;
  #peak = 0;
  #killed = 0;
  #idle = new Map<string, Worker[]>();
  #idleTimers = new Map<Worker, NodeJS.Timeout>();
  #all = new Set<Worker>();
  #queue: Waiter[] = [];
  #closed = false;

  constructor(max: number, idleMs: number, launch: Launch) {
    this.max = Math.max(1, Math.floor(max));
    this.idleMs = idleMs;
    this.#launch = launch;
  }

  counters(): PoolCounters {
    return {
      live: this.#all.size,
      peak: this.#peak,
      killed: this.#killed,
      queued: this.#queue.length,
    };
  }

  pids(): number[] {
    return [...this.#all].map((w) => w.pid).filter((p): p is number => p !== undefined);
  }

  /** Whether callers are waiting for a worker. */
  hasWaiters(): boolean {
    return this.#queue.length > 0;
  }

  /**
   * A worker for `fn`, reused or started; waits while the pool is full, at
   * most `maxWaitMs` (then a `timeout` failure).
   */
  acquire(
    key: string,
    fn: ExternalFn,
    signal?: AbortSignal,
    maxWaitMs = Number.POSITIVE_INFINITY,
  ): Promise<Worker> {
    const idle = this.#closed || signal?.aborted ? undefined : this.#takeIdle(key);
    if (idle) return Promise.resolve(idle);
    return this.#wait(key, signal, maxWaitMs, (resolve, reject) => ({
      grant: () => this.#start(key, fn, signal).then(resolve, reject),
      reuse: resolve,
    }));
  }

  /**
   * A slot without a warm worker, for a one-shot process: it counts against
   * the same bound. Call the returned function when the process has ended.
   */
  acquireSlot(signal?: AbortSignal, maxWaitMs = Number.POSITIVE_INFINITY): Promise<() => void> {
    return this.#wait<() => void>(undefined, signal, maxWaitMs, (resolve) => ({
      grant: () => {
        this.#slots++;
        this.#peak = Math.max(this.#peak, this.#slots);
        let released = false;
        resolve(() => {
          if (released) return;
          released = true;
          this.#slots--;
          this.#pump();
        });
      },
      reuse: () => {},
    }));
  }

  #wait<T>(
    key: string | undefined,
    signal: AbortSignal | undefined,
    maxWaitMs: number,
    serve: (
      resolve: (value: T) => void,
      reject: (error: unknown) => void,
    ) => Pick<Waiter, 'grant' | 'reuse'>,
  ): Promise<T> {
    if (this.#closed) return Promise.reject(new WorkerFailure('closed', 'the runner is closed'));
    if (signal?.aborted) {
      return Promise.reject(
        new WorkerFailure('aborted', 'aborted', undefined, undefined, signal.reason),
      );
    }
    return new Promise<T>((resolve, reject) => {
      const waiter: Waiter = {
        key,
        signal,
        reject,
        ...(serve(resolve, reject) as Pick<Waiter, 'grant' | 'reuse'>),
      };
      if (this.#queue.length === 0 && (this.#slots < this.max || this.#evictOne())) {
        waiter.grant(); // nobody waits and a slot is free: no queueing
        return;
      }
      if (Number.isFinite(maxWaitMs)) {
        waiter.timer = setTimeout(() => {
          this.#dequeue(waiter);
          reject(
            new WorkerFailure(
              'timeout',
              `no worker became free within ${maxWaitMs} ms`,
              undefined,
              'wall-clock',
            ),
          );
        }, maxWaitMs);
      }
      if (signal) {
        waiter.onAbort = () => {
          this.#dequeue(waiter);
          reject(new WorkerFailure('aborted', 'aborted', undefined, undefined, signal.reason));
        };
        signal.addEventListener('abort', waiter.onAbort, { once: true });
      }
      this.#queue.push(waiter);
    });
  }

  /** Gives a worker back: kept warm when `reusable` and alive, otherwise killed. */
  release(worker: Worker, reusable: boolean): void {
    if (!reusable || !worker.alive || this.#closed) {
      this.#discard(worker);
    } else {
      const waiter = this.#queue.find((w) => w.key === worker.key);
      if (waiter) {
        this.#dequeue(waiter);
        waiter.reuse(worker);
        return;
      }
      this.#park(worker);
    }
    this.#pump();
  }

  /** Ends every worker and fails every waiting caller. */
  async close(): Promise<void> {
    this.#closed = true;
    for (const waiter of [...this.#queue]) {
      this.#dequeue(waiter);
      waiter.reject(new WorkerFailure('closed', 'the runner is closed'));
    }
    for (const timer of this.#idleTimers.values()) clearTimeout(timer);
    this.#idleTimers.clear();
    this.#idle.clear();
    await Promise.all([...this.#all].map((w) => w.kill()));
    this.#all.clear();
  }

  #start(key: string, fn: ExternalFn, signal: AbortSignal | undefined): Promise<Worker> {
    this.#slots++;
    this.#peak = Math.max(this.#peak, this.#slots);
    return this.#launch(key, fn, signal).then(
      (worker) => {
        if (this.#closed) {
          void worker.kill();
          this.#slots--;
          throw new WorkerFailure('closed', 'the runner is closed');
        }
        this.#all.add(worker);
        return worker;
      },
      (error: unknown) => {
        this.#slots--;
        this.#pump();
        throw error;
      },
    );
  }

  #discard(worker: Worker): void {
    if (!this.#all.delete(worker)) return;
    this.#unpark(worker);
    if (!worker.alive) this.#killed++;
    this.#slots--;
    void worker.kill();
  }

  #park(worker: Worker): void {
    const list = this.#idle.get(worker.key) ?? [];
    list.push(worker);
    this.#idle.set(worker.key, list);
    const timer = setTimeout(() => {
      this.#discard(worker);
      this.#pump();
    }, this.idleMs);
    timer.unref();
    this.#idleTimers.set(worker, timer);
  }

  #unpark(worker: Worker): void {
    const timer = this.#idleTimers.get(worker);
    if (timer) clearTimeout(timer);
    this.#idleTimers.delete(worker);
    const list = this.#idle.get(worker.key);
    if (!list) return;
    const i = list.indexOf(worker);
    if (i >= 0) list.splice(i, 1);
    if (list.length === 0) this.#idle.delete(worker.key);
  }

  #takeIdle(key: string): Worker | undefined {
    const list = this.#idle.get(key);
    while (list?.length) {
      const worker = list[list.length - 1]!;
      this.#unpark(worker);
      if (worker.alive) return worker;
      this.#discard(worker);
    }
    return undefined;
  }

  /** Frees a slot held by an idle worker (of any function). */
  #evictOne(): boolean {
    for (const list of this.#idle.values()) {
      const worker = list[0];
      if (worker) {
        this.#discard(worker);
        return true;
      }
    }
    return false;
  }

  #dequeue(waiter: Waiter): void {
    const i = this.#queue.indexOf(waiter);
    if (i >= 0) this.#queue.splice(i, 1);
    if (waiter.onAbort) waiter.signal?.removeEventListener('abort', waiter.onAbort);
    clearTimeout(waiter.timer);
  }

  /** Serves waiting callers with idle workers or free slots, oldest first. */
  #pump(): void {
    for (const waiter of [...this.#queue]) {
      if (this.#closed) return;
      const idle = waiter.key === undefined ? undefined : this.#takeIdle(waiter.key);
      if (idle) {
        this.#dequeue(waiter);
        waiter.reuse(idle);
        continue;
      }
      if (this.#slots < this.max || this.#evictOne()) {
        this.#dequeue(waiter);
        waiter.grant();
        continue;
      }
      return;
    }
  }
}
