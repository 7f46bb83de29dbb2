/**
 * The columnar path (`registry.evalColumns` → `runner.callColumns`): binary
 * f64 frames from column slices, and JSON frames from columns when f64 is
 * off, against `evalBatch` row by row. Restricted sandbox, /usr/bin/python3.
 */
import { type ColumnResults, ExtFnError, type RowResult, Value } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import {
  alive,
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
  'elif x == 30:',
  '    result = float("nan")',
  'elif x == 31:',
  '    result = float("-inf")',
  'elif x == 32:',
  '    result = -0.0',
  'elif x == 33:',
  '    result = 2**1100',
  'else:',
  '    result = x * args[1]',
].join('\n');

/** Row i of a batch and of a columns call are the same outcome: same value (Object.is), or same error. */
function expectSame(batch: RowResult[], columns: ColumnResults, label: string) {
  expect(columns.values.length, label).toBe(batch.length);
  batch.forEach((row, i) => {
    const error = columns.errors.get(i);
    if (ExtFnError.isInstance(row)) {
      expect(error, `${label} row ${i}: expected ${row.message}`).toBeDefined();
      expect([error!.kind, error!.message], `${label} row ${i}`).toEqual([row.kind, row.message]);
      expect(Number.isNaN(columns.values[i]), `${label} row ${i} is NaN`).toBe(true);
    } else {
      expect(error, `${label} row ${i}`).toBeUndefined();
      expect(
        Object.is(columns.values[i], (row as { value: number }).value),
        `${label} row ${i}`,
      ).toBe(true);
    }
  });
  expect([...columns.errors.keys()].every((i) => i >= 0 && i < batch.length)).toBe(true);
}

