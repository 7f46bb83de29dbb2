/**
 * Finding an interpreter the sandbox can run: an absolute, real path. A
 * version-manager shim (pyenv, rbenv, asdf) is a script under the user's
 * home that an unprivileged sandbox uid cannot read, so the interpreter can
 * be asked for its own executable path (`realPathArgs`) to see through it.
 */
import { execFile } from 'node:child_process';
import { constants } from 'node:fs';
import { access, realpath, stat } from 'node:fs/promises';
import { delimiter, isAbsolute, join, resolve } from 'node:path';
import type { ResolvedInterpreter } from './types.js';

export interface ResolveExecutableOptions {
  /** An explicit choice (the runner's `interpreter` option): a path or a command name. Wins over everything. */
  explicit?: string | undefined;
  /** Environment variable consulted next, e.g. `IMPROV_EXTFN_PYTHON`. */
  envVar?: string;
  /** Command names tried on PATH, in order, when neither is set. */
  names: readonly string[];
  /** The environment to read (default `process.env`). */
  env?: NodeJS.ProcessEnv;
  /**
   * Arguments that make the interpreter print its own executable path on
   * stdout (Python: `['-I', '-S', '-c', 'import sys; print(sys.executable)']`).
   * Used to see through shims; when it fails, the real path of what was found is used.
   */
  realPathArgs?: readonly string[];
  /** Extra read-only directories the interpreter needs, derived from its real path. */
  readOnlyPaths?: (realPath: string) => readonly string[];
}

async function isExecutableFile(path: string): Promise<boolean> {
  try {
    await access(path, constants.X_OK);
    return (await stat(path)).isFile();
  } catch {
    return false;
  }
}

/** Looks a command up on PATH (or checks a path); returns an absolute path or undefined. */
export async function which(command: string, env: NodeJS.ProcessEnv = process.env): Promise<string | undefined> {
  if (command.includes('/')) {
    const path = resolve(command);
    return (await isExecutableFile(path)) ? path : undefined;
  }
  for (const dir of (env.PATH ?? '').split(delimiter)) {
    if (!dir || !isAbsolute(dir)) continue; // never resolve against the working directory
    const path = join(dir, command);
    if (await isExecutableFile(path)) return path;
  }
  return undefined;
}

function askForExecutable(path: string, args: readonly string[]): Promise<string | undefined> {
  return new Promise((done) => {
    execFile(path, args, { timeout: 10_000, encoding: 'utf8', maxBuffer: 64 * 1024 }, (error, stdout) => {
      const line = error ? '' : stdout.trim().split('\n').pop()?.trim();
      done(line && isAbsolute(line) ? line : undefined);
    });
  });
}

/**
 * explicit option > environment variable > first of `names` on PATH, then
 * made real (symlinks followed, shims seen through). Undefined when nothing
 * usable is found — the runner then reports LanguageUnavailable.
 */
export async function resolveExecutable(
  options: ResolveExecutableOptions,
): Promise<ResolvedInterpreter | undefined> {
  const env = options.env ?? process.env;
  const chosen = options.explicit || (options.envVar ? env[options.envVar] : undefined) || undefined;
  let found: string | undefined;
  if (chosen) {
    found = await which(chosen, env);
  } else {
    for (const name of options.names) {
      found = await which(name, env);
      if (found) break;
    }
  }
  if (!found) return undefined;
  let real = await realpath(found);
  if (options.realPathArgs) {
    const reported = await askForExecutable(real, options.realPathArgs);
    if (reported && (await isExecutableFile(reported))) real = await realpath(reported);
  }
  const readOnlyPaths = options.readOnlyPaths?.(real);
  return readOnlyPaths?.length ? { path: real, readOnlyPaths } : { path: real };
}
