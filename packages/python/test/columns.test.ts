/**
 * The columnar path (`registry.evalColumns` → `runner.callColumns`): binary
 * f64 frames from column slices, and JSON frames from columns when f64 is
 * off, against `evalBatch` row by row; and `callcols`, the binary columns of
 * every other type, against JSON frames and `eval`, edge values, error cells
 * and cells that do not fit a column included. Restricted sandbox, /usr/bin/python3.
 */
import {
  type Column,
  type ColumnResults,
  ExtFnError,
  newColumn,
  type RowResult,
  readCell,
  Value,
  type ValueType,
  writeCell,
} from '@improv/extfn-core';
import { afterAll, describe, expect, test } from 'vitest';
import {
  alive,
  noRestricted,
  registryWith,
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

// ---- callcols: binary columns of every type -------------------------------------------

const SAMPLES: Record<Exclude<ValueType, 'number'> | 'number', Value[]> = {
  number: [0, -0, 1.5, -1e300, 5e-324, Number.NaN, Infinity, -Infinity].map(Value.number),
  boolean: [true, false].map(Value.boolean),
  enum: [0, 1, 4_294_967_295].map(Value.enum),
  text: ['', 'hello', 'nul:\0:end', 'non-BMP 𝄞😀', 'é', '\uD800', 'a\uDFFFb', 'x\uD834'].map(
    Value.text,
  ),
  datetime: [
    '0001-01-01T00:00:00Z',
    '9999-12-31T23:59:59.999999999Z',
    '1677-09-21T00:12:43.145224192Z',
    '1677-09-21T00:12:43.145224191Z',
    '2262-04-11T23:47:16.854775807Z',
    '2262-04-11T23:47:16.854775808Z',
    '1969-12-31T23:59:59.999999999Z',
    '2020-01-01T00:00:00.000000001Z',
    '2025-03-31T23:59:59.123Z',
  ].map((iso) => Value.datetime(iso)),
};
const TYPES = Object.keys(SAMPLES) as ValueType[];

// Every row of every type through one body: modes in the text argument pick a
// value, a raise, a result of the wrong type, an unset result, or too much output.
const EVERY = [
  'mode = args[1]',
  'if mode == "raise":',
  '    raise ValueError("nope %r" % (args[0],))',
  'elif mode == "wrong":',
  '    result = [mode]',
  'elif mode == "float":',
  '    result = 2.5',
  'elif mode == "flood":',
  '    print("x" * 2_000_000)',
  '    result = args[0]',
  'elif mode != "unset":',
  '    result = args[0]',
].join('\n');
const MODES = ['ok', 'raise', 'ok', 'wrong', 'float', 'unset', 'flood', 'ok'];

/** Outcomes as comparable data: a Value, or the error's kind, message and limit. */
const outcome = (r: unknown) =>
  ExtFnError.isInstance(r) ? { kind: r.kind, message: r.message, limit: r.limit } : r;

describe.skipIf(!restrictedOk)(
  `callcols: every type${restrictedOk ? '' : ` (${noRestricted})`}`,
  () => {
    const fns = Object.fromEntries(
      TYPES.flatMap((type) => [
        [`every_${type}`, [EVERY, [type, 'text'], type]],
        [`vec_${type}`, ['result = args[0]', [type], type, { vectorized: true }]],
      ]),
    ) as Parameters<typeof registryWith>[1];
    // One registry pair for the whole block: its workers stay warm between tests.
    const cols = registryWith('restricted', fns);
    const json = registryWith('restricted', fns, { f64: false }); // JSON call frames only
    afterAll(() => Promise.all([cols.registry.close(), json.registry.close()]));

    test.each(TYPES)(
      '%s: evalBatch over callcols == over JSON == eval, per-row errors and special values included',
      async (type) => {
        const rows = SAMPLES[type].flatMap((v, i) =>
          MODES.map((_, m) => [v, Value.text(MODES[(i + m) % MODES.length]!)]),
        );
        const name = `every_${type}`;
        const batch = await cols.registry.evalBatch(name, rows);
        const viaJson = await json.registry.evalBatch(name, rows);
        expect(batch.map(outcome)).toEqual(viaJson.map(outcome));
        for (let i = 0; i < rows.length; i++) {
          const single = await cols.registry.eval(name, rows[i]!).catch((e) => e);
          expect(outcome(batch[i]), `row ${i}`).toEqual(outcome(single));
        }
        // what each mode must give, so the comparisons above cannot pass on two equal wrongs
        rows.forEach((row, i) => {
          const mode = (row[1] as { value: string }).value;
          const got = batch[i]!;
          if (mode === 'ok') expect(got, `row ${i}`).toEqual(row[0]);
          else if (mode === 'float' && type === 'number') expect(got).toEqual(Value.number(2.5));
          else expect(ExtFnError.isInstance(got), `row ${i} (${mode})`).toBe(true);
          if (mode === 'flood') expect((got as ExtFnError).limit).toBe('output');
        });
      },
    );

    test.each(TYPES)(
      '%s: evalColumns over callcols == evalBatch, error cells in skipped and given back',
      async (type) => {
        const fn = cols.registry.get(`every_${type}`)!;
        // the samples a column of this type holds (nanosecond datetimes: 1677–2262)
        const values = SAMPLES[type].filter((v) => writeCell(newColumn(type, 1), 0, v));
        const n = values.length * MODES.length;
        const column = newColumn(type, n);
        const modes: string[] = [];
        for (let i = 0; i < n; i++) {
          writeCell(column, i, values[i % values.length]!);
          modes.push(MODES[Math.floor(i / values.length)]!);
        }
        const given = ExtFnError.runtime('upstream', 'an error cell');
        const out = await cols.registry.evalColumns<Column>(`every_${type}`, [column, modes], {
          errors: new Map([[1, given]]),
        });
        const rows = Array.from({ length: n }, (_, i) => [
          readCell(fn, [column], 0, i) as Value,
          Value.text(modes[i]!),
        ]);
        const batch = await cols.registry.evalBatch(`every_${type}`, rows);
        const resultFn = { ...fn, argTypes: [type] };
        for (let i = 0; i < n; i++) {
          const got = out.errors.get(i) ?? readCell(resultFn, [out.values], 0, i);
          expect(outcome(got), `row ${i}`).toEqual(outcome(i === 1 ? given : batch[i]));
        }
        expect(out.errors.get(1)).toBe(given);
      },
    );

    test.each(TYPES)(
      '%s: a vectorized body gets and gives columns over callcols as over JSON',
      async (type) => {
        const rows = SAMPLES[type].map((v) => [v]);
        const batch = await cols.registry.evalBatch(`vec_${type}`, rows);
        expect(batch.map(outcome)).toEqual(
          (await json.registry.evalBatch(`vec_${type}`, rows)).map(outcome),
        );
        expect(batch).toEqual(SAMPLES[type]);
      },
    );

    test('results a column cannot hold come back as cells, checked as JSON results are', async () => {
      const { registry } = restricted({
        odd: [
          [
            'from datetime import datetime, timezone, timedelta',
            'i = int(args[0])',
            'if i == 0:',
            '    result = datetime(1, 1, 1, tzinfo=timezone.utc)',
            'elif i == 1:',
            '    result = datetime(2000, 1, 1, 1, tzinfo=timezone(timedelta(hours=1)))',
            'elif i == 2:',
            '    result = datetime(2000, 1, 1)',
            'elif i == 3:',
            '    result = 1.5',
            'else:',
            '    result = datetime(2262, 4, 11, 23, 47, 16, 854776, tzinfo=timezone.utc)',
          ].join('\n'),
          ['number'],
          'datetime',
        ],
        surrogate: ['result = chr(0xD800) + args[0]', ['text'], 'text'],
        none: ['result = "no args"', [], 'text'],
      });
      const rows = [0, 1, 2, 3, 4].map((i) => [Value.number(i)]);
      const batch = await registry.evalBatch('odd', rows);
      // a function without arguments: a callcols request with no columns
      expect(await registry.evalBatch('none', [[], [], []])).toEqual(
        [0, 1, 2].map(() => Value.text('no args')),
      );
      expect(batch[0]).toEqual(Value.datetime('0001-01-01T00:00:00Z'));
      expect(batch[1]).toEqual(Value.datetime('2000-01-01T00:00:00Z'));
      expect((batch[2] as ExtFnError).message).toMatch(/naive datetime/);
      expect((batch[3] as ExtFnError).message).toBe(
        'function odd: result expected datetime, got float 1.5',
      );
      expect(batch[4]).toEqual(Value.datetime('2262-04-11T23:47:16.854776Z'));
      for (let i = 0; i < rows.length; i++) {
        expect(outcome(batch[i])).toEqual(
          outcome(await registry.eval('odd', rows[i]!).catch((e) => e)),
        );
      }
      // a nanosecond column cannot hold year 1 or a value past 2262: those rows fail there
      const out = await registry.evalColumns<Column>('odd', [Float64Array.from([0, 1, 4])]);
      expect(out.errors.get(0)?.message).toMatch(/outside what a nanosecond column holds/);
      expect(out.errors.get(2)?.message).toMatch(/outside what a nanosecond column holds/);
      expect(out.errors.has(1)).toBe(false);
      expect(await registry.evalColumns<Column>('surrogate', [['a', '😀']])).toEqual({
        values: ['\uD800a', '\uD800😀'],
        errors: new Map(),
      });
    });
  },
);
