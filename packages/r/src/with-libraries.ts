/**
 * R's host-allowed libraries (`r({ libraries })`) on the shared machinery
 * (`withAllowedLibraries`): explicit directories are bound read-only and set
 * as `.libPaths()` by the driver from IMPROV_EXTFN_R_LIBS; `'system'` (the
 * default) keeps R's own site libraries, which the sandbox already sees, and
 * is only read for `probe()` and the cache salt.
 */
import {
  type InterpreterRunner,
  type InterpreterRunnerOptions,
  type InterpreterSpec,
  withAllowedLibraries,
} from '@improv/extfn-interpreter';
import { allowedRLibraries, type RLibraries } from './libraries.js';

export function withLibraries(
  spec: InterpreterSpec,
  options: InterpreterRunnerOptions,
  libraries: RLibraries,
  env: Record<string, string>,
): InterpreterRunner {
  const choice = {
    resolve: (rscript: string) => allowedRLibraries(libraries, rscript),
    envVar: libraries === 'system' ? undefined : 'IMPROV_EXTFN_R_LIBS',
    noDirectories: 'base R only',
  };
  return withAllowedLibraries(spec, options, choice, env);
}
