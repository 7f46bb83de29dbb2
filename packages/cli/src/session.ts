/**
 * The runners a command may use (ours, plus third-party packages named by
 * --runner or IMPROV_EXTFN_RUNNERS), and a Registry holding one function and
 * only the runner it needs.
 */
import { type ExternalFn, ExtFnError, type LanguageRunner, Registry } from '@improv/extfn-core';
import { CliError, usage } from './cli-error.js';
import { ExitCode } from './exit-codes.js';
import type { CliIo } from './io.js';
import { WASM_MAX_MEMORY_BYTES } from './options.js';
import {
  externalRunnerNames,
  KNOWN_LANGUAGE_IDS,
  loadExternalRunner,
  loadRunner,
  type RunnerSettings,
  runnerPackageFor,
} from './runners.js';

export interface Runners {
  /** Third-party runners, loaded; they win over ours for their language. */
  readonly external: readonly LanguageRunner[];
  readonly settings: RunnerSettings;
  /** Every language a descriptor may name here. */
  readonly languages: readonly string[];
}

/**
 * Loads the third-party runners asked for. One that cannot be loaded stops the
 * command (exit 3): it was asked for by name, so running without it would
 * surprise.
 */
export async function loadRunners(
  flags: readonly string[],
  io: CliIo,
  settings: RunnerSettings = {},
): Promise<Runners> {
  const external: LanguageRunner[] = [];
  for (const name of externalRunnerNames(flags, io.env)) {
    const load = await loadExternalRunner(name, io);
    if (!load.ok) {
      await Promise.allSettled(external.map((r) => r.close?.()));
      throw new CliError(
        'LanguageUnavailable',
        `runner ${name}: ${load.problem}`,
        load.fix,
        ExitCode.Unavailable,
      );
    }
    external.push(load.runner);
  }
  const languages = [...new Set([...KNOWN_LANGUAGE_IDS, ...external.map((r) => r.language)])];
  return { external, settings, languages };
}

/**
 * --memory against what the runner `fn` needs can take, before it is created:
 * a WebAssembly memory is 32-bit, at most 4GiB. A third-party runner for the
 * language is not given --memory, so it is not checked.
 */
export function checkMemoryFlag(fn: ExternalFn, runners: Runners, text: string | undefined): void {
  const bytes = runners.settings.memoryBytes;
  if (text === undefined || bytes === undefined) return;
  if (runners.external.some((r) => r.language === fn.language)) return;
  if (fn.language === 'wasm' && bytes > WASM_MAX_MEMORY_BYTES) {
    throw usage(
      `--memory ${JSON.stringify(text)} is more than 4GiB, the most a wasm function's memory can be (WebAssembly memory is 32-bit)`,
      `write at most --memory 4GiB for function ${fn.name} (wasm; default 16MiB)`,
    );
  }
}

/**
 * Picks the runner for `fn.language` (closing the third-party ones not needed)
 * and registers `fn`. A runner that is missing or cannot start here is a
 * LanguageUnavailable error naming the fix.
 */
export async function openRegistry(
  fn: ExternalFn,
  io: CliIo,
  runners: Runners,
  options: { timeoutMs?: number; cache?: { maxEntries: number; maxBytes: number } } = {},
): Promise<Registry> {
  let runner = runners.external.find((r) => r.language === fn.language);
  await Promise.allSettled(runners.external.filter((r) => r !== runner).map((r) => r.close?.()));
  if (!runner) {
    const spec = runnerPackageFor(fn.language);
    if (!spec) throw ExtFnError.languageUnavailable(fn.name, fn.language, runners.languages);
    const load = await loadRunner(spec, io, runners.settings);
    if (!load.ok) {
      throw new ExtFnError(
        'LanguageUnavailable',
        `function ${fn.name}: the ${fn.language} runner is not available: ${load.problem}`,
        { functionName: fn.name, language: fn.language, fix: load.fix, available: [] },
      );
    }
    runner = load.runner;
  }
  return new Registry({
    runners: [runner],
    functions: [fn],
    ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
    ...(options.cache ? { cache: options.cache } : {}),
  });
}
