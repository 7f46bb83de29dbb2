/**
 * How often a warm call reads its worker's process tree from /proc (each
 * read is a few system calls, a fifth of a sequential call's host time on a
 * VM): calls one after another read it once per CHECK_WINDOW_MS (the check
 * after a call, when the last read is that old); a worker that goes back
 * unread is read by the pool's look PENDING_CHECK_MS after it was parked;
 * after a pause, the check before the next call reads it (warm-worker.ts,
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
 * A started worker, and counts of the tree reads from now on: those of the
 * calls (before and after each), and those of the pool's looks at idle
 * workers (`checkIdle`: parked with a check pending, or every 500 ms).
 */
async function warm() {
  const made = fixtureRegistry({ f: ['result = args[0]', ['number'], 'number'] });
  cleanups.push(() => made.registry.close());
  expect(await made.registry.eval('f', [Value.number(0)])).toEqual(Value.number(0));
  let calls = 0;
  let looks = 0;
  const read = ProcessTreeReader.prototype.read;
  vi.spyOn(ProcessTreeReader.prototype, 'read').mockImplementation(function (
    this: ProcessTreeReader,
  ) {
    if (new Error().stack?.includes('checkIdle')) looks++;
    else calls++;
    return read.call(this);
  });
  return { ...made, reads: () => calls, looks: () => looks };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe.skipIf(!hasPython)(
  `process-tree reads per warm call${hasPython ? '' : ' (skipped: /usr/bin/python3 is not installed here)'}`,
  () => {
    test('calls one after another read the tree once per 25 ms window, not once per call', async () => {
      const { registry, reads, looks } = await warm();
      let calls = 0;
      const start = performance.now();
      // At least 200 calls and 200 ms (8 windows), however slow a loaded machine makes a call.
      while (calls < 200 || performance.now() - start < 200) {
        calls++;
        expect(await registry.eval('f', [Value.number(calls)])).toEqual(Value.number(calls));
      }
      const elapsed = performance.now() - start;
      const windows = Math.ceil(elapsed / 25);
      // A read at least once a window: after the call that ends it, or by the pool's look
      // when a pause of the test's own process (a collection, another process on the core)
      // left the worker parked for PENDING_CHECK_MS. Such a pause over a millisecond makes
      // the check before the next call read the tree too, now and then: allowed for (a
      // quarter of the calls), far below a read per call (or two: before and after), which
      // these bounds tell apart while a call takes under ~18 ms, loaded or not.
      expect(reads() + looks()).toBeGreaterThanOrEqual(windows - 2);
      expect(reads()).toBeLessThanOrEqual(windows + 1 + Math.floor(calls / 4));
    });

    test('a worker that goes back unread is read by the pool soon after, once', async () => {
      const { registry, reads, looks } = await warm();
      // The first call after the warm-up's read is within its window: no read after it.
      // (A pause of this process over a millisecond before it makes the check before it
      // read the tree: allowed for.)
      expect(await registry.eval('f', [Value.number(1)])).toEqual(Value.number(1));
      expect(reads()).toBeLessThanOrEqual(1);
      await sleep(30);
      expect(looks(), 'the look PENDING_CHECK_MS after parking it').toBe(1);
      await sleep(30);
      expect(looks(), 'nothing pending: no further look').toBe(1);
    });

    test('after a pause the check before the call reads the tree again, once', async () => {
      const { registry, reads } = await warm();
      await sleep(30);
      const before = reads();
      expect(await registry.eval('f', [Value.number(1)])).toEqual(Value.number(1));
      // one read before the call (shape and idle CPU together); none after it, within its window
      expect(reads() - before).toBe(1);
    });
  },
);
