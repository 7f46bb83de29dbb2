/**
 * Scheduling across functions, through the pool's seam with fake workers (no
 * interpreter): the real scheduler, dispatch and pool, with starts counted
 * for refreshes of several functions at once. A worker keeps serving its
 * function while that function has queued work, so concurrent refreshes
 * share the pool without restarting workers chunk by chunk.
 */
import { type ExternalFn, ExtFnError } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import {
  type DispatchContext,
  type DispatchWorker,
  dispatch,
  endLease,
  toExtFnError,
} from '../src/dispatch.js';
import { WorkerFailure } from '../src/failures.js';
import type { Frame, FrameHeader } from '../src/frames.js';
import { Pool } from '../src/pool.js';
import type { RowSource } from '../src/row-sources.js';
import { type SchedulerContext, schedule } from '../src/scheduler.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A worker that answers each row with its index, taking `perRowMs` per row (at least a timer tick per request). */
class FakeWorker implements DispatchWorker {
  static nextPid = 1;
  static deaths = 0;
  readonly pid = FakeWorker.nextPid++;
  alive = true;
  requests = 0;
  busyMs = 0;
  constructor(
    readonly key: string,
    readonly perRowMs: number,
  ) {}
  async request(header: FrameHeader): Promise<Frame> {
    if (!this.alive) throw new WorkerFailure('exited', 'the interpreter exited with code 1');
    const { start, count } = header as { start: number; count: number };
    const ms = count * this.perRowMs;
    await sleep(ms);
    this.requests++;
    this.busyMs += ms;
    if (header.crash === start) {
      FakeWorker.deaths++;
      this.alive = false;
      throw new WorkerFailure('exited', 'the interpreter exited with code 3');
    }
    return {
      header: { values: Array.from({ length: count }, (_, k) => start + k) },
      elapsedMs: ms,
    };
  }
  leftWork(): string | undefined {
    return undefined;
  }
  async retire(): Promise<void> {
    this.alive = false;
  }
  async stop(): Promise<void> {
    this.alive = false;
  }
  async kill(): Promise<void> {
    this.alive = false;
  }
}

const fn = (name: string): ExternalFn => ({
  name,
  language: 'fake',
  body: name,
  argTypes: ['number'],
  returnType: 'number',
  pure: false,
});

/** The runner's wiring (runner.ts), with fake workers behind the pool's Launch seam. */
function fakeRunner(maxWorkers: number, perRowMs = 0.01) {
  const starts: string[] = [];
  const pool = new Pool<DispatchWorker>(maxWorkers, 30_000, async (key) => {
    starts.push(key);
    await sleep(2); // an interpreter start
    return new FakeWorker(key, perRowMs);
  });
  const dispatchContext: DispatchContext = {
    pool,
    maxOutputBytes: 1024 * 1024,
    retireAfterBusyMs: Number.POSITIVE_INFINITY,
  };
  const ctx: SchedulerContext = {
    lanes: pool.max,
    chunkMs: 5,
    perRowMs: new Map(),
    request: (f, key, request) => dispatch(dispatchContext, f, key, request),
    endLease: (lease) => endLease(pool, lease),
    toError: toExtFnError,
  };
  return { pool, ctx, starts };
}

/** Rows 0…n-1 of one function; `crashAt` makes the worker die on the chunk starting there. */
function refresh(ctx: SchedulerContext, name: string, n: number, crashAt?: number) {
  const results: (number | ExtFnError)[] = new Array(n);
  const source: RowSource = {
    count: n,
    encode: (start, count) => ({
      header: { op: 'call', start, count, ...(crashAt === start ? { crash: start } : {}) },
    }),
    decode(frame: Frame, start, count) {
      for (let k = 0; k < count; k++) results[start + k] = (frame.header.values as number[])[k]!;
    },
    fail(row, error) {
      results[row] = error;
    },
  };
  return schedule(ctx, fn(name), name, source, { timeoutMs: 5_000 }).then(() => results);
}

describe('scheduling across functions (fake workers)', () => {
  test('one function: one start per slot', async () => {
    const { ctx, starts } = fakeRunner(2);
    const results = await refresh(ctx, 'a', 20_000);
    expect(results.every((r, i) => r === i)).toBe(true);
    expect(starts).toEqual(['a', 'a']);
  });

  test('four functions refreshed at once: every row right, at most one start per function per slot', async () => {
    // 0.05 ms a row: each refresh is 0.5 s of work, long enough for turn-taking to show
    const { ctx, starts, pool } = fakeRunner(2, 0.05);
    const names = ['a', 'b', 'c', 'd'];
    const all = await Promise.all(names.map((name) => refresh(ctx, name, 10_000)));
    for (const results of all) expect(results.every((r, i) => r === i)).toBe(true);
    for (const name of names) {
      expect(starts.filter((k) => k === name).length, `starts of ${name}`).toBeLessThanOrEqual(2);
    }
    // a start per function, plus at most one per slot when a finished function's slot is reused
    expect(starts.length, `starts: ${starts.join(' ')}`).toBeLessThanOrEqual(names.length + 2);
    expect(pool.counters().peak).toBeLessThanOrEqual(2);
  });

  test('with more slots than functions, the slots are shared and no function starts more than one worker per slot', async () => {
    const { ctx, starts, pool } = fakeRunner(4);
    await Promise.all(['a', 'b'].map((name) => refresh(ctx, name, 20_000)));
    for (const name of ['a', 'b']) {
      expect(
        starts.filter((k) => k === name).length,
        `starts: ${starts.join(' ')}`,
      ).toBeLessThanOrEqual(4);
    }
    expect(pool.counters().peak).toBeLessThanOrEqual(4);
  });

  test('a worker that dies is replaced, and only that costs an extra start', async () => {
    const { ctx, starts } = fakeRunner(1);
    const deathsBefore = FakeWorker.deaths;
    const results = await refresh(ctx, 'a', 5_000, 1);
    expect(results.filter((r) => ExtFnError.isInstance(r))).toHaveLength(1); // the row that kills its worker
    const deaths = FakeWorker.deaths - deathsBefore;
    expect(deaths).toBeGreaterThan(0);
    expect(starts.length).toBe(1 + deaths);
  });

  test('a single call of another function is served during a long refresh', async () => {
    const { ctx, pool, starts } = fakeRunner(2);
    const long = refresh(ctx, 'a', 50_000);
    await sleep(50);
    const single = await refresh(ctx, 'b', 1);
    expect(single).toEqual([0]);
    expect(await long).toHaveLength(50_000);
    expect(starts.filter((k) => k === 'b')).toHaveLength(1);
    expect(pool.counters().peak).toBeLessThanOrEqual(2);
  });
});
