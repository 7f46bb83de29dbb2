/**
 * The spawner stopped from outside, with a startup deadline longer than the
 * few seconds the spawner gets to hand a tree over: a start goes on without
 * it (the host starts the tree itself) and the call works; the starts after
 * it do not wait for it at all; once it runs again, the tree it launched late
 * is killed and it starts trees again. Its own file: it stops this test
 * process's spawner (outside-signals.test.ts: a startup deadline shorter
 * than that).
 */
import { readFileSync } from 'node:fs';
import { Registry, Value } from '@improv/extfn-core';
import { spawnerPid, spawnerReady } from '@improv/extfn-sandbox';
import { describe, expect, test } from 'vitest';
import { childrenOf, fixtureRunner, hasPython, waitFor } from './helpers.js';

const parentOf = (pid: number) => {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
};

const STARTUP_MS = 12_000;

const noSpawner = process.env.IMPROV_EXTFN_SPAWNER === '0' || !hasPython;

describe.skipIf(noSpawner)('a start through a spawner stopped from outside', () => {
  test('goes on without it within seconds, and later starts do not wait for it', async () => {
    const runner = fixtureRunner({ maxWorkers: 4 }, { startupTimeoutMs: STARTUP_MS });
    const registry = new Registry({ runners: [runner], timeoutMs: 20_000 });
    /** Calls a new function; the pid of the worker started for it. */
    const callNew = async (name: string) => {
      registry.register({
        name,
        language: 'fixture',
        pure: false,
        body: 'result = args[0] + 1',
        argTypes: ['number'],
        returnType: 'number',
      });
      const before = runner.workerPids();
      expect(await registry.eval(name, [Value.number(1)])).toEqual(Value.number(2));
      return runner.workerPids().find((pid) => !before.includes(pid))!;
    };
    let spawner = 0;
    try {
      await callNew('before');
      expect(await spawnerReady()).toBe(true);
      spawner = spawnerPid()!;
      expect(parentOf(await callNew('through'))).toBe(spawner);
      process.kill(spawner, 'SIGSTOP');
      let during: number;
      let next: number;
      try {
        let began = Date.now();
        // started by this process, not by the stopped spawner
        expect(parentOf(await callNew('during'))).toBe(process.pid);
        during = Date.now() - began;
        began = Date.now();
        expect(parentOf(await callNew('next'))).toBe(process.pid);
        next = Date.now() - began;
      } finally {
        process.kill(spawner, 'SIGCONT');
      }
      // the spawner gets 3 s; without that, the start failed at its 12 s deadline
      expect(during).toBeLessThan(8_000);
      expect(next).toBeLessThan(2_000); // no second wait
      // running again: it hands over the tree it launched late (killed), then starts trees again
      let parent = 0;
      for (let i = 0; i < 20 && parent !== spawner; i++) {
        parent = parentOf(await callNew(`after${i}`));
        if (parent !== spawner) await new Promise((resolve) => setTimeout(resolve, 250));
      }
      expect(parent).toBe(spawner);
    } finally {
      await registry.close();
    }
    expect(runner.workerPids()).toEqual([]);
    expect(await waitFor(() => childrenOf(spawner).length === 0, 5_000)).toBe(true);
  }, 40_000);
});
