/**
 * Vectorized Python through `evalColumns(…, { into })`: results land in the
 * caller's column, equal to the default's, across requests that reuse the
 * driver's request buffer (a large one, then smaller ones: no byte of an
 * earlier request may show); a reused column never shows a previous call's
 * value at a failed row. Restricted sandbox, numpy when installed.
 */
import { ExtFnError } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { hasNumpy, noNumpy, noRestricted, restrictedOk, scopedRegistry } from './helpers.js';

const cases = [
  [
    'numpy',
    'import numpy as np\nx, y = args\nif (x < 0).any(): raise ValueError("negative x")\nresult = np.hypot(x, y)',
    hasNumpy,
  ],
  [
    'lists',
    'import math\nx, y = args\nif min(x) < 0: raise ValueError("negative x")\nresult = [math.hypot(a, b) for a, b in zip(x, y)]',
    true,
  ],
] as const;

describe.skipIf(!restrictedOk)(
  `python vectorized into (${restrictedOk ? 'Restricted' : noRestricted})`,
  () => {
    for (const [label, body, ok] of cases) {
      test.skipIf(!ok)(
        `${label}: into equals the default, large then fewer rows with failed rows ${ok ? '' : noNumpy}`,
        async () => {
          const { registry } = scopedRegistry(
            'restricted',
            { hyp: [body, ['number', 'number'], 'number', { vectorized: true }] },
            { packages: 'system' },
          );
          const rows = label === 'numpy' ? 300_000 : 30_000;
          const x = Float64Array.from({ length: rows }, (_, i) => i * 0.5);
          const y = Float64Array.from({ length: rows }, (_, i) => 7 - (i % 100));
          const into = new Float64Array(rows);
          for (let round = 0; round < 2; round++) {
            const plain = await registry.evalColumns('hyp', [x, y]);
            expect(plain.errors.size).toBe(0);
            into.fill(-1);
            const out = await registry.evalColumns('hyp', [x, y], { into });
            expect(out.values).toBe(into);
            expect(out.errors.size).toBe(0);
            expect(into).toEqual(plain.values);
            x.reverse(); // the second round's rows differ: a stale request buffer would show
          }
          // Fewer rows than the driver's buffer holds, into a column holding values from above.
          const few = 40;
          const fx = Float64Array.from({ length: few }, (_, i) => (i === 7 ? -1 : i));
          const fy = Float64Array.from({ length: few }, (_, i) => i % 3);
          const given = new Map([[12, ExtFnError.runtime('hyp', 'upstream')]]);
          for (const errors of [undefined, given]) {
            const plain = await registry.evalColumns('hyp', [fx, fy], { errors });
            const part = into.subarray(0, few);
            const out = await registry.evalColumns('hyp', [fx, fy], { into: part, errors });
            expect(out.values).toBe(part);
            expect(part).toEqual(plain.values);
            expect([...out.errors.keys()].sort((a, b) => a - b)).toEqual(errors ? [7, 12] : [7]);
            expect(out.errors.get(7)?.message).toMatch(/negative x/);
            expect(Number.isNaN(part[7])).toBe(true);
            expect(part[8]).toBe(Math.hypot(8, 2));
          }
        },
      );
    }

    test('typed columns (callcols): a boolean result into a reused Uint8Array, failed rows read 0', async () => {
      const body =
        'x, = args\nif 13 in list(x): raise ValueError("thirteen")\nresult = [v > 2 for v in x]';
      const { registry } = scopedRegistry('restricted', {
        big: [body, ['number'], 'boolean', { vectorized: true }],
        day: ['result = args[0].day > 15', ['datetime'], 'boolean'],
      });
      const x = Float64Array.of(1, 3, 13, 5, 0);
      const into = new Uint8Array(5).fill(1);
      const plain = await registry.evalColumns<Uint8Array>('big', [x]);
      const out = await registry.evalColumns<Uint8Array>('big', [x], { into });
      expect(out.values).toBe(into);
      expect(into).toEqual(plain.values);
      expect(Array.from(into)).toEqual([0, 1, 0, 1, 0]);
      expect([...out.errors.keys()]).toEqual([2]);
      // A datetime argument goes over callcols (the typed path) into the same column.
      const day = 86_400_000_000_000n;
      const days = BigInt64Array.of(0n, 20n * day, 1n * day, 40n * day, 16n * day);
      const dated = await registry.evalColumns<Uint8Array>('day', [days], { into });
      expect(dated.values).toBe(into);
      expect(Array.from(into)).toEqual([0, 1, 0, 0, 1]);
    });
  },
);
