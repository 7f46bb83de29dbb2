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
 * Waits for what `start` returns, but no longer than `limitMs` without a sign
 * of life, nor past an abort. `alive` is handed to the caller, who calls it
 * whenever the work shows progress; each call restarts the wait.
 */
export function withBackstop<T>(
  start: (alive: () => void) => Promise<T>,
  limitMs: number,
  onStall: () => T | Promise<T>,
  signal?: AbortSignal,
  onAbort?: () => T | Promise<T>,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let done = false;
    let abort: (() => void) | undefined;
    const finish = (outcome: () => T | Promise<T>) => {
      if (done) return;
      done = true;
      waits.delete(wait);
      if (abort) signal?.removeEventListener('abort', abort);
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
      wait.at = performance.now() + limitMs;
    };
    if (signal && onAbort) {
      abort = () => finish(onAbort);
      if (signal.aborted) abort();
      else signal.addEventListener('abort', abort, { once: true });
    }
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

/** One call: cut off with a Timeout at its deadline plus grace, or with `aborted`. */
export function guardCall<T>(
  fn: ExternalFn,
  promise: Promise<T>,
  deadlineMs: number,
  signal: AbortSignal | undefined,
): Promise<T> {
  return withBackstop(
    () => promise,
    deadlineMs + graceMs(deadlineMs),
    () => Promise.reject(ExtFnError.timeout(fn.name, deadlineMs)),
    signal,
    () => Promise.reject(ExtFnError.aborted(fn.name, signal?.reason)),
  );
}

/**
 * How long a batch may go without reporting progress: one deadline for a chunk
 * that then hangs, one for re-running its hanging row alone, plus the grace a
 * single call gets. Long batches that keep reporting progress are never cut.
 */
export function batchSilenceMs(deadlineMs: number): number {
  return 2 * deadlineMs + graceMs(deadlineMs);
}
