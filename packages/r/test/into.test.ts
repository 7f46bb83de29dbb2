/**
 * Vectorized R through `evalColumns(…, { into })`: results land in the
 * caller's column, equal to the default's, on batches large enough for the
 * driver to reclaim a chunk's vectors between chunks; a reused column never
 * shows a previous call's value at a failed row. Restricted sandbox, Rscript.
 */
import { ExtFnError } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { restrictedOk, scopedRegistry, skipReason } from './helpers.js';

const BODY =
  'x <- args[[1]]\ny <- args[[2]]\nif (any(x < 0)) stop("negative x")\nresult <- x * 1.05^y';

describe.skipIf(!restrictedOk)(
  `r vectorized into (${restrictedOk ? 'Restricted' : skipReason})`,
  () => {
    test('into equals the default on large chunks, twice, then on fewer rows with failed rows', async () => {
      const { registry } = scopedRegistry({
        grow: [BODY, ['number', 'number'], 'number', { vectorized: true }],
      });
      const rows = 300_000;
      const x = Float64Array.from({ length: rows }, (_, i) => i * 0.25);
      const y = Float64Array.from({ length: rows }, (_, i) => i % 40);
      const into = new Float64Array(rows);
      for (let round = 0; round < 2; round++) {
        const plain = await registry.evalColumns('grow', [x, y]);
        expect(plain.errors.size).toBe(0);
        into.fill(-1);
        const out = await registry.evalColumns('grow', [x, y], { into });
        expect(out.values).toBe(into);
        expect(out.errors.size).toBe(0);
        expect(into).toEqual(plain.values);
        x.reverse(); // the second round's rows differ: a stale chunk would show
      }
      // Fewer rows in the same column (held values from above), a raising row and an error cell.
      const few = 40;
      const fx = Float64Array.from({ length: few }, (_, i) => (i === 7 ? -1 : i));
      const fy = Float64Array.from({ length: few }, (_, i) => i % 3);
      const given = new Map([[12, ExtFnError.runtime('grow', 'upstream')]]);
      const plain = await registry.evalColumns('grow', [fx, fy], { errors: given });
      const part = into.subarray(0, few);
      const out = await registry.evalColumns('grow', [fx, fy], { into: part, errors: given });
      expect(out.values).toBe(part);
      expect(part).toEqual(plain.values);
      expect([...out.errors.keys()].sort((a, b) => a - b)).toEqual([7, 12]);
      expect(out.errors.get(7)?.message).toMatch(/negative x/);
      expect(Number.isNaN(part[7]) && Number.isNaN(part[12])).toBe(true);
      expect(part[8]).toBe(8 * 1.05 ** 2);
    });
  },
);
