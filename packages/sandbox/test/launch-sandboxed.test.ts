/** launchSandboxed: the long-lived tree warm workers use — pipes, stderr tail, kill of the whole tree, exit and limit labels. */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { copyFileSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { ExtFnError } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { findExecutable } from '../src/host.js';
import { launchSandboxed, runSandboxed, type SandboxPolicy, spawnSandboxed } from '../src/index.js';
import { hasBwrap, hasPython, hostProcessesWith, isRoot, linux, PYTHON } from './helpers.js';

const policies: Array<[SandboxPolicy, boolean]> = [
  ['restricted', linux && hasBwrap && hasPython],
  ['unsandboxed', linux && isRoot && hasPython],
  ['trusted', linux && hasPython],
];

function readLine(stream: NodeJS.ReadableStream): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    const onData = (chunk: Buffer) => {
      text += chunk.toString();
      const end = text.indexOf('\n');
      if (end >= 0) {
        stream.off('data', onData);
        resolve(text.slice(0, end));
      }
    };
    stream.on('data', onData);
    stream.once('error', reject);
  });
}

const ECHO = `
import os, sys
if os.fork() == 0:
    os.setsid()
    os.execv('/bin/sleep', ['sleep', sys.argv[1][::-1]])  # reversed: not in our own argv
for line in sys.stdin:
    sys.stdout.write(line.upper()); sys.stdout.flush()
    sys.stderr.write('seen ' + line)
`;

