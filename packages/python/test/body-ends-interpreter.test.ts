/**
 * A Python body that ends (or would end) its interpreter fails its own row
 * with a message that says so and gives the fix: SystemExit and
 * KeyboardInterrupt, which the driver catches, name themselves and what to
 * do instead; os._exit(), the driver's descriptors closed and os.abort(),
 * which end the process before the driver can answer, read as the body
 * ending or crashing its interpreter on that row. The other rows of the
 * batch keep their values (the worker is replaced), with and without the zygote.
 * A one-shot call (the CLI's eval) reads the same.
 */
import { ExtFnError, Value as V, type Value } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { noRestricted, restrictedOk, scopedRegistry } from './helpers.js';

const n = V.number;
const shown = (cells: (Value | ExtFnError)[]) =>
  cells.map((c) => (ExtFnError.isInstance(c) ? `${c.kind}: ${c.message}` : c));

const FIX =
  'a body must return a value (set result), or raise an exception such as ValueError to fail its row';
const HOST =
  " while running this row: the function's body ended its interpreter (an exit, an abort, " +
  "a signal to its own process, the driver's connections closed) or crashed it; a body must " +
  'return its result, or raise an error to fail its row';
/** What each body does on its row 2, and the message its row gets (a RegExp: the host's). */
const ENDERS: Record<string, [string, string | RegExp]> = {
  sys_exit: [
    'import sys\n    sys.exit(3)',
    `SystemExit: the body raised SystemExit(3) (sys.exit()), which would end the interpreter: ${FIX}`,
  ],
  sys_exit_none: [
    'import sys\n    sys.exit()',
    `SystemExit: the body raised SystemExit() (sys.exit()), which would end the interpreter: ${FIX}`,
  ],
  raise_exit: [
    'raise SystemExit("bye")',
    `SystemExit: the body raised SystemExit('bye') (sys.exit()), which would end the interpreter: ${FIX}`,
  ],
  interrupt: [
    'raise KeyboardInterrupt',
    `KeyboardInterrupt: the body raised KeyboardInterrupt (or sent SIGINT to its own process), which would end the interpreter: ${FIX}`,
  ],
  sigint: [
    'import os, signal\n    os.kill(os.getpid(), signal.SIGINT)',
    `KeyboardInterrupt: the body raised KeyboardInterrupt (or sent SIGINT to its own process), which would end the interpreter: ${FIX}`,
  ],
  os_exit: ['import os\n    os._exit(3)', `the interpreter exited with code 3${HOST}`],
  closed: [
    'import os\n    os.closerange(0, 1024)',
    /^the interpreter exited with code \d+ while running this row: /,
  ],
  os_abort: [
    'import os\n    os.abort()',
    /^the interpreter was killed by SIG[A-Z]+ while running this row: /,
  ],
};

const literal = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

describe.skipIf(!restrictedOk)(
  `a Python body that ends its interpreter ${restrictedOk ? '' : noRestricted}`,
  () => {
    for (const zygote of ['1', '0']) {
      test(`fails its own row, saying what the body did and the fix; the other rows keep their values (IMPROV_EXTFN_ZYGOTE=${zygote})`, async () => {
        const saved = process.env.IMPROV_EXTFN_ZYGOTE;
        process.env.IMPROV_EXTFN_ZYGOTE = zygote;
        try {
          const fns: Parameters<typeof scopedRegistry>[1] = {};
          for (const [name, [code]] of Object.entries(ENDERS)) {
            fns[name] = [`if args[0] == 2:\n    ${code}\nresult = args[0]`, ['number'], 'number'];
            fns[`${name}_text`] = [
              `if args[0] == 'b':\n    ${code}\nresult = args[0].upper()`,
              ['text'],
              'text',
            ];
          }
          const { registry } = scopedRegistry('restricted', fns, { maxWorkers: 1 });
          for (const [name, [, message]] of Object.entries(ENDERS)) {
            const want = (fn: string) =>
              new RegExp(
                `^Runtime: function ${fn}: ${typeof message === 'string' ? `${literal(message)}$` : message.source.slice(1)}`,
              );
            const single = await registry.eval(name, [n(2)]).catch((e: unknown) => e);
            expect([name, shown([single as ExtFnError])]).toEqual([
              name,
              [expect.stringMatching(want(name))],
            ]);
            if (zygote === '1') {
              // A one-shot call (the CLI's eval) reads the same: it loaded, then the body ran.
              const once = await registry
                .eval(name, [n(2)], { mode: 'oneShot' })
                .catch((e: unknown) => e);
              expect([name, 'oneShot', shown([once as ExtFnError])]).toEqual([
                name,
                'oneShot',
                [expect.stringMatching(want(name))],
              ]);
            }
            const rows = [1, 2, 3].map((x) => [n(x)]);
            expect([name, shown(await registry.evalBatch(name, rows))]).toEqual([
              name,
              [n(1), expect.stringMatching(want(name)), n(3)],
            ]);
            const text = ['a', 'b', 'c'].map((x) => [V.text(x)]);
            expect([name, shown(await registry.evalBatch(`${name}_text`, text))]).toEqual([
              name,
              [V.text('A'), expect.stringMatching(want(`${name}_text`)), V.text('C')],
            ]);
            expect(await registry.eval(name, [n(4)])).toEqual(n(4));
          }
        } finally {
          if (saved === undefined) delete process.env.IMPROV_EXTFN_ZYGOTE;
          else process.env.IMPROV_EXTFN_ZYGOTE = saved;
        }
      }, 120_000);
    }
  },
);
