/**
 * A Python runner whose bodies may import host-allowed libraries: resolving
 * the interpreter also resolves `packages` (bound read-only into the sandbox,
 * named to the driver in IMPROV_EXTFN_PYTHON_PATH), `probe()` lists them
 * with their versions, and `cacheSalt()` digests them, so a pure result
 * computed with one version is never served for another.
 */
import { ExtFnError, type RunnerProbe } from '@improv/extfn-core';
import {
  createInterpreterRunner,
  type InterpreterRunner,
  type InterpreterRunnerOptions,
  type InterpreterSpec,
  type ResolvedInterpreter,
} from '@improv/extfn-interpreter';
import { type AllowedLibraries, allowedLibraries, type PythonPackages } from './libraries.js';

export type { PythonPackages } from './libraries.js';

export function withLibraries(
  spec: InterpreterSpec,
  options: InterpreterRunnerOptions,
  packages: PythonPackages | undefined,
  env: Record<string, string>,
): InterpreterRunner {
  if (packages === undefined) return createInterpreterRunner(spec, options);
  // Resolved once; not found or failed is retried next time (a fixed directory should work).
  let pending:
    | Promise<{ found: ResolvedInterpreter; allowed: AllowedLibraries } | undefined>
    | undefined;
  const resolve = () => {
    if (!pending) {
      const attempt = (async () => {
        const found = await spec.resolveInterpreter();
        if (!found) return undefined;
        const allowed = await allowedLibraries(packages, found.path);
        env.IMPROV_EXTFN_PYTHON_PATH = allowed.directories.join(':');
        return { found, allowed };
      })();
      pending = attempt;
      attempt.then(
        (resolved) => {
          if (!resolved && pending === attempt) pending = undefined;
        },
        () => {
          if (pending === attempt) pending = undefined;
        },
      );
    }
    return pending;
  };
  const runner = createInterpreterRunner(
    {
      ...spec,
      resolveInterpreter: async () => {
        const resolved = await resolve();
        if (!resolved) return undefined;
        const { found, allowed } = resolved;
        const readOnlyPaths = [...(found.readOnlyPaths ?? []), ...allowed.directories];
        return readOnlyPaths.length ? { ...found, readOnlyPaths } : found;
      },
    },
    options,
  );
  const probe = runner.probe.bind(runner);
  return Object.assign(runner, {
    async probe(): Promise<RunnerProbe> {
      let allowed: AllowedLibraries | undefined;
      try {
        allowed = (await resolve())?.allowed;
      } catch (error) {
        const e = error as ExtFnError;
        return {
          language: runner.language,
          available: false,
          detail: e.message,
          ...(ExtFnError.isInstance(e) && e.fix ? { fix: e.fix } : {}),
        };
      }
      const found = await probe();
      if (!allowed || !found.available) return found;
      const listed = allowed.libraries.map((l) => `${l.name} ${l.version}`).join(', ');
      return {
        ...found,
        detail: `${found.detail}; libraries: ${listed || 'none found'} (${allowed.directories.join(', ')})`,
        libraries: allowed.libraries,
      };
    },
    async cacheSalt(): Promise<string> {
      return (await resolve())?.allowed.digest ?? '';
    },
  });
}
