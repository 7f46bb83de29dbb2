/**
 * Fix hints for a person at the command line. Runner packages write their
 * fixes for programmers ("the `interpreter` option"); here the same advice
 * names the flag or environment variable that does it.
 */
import { ExtFnError } from '@improv/extfn-core';

/** Rewrites API wording in a runner's message or fix into command-line wording. */
export function cliWording(text: string): string {
  return (
    text
      .replace(/ or the `interpreter` option to/g, ' to')
      .replace(/,? ?(?:or )?(?:pass )?the `interpreter` option/g, '')
      .replace(/the `?timeoutMs`? option/g, '--timeout')
      .replace(/the `?(?:maxMemoryBytes|memoryBytes|limits)`? option(?: of \w+\(\))?/g, '--memory')
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
