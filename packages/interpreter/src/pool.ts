/**
 * The bounded pool of warm workers for one runner. Two bounds, all
 * functions together: at most `max` workers busy at once (starting, serving
 * a request or held by a batch lane between chunks, and one-shot processes:
 * what uses the CPU), and at most `maxLive` processes alive (busy, idle and
 * exiting: what uses memory). An idle worker takes no busy slot, so the
 * workers of a sheet's few functions all stay warm between refreshes while
 * only `max` of them work at once. A worker serves one function (`key`) for
 * its whole life; callers beyond the bounds wait (see `#pump`); idle workers
 * end after `idleMs`; an idle worker of another function is evicted only
 * when a waiting caller needs a start and `maxLive` is reached.
 *
 * Across functions: a worker keeps serving its function while that function
 * has queued work (a freed worker goes to a waiter of its own function
 * first); a waiter whose function has an idle or starting worker is served
 * first when a busy slot frees (no start; the one with the most work left
 * first), then callers of the function with the fewest workers (oldest
 * first among equals); and a batch lane gives its worker back between
 * chunks only when `shouldYield` says so — to a caller of its own function
 * (no restart), to a function with at least two busy workers fewer, or
 * (turns) to a function with fewer busy workers and a ready idle worker
 * when that function has clearly more work left, or has waited TURN_MS; of
 * the busy functions, the one with the least work left gives the turn. So
 * functions that share too few slots finish together. A function that
 * has a worker gets another only when the work its batches have not handed
 * out yet (`trackBacklog`) comes to more than START_PAYOFF starts per
 * worker it has, and then only with a
 * free busy slot, and room among `max` processes (the room beyond is for
 * each function's first worker) or the room of a worker idle for
 * EVICT_IDLE_MS (one that just finished may be wanted again soon: its
 * function's next refresh); otherwise its caller waits for its own worker
 * (a batch asks `wouldServe` first and opens no lane that would). A
 * function refreshed again and again counts its recent work too (`noteWork`,
 * decaying over `idleMs`, the time an unused worker stays warm): what it did
 * lately predicts what it will do, and a further worker kept warm shares
 * all of it, not only this batch's rest. That start takes a free room among
 * `max` processes only, never an eviction. So a refresh starts one worker
 * per function, plus more only for long or repeated work that pays for
 * them, and never restarts workers chunk by chunk.
 *
 * A batch about to come has its function's first worker started ahead
 * (`prestart`, when the function has none and `maxLive` allows) even while
 * every busy slot is taken: the start overlaps the work of other functions
 * instead of following it, and the first caller takes that worker (when a
 * busy slot is free) instead of starting a second. At most `max` starts run
 * at once: a prestart beyond waits for one ahead of it to be ready, so the
 * first functions' interpreters boot at full speed and the next ones while
 * those work; not so a start that forks from a zygote (`startsFork`).
 *
 * A healthy worker that ends (idle, evicted, retired, closed) is asked to
 * exit and given EXIT_GRACE_MS before its tree is killed, so an interpreter
 * can clean up after itself (R's /tmp/RtmpXXXX under unsandboxed policies);
 * it counts as live until it is gone, so `maxLive` counts processes.
 */
import type { ExternalFn } from '@improv/extfn-core';
import { WorkerFailure } from './failures.js';
import { StartTimes } from './timings.js';

/** What the pool needs of a worker: the seam tests fill with fakes. */
export interface PooledWorker {
  /** The function it serves (a worker never serves two). */
  readonly key: string;
  readonly alive: boolean;
  readonly pid: number | undefined;
  /** Ends it politely (exit, then kill after `graceMs`); a failed one at once. */
  stop(graceMs: number): Promise<void>;
  kill(): Promise<void>;
  /** For an idle worker: why it must go although no request is in flight (it keeps working), if it must. */
  idleWork?(): string | undefined;
  /**
   * Whether it came back without the check of what its last requests left
   * running (dispatch.ts skips it within a window of an earlier one): the
   * pool then looks at it (`idleWork`) PENDING_CHECK_MS after parking it.
   * A worker without it is checked after every single call.
   */
  checkPending?(): boolean;
}

/** How often idle workers are looked at for work they should not be doing. */
export const IDLE_CHECK_MS = 500;

/** How soon a worker parked with its check pending (`checkPending`) is looked at, if still idle. */
export const PENDING_CHECK_MS = 2;

/** How long a healthy worker may take to exit on its own before it is killed. */
export const EXIT_GRACE_MS = 200;

/**
 * A function's next worker must have this many starts' worth of work per
 * worker it already has: a new worker only gains when each existing worker's
 * share is more than one start (it works meanwhile), and a start takes CPU
 * from the workers already running.
 */
export const START_PAYOFF = 2;

