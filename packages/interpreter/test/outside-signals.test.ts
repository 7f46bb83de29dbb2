/**
 * The outside world stops a process we start through: a start must still
 * end within the interpreter's startup deadline with a typed error (the
 * batch waiting for it too), never hang, and once the process runs again
 * starts work and close() leaves nothing behind. Its own file: it stops
 * this test process's spawner. (A startup deadline longer than the 3 s the
 * spawner gets: spawner-stall.test.ts.)
 */
import { ExtFnError, Registry, Value } from '@improv/extfn-core';
import { spawnerPid, spawnerReady } from '@improv/extfn-sandbox';
import { describe, expect, test } from 'vitest';
import { childrenOf, fixtureRunner, hasPython, waitFor } from './helpers.js';

const STARTUP_MS = 1_500;

function setUp() {
  const runner = fixtureRunner({ maxWorkers: 2 }, { startupTimeoutMs: STARTUP_MS });
  const registry = new Registry({ runners: [runner], timeoutMs: 5_000 });
  for (const name of ['before', 'during', 'after']) {
    registry.register({
      name,
      language: 'fixture',
      pure: false,
      body: 'result = args[0] + 1',
      argTypes: ['number'],
      returnType: 'number',
    });
  }
  return { runner, registry };
}

const noSpawner = process.env.IMPROV_EXTFN_SPAWNER === '0' || !hasPython;

describe.skipIf(noSpawner)('a start through a spawner stopped from outside', () => {
  test('fails within the startup deadline as a typed error, not a hang; the tree launched late is killed', async () => {
    const { runner, registry } = setUp();
    let spawner = 0;
    try {
      expect(await registry.eval('before', [Value.number(1)])).toEqual(Value.number(2));
      expect(await spawnerReady()).toBe(true);
      spawner = spawnerPid()!;
      process.kill(spawner, 'SIGSTOP');
      let error: unknown;
      try {
        error = await registry.eval('during', [Value.number(1)]).catch((e: unknown) => e);
        // settles: typed row errors, or values where a start came 3 s after the first and
        // the host started its tree without the spawner (spawner-stall.test.ts)
        const batch = await registry.evalColumns('during', [Float64Array.of(1, 2)]);
        for (const e of batch.errors.values()) expect(ExtFnError.isInstance(e)).toBe(true);
        for (const row of [0, 1]) {
          if (!batch.errors.has(row)) expect(batch.values[row]).toBe(row + 2);
        }
      } finally {
        process.kill(spawner, 'SIGCONT');
      }
      expect(ExtFnError.isInstance(error)).toBe(true);
      expect((error as ExtFnError).message).toMatch(/did not start within 1500 ms/);
      // running again: calls work, and the trees it launched late went
      expect(await registry.eval('after', [Value.number(2)])).toEqual(Value.number(3));
      expect(await registry.eval('during', [Value.number(2)])).toEqual(Value.number(3));
    } finally {
      await registry.close();
    }
    expect(runner.workerPids()).toEqual([]);
    expect(runner.stats().live).toBe(0);
    expect(await waitFor(() => childrenOf(spawner).length === 0, 5_000)).toBe(true);
  });

  test('close() while the spawner is stopped ends (its trees are killed), not at SIGCONT', async () => {
    const { runner, registry } = setUp();
    let spawner = 0;
    let outcome: string;
    try {
      expect(await registry.eval('before', [Value.number(1)])).toEqual(Value.number(2));
      expect(runner.workerPids().length).toBe(1);
      expect(await spawnerReady()).toBe(true);
      spawner = spawnerPid()!;
      process.kill(spawner, 'SIGSTOP');
      // the tree's exit is the spawner's to report: a kill waits for it a second, then looks itself
      outcome = await Promise.race([
        registry.close().then(() => 'closed'),
        new Promise<string>((resolve) =>
          setTimeout(() => resolve('still closing after 10 s'), 10_000),
        ),
      ]);
    } finally {
      if (spawner) process.kill(spawner, 'SIGCONT');
      await registry.close();
    }
    expect(outcome).toBe('closed');
    expect(runner.workerPids()).toEqual([]);
    expect(await waitFor(() => childrenOf(spawner).length === 0, 5_000)).toBe(true);
  }, 20_000);
});
