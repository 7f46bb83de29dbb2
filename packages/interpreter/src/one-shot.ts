/**
 * A one-shot call: the same driver in a fresh sandboxed process that ends
 * with the call (`runDriverOnce` with `load` and one `call`), its answer
 * read and checked as a warm worker's would be.
 */
import { type CallOptions, type ExternalFn, ExtFnError, type Value } from '@improv/extfn-core';
import type { SandboxOptions } from '@improv/extfn-sandbox';
import { toExtFnError } from './dispatch.js';
import type { DriverError, FrameHeader } from './frames.js';
import { loadErrorToExtFnError, resultsFromJsonFrame } from './from-driver.js';
import { callHeader } from './row-sources.js';
import { type DriverRun, DriverRunError, runDriverOnce } from './run-once.js';
import { BODY_ENDED } from './warm-worker.js';

export interface OneShotOptions extends CallOptions {
  sandbox: Omit<SandboxOptions, 'timeoutMs'>;
  driverSource: string;
  /** The `load` request for the function. */
  load: FrameHeader;
  /** Aborted when the runner closes. */
  closing: AbortSignal;
}

/** Rejects with the function's ExtFnError. */
export async function oneShotCall(
  fn: ExternalFn,
  args: readonly Value[],
  options: OneShotOptions,
): Promise<Value> {
  const signal = options.signal
    ? AbortSignal.any([options.signal, options.closing])
    : options.closing;
  let run: DriverRun;
  try {
    run = await runDriverOnce(
      { ...options.sandbox, timeoutMs: options.timeoutMs, signal },
      options.driverSource,
      [options.load, callHeader([args])],
    );
  } catch (error) {
    if (options.closing.aborted && !options.signal?.aborted)
      throw ExtFnError.runtime(fn.name, 'the runner is closed');
    if (error instanceof DriverRunError)
      throw ExtFnError.runtime(fn.name, error.message, { stderr: error.stderr });
    throw toExtFnError(fn, error, options.timeoutMs);
  }
  const [load, answer] = run.responses;
  if (load?.header.error !== undefined)
    throw loadErrorToExtFnError(fn, load.header.error as DriverError);
  if (!answer) {
    const { limit, stderr } = run;
    // Loaded and then silent: the body ended its interpreter, as on a warm worker.
    const why = limit
      ? ` before answering (${limit} limit)`
      : load
        ? BODY_ENDED
        : ' before answering';
    throw ExtFnError.runtime(fn.name, `the interpreter ${run.exit}${why}`, {
      stderr,
      ...(limit ? { limit } : {}),
    });
  }
  const result = resultsFromJsonFrame(fn, answer, 1)[0]!;
  if (ExtFnError.isInstance(result)) throw result;
  return result;
}
