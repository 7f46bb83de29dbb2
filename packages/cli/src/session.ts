/** A Registry holding one function and only the runner it needs. */
import { type ExternalFn, ExtFnError, Registry } from '@improv/extfn-core';
import type { CliIo } from './io.js';
import { loadRunner, runnerPackageFor } from './runners.js';

/**
 * Loads the runner for `fn.language` and registers `fn`. A runner that is
 * missing or cannot start here is a LanguageUnavailable error naming the fix.
 */
export async function openRegistry(
  fn: ExternalFn,
  io: CliIo,
  timeoutMs?: number,
): Promise<Registry> {
  const spec = runnerPackageFor(fn.language);
  if (!spec) {
    throw ExtFnError.languageUnavailable(fn.name, fn.language, []);
  }
  const load = await loadRunner(spec, io);
  if (!load.ok) {
    throw new ExtFnError(
      'LanguageUnavailable',
      `function ${fn.name}: the ${fn.language} runner is not available: ${load.problem}`,
      { functionName: fn.name, language: fn.language, fix: load.fix, available: [] },
    );
  }
  return new Registry({
    runners: [load.runner],
    functions: [fn],
    ...(timeoutMs !== undefined ? { timeoutMs } : {}),
  });
}
