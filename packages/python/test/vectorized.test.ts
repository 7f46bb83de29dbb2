/**
 * Vectorized Python bodies (`vectorized: true`): each argument arrives as a
 * column (a numpy array where numpy is allowed, else a list) and the body
 * returns one column. Per-cell semantics: evalBatch and evalColumns equal
 * per-row eval on chunks with raising rows, None slots, wrong lengths and a
 * hanging chunk. Restricted sandbox, /usr/bin/python3.
 */
import { ExtFnError, type RowResult, Value } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import {
  type FnExtras,
  failure,
  hasNumpy,
  noNumpy,
  noRestricted,
  type registryWith,
  restrictedOk,
  scopedRegistry,
} from './helpers.js';

const VEC: FnExtras = { vectorized: true };
const restricted = (
  fns: Parameters<typeof registryWith>[1],
  options: Parameters<typeof registryWith>[2] = {},
) => scopedRegistry('restricted', fns, options);

const n = (x: number) => Value.number(x);

/** Each row's outcome as comparable data: its value, or its error kind and message. */
const outcome = (r: RowResult) =>
  ExtFnError.isInstance(r) ? { error: r.kind, message: r.message } : r;

/** Runs `name` per row with eval, then as a batch and (all-number functions) as columns: all must agree. */
async function expectPerRowSemantics(
  registry: ReturnType<typeof restricted>['registry'],
  name: string,
  rows: Value[][],
  options: { timeoutMs?: number } = {},
) {
  const single: RowResult[] = [];
  for (const row of rows) {
    single.push(await registry.eval(name, row, options).catch((e: ExtFnError) => e));
  }
  const batch = await registry.evalBatch(name, rows, options);
  expect(batch.map(outcome)).toEqual(single.map(outcome));
  const fn = registry.get(name)!;
  if (fn.returnType === 'number' && fn.argTypes.every((t) => t === 'number')) {
    const columns = fn.argTypes.map((_, k) =>
      Float64Array.from(rows, (row) => (row[k] as { value: number }).value),
    );
    const { values, errors } = await registry.evalColumns(name, columns, options);
    const asRows = Array.from(values, (v, i): RowResult => errors.get(i) ?? n(v));
    expect(asRows.map(outcome)).toEqual(single.map(outcome));
  }
  return single;
}

