/**
 * How the scheduler shares a vectorized batch among lanes (fake dispatcher,
 * no interpreter): with two workers to serve it, a batch of a few tens of
 * milliseconds goes out as one chunk per lane, not as one chunk for a lane
 * while the other idles; with one worker and no start that pays, the lane
 * takes the rest at once instead of halving it for a lane that never comes.
 */
import type { ExternalFn } from '@improv/extfn-core';
import { expect, test } from 'vitest';
import type { WorkerRequest } from '../src/dispatch.js';
import type { Frame } from '../src/frames.js';
import type { RowSource } from '../src/row-sources.js';
import { type SchedulerContext, schedule } from '../src/scheduler.js';

const fn: ExternalFn = {
  name: 'v',
  language: 'fake',
  body: '',
  argTypes: ['number'],
  returnType: 'number',
  pure: false,
  vectorized: true,
};

const N = 1_000_000;
/** 20 ns a row, as R's `x * 1.05^y` or numpy's hypot: the whole batch is 20 ms of work. */
const PER_ROW_MS = 20e-6;

function run(wouldServe: () => boolean) {
  const chunks: number[] = [];
  const rows: RowSource = {
    count: N,
    encode: (start, count) => ({ header: { op: 'callf64', start, count } }),
    decode() {},
    fail() {},
  };
  const ctx: SchedulerContext = {
    lanes: 2,
    chunkMs: 25,
    // an earlier batch measured it, as in a refresh
    perRowMs: new Map([['v', PER_ROW_MS]]),
    async request(_fn, _key, request: WorkerRequest): Promise<Frame> {
      chunks.push((request.header as { count: number }).count);
      await new Promise((resolve) => setTimeout(resolve, 1));
      return { header: {}, elapsedMs: PER_ROW_MS * (request.header as { count: number }).count };
    },
    endLease() {},
    wouldServe,
    toError: () => {
      throw new Error('no failure expected');
    },
  };
  return schedule(ctx, fn, 'v', rows, { timeoutMs: 10_000 }).then(() => chunks);
}

test('two workers: one chunk each, though the batch is far below one 200 ms chunk', async () => {
  expect(await run(() => true)).toEqual([N / 2, N / 2]);
});

test('one worker and no start that pays: the lane takes the rest at once', async () => {
  // the first chunk is taken while the pool still counts its idle worker
  let asked = 0;
  expect(await run(() => asked++ === 0)).toEqual([N / 2, N / 2]);
});
