/**
 * Core's last line against a runner that never settles. Runners enforce
 * deadlines themselves; these only bound how long core waits for one that
 * does not, so `eval`, `evalBatch` and `evalColumns` always settle.
 */
import type { ExternalFn } from './descriptor.js';
import { ExtFnError } from './errors.js';

/** How long past its deadline a call may take before core gives up on the runner. */
export function graceMs(deadlineMs: number): number {
  // A warm worker may need time to start (an interpreter, a sandbox) on top of the deadline.
  return Math.max(2_000, deadlineMs);
}

/**
 * How long a batch whose caller aborted, or any call whose registry closed,
 * may take to answer with what it finished (a runner that honours its
 * signal, or closes, stops at once and keeps the rows it did) before core
 * cuts it off: every row aborted, or the closed error.
 */
export const ABORT_WAIT_MS = 2_000;

/** One wait under way: when it is cut off, and how. */
interface Wait {
  at: number;
  stall(): void;
}

/**
 * The waits under way, and one timer for all of them: armed for the earliest
 * cut-off and left as it is when a wait ends or is prolonged (a timer armed
 * and cleared per call is a few microseconds of a warm call); when it fires
 * it cuts off what is due and is armed for the next.
 */
const waits = new Set<Wait>();
let timer: NodeJS.Timeout | undefined;
let timerAt = Number.POSITIVE_INFINITY;

/**
 * The longest delay a Node timer takes (2^31 - 1 ms, about 24.9 days): a
 * longer one fires after 1 ms, with a TimeoutOverflowWarning. A cut-off
 * further away (a deadline over half of it: the wait is the deadline plus
 * as much grace) arms the timer for this long; when it fires nothing is due
 * yet, and it is armed again for what is left.
 */
export const MAX_TIMER_DELAY_MS = 2_147_483_647;

function armAt(at: number): void {
  clearTimeout(timer);
  timerAt = at;
  const delay = Math.min(MAX_TIMER_DELAY_MS, Math.max(0, at - performance.now()));
  timer = setTimeout(cutOffDue, delay);
  timer.unref?.(); // the runner's own work keeps the process alive, not this timer
}

function cutOffDue(): void {
  timer = undefined;
  timerAt = Number.POSITIVE_INFINITY;
  const now = performance.now();
  let next = Number.POSITIVE_INFINITY;
  for (const wait of [...waits]) {
    if (wait.at <= now) wait.stall();
    else next = Math.min(next, wait.at);
  }
  if (Number.isFinite(next)) armAt(next); // the earliest wait left
}

/**
 * Calls `callback` when `signal` aborts; returns what stops that. One
 * listener per signal for all the waits on it, however many: an engine that
 * passes one signal to every call of a refresh would otherwise add a
 * listener per call in flight, and Node warns (MaxListenersExceededWarning)
 * past ten.
 */
const onAbortOf = new WeakMap<AbortSignal, Set<() => void>>();
export function whenAborted(signal: AbortSignal, callback: () => void): () => void {
  let callbacks = onAbortOf.get(signal);
  if (!callbacks) {
    const added = new Set<() => void>();
    callbacks = added;
    onAbortOf.set(signal, added);
    signal.addEventListener(
      'abort',
      () => {
        onAbortOf.delete(signal);
        for (const call of [...added]) call();
      },
      { once: true },
    );
  }
  const registered = callbacks;
  registered.add(callback);
  return () => {
    registered.delete(callback);
  };
}

/**
 * The waits of one runner that a registry's `close` ends at once: calls in
 * flight settle with a clear error instead of waiting for a runner that is
 * being shut down.
 */
export class Shutdown {
  #stops = new Set<() => void>();
  #closed = false;

  get closed(): boolean {
    return this.#closed;
  }

