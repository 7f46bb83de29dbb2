/**
 * Fix hints for a person at the command line. Runner packages write their
 * fixes for programmers ("the `interpreter` option"); here the same advice
 * names the flag or environment variable that does it.
 */
import { ExtFnError } from '@improv/extfn-core';
import { LIBRARIES_FORMS } from './libraries-flag.js';

/** Rewrites API wording in a runner's message or fix into command-line wording. */
export function cliWording(text: string): string {
  return (
    text
      .replace(/ or the `interpreter` option to/g, ' to')
      .replace(/,? ?(?:or )?(?:pass )?the `interpreter` option/g, '')
      .replace(/the `?timeoutMs`? option/g, '--timeout')
      .replace(/the `?(?:maxMemoryBytes|memoryBytes|limits)`? option(?: of \w+\(\))?/g, '--memory')
      .replace(
        /python\(\{ packages \}\) takes "system", \{ venv: "\/path\/to\/venv" \} or absolute directories/g,
        '--libraries takes system, none, venv:PATH or directories DIR[:DIR...]',
      )
      .replace(
        /r\(\{ libraries \}\) takes "system" or a list of absolute library directories/g,
        '--libraries takes system, none or directories DIR[:DIR...]',
      )
      // no flag raises the output cap: the command keeps the runners' 1 MiB
      .replace(
        /at most maxOutputBytes \(a runner option, 1 MiB unless set\): print less, return a smaller result, or raise maxOutputBytes/g,
        'at most 1 MiB: print less or return a smaller result',
      )
  );
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

/** A Python module or R package a body could not load, as the flag that allows it. */
export function importFix(error: unknown): string | undefined {
  if (!ExtFnError.isInstance(error)) return undefined;
  const python = /\bModuleNotFoundError: No module named '([^']+)'/.exec(error.message);
  if (python) {
    return (
      `a Python body imports the standard library and what --libraries allows: ${LIBRARIES_FORMS}; ` +
      `${python[1]} must be installed there`
    );
  }
  const r = /there is no package called [‘'"]([^’'"]+)[’'"]/.exec(error.message);
  if (r) {
    return (
      `an R body loads packages from R's site libraries (--libraries system, the default) or from the directories ` +
      `--libraries DIR[:DIR...] names; install ${r[1]} there`
    );
  }
  return undefined;
}

/** The fix a person at the command line needs for a failure: a limit to raise, or a library to allow. */
export function cliFix(error: unknown): string | undefined {
  return limitFix(error) ?? importFix(error);
}
