/**
 * @improv/extfn-pure: function bodies in the Pure programming language,
 * sandboxed, on warm workers. The machinery (pool, batches, one-shot calls)
 * lives in @improv/extfn-interpreter; this package is the driver, its
 * bootstrap script and how to find pure.
 */
import { readFileSync } from 'node:fs';
import {
  createInterpreterRunner,
  type InterpreterRunner,
  type InterpreterRunnerOptions,
  resolveExecutable,
} from '@improv/extfn-interpreter';
import { DRIVERS_DIR, PURE_ARGS, PURE_ENV, PURE_LIMITS } from './bootstrap.js';

export { BOOTSTRAP_PATH, DRIVERS_DIR, PURE_ARGS, PURE_ENV, PURE_LIMITS } from './bootstrap.js';

export interface PureRunnerOptions extends InterpreterRunnerOptions {
  /**
   * The interpreter: a path or a command name on PATH. Default: the
   * `IMPROV_EXTFN_PURE` environment variable, else `pure` on PATH.
   */
  interpreter?: string;
}

/** The driver program (drivers/driver.pure, shipped in the package; ASCII). */
export const DRIVER_SOURCE: string = readFileSync(
  new URL('../drivers/driver.pure', import.meta.url),
  'utf8',
);

/**
 * The Pure runner. Bodies are Pure statements that read `args` (a list:
 * `args!0`, `args!1`, …) and define `result`, e.g. `let result = args!0 + args!1;`.
 * Per-row only: the runner does not claim `vectorized`, so core refuses a
 * `vectorized: true` descriptor with a Runtime error before anything starts.
 */
export function pure(options: PureRunnerOptions = {}): InterpreterRunner {
  const { interpreter, ...runnerOptions } = options;
  return createInterpreterRunner(
    {
      language: 'pure',
      packageName: '@improv/extfn-pure',
      resolveInterpreter: () =>
        resolveExecutable({
          explicit: interpreter,
          envVar: 'IMPROV_EXTFN_PURE',
          names: ['pure'],
          executable: 'a Pure interpreter executable',
          // the interpreter's own prefix (lib/pure) is bound by @improv/extfn-sandbox; our drivers too
          readOnlyPaths: () => [DRIVERS_DIR],
        }),
      args: PURE_ARGS,
      driverSource: DRIVER_SOURCE,
      env: PURE_ENV,
      limits: PURE_LIMITS,
      f64: false,
      startupTimeoutMs: 30_000,
      installHint:
        'install the Pure interpreter (https://agraef.github.io/pure-lang/), or set IMPROV_EXTFN_PURE or the `interpreter` option to its path',
    },
    runnerOptions,
  );
}
