/**
 * The runners this command knows, loaded only when a function needs one, so
 * that a missing or broken runner package costs nothing until it is used and
 * never stops the other languages from working.
 */
import { isLanguageRunner, type LanguageRunner } from '@improv/extfn-core';
import type { CliIo } from './io.js';

export interface RunnerPackage {
  readonly language: string;
  readonly packageName: string;
  /** The factory the package exports. */
  readonly factory: string;
}

export const RUNNER_PACKAGES: readonly RunnerPackage[] = [
  { language: 'python', packageName: '@improv/extfn-python', factory: 'python' },
  { language: 'r', packageName: '@improv/extfn-r', factory: 'r' },
  { language: 'julia', packageName: '@improv/extfn-julia', factory: 'julia' },
  { language: 'pure', packageName: '@improv/extfn-pure', factory: 'pure' },
  { language: 'wasm', packageName: '@improv/extfn-wasm', factory: 'wasm' },
];

export const KNOWN_LANGUAGE_IDS = RUNNER_PACKAGES.map((p) => p.language);

export function runnerPackageFor(language: string): RunnerPackage | undefined {
  return RUNNER_PACKAGES.find((p) => p.language === language);
}

export type RunnerLoad =
  | { readonly ok: true; readonly spec: RunnerPackage; readonly runner: LanguageRunner }
  | {
      readonly ok: false;
      readonly spec: RunnerPackage;
      /** Whether the package itself could be imported. */
      readonly installed: boolean;
      readonly problem: string;
      readonly fix: string;
    };

/** `import()` of a package by name, when the io supplies no `importPackage`. */
export const defaultImport = (name: string): Promise<unknown> => import(name);

function isMissingModule(error: unknown, packageName: string): boolean {
  const e = error as { code?: unknown; message?: unknown };
  return (
    (e?.code === 'ERR_MODULE_NOT_FOUND' || e?.code === 'MODULE_NOT_FOUND') &&
    typeof e.message === 'string' &&
    e.message.includes(packageName)
  );
}

export const messageOf = (error: unknown): string =>
  error instanceof Error ? error.message : String(error);

/**
 * Imports a runner package and calls its factory with no options (runners read
 * their interpreter paths from the environment). Never throws.
 */
export async function loadRunner(
  spec: RunnerPackage,
  io: Pick<CliIo, 'importPackage'>,
): Promise<RunnerLoad> {
  let module: Record<string, unknown>;
  try {
    module = (await (io.importPackage ?? defaultImport)(spec.packageName)) as Record<
      string,
      unknown
    >;
  } catch (error) {
    if (isMissingModule(error, spec.packageName) && /Cannot find module/.test(messageOf(error))) {
      // The package is there but its entry file is not: a workspace checkout that was not built.
      return {
        ok: false,
        spec,
        installed: true,
        problem: `runner package ${spec.packageName} is installed but its files are missing (${messageOf(error)})`,
        fix: `build it (pnpm build) or reinstall ${spec.packageName}`,
      };
    }
    if (isMissingModule(error, spec.packageName)) {
      return {
        ok: false,
        spec,
        installed: false,
        problem: `runner package ${spec.packageName} is not installed`,
        fix: `install it: npm install ${spec.packageName}`,
      };
    }
    return {
      ok: false,
      spec,
      installed: false,
      problem: `runner package ${spec.packageName} failed to load: ${messageOf(error)}`,
      fix: `reinstall ${spec.packageName}; if it persists, report it`,
    };
  }
  const factory = module[spec.factory];
  if (typeof factory !== 'function') {
    return {
      ok: false,
      spec,
      installed: true,
      problem: `${spec.packageName} exports no ${spec.factory}() runner factory`,
      fix: `install a version of ${spec.packageName} that matches this improv-extfn`,
    };
  }
  let runner: unknown;
  try {
    runner = factory();
  } catch (error) {
    return {
      ok: false,
      spec,
      installed: true,
      problem: `${spec.factory}() failed: ${messageOf(error)}`,
      fix: `install a version of ${spec.packageName} that implements the runner`,
    };
  }
  if (!isLanguageRunner(runner)) {
    return {
      ok: false,
      spec,
      installed: true,
      problem: `${spec.factory}() did not return a v1 LanguageRunner`,
      fix: `install a version of ${spec.packageName} that matches this improv-extfn`,
    };
  }
  return { ok: true, spec, runner };
}
