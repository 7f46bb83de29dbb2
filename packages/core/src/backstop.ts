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
 * Waits for `promise`, but no longer than `limitMs` without a sign of life,
 * nor past an abort. `alive` is handed to the caller, who calls it whenever
 * the work shows progress; each call restarts the wait.
 */
export async function withBackstop<T>(
  start: (alive: () => void) => Promise<T>,
  limitMs: number,
  onStall: () => T | Promise<T>,
  signal?: AbortSignal,
  onAbort?: () => T | Promise<T>,
): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  let abort: (() => void) | undefined;
  let settle!: (outcome: () => T | Promise<T>) => void;
  const cutOff = new Promise<() => T | Promise<T>>((resolve) => {
    settle = resolve;
  });
  const arm = () => {
    clearTimeout(timer);
    timer = setTimeout(() => settle(onStall), limitMs);
    timer.unref?.(); // the runner's own work keeps the process alive, not this timer
  };
  arm();
  if (signal && onAbort) {
    abort = () => settle(onAbort);
    if (signal.aborted) abort();
    else signal.addEventListener('abort', abort, { once: true });
  }
  try {
    const work = new Promise<T>((resolve) => resolve(start(arm))).then(
      (value) => () => value,
      (error: unknown) => () => Promise.reject(error),
    );
    return await (await Promise.race([work, cutOff]))();
  } finally {
    clearTimeout(timer);
    if (abort) signal?.removeEventListener('abort', abort);
  }
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
