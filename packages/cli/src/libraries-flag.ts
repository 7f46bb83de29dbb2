/**
 * `--libraries`: what a Python or R body may import besides its language's
 * own, the runner option an engine sets (python `packages`, r `libraries`)
 * as a flag. Bodies never choose it: the person running the command does.
 */
import { statSync } from 'node:fs';
import { resolve } from 'node:path';
import type { ExternalFn } from '@improv/extfn-core';
import { usage } from './cli-error.js';
import { lookupTable } from './lookup-table.js';
import type { Runners } from './session.js';

export type LibrariesFlag =
  | { readonly kind: 'system' }
  | { readonly kind: 'none' }
  | { readonly kind: 'venv'; readonly path: string }
  | { readonly kind: 'directories'; readonly paths: readonly string[] };

/** The forms --libraries takes, for help and fixes. */
export const LIBRARIES_FORMS =
  "--libraries system (the interpreter's own packages), --libraries venv:PATH (a Python virtual environment) or --libraries DIR[:DIR...] (these directories)";

/** Languages whose runners take it, and the option each calls it. */
export const OPTION = lookupTable<'packages' | 'libraries'>({
  python: 'packages',
  r: 'libraries',
});

/**
 * `system`, `none`, `venv:PATH`, or directories joined by `:`; relative paths
 * are from `cwd` (the runners take absolute ones). A directory named
 * `system` or `none` is written `./system`.
 */
export function parseLibraries(text: string | undefined, cwd: string): LibrariesFlag | undefined {
  if (text === undefined) return undefined;
  const value = text.trim();
  if (value === 'system' || value === 'none') return { kind: value };
  if (value.startsWith('venv:')) {
    const path = value.slice('venv:'.length);
    if (!path) {
      throw usage(
        '--libraries venv: names no virtual environment',
        'write its directory after the colon: --libraries venv:/srv/model-venv',
      );
    }
    return { kind: 'venv', path: resolve(cwd, path) };
  }
  const paths = value.split(':');
  if (paths.some((p) => p === '')) {
    throw usage(
      `--libraries ${JSON.stringify(text)} ${value ? 'has an empty directory between its colons' : 'is empty'}`,
      `write ${LIBRARIES_FORMS}; --libraries none allows nothing beyond the standard library`,
    );
  }
  return { kind: 'directories', paths: paths.map((p) => resolve(cwd, p)) };
}

/**
 * Throws when a directory --libraries names is not there or is a file: a typo
 * on the command line (exit 2), not something this host lacks. What else can
 * be wrong with one (not a virtual environment, not readable) its runner says.
 */
export function checkLibrariesExist(flag: LibrariesFlag | undefined): void {
  const paths =
    flag?.kind === 'venv' ? [flag.path] : flag?.kind === 'directories' ? flag.paths : [];
  for (const path of paths) {
    let problem: string | undefined;
    try {
      if (!statSync(path).isDirectory()) problem = 'is not a directory';
    } catch (error) {
      const code = (error as { code?: unknown }).code;
      if (code === 'ENOENT' || code === 'ENOTDIR') problem = 'does not exist';
    }
    if (problem) {
      throw usage(
        `--libraries: ${path} ${problem}`,
        "check the path: relative ones are from the working directory; --libraries system allows the interpreter's own packages",
      );
    }
  }
}

/** The runner option for `language` (`{ packages }` or `{ libraries }`), or undefined where it has none. */
export function librariesOption(language: string, flag: LibrariesFlag): object | undefined {
  const option = OPTION[language];
  if (!option) return undefined;
  switch (flag.kind) {
    case 'system':
      return { [option]: 'system' };
    case 'none':
      return { [option]: [] };
    case 'venv': // Python's: R keeps its own (eval and run refuse it for an R function)
      return language === 'python' ? { [option]: { venv: flag.path } } : undefined;
    case 'directories':
      return { [option]: [...flag.paths] };
  }
}

/**
 * --libraries against the function it is for, before its runner is made:
 * only our Python and R runners take it (a third-party runner for the
 * language gets no runner options from the command), venv: is Python's, and
 * the directories it names are there.
 */
export function checkLibrariesFlag(fn: ExternalFn, runners: Runners): void {
  const flag = runners.settings.libraries;
  if (!flag) return;
  const thirdParty = runners.external.some((r) => r.language === fn.language);
  if (!OPTION[fn.language] || thirdParty) {
    throw usage(
      `--libraries is for python and r functions; function ${fn.name} is ${fn.language}${thirdParty ? ' (a third-party runner)' : ''}`,
      'drop --libraries',
    );
  }
  if (flag.kind === 'venv' && fn.language !== 'python') {
    throw usage(
      `--libraries venv:PATH is a Python virtual environment; function ${fn.name} is ${fn.language}`,
      'name R library directories instead: --libraries DIR[:DIR...], or --libraries system',
    );
  }
  checkLibrariesExist(flag);
}
