/**
 * Integration: warm workers, batches and the pool with a real interpreter
 * (the fixture driver on /usr/bin/python3) under the strongest sandbox that
 * works here — evalBatch equals eval row by row, dead workers are replaced,
 * abort, the bound under load, idle shutdown, the lifetime CPU budget, one
 * function per worker.
 */
import { ExtFnError, type RowResult, sameValue, Value } from '@improv/extfn-core';
import { afterEach, describe, expect, test } from 'vitest';
import { alive, failure, fixtureRegistry, hasPython, waitFor } from './helpers.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});
function make(...args: Parameters<typeof fixtureRegistry>) {
  const made = fixtureRegistry(...args);
  cleanups.push(() => made.registry.close());
  return made;
}

const MIXED = [
  'x = args[0]',
  'if x == 13:',
  '    raise ValueError("nope")',
  'if x == 7:',
  '    while True:',
  '        pass',
  'if x == 21:',
  '    result = "twenty-one"',
  'elif x == 22:',
  '    result = True',
  'else:',
  '    result = x * 2',
].join('\n');

function sameOutcome(a: RowResult, b: RowResult): boolean {
  if (ExtFnError.isInstance(a) || ExtFnError.isInstance(b)) {
    return (
      ExtFnError.isInstance(a) &&
      ExtFnError.isInstance(b) &&
      a.kind === b.kind &&
      a.message === b.message
    );
  }
  return sameValue(a, b);
}