  /** Runs `stop` at close (at once when already closed); returns what unregisters it. */
  add(stop: () => void): () => void {
    if (this.#closed) {
      stop();
      return () => {};
    }
    this.#stops.add(stop);
    return () => {
      this.#stops.delete(stop);
    };
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    const stops = [...this.#stops];
    this.#stops.clear();
    for (const stop of stops) stop();
  }
}

/** What else ends a wait besides the runner's answer and the silence limit. */
export interface CutOffs<T> {
  /** The caller's signal: once it aborts, `onAbort` settles the wait… */
  signal?: AbortSignal | undefined;
  onAbort?: () => T | Promise<T>;
  /**
   * …at once (0, the default), or when the work has not answered within
   * this many milliseconds of the abort: a runner that honours its signal
   * answers with what it finished; one that ignores it is cut off then.
   */
  abortWaitMs?: number;
  /** The runner's shutdown (its registry closing): `onClose` settles the wait… */
  shutdown?: Shutdown | undefined;
  onClose?: () => T | Promise<T>;
  /**
   * …at once (0, the default), or when the work has not answered within
   * this many milliseconds of the close: a runner's `close` ends its work
   * and the calls in flight answer (rows done keep their values).
   */
  closeWaitMs?: number;
}

/**
 * Waits for what `start` returns, but no longer than `limitMs` without a sign
 * of life, nor past an abort or a close (see CutOffs). `alive` is handed to
 * the caller, who calls it whenever the work shows progress; each call
 * restarts the wait.
 */
export function withBackstop<T>(
  start: (alive: () => void) => Promise<T>,
  limitMs: number,
  onStall: () => T | Promise<T>,
  cutOffs: CutOffs<T> = {},
): Promise<T> {
  const { signal, onAbort, abortWaitMs = 0, shutdown, onClose, closeWaitMs = 0 } = cutOffs;
  return new Promise<T>((resolve, reject) => {
    let done = false;
    let cut = false;
    let unlistenAbort: (() => void) | undefined;
    let unlistenClose: (() => void) | undefined;
    const finish = (outcome: () => T | Promise<T>) => {
      if (done) return;
      done = true;
      waits.delete(wait);
      unlistenAbort?.();
      unlistenClose?.();
      try {
        resolve(outcome());
      } catch (error) {
        reject(error);
      }
    };
    const wait: Wait = { at: performance.now() + limitMs, stall: () => finish(onStall) };
    waits.add(wait);
    if (wait.at < timerAt) armAt(wait.at);
    // Prolonging arms nothing: the timer, when it fires, finds the later time.
    const alive = () => {
      if (!cut) wait.at = performance.now() + limitMs;
    };
    /** Settles with `outcome` in `ms` unless the work answers first (or a cut-off comes sooner). */
    const cutAfter = (ms: number, outcome: () => T | Promise<T>) => {
      if (ms <= 0) return finish(outcome);
      const at = performance.now() + ms;
      cut = true;
      if (at >= wait.at) return;
      wait.at = at;
      wait.stall = () => finish(outcome);
      if (at < timerAt) armAt(at);
    };
    if (signal && onAbort) {
      const abort = () => cutAfter(abortWaitMs, onAbort);
      if (signal.aborted) abort();
      else unlistenAbort = whenAborted(signal, abort);
    }
    if (shutdown && onClose) unlistenClose = shutdown.add(() => cutAfter(closeWaitMs, onClose));
    let work: Promise<T>;
    try {
      work = start(alive);
    } catch (error) {
      finish(() => Promise.reject(error));
      return;
    }
    Promise.resolve(work).then(
      (value) => finish(() => value),
      (error: unknown) => finish(() => Promise.reject(error)),
    );
  });
}

/** One call: cut off with a Timeout at its deadline plus grace, with `aborted`, or after a close. */
export function guardCall<T>(
  fn: ExternalFn,
  promise: Promise<T>,
  deadlineMs: number,
  signal: AbortSignal | undefined,
  shutdown?: Shutdown,
): Promise<T> {
  return withBackstop(
    () => promise,
    deadlineMs + graceMs(deadlineMs),
    () => Promise.reject(ExtFnError.timeout(fn.name, deadlineMs)),
    {
      signal,
      onAbort: () => Promise.reject(ExtFnError.aborted(fn.name, signal?.reason)),
      shutdown,
      onClose: () => Promise.reject(closedError(fn.name)),
      closeWaitMs: ABORT_WAIT_MS,
    },
  );
}

/** What a call gets when its registry closes while it runs, or is made after. */
export function closedError(name: string): ExtFnError {
  return ExtFnError.runtime(name, 'the registry is closed', {
    fix: 'make calls before Registry.close(), or on a new Registry',
  });
}

/**
 * How long a batch may go without reporting progress: one deadline for a chunk
 * that then hangs, one for re-running its hanging row alone, plus the grace a
 * single call gets. Long batches that keep reporting progress are never cut.
 */
export function batchSilenceMs(deadlineMs: number): number {
  return 2 * deadlineMs + graceMs(deadlineMs);
}
