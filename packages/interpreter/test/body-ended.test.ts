/**
 * A worker whose interpreter ends while it runs the function's body (the
 * body called os._exit, aborted, closed the driver's descriptors) fails that
 * row with a message that says the body ended its interpreter on this row
 * and what to do instead, not only "the interpreter exited with code N";
 * the other rows of the batch keep their values (warm-worker.ts, BODY_ENDED).
 * A one-shot call whose function loaded reads the same (one-shot.ts).
 */
import { ExtFnError, Value } from '@improv/extfn-core';
import { afterEach, describe, expect, test } from 'vitest';
import { BODY_ENDED } from '../src/warm-worker.js';
import { failure, fixtureRegistry, hasPython } from './helpers.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});
function make(...args: Parameters<typeof fixtureRegistry>) {
  const made = fixtureRegistry(...args);
  cleanups.push(() => made.registry.close());
  return made;
}

describe.skipIf(!hasPython)(
  `a body that ends its interpreter (${hasPython ? 'fixture driver' : 'skipped: no /usr/bin/python3'})`,
  () => {
    test('fails its row with what the body did and the fix; the other rows keep their values', async () => {
      const { registry } = make({
        quit: ['if args[0] == 2:\n    os._exit(3)\nresult = args[0]', ['number'], 'number'],
        abort: ['if args[0] == 2:\n    os.abort()\nresult = args[0]', ['number'], 'number'],
      });
      const error = await failure(registry.eval('quit', [Value.number(2)]));
      expect([error.kind, error.message]).toEqual([
        'Runtime',
        `function quit: the interpreter exited with code 3${BODY_ENDED}`,
      ]);
      expect(BODY_ENDED).toBe(
        " while running this row: the function's body ended its interpreter (an exit, an abort, " +
          "a signal to its own process, the driver's connections closed) or crashed it; a body must " +
          'return its result, or raise an error to fail its row',
      );
      const rows = [1, 2, 3].map((x) => [Value.number(x)]);
      for (const name of ['quit', 'abort']) {
        const batch = await registry.evalBatch(name, rows);
        expect([batch[0], batch[2]]).toEqual([Value.number(1), Value.number(3)]);
        const row = batch[1] as ExtFnError;
        expect(ExtFnError.isInstance(row)).toBe(true);
        expect([row.kind, row.message]).toEqual([
          'Runtime',
          expect.stringMatching(
            new RegExp(
              `^function ${name}: the interpreter (exited with code 3|was killed by SIG[A-Z]+) while running this row: `,
            ),
          ),
        ]);
      }
      expect(await registry.eval('quit', [Value.number(4)])).toEqual(Value.number(4));
    });

    test('a one-shot call reads the same once the function loaded (run-once-load-error.test.ts: when it did not)', async () => {
      const { registry } = make({
        quit: ['if args[0] == 2:\n    os._exit(3)\nresult = args[0]', ['number'], 'number'],
      });
      const once = await failure(registry.eval('quit', [Value.number(2)], { mode: 'oneShot' }));
      expect([once.kind, once.message]).toEqual([
        'Runtime',
        `function quit: the interpreter exited with code 3${BODY_ENDED}`,
      ]);
      expect(await registry.eval('quit', [Value.number(1)], { mode: 'oneShot' })).toEqual(
        Value.number(1),
      );
    });
  },
);
