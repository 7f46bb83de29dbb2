/**
 * @improv/extfn-julia: function bodies in Julia, sandboxed, on warm
 * workers. The machinery (pool, batches, one-shot calls) lives in
 * @improv/extfn-interpreter; this package is the driver and how to find julia.
 */
import { readFileSync } from 'node:fs';
import {
  createInterpreterRunner,
  type InterpreterRunner,
  type InterpreterRunnerOptions,
  resolveExecutable,
} from '@improv/extfn-interpreter';
import {
  JULIA_ARGS,
  JULIA_ENV,
  JULIA_IDLE_MS,
  JULIA_LIMITS,
  JULIA_STARTUP_TIMEOUT_MS,
} from './bootstrap.js';

export {
  BOOTSTRAP,
  JULIA_ARGS,
  JULIA_ENV,
  JULIA_IDLE_MS,
  JULIA_LIMITS,
  JULIA_STARTUP_TIMEOUT_MS,
} from './bootstrap.js';

export interface JuliaRunnerOptions extends InterpreterRunnerOptions {
  /**
   * The interpreter: a path or a command name on PATH. Default: the
   * `IMPROV_EXTFN_JULIA` environment variable, else `julia` on PATH.
   */
  interpreter?: string;
}

/** The driver program (drivers/driver.jl, shipped in the package). */
export const DRIVER_SOURCE: string = readFileSync(
  new URL('../drivers/driver.jl', import.meta.url),
  'utf8',
);

/** Asked of the julia found, to see through launchers such as juliaup's. */
const EXECUTABLE_PROBE = [
  '--startup-file=no',
  '-e',
  'print(joinpath(Sys.BINDIR, Base.julia_exe_name))',
];

/**
 * The Julia runner. Bodies are statements (indented or not) that read
 * `args[1]`, `args[2]`, … and set `result`.
 */
export function julia(options: JuliaRunnerOptions = {}): InterpreterRunner {
  const { interpreter, ...runnerOptions } = options;
  return createInterpreterRunner(
    {
      language: 'julia',
      packageName: '@improv/extfn-julia',
      resolveInterpreter: () =>
        resolveExecutable({
          explicit: interpreter,
          envVar: 'IMPROV_EXTFN_JULIA',
          names: ['julia'],
          executable: 'a Julia executable',
          realPathArgs: EXECUTABLE_PROBE,
          // no readOnlyPaths: @improv/extfn-sandbox binds the interpreter's own prefix
        }),
      args: JULIA_ARGS,
      driverSource: DRIVER_SOURCE,
      env: JULIA_ENV,
      limits: JULIA_LIMITS,
      f64: true,
      vectorized: true,
      startupTimeoutMs: JULIA_STARTUP_TIMEOUT_MS,
      installHint:
        'install Julia (https://julialang.org/downloads/, e.g. under /opt — a launcher under a home directory is not readable in the sandbox), or set IMPROV_EXTFN_JULIA or the `interpreter` option to its path',
      defaults: { idleMs: JULIA_IDLE_MS },
    },
    runnerOptions,
  );
}
