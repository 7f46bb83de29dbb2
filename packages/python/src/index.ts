/**
 * @improv/extfn-python: function bodies in CPython, sandboxed, on warm
 * workers. The machinery (pool, batches, one-shot calls) lives in
 * @improv/extfn-interpreter; this package is the driver and how to find python.
 */
import { readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import {
  createInterpreterRunner,
  type InterpreterRunner,
  type InterpreterRunnerOptions,
  resolveExecutable,
} from '@improv/extfn-interpreter';
import { PYTHON_ARGS } from './bootstrap.js';

export { BOOTSTRAP, PYTHON_ARGS } from './bootstrap.js';

export interface PythonRunnerOptions extends InterpreterRunnerOptions {
  /**
   * The interpreter: a path or a command name on PATH. Default: the
   * `IMPROV_EXTFN_PYTHON` environment variable, else `python3` on PATH.
   */
  interpreter?: string;
}

/** The driver program (drivers/driver.py, shipped in the package). */
export const DRIVER_SOURCE: string = readFileSync(
  new URL('../drivers/driver.py', import.meta.url),
  'utf8',
);

/** Asked of the interpreter found, to see through shims (pyenv's is a script under /root). */
const EXECUTABLE_PROBE = ['-s', '-S', '-c', 'import sys; print(sys.executable)'];

/**
 * The Python runner. Bodies are statements that read `args` (a list, in
 * declared order) and set `result`.
 */
export function python(options: PythonRunnerOptions = {}): InterpreterRunner {
  const { interpreter, ...runnerOptions } = options;
  return createInterpreterRunner(
    {
      language: 'python',
      packageName: '@improv/extfn-python',
      resolveInterpreter: () =>
        resolveExecutable({
          explicit: interpreter,
          envVar: 'IMPROV_EXTFN_PYTHON',
          names: ['python3'],
          realPathArgs: EXECUTABLE_PROBE,
          // An interpreter outside /usr (pyenv, conda) needs its prefix: lib/pythonX.Y lives there.
          readOnlyPaths: (path) => (path.startsWith('/usr/') ? [] : [dirname(dirname(path))]),
        }),
      args: PYTHON_ARGS,
      driverSource: DRIVER_SOURCE,
      env: { PYTHONHASHSEED: '0', PYTHONDONTWRITEBYTECODE: '1', PYTHONIOENCODING: 'utf-8' },
      f64: true,
      installHint:
        'install Python 3 (e.g. apt-get install python3), or set IMPROV_EXTFN_PYTHON or the `interpreter` option to its path',
    },
    runnerOptions,
  );
}
