/**
 * A language's default options (`InterpreterSpec.defaults`) apply under the
 * caller's; and the columnar API over a driver without f64 (JSON frames
 * written from the columns) gives what evalBatch gives.
 */
import { ExtFnError, Registry, Value } from '@improv/extfn-core';
import { afterEach, describe, expect, test } from 'vitest';
import { createInterpreterRunner, type InterpreterRunnerOptions } from '../src/index.js';
import {
  BOOTSTRAP,
  FIXTURE_DRIVER,
  fixtureRegistry,
  hasPython,
  PYTHON,
  policy,
  waitFor,
} from './helpers.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

function withDefaults(options: InterpreterRunnerOptions) {
  const runner = createInterpreterRunner(
    {
      language: 'fixture',
      packageName: '@improv/extfn-fixture',
      resolveInterpreter: async () => ({ path: PYTHON }),
      args: ['-s', '-S', '-c', BOOTSTRAP],
      driverSource: FIXTURE_DRIVER,
      defaults: { maxWorkers: 1, idleMs: 100 },
    },
    { policy, ...options },
  );
  const registry = new Registry({ runners: [runner], timeoutMs: 5_000 });
  cleanups.push(() => registry.close());
  registry.register({
    name: 'sq',
    language: 'fixture',
    body: 'result = args[0] * args[0]',
    argTypes: ['number'],
    returnType: 'number',
    pure: false,
  });
  return { registry, runner };
}

const rows = Array.from({ length: 2_000 }, (_, i) => [Value.number(i)]);

describe.skipIf(!hasPython)('per-language defaults', () => {
  test("the spec's defaults apply when the caller sets nothing (or undefined)", async () => {
    const { registry, runner } = withDefaults({ maxWorkers: undefined, idleMs: undefined });
    const results = await registry.evalBatch('sq', rows);
    expect(results.every((r, i) => (r as { value: number }).value === i * i)).toBe(true);
    expect(runner.stats().peak).toBe(1); // defaults.maxWorkers
    expect(await waitFor(() => runner.stats().live === 0, 2_000)).toBe(true); // defaults.idleMs
  });

  test("the caller's options win over the spec's defaults", async () => {
    const { registry, runner } = withDefaults({ maxWorkers: 2, idleMs: 60_000 });
    // concurrent single calls each want a worker (a small batch would use one): the bound stops them
    await Promise.all(rows.slice(0, 4).map((args) => registry.eval('sq', args)));
    expect(runner.stats().peak).toBe(2);
    await new Promise((r) => setTimeout(r, 400));
    expect(runner.stats().live).toBeGreaterThan(0);
  });
});

describe.skipIf(!hasPython)('callColumns over a driver without f64', () => {
  test('JSON frames written from the columns give what evalBatch gives', async () => {
    const { registry } = fixtureRegistry({
      f: [
        'if args[0] == 3:\n    raise ValueError("three")\nresult = args[0] * args[1]',
        ['number', 'number'],
        'number',
      ],
    });
    cleanups.push(() => registry.close());
    const a = Float64Array.from({ length: 500 }, (_, i) => i);
    const b = Float64Array.from({ length: 500 }, (_, i) => (i % 3) - 1.5);
    const batch = await registry.evalBatch(
      'f',
      Array.from(a, (x, i) => [Value.number(x), Value.number(b[i]!)]),
    );
    const { values, errors } = await registry.evalColumns('f', [a, b]);
    batch.forEach((row, i) => {
      if (ExtFnError.isInstance(row)) {
        expect(errors.get(i)?.message).toBe(row.message);
        expect(Number.isNaN(values[i])).toBe(true);
      } else {
        expect(values[i]).toBe((row as { value: number }).value);
      }
    });
    expect(errors.get(3)?.message).toBe('function f: ValueError: three');
    expect(errors.size).toBe(1);
  });

  test('a function that is not all numbers is refused by the runner itself', async () => {
    const { registry, runner } = fixtureRegistry({ t: ['result = "x"', ['number'], 'text'] });
    cleanups.push(() => registry.close());
    const fn = registry.get('t')!;
    await expect(
      runner.callColumns(fn, [Float64Array.of(1)], { timeoutMs: 1_000 }),
    ).rejects.toThrow(/all numbers/);
    expect(runner.stats().started).toBe(0);
  });
});
