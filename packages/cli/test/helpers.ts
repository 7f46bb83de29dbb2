/** Shared test helpers: the real bin as a subprocess, in-process io, a fake runner. */
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
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
import { execa, type ResultPromise } from 'execa';
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
  // Node by its own path: a test may give the command a PATH without it.
  const result = await execa(process.execPath, [BIN, ...args], {
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
    /** stderr is a terminal. */
    isTTY?: boolean;
    /** stdout is a terminal. */
    stdoutTTY?: boolean;
    progressDelayMs?: number;
    env?: NodeJS.ProcessEnv;
    stdin?: string;
    signal?: AbortSignal;
    /** Replaces the captured stdout (e.g. one that fails with EPIPE). */
    stdout?: CliIo['stdout'];
  } = {},
): CapturedIo {
  let out = '';
  let err = '';
  return {
    stdout: options.stdout ?? {
      write: (s: string) => (out += s),
      ...(options.stdoutTTY ? { isTTY: true } : {}),
    },
    stderr: { write: (s: string) => (err += s), isTTY: options.isTTY ?? false, columns: 100 },
    env: options.env ?? {},
    cwd: options.cwd ?? EXAMPLES,
    ...(options.stdin !== undefined
      ? {
          stdin: async function* () {
            yield options.stdin!;
          },
        }
      : {}),
    ...(options.signal ? { signal: options.signal } : {}),
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
): LanguageRunner & { closed: number; rowsEvaluated: number } {
  const runner = {
    specificationVersion: 'v1' as const,
    language,
    packageName: `@improv/extfn-${language}`,
    capabilities: { isolated: false, warmWorkers: false, batch: true },
    closed: 0,
    rowsEvaluated: 0,
    async probe() {
      return { language, available: true, detail: 'fake runner for tests' };
    },
    async call(fn: ExternalFn, args: readonly Value[]): Promise<Value> {
      const body = new Function('args', `return (${fn.body});`) as (a: unknown[]) => unknown;
      try {
        const value = body(args.map((a) => (a as { value: unknown }).value));
        if (fn.returnType === 'text') return { type: 'text', value: String(value) };
        return { type: 'number', value: value as number };
      } catch (error) {
        throw ExtFnError.runtime(fn.name, `Error: ${(error as Error).message}`);
      }
    },
    async callBatch(
      fn: ExternalFn,
      rows: readonly (readonly Value[])[],
      batch: { onProgress?: (d: number, t: number) => void; signal?: AbortSignal },
    ) {
      const out: RowResult[] = [];
      for (const row of rows) {
        if (batch.signal?.aborted) {
          out.push(ExtFnError.aborted(fn.name));
          continue;
        }
        if (options.delayMs) await new Promise((r) => setTimeout(r, options.delayMs));
        runner.rowsEvaluated++;
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

/** Debian's python3, whose pty module gives the command a real terminal (node-pty is not available). */
export const PYTHON3 = '/usr/bin/python3';

const PTY_SCRIPT = `
import json, os, pty, sys
spec = json.loads(sys.argv[1])
pid, fd = pty.fork()
if pid == 0:
    os.chdir(spec['cwd'])
    os.execve(spec['argv'][0], spec['argv'], spec['env'])
chunks = []
while True:
    try:
        data = os.read(fd, 65536)
    except OSError:
        break
    if not data:
        break
    chunks.append(data)
_, status = os.waitpid(pid, 0)
sys.stdout.write(json.dumps({'output': b''.join(chunks).decode('latin-1'), 'exitCode': os.waitstatus_to_exitcode(status)}))
`;

/**
 * Runs the bin with stdin, stdout and stderr on a new pseudo-terminal and
 * returns everything the terminal received, byte for byte (latin-1, so each
 * byte is one character; the terminal turns "\n" into "\r\n").
 */
export async function inTerminal(
  args: readonly string[],
  options: { cwd?: string; env?: Record<string, string | undefined> } = {},
): Promise<{ exitCode: number; output: string }> {
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries({ ...process.env, ...TEST_ENV, ...options.env })) {
    if (value !== undefined) env[key] = value;
  }
  const spec = { argv: [process.execPath, BIN, ...args], cwd: options.cwd ?? EXAMPLES, env };
  const result = await execa(PYTHON3, ['-c', PTY_SCRIPT, JSON.stringify(spec)], {
    timeout: 60_000,
    stdin: 'ignore',
  });
  return JSON.parse(result.stdout as string);
}

/** Polls `check` every 50 ms until it holds; throws after `ms`. */
export async function until(check: () => boolean, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 50));
  }
}

export const REDIS_SERVER = '/usr/bin/redis-server';
export const hasRedis = existsSync(REDIS_SERVER);

/** A redis-server of the test's own on a free port, without persistence, ready to use. */
export async function startRedis(): Promise<{ url: string; port: number; process: ResultPromise }> {
  const port = await new Promise<number>((resolve) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
  const redis = execa(
    REDIS_SERVER,
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    { reject: false },
  );
  let out = '';
  redis.stdout!.on('data', (c: Buffer) => {
    out += c.toString();
  });
  await until(() => out.includes('Ready to accept connections'), 10_000);
  return { url: `redis://127.0.0.1:${port}`, port, process: redis };
}
