/**
 * A warm worker's deadline and output watch is one timer, left armed between
 * requests (warm-worker.ts, `#watch`): after calls one after another with a
 * long deadline, a call that hangs is still cut off at its own, shorter
 * deadline, its worker replaced, and the calls after it are answered.
 */
import { Value } from '@improv/extfn-core';
import { afterEach, describe, expect, test } from 'vitest';
import { fixtureRegistry, hasPython } from './helpers.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

const HANGS_BELOW_ZERO = [
  'import time',
  'if args[0] < 0:',
  '    time.sleep(60)',
  'result = args[0]',
].join('\n');

describe.skipIf(!hasPython)(
  `deadlines after quick calls${hasPython ? '' : ' (skipped: /usr/bin/python3 is not installed here)'}`,
  () => {
    test('a hanging call after 200 quick ones times out at its own deadline', async () => {
      const { registry, runner } = fixtureRegistry({ f: [HANGS_BELOW_ZERO, ['number'], 'number'] });
      cleanups.push(() => registry.close());
      for (let i = 0; i < 200; i++) {
        expect(await registry.eval('f', [Value.number(i)], { timeoutMs: 20_000 })).toEqual(
          Value.number(i),
        );
      }
      const started = performance.now();
      const hung = await registry.eval('f', [Value.number(-1)], { timeoutMs: 300 }).then(
        () => undefined,
        (error: unknown) => error,
      );
      const ms = performance.now() - started;
      expect(hung).toMatchObject({ kind: 'Timeout', ms: 300 });
      // the runner's own cut-off, not core's backstop (deadline + 2 s of grace)
      expect(ms, 'ms to the Timeout').toBeLessThan(1_500);
      expect(await registry.eval('f', [Value.number(7)])).toEqual(Value.number(7));
      expect(runner.stats().started).toBe(2);
    });
  },
);
