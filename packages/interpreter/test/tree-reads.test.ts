/**
 * How often a warm call reads its worker's process tree from /proc (each
 * read is a few system calls, a large share of a sequential call's host
 * time on a VM): once after the call, and before the next one only when the
 * tree was last found clean more than a millisecond ago (warm-worker.ts,
 * `idleWork`). Counted through the sandbox's tree reader, whatever the policy.
 */
import { Value } from '@improv/extfn-core';
import { ProcessTreeReader } from '@improv/extfn-sandbox';
import { afterEach, describe, expect, test, vi } from 'vitest';
import { fixtureRegistry, hasPython } from './helpers.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  vi.restoreAllMocks();
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

/**
 * A started worker, and a count of the tree reads the calls make from now on
 * (not the pool's own look at idle workers every 500 ms, which may fall
 * anywhere in a test).
 */
async function warm() {
  const made = fixtureRegistry({ f: ['result = args[0]', ['number'], 'number'] });
  cleanups.push(() => made.registry.close());
  expect(await made.registry.eval('f', [Value.number(0)])).toEqual(Value.number(0));
  let count = 0;
  const read = ProcessTreeReader.prototype.read;
  vi.spyOn(ProcessTreeReader.prototype, 'read').mockImplementation(function (
    this: ProcessTreeReader,
  ) {
    if (!new Error().stack?.includes('checkIdle')) count++;
    return read.call(this);
  });
  return { ...made, reads: () => count };
}

describe.skipIf(!hasPython)(
  `process-tree reads per warm call${hasPython ? '' : ' (skipped: /usr/bin/python3 is not installed here)'}`,
  () => {
    test('calls one after another: the tree is read once per call (the check after it), not three times', async () => {
      const { registry, reads } = await warm();
      const calls = 50;
      for (let i = 1; i <= calls; i++) {
        expect(await registry.eval('f', [Value.number(i)])).toEqual(Value.number(i));
      }
      // Each call's check reads the tree once; the check before the next call is skipped
      // when the last clean read is under 1 ms old. A pause of the test's own process can
      // make that gap longer now and then, so allow for some second reads, far from the
      // three reads a call made when the check before it read the tree twice.
      expect(reads()).toBeGreaterThanOrEqual(calls);
      expect(reads()).toBeLessThan(1.5 * calls);
    });

    test('after a pause the check before the call reads the tree again, once', async () => {
      const { registry, reads } = await warm();
      await new Promise((resolve) => setTimeout(resolve, 20));
      const before = reads();
      expect(await registry.eval('f', [Value.number(1)])).toEqual(Value.number(1));
      // one read before the call (shape and idle CPU together), one after it
      expect(reads() - before).toBe(2);
    });
  },
);