describe.skipIf(!restrictedOk)(
  `python evalColumns (${restrictedOk ? 'Restricted' : noRestricted})`,
  () => {
    test('evalColumns equals evalBatch row by row: values, NaN/±Infinity/-0, a raising row, a hanging row, wrong-typed results', async () => {
      const xs = [
        ...Array.from({ length: 40 }, (_, i) => i),
        Number.NaN,
        Number.POSITIVE_INFINITY,
        Number.NEGATIVE_INFINITY,
        -0,
        5e-324,
        1.5e300,
      ];
      const ys = xs.map((_, i) => (i % 5 === 0 ? -1 : i % 7 === 0 ? -0 : 2));
      const columns = [Float64Array.from(xs), Float64Array.from(ys)];
      const rows = xs.map((x, i) => [Value.number(x), Value.number(ys[i]!)]);
      const options = { timeoutMs: 1_000 };
      for (const f64 of [true, false]) {
        const { registry } = restricted(
          { mixed: [MIXED, ['number', 'number'], 'number'] },
          { f64 },
        );
        const batch = await registry.evalBatch('mixed', rows, options);
        const progress: number[] = [];
        const outcome = await registry.evalColumns('mixed', columns, {
          ...options,
          onProgress: (done, total) => {
            expect(total).toBe(xs.length);
            progress.push(done);
          },
        });
        expectSame(batch, outcome, f64 ? 'f64 frames' : 'JSON frames');
        // What each row gives, as eval gives it
        expect(outcome.values[3]).toBe(6);
        expect(outcome.errors.get(7)?.kind).toBe('Timeout');
        expect(outcome.errors.get(13)?.message).toBe('function mixed: ValueError: nope');
        expect(outcome.errors.get(21)?.message).toMatch(/expected number, got str/);
        expect(outcome.errors.get(22)?.message).toMatch(/expected number, got bool/);
        expect(outcome.errors.get(33)?.message).toMatch(/too large for a float/);
        expect(Number.isNaN(outcome.values[30])).toBe(true);
        expect(outcome.errors.has(30)).toBe(false);
        expect(outcome.values[31]).toBe(Number.NEGATIVE_INFINITY);
        expect(Object.is(outcome.values[32], -0)).toBe(true);
        expect(Object.is(outcome.values[43], -0)).toBe(true); // a -0 argument stays -0 (× 2)
        expect(outcome.values[41]).toBe(Number.POSITIVE_INFINITY * ys[41]!);
        expect(outcome.errors.size).toBe(5);
        // progress rises to the total
        expect(progress.at(-1)).toBe(xs.length);
        expect(progress.every((d, i) => i === 0 || d >= progress[i - 1]!)).toBe(true);
      }
    });

    test('100,000 rows go in chunks over the workers and equal the per-row arithmetic', async () => {
      const { registry, runner } = restricted(
        { fma: ['result = args[0] * args[1] + 0.25', ['number', 'number'], 'number'] },
        { maxWorkers: 2 },
      );
      const n = 100_000;
      const a = Float64Array.from({ length: n }, (_, i) => i);
      const b = Float64Array.from({ length: n }, (_, i) => (i % 17) - 8);
      let reports = 0;
      const { values, errors } = await registry.evalColumns('fma', [a, b], {
        onProgress: () => reports++,
      });
      expect(errors.size).toBe(0);
      for (let i = 0; i < n; i++) {
        if (values[i] !== a[i]! * b[i]! + 0.25) throw new Error(`row ${i}: ${values[i]}`);
      }
      expect(reports).toBeGreaterThan(2); // chunks, not one request for all
      expect(runner.stats().peak).toBeLessThanOrEqual(2);
    });

    test('abort: finished rows keep their values, the rest are aborted, the worker is killed', async () => {
      // Row 0 goes alone (a fresh runner starts with chunks of one row); rows 1 and 2 may
      // share a chunk with the sleeping row 3, so they end either way.
      const { registry, runner } = restricted(
        {
          slow: [
            'import time\nif args[0] >= 3:\n    time.sleep(30)\nresult = args[0] * 10',
            ['number'],
            'number',
          ],
        },
        { maxWorkers: 1 },
      );
      const controller = new AbortController();
      const column = Float64Array.from({ length: 6 }, (_, i) => i);
      setTimeout(() => controller.abort(), 1_000);
      const pending = registry.evalColumns('slow', [column], {
        signal: controller.signal,
        timeoutMs: 20_000,
      });
      expect(await waitFor(() => runner.workerPids().length === 1)).toBe(true);
      const [pid] = runner.workerPids();
      const started = performance.now();
      const { values, errors } = await pending;
      expect(performance.now() - started).toBeLessThan(5_000);
      expect(values[0]).toBe(0);
      expect(errors.has(0)).toBe(false);
      for (let i = 1; i < 3; i++) {
        const ok = values[i] === i * 10 && !errors.has(i);
        expect(ok || errors.get(i)?.aborted === true, `row ${i}`).toBe(true);
      }
      for (let i = 3; i < 6; i++) {
        expect(Number.isNaN(values[i]), `row ${i}`).toBe(true);
        expect(errors.get(i)?.aborted, `row ${i}`).toBe(true);
      }
      expect(await waitFor(() => !alive(pid!))).toBe(true);
    });

    test('one-shot mode and a body with a syntax error go through the same API', async () => {
      const { registry, runner } = restricted({
        add: ['result = args[0] + args[1]', ['number', 'number'], 'number'],
        broken: ['result = (', ['number'], 'number'],
      });
      const a = Float64Array.of(1, 2);
      const b = Float64Array.of(0.5, -0);
      const once = await registry.evalColumns('add', [a, b], { mode: 'oneShot' });
      expect([...once.values]).toEqual([1.5, 2]);
      expect(runner.stats()).toMatchObject({ started: 2, live: 0 });
      const broken = await registry.evalColumns('broken', [a]);
      expect(broken.errors.size).toBe(2);
      expect(broken.errors.get(0)?.message).toMatch(/SyntaxError/);
      expect(Number.isNaN(broken.values[1])).toBe(true);
    });
  },
);
