/**
 * Text through callcols, end to end: the driver's bulk text decode/encode
 * and its map() fast path over a chunk's rows give, row by row, exactly what
 * `eval` gives and what JSON `call` frames give — ASCII chunks, non-ASCII
 * ones, an ASCII chunk with one non-ASCII row, empty strings, lone
 * surrogates in and out, raising rows, results of the wrong type, an unset
 * result, results near and over the output cap, a row that prints and one
 * that loads a random generator (the driver falls back to its row loop for
 * those). evalBatch and evalColumns (typed) both. Restricted sandbox, /usr/bin/python3.
 */
import { ExtFnError, type RowResult, Value } from '@improv/extfn-core';
import { afterAll, describe, expect, test } from 'vitest';
import { noRestricted, registryWith, restrictedOk } from './helpers.js';

// args[1] picks what a row does; otherwise the result is (a + b).upper().
const BODY = [
  'a, b = args',
  'if b == "raise":',
  '    raise ValueError("no %r" % (a,))',
  'elif b == "none":',
  '    result = None',
  'elif b == "int":',
  '    result = 7',
  'elif b == "float":',
  '    result = 2.5',
  'elif b == "zero":',
  '    result = 0.0',
  'elif b == "sub":',
  '    result = type("S", (str,), {})(a)',
  'elif b == "lone":',
  '    result = a + "\\ud800"',
  'elif b == "wide":',
  '    result = "a" * 400_000',
  'elif b == "wide-é":',
  '    result = "é" * 200_000',
  'elif b == "huge":',
  '    result = "x" * 2_000_000',
  'elif b == "print":',
  '    print("row", a)',
  '    result = a',
  'elif b == "random":',
  '    import random',
  '    result = "%s:%d" % (a, random.randint(0, 10**9))',
  'elif b != "unset":',
  '    result = (a + b).upper()',
].join('\n');

const fns = { up: [BODY, ['text', 'text'], 'text'] } as Parameters<typeof registryWith>[1];

/** Outcomes as comparable data: a Value, or the error's kind, message and limit. */
const outcome = (r: unknown) =>
  ExtFnError.isInstance(r) ? { kind: r.kind, message: r.message, limit: r.limit } : r;

const rowsOf = (pairs: [string, string][]) => pairs.map(([a, b]) => [Value.text(a), Value.text(b)]);

const ascii = (n: number): [string, string][] =>
  Array.from({ length: n }, (_, i) => [`row${i}`, i % 3 ? `-${i % 100}` : '']);

const SETS: [string, [string, string][]][] = [
  ['ASCII only', ascii(300)],
  ['non-ASCII only', Array.from({ length: 300 }, (_, i) => [`é${i}`, `-日本${i % 7}😀ß`])],
  [
    'ASCII with one non-ASCII row',
    ascii(300).map(([a, b], i): [string, string] => (i === 150 ? [a, '-é'] : [a, b])),
  ],
  ['empty strings', Array.from({ length: 50 }, (): [string, string] => ['', ''])],
  [
    'NUL characters',
    [
      ['a\0b', '\0'],
      ['\0', ''],
      ['', '\0\0é'],
      ['x', 'y'],
    ],
  ],
  [
    'lone surrogates in and out',
    [
      ['a\uD800', 'x'],
      ['\uDFFF', ''],
      ['ok', 'lone'],
      ['\uD83D', 'lone'],
      ['😀', 'x'],
    ],
  ],
  [
    'error cells and results of other types',
    ['raise', 'none', 'int', 'float', 'zero', 'sub', 'unset', 'lone', 'ok'].map(
      (b, i): [string, string] => [`r${i}é`, b],
    ),
  ],
  ['results near and over the output cap', ['wide', 'wide-é', 'huge', 'ok'].map((b) => ['w', b])],
  [
    'a row that prints',
    ascii(20).map(([a, b], i): [string, string] => [a, i === 10 ? 'print' : b]),
  ],
  [
    'a row that loads a random generator',
    ascii(20).map(([a, b], i): [string, string] => [a, i === 5 ? 'random' : b]),
  ],
];

describe.skipIf(!restrictedOk)(
  `text through callcols${restrictedOk ? '' : ` (${noRestricted})`}`,
  () => {
    const cols = registryWith('restricted', fns);
    const json = registryWith('restricted', fns, { f64: false }); // JSON call frames only
    afterAll(() => Promise.all([cols.registry.close(), json.registry.close()]));

    test.each(SETS)('%s: evalBatch and evalColumns == JSON frames == eval', async (_, pairs) => {
      const rows = rowsOf(pairs);
      const batch = await cols.registry.evalBatch('up', rows);
      const overJson = await json.registry.evalBatch('up', rows);
      expect(batch.map(outcome)).toEqual(overJson.map(outcome));

      const columns = [pairs.map(([a]) => a), pairs.map(([, b]) => b)];
      const typed = await cols.registry.evalColumns<string[]>('up', columns);
      // One chunk is the caller's whole column, joined as it is: a lone surrogate leaves it unchanged.
      expect(columns).toEqual([pairs.map(([a]) => a), pairs.map(([, b]) => b)]);
      const asRows: RowResult[] = typed.values.map(
        (value, i) => typed.errors.get(i) ?? Value.text(value),
      );
      expect(asRows.map(outcome)).toEqual(batch.map(outcome));
      for (const i of typed.errors.keys()) expect(typed.values[i]).toBe('');

      // eval row by row (a sample of the large sets: the first, the odd row, the last).
      const sample = rows
        .map((_, i) => i)
        .filter((i) => rows.length <= 40 || [0, 149, 150, 151, rows.length - 1].includes(i));
      for (const i of sample) {
        const one = await cols.registry.eval('up', rows[i]!).catch((e: unknown) => e);
        expect(outcome(one), `row ${i}`).toEqual(outcome(batch[i]));
      }
    });

    test('the fast path and the row loop agree on a whole workload chunk of (a + b).upper()', async () => {
      const pairs: [string, string][] = Array.from({ length: 5000 }, (_, i) => [
        `row${i}`,
        `-é${i % 100}`,
      ]);
      const rows = rowsOf(pairs);
      const [batch, overJson] = await Promise.all([
        cols.registry.evalBatch('up', rows),
        json.registry.evalBatch('up', rows),
      ]);
      expect(batch.map(outcome)).toEqual(overJson.map(outcome));
      expect(batch[4321]).toEqual(Value.text('ROW4321-É21'));
    });
  },
);