/**
 * Processes beyond the busy bound that may live by default (idle warm
 * workers of other functions): the functions of a sheet refreshed together
 * keep their interpreters instead of evicting each other. Idle, a worker
 * costs memory only — about 16 MB resident for Python (bwrap 2 MB, the
 * interpreter 14 MB after a 10^5-row batch), more for R, up to its memory
 * limit if its body keeps data — so four more is tens of MB for typical
 * bodies; `idleMs` ends them, and `maxLiveWorkers` sets the bound.
 */
export const EXTRA_LIVE = 4;

/**
 * How long a caller whose function has a ready worker waits for a busy slot
 * before a lane of a function with more busy workers gives it a turn (see
 * `shouldYield`). Long against a handover (the worker given up idles while
 * the next lane writes its first request: well under a millisecond), short
 * against a refresh.
 */
export const TURN_MS = 50;

/**
 * A turn goes to a waiting function at once when its work left per worker is
 * more than SHARE_SLACK times the giving function's plus SHARE_MARGIN_MS:
 * the function with the most work left bounds when all of them are done
 * (longest remaining first), and the slack keeps two functions with about
 * the same work left from handing a slot back and forth chunk after chunk
 * (each handover idles the worker for a round trip).
 */
export const SHARE_SLACK = 1.25;
export const SHARE_MARGIN_MS = 5;

/** The longest delay a Node timer holds (2^31 − 1 ms); a longer one fires after 1 ms. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** How long a worker must have been idle before it is evicted for a function that has a worker already. */
export const EVICT_IDLE_MS = 1_000;

/** Starts a ready worker for `fn` (the pool's seam: the runner starts interpreters, tests fakes). */
export type Launch<W extends PooledWorker> = (
  key: string,
  fn: ExternalFn,
  signal: AbortSignal | undefined,
) => Promise<W>;

interface Waiter<W extends PooledWorker> {
  /** The function a worker is wanted for; undefined for a bare slot (a one-shot process). */
  key: string | undefined;
  signal: AbortSignal | undefined;
  /** Takes a busy slot and room to live, and serves the waiter (starts its worker, or hands over the slot). */
  grant(): void;
  /** Hands over an idle worker of the waiter's function (its busy slot already taken). */
  reuse(worker: W): void;
  /** Takes over its function's prestart (its busy slot already taken). */
  join?(prestart: Promise<W | undefined>): void;
  reject(error: unknown): void;
  onAbort?: () => void;
  timer?: NodeJS.Timeout;
  /** When it began to wait (performance.now()): turns go to those that waited TURN_MS. */
  since: number;
}

/** A running batch's estimates of the work it has not handed out yet (see Pool.trackBacklog). */
interface Backlog {
  estimateMs: () => number;
  /** Undefined while not measured yet. */
  leftMs: (() => number | undefined) | undefined;
}

/**
 * What the pool did, in order: a worker's start begun (`start`, its slot
 * taken) and ended (`ready`, or `failed`), its end begun (`stop`) and its
 * slot free again (`freed`). For timelines (bench/refresh.mjs) and tests of
 * event order.
 */
export type PoolEvent =
  | { type: 'start'; key: string }
  | { type: 'ready'; key: string; pid: number | undefined }
  | { type: 'failed'; key: string }
  | { type: 'stop'; key: string; pid: number | undefined }
  | { type: 'freed'; key: string; pid: number | undefined };

export interface PoolCounters {
  /** Warm workers alive (busy or idle). */
  live: number;
  /** Busy slots taken now (workers starting for a caller or in use, and one-shot processes). */
  busy: number;
  /** Most busy slots taken at once. */
  peak: number;
  killed: number;
  queued: number;
}

export class Pool<W extends PooledWorker = PooledWorker> {
  /** Most workers busy at once. */
  readonly max: number;
  /** Most processes alive at once (busy, idle, exiting). */
  readonly maxLive: number;
  readonly idleMs: number;
  #launch: Launch<W>;
  /** Busy slots taken: workers starting for a caller or handed out, and one-shot processes. */
  #busy = 0;
  /** Busy slots by function. */
  #busyPer = new Map<string, number>();
  /** Workers handed out to callers and not given back yet. */
  #inUse = new Set<W>();
  /** Processes: workers starting (prestarts too), live or exiting, and one-shot processes. */
  #live = 0;
  #peak = 0;
  #killed = 0;
  #idle = new Map<string, W[]>();
  /**
   * A timer a worker, armed when it is parked and left armed when it is taken
   * (calls one after another would otherwise arm and clear one each, a few
   * microseconds of a warm call): when it fires, a worker parked all along
   * for idleMs ends, one parked since is given the rest of its time.
   */
  #idleTimers = new Map<W, NodeJS.Timeout>();
  /** When each idle worker was parked: the parked workers. */
  #idleSince = new Map<W, number>();
  /** A look at the queue again once an idle worker may be evicted for a function that has a worker. */
  #evictTimer: NodeJS.Timeout | undefined;
  #all = new Set<W>();
  /** Workers exiting gracefully: their slots are still taken. */
  #stopping = new Set<W>();
  #queue: Waiter<W>[] = [];
  #idleCheck: NodeJS.Timeout | undefined;
  /** The look at workers parked with their check pending, when one is due. */
  #pendingCheck: NodeJS.Timeout | undefined;
  /** Workers per function: live and starting (not those exiting). */
  #perKey = new Map<string, number>();
  /** Per function, each running batch's estimates of the work it has not handed out yet (see trackBacklog). */
  #backlogs = new Map<string, Set<Backlog>>();
  /** Starts begun by `prestart`, by function, not taken yet; undefined once one failed. */
  #prestarts = new Map<string, Promise<W | undefined>>();
  /** Interpreter starts in flight (spawned, not ready yet). */
  #launching = 0;
  /** Prestarts waiting for fewer than `max` starts in flight, oldest first. */
  #gated: (() => void)[] = [];
  /** Per function, its request time lately (ms, decaying over `idleMs`) and when it was last added to. */
  #recent = new Map<string, { ms: number; at: number }>();
  #closed = false;
  /** Told of every start and end (see PoolEvent); nothing by default. */
  observer: ((event: PoolEvent) => void) | undefined;