describe.skipIf(!hasPython)('warm workers and batches with a real interpreter', () => {
  test('evalBatch equals eval on each row: values, a raising row, a hanging row, wrong return types', async () => {
    const { registry } = make({ mixed: [MIXED, ['number'], 'number'] });
    const rows = Array.from({ length: 40 }, (_, i) => [Value.number(i)]);
    const progress: number[] = [];
    const batch = await registry.evalBatch('mixed', rows, {
      timeoutMs: 1_000,
      onProgress: (done) => progress.push(done),
    });
    expect(batch).toHaveLength(40);
    expect((batch[7] as ExtFnError).kind).toBe('Timeout');
    expect((batch[13] as ExtFnError).message).toBe('function mixed: ValueError: nope');
    expect((batch[21] as ExtFnError).kind).toBe('Runtime');
    expect((batch[22] as ExtFnError).kind).toBe('Runtime');
    expect(batch[39]).toEqual(Value.number(78));
    expect(progress.at(-1)).toBe(40);
    for (let i = 0; i < rows.length; i++) {
      let single: RowResult;
      try {
        single = await registry.eval('mixed', rows[i]!, { timeoutMs: 1_000 });
      } catch (error) {
        single = error as ExtFnError;
      }
      expect(
        sameOutcome(batch[i]!, single),
        `row ${i}: batch ${String(batch[i])} vs eval ${String(single)}`,
      ).toBe(true);
    }
  });

  test('two batches of different functions at once share a bound pool and both finish right', async () => {
    const { registry, runner } = make(
      {
        inc: ['result = args[0] + 1', ['number'], 'number'],
        neg: ['result = -args[0]', ['number'], 'number'],
      },
      { maxWorkers: 2 },
    );
    const rows = Array.from({ length: 20_000 }, (_, i) => [Value.number(i)]);
    const [inc, neg] = await Promise.all([
      registry.evalBatch('inc', rows),
      registry.evalBatch('neg', rows),
    ]);
    expect(inc.every((r, i) => (r as { value: number }).value === i + 1)).toBe(true);
    expect(neg.every((r, i) => Object.is((r as { value: number }).value, -i))).toBe(true);
    expect(runner.stats().peak).toBeLessThanOrEqual(2);
  });

  test('a worker that dies is replaced; the next call does not notice', async () => {
    const { registry, runner } = make({
      crash: ['if args[0] == 1:\n    os._exit(3)\nresult = args[0]', ['number'], 'number'],
    });
    expect(await registry.eval('crash', [Value.number(2)])).toEqual(Value.number(2));
    const [pid] = runner.workerPids();
    const error = await failure(registry.eval('crash', [Value.number(1)]));
    expect(error.kind).toBe('Runtime');
    expect(error.message).toMatch(/exited with code 3/);
    expect(await registry.eval('crash', [Value.number(5)])).toEqual(Value.number(5));
    expect(runner.workerPids()).not.toContain(pid);
    // Killed from outside: also replaced.
    const [victim] = runner.workerPids();
    process.kill(victim!, 'SIGKILL');
    expect(await waitFor(() => !alive(victim!))).toBe(true);
    expect(await registry.eval('crash', [Value.number(6)])).toEqual(Value.number(6));
    expect(runner.stats().killed).toBeGreaterThanOrEqual(2);
  });

  test('abort cancels a running call and kills its worker; queued calls are cancelled too', async () => {
    const { registry, runner } = make(
      { loop: ['while True:\n    pass', [], 'number'] },
      { maxWorkers: 1 },
    );
    const controller = new AbortController();
    const running = registry.eval('loop', [], { signal: controller.signal, timeoutMs: 20_000 });
    const queued = registry.eval('loop', [], { signal: controller.signal, timeoutMs: 20_000 });
    expect(
      await waitFor(() => runner.workerPids().length === 1 && runner.stats().queued === 1),
    ).toBe(true);
    const [pid] = runner.workerPids();
    controller.abort();
    const [first, second] = await Promise.all([failure(running), failure(queued)]);
    for (const error of [first, second]) {
      expect(error.kind).toBe('Runtime');
      expect(error.aborted).toBe(true);
    }
    expect(await waitFor(() => !alive(pid!))).toBe(true);
    expect(runner.stats().queued).toBe(0);
  });

  test('abort cancels a batch: finished rows keep their values, the rest are aborted', async () => {
    const { registry } = make({
      slow: ['if args[0] >= 3:\n    time.sleep(30)\nresult = args[0]', ['number'], 'number'],
    });
    const controller = new AbortController();
    const rows = Array.from({ length: 6 }, (_, i) => [Value.number(i)]);
    setTimeout(() => controller.abort(), 1_000);
    const results = await registry.evalBatch('slow', rows, {
      signal: controller.signal,
      timeoutMs: 20_000,
    });
    expect(results.slice(3).every((r) => ExtFnError.isInstance(r) && r.aborted === true)).toBe(
      true,
    );
  });

  test('the pool never exceeds its bounds under 1,000 concurrent evals of three functions', async () => {
    const { registry, runner } = make(
      {
        inc: ['result = args[0] + 1', ['number'], 'number'],
        dec: ['result = args[0] - 1', ['number'], 'number'],
        dbl: ['result = args[0] * 2', ['number'], 'number'],
      },
      { maxWorkers: 2, maxLiveWorkers: 2 }, // three functions, two processes: evictions
    );
    let peakSeen = 0;
    const names = ['inc', 'dec', 'dbl'] as const;
    const results = await Promise.all(
      Array.from({ length: 1000 }, async (_, i) => {
        const name = names[i % 3]!;
        const out = await registry.eval(name, [Value.number(i)]);
        peakSeen = Math.max(peakSeen, runner.workerPids().length);
        return [name, i, (out as { value: number }).value] as const;
      }),
    );
    for (const [name, i, value] of results) {
      expect(value).toBe(name === 'inc' ? i + 1 : name === 'dec' ? i - 1 : i * 2);
    }
    expect(runner.stats().peak).toBeLessThanOrEqual(2);
    expect(peakSeen).toBeLessThanOrEqual(2);
  });

  test('idle workers shut down; one-shot calls leave no worker', async () => {
    const { registry, runner } = make(
      { id: ['result = args[0]', ['number'], 'number'] },
      { idleMs: 200 },
    );
    await registry.eval('id', [Value.number(1)], { mode: 'oneShot' });
    expect(runner.stats()).toMatchObject({ started: 1, live: 0 });
    await registry.eval('id', [Value.number(1)]);
    expect(runner.stats().live).toBe(1);
    const [pid] = runner.workerPids();
    expect(await waitFor(() => runner.stats().live === 0)).toBe(true);
    expect(await waitFor(() => !alive(pid!))).toBe(true);
  });

  test('a warm worker outlives the CPU a single call may use: the limit is per worker life, the deadline per call', async () => {
    const burn =
      'end = time.process_time() + 0.1\nwhile time.process_time() < end:\n    pass\nresult = args[0]';
    const { registry, runner } = make({ burn: [burn, ['number'], 'number'] }, { maxWorkers: 1 });
    // 30 calls of 0.1 s CPU each: 3 s in one process, past the 2 s RLIMIT_CPU a 1 s one-shot call gets.
    for (let i = 0; i < 30; i++) {
      expect(await registry.eval('burn', [Value.number(i)], { timeoutMs: 1_000 })).toEqual(
        Value.number(i),
      );
    }
    expect(runner.stats()).toMatchObject({ started: 1, killed: 0 });
  });

  test('a warm worker is retired once its busy time nears its lifetime CPU budget', async () => {
    const { registry, runner } = make(
      { nap: ['time.sleep(0.3)\nresult = 1', [], 'number'] },
      { workerCpuSeconds: 1 },
    );
    await registry.eval('nap', []);
    await registry.eval('nap', []); // 0.6 s busy: past half of the 1 s budget
    expect(runner.stats()).toMatchObject({ started: 1, live: 0 });
    await registry.eval('nap', []);
    expect(runner.stats().started).toBe(2);
  });

  test('a worker serves one function: two functions with the same body never share one', async () => {
    const { registry, runner } = make({
      first: ['import sys\nresult = id(sys)', [], 'number'],
      second: ['import sys\nresult = id(sys)', [], 'number'],
    });
    await registry.eval('first', []);
    await registry.eval('second', []);
    expect(runner.stats().started).toBe(2);
    await registry.eval('first', []);
    expect(runner.stats().started).toBe(2);
  });
});
