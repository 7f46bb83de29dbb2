/**
 * `registry.warmUp` with real interpreters: a model's functions get a worker
 * each before the first refresh, which then starts none; a body that does
 * not load gets, from warmUp, the error its calls get, and no body runs.
 */
import { ExtFnError, Value } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { hasPython, restrictedOk, scopedRegistry } from './helpers.js';

const policy = restrictedOk ? 'restricted' : 'trusted';

describe.skipIf(!hasPython)(
  `warmUp (policy ${policy}${hasPython ? '' : ', skipped: no /usr/bin/python3'})`,
  () => {
    test("each function's worker is ready before the refresh, which starts none", async () => {
      const { registry, runner } = scopedRegistry(policy, {
        add: ['result = args[0] + args[1]', ['number', 'number'], 'number'],
        shout: ['result = args[0].upper()', ['text'], 'text'],
        // would fail at its first call: warmUp runs no body
        later: ['raise RuntimeError("ran")', [], 'number'],
      });
      const results = await registry.warmUp();
      expect(results).toEqual([
        { name: 'add', warm: true },
        { name: 'shout', warm: true },
        { name: 'later', warm: true },
      ]);
      expect(runner.stats()).toMatchObject({ started: 3, live: 3 });
      const rows = Array.from({ length: 1000 }, (_, i) => [Value.number(i), Value.number(1)]);
      const [sums, shouted] = await Promise.all([
        registry.evalBatch('add', rows),
        registry.evalBatch('shout', [[Value.text('abc')], [Value.text('déjà')]]),
      ]);
      expect(sums[999]).toEqual(Value.number(1000));
      expect(shouted).toEqual([Value.text('ABC'), Value.text('DÉJÀ')]);
      const ran = await registry.eval('later', []).catch((e) => e);
      expect(ran.message).toContain('RuntimeError: ran');
      expect(runner.stats().started).toBe(3);
    }, 60_000);

    test('a body that does not load: the error its calls get; the others warm', async () => {
      const { registry, runner } = scopedRegistry(policy, {
        ok: ['result = 1', [], 'number'],
        broken: ['result = (', [], 'number'],
      });
      const [ok, broken] = await registry.warmUp(['ok', 'broken']);
      expect(ok).toEqual({ name: 'ok', warm: true });
      expect(broken?.warm).toBe(false);
      const called = await registry.eval('broken', []).catch((e) => e);
      expect(ExtFnError.isInstance(broken?.error)).toBe(true);
      expect(broken?.error?.kind).toBe(called.kind);
      expect(broken?.error?.message).toBe(called.message);
      expect(broken?.error?.message).toContain('SyntaxError');
      expect(await registry.eval('ok', [])).toEqual(Value.number(1));
      expect(runner.stats().started).toBeLessThanOrEqual(2);
    }, 60_000);
  },
);
