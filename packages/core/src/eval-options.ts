/**
 * Checks the options of `eval`, `evalBatch` and `evalColumns` once, before
 * anything runs, so a runner never sees a nonsense deadline and a caller gets
 * an ExtFnError naming the bad option instead of a RangeError from deep inside.
 */
import { ExtFnError } from './errors.js';
import { cut, quoted } from './limits.js';

/** Node's timers hold at most 2^31 - 1 ms (about 24.8 days). */
export const MAX_TIMEOUT_MS = 2_147_483_647;

/** Whether `ms` is a usable deadline: a number in (0, MAX_TIMEOUT_MS]. */
export function isTimeout(ms: unknown): ms is number {
  return typeof ms === 'number' && ms > 0 && ms <= MAX_TIMEOUT_MS;
}

const TIMEOUT_RANGE = `a number of milliseconds in (0, ${MAX_TIMEOUT_MS}]`;
const MODES = ['warm', 'oneShot'];

function bad(functionName: string, option: string, wanted: string, got: unknown): ExtFnError {
  // a string quoted, anything else as String gives it; either cut to 100 characters
  const shown = typeof got === 'string' ? quoted(got, 100) : cut(String(got), 100);
  return ExtFnError.runtime(functionName, `option ${option} must be ${wanted}, got ${shown}`, {
    got: shown,
  });
}

/**
 * The option bag of one call, checked: returns the deadline to use, or throws
 * an ExtFnError (Runtime) whose message names the option and what it takes.
 */
export function checkEvalOptions(
  functionName: string,
  options: unknown,
  defaultTimeoutMs: number,
): number {
  if (options === undefined) return defaultTimeoutMs;
  if (typeof options !== 'object' || options === null) {
    throw bad(functionName, 'options', 'an object', options);
  }
  const o = options as Record<string, unknown>;
  if (o.timeoutMs !== undefined && !isTimeout(o.timeoutMs)) {
    throw bad(functionName, 'timeoutMs', TIMEOUT_RANGE, o.timeoutMs);
  }
  if (o.mode !== undefined && !MODES.includes(o.mode as string)) {
    throw bad(functionName, 'mode', '"warm" or "oneShot"', o.mode);
  }
  if (o.cache !== undefined && typeof o.cache !== 'boolean') {
    throw bad(functionName, 'cache', 'a boolean', o.cache);
  }
  if (o.signal !== undefined && !(o.signal instanceof AbortSignal)) {
    throw bad(functionName, 'signal', 'an AbortSignal', o.signal);
  }
  if (o.onProgress !== undefined && typeof o.onProgress !== 'function') {
    throw bad(functionName, 'onProgress', 'a function', o.onProgress);
  }
  return (o.timeoutMs as number | undefined) ?? defaultTimeoutMs;
}
