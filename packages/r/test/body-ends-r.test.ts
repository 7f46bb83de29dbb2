/**
 * A body that ends R by a way the driver cannot take from it beforehand —
 * `.Internal(quit())`, the "abort" restart (by name or straight through
 * `.Internal`), `closeAllConnections()`, the driver's connections closed one
 * by one — fails its own row with a QuitError that says what the body did
 * and what to do instead, through every request (call, callf64, callcols,
 * vectorized); the other rows of the batch keep their values, and a crash
 * the driver cannot see at all reads as the body's, with the fix.
 */
import { existsSync } from 'node:fs';
import { ExtFnError, Value as V, type Value } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { failure, restrictedOk, scopedRegistry, skipReason } from './helpers.js';

const n = V.number;
const shown = (cells: (Value | ExtFnError)[]) =>
  cells.map((c) => (ExtFnError.isInstance(c) ? `${c.kind}: ${c.message}` : c));
const LIBC = [
  '/lib/x86_64-linux-gnu/libc.so.6',
  '/lib/aarch64-linux-gnu/libc.so.6',
  '/lib64/libc.so.6',
];
const libc = LIBC.find((path) => existsSync(path));

const FIX = 'a body must return a value (set result), or call stop() to fail its row';
const CLOSE_FIX =
  'a body must close only the connections it opened (close(con)), ' +
  'and return a value (set result) or call stop() to fail its row';
/** What each body does on its row 2, and the QuitError it gets for it. */
const ENDERS: Record<string, [string, string]> = {
  internal: [
    '.Internal(quit("no", 3L, FALSE))',
    `the body ended the R session with .Internal(quit()): ${FIX}, not end R`,
  ],
  abort: [
    'invokeRestart("abort")',
    `the body jumped out of its call with invokeRestart("abort"), which would end R: ${FIX}, not invoke the abort restart`,
  ],
  toplevel: [
    '.Internal(.invokeRestart(structure(class = "restart", list("abort", NULL)), list()))',
    `the body jumped out of its call to R's top level, which ends R: ${FIX}`,
  ],
  connections: [
    'closeAllConnections()',
    `the body closed the driver's connections with closeAllConnections(), which would end R: ${CLOSE_FIX}`,
  ],
  closed: [
    'for (k in getAllConnections()) if (k > 2) close(getConnection(k))',
    `the body closed the driver's connections, which ends R: ${CLOSE_FIX}`,
  ],
};

describe.skipIf(!restrictedOk)(
  `an R body that ends R (${restrictedOk ? 'Restricted' : skipReason})`,
  () => {
    test('fails its own row with a QuitError naming what it did and the fix; the other rows keep their values', async () => {
      const fns: Parameters<typeof scopedRegistry>[0] = {};
      for (const [name, [call]] of Object.entries(ENDERS)) {
        // number → number: eval is a `call`, evalBatch and evalColumns `callf64`
        fns[name] = [`if (args[[1]] == 2) ${call}\nresult <- args[[1]]`, ['number'], 'number'];
        // text: evalBatch is `callcols`
        fns[`${name}_text`] = [
          `if (args[[1]] == "b") ${call}\nresult <- toupper(args[[1]])`,
          ['text'],
          'text',
        ];
        fns[`${name}_vec`] = [
          `if (any(args[[1]] == 2)) ${call}\nresult <- args[[1]]`,
          ['number'],
          'number',
          { vectorized: true },
        ];
      }
      const { registry } = scopedRegistry(fns, { maxWorkers: 1 });
      const rows = [1, 2, 3].map((x) => [n(x)]);
      for (const [name, [, message]] of Object.entries(ENDERS)) {
        const error = (fn: string) => `Runtime: function ${fn}: QuitError: ${message}`;
        const single = await failure(registry.eval(name, [n(2)]));
        expect([name, single.kind, single.message]).toEqual([
          name,
          'Runtime',
          `function ${name}: QuitError: ${message}`,
        ]);
        expect([name, shown(await registry.evalBatch(name, rows))]).toEqual([
          name,
          [n(1), error(name), n(3)],
        ]);
        const { values, errors } = await registry.evalColumns(name, [Float64Array.of(1, 2, 3)]);
        expect([
          name,
          values[0],
          values[2],
          [...errors.keys()],
          shown([...errors.values()]),
        ]).toEqual([name, 1, 3, [1], [error(name)]]);
        const text = ['a', 'b', 'c'].map((x) => [V.text(x)]);
        expect([name, shown(await registry.evalBatch(`${name}_text`, text))]).toEqual([
          name,
          [V.text('A'), error(`${name}_text`), V.text('C')],
        ]);
        expect([name, shown(await registry.evalBatch(`${name}_vec`, rows))]).toEqual([
          name,
          [n(1), error(`${name}_vec`), n(3)],
        ]);
        // and the function goes on serving
        expect(await registry.eval(name, [n(4)])).toEqual(n(4));
      }
    }, 120_000);

    test.skipIf(!libc)(
      `a crash the driver cannot see reads as the body ending or crashing R on that row, with the fix, in a batch and in a one-shot call${libc ? '' : ` (skipped: no libc at ${LIBC.join(', ')})`}`,
      async () => {
        const { registry } = scopedRegistry({
          crash: [
            `if (args[[1]] == 2) { dyn.load("${libc}"); .C("abort") }\nresult <- args[[1]]`,
            ['number'],
            'number',
          ],
        });
        const batch = await registry.evalBatch(
          'crash',
          [1, 2, 3].map((x) => [n(x)]),
        );
        expect([batch[0], batch[2]]).toEqual([n(1), n(3)]);
        const crashed = expect.stringMatching(
          /^function crash: the interpreter was killed by SIG[A-Z]+ while running this row: the function's body ended its interpreter \(.*\) or crashed it; a body must return its result, or raise an error to fail its row$/,
        );
        const row = batch[1] as ExtFnError;
        expect([row.kind, row.message]).toEqual(['Runtime', crashed]);
        // A one-shot call (the CLI's eval) loaded the function, so its silence is the body's too.
        const once = await failure(registry.eval('crash', [n(2)], { mode: 'oneShot' }));
        expect([once.kind, once.message]).toEqual(['Runtime', crashed]);
      },
    );
  },
);
