/**
 * `loadFailed` on the error of a body that does not load, through the paths
 * the kit does not take (a one-shot call, evalColumns, warmUp), and never on
 * a row's own failure: an engine shows the first once per function.
 */
import { ExtFnError } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { failure, hasPython, restrictedOk, scopedRegistry } from './helpers.js';

const policy = restrictedOk ? 'restricted' : 'trusted';

describe.skipIf(!hasPython)(
  `loadFailed (policy ${policy}${hasPython ? '' : ', skipped: no /usr/bin/python3'})`,
  () => {
    test('a one-shot call, evalColumns and warmUp of a body that does not parse say loadFailed', async () => {
      const { registry } = scopedRegistry(policy, {
        broken: ['result = (args[0] +', ['number'], 'number'],
      });
      const [warmed] = await registry.warmUp(['broken']);
      expect(warmed?.warm).toBe(false);
      expect(warmed?.error?.loadFailed).toBe(true);
      const once = await failure(
        registry.eval('broken', [{ type: 'number', value: 1 }], { mode: 'oneShot' }),
      );
      expect(once.loadFailed).toBe(true);
      expect(once.message).toMatch(/^function broken: SyntaxError/);
      const { errors } = await registry.evalColumns('broken', [Float64Array.of(1, 2, 3)]);
      expect([...errors.keys()]).toEqual([0, 1, 2]);
      for (const error of errors.values()) {
        expect(ExtFnError.isInstance(error) && error.loadFailed).toBe(true);
      }
    }, 60_000);

    test('a body that loads and fails some rows: those errors are not loadFailed', async () => {
      const { registry } = scopedRegistry(policy, {
        half: [
          'if args[0] < 0:\n    raise ValueError("negative")\nresult = args[0]',
          ['number'],
          'number',
        ],
      });
      const { values, errors } = await registry.evalColumns('half', [Float64Array.of(1, -1, 2)]);
      expect(values[0]).toBe(1);
      expect(values[2]).toBe(2);
      expect(errors.get(1)?.message).toMatch(/ValueError: negative/);
      expect(errors.get(1)?.loadFailed).toBeUndefined();
      const once = await failure(
        registry.eval('half', [{ type: 'number', value: -1 }], { mode: 'oneShot' }),
      );
      expect(once.loadFailed).toBeUndefined();
    }, 60_000);
  },
);
