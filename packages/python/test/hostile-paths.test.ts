/**
 * The hostile-body corpus (hostile-corpus.ts) through every path: for each
 * body, eval row by row in order, evalBatch cold (a fresh worker, chunks
 * ramping from one row) and warm (the rows reversed), evalColumns and, where
 * the body has one, its vectorized form must give every row the same
 * outcome, value or error kind and message, and what the case says that
 * row must give. A row's result never depends on the rows before it or on
 * the path that ran it. Restricted sandbox, /usr/bin/python3.
 */
import { ExtFnError, Value as V } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import {
  type FnExtras,
  hasNumpy,
  noNumpy,
  noRestricted,
  type registryWith,
  restrictedOk,
  scopedRegistry,
} from './helpers.js';
import { CORPUS, everyPath, problems, ROWS } from './hostile-corpus.js';

const VEC: FnExtras = { vectorized: true };

// Reads, from the driver's frames, how many rows the request running this row
// holds (its internals: only to show the corpus's batches are cut into chunks).
const CHUNK_PROBE = [
  'import sys',
  'frame = sys._getframe()',
  'rows = 0',
  'while frame is not None:',
  "    if frame.f_code.co_name in ('_callf64', '_callcols'):",
  "        rows = frame.f_locals['n']",
  '        break',
  "    if frame.f_code.co_name == '_call':",
  "        rows = len(frame.f_locals['rows'])",
  '        break',
  '    frame = frame.f_back',
  'result = float(rows) + 0 * args[0]',
].join('\n');

describe.skipIf(!restrictedOk)(
  `hostile Python bodies give every row the same outcome on every path (${restrictedOk ? 'Restricted' : noRestricted})`,
  () => {
    test(`the corpus's batches are cut into chunks: a cold batch of ${ROWS} rows runs as 4 requests or more`, async () => {
      const { registry } = scopedRegistry('restricted', {
        probe: [CHUNK_PROBE, ['number'], 'number'],
      });
      const rows = Array.from({ length: ROWS }, (_, i) => [V.number(i)]);
      const sizes = (await registry.evalBatch('probe', rows)).map((cell) =>
        ExtFnError.isInstance(cell) ? Number.NaN : (cell as { value: number }).value,
      );
      // a request of k rows shows k in each of its rows
      const requests = sizes.reduce((sum, k) => sum + 1 / k, 0);
      expect(sizes[0], 'the first row runs alone').toBe(1);
      expect(Math.round(requests)).toBeGreaterThanOrEqual(4);
    });

    for (const c of CORPUS) {
      const skip = c.numpy && !hasNumpy;
      test.skipIf(skip)(`${c.name}${skip ? ` (${noNumpy})` : ''}`, async () => {
        const argTypes = c.argTypes ?? ['number'];
        const returnType = c.returnType ?? 'number';
        const fns: Parameters<typeof registryWith>[1] = { f: [c.body, argTypes, returnType] };
        if (c.vectorized !== undefined) fns.v = [c.vectorized, argTypes, returnType, VEC];
        const options = c.numpy ? { packages: 'system' as const } : {};
        const fresh = scopedRegistry('restricted', fns, options).registry;
        const warm = scopedRegistry('restricted', fns, options).registry;
        const paths = await everyPath(c, fresh, warm);
        expect(problems(c, paths)).toEqual([]);
      });
    }
  },
);
