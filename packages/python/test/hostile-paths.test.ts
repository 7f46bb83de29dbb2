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
import { everyPath, PATH_ROWS, pathProblems } from '@improv/extfn-core/testing';
import { describe, expect, test } from 'vitest';
import {
  expectScriptDepth,
  type FnExtras,
  hasNumpy,
  noNumpy,
  noRestricted,
  PYTHON,
  type registryWith,
  restrictedOk,
  scopedRegistry,
} from './helpers.js';
import { type Case, CORPUS } from './hostile-corpus.js';

const VEC: FnExtras = { vectorized: true };

const n = V.number;

// Cases for results that once depended on the path (a row run through map()
// or the row loop, alone or after other rows in its request).
const PATH_CASES: Case[] = [
  {
    name: 'a row that raises StopIteration fails with its own error on every path, and the rows after it keep their values (f64 frames)',
    body: [
      'x = int(args[0])',
      'if x % 8 == 0:',
      "    raise StopIteration('stop %d' % x)",
      'result = args[0]',
    ].join('\n'),
    expect: (x) => (x % 8 === 0 ? /^StopIteration: stop \d+$/ : n(x)),
  },
  {
    name: 'a row that raises StopIteration fails with its own error on every path, and the rows after it keep their values (callcols)',
    argTypes: ['text'],
    returnType: 'text',
    args: (i) => [V.text(`row-${i}`)],
    body: [
      's = args[0]',
      'if int(s[4:]) % 8 == 0:',
      "    raise StopIteration('stop ' + s)",
      'result = s.upper()',
    ].join('\n'),
    expect: (x) => (x % 8 === 0 ? /^StopIteration: stop row-\d+$/ : V.text(`ROW-${x}`)),
  },
  {
    name: 'a row that changes its args and then loads a generator (tempfile imports random) runs again seeded on its args as they came',
    body: ['args.append(1.0)', 'import tempfile', 'result = len(args) * 1000 + args[0]'].join('\n'),
    expect: (x) => n(2000 + x),
  },
  {
    name: 'what a row writes to its globals through its frame (sys._getframe().f_globals, a traceback’s tb_frame) is gone in the next row',
    body: [
      'import sys',
      'x = int(args[0])',
      'if x % 8 == 0:',
      "    sys._getframe().f_globals['leak'] = x",
      'if x % 8 == 4:',
      '    try:',
      '        raise ValueError',
      '    except ValueError as e:',
      "        e.__traceback__.tb_frame.f_globals['__name__'] = 'row %d' % x",
      "seen = sys._getframe().f_globals.get('leak', -1)",
      "result = seen * 1000 + (x if __name__ == '__extfn__' else -x)",
    ].join('\n'),
    expect: (x) => n(x % 8 === 0 ? 1001 * x : x % 8 === 4 ? -1000 - x : -1000 + x),
  },
  {
    name: 'a counter kept in the globals through sys._getframe().f_globals starts over on every row: every row reads 1',
    body: [
      'import sys',
      'g = sys._getframe().f_globals',
      "g['calls'] = g.get('calls', 0) + 1",
      "result = g['calls']",
    ].join('\n'),
    vectorized: [
      'import sys',
      'g = sys._getframe().f_globals',
      "g['calls'] = g.get('calls', 0) + 1",
      "result = args[0] * 0 + g['calls']",
    ].join('\n'),
    numpy: true,
    expect: () => n(1),
  },
  {
    name: 'a row that replaces sys.stdout hides only its own prints: a later row printing past the 1 MiB cap fails with "output too large" on every path',
    body: [
      'import sys, io',
      'x = int(args[0])',
      'if x % 8 == 0:',
      '    sys.stdout = io.StringIO()',
      'if x % 61 == 17:',
      "    print('z' * (1 << 20))",
      'result = args[0]',
    ].join('\n'),
    expect: (x) => (x % 61 === 17 && x % 8 !== 0 ? /^output too large$/ : n(x)),
  },
  {
    name: 'a row that sets sys.setrecursionlimit sets it for itself: every other row has 1000, and nests as deep as ever',
    body: [
      'import sys',
      'x = int(args[0])',
      'if x % 8 == 0:',
      '    sys.setrecursionlimit(40 + x)',
      'elif x % 8 == 4:',
      '    sys.setrecursionlimit(1)  # refused: below the depth the row is at',
      'def down(n):',
      '    return 0 if n == 0 else 1 + down(n - 1)',
      'result = sys.getrecursionlimit() * 1000 + down(900 if x % 8 else 30)',
    ].join('\n'),
    expect: (x) =>
      x % 8 === 0
        ? n((40 + x) * 1000 + 30)
        : x % 8 === 4
          ? /^RecursionError: cannot set the recursion limit to 1: the body is already deeper than that$/
          : n(1000 * 1000 + 900),
  },
  {
    name: 'a row that replaces sys.stdin is the only one whose input() reads it',
    body: [
      'import sys, io',
      'x = int(args[0])',
      'if x % 8 == 0:',
      "    sys.stdin = io.StringIO('row %d\\n' % x * 3)  # lines for the rows after it to read, too",
      'try:',
      '    result = float(len(input()))',
      'except EOFError:',
      '    result = -1.0',
    ].join('\n'),
    expect: (x) => n(x % 8 === 0 ? `row ${x}`.length : -1),
  },
];

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
    test(`the corpus's batches are cut into chunks: a cold batch of ${PATH_ROWS} rows runs as 4 requests or more`, async () => {
      const { registry } = scopedRegistry('restricted', {
        probe: [CHUNK_PROBE, ['number'], 'number'],
      });
      const rows = Array.from({ length: PATH_ROWS }, (_, i) => [V.number(i)]);
      const sizes = (await registry.evalBatch('probe', rows)).map((cell) =>
        ExtFnError.isInstance(cell) ? Number.NaN : (cell as { value: number }).value,
      );
      // a request of k rows shows k in each of its rows
      const requests = sizes.reduce((sum, k) => sum + 1 / k, 0);
      expect(sizes[0], 'the first row runs alone').toBe(1);
      expect(Math.round(requests)).toBeGreaterThanOrEqual(4);
    });

    test('a body nests as deep on every path: eval, evalBatch (cold and warm) and evalColumns agree on the deepest recursion that works, about 1000 calls', async () => {
      // Depths 985-1004, each on 15 rows spread over the chunks. A path's
      // verdict on a depth is what most of its rows give: CPython gives
      // module-level code one frame less in its first 7 runs in a process
      // (before it is quickened), so a new worker's first rows may fail one
      // depth earlier. A path whose stack takes more frames fails on all.
      const depths = Array.from({ length: 20 }, (_, k) => 985 + k);
      const c: Case = {
        name: 'recursion',
        body: [
          'def down(n):',
          '    return 0 if n == 0 else 1 + down(n - 1)',
          'result = float(down(int(args[0])))',
        ].join('\n'),
        args: (i) => [n(depths[i % depths.length]!)],
      };
      const fns: Parameters<typeof registryWith>[1] = { f: [c.body, ['number'], 'number'] };
      const paths = await everyPath(
        c,
        scopedRegistry('restricted', fns).registry,
        scopedRegistry('restricted', fns).registry,
      );
      const deepest: Record<string, number> = {};
      for (const [path, outcomes] of Object.entries(paths)) {
        const works = depths.filter((d, k) => {
          const rows = outcomes.filter((_, i) => i % depths.length === k);
          return rows.filter((o) => o === `number ${d}`).length > rows.length / 2;
        });
        expect(works, `${path}: the depths that work are the shallower ones`).toEqual(
          depths.slice(0, works.length),
        );
        deepest[path] = works.length ? works[works.length - 1]! : 0;
        const failed = outcomes.filter((o) => !o.startsWith('number'));
        expect(new Set(failed), `${path}: what fails is RecursionError`).toEqual(
          new Set(
            failed.length ? ['Runtime: RecursionError: maximum recursion depth exceeded'] : [],
          ),
        );
      }
      expect(new Set(Object.values(deepest)), JSON.stringify(deepest)).toHaveLength(1);
      expect(deepest.eval).toBeGreaterThanOrEqual(990);
      expect(deepest.eval).toBeLessThan(1004);
    });

    test('a body recursing until RecursionError gets exactly as deep as a script of the same interpreter, through eval, evalBatch and evalColumns', async () => {
      await expectScriptDepth(PYTHON, 'restricted');
    });

    for (const c of [...CORPUS, ...PATH_CASES]) {
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
        expect(pathProblems(c, paths)).toEqual([]);
      });
    }
  },
);
