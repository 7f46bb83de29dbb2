/**
 * What a row leaves outside any environment — options(), the working
 * directory, environment variables (Sys.setenv), the locale, .libPaths() — never reaches
 * the rows after it: a row's value is the same through eval, evalBatch and
 * evalColumns, whichever rows ran before it on its worker. Restricted
 * sandbox, Debian's R.
 */
import { ExtFnError, Value as V, type Value } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { restrictedOk, scopedRegistry, skipReason } from './helpers.js';

const rows = Array.from({ length: 600 }, (_, i) => i);
const numbers = (cells: (Value | ExtFnError)[]) =>
  cells.map((c) => (ExtFnError.isInstance(c) ? c.message : c.type === 'number' ? c.value : c));

// Each body reads the state first, then changes it on some rows only (mid-block, so
// rows after a change in the same block of 128 and in later blocks would see it).
const bodies: Record<string, string> = {
  options: [
    'before <- getOption("digits") * 1000 + getOption("probe", 0)',
    'if (args[[1]] %% 50 == 7) options(digits = 3, probe = args[[1]])',
    'result <- before',
  ].join('\n'),
  counter: 'options(cnt = getOption("cnt", 0) + 1)\nresult <- getOption("cnt")',
  env: [
    'before <- nchar(Sys.getenv("HOME")) * 1000 + as.numeric(Sys.getenv("PROBE", "0"))',
    'if (args[[1]] %% 50 == 7) { Sys.setenv(PROBE = args[[1]]); Sys.unsetenv("HOME") }',
    'result <- before',
  ].join('\n'),
  wd: 'before <- nchar(getwd())\nif (args[[1]] %% 50 == 7) setwd("/usr/lib")\nresult <- before',
  locale: [
    'before <- nchar(Sys.getlocale("LC_COLLATE"))',
    'if (args[[1]] %% 50 == 7) invisible(Sys.setlocale("LC_COLLATE", "C"))',
    'result <- before',
  ].join('\n'),
  // .libPaths() keeps its directories outside options()
  libPaths: [
    'before <- length(.libPaths())',
    'if (args[[1]] %% 50 == 7) .libPaths(c(tempdir(), "/usr"))',
    'result <- before',
  ].join('\n'),
};

describe.skipIf(!restrictedOk)(
  `R rows leave no options, environment, directory or locale behind (${restrictedOk ? 'Restricted' : skipReason})`,
  () => {
    for (const [name, body] of Object.entries(bodies)) {
      test(`${name}: every row's value is its value on a fresh worker, through eval, evalBatch and evalColumns`, async () => {
        const { registry } = scopedRegistry({ f: [body, ['number'], 'number'] });
        // What a row gives on a fresh worker: the first row of each new registry.
        const fresh = await registry.eval('f', [V.number(7)]);
        expect(fresh.type).toBe('number');
        const first = (fresh as { value: number }).value;
        const expected = rows.map(() => first);
        const one: unknown[] = [];
        for (const x of [7, 8, 57, 9]) {
          one.push(((await registry.eval('f', [V.number(x)])) as { value: number }).value);
        }
        expect(one).toEqual([first, first, first, first]);
        const batch = numbers(
          await registry.evalBatch(
            'f',
            rows.map((x) => [V.number(x)]),
          ),
        );
        expect(batch).toEqual(expected);
        const reversed = rows.slice().reverse();
        const again = numbers(
          await registry.evalBatch(
            'f',
            reversed.map((x) => [V.number(x)]),
          ),
        );
        expect(again).toEqual(expected);
        const { values, errors } = await registry.evalColumns('f', [Float64Array.from(reversed)]);
        expect(errors.size).toBe(0);
        expect(Array.from(values)).toEqual(expected);
      });
    }

    test('a vectorized chunk that sets options leaves them to no later chunk', async () => {
      const { registry } = scopedRegistry({
        v: [
          'before <- getOption("digits")\noptions(digits = 3)\nSys.setenv(PROBE = "1")\nresult <- args[[1]] * 0 + before * 10 + nchar(Sys.getenv("PROBE"))',
          ['number'],
          'number',
          { vectorized: true },
        ],
      });
      for (const n of [1, 5, 300]) {
        const { values, errors } = await registry.evalColumns('v', [new Float64Array(n)]);
        expect(errors.size).toBe(0);
        expect(Array.from(values)).toEqual(Array.from({ length: n }, () => 71));
      }
    });
  },
);
