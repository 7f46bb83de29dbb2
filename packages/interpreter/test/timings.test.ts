/**
 * What the host process measures of an interpreter setting outlives the
 * runner (timings.ts): a new runner of the same setting sizes a known
 * function's first chunk by the time per row learnt before, and judges
 * further workers by the start times measured before; another setting, or a
 * process that forgot, starts from nothing. Fake workers behind the runner's
 * and the pool's launch seams: no interpreter.
 */
import { type ExternalFn, Value } from '@improv/extfn-core';
import { afterEach, describe, expect, test } from 'vitest';
import type { DispatchWorker } from '../src/dispatch.js';
import type { Frame, FrameHeader, RawJson } from '../src/frames.js';
import { forgetTimings } from '../src/index.js';
import { Pool } from '../src/pool.js';
import { createRunnerWithLaunch } from '../src/runner.js';
import {
  DEFAULT_FORK_MS,
  DEFAULT_START_MS,
  StartTimes,
  Timings,
  timingsFor,
} from '../src/timings.js';
import type { InterpreterSpec } from '../src/types.js';
import { SummingWorker } from './summing-worker.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

afterEach(() => {
  forgetTimings();
});

const spec = (path: string): InterpreterSpec => ({
  language: 'fake',
  packageName: '@test/fake',
  resolveInterpreter: async () => ({ path }),
  args: [],
  driverSource: '',
});

const fn: ExternalFn = {
  name: 'f',
  language: 'fake',
  body: 'f',
  argTypes: ['number', 'number'],
  returnType: 'number',
  pure: false,
};

/** A SummingWorker that records how many rows each request had. */
class CountingWorker extends SummingWorker {
  constructor(
    key: string,
    readonly sizes: number[],
  ) {
    super(key);
  }
  override async request(header: FrameHeader): Promise<Frame> {
    this.sizes.push((JSON.parse((header.rows as RawJson).text) as unknown[]).length);
    return super.request(header);
  }
}

/** A new runner (as a new Registry makes) of the interpreter at `path`; its requests' row counts in `sizes`. */
function runnerAt(path: string) {
  const sizes: number[] = [];
  const runner = createRunnerWithLaunch(
    spec(path),
    { policy: 'unsandboxed', maxWorkers: 1 },
    async (key) => new CountingWorker(key, sizes),
  );
  return { runner, sizes };
}

const rows = Array.from({ length: 20_000 }, (_, i) => [Value.number(i), Value.number(1)]);

async function firstChunk(path: string): Promise<number> {
  const { runner, sizes } = runnerAt(path);
  try {
    const results = await runner.callBatch(fn, rows, { timeoutMs: 5_000 });
    expect(results[19_999]).toEqual(Value.number(20_000));
    return sizes[0]!;
  } finally {
    await runner.close();
  }
}

describe('timings kept across runners', () => {
  test("a new runner of the same interpreter starts a known function's batch at the learnt chunk size, not at one row", async () => {
    expect(await firstChunk('/nonexistent/python-a')).toBe(1); // nothing known: the ramp from one row
    expect(await firstChunk('/nonexistent/python-a')).toBeGreaterThan(100); // 5 ms at ~1 µs a row
  });

  test('another interpreter, or a process that forgot, starts from one row', async () => {
    expect(await firstChunk('/nonexistent/python-a')).toBe(1);
    expect(await firstChunk('/nonexistent/python-b')).toBe(1);
    forgetTimings();
    expect(await firstChunk('/nonexistent/python-a')).toBe(1);
  });

  test('one object per setting, shared; another setting has its own', () => {
    const a = timingsFor('["@test/fake","/x",[],"restricted"]');
    expect(timingsFor('["@test/fake","/x",[],"restricted"]')).toBe(a);
    expect(timingsFor('["@test/fake","/x",[],"trusted"]')).not.toBe(a);
    a.perRowMs.set('k', 0.5);
    forgetTimings();
    expect(timingsFor('["@test/fake","/x",[],"restricted"]').perRowMs.has('k')).toBe(false);
  });
});

describe('start times', () => {
  test('forks and trees apart: the default until measured, then the measurement, then a moving average', () => {
    const starts = new Timings().starts;
    expect(starts.ms(true)).toBe(DEFAULT_FORK_MS);
    expect(starts.ms(false)).toBe(DEFAULT_START_MS);
    starts.note(true, 6);
    expect(starts.ms(true)).toBe(6);
    expect(starts.ms(false)).toBe(DEFAULT_START_MS);
    starts.note(true, 16);
    expect(starts.ms(true)).toBeCloseTo(9);
    starts.note(false, Number.NaN); // not a time: ignored
    expect(starts.ms(false)).toBe(DEFAULT_START_MS);
  });

  test("the pool counts a fork from a ready zygote as a fork; one that waited for the zygote's boot is not counted", async () => {
    const pool = new Pool<DispatchWorker>(2, 30_000, async (key) => {
      await sleep(30);
      return new SummingWorker(key);
    });
    const times = new StartTimes();
    pool.startTimes = () => times;
    pool.startsFork = () => true;
    pool.forkReady = () => false; // the zygote still boots
    await pool.warm('a', fn);
    expect(pool.startMs()).toBe(DEFAULT_FORK_MS); // the boot's wait is not a fork's cost
    pool.forkReady = () => true;
    await pool.warm('b', { ...fn, name: 'g' });
    expect(pool.startMs()).toBeGreaterThanOrEqual(29); // measured: ~30 ms
    expect(times.ms(false)).toBe(DEFAULT_START_MS); // no tree measured
    pool.startsFork = () => false;
    expect(pool.startMs()).toBe(DEFAULT_START_MS); // the next start is a tree: judged as one
    await pool.close();
  });
});
