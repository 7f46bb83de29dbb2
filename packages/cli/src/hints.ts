/**
 * Fix hints for a person at the command line. Runner packages write their
 * fixes for programmers ("the `interpreter` option"); here the same advice
 * names the flag or environment variable that does it.
 */
import { accessSync, constants, existsSync, statSync } from 'node:fs';
import { delimiter, join, resolve } from 'node:path';
import { ExtFnError } from '@improv/extfn-core';

/** Rewrites API wording in a runner's message or fix into command-line wording. */
export function cliWording(text: string): string {
  return text
    .replace(/ or the `interpreter` option to/g, ' to')
    .replace(/,? ?(?:or )?(?:pass )?the `interpreter` option/g, '')
    .replace(/the `?timeoutMs`? option/g, '--timeout')
    .replace(/the `?(?:maxMemoryBytes|memoryBytes|limits)`? option(?: of \w+\(\))?/g, '--memory');
}

export const TIMEOUT_FIX =
  'if the function needs longer, raise the limit with --timeout (e.g. --timeout 30s; default 5s)';
export const MEMORY_FIX =
  'if the function needs more memory, raise the limit with --memory (e.g. --memory 2GiB; default 1GiB, Wasm 16MiB)';

/** The limit a failure hit, as the flag that raises it, when it was one we can raise. */
export function limitFix(error: unknown): string | undefined {
  if (!ExtFnError.isInstance(error)) return undefined;
  if (error.kind === 'Timeout' || error.limit === 'wall-clock' || error.limit === 'cpu-time') {
    return TIMEOUT_FIX;
  }
  if (error.limit === 'memory') return MEMORY_FIX;
  return undefined;
}

/** The environment variable that names each of our interpreters, and the command found on PATH without it. */
const INTERPRETER_ENV: Record<string, { envVar: string; command: string }> = {
  python: { envVar: 'IMPROV_EXTFN_PYTHON', command: 'python3' },
  r: { envVar: 'IMPROV_EXTFN_R', command: 'Rscript' },
  julia: { envVar: 'IMPROV_EXTFN_JULIA', command: 'julia' },
  pure: { envVar: 'IMPROV_EXTFN_PURE', command: 'pure' },
};

function isExecutableFile(path: string): boolean {
  try {
    if (!statSync(path).isFile()) return false;
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * When a language's interpreter was not found and its environment variable
 * names one that is not there, what is wrong with it and the fix (runners
 * only say "set IMPROV_EXTFN_PYTHON to its path", not that it is set).
 */
export function interpreterEnvHint(
  language: string | undefined,
  env: NodeJS.ProcessEnv,
  cwd: string,
): { problem: string; fix: string } | undefined {
  const known = language === undefined ? undefined : INTERPRETER_ENV[language];
  const value = known ? env[known.envVar] : undefined;
  if (!known || !value) return undefined;
  const { envVar, command } = known;
  let problem: string | undefined;
  if (value.includes('/')) {
    const path = resolve(cwd, value);
    const shown = path === value ? value : `${value} (${path})`;
    if (!existsSync(path)) problem = `${envVar} is set to ${shown}, which does not exist`;
    else if (!isExecutableFile(path))
      problem = `${envVar} is set to ${shown}, which is not an executable file`;
  } else {
    const dirs = (env.PATH ?? '').split(delimiter).filter(Boolean);
    if (!dirs.some((dir) => isExecutableFile(join(dir, value))))
      problem = `${envVar} is set to ${value}, which is not a command on PATH`;
  }
  if (!problem) return undefined;
  return {
    problem,
    fix: `set ${envVar} to the full path of an existing interpreter (e.g. ${envVar}=$(command -v ${command})), or unset it to use ${command} from PATH`,
  };
}

/** The same, for an error a runner gave: only "no interpreter was found". */
export function interpreterEnvHintFor(
  error: unknown,
  env: NodeJS.ProcessEnv,
  cwd: string,
): { problem: string; fix: string } | undefined {
  if (!ExtFnError.isInstance(error) || error.kind !== 'LanguageUnavailable') return undefined;
  if (!/no \w+ interpreter was found/.test(error.message)) return undefined;
  return interpreterEnvHint(error.language, env, cwd);
}
