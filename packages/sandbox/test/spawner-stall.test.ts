/**
 * The spawner stopped from outside (SIGSTOP): a tree it has not handed over
 * within 3 s starts from this process instead, and so do the trees after it
 * without waiting, until the spawner runs again; the tree it then hands over
 * late is killed. Before, `runSandboxed` waited for it without end (its
 * deadline starts once the tree runs). Its own file: it stops this test
 * process's spawner.
 */
import { describe, expect, test } from 'vitest';
import { runSandboxed, spawnerPid, spawnerReady } from '../src/index.js';
import { childrenOf } from '../src/proc.js';
import { hasPython, linux, PYTHON } from './helpers.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A run that says which process started it, and how long it took (or that it still waits). */
async function run(): Promise<{ parent: string; ms: number }> {
  const began = Date.now();
  const result = await Promise.race([
    runSandboxed({
      command: PYTHON,
      args: ['-I', '-S', '-c', 'import os, sys; sys.stdin.read(); print(os.getppid())'],
      policy: 'trusted', // trees keep the host's pid namespace: the parent is visible
      timeoutMs: 10_000,
    }),
    new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 10_000)),
  ]);
  return {
    parent: result ? result.stdout.toString().trim() : 'still waiting',
    ms: Date.now() - began,
  };
}

const noSpawner = process.env.IMPROV_EXTFN_SPAWNER === '0' || !linux || !hasPython;

describe.skipIf(noSpawner)('trees while the spawner is stopped from outside', () => {
  test('start from this process after 3 s, the next ones at once; the late one is killed', async () => {
    expect(await spawnerReady()).toBe(true);
    const spawner = spawnerPid()!;
    expect((await run()).parent).toBe(String(spawner));
    process.kill(spawner, 'SIGSTOP');
    let first: { parent: string; ms: number };
    let next: { parent: string; ms: number };
    try {
      first = await run();
      next = await run();
    } finally {
      process.kill(spawner, 'SIGCONT');
    }
    expect(first.parent).toBe(String(process.pid));
    expect(first.ms).toBeGreaterThanOrEqual(2_900);
    expect(first.ms).toBeLessThan(8_000);
    expect(next.parent).toBe(String(process.pid));
    expect(next.ms).toBeLessThan(2_000);
    // running again: it hands over the tree it was asked for, which is killed, then takes trees again
    let parent = '';
    for (let i = 0; i < 20 && parent !== String(spawner); i++) {
      parent = (await run()).parent;
      if (parent !== String(spawner)) await sleep(250);
    }
    expect(parent).toBe(String(spawner));
    for (let i = 0; i < 100 && childrenOf(spawner).length > 0; i++) await sleep(50);
    expect(childrenOf(spawner)).toEqual([]);
  }, 40_000);
});