  /**
   * Whether the next start forks from a zygote (ready or booting): a few
   * milliseconds of CPU, not an interpreter's boot, so a prestart does not
   * wait for one ahead (the runner sets it; false for trees).
   */
  startsFork: () => boolean = () => false;

  /**
   * Whether a start that forks (`startsFork`) finds its zygote ready: one
   * that waits for the zygote's boot is not counted among start times (that
   * wait comes once). The runner sets it.
   */
  forkReady: () => boolean = () => true;

  /**
   * Where measured start times go and are judged by: the pool's own, or
   * (the runner sets it) those its interpreter setting has measured in this
   * process, kept across runners (see timings.ts).
   */
  startTimes: () => StartTimes;

  constructor(max: number, idleMs: number, launch: Launch<W>, maxLive?: number) {
    this.max = Math.max(1, Math.floor(max));
    this.maxLive = Math.max(this.max, Math.floor(maxLive ?? this.max + EXTRA_LIVE));
    this.idleMs = idleMs;
    this.#launch = launch;
    const own = new StartTimes();
    this.startTimes = () => own;
  }

  counters(): PoolCounters {
    return {
      live: this.#all.size,
      busy: this.#busy,
      peak: this.#peak,
      killed: this.#killed,
      queued: this.#queue.length,
    };
  }

  /** Whether nothing is under way: no slot busy, no caller queued, no start in flight. */
  idle(): boolean {
    return this.#busy === 0 && this.#queue.length === 0 && this.#launching === 0;
  }

