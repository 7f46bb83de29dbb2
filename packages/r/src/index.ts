/**
 * @improv/extfn-r: function bodies in base R, sandboxed, on warm workers.
 * The machinery (pool, batches, one-shot calls) lives in
 * @improv/extfn-interpreter; this package is the driver and how to find R.
 */
import { readFileSync } from 'node:fs';
import {
  type InterpreterRunner,
  type InterpreterRunnerOptions,
  resolveExecutable,
} from '@improv/extfn-interpreter';
import { R_ARGS, R_ENV } from './bootstrap.js';
import { directR } from './direct.js';
import { driverProgram } from './driver-program.js';
import type { RLibraries } from './libraries.js';
import { withLibraries } from './with-libraries.js';

export { BOOTSTRAP, R_ARGS, R_ENV } from './bootstrap.js';
export type { AllowedRLibraries, Library, RLibraries } from './libraries.js';
export { allowedRLibraries } from './libraries.js';

/**
 * R refuses to start ("the limit on the number of open files is too low")
 * below about 170 open files: it reserves descriptors for 100 DLLs. Every
 * other limit is the sandbox's default (1 GiB of address space is plenty).
 */
export const R_LIMITS = { openFiles: 256 } as const;

/** Target time per batch chunk for R (the interpreter package's default is 5 ms). */
export const R_CHUNK_MS = 25;

export interface RRunnerOptions extends InterpreterRunnerOptions {
  /**
   * Rscript: a path or a command name on PATH. Default: the
   * `IMPROV_EXTFN_R` environment variable, else `Rscript` on PATH.
   */
  interpreter?: string;
  /**
   * Where `library()` looks besides R's own packages: `'system'` (R's site
   * libraries, the default) or explicit directories (`[]`: base R only).
   * Explicit ones are bound read-only into the sandbox; see the README.
   */
  libraries?: RLibraries;
}

/** What a direct start of R's binary adds to the environment (see src/direct.ts). */
const DIRECT_ENV = ['R_HOME', 'R_SHARE_DIR', 'R_INCLUDE_DIR', 'R_DOC_DIR', 'LD_LIBRARY_PATH'];

/** The driver program (drivers/driver.R, shipped in the package). */
export const DRIVER_SOURCE: string = readFileSync(
  new URL('../drivers/driver.R', import.meta.url),
  'utf8',
);

/** What workers are sent: DRIVER_SOURCE, or the build's compiled driver with it as the fallback. */
export const DRIVER_PROGRAM: string = driverProgram(
  DRIVER_SOURCE,
  new URL('../dist/driver.bytecode', import.meta.url),
);

/**
 * The R runner. Bodies are base R statements that read `args` (a list:
 * `args[[1]]`, `args[[2]]`, …) and set `result`.
 */
export function r(options: RRunnerOptions = {}): InterpreterRunner {
  const { interpreter, libraries = 'system', ...runnerOptions } = options;
  // The driver reads explicit library directories from here (IMPROV_EXTFN_R_LIBS),
  // set once they are resolved, before any process starts.
  const env: Record<string, string> = { ...R_ENV };
  return withLibraries(
    {
      language: 'r',
      packageName: '@improv/extfn-r',
      resolveInterpreter: async () => {
        const found = await resolveExecutable({
          explicit: interpreter,
          envVar: 'IMPROV_EXTFN_R',
          names: ['Rscript'],
          executable: 'an Rscript executable',
          // no readOnlyPaths: @improv/extfn-sandbox binds the interpreter's own prefix
        });
        // Workers start R's binary with the environment its front end would set
        // (src/direct.ts), written before any process starts.
        const direct = found && directR(found.path);
        for (const name of DIRECT_ENV) delete env[name];
        if (!direct) return found;
        Object.assign(env, direct.env);
        return { ...found, path: direct.binary };
      },
      args: R_ARGS,
      driverSource: DRIVER_PROGRAM,
      vectorized: true,
      env,
      limits: R_LIMITS,
      // R reads binary f64 columns (readBin on its binary stdin) and answers
      // with binary f64 (writeBin) on a binary connection it opens on
      // /proc/self/fd/1. That needs fd 1 to be a real pipe: R's stdout() is a
      // text connection, and a socket (Node's default) cannot be reopened.
      f64: true,
      // callcols: binary columns of every type, read from the payload and
      // answered with one writeBin per column part. Without the pipe the
      // driver answers with JSON values, which the runner reads as well.
      columns: true,
      stdoutPipe: true,
      installHint:
        'install R (e.g. apt-get install r-base-core), or set IMPROV_EXTFN_R or the `interpreter` option to the path of Rscript',
      // A request costs R about 0.1 ms before its first row: chunks of 25 ms
      // of rows keep that under a few percent of a batch.
      defaults: { chunkMs: R_CHUNK_MS },
    },
    runnerOptions,
    libraries,
    env,
  );
}
