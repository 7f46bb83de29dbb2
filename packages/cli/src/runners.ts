/**
 * The runners this command knows, loaded only when a function needs one, so
 * that a missing or broken runner package costs nothing until it is used and
 * never stops the other languages from working. Third-party runner packages
 * come in through `--runner PACKAGE` or IMPROV_EXTFN_RUNNERS.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { isAbsolute, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { FIRST_PARTY_RUNNERS, isLanguageRunner, type LanguageRunner } from '@improv/extfn-core';
import type { CliIo } from './io.js';
import { type LibrariesFlag, librariesOption } from './libraries-flag.js';

export interface RunnerPackage {
  readonly language: string;
  readonly packageName: string;
  /** The factory the package exports (`default` for a default export). */
  readonly factory: string;
  /** Loaded through --runner or IMPROV_EXTFN_RUNNERS rather than built in. */
  readonly external?: boolean;
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

/** The environment variable that names third-party runner packages, comma-separated. */
export const RUNNERS_ENV = 'IMPROV_EXTFN_RUNNERS';

/** What the command line asks of runner factories; only our own runners take options. */
export interface RunnerSettings {
  /** --memory: the address-space limit of a call's process (Wasm: its linear memory). */
  readonly memoryBytes?: number;
  /** --libraries: what Python and R bodies may import besides their standard library. */
  readonly libraries?: LibrariesFlag;
}

