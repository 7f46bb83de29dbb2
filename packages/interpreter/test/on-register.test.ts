/**
 * `onRegister` (runner.ts): registering a function begins, in the background,
 * what a host process does once before its first call — the interpreter
 * lookup, the sandbox probe, which boots the spawner — and starts no worker.
 * Fake workers behind the runner's launch seam; the probe is the real one.
 * Its own file: the spawner check needs a process whose sandbox is untouched.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { type ExternalFn, ExtFnError, Registry, Value } from '@improv/extfn-core';
import { probeSandbox, spawnerPid } from '@improv/extfn-sandbox';
import { describe, expect, test } from 'vitest';
import { createRunnerWithLaunch } from '../src/runner.js';
import type { InterpreterRunnerOptions, InterpreterSpec } from '../src/types.js';
import { SummingWorker } from './summing-worker.js';

const descriptor = (name: string): ExternalFn => ({
  name,
  language: 'fake',
  body: name,
  argTypes: ['number', 'number'],
  returnType: 'number',
  pure: false,
});

/** A runner over fake workers whose interpreter lookup is counted; `found` false: nothing found. */
function setUp(options: InterpreterRunnerOptions, found = true) {
  let lookups = 0;
  const spec: InterpreterSpec = {
    language: 'fake',
    packageName: '@test/fake',
    resolveInterpreter: async () => {
      lookups++;
      return found ? { path: '/nonexistent/fake-interpreter' } : undefined;
    },
    args: [],
    driverSource: '',
  };
  const runner = createRunnerWithLaunch(
    spec,
    { maxWorkers: 2, ...options },
    async (key) => new SummingWorker(key),
  );
  const registry = new Registry({ runners: [runner], cache: false, timeoutMs: 5_000 });
  return { registry, runner, lookups: () => lookups };
}

/** Why the probe of `unsandboxed` cannot boot the spawner here, or '' when it can. */
const noSpawner =
  process.env.IMPROV_EXTFN_SPAWNER === '0'
    ? 'IMPROV_EXTFN_SPAWNER=0 turns the spawner off'
    : ['prlimit', 'setpriv'].every((tool) =>
          (process.env.PATH ?? '').split(':').some((dir) => dir && existsSync(join(dir, tool))),
        )
      ? ''
      : 'util-linux prlimit/setpriv are not on PATH, so the probe stops before the spawner';

describe('onRegister', () => {
  test('a registration looks the interpreter up once, in the background, and starts no worker; the first call finds it done', async () => {
    const { registry, runner, lookups } = setUp({ policy: 'trusted' });
    expect(lookups()).toBe(0);
    registry.register(descriptor('f'));
    registry.register(descriptor('g'));
    expect(lookups()).toBe(1);
    await new Promise((resolve) => setImmediate(resolve));
    expect(runner.stats().started).toBe(0);
    expect(await registry.eval('f', [Value.number(1), Value.number(2)])).toEqual(Value.number(3));
    expect(await registry.evalBatch('g', [[Value.number(2), Value.number(2)]])).toEqual([
      Value.number(4),
    ]);
    expect(lookups()).toBe(1);
    await registry.close();
  });

  test('a lookup that finds nothing is not remembered: the call looks again and reports LanguageUnavailable', async () => {
    const { registry, runner, lookups } = setUp({ policy: 'trusted' }, false);
    registry.register(descriptor('f'));
    await new Promise((resolve) => setImmediate(resolve));
    expect(lookups()).toBe(1);
    const error = await registry.eval('f', [Value.number(1), Value.number(2)]).catch((e) => e);
    expect(ExtFnError.isInstance(error) && error.kind).toBe('LanguageUnavailable');
    expect(lookups()).toBe(2);
    expect(runner.stats().started).toBe(0);
    await registry.close();
  });

  test.skipIf(noSpawner !== '')(
    `a registration under a policy that confines starts the sandbox's probe, which boots the spawner${noSpawner && ` (skipped: ${noSpawner})`}`,
    async () => {
      expect(spawnerPid()).toBeUndefined(); // nothing of the sandbox has run in this process yet
      const { registry, runner } = setUp({ policy: 'unsandboxed' });
      registry.register(descriptor('f'));
      // the probe's synchronous start: it has asked for the spawner before register returned
      expect(spawnerPid()).toEqual(expect.any(Number));
      const probe = await probeSandbox({ policy: 'unsandboxed' });
      expect(probe.ok, probe.summary).toBe(true);
      expect(runner.stats().started).toBe(0);
      expect(await registry.eval('f', [Value.number(1), Value.number(2)])).toEqual(Value.number(3));
      await registry.close();
    },
  );
});
