/**
 * Python's host-allowed libraries (`python({ packages })`) on the shared
 * machinery (`withAllowedLibraries`): the directories are bound read-only
 * and named to the driver in IMPROV_EXTFN_PYTHON_PATH; without `packages`,
 * bodies get the standard library only and the runner is a plain one.
 */
import {
  createInterpreterRunner,
  type InterpreterRunner,
  type InterpreterRunnerOptions,
  type InterpreterSpec,
  withAllowedLibraries,
} from '@improv/extfn-interpreter';
import { allowedLibraries, type PythonPackages } from './libraries.js';

export type { PythonPackages } from './libraries.js';

export function withLibraries(
  spec: InterpreterSpec,
  options: InterpreterRunnerOptions,
  packages: PythonPackages | undefined,
  env: Record<string, string>,
): InterpreterRunner {
  if (packages === undefined) return createInterpreterRunner(spec, options);
  const choice = {
    resolve: (python: string) => allowedLibraries(packages, python),
    envVar: 'IMPROV_EXTFN_PYTHON_PATH',
    noDirectories: 'standard library only',
  };
  return withAllowedLibraries(spec, options, choice, env);
}
