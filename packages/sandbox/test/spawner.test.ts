/**
 * The spawner: once it is ready, trees are its children, not the host's
 * (the host does not fork), with the same pipes, FIFO stdout, shared file
 * and seccomp program as a tree the host starts itself; IMPROV_EXTFN_SPAWNER=0
 * turns it off; a spawner that dies takes its restricted trees with it and
 * the next tree still starts. Where trees get a cgroup, the spawner moves each,
 * with all it started, into it while it boots and before the host gets it (the
 * host's loop never waits on cgroup.procs), and kills one it cannot move (the
 * spawn fails; the host then starts the tree itself, as for any spawner failure).
 */
import { execFileSync } from 'node:child_process';
import {
  closeSync,
  constants,
  existsSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, test } from 'vitest';
import { TreeCgroup } from '../src/cgroup.js';
import {
  cgroupSupport,
  launchSandboxedAsync,
  type SandboxedTree,
  type SandboxPolicy,
  spawnerPid,
  spawnerReady,
} from '../src/index.js';
import { statFields } from '../src/proc.js';
import { readProcessTree } from '../src/process-tree.js';
import { readySpawner } from '../src/spawner.js';
import { hasBwrap, hasPython, isRoot, linux, PYTHON } from './helpers.js';

const policies: Array<[SandboxPolicy, boolean]> = [
  ['restricted', linux && hasBwrap && hasPython],
  ['unsandboxed', linux && isRoot && hasPython],
  ['trusted', linux && hasPython],
];

const parentOf = (pid: number) => Number(statFields(pid)[1]);

function firstLine(stream: NodeJS.ReadableStream): Promise<string> {
  return new Promise((resolve) => {
    let text = '';
    stream.on('data', (chunk: Buffer) => {
      text += chunk.toString();
      if (text.includes('\n')) resolve(text.slice(0, text.indexOf('\n')));
    });
  });
}

/** Echoes one line back in upper case. */
const ECHO = `
import sys
sys.stdout.write(sys.stdin.readline().upper())
`;

/** The same through a reopened /proc/self/fd/1, as R does (a FIFO can be reopened, a socket cannot). */
const ECHO_REOPENED = `
import sys
line = sys.stdin.readline()
with open('/proc/self/fd/1', 'w') as out:
    out.write(line.upper())
`;

const trees: SandboxedTree[] = [];
afterEach(async () => {
  delete process.env.IMPROV_EXTFN_SPAWNER;
  await Promise.all(trees.splice(0).map((tree) => tree.kill()));
});

async function start(policy: SandboxPolicy, program: string, stdoutPipe = false) {
  const tree = await launchSandboxedAsync({
    command: PYTHON,
    args: ['-I', '-S', '-c', program],
    policy,
    stdoutPipe,
  });
  trees.push(tree);
  return tree;
}

describe.each(policies)('spawner (%s)', (policy, available) => {
  test.skipIf(!available)(
    'a tree started once the spawner is ready is its child, and talks over the pipes it handed back',
    async () => {
      expect(await spawnerReady()).toBe(true);
      for (const stdoutPipe of [false, true]) {
        const tree = await start(policy, stdoutPipe ? ECHO_REOPENED : ECHO, stdoutPipe);
        expect(parentOf(tree.pid!)).toBe(spawnerPid());
        expect(spawnerPid()).not.toBe(process.pid);
        const reply = firstLine(tree.stdout);
        tree.stdin.write('hello\n');
        expect(await reply).toBe('HELLO');
        expect(await tree.exited).toEqual({ exitCode: 0, signal: null });
      }
    },
  );

  test.skipIf(!available)('IMPROV_EXTFN_SPAWNER=0: the host starts the tree itself', async () => {
    expect(await spawnerReady()).toBe(true);
    process.env.IMPROV_EXTFN_SPAWNER = '0';
    const tree = await start(policy, ECHO);
    expect(parentOf(tree.pid!)).toBe(process.pid);
    const reply = firstLine(tree.stdout);
    tree.stdin.write('direct\n');
    expect(await reply).toBe('DIRECT');
    expect(await tree.exited).toEqual({ exitCode: 0, signal: null });
  });
});

