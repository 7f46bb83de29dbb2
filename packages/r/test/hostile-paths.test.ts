/**
 * The hostile-body corpus (hostile-corpus.ts) through every path: for each
 * body, eval row by row in order, evalBatch cold (a fresh worker, chunks
 * ramping from one row) and warm (the rows reversed, in requests of several
 * of the driver's blocks of 128 rows), evalColumns and, where
 * the body has one, its vectorized form must give every row the same
 * outcome, value or error kind and message, and what the case says that
 * row must give. A row's result never depends on the rows before it, on the
 * block or chunk it ran in, or on the path that ran it. Restricted sandbox,
 * Debian's R.
 */
import { ExtFnError, type Registry, Value as V } from '@improv/extfn-core';
import { everyPath, PATH_ROWS, pathProblems } from '@improv/extfn-core/testing';
import { describe, expect, test } from 'vitest';
import { restrictedOk, type Signature, scopedRegistry, skipReason } from './helpers.js';
import { CORPUS } from './hostile-corpus.js';

/** The registry that runs eval, the warm batches and the columns: one worker, requests of several blocks. */
const WARM = { chunkMs: 250, maxWorkers: 1 };

// Reads, from the driver's frames, how many rows the request running this row
// holds (its internals: only to show the corpus's batches are cut into chunks).
const CHUNK_PROBE = [
  'rows <- 0',
  'for (frame in rev(sys.frames())) {',
  '  if (exists("problems", envir = frame, inherits = FALSE) && exists("n", envir = frame, inherits = FALSE)) {',
  '    rows <- get("n", envir = frame, inherits = FALSE)',
  '    break',
  '  }',
  '}',
  'result <- rows + 0 * args[[1]]',
].join('\n');

describe.skipIf(!restrictedOk)(
  `hostile R bodies give every row the same outcome on every path (${restrictedOk ? 'Restricted' : skipReason})`,
  () => {
    test(`the corpus's batches are cut into chunks: a cold batch of ${PATH_ROWS} rows runs as 4 requests or more, a warm one (chunkMs ${WARM.chunkMs}) in requests of several blocks of 128 rows`, async () => {
      const probe: Record<string, Signature> = { probe: [CHUNK_PROBE, ['number'], 'number'] };
      const rows = Array.from({ length: PATH_ROWS }, (_, i) => [V.number(i)]);
      // a request of k rows shows k in each of its rows
      const sizes = async (registry: Registry) =>
        (await registry.evalBatch('probe', rows)).map((cell) =>
          ExtFnError.isInstance(cell) ? Number.NaN : (cell as { value: number }).value,
        );
      const cold = await sizes(scopedRegistry(probe).registry);
      expect(cold[0], 'the first row runs alone').toBe(1);
      expect(Math.round(cold.reduce((sum, k) => sum + 1 / k, 0))).toBeGreaterThanOrEqual(4);
      const warm = scopedRegistry(probe, WARM).registry;
      await sizes(warm);
      expect(Math.max(...(await sizes(warm)))).toBeGreaterThan(128);
    });

    test('a body nests as deep on every path: eval, evalBatch (cold and warm) and evalColumns agree, depth by depth, on where R stops (evaluation nested too deeply)', async () => {
      // Depths 1635-1664, a row each: few enough rows that no worker spends
      // the 0.25 s of CPU after which it compiles the body (a compiled body
      // reaches the limit a call later).
      const c = {
        name: 'recursion',
        body: [
          'down <- function(n) if (n == 0) 0 else 1 + down(n - 1)',
          'result <- down(args[[1]])',
        ].join('\n'),
        args: (i: number) => [V.number(1635 + i)],
        rows: 30,
      };
      const fns: Record<string, Signature> = { f: [c.body, ['number'], 'number'] };
      const paths = await everyPath(
        c,
        scopedRegistry(fns).registry,
        scopedRegistry(fns, WARM).registry,
      );
      expect(pathProblems(c, paths)).toEqual([]);
      const works = paths.eval!.filter((o, i) => o === `number ${1635 + i}`).length;
      expect(
        paths
          .eval!.slice(works)
          .every((o) =>
            /^Runtime: expressionStackOverflowError: evaluation nested too deeply/.test(o),
          ),
        paths.eval!.join('\n'),
      ).toBe(true);
      expect(works, "the depths up to R's limit work, the deeper ones fail").toBeGreaterThan(0);
      expect(works).toBeLessThan(30);
    });

    test('a function the body defines recurses as deep once the worker has compiled the body (after 0.25 s of its CPU) as in a fresh worker', async () => {
      // A row with a negative argument spins 0.3 s of CPU, after which the
      // worker compiles the body. Depth 1500: a compiled closure runs out of
      // C stack at about 600 calls, an interpreted one goes 1650 deep.
      const body = [
        'x <- args[[1]]',
        'if (x < 0) { t <- proc.time()[[1]]; while (proc.time()[[1]] - t < 0.3) NULL }',
        'down <- function(n) if (n == 0) 0 else 1 + down(n - 1)',
        'result <- if (x < 0) x else down(x)',
      ].join('\n');
      const { registry } = scopedRegistry({ f: [body, ['number'], 'number'] }, { maxWorkers: 1 });
      const depths = [10, 700, 1000, 1500];
      const outcome = async () =>
        Promise.all(
          depths.map((d) =>
            registry.eval('f', [V.number(d)]).then(
              (r) => r,
              (e: Error) => e.message,
            ),
          ),
        );
      const fresh = await outcome();
      expect(fresh).toEqual(depths.map((d) => V.number(d)));
      const spun = (await registry.eval('f', [V.number(-1)])) as { value: number };
      expect(spun.value).toBe(-1);
      expect(await outcome(), 'the same depths on the worker that compiled the body').toEqual(
        fresh,
      );
      const batch = await registry.evalBatch(
        'f',
        depths.map((d) => [V.number(d)]),
      );
      expect(batch, 'and in a batch').toEqual(fresh);
    });

    for (const c of CORPUS) {
      test(c.name, async () => {
        const argTypes = c.argTypes ?? ['number'];
        const returnType = c.returnType ?? 'number';
        const fns: Record<string, Signature> = { f: [c.body, argTypes, returnType] };
        if (c.vectorized !== undefined)
          fns.v = [c.vectorized, argTypes, returnType, { vectorized: true }];
        const fresh = scopedRegistry(fns).registry;
        const warm = scopedRegistry(fns, WARM).registry;
        const paths = await everyPath(c, fresh, warm);
        expect(pathProblems(c, paths)).toEqual([]);
      });
    }
  },
);
