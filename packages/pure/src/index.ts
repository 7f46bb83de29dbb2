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

/** Pure installs under a prefix (/usr/local by default): bind it for lib/pure, plus our drivers. */
function sandboxPaths(path: string): string[] {
  const bin = path.slice(0, path.lastIndexOf('/'));
  const prefix = bin.slice(0, bin.lastIndexOf('/')) || '/';
  return path.startsWith('/usr/') ? [DRIVERS_DIR] : [prefix, DRIVERS_DIR];
}

/**
 * The Pure runner. Bodies are Pure statements that read `args` (a list:
 * `args!0`, `args!1`, …) and define `result`, e.g. `let result = args!0 + args!1;`.
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
          readOnlyPaths: sandboxPaths,
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