describe.skipIf(!(linux && hasBwrap && hasPython))('spawner ends', () => {
  test('its restricted trees end with it (exited settles), and the next tree still starts', async () => {
    expect(await spawnerReady()).toBe(true);
    const first = spawnerPid()!;
    const tree = await start('restricted', 'import time\nprint("up", flush=True)\ntime.sleep(60)');
    expect(await firstLine(tree.stdout)).toBe('up');
    process.kill(first, 'SIGKILL');
    const exit = await tree.exited; // bwrap runs --die-with-parent: its parent was the spawner
    expect(exit.exitCode === 0 && exit.signal === null).toBe(false);
    const next = await start('restricted', ECHO);
    const reply = firstLine(next.stdout);
    next.stdin.write('again\n');
    expect(await reply).toBe('AGAIN');
    expect(await spawnerReady()).toBe(true);
    expect(spawnerPid()).not.toBe(first);
    // the old spawner is gone, not a zombie of ours kept alive
    expect(() => readFileSync(`/proc/${first}/stat`)).toThrow();
  });
});

/** The cgroup paths of a live process, by controller ('' for v2's). */
function cgroupsOf(pid: number): Map<string, string> {
  const lines = readFileSync(`/proc/${pid}/cgroup`, 'utf8').trim().split('\n');
  const byController = new Map<string, string>();
  for (const line of lines) {
    const [, controllers = '', path = ''] = line.split(':');
    for (const controller of controllers.split(',')) byController.set(controller, path);
  }
  return byController;
}

const cgroups = linux ? cgroupSupport().version : false;

