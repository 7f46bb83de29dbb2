/**
 * The bounded pool of warm workers for one runner. At most `max` workers
 * live at once, all functions together; a worker serves one function
 * (`key`) for its whole life; callers beyond the bound wait in FIFO order;
 * idle workers end after `idleMs`; an idle worker of another function is
 * evicted when a waiting caller needs the slot.
 *
 * A healthy worker that ends (idle, evicted, retired, closed) is asked to
 * exit and given EXIT_GRACE_MS before its tree is killed, so an interpreter
 * can clean up after itself (R's /tmp/RtmpXXXX under unsandboxed policies);
 * its slot stays taken until it is gone, so the bound counts processes.
 */
import type { ExternalFn } from '@improv/extfn-core';
import { type Worker, WorkerFailure } from './worker.js';

/** How long a healthy worker may take to exit on its own before it is killed. */
export const EXIT_GRACE_MS = 200;

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
  /** Workers exiting gracefully: their slots are still taken. */
  #stopping = new Set<Worker>();
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
    return [...this.#all, ...this.#stopping]
      .map((w) => w.pid)
      .filter((p): p is number => p !== undefined);
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
        this.#takeSlot();
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
      if (this.#queue.length === 0 && this.#slots < this.max) {
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
      this.#pump(); // may evict an idle worker of another function for it
    });
  }

  /** Gives a worker back: kept warm when `reusable` and alive, otherwise ended (a healthy one gracefully). */
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
    // Idle workers exit on their own (bounded by the grace); busy ones are killed at once.
    const all = [...this.#all, ...this.#stopping];
    this.#all.clear();
    await Promise.all(all.map((w) => w.stop(EXIT_GRACE_MS)));
  }

  /** One more slot in use (a warm worker starting, or a one-shot process). */
  #takeSlot(): void {
    this.#slots++;
    this.#peak = Math.max(this.#peak, this.#slots);
  }

  #start(key: string, fn: ExternalFn, signal: AbortSignal | undefined): Promise<Worker> {
    this.#takeSlot();
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

  /**
   * Ends a worker and frees its slot: at once for a dead or failed one,
   * once it has exited (or been killed after the grace) for a healthy one.
   * Returns whether the slot is free now.
   */
  #discard(worker: Worker): boolean {
    if (!this.#all.delete(worker)) return false;
    this.#unpark(worker);
    if (!worker.alive) {
      this.#killed++;
      this.#slots--;
      void worker.kill();
      return true;
    }
    this.#stopping.add(worker);
    void worker.stop(EXIT_GRACE_MS).then(() => {
      if (!this.#stopping.delete(worker)) return;
      this.#slots--;
      this.#pump();
    });
    return false;
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

  /** Ends an idle worker (of any function) for a waiting caller: `freed` now, or `stopping` (free soon). */
  #evictOne(): 'freed' | 'stopping' | undefined {
    for (const list of this.#idle.values()) {
      const worker = list[0];
      if (worker) return this.#discard(worker) ? 'freed' : 'stopping';
    }
    return undefined;
  }

  #dequeue(waiter: Waiter): void {
    const i = this.#queue.indexOf(waiter);
    if (i >= 0) this.#queue.splice(i, 1);
    if (waiter.onAbort) waiter.signal?.removeEventListener('abort', waiter.onAbort);
    clearTimeout(waiter.timer);
  }

  /**
   * Serves waiting callers with idle workers or free slots, oldest first.
   * A slot being freed by an exiting worker is promised to the oldest
   * waiter without one; past those, idle workers of other functions are evicted.
   */
  #pump(): void {
    let coming = this.#stopping.size;
    let i = 0;
    while (i < this.#queue.length && !this.#closed) {
      const waiter = this.#queue[i]!;
      const idle = waiter.key === undefined ? undefined : this.#takeIdle(waiter.key);
      if (idle) {
        this.#dequeue(waiter);
        waiter.reuse(idle);
        continue;
      }
      if (this.#slots < this.max) {
        this.#dequeue(waiter);
        waiter.grant();
        continue;
      }
      if (coming > 0) {
        coming--; // this waiter gets the next slot that frees up
        i++;
        continue;
      }
      const evicted = this.#evictOne();
      if (evicted === undefined) return;
      if (evicted === 'stopping') coming++; // then look at the same waiter again
    }
  }
}