  pids(): number[] {
    return [...this.#all, ...this.#stopping]
      .map((w) => w.pid)
      .filter((p): p is number => p !== undefined);
  }

  /** Live and starting workers of one function. */
  workersOf(key: string): number {
    return this.#perKey.get(key) ?? 0;
  }

  /** Busy slots of one function: its workers starting for a caller or in use. */
  busyOf(key: string): number {
    return this.#busyPer.get(key) ?? 0;
  }

  /** What the next worker start takes, as measured (a moving average of forks, or of trees). */
  startMs(): number {
    return this.startTimes().ms(this.startsFork());
  }

  /**
   * A running batch of `key` tells the pool how much work (ms) it has not
   * handed out yet: `estimateMs`, so the pool starts another worker of that
   * function only when it pays (see `#mayStart`), and `leftMs`, so turns go
   * to the function with the most work left (see `shouldYield`; without it,
   * or while it says undefined, the batch counts as a turn's worth: see
   * `#leftPerWorker`). Call the returned function when the batch ends.
   */
  trackBacklog(
    key: string,
    estimateMs: () => number,
    leftMs?: () => number | undefined,
  ): () => void {
    const set = this.#backlogs.get(key) ?? new Set();
    const backlog: Backlog = { estimateMs, leftMs };
    set.add(backlog);
    this.#backlogs.set(key, set);
    this.#pump(); // a waiter of this function may be worth a worker now
    return () => {
      set.delete(backlog);
      if (set.size === 0 && this.#backlogs.get(key) === set) this.#backlogs.delete(key);
    };
  }

  /** A request of `key` took `ms`: counted toward a further worker for a function refreshed again and again (see `#mayStart`). */
  noteWork(key: string, ms: number): void {
    if (!(ms > 0)) return;
    this.#recent.set(key, { ms: this.recentWorkMs(key) + ms, at: performance.now() });
  }

  /** `key`'s request time lately: each millisecond counts e^(-age / idleMs). */
  recentWorkMs(key: string): number {
    const recent = this.#recent.get(key);
    if (!recent) return 0;
    const ms = recent.ms * Math.exp(-(performance.now() - recent.at) / Math.max(1, this.idleMs));
    if (ms < 1e-3) this.#recent.delete(key);
    return ms;
  }

  /**
   * Whether a caller of `key` would get a worker at once: an idle one of its
   * function, or a start the pool allows now (nobody waiting, `#mayStart`,
   * and a free slot or an idle worker it may evict). A batch opens another
   * lane only then, so its lanes never queue for their own busy worker.
   * `idleOnly`: only an idle worker of its function counts (no start).
   */
  wouldServe(key: string, idleOnly = false): boolean {
    if (this.#closed || this.#busy >= this.max) return false;
    if (this.#idle.has(key)) return true;
    if (idleOnly || this.#queue.length > 0 || !this.#mayStart(key)) return false;
    return this.#hasRoom(key) || this.#victim(this.workersOf(key) > 0).victim !== undefined;
  }

  /**
   * Whether a caller holding a worker of `key` between requests (a batch
   * lane) should give it back: a caller of the same function waits (handing
   * over costs nothing), or a caller of a function with at least two busy
   * workers fewer (its fair share: a function with none gets one first)
   * that could be served with the slot, or — turns — a caller of a function
   * with fewer busy workers whose worker is idle and ready, when `key` has
   * the least work left per busy worker of the functions now busy and the
   * caller's function clearly more (SHARE_SLACK; a batch not measured yet
   * counts as a turn's worth), or the caller has waited TURN_MS with its
   * worker ready. The function with the most work left bounds the refresh,
   * so functions that share too few slots finish together (no function left
   * alone on one worker at the end while a slot idles), and a call of a
   * function with little work waits a turn, not a whole refresh.
   */
  shouldYield(key: string): boolean {
    const mine = this.busyOf(key);
    const now = performance.now();
    // `key`'s work left per busy worker and whether it is the least: looked at once, when a turn is in question
    let mineLeft: number | undefined;
    let least: boolean | undefined;
    for (const waiter of this.#queue) {
      if (waiter.key === key) return true;
      const theirs = waiter.key === undefined ? 0 : this.busyOf(waiter.key);
      if (theirs + 1 < mine && (this.#cheap(waiter.key) || this.#mayStart(waiter.key))) {
        return true;
      }
      if (theirs >= mine || waiter.key === undefined || !this.#idle.has(waiter.key)) continue;
      mineLeft ??= this.#leftPerWorker(key, 0);
      least ??= this.#leastLeft(key, mineLeft);
      if (!least) continue; // another busy function gives the turn
      const clearlyMore =
        this.#leftPerWorker(waiter.key, 1) > SHARE_SLACK * mineLeft + SHARE_MARGIN_MS;
      if (clearlyMore || this.#readyWaitMs(waiter.key, waiter.since, now) >= TURN_MS) return true;
    }
    return false;
  }

  /**
   * `key`'s work left (ms, its batches' `leftMs`) per busy worker, counting
   * `extra` more. A batch not measured yet (or that does not say) counts as
   * a turn's worth (TURN_MS): a function with less than that left gives way
   * to it at once, one with more only once it has waited a turn — a guess
   * of all its rows at a fresh worker's first figures would take the slot of
   * a function with far more work than it has. A call outside a batch
   * counts as unbounded: served at the next chunk's end.
   */
  #leftPerWorker(key: string, extra: number): number {
    const backlogs = this.#backlogs.get(key);
    if (!backlogs) return Number.POSITIVE_INFINITY;
    let ms = 0;
    for (const backlog of backlogs) ms += backlog.leftMs?.() ?? TURN_MS;
    return ms / Math.max(1, this.busyOf(key) + extra);
  }

  /**
   * How long a waiter has waited with a worker of its function ready: since
   * it came, or since its worker was parked (a worker that has just booted
   * for a caller that came long before has not waited a turn yet).
   */
  #readyWaitMs(key: string, since: number, now: number): number {
    let ready = now;
    for (const worker of this.#idle.get(key) ?? []) {
      ready = Math.min(ready, this.#idleSince.get(worker) ?? now);
    }
    return now - Math.max(since, ready);
  }

  /**
   * Whether no other busy function has less work left per busy worker than
   * `key` (`mine`): it gives the turn.
   */
  #leastLeft(key: string, mine: number): boolean {
    for (const other of this.#busyPer.keys()) {
      if (other !== key && this.#leftPerWorker(other, 0) < mine) return false;
    }
    return true;
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
  ): Promise<W> {
    if (!this.#closed && !signal?.aborted && this.#busy < this.max) {
      const idle = this.#takeIdle(key);
      if (idle) return Promise.resolve(this.#handOut(idle));
      const prestart = this.#prestarts.get(key);
      if (prestart) {
        this.#prestarts.delete(key); // taken: the first caller joins it instead of starting another
        this.#takeBusy(key);
        return this.#join(prestart, key, fn, signal, maxWaitMs);
      }
    }
    return this.#wait(key, signal, maxWaitMs, (resolve, reject) => ({
      grant: () => this.#start(key, fn, signal, true).then(resolve, reject),
      reuse: resolve,
      join: (prestart) => this.#join(prestart, key, fn, signal, maxWaitMs).then(resolve, reject),
    }));
  }

  /**
   * Starts a worker for `key` ahead of its callers (the runner's `prepare`:
   * a batch is about to come), when the function has no worker at all and
   * `maxLive` leaves room, whether or not a busy slot is free: the start
   * then overlaps other functions' work. The first `acquire` of `key` takes
   * it (once it has a busy slot) instead of starting another. Returns
   * whether it started one. A failed start is not reported here: its caller
   * starts one as if none had been prepared, and that start reports its own
   * failure. One nobody takes idles out as usual.
   */
  prestart(key: string, fn: ExternalFn): boolean {
    if (this.#closed || this.workersOf(key) > 0 || this.#live >= this.maxLive) return false;
    void this.#startAhead(key, fn).catch(() => {});
    return true;
  }

  /**
   * For `runner.warmUp`: a worker of `key` started as `prestart` does and
   * waited for. Resolves true once the function has one (at once when it has
   * a live one), false when `maxLive` leaves no room for it; rejects with
   * the start's failure.
   */
  async warm(key: string, fn: ExternalFn): Promise<boolean> {
    const pending = this.#prestarts.get(key);
    if (pending && (await pending)) return true;
    if (this.#closed) return false;
    if (this.workersOf(key) > 0) return true;
    if (this.#live >= this.maxLive) return false;
    await this.#startAhead(key, fn);
    return true;
  }

  /** Starts a worker ahead of its callers (see `prestart`); parks it idle unless a caller took the start. */
  #startAhead(key: string, fn: ExternalFn): Promise<W> {
    // At most `max` starts at once: one beyond waits for one ahead to be ready
    // (the first functions' interpreters boot at full speed, the next ones while those work).
    const gate =
      this.#launching >= this.max && !this.startsFork()
        ? new Promise<void>((resolve) =>
            this.#gated.push(() => {
              this.#launching++; // its turn, counted before it begins
              resolve();
            }),
          )
        : undefined;
    const started = this.#start(key, fn, undefined, false, gate);
    const start = started.then(
      (worker) => worker,
      () => undefined,
    );
    this.#prestarts.set(key, start);
    void start.then((worker) => {
      if (this.#prestarts.get(key) !== start) return; // taken by a caller
      this.#prestarts.delete(key);
      if (!worker) return;
      this.#park(worker); // idle: a waiter of its function takes it once it has a busy slot
      this.#pump();
    });
    return started;
  }

  /**
   * A caller's worker from a prestart, its busy slot taken; a fresh acquire
   * (the slot given back) when that start failed.
   */
  async #join(
    prestart: Promise<W | undefined>,
    key: string,
    fn: ExternalFn,
    signal: AbortSignal | undefined,
    maxWaitMs: number,
  ): Promise<W> {
    const worker = await prestart;
    if (!worker || this.#closed) {
      this.#giveBusy(key);
      this.#pump();
      if (worker) this.#discard(worker);
      return this.acquire(key, fn, signal, maxWaitMs);
    }
    this.#inUse.add(worker);
    if (signal?.aborted) {
      this.release(worker, true);
      throw new WorkerFailure('aborted', 'aborted', undefined, undefined, signal.reason);
    }
    return worker;
  }

  /**
   * A slot without a warm worker, for a one-shot process: it counts against
   * the same bounds. Call the returned function when the process has ended.
   */
  acquireSlot(signal?: AbortSignal, maxWaitMs = Number.POSITIVE_INFINITY): Promise<() => void> {
    return this.#wait<() => void>(undefined, signal, maxWaitMs, (resolve) => ({
      grant: () => {
        this.#takeBusy(undefined);
        this.#live++;
        let released = false;
        resolve(() => {
          if (released) return;
          released = true;
          this.#giveBusy(undefined);
          this.#live--;
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
    ) => Pick<Waiter<W>, 'grant' | 'reuse' | 'join'>,
  ): Promise<T> {
    if (this.#closed) return Promise.reject(new WorkerFailure('closed', 'the runner is closed'));
    if (signal?.aborted) {
      return Promise.reject(
        new WorkerFailure('aborted', 'aborted', undefined, undefined, signal.reason),
      );
    }
    return new Promise<T>((resolve, reject) => {
      const waiter: Waiter<W> = {
        key,
        signal,
        reject,
        since: performance.now(),
        ...(serve(resolve, reject) as Pick<Waiter<W>, 'grant' | 'reuse' | 'join'>),
      };
      if (
        this.#queue.length === 0 &&
        this.#busy < this.max &&
        this.#hasRoom(waiter.key) &&
        this.#mayStart(waiter.key)
      ) {
        waiter.grant(); // nobody waits and there is room: no queueing
        return;
      }
      // A wait past what a timer can hold (~24.8 days) is no bound: Node would fire it at once.
      if (maxWaitMs <= MAX_TIMER_MS) {
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
  release(worker: W, reusable: boolean): void {
    const wasInUse = this.#inUse.delete(worker);
    if (wasInUse) this.#giveBusy(worker.key);
    if (!reusable || !worker.alive || this.#closed) {
      this.#discard(worker);
    } else {
      const waiter = this.#queue.find((w) => w.key === worker.key);
      if (waiter && this.#busy < this.max) {
        this.#dequeue(waiter);
        waiter.reuse(this.#handOut(worker)); // its slot goes with it
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
    this.#idleSince.clear();
    clearTimeout(this.#evictTimer);
    clearInterval(this.#idleCheck);
    clearTimeout(this.#pendingCheck);
    this.#idle.clear();
    // Idle workers exit on their own (bounded by the grace); busy ones are killed at once.
    const all = [...this.#all, ...this.#stopping];
    this.#all.clear();
    this.#perKey.clear();
    this.#prestarts.clear();
    this.#inUse.clear();
    for (const go of this.#gated.splice(0)) go(); // each fails as closed, launching nothing
    await Promise.all(all.map((w) => w.stop(EXIT_GRACE_MS)));
  }

  /** One more busy slot (a worker starting for a caller or handed out, or a one-shot process). */
  #takeBusy(key: string | undefined): void {
    this.#busy++;
    this.#peak = Math.max(this.#peak, this.#busy);
    if (key !== undefined) this.#busyPer.set(key, this.busyOf(key) + 1);
  }

  #giveBusy(key: string | undefined): void {
    this.#busy--;
    if (key === undefined) return;
    const n = this.busyOf(key) - 1;
    if (n > 0) this.#busyPer.set(key, n);
    else this.#busyPer.delete(key);
  }

  /** An idle worker handed to a caller: it takes a busy slot until given back. */
  #handOut(worker: W): W {
    this.#takeBusy(worker.key);
    this.#inUse.add(worker);
    return worker;
  }

  /** Starts a worker: for a caller (`forCaller`, a busy slot) or ahead of one (a prestart: live only). */
  #start(
    key: string,
    fn: ExternalFn,
    signal: AbortSignal | undefined,
    forCaller: boolean,
    gate?: Promise<void>,
  ): Promise<W> {
    if (forCaller) this.#takeBusy(key);
    this.#live++;
    this.#count(key, 1);
    let started = 0;
    let kind: 'fork' | 'tree' | 'boot' = 'tree';
    // Counted in #launching from here (ungated) or from the gate's opening (see prestart).
    if (!gate) this.#launching++;
    const begin = () => {
      if (this.#closed) throw new WorkerFailure('closed', 'the runner is closed');
      this.observer?.({ type: 'start', key });
      kind = !this.startsFork() ? 'tree' : this.forkReady() ? 'fork' : 'boot';
      started = performance.now();
      return this.#launch(key, fn, signal);
    };
    // Without a gate the process is spawned before this returns (see runner.prepare).
    const launched = gate ? gate.then(begin) : begin();
    return launched.then(
      (worker) => {
        this.#launched();
        if (kind !== 'boot') this.startTimes().note(kind === 'fork', performance.now() - started);
        this.observer?.({ type: 'ready', key, pid: worker.pid });
        if (this.#closed) {
          void worker.kill();
          this.#live--;
          if (forCaller) this.#giveBusy(key);
          this.#count(key, -1);
          throw new WorkerFailure('closed', 'the runner is closed');
        }
        this.#all.add(worker);
        if (forCaller) this.#inUse.add(worker);
        return worker;
      },
      (error: unknown) => {
        this.#launched();
        this.#live--;
        if (forCaller) this.#giveBusy(key);
        this.#count(key, -1);
        this.observer?.({ type: 'failed', key });
        this.#pump();
        throw error;
      },
    );
  }

  /**
   * A start has ended (ready or failed): a prestart waiting for its turn may
   * begin, on the next turn of the event loop. A real start forks the host,
   * synchronously (tens of ms with a large heap): begun at once, it would run
   * before the worker just ready had its first request written.
   */
  #launched(): void {
    this.#launching--;
    if (this.#gated.length > 0) setImmediate(() => this.#openGates());
  }

  #openGates(): void {
    while (this.#gated.length > 0 && this.#launching < this.max) this.#gated.shift()!();
  }

  #count(key: string, delta: number): void {
    const n = (this.#perKey.get(key) ?? 0) + delta;
    if (n > 0) this.#perKey.set(key, n);
    else this.#perKey.delete(key);
  }

  /**
   * Whether a start for `key` has room to live: the room beyond `max` is for
   * a function's first worker (each function of a sheet keeps one warm), so
   * a function's further workers count against `max` processes as before.
   */
  #hasRoom(key: string | undefined): boolean {
    const first = key === undefined || this.workersOf(key) === 0;
    return this.#live < (first ? this.maxLive : this.max);
  }

  /** Whether a waiter of `key` would be served without a start: its function has an idle or starting worker. */
  #cheap(key: string | undefined): boolean {
    return key !== undefined && (this.#idle.has(key) || this.#prestarts.has(key));
  }

  /** Workers of a waiter's function; a one-shot slot counts as a function without any. */
  #workersFor(waiter: Waiter<W>): number {
    return waiter.key === undefined ? 0 : this.workersOf(waiter.key);
  }

  /**
   * Whether a waiter for `key` may have a slot of its own (a start, or a one-shot
   * process): always when its function has no worker or no batch that
   * tracks its backlog (single calls); otherwise only when that backlog per
   * worker is worth START_PAYOFF starts, or — with work still to hand out
   * and a free room among `max` processes — when the backlog and the
   * function's recent work together are (a repeated refresh: the worker
   * stays warm for the next ones). Else it waits for its function's worker,
   * which is handed over between requests.
   */
  #mayStart(key: string | undefined): boolean {
    if (key === undefined) return true;
    const workers = this.workersOf(key);
    const backlogs = this.#backlogs.get(key);
    if (workers === 0 || !backlogs) return true;
    let backlogMs = 0;
    for (const backlog of backlogs) backlogMs += backlog.estimateMs();
    const payoff = START_PAYOFF * this.startMs();
    if (backlogMs / workers > payoff) return true;
    return (
      backlogMs > 0 &&
      this.#live < this.max &&
      (backlogMs + this.recentWorkMs(key)) / workers > payoff
    );
  }

  /**
   * Ends a worker and frees its room to live: at once for a dead or failed
   * one, once it has exited (or been killed after the grace) for a healthy
   * one. Returns whether the room is free now.
   */
  #discard(worker: W): boolean {
    if (!this.#all.delete(worker)) return false;
    this.#count(worker.key, -1);
    this.#unpark(worker);
    clearTimeout(this.#idleTimers.get(worker));
    this.#idleTimers.delete(worker);
    const event = { key: worker.key, pid: worker.pid };
    this.observer?.({ type: 'stop', ...event });
    if (!worker.alive) {
      this.#killed++;
      this.#live--;
      this.observer?.({ type: 'freed', ...event });
      void worker.kill();
      return true;
    }
    this.#stopping.add(worker);
    void worker.stop(EXIT_GRACE_MS).then(() => {
      if (!this.#stopping.delete(worker)) return;
      this.#live--;
      this.observer?.({ type: 'freed', ...event });
      this.#pump();
    });
    return false;
  }

  #park(worker: W): void {
    const list = this.#idle.get(worker.key) ?? [];
    list.push(worker);
    this.#idle.set(worker.key, list);
    this.#idleSince.set(worker, performance.now());
    if (!this.#idleTimers.has(worker)) this.#armIdle(worker, this.idleMs);
    if (worker.idleWork && !this.#idleCheck) {
      this.#idleCheck = setInterval(() => this.#checkIdle(), IDLE_CHECK_MS);
      this.#idleCheck.unref();
    }
    if (worker.idleWork && worker.checkPending?.()) this.#checkSoon();
  }

  /** Looks at the workers parked with their check pending PENDING_CHECK_MS from now (one timer for all). */
  #checkSoon(): void {
    if (this.#pendingCheck || this.#closed) return;
    this.#pendingCheck = setTimeout(() => {
      this.#pendingCheck = undefined;
      this.#checkIdle(true);
    }, PENDING_CHECK_MS);
    this.#pendingCheck.unref();
  }

  /**
   * Kills idle workers that keep working (a timer the body left behind), so they burn at most until the next look;
   * with `pendingOnly`, looks only at those parked with their check pending (see PENDING_CHECK_MS).
   */
  #checkIdle(pendingOnly = false): void {
    if (this.#idleSince.size === 0 && !pendingOnly) {
      clearInterval(this.#idleCheck);
      this.#idleCheck = undefined;
      return;
    }
    let again = false;
    for (const worker of [...this.#idleSince.keys()]) {
      if (pendingOnly && !worker.checkPending?.()) continue;
      if (worker.idleWork?.() === undefined) {
        again ||= worker.checkPending?.() === true; // parked again just now: looked at next time
        continue;
      }
      void worker.kill(); // marks it failed: #discard counts it as killed and frees its slot
      this.#discard(worker);
    }
    if (again) this.#checkSoon();
    this.#pump();
  }

  /** Ends `worker` in `ms` if it is parked all that time (see #idleTimers). */
  #armIdle(worker: W, ms: number): void {
    const timer = setTimeout(() => {
      const since = this.#idleSince.get(worker);
      if (since === undefined) {
        this.#idleTimers.delete(worker); // in use: armed again when parked
        return;
      }
      const left = since + this.idleMs - performance.now();
      if (left > 0) {
        this.#armIdle(worker, left);
        return;
      }
      this.#discard(worker);
      this.#pump();
    }, ms);
    timer.unref();
    this.#idleTimers.set(worker, timer);
  }

  #unpark(worker: W): void {
    this.#idleSince.delete(worker);
    const list = this.#idle.get(worker.key);
    if (!list) return;
    const i = list.indexOf(worker);
    if (i >= 0) list.splice(i, 1);
    if (list.length === 0) this.#idle.delete(worker.key);
  }

  #takeIdle(key: string): W | undefined {
    const list = this.#idle.get(key);
    while (list?.length) {
      const worker = list[list.length - 1]!;
      this.#unpark(worker);
      if (worker.alive) return worker;
      this.#discard(worker);
    }
    return undefined;
  }

  /**
   * Ends an idle worker (of any function) for a waiting caller: `freed` now,
   * or `stopping` (free soon). For a caller whose function has a worker
   * already (`extra`), only one idle for EVICT_IDLE_MS; the queue is looked
   * at again when the next one will have been.
   */
  #evictOne(extra: boolean): 'freed' | 'stopping' | undefined {
    const { victim, soonest } = this.#victim(extra);
    if (victim) return this.#discard(victim) ? 'freed' : 'stopping';
    if (Number.isFinite(soonest) && this.#evictTimer === undefined) {
      this.#evictTimer = setTimeout(() => {
        this.#evictTimer = undefined;
        this.#pump();
      }, soonest + 1);
      this.#evictTimer.unref();
    }
    return undefined;
  }

  /** An idle worker that may be evicted (see #evictOne), or in how many ms the next one may be. */
  #victim(extra: boolean): { victim?: W; soonest: number } {
    const now = performance.now();
    let soonest = Number.POSITIVE_INFINITY;
    for (const list of this.#idle.values()) {
      for (const worker of list) {
        const idleFor = now - (this.#idleSince.get(worker) ?? now);
        if (!extra || idleFor >= EVICT_IDLE_MS) return { victim: worker, soonest: 0 };
        soonest = Math.min(soonest, EVICT_IDLE_MS - idleFor);
      }
    }
    return { soonest };
  }

  #dequeue(waiter: Waiter<W>): void {
    const i = this.#queue.indexOf(waiter);
    if (i >= 0) this.#queue.splice(i, 1);
    if (waiter.onAbort) waiter.signal?.removeEventListener('abort', waiter.onAbort);
    clearTimeout(waiter.timer);
  }

  /**
   * Serves waiting callers while a busy slot is free: first those whose
   * function has an idle or starting worker (no start), the function with
   * the most work left per worker first (see `shouldYield`), oldest first
   * among equals; then,
   * among those that `#mayStart`, callers whose function has the fewest
   * workers, oldest first among equals, with a start when `maxLive` leaves
   * room. Room being freed by an exiting worker is promised to a waiter
   * without one; past those, idle workers of other functions are evicted.
   */
  #pump(): void {
    if (this.#closed) return;
    const mostLeftFirst = this.#queue
      .map((waiter) => ({
        waiter,
        left: waiter.key === undefined ? 0 : this.#leftPerWorker(waiter.key, 1),
      }))
      .sort((a, b) => (a.left === b.left ? 0 : a.left > b.left ? -1 : 1)); // stable: oldest first among equals
    for (const { waiter } of mostLeftFirst) {
      if (this.#busy >= this.max) return;
      if (waiter.key === undefined) continue;
      const idle = this.#takeIdle(waiter.key);
      if (idle) {
        this.#dequeue(waiter);
        waiter.reuse(this.#handOut(idle));
        continue;
      }
      const prestart = this.#prestarts.get(waiter.key);
      if (prestart && waiter.join) {
        this.#prestarts.delete(waiter.key);
        this.#dequeue(waiter);
        this.#takeBusy(waiter.key);
        waiter.join(prestart);
      }
    }
    let coming = this.#stopping.size;
    const promised = new Set<Waiter<W>>();
    while (this.#queue.length > promised.size && this.#busy < this.max && !this.#closed) {
      let waiter: Waiter<W> | undefined;
      for (const candidate of this.#queue) {
        if (promised.has(candidate) || !this.#mayStart(candidate.key)) continue;
        if (!waiter || this.#workersFor(candidate) < this.#workersFor(waiter)) waiter = candidate;
      }
      if (!waiter) return;
      if (this.#hasRoom(waiter.key)) {
        this.#dequeue(waiter);
        waiter.grant();
      } else if (coming > 0) {
        coming--; // this waiter gets the next room that frees up
        promised.add(waiter);
      } else {
        const evicted = this.#evictOne(this.#workersFor(waiter) > 0);
        if (evicted === undefined) return;
        if (evicted === 'stopping') coming++; // then look at the same waiter again
      }
    }
  }
}