describe.each(policies)('launchSandboxed (%s)', (policy, available) => {
  test.skipIf(!available)(
    'talks over raw pipes; kill() ends the tree, setsid() child included',
    async () => {
      const marker = `34.${Date.now() % 100000}${policy.length}`;
      const reversed = [...marker].reverse().join('');
      const worker = launchSandboxed({
        command: PYTHON,
        args: ['-I', '-S', '-c', ECHO, reversed],
        policy,
      });
      expect(worker.pid).toBeGreaterThan(0);
      for (const word of ['one', 'two']) {
        const reply = readLine(worker.stdout);
        worker.stdin.write(`${word}\n`);
        expect(await reply).toBe(word.toUpperCase());
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(worker.stderrTail()).toContain('seen two');
      expect(worker.stderrBytes).toBeGreaterThan(0);
      expect(hostProcessesWith(marker).length).toBe(1); // the setsid() sleeper
      await Promise.all([worker.kill(), worker.kill()]); // idempotent
      const exit = await worker.exited;
      expect(exit).toEqual({ exitCode: null, signal: 'SIGKILL' });
      expect(hostProcessesWith(marker)).toEqual([]);
    },
  );

  test.skipIf(!available)('exited reports a clean exit when stdin closes', async () => {
    const worker = launchSandboxed({
      command: PYTHON,
      args: ['-I', '-S', '-c', ECHO, '53'],
      policy,
    });
    worker.stdin.end();
    expect(await worker.exited).toEqual({ exitCode: 0, signal: null });
  });

  // Trusted sets no rlimits, so there is no CPU limit to report there.
  (policy === 'trusted' ? () => {} : test.skipIf(!available))(
    'cpu-time only for a worker that spent its CPU, not for one that idles and dies of SIGKILL',
    async () => {
      const burn = launchSandboxed({
        command: PYTHON,
        args: ['-I', '-S', '-c', 'import sys\nsys.stdin.readline()\nwhile True: pass'],
        policy,
        limits: { cpuSeconds: 1 },
      });
      burn.stdin.write('go\n');
      expect(await burn.exited).toMatchObject({ exitCode: null, limit: 'cpu-time' });
      // as bwrap's pid 1 the self-kill is ignored and exit(137) reads as SIGKILL all the same
      const idle = launchSandboxed({
        command: PYTHON,
        args: [
          '-I',
          '-S',
          '-c',
          'import os, time\ntime.sleep(1.3)\nos.kill(os.getpid(), 9)\nos._exit(137)',
        ],
        policy,
        limits: { cpuSeconds: 1 },
      });
      const exit = await idle.exited;
      expect(exit).toEqual({ exitCode: null, signal: 'SIGKILL' });
    },
  );
});

describe('interpreters outside /usr', () => {
  test.skipIf(!(linux && hasBwrap && isRoot))(
    'restricted binds the interpreter prefix and readOnlyPaths read-only, nothing else',
    async () => {
      const prefix = `/opt/extfn-test-${randomBytes(4).toString('hex')}`;
      try {
        mkdirSync(`${prefix}/bin`, { recursive: true, mode: 0o755 });
        mkdirSync(`${prefix}/share`, { mode: 0o755 });
        mkdirSync(`${prefix}-data`, { mode: 0o755 });
        copyFileSync('/bin/sh', `${prefix}/bin/sh`);
        writeFileSync(`${prefix}/share/lib.txt`, 'library\n', { mode: 0o644 });
        writeFileSync(`${prefix}-data/data.txt`, 'data\n', { mode: 0o644 });
        const script = `cat ${prefix}/share/lib.txt ${prefix}-data/data.txt; touch ${prefix}/share/x 2>/dev/null || echo read-only; ls /opt`;
        const result = await runSandboxed({
          command: `${prefix}/bin/sh`,
          args: ['-c', script],
          readOnlyPaths: [`${prefix}-data`],
          timeoutMs: 5000,
          policy: 'restricted',
        });
        expect(result.stderr).toBe('');
        // only the two bound directories appear under /opt
        const names = `${prefix.slice(5)}\n${prefix.slice(5)}-data\n`;
        expect(result.stdout.toString()).toBe(`library\ndata\nread-only\n${names}`);
      } finally {
        rmSync(prefix, { recursive: true, force: true });
        rmSync(`${prefix}-data`, { recursive: true, force: true });
      }
    },
  );

  test.skipIf(!(linux && hasBwrap && isRoot))(
    'an interpreter the sandbox uid cannot read: Sandbox error naming the fix',
    async () => {
      const dir = `/root/.extfn-test-${randomBytes(4).toString('hex')}`;
      try {
        mkdirSync(dir, { mode: 0o700 });
        copyFileSync('/bin/sh', `${dir}/sh`);
        const error = await runSandboxed({
          command: `${dir}/sh`,
          args: ['-c', 'echo hi'],
          timeoutMs: 5000,
          policy: 'restricted',
        }).catch((e: unknown) => e);
        expect(ExtFnError.isInstance(error) && error.kind).toBe('Sandbox');
        expect((error as ExtFnError).fix).toMatch(/unprivileged user can read/);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );

  test('a missing interpreter is a Sandbox error before anything starts', async () => {
    const error = await runSandboxed({
      command: 'no-such-interpreter-xyz',
      timeoutMs: 1000,
      policy: 'trusted',
    }).catch((e: unknown) => e);
    expect(ExtFnError.isInstance(error) && error.kind).toBe('Sandbox');
  });
});

describe('descriptors the host inherited', () => {
  const perl = findExecutable('perl') !== undefined && findExecutable('/bin/bash') !== undefined;
  const policies: Array<[SandboxPolicy, boolean]> = [
    ['restricted', linux && hasBwrap && hasPython && perl],
    ['unsandboxed', linux && isRoot && hasPython && perl],
  ];
  // the one-shell chain (chain-shell.ts), and the longer one it falls back to
  for (const chain of ['one shell', 'fallback'] as const) {
    for (const [policy, available] of policies) {
      test.skipIf(!available)(
        `${policy}, ${chain} chain: closed before the guest runs`,
        async () => {
          // bash's redirections open 60 and 61 without close-on-exec, and exec keeps them
          // (Node marks the low, contiguous ones close-on-exec at startup, not these)
          const fixture = fileURLToPath(new URL('./fixtures/leaky-host.mjs', import.meta.url));
          const env = {
            ...process.env,
            IMPROV_EXTFN_SHELL_CHAIN: chain === 'fallback' ? '0' : '1',
          };
          const child = spawn(
            '/bin/bash',
            [
              '-c',
              'exec "$0" "$1" "$2" 60</dev/null 61>/dev/null',
              process.execPath,
              fixture,
              policy,
            ],
            { stdio: ['ignore', 'pipe', 'inherit'], env },
          );
          let out = '';
          child.stdout!.on('data', (chunk: Buffer) => {
            out += chunk.toString();
          });
          await new Promise((resolve) => child.once('exit', resolve));
          const report = JSON.parse(out) as {
            leaking: number[];
            guest: number[];
            ready: boolean;
            viaSpawner: number[];
          };
          expect(report.leaking).toEqual(expect.arrayContaining([60, 61])); // the attempt is real
          expect(report.guest).toEqual([0, 1, 2]);
          // the spawner inherited them too, and closed them at its start
          expect(report.ready).toBe(true);
          expect(report.viaSpawner).toEqual([0, 1, 2]);
        },
      );
    }
  }
});

test('spawnSandboxed, the old name, is the same function for one more release', () => {
  expect(spawnSandboxed).toBe(launchSandboxed);
});
