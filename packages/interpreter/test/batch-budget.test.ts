/**
 * A batch's result budget (`maxBatchResultBytes`): each row's result is
 * capped, but a batch of many large results would still run the host out of
 * memory. Past the budget the batch stops with typed errors, the rows
 * answered keep their results, and the runner goes on serving.
 */
import { ExtFnError, Value } from '@improv/extfn-core';
import { afterEach, describe, expect, test } from 'vitest';
import { batchResultBytes } from '../src/runner.js';
import { fixtureRegistry, hasPython } from './helpers.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

describe('the budget option', () => {
  test('defaults to a quarter of the heap limit, at most 1 GiB', () => {
    const budget = batchResultBytes(undefined);
    expect(budget).toBeGreaterThan(0);
    expect(budget).toBeLessThanOrEqual(2 ** 30);
  });

  test('a value that is not a positive number is refused, naming the option', () => {
    for (const bad of [0, -1, Number.NaN, '1' as unknown as number]) {
      expect(() => batchResultBytes(bad)).toThrow(/maxBatchResultBytes must be a number of bytes/);
    }
    expect(batchResultBytes(4096)).toBe(4096);
  });
});

describe.skipIf(!hasPython)(
  `a batch past its budget ${hasPython ? '' : '(skipped: /usr/bin/python3 is absent)'}`,
  () => {
    test('stops: answered rows keep their results, the rest fail with limit output', async () => {
      const { registry, runner } = fixtureRegistry(
        {
          big: ["result = 'x' * 10000", ['number'], 'text'],
          small: ['result = args[0] + 1', ['number'], 'number'],
        },
        { maxBatchResultBytes: 200_000 },
      );
      cleanups.push(() => registry.close());
      const rows = Array.from({ length: 2000 }, (_, i) => [Value.number(i)]);
      const out = await registry.evalBatch('big', rows);
      const answered = out.filter((row) => !ExtFnError.isInstance(row));
      const failed = out.filter((row) => ExtFnError.isInstance(row)) as ExtFnError[];
      // 200 rows of 10 000 bytes are 2 MB: about a tenth fits, give or take the chunk that crossed
      expect(answered.length).toBeGreaterThan(0);
      expect(answered.length).toBeLessThan(100);
      for (const row of answered) expect(row).toEqual(Value.text('x'.repeat(10000)));
      expect(failed.length + answered.length).toBe(2000);
      expect(failed[0]!.limit).toBe('output');
      expect(failed[0]!.message).toMatch(
        /^function big: the batch's results passed 200000 bytes, /,
      );
      expect(failed[0]!.message).toMatch(/maxBatchResultBytes/);
      // each batch has its own budget, and the runner goes on serving
      expect(await registry.eval('small', [Value.number(1)])).toEqual(Value.number(2));
      const numbers = await registry.evalBatch('small', rows);
      expect(numbers.every((row) => !ExtFnError.isInstance(row))).toBe(true);
      expect(runner.stats().killed).toBe(0);
    });
  },
);
