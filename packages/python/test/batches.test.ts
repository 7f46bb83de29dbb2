/**
 * What the Python driver itself does in batches: the binary f64 path equals
 * the JSON path, numbers survive JSON frames exactly, its own per-row print
 * cap, reseeding per row, and hang isolation over callcols chunks of text
 * and datetime rows. The pool, scheduler and worker mechanics are
 * tested in @improv/extfn-interpreter. Restricted sandbox, /usr/bin/python3.
 */
import { ExtFnError, sameValue, Value } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { noRestricted, type registryWith, restrictedOk, scopedRegistry } from './helpers.js';

const restricted = (
  fns: Parameters<typeof registryWith>[1],
  options: Parameters<typeof registryWith>[2] = {},
) => scopedRegistry('restricted', fns, options);

describe.skipIf(!restrictedOk)(
  `the python driver in batches (${restrictedOk ? 'Restricted' : noRestricted})`,
  () => {
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

    test('callcols chunks of text rows: a hanging row alone gets Timeout, a raising row its error, random reseeded', async () => {
      const { registry, runner } = restricted({
        words: [
          [
            'import random',
            'w = args[0]',
            'if w == "hang":',
            '    while True:',
            '        pass',
            'if w == "boom":',
            '    raise KeyError(w)',
            'result = "%s:%s:%.6f" % (w.upper(), args[1].isoformat(), random.random())',
          ].join('\n'),
          ['text', 'datetime'],
          'text',
        ],
      });
      const at = Value.datetime('2262-04-11T23:47:16.854775807Z');
      const words = Array.from({ length: 3000 }, (_, i) =>
        i === 1234 ? 'hang' : i === 2345 ? 'boom' : `wörd ${i} 😀`,
      );
      const rows = words.map((w) => [Value.text(w), at]);
      const batch = await registry.evalBatch('words', rows, { timeoutMs: 1_500 });
      const draw = (await registry.eval('words', [Value.text('x'), at])) as { value: string };
      const suffix = draw.value.slice(draw.value.indexOf(':') + 1);
      expect(suffix).toMatch(/^2262-04-11T23:47:16\.854775\+00:00:0\.\d{6}$/);
      words.forEach((w, i) => {
        const got = batch[i]!;
        if (w === 'hang') expect((got as ExtFnError).kind, `row ${i}`).toBe('Timeout');
        else if (w === 'boom')
          expect((got as ExtFnError).message).toBe("function words: KeyError: 'boom'");
        else expect(got, `row ${i}`).toEqual(Value.text(`${w.toUpperCase()}:${suffix}`));
      });
      expect(runner.stats().killed).toBeGreaterThan(0);
    });
  },
);
