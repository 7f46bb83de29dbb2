/**
 * An R runner whose bodies load host-allowed libraries: explicit
 * directories are resolved with the interpreter (bound read-only into the
 * sandbox, set as `.libPaths()` by the driver from IMPROV_EXTFN_R_LIBS);
 * `'system'` (the default) keeps R's own site libraries and is read only when
 * asked for. `probe()` lists the packages with their versions, and
 * `cacheSalt()` digests them, so a pure result computed with one version is
 * never served for another.
 */
import { ExtFnError, type RunnerProbe } from '@improv/extfn-core';
import {
  createInterpreterRunner,
  type InterpreterRunner,
  type InterpreterRunnerOptions,
  type InterpreterSpec,
  type ResolvedInterpreter,
} from '@improv/extfn-interpreter';
import { type AllowedRLibraries, allowedRLibraries, type RLibraries } from './libraries.js';

/** Memoises a promise-returning function; a rejection is retried on the next call. */
function once<T>(make: () => Promise<T>): () => Promise<T> {
  let pending: Promise<T> | undefined;
  return () => {
    if (!pending) {
      const attempt = make();
      pending = attempt;
      attempt.catch(() => {
        if (pending === attempt) pending = undefined;
      });
    }
    return pending;
  };
}

export function withLibraries(
  spec: InterpreterSpec,
  options: InterpreterRunnerOptions,
  libraries: RLibraries,
  env: Record<string, string>,
): InterpreterRunner {
  const interpreter = once(async () => {
    const found = await spec.resolveInterpreter();
    if (!found) throw new Error('no interpreter');
    return found;
  });
  const allowed = once(async () => {
    const found = await interpreter();
    const resolved = await allowedRLibraries(libraries, found.path);
    if (libraries !== 'system') env.IMPROV_EXTFN_R_LIBS = resolved.directories.join(':');
    return resolved;
  });
  const explicit = libraries !== 'system';
  const runner = createInterpreterRunner(
    explicit
      ? {
          ...spec,
          resolveInterpreter: async (): Promise<ResolvedInterpreter | undefined> => {
            const found = await spec.resolveInterpreter();
            if (!found) return undefined;
            const { directories } = await allowed();
            const readOnlyPaths = [...(found.readOnlyPaths ?? []), ...directories];
            return readOnlyPaths.length ? { ...found, readOnlyPaths } : found;
          },
        }
      : spec,
    options,
  );
  const probe = runner.probe.bind(runner);
  return Object.assign(runner, {
    async probe(): Promise<RunnerProbe> {
      const found = await probe();
      if (!found.available && !explicit) return found;
      let resolved: AllowedRLibraries;
      try {
        resolved = await allowed();
      } catch (error) {
        if (!ExtFnError.isInstance(error)) return found;
        return {
          ...found,
          available: false,
          detail: error.message,
          ...(error.fix ? { fix: error.fix } : {}),
        };
      }
      if (!found.available) return found;
      const listed = resolved.libraries.map((l) => `${l.name} ${l.version}`).join(', ');
      const where = resolved.directories.join(', ') || 'base R only';
      return {
        ...found,
        detail: `${found.detail}; libraries: ${listed || 'none'} (${where})`,
        libraries: resolved.libraries,
      };
    },
    async cacheSalt(): Promise<string> {
      return (await allowed()).digest;
    },
  });
}