describe.skipIf(!restrictedOk)(
  `python vectorized (${restrictedOk ? 'Restricted' : noRestricted})`,
  () => {
    test.skipIf(!hasNumpy)(
      `with numpy allowed, columns are numpy arrays and np.hypot is one call per chunk ${hasNumpy ? '' : noNumpy}`,
      async () => {
        const body = [
          'import numpy as np',
          'x, y = args',
          'assert isinstance(x, np.ndarray) and x.dtype == np.float64, type(x)',
          'result = np.hypot(x, y)',
        ].join('\n');
        const { registry } = restricted(
          { hypot: [body, ['number', 'number'], 'number', VEC] },
          { packages: 'system' },
        );
        const xs = Float64Array.from({ length: 5000 }, (_, i) => i * 0.5);
        const ys = Float64Array.from({ length: 5000 }, (_, i) => 7 - i);
        const { values, errors } = await registry.evalColumns('hypot', [xs, ys]);
        expect(errors.size).toBe(0);
        // numpy's hypot and V8's may differ in the last bit (an ulp is up to 2^-52 of the value).
        values.forEach((v, i) => {
          const expected = Math.hypot(xs[i]!, ys[i]!);
          expect(Math.abs(v - expected)).toBeLessThanOrEqual(expected * 2 ** -51);
        });
        await expectPerRowSemantics(registry, 'hypot', [
          [n(3), n(4)],
          [n(Number.NaN), n(1)],
          [n(-0), n(-0)],
          [n(Number.POSITIVE_INFINITY), n(2)],
        ]);
      },
    );

    test('without numpy, columns are lists; text, boolean, datetime and enum columns round-trip', async () => {
      const body = [
        'names, flags, times, picks = args',
        'assert all(type(c) is list for c in args)',
        'result = [("%s %s %d %d" % (s, f, t.year, e)) for s, f, t, e in zip(names, flags, times, picks)]',
      ].join('\n');
      const { registry } = restricted({
        f: [body, ['text', 'boolean', 'datetime', 'enum'], 'text', VEC],
      });
      const rows = [
        [
          Value.text('a'),
          Value.boolean(true),
          Value.datetime(new Date(Date.UTC(2001, 0, 1))),
          Value.enum(3),
        ],
        [
          Value.text('é'),
          Value.boolean(false),
          Value.datetime(new Date(Date.UTC(1999, 5, 1))),
          Value.enum(0),
        ],
      ];
      const single = await expectPerRowSemantics(registry, 'f', rows);
      expect(single).toEqual([Value.text('a True 2001 3'), Value.text('é False 1999 0')]);
    });

    test('mixed chunks: a raising row re-runs the chunk row by row; None slots fail their row only', async () => {
      const body = [
        'x, = args',
        'if any(v == 13 for v in x):',
        '    raise ValueError("thirteen")',
        'result = [None if v < 0 else v * 2 for v in x]',
      ].join('\n');
      const { registry } = restricted({ f: [body, ['number'], 'number', VEC] });
      const rows = [1, 2, 13, -1, 5, 13, 7, -3].map((x) => [n(x)]);
      const single = await expectPerRowSemantics(registry, 'f', rows);
      expect(single.map(outcome)).toEqual([
        n(2),
        n(4),
        { error: 'Runtime', message: 'function f: ValueError: thirteen' },
        {
          error: 'Runtime',
          message:
            'function f: result expected number, got None (a missing value in the vectorized result)',
        },
        n(10),
        { error: 'Runtime', message: 'function f: ValueError: thirteen' },
        n(14),
        {
          error: 'Runtime',
          message:
            'function f: result expected number, got None (a missing value in the vectorized result)',
        },
      ]);
    });

    test.skipIf(!hasNumpy)(
      `numpy over f64 frames, chunks of many rows: raising rows, None slots, NaN values and a wrong length agree with per-row eval ${hasNumpy ? '' : noNumpy}`,
      async () => {
        const body = [
          'import numpy as np',
          'x, = args',
          'assert isinstance(x, np.ndarray), type(x)',
          'if (x == 13).any():',
          '    raise ValueError("thirteen")',
          'r = (x * 2).astype(object)',
          'r[x < 0] = None',
          'r[x == 7] = float("nan")',
          'result = r',
        ].join('\n');
        const { registry } = restricted(
          {
            f: [body, ['number'], 'number', VEC],
            // A float64 result goes back as the array's own bytes.
            raw: [
              'import numpy as np\nx, = args\nresult = np.where(x == 7, np.nan, x * 2)',
              ['number'],
              'number',
              VEC,
            ],
            short: ['result = args[0][:-1]', ['number'], 'number', VEC],
          },
          { packages: 'system' },
        );
        const size = 30_000; // past one pipe buffer both ways, and a payload written in parts
        const xs = Float64Array.from({ length: size }, (_, i) => (i === 20_013 ? 13 : i - 50));
        const expected = (x: number, i: number) =>
          x === 13 ? 'thirteen' : x < 0 ? 'missing' : x === 7 ? 'nan' : i;
        for (let run = 0; run < 2; run++) {
          // The second run starts at the chunk size the first one learnt.
          const { values, errors } = await registry.evalColumns('f', [xs]);
          xs.forEach((x, i) => {
            const e = errors.get(i);
            const kind = expected(x, i);
            if (kind === 'thirteen') expect(e?.message).toBe('function f: ValueError: thirteen');
            else if (kind === 'missing') expect(e?.message).toMatch(/got None \(a missing value/);
            else if (kind === 'nan') expect(Number.isNaN(values[i]!) && e === undefined).toBe(true);
            else if (e !== undefined || values[i] !== x * 2) expect([i, values[i], e]).toBe(x * 2);
          });
          const raw = await registry.evalColumns('raw', [xs]);
          expect(raw.errors.size).toBe(0);
          expect(
            Array.from(raw.values, (v, i) =>
              xs[i] === 7 ? Number.isNaN(v) : v === xs[i]! * 2,
            ).every(Boolean),
          ).toBe(true);
        }
        const sample = [0, 49, 50, 56, 57, 20_013, 29_999].map((i) => [n(xs[i]!)]);
        await expectPerRowSemantics(registry, 'f', sample);
        await expectPerRowSemantics(registry, 'raw', sample);
        const short = await registry.evalColumns('short', [xs]);
        expect(short.errors.size).toBe(size);
        expect(short.errors.get(size - 1)?.message).toMatch(/returns one value per row/);
      },
    );

    test('a wrong length or a result that is not a column fails the chunk with a clear error', async () => {
      const { registry } = restricted({
        short: ['result = args[0][:-1]', ['number'], 'number', VEC],
        scalar: ['result = 3.0', ['number'], 'number', VEC],
        mistyped: ['result = ["x" if v == 2 else v for v in args[0]]', ['number'], 'number', VEC],
      });
      const rows = [1, 2, 3].map((x) => [n(x)]);
      const short = await registry.evalBatch('short', rows);
      for (const r of short) {
        // Chunks adapt in size (the first is one row), so the counts name the chunk's rows.
        expect((r as ExtFnError).message).toMatch(
          /returns one value per row: (\d+) rows, got \d+ values/,
        );
      }
      const one = await failure(registry.eval('short', [n(1)]));
      expect(one.message).toMatch(/1 rows, got 0 values/);
      const scalar = await registry.evalBatch('scalar', rows);
      for (const r of scalar) {
        expect((r as ExtFnError).message).toMatch(/returns one column .* got float 3\.0/);
      }
      // A cell of the wrong type is that row's error, as a per-row call would give it.
      const mistyped = await expectPerRowSemantics(registry, 'mistyped', rows);
      expect(mistyped.map(outcome)).toEqual([
        n(1),
        { error: 'Runtime', message: "function mistyped: result expected number, got str 'x'" },
        n(3),
      ]);
    });

    test('a hanging chunk: only the row that hangs times out, the others get their values', async () => {
      const body = [
        'x, = args',
        'if 13 in x:',
        '    while True:',
        '        pass',
        'result = [v + 1 for v in x]',
      ].join('\n');
      const { registry } = restricted({ f: [body, ['number'], 'number', VEC] });
      const rows = [1, 2, 13, 4].map((x) => [n(x)]);
      const batch = await registry.evalBatch('f', rows, { timeoutMs: 1500 });
      expect(batch.map(outcome)).toEqual([
        n(2),
        n(3),
        expect.objectContaining({ error: 'Timeout' }),
        n(5),
      ]);
      const { values, errors } = await registry.evalColumns('f', [Float64Array.from([13, 1])], {
        timeoutMs: 1500,
      });
      expect(errors.get(0)?.kind).toBe('Timeout');
      expect(values[1]).toBe(2);
    });

    test('printing is forwarded per chunk; a chunk past the output cap is re-run row by row', async () => {
      const body = [
        'x, = args',
        'print("chunk of", len(x))',
        'if 9 in x:',
        '    print("y" * 5000)',
        'result = list(x)',
      ].join('\n');
      const { registry } = restricted(
        { f: [body, ['number'], 'number', VEC] },
        { maxOutputBytes: 4096 },
      );
      const batch = await registry.evalBatch('f', [[n(1)], [n(9)], [n(3)]]);
      expect(batch.map(outcome)).toEqual([
        n(1),
        expect.objectContaining({ error: 'Runtime', message: 'function f: output too large' }),
        n(3),
      ]);
    });

    test('a vectorized function with no arguments is refused at load, naming why', async () => {
      const { registry } = restricted({ f: ['result = [1.0]', [], 'number', VEC] });
      const error = await failure(registry.eval('f', []));
      expect(error.message).toMatch(/a vectorized function needs at least one argument/);
    });
  },
);
