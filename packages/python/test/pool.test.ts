/**
 * Issue 7 for Python: warm workers, batches with hang isolation, the bounded
 * pool, abort and close. Restricted sandbox, /usr/bin/python3.
 */
import { ExtFnError, type RowResult, sameValue, Value } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import {
  alive,
  failure,
  noRestricted,
  type registryWith,
  restrictedOk,
  scopedRegistry,
  waitFor,
} from './helpers.js';

const restricted = (
  fns: Parameters<typeof registryWith>[1],
  options: Parameters<typeof registryWith>[2] = {},
) => scopedRegistry('restricted', fns, options);

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

describe.skipIf(!restrictedOk)(
  `python warm workers and batches (${restrictedOk ? 'Restricted' : noRestricted})`,
  () => {
    test('evalBatch equals eval on each row: values, a raising row, a hanging row, wrong return types', async () => {
      const { registry } = restricted({ mixed: [MIXED, ['number'], 'number'] });
      const rows = Array.from({ length: 40 }, (_, i) => [Value.number(i)]);
      const progress: number[] = [];
      const batch = await registry.evalBatch('mixed', rows, {
        timeoutMs: 1_000,
        onProgress: (done) => progress.push(done),
      });
      expect(batch).toHaveLength(40);
      expect((batch[7] as ExtFnError).kind).toBe('Timeout');
      expect((batch[13] as ExtFnError).message).toBe('function mixed: ValueError: nope');
      expect((batch[21] as ExtFnError).message).toMatch(
        /result expected number, got str 'twenty-one'/,
      );
      expect((batch[22] as ExtFnError).message).toMatch(/result expected number, got bool True/);
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

    test('the binary f64 path gives what the JSON path gives, per-row errors included', async () => {
      const body =
        'import math\nif args[0] < 0:\n    raise ValueError("negative")\nresult = math.sqrt(args[0]) if args[1] else args[0] / args[1]';
      const { registry } = restricted({
        f64: [body, ['number', 'number'], 'number'],
        json: [body, ['number', 'enum'], 'number'],
      });
      const numbers = [4, -1, 9, Number.NaN, Infinity, -0, 0, 2.5];
      const flags = [1, 0, 1, 1, 1, 1, 0, 0];
      const f64 = await registry.evalBatch(
        'f64',
        numbers.map((n, i) => [Value.number(n), Value.number(flags[i]!)]),
      );
      const json = await registry.evalBatch(
        'json',
        numbers.map((n, i) => [Value.number(n), Value.enum(flags[i]!)]),
      );
      for (let i = 0; i < numbers.length; i++) {
        const a = f64[i]!;
        const b = json[i]!;
        if (ExtFnError.isInstance(a) || ExtFnError.isInstance(b)) {
          expect(
            ExtFnError.isInstance(a) &&
              ExtFnError.isInstance(b) &&
              a.message.slice(a.message.indexOf(':')) === b.message.slice(b.message.indexOf(':')),
            `row ${i}`,
          ).toBe(true);
        } else {
          expect(sameValue(a, b), `row ${i}`).toBe(true);
        }
      }
      expect((f64[1] as ExtFnError).message).toBe('function f64: ValueError: negative');
      expect((f64[6] as ExtFnError).message).toBe(
        'function f64: ZeroDivisionError: float division by zero',
      );
    });

    test('numbers survive JSON frames exactly as f64 frames: integers, huge, tiny, NaN, ±Infinity, -0', async () => {
      const numbers = [
        0,
        -0,
        1,
        -7,
        1e21,
        1.5e300,
        -1e-300,
        5e-324,
        2 ** 53 + 2,
        123456789012345680000,
        0.1,
        Number.NaN,
        Infinity,
        -Infinity,
      ];
      const rows = numbers.map((n) => [Value.number(n)]);
      for (const f64 of [true, false]) {
        const { registry } = restricted(
          { id: ['result = args[0]', ['number'], 'number'] },
          { f64 },
        );
        const results = await registry.evalBatch('id', rows);
        results.forEach((r, i) => {
          expect(
            Object.is((r as { value: number }).value, numbers[i]),
            `${numbers[i]} with f64 ${f64}`,
          ).toBe(true);
        });
      }
    });

    test('two batches of different functions at once share a bound pool and both finish right', async () => {
      const { registry, runner } = restricted(
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
      const { registry, runner } = restricted({
        crash: [
          'import os\nif args[0] == 1:\n    os._exit(3)\nresult = args[0]',
          ['number'],
          'number',
        ],
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

    test('no worker survives close()', async () => {
      const { registry, runner } = restricted({
        a: ['result = args[0] + 1', ['number'], 'number'],
        b: ['result = args[0] + 2', ['number'], 'number'],
      });
      await Promise.all([
        registry.eval('a', [Value.number(1)]),
        registry.eval('b', [Value.number(1)]),
      ]);
      await registry.evalBatch(
        'a',
        Array.from({ length: 1000 }, (_, i) => [Value.number(i)]),
      );
      const pids = runner.workerPids();
      expect(pids.length).toBeGreaterThan(0);
      await registry.close();
      for (const pid of pids) expect(alive(pid), `worker ${pid}`).toBe(false);
      expect(runner.stats().live).toBe(0);
    });

    test('abort cancels a running call and kills its worker; queued calls are cancelled too', async () => {
      const { registry, runner } = restricted(
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
      const started = performance.now();
      controller.abort();
      const [first, second] = await Promise.all([failure(running), failure(queued)]);
      expect(performance.now() - started).toBeLessThan(2_000);
      for (const error of [first, second]) {
        expect(error.kind).toBe('Runtime');
        expect(error.aborted).toBe(true);
      }
      expect(await waitFor(() => !alive(pid!))).toBe(true);
      expect(runner.stats().queued).toBe(0);
    });

    test('abort cancels a batch: finished rows keep their values, the rest are aborted', async () => {
      const { registry } = restricted({
        slow: [
          'import time\nif args[0] >= 3:\n    time.sleep(30)\nresult = args[0]',
          ['number'],
          'number',
        ],
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

    test('the pool never exceeds its bound under 1,000 concurrent evals', async () => {
      const { registry, runner } = restricted(
        {
          inc: ['result = args[0] + 1', ['number'], 'number'],
          dec: ['result = args[0] - 1', ['number'], 'number'],
          dbl: ['result = args[0] * 2', ['number'], 'number'],
        },
        { maxWorkers: 2 },
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
      const { registry, runner } = restricted(
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
        'import time\nend = time.process_time() + 0.1\nwhile time.process_time() < end:\n    pass\nresult = args[0]';
      const { registry, runner } = restricted(
        { burn: [burn, ['number'], 'number'] },
        { maxWorkers: 1 },
      );
      // 30 calls of 0.1 s CPU each: 3 s in one process, past the 2 s RLIMIT_CPU a 1 s one-shot call gets.
      for (let i = 0; i < 30; i++) {
        expect(await registry.eval('burn', [Value.number(i)], { timeoutMs: 1_000 })).toEqual(
          Value.number(i),
        );
      }
      expect(runner.stats()).toMatchObject({ started: 1, killed: 0 });
    });

    test('a warm worker is retired once its busy time nears its lifetime CPU budget', async () => {
      const { registry, runner } = restricted(
        { nap: ['import time\ntime.sleep(0.3)\nresult = 1', [], 'number'] },
        { workerCpuSeconds: 1 },
      );
      await registry.eval('nap', []);
      await registry.eval('nap', []); // 0.6 s busy: past half of the 1 s budget
      expect(runner.stats()).toMatchObject({ started: 1, live: 0 });
      await registry.eval('nap', []);
      expect(runner.stats().started).toBe(2);
    });

    test('a worker serves one function: two functions with the same body never share one', async () => {
      const { registry, runner } = restricted({
        first: ['import sys\nresult = id(sys)', [], 'number'],
        second: ['import sys\nresult = id(sys)', [], 'number'],
      });
      await registry.eval('first', []);
      await registry.eval('second', []);
      expect(runner.stats().started).toBe(2);
      await registry.eval('first', []);
      expect(runner.stats().started).toBe(2);
    });

    test('a row that prints too much fails alone; the batch goes on', async () => {
      const { registry } = restricted({
        loud: [
          'if args[0] == 2:\n    print("x" * (2 * 1024 * 1024))\nresult = args[0]',
          ['number'],
          'number',
        ],
      });
      const results = await registry.evalBatch(
        'loud',
        [0, 1, 2, 3].map((n) => [Value.number(n)]),
      );
      expect(results[0]).toEqual(Value.number(0));
      expect((results[2] as ExtFnError).limit).toBe('output');
      expect(results[3]).toEqual(Value.number(3));
    });

    test('random is reseeded per row: a row gives the same result in a batch and alone', async () => {
      const { registry } = restricted({
        rnd: ['import random\nresult = random.random() + args[0]', ['number'], 'number'],
      });
      const batch = await registry.evalBatch(
        'rnd',
        [0, 0, 0].map((n) => [Value.number(n)]),
      );
      const single = await registry.eval('rnd', [Value.number(0)], { mode: 'oneShot' });
      expect(batch.every((r) => sameValue(r as Value, single))).toBe(true);
    });
  },
);
