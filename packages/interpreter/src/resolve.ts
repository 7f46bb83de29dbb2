/**
 * Finding an interpreter the sandbox can run: an absolute, real path. A
 * version-manager shim (pyenv, rbenv, asdf) is a script under the user's
 * home that an unprivileged sandbox uid cannot read, so the interpreter can
 * be asked for its own executable path (`realPathArgs`) to see through it.
 */
import { execFile } from 'node:child_process';
import { accessSync, constants, realpathSync, statSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import { delimiter, dirname, isAbsolute, join, resolve } from 'node:path';
import { ExtFnError } from '@improv/extfn-core';
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
   * stdout (the Python runner's: `['-s', '-S', '-c', 'import sys; print(sys.executable)']`).
   * Used to see through shims; when it fails, the real path of what was found is used.
   */
  realPathArgs?: readonly string[];
  /** Extra read-only directories the interpreter needs, derived from its real path. */
  readOnlyPaths?: (realPath: string) => readonly string[];
  /**
   * What the option or variable should name, for the fix when the one set
   * names no executable: `'a Python 3 executable'` (default: from `names`,
   * "a python3 executable").
   */
  executable?: string;
}

// The lookups below are synchronous: a few stats of local files, 10–30 µs
// each, where each asynchronous one waits for a turn of the thread pool
// (100–300 µs on a busy 2-core host). Every new runner looks its interpreter
// up before its first start, so they were 0.5–2.5 ms of a cold refresh.

function isExecutableFile(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

const realpath = (path: string): string => realpathSync.native(path);

/** Every match of a command on PATH, in order (or the path itself when it has a slash). */
export async function whichAll(
  command: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<string[]> {
  if (command.includes('/')) {
    const path = resolve(command);
    return isExecutableFile(path) ? [path] : [];
  }
  const found: string[] = [];
  for (const dir of (env.PATH ?? '').split(delimiter)) {
    if (!dir || !isAbsolute(dir)) continue; // never resolve against the working directory
    const path = join(dir, command);
    if (!found.includes(path) && isExecutableFile(path)) found.push(path);
  }
  return found;
}

/**
 * Whether a user other than the owner can run the file: every directory on
 * the way searchable by others, the file readable and executable by them.
 * The sandbox runs bodies as an unprivileged uid, so an interpreter under a
 * private home (`/root/.pyenv/…`) cannot start there.
 */
export async function othersCanRun(path: string): Promise<boolean> {
  try {
    if ((statSync(path).mode & 0o005) !== 0o005) return false;
    for (let dir = dirname(path); ; dir = dirname(dir)) {
      if ((statSync(dir).mode & 0o001) === 0) return false;
      if (dir === '/') return true;
    }
  } catch {
    return false;
  }
}

/**
 * What an interpreter reported as its executable, remembered for this
 * process: asking starts the interpreter (tens of ms), which every new
 * Registry would otherwise pay before its first result. The key holds all
 * the answer can depend on: the file (inode, size, mtime), the arguments,
 * and the working directory and environment a shim reads (pyenv's
 * `.python-version`, `PYENV_VERSION`).
 */
const reportedExecutables = new Map<string, Promise<string | undefined>>();

async function askOnce(path: string, args: readonly string[]): Promise<string | undefined> {
  const { size, mtimeMs, ino } = statSync(path);
  const key = JSON.stringify([path, ino, size, mtimeMs, args, process.cwd(), process.env]);
  let reported = reportedExecutables.get(key);
  if (!reported) {
    reported = askForExecutable(path, args);
    reportedExecutables.set(key, reported);
  }
  return reported;
}

function askForExecutable(path: string, args: readonly string[]): Promise<string | undefined> {
  return new Promise((done) => {
    execFile(
      path,
      args,
      { timeout: 10_000, encoding: 'utf8', maxBuffer: 64 * 1024 },
      (error, stdout) => {
        const line = error ? '' : stdout.trim().split('\n').pop()?.trim();
        done(line && isAbsolute(line) ? line : undefined);
      },
    );
  });
}

/** Why `value` (a path, or a command name) names no executable file: "…, which does not exist". */
async function whyUnusable(value: string): Promise<string> {
  if (!value.includes('/')) return `${value}, which is not a command on PATH`;
  const path = resolve(value);
  const shown = path === value ? value : `${value} (${path})`;
  try {
    const found = await stat(path);
    if (found.isDirectory()) return `${shown}, which is a directory`;
    if (!found.isFile()) return `${shown}, which is not a regular file`;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return `${shown}, which does not exist`;
    if (code === 'EACCES') return `${shown}, which cannot be reached (permission denied)`;
    return `${shown}, which cannot be read (${code ?? String(error)})`;
  }
  return `${shown}, which is not executable`;
}

/** The errors `unusableChoice` made, told apart from other LanguageUnavailable errors of a lookup (a library choice's). */
const unusableChoices = new WeakSet<ExtFnError>();

/** The error, when it is resolveExecutable's for an option or variable that names no executable. */
export function unusableChoiceError(error: unknown): ExtFnError | undefined {
  return ExtFnError.isInstance(error) && unusableChoices.has(error) ? error : undefined;
}

/**
 * The LanguageUnavailable error for an explicit choice or environment
 * variable that names no executable file: what is set, to what, what is
 * wrong with it, and the fix (the `fix` field, also at the end of the
 * message). The runner reports it as its reason for having no interpreter.
 */
async function unusableChoice(
  options: ResolveExecutableOptions,
  value: string,
): Promise<ExtFnError> {
  const { envVar, names } = options;
  const executable =
    options.executable ?? (names.length ? `a ${names.join(' or ')} executable` : 'an executable');
  const fallback = names.length ? `${names.join(' or ')} from PATH` : undefined;
  const what = await whyUnusable(value);
  let problem: string;
  let fix: string;
  if (options.explicit) {
    problem = `the \`interpreter\` option is set to ${what}`;
    const instead = [envVar, fallback].filter(Boolean).join(' or ');
    fix = `set the \`interpreter\` option to ${executable}${instead ? `, or leave it out to use ${instead}` : ''}`;
  } else {
    problem = `${envVar} is set to ${what}`;
    fix = `set ${envVar} to ${executable}, or unset it${fallback ? ` to use ${fallback}` : ''}`;
  }
  const error = new ExtFnError('LanguageUnavailable', `${problem}; ${fix}`, { fix });
  unusableChoices.add(error);
  return error;
}

/**
 * explicit option > environment variable > first of `names` on PATH, then
 * made real (symlinks followed, shims seen through). Undefined when nothing
 * usable is found on PATH — the runner then reports LanguageUnavailable.
 * An explicit option or environment variable that names no executable file
 * (missing, a directory, not executable, not on PATH) rejects with a
 * LanguageUnavailable ExtFnError saying which, with its `fix`.
 */
export async function resolveExecutable(
  options: ResolveExecutableOptions,
): Promise<ResolvedInterpreter | undefined> {
  const env = options.env ?? process.env;
  const chosen =
    options.explicit || (options.envVar ? env[options.envVar] : undefined) || undefined;
  const real = async (found: string): Promise<string> => {
    let path = realpath(found);
    if (options.realPathArgs) {
      const reported = await askOnce(path, options.realPathArgs);
      if (reported && isExecutableFile(reported)) path = realpath(reported);
    }
    return path;
  };
  const result = (path: string): ResolvedInterpreter => {
    const readOnlyPaths = options.readOnlyPaths?.(path);
    return readOnlyPaths?.length ? { path, readOnlyPaths } : { path };
  };
  if (chosen) {
    // An explicit choice is taken as given (made real), readable by the sandbox or not.
    const [found] = await whichAll(chosen, env);
    if (!found) throw await unusableChoice(options, chosen);
    return result(await real(found));
  }
  // On PATH, prefer the first interpreter a sandbox uid can run (a pyenv shim
  // first on PATH usually leads under /root); else the first one found, so the
  // sandbox's error explains what to do.
  let first: string | undefined;
  for (const name of options.names) {
    for (const found of await whichAll(name, env)) {
      const path = await real(found);
      if (await othersCanRun(path)) return result(path);
      first ??= path;
    }
  }
  return first === undefined ? undefined : result(first);
}
