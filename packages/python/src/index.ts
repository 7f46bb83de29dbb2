/**
 * @improv/extfn-python: function bodies in CPython, sandboxed, on warm
 * workers. The machinery (pool, batches, one-shot calls) lives in
 * @improv/extfn-interpreter; this package is the driver and how to find python.
 */
import { readFileSync } from 'node:fs';
import {
  type InterpreterRunner,
  type InterpreterRunnerOptions,
  resolveExecutable,
} from '@improv/extfn-interpreter';
import { PYTHON_ARGS, precompiledDriver } from './bootstrap.js';
import { type PythonPackages, withLibraries } from './with-libraries.js';

// an idle zygote outlives its last runner for a while (docs/architecture.md, "Zygote")
export { closeIdleZygotes } from '@improv/extfn-interpreter';
export { BOOTSTRAP, PYTHON_ARGS } from './bootstrap.js';
export type { AllowedLibraries, Library, PythonPackages } from './libraries.js';
export { allowedLibraries } from './libraries.js';

export interface PythonRunnerOptions extends InterpreterRunnerOptions {
  /**
   * The interpreter: a path or a command name on PATH. Default: the
   * `IMPROV_EXTFN_PYTHON` environment variable, else `python3` on PATH.
   */
  interpreter?: string;
  /**
   * What bodies may import besides the standard library (the default):
   * `'system'` (the interpreter's site packages), `{ venv: path }`, or
   * explicit directories. Bound read-only into the sandbox; see the README.
   */
  packages?: PythonPackages;
}

/** The driver program (drivers/driver.py, shipped in the package). */
export const DRIVER_SOURCE: string = readFileSync(
  new URL('../drivers/driver.py', import.meta.url),
  'utf8',
);

/**
 * The zygote's program (drivers/zygote.py after the driver, as one source):
 * restricted warm workers are cloned from a sandboxed zygote running it
 * (docs/architecture.md, "Zygote"), unless IMPROV_EXTFN_ZYGOTE=0.
 */
export const ZYGOTE_SOURCE: string | undefined = zygoteSource();

function zygoteSource(): string | undefined {
  try {
    return `${DRIVER_SOURCE}\n${readFileSync(new URL('../drivers/zygote.py', import.meta.url), 'utf8')}`;
  } catch {
    return undefined; // not shipped: every worker starts a tree
  }
}

/** Asked of the interpreter found, to see through shims (pyenv's is a script under /root). */
const EXECUTABLE_PROBE = ['-s', '-S', '-c', 'import sys; print(sys.executable)'];

/**
 * The Python runner. Bodies are statements that read `args` (a list, in
 * declared order) and set `result`.
 */
export function python(options: PythonRunnerOptions = {}): InterpreterRunner {
  const { interpreter, packages, ...runnerOptions } = options;
  // The driver reads the allowed directories from here (IMPROV_EXTFN_PYTHON_PATH),
  // set once they are resolved, before any process starts.
  const env: Record<string, string> = {
    PYTHONHASHSEED: '0',
    PYTHONDONTWRITEBYTECODE: '1',
    PYTHONIOENCODING: 'utf-8',
    // Keep freed memory up to 32 MiB blocks in glibc's heap instead of
    // returning it to the kernel: a chunk's request buffer and numpy's result
    // arrays then reuse pages already touched, where first-touch page faults
    // (10 µs a page on a Firecracker VM) would cost more than the work.
    MALLOC_MMAP_THRESHOLD_: '33554432',
    MALLOC_TRIM_THRESHOLD_: '268435456',
  };
  // What workers get on stdin: the source until this interpreter has
  // precompiled it (once per host process, in the background).
  const driver = { source: DRIVER_SOURCE };
  const find = () =>
    resolveExecutable({
      explicit: interpreter,
      envVar: 'IMPROV_EXTFN_PYTHON',
      names: ['python3'],
      executable: 'a Python 3 executable',
      realPathArgs: EXECUTABLE_PROBE,
      // No readOnlyPaths: @improv/extfn-sandbox binds the interpreter's own tree
      // (pyenv, conda: its prefix, where lib/pythonX.Y lives) and never a home.
    });
  return withLibraries(
    {
      language: 'python',
      packageName: '@improv/extfn-python',
      resolveInterpreter: async () => {
        const found = await find();
        if (found && driver.source === DRIVER_SOURCE) {
          void precompiledDriver(found.path, DRIVER_SOURCE).then((stub) => {
            if (stub) driver.source = stub;
          });
        }
        return found;
      },
      args: PYTHON_ARGS,
      get driverSource() {
        return driver.source;
      },
      // precompiled (once per interpreter and process) when a zygote boots, not at every cold start
      ...(ZYGOTE_SOURCE === undefined
        ? {}
        : {
            zygoteProgram: async (path: string) =>
              (await precompiledDriver(path, ZYGOTE_SOURCE)) ?? ZYGOTE_SOURCE,
          }),
      env,
      f64: true,
      vectorized: true,
      columns: true,
      installHint:
        'install Python 3 (e.g. apt-get install python3), or set IMPROV_EXTFN_PYTHON or the `interpreter` option to its path',
    },
    runnerOptions,
    packages,
    env,
  );
}
