/** Shared test helpers: the real bin as a subprocess, in-process io, a fake runner. */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  type ExternalFn,
  ExtFnError,
  type LanguageRunner,
  type RowResult,
  type Value,
} from '@improv/extfn-core';
import { execa } from 'execa';
import type { CliIo } from '../src/io.js';
import { loadRunner, RUNNER_PACKAGES } from '../src/runners.js';

export const BIN = fileURLToPath(new URL('../dist/bin.js', import.meta.url));
export const EXAMPLES = fileURLToPath(new URL('../../../examples/model/', import.meta.url));

/**
 * The environment every subprocess gets: Debian's python3 (the pyenv shim on
 * PATH is unreadable inside the sandbox), and nothing that loosens the sandbox.
 */
export const TEST_ENV: Record<string, string | undefined> = {
  IMPROV_EXTFN_PYTHON: process.env.IMPROV_EXTFN_PYTHON ?? '/usr/bin/python3',
  IMPROV_EXTFN_TRUSTED: undefined,
  IMPROV_EXTFN_ALLOW_UNSANDBOXED: undefined,
};

export async function cli(
  args: readonly string[],
  options: {
    cwd?: string;
    input?: string;
    env?: Record<string, string | undefined>;
    timeout?: number;
  } = {},
) {
  const result = await execa('node', [BIN, ...args], {
    reject: false,
    cwd: options.cwd ?? EXAMPLES,
    env: { ...TEST_ENV, ...options.env },
    extendEnv: true,
    timeout: options.timeout ?? 60_000,
    forceKillAfterDelay: 2_000,
    ...(options.input !== undefined ? { input: options.input } : { stdin: 'ignore' }),
    stripFinalNewline: false,
  });
  return {
    exitCode: result.exitCode,
    stdout: result.stdout as string,
    stderr: result.stderr as string,
  };
}

/** Whether a language can run here, and why not: for skipIf messages. */
export async function languageStatus(
  language: string,
): Promise<{ ready: boolean; reason: string }> {
  const saved = process.env.IMPROV_EXTFN_PYTHON;
  process.env.IMPROV_EXTFN_PYTHON = TEST_ENV.IMPROV_EXTFN_PYTHON;
  try {
    const spec = RUNNER_PACKAGES.find((p) => p.language === language)!;
    const load = await loadRunner(spec, {});
    if (!load.ok) return { ready: false, reason: load.problem };
    try {
      const probe = await load.runner.probe();
      return { ready: probe.available, reason: probe.available ? 'ready' : probe.detail };
    } finally {
      await load.runner.close?.();
    }
  } finally {
    if (saved === undefined) delete process.env.IMPROV_EXTFN_PYTHON;
    else process.env.IMPROV_EXTFN_PYTHON = saved;
  }
}

/** " (skipped: why)" for a test title when the language is not ready, else nothing. */
export const skipNote = (status: { ready: boolean; reason: string }): string =>
  status.ready ? '' : ` (skipped: ${status.reason})`;

/** A scratch directory, removed by the returned cleanup. */
export async function scratch(): Promise<{
  dir: string;
  file: (name: string, text: string) => Promise<string>;
  cleanup: () => Promise<void>;
}> {
  const dir = await mkdtemp(join(tmpdir(), 'improv-extfn-cli-'));
  return {
    dir,
    file: async (name, text) => {
      const path = join(dir, name);
      await writeFile(path, text);
      return path;
    },
    cleanup: () => rm(dir, { recursive: true, force: true }),
  };
}

export interface CapturedIo extends CliIo {
  out(): string;
  err(): string;
}

/** In-process io whose runner packages are the given fakes. */
export function fakeIo(
  packages: Record<string, unknown>,
  options: {
    cwd?: string;
    isTTY?: boolean;
    progressDelayMs?: number;
    env?: NodeJS.ProcessEnv;
  } = {},
): CapturedIo {
  let out = '';
  let err = '';
  return {
    stdout: { write: (s: string) => (out += s) },
    stderr: { write: (s: string) => (err += s), isTTY: options.isTTY ?? false, columns: 100 },
    env: options.env ?? {},
    cwd: options.cwd ?? EXAMPLES,
    importPackage: async (name: string) => {
      if (name in packages) return packages[name];
      const error = new Error(`Cannot find package '${name}' imported from test`) as Error & {
        code: string;
      };
      error.code = 'ERR_MODULE_NOT_FOUND';
      throw error;
    },
    ...(options.progressDelayMs !== undefined ? { progressDelayMs: options.progressDelayMs } : {}),
    out: () => out,
    err: () => err,
  };
}

/**
 * A tiny runner for number functions whose body is a JavaScript expression
 * over `args` (numbers): enough to test the command without an interpreter.
 * A body that throws becomes a Runtime error, as a real runner's would.
 */
export function fakeRunner(
  language = 'wasm',
  options: { delayMs?: number } = {},
): LanguageRunner & { closed: number } {
  const runner = {
    specificationVersion: 'v1' as const,
    language,
    packageName: `@improv/extfn-${language}`,
    capabilities: { isolated: false, warmWorkers: false, batch: true },
    closed: 0,
    async probe() {
      return { language, available: true, detail: 'fake runner for tests' };
    },
    async call(fn: ExternalFn, args: readonly Value[]): Promise<Value> {
      const body = new Function('args', `return (${fn.body});`) as (a: unknown[]) => unknown;
      try {
        const value = body(args.map((a) => (a as { value: unknown }).value));
        return { type: 'number', value: value as number };
      } catch (error) {
        throw ExtFnError.runtime(fn.name, `Error: ${(error as Error).message}`);
      }
    },
    async callBatch(
      fn: ExternalFn,
      rows: readonly (readonly Value[])[],
      batch: { onProgress?: (d: number, t: number) => void },
    ) {
      const out: RowResult[] = [];
      for (const row of rows) {
        if (options.delayMs) await new Promise((r) => setTimeout(r, options.delayMs));
        try {
          out.push(await runner.call(fn, row));
        } catch (error) {
          out.push(error as ExtFnError);
        }
        batch.onProgress?.(out.length, rows.length);
      }
      return out;
    },
    async close() {
      runner.closed++;
    },
  };
  return runner;
}
