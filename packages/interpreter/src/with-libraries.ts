/**
 * A runner whose bodies may use host-allowed libraries, for any language:
 * resolving the interpreter also resolves the choice (its directories bound
 * read-only into the sandbox and named to the driver in an environment
 * variable), `probe()` lists the libraries with their versions, and
 * `cacheSalt()` digests them, so a pure result computed with one version is
 * never served for another. The language supplies only `resolve`: where its
 * libraries live and how their versions are read.
 */
import { ExtFnError, type RunnerProbe } from '@improv/extfn-core';
import type { AllowedLibraries } from './libraries.js';
import { createInterpreterRunner } from './runner.js';
import type {
  InterpreterRunner,
  InterpreterRunnerOptions,
  InterpreterSpec,
  ResolvedInterpreter,
} from './types.js';

export interface LibraryChoice {
  /** The choice for the interpreter at this path; rejects with LanguageUnavailable when it cannot be honoured. */
  resolve(interpreterPath: string): Promise<AllowedLibraries>;
  /**
   * The variable the driver reads the directories from (joined with `:`), and
   * the sign they are bound into the sandbox; undefined when the interpreter
   * finds them itself (R's site libraries, which /usr already holds).
   */
  envVar: string | undefined;
  /** What `probe()` says when no directory is allowed: "standard library only". */
  noDirectories: string;
}

/**
 * `createInterpreterRunner(spec, options)` with `choice` resolved once the
 * interpreter is found, before any process starts (it writes `env`, which is
 * `spec.env`). A choice not resolved, or that failed, is resolved again next
 * time, so a fixed directory works without a new runner.
 */
export function withAllowedLibraries(
  spec: InterpreterSpec,
  options: InterpreterRunnerOptions,
  choice: LibraryChoice,
  env: Record<string, string>,
): InterpreterRunner {
  type Resolved = { found: ResolvedInterpreter; allowed: AllowedLibraries } | undefined;
  let pending: Promise<Resolved> | undefined;
  const resolve = (): Promise<Resolved> => {
    if (pending) return pending;
    const attempt = (async () => {
      const found = await spec.resolveInterpreter();
      if (!found) return undefined;
      const allowed = await choice.resolve(found.path);
      if (choice.envVar) env[choice.envVar] = allowed.directories.join(':');
      return { found, allowed };
    })();
    pending = attempt;
    const retry = () => {
      if (pending === attempt) pending = undefined;
    };
    attempt.then((resolved) => {
      if (!resolved) retry();
    }, retry);
    return attempt;
  };
  const runner = createInterpreterRunner(
    choice.envVar === undefined
      ? spec
      : // the spec's own fields read through (a getter, e.g. Python's driverSource, stays live)
        Object.assign(Object.create(spec) as InterpreterSpec, {
          resolveInterpreter: async () => {
            const resolved = await resolve();
            if (!resolved) return undefined;
            const { found, allowed } = resolved;
            const readOnlyPaths = [...(found.readOnlyPaths ?? []), ...allowed.directories];
            return readOnlyPaths.length ? { ...found, readOnlyPaths } : found;
          },
        }),
    options,
  );
  const probe = runner.probe.bind(runner);
  return Object.assign(runner, {
    async probe(): Promise<RunnerProbe> {
      let allowed: AllowedLibraries | undefined;
      try {
        allowed = (await resolve())?.allowed;
      } catch (error) {
        return {
          language: runner.language,
          available: false,
          detail: error instanceof Error ? error.message : String(error),
          ...(ExtFnError.isInstance(error) && error.fix ? { fix: error.fix } : {}),
        };
      }
      const found = await probe();
      if (!allowed || !found.available) return found;
      const listed = allowed.libraries.map((l) => `${l.name} ${l.version}`).join(', ');
      const where = allowed.directories.join(', ') || choice.noDirectories;
      return {
        ...found,
        detail: `${found.detail}; libraries: ${listed || 'none found'} (${where})`,
        libraries: allowed.libraries,
      };
    },
    async cacheSalt(): Promise<string> {
      return (await resolve())?.allowed.digest ?? '';
    },
  });
}