function factoryOptions(spec: RunnerPackage, settings: RunnerSettings): object | undefined {
  if (spec.external) return undefined;
  const memory =
    settings.memoryBytes === undefined
      ? undefined
      : spec.language === 'wasm'
        ? { maxMemoryBytes: settings.memoryBytes }
        : { limits: { memoryBytes: settings.memoryBytes } };
  const libraries = settings.libraries && librariesOption(spec.language, settings.libraries);
  return memory || libraries ? { ...memory, ...libraries } : undefined;
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

type ImportFailure = Extract<RunnerLoad, { ok: false }>;

function importFailure(spec: RunnerPackage, error: unknown): ImportFailure {
  const name = spec.packageName;
  if (isMissingModule(error, name) && /Cannot find module/.test(messageOf(error))) {
    // The package is there but its entry file is not: a workspace checkout that was not built.
    return {
      ok: false,
      spec,
      installed: true,
      problem: `runner package ${name} is installed but its files are missing (${messageOf(error)})`,
      fix: `build it (pnpm build) or reinstall ${name}`,
    };
  }
  if (isMissingModule(error, name)) {
    // `--runner python`: a built-in language taken for a package name
    const builtIn = spec.external && Object.hasOwn(FIRST_PARTY_RUNNERS, name);
    return {
      ok: false,
      spec,
      installed: false,
      problem: builtIn
        ? `${name} is a built-in language, not a runner package`
        : `runner package ${name} is not installed`,
      fix: builtIn
        ? `drop --runner ${name}: its runner (${FIRST_PARTY_RUNNERS[name]}) is used without it; --runner names a third-party runner package or the path of its entry file`
        : spec.external
          ? `install it where you run improv-extfn (npm install ${name}), or give --runner a path to its entry file`
          : `install it: npm install ${name}`,
    };
  }
  return {
    ok: false,
    spec,
    installed: false,
    problem: `runner package ${name} failed to load: ${messageOf(error)}`,
    fix: `reinstall ${name}; if it persists, report it to its authors`,
  };
}

/** Calls a factory and checks that a v1 LanguageRunner came back. */
function create(spec: RunnerPackage, factory: unknown, options: object | undefined): RunnerLoad {
  const call = spec.factory === 'default' ? 'the default export' : `${spec.factory}()`;
  if (typeof factory !== 'function') {
    return {
      ok: false,
      spec,
      installed: true,
      problem: spec.external
        ? `${spec.packageName} exports no runner factory (a default export or createRunner(), or the ${spec.factory} named after #)`
        : `${spec.packageName} exports no ${spec.factory}() runner factory`,
      fix: spec.external
        ? `name the factory: --runner ${spec.packageName}#NAME`
        : `install a version of ${spec.packageName} that matches this improv-extfn`,
    };
  }
  let runner: unknown;
  try {
    runner = options === undefined ? factory() : factory(options);
  } catch (error) {
    return {
      ok: false,
      spec,
      installed: true,
      problem: `${call} failed: ${messageOf(error)}`,
      fix: `install a version of ${spec.packageName} that implements the runner`,
    };
  }
  if (!isLanguageRunner(runner)) {
    return {
      ok: false,
      spec,
      installed: true,
      problem: `${call} of ${spec.packageName} did not return a v1 LanguageRunner (specificationVersion 'v1', language, call, probe)`,
      fix: `install a version of ${spec.packageName} that matches this improv-extfn`,
    };
  }
  return { ok: true, spec: { ...spec, language: runner.language }, runner };
}

/**
 * Imports one of our runner packages and calls its factory (runners read their
 * interpreter paths from the environment). Never throws.
 */
export async function loadRunner(
  spec: RunnerPackage,
  io: Pick<CliIo, 'importPackage'>,
  settings: RunnerSettings = {},
): Promise<RunnerLoad> {
  let module: Record<string, unknown>;
  try {
    module = (await (io.importPackage ?? defaultImport)(spec.packageName)) as Record<
      string,
      unknown
    >;
  } catch (error) {
    return importFailure(spec, error);
  }
  return create(spec, module[spec.factory], factoryOptions(spec, settings));
}

/** The runner packages named by --runner flags, then by IMPROV_EXTFN_RUNNERS. */
export function externalRunnerNames(flags: readonly string[], env: NodeJS.ProcessEnv): string[] {
  const fromEnv = (env[RUNNERS_ENV] ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  return [...new Set([...flags, ...fromEnv])];
}

/** `./x.js`, `../x.mjs`, `/abs/x.js`: a file, not a package name. */
const isPath = (name: string): boolean => name.startsWith('.') || isAbsolute(name);

/**
 * Where a third-party package is found: a path (./lua-runner.js) from the
 * working directory, a package name from the working directory's
 * node_modules first (where a user installs it), then from ours.
 */
function importTarget(name: string, cwd: string): string {
  if (isPath(name)) return pathToFileURL(resolve(cwd, name)).href;
  try {
    return pathToFileURL(createRequire(join(cwd, 'noop.js')).resolve(name)).href;
  } catch {
    return name;
  }
}

/**
 * Loads a third-party runner package: `PACKAGE` takes its default export or
 * else its `createRunner` export, `PACKAGE#NAME` the export NAME. The factory
 * is called with no arguments and must return a v1 LanguageRunner; its
 * `language` says which functions it runs. Never throws.
 */
export async function loadExternalRunner(
  text: string,
  io: Pick<CliIo, 'importPackage' | 'cwd'>,
): Promise<RunnerLoad> {
  const hash = text.lastIndexOf('#');
  const packageName = hash > 0 ? text.slice(0, hash) : text;
  const named = hash > 0 ? text.slice(hash + 1) : undefined;
  const base: RunnerPackage = {
    language: '?',
    packageName,
    factory: named ?? 'default',
    external: true,
  };
  let module: Record<string, unknown>;
  try {
    module = (await (io.importPackage
      ? io.importPackage(packageName)
      : import(importTarget(packageName, io.cwd)))) as Record<string, unknown>;
  } catch (error) {
    const file = isPath(packageName) ? resolve(io.cwd, packageName) : undefined;
    if (file !== undefined && !existsSync(file)) {
      return {
        ok: false,
        spec: base,
        installed: false,
        problem: `the runner file ${file} does not exist`,
        fix: `check the path (a relative one is from ${io.cwd}); --runner takes a runner package's name or the path of its entry file`,
      };
    }
    return importFailure(base, error);
  }
  if (named !== undefined) return create(base, module[named], undefined);
  if (typeof module.default === 'function') return create(base, module.default, undefined);
  if (typeof module.createRunner === 'function') {
    return create({ ...base, factory: 'createRunner' }, module.createRunner, undefined);
  }
  return create(base, undefined, undefined);
}