describe('spawner and the tree’s cgroup', () => {
  // as root both: the unsandboxed chain execs the shell in place; under bwrap it is a descendant
  const movable: SandboxPolicy[] = isRoot
    ? ['unsandboxed', ...(hasBwrap ? (['restricted'] as const) : [])]
    : ['restricted'];
  test.skipIf(!(linux && cgroups && (isRoot || hasBwrap))).each(movable)(
    `%s: a tree it starts is in its own cgroup, with every process it started, before the host gets it (cgroups here: ${cgroups || 'none'})`,
    async (policy) => {
      expect(await spawnerReady()).toBe(true);
      // The shell forks at once, long before a first cgroup.procs write returns
      // (an RCU grace period): a tree moved by its first pid alone leaves them behind.
      const tree = await launchSandboxedAsync({
        command: '/bin/sh',
        args: ['-c', 'sleep 30 & sleep 30 & echo up; read _'],
        policy,
      });
      trees.push(tree);
      expect(parentOf(tree.pid!)).toBe(spawnerPid());
      // both sleeps are forked before the echo (on a loaded host, later than the spawn returns)
      expect(await firstLine(tree.stdout)).toBe('up');
      const processes = readProcessTree(tree.pid!)!.processes.map((p) => p.pid);
      expect(processes.length).toBeGreaterThanOrEqual(3);
      const own = cgroupsOf(process.pid);
      for (const pid of processes) {
        const its = cgroupsOf(pid);
        for (const controller of cgroups === 'v1' ? ['memory', 'pids'] : ['']) {
          expect(its.get(controller)).toMatch(
            new RegExp(`/improv-extfn-${process.pid}/tree-[0-9a-f]{8}-\\d+$`),
          );
          expect(its.get(controller)).not.toBe(own.get(controller));
          expect(its.get(controller)).toBe(cgroupsOf(tree.pid!).get(controller));
        }
      }
      tree.stdin.write('\n');
      expect(await tree.exited).toEqual({ exitCode: 0, signal: null });
    },
  );

  /** A chain that writes its pid to `marker`, then sleeps, started with `procs` as its cgroup.procs files. */
  const spawnWith = (procs: string[], script: string, openGate = false) =>
    readySpawner()!.spawn({
      file: '/bin/sh',
      args: ['-c', script],
      env: { PATH: '/usr/bin:/bin' },
      uid: undefined,
      stdout: 'pipe',
      fd3: undefined,
      extra: undefined,
      cgroupProcs: procs,
      openGate,
    });

  // The first "cgroup.procs" is a FIFO: the spawner's move waits there until the test
  // opens it for reading, so what the tree does meanwhile is what it would do while a
  // real move waits for an RCU grace period. The script's `read` stands for the chain's gate.
  test.skipIf(!(linux && isRoot && cgroups)).each([
    [
      true,
      'runs nothing until it sits in its cgroup: the spawner writes the gate line after the move',
    ],
    [false, 'boots while it is moved (a trusted boot): no line is written, the host writes first'],
  ])('a gated tree (openGate %s) %s (as root, with cgroups)', async (openGate, _what) => {
    expect(await spawnerReady()).toBe(true);
    const dir = mkdtempSync(join(tmpdir(), 'extfn-gate-'));
    const cgroup = TreeCgroup.create(64 << 20, 8)!;
    let pid: number | undefined;
    try {
      const fifo = join(dir, 'procs');
      execFileSync('mkfifo', [fifo]);
      const before = join(dir, 'before');
      const after = join(dir, 'after');
      // `before` at once; `after` only once a line came on stdin
      const spawned = spawnWith(
        [fifo, ...cgroup.procsFiles()],
        `: > ${before}; read _; echo $$ > ${after}; sleep 30`,
        openGate,
      );
      spawned.catch(() => {});
      for (let waited = 0; !existsSync(before) && waited < 5_000; waited += 10) {
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      expect(existsSync(before)).toBe(true); // it runs up to its gate while the move waits
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(existsSync(after)).toBe(false); // no line yet: the move has not ended
      const reader = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
      const child = await spawned;
      closeSync(reader);
      pid = child.pid;
      expect(child.moved).toBe(true);
      if (!openGate) child.stdin!.write('\n'); // the host's first write, as a driver's body frame
      for (let waited = 0; !existsSync(after) && waited < 5_000; waited += 10) {
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      expect(Number(readFileSync(after, 'utf8'))).toBe(pid);
      // what ran after the line runs in the tree's cgroup
      for (const file of cgroup.procsFiles()) {
        expect(readFileSync(file, 'utf8').split('\n')).toContain(String(pid));
      }
    } finally {
      if (pid !== undefined) {
        try {
          process.kill(-pid, 'SIGKILL');
        } catch {}
      }
      await cgroup.remove(); // kills what is left in it
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test.skipIf(!linux)(
    'one it cannot move into its cgroup is killed, never handed over: the spawn fails, saying why',
    async () => {
      expect(await spawnerReady()).toBe(true);
      const dir = mkdtempSync(join(tmpdir(), 'extfn-move-'));
      try {
        const marker = join(dir, 'pid');
        await expect(
          spawnWith(['/proc/no-such-cgroup/cgroup.procs'], `echo $$ > ${marker}; sleep 30`),
        ).rejects.toThrow(/^cannot move the tree into its cgroup: .*ENOENT/);
        // it may or may not have got as far as its first line; either way it runs no more:
        // gone, or a zombie its parent has not reaped yet (a loaded machine's spawner may be late)
        await new Promise((resolve) => setTimeout(resolve, 200));
        if (existsSync(marker)) {
          const pid = Number(readFileSync(marker, 'utf8'));
          const running = () => {
            try {
              return statFields(pid)[0] !== 'Z';
            } catch {
              return false; // no such process
            }
          };
          for (let waited = 0; running() && waited < 5_000; waited += 50) {
            await new Promise((resolve) => setTimeout(resolve, 50));
          }
          expect(running()).toBe(false);
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );

  test.skipIf(!(linux && isRoot && cgroups))(
    'a tree gone before it was moved fails its spawn, saying so (not its cgroup), and the spawner carries on',
    async () => {
      expect(await spawnerReady()).toBe(true);
      const before = spawnerPid();
      const dir = mkdtempSync(join(tmpdir(), 'extfn-move-'));
      const cgroup = TreeCgroup.create(64 << 20, 8)!;
      try {
        // the first "cgroup.procs" is a FIFO: the spawner's write waits until the
        // child has exited (and been reaped); the real one then has no such process
        const fifo = join(dir, 'procs');
        execFileSync('mkfifo', [fifo]);
        const done = join(dir, 'done');
        const spawned = spawnWith([fifo, ...cgroup.procsFiles()], `: > ${done}`);
        spawned.catch(() => {});
        while (!existsSync(done)) await new Promise((resolve) => setTimeout(resolve, 10));
        await new Promise((resolve) => setTimeout(resolve, 100));
        const reader = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
        await expect(spawned).rejects.toThrow(
          /^the tree ended \(code 0\) before it was moved into its cgroup$/,
        );
        closeSync(reader);
        expect(spawnerPid()).toBe(before);
        const next = await start('trusted', ECHO);
        expect(parentOf(next.pid!)).toBe(before);
        const reply = firstLine(next.stdout);
        next.stdin.write('still here\n');
        expect(await reply).toBe('STILL HERE');
      } finally {
        await cgroup.remove();
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );
});
