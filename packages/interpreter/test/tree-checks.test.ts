/**
 * When dispatch looks for work a body left running (`leftWork`), with fake
 * workers behind the real pool: after a request only when the worker's last
 * check is CHECK_WINDOW_MS old, for a worker a batch lane keeps between chunks
 * and for a single call's worker that can say its check is pending (the
 * pool then looks at it once parked: `checkPending`, `idleWork`); one that
 * cannot is checked after every single call; always when the lane gives the
 * worker back (`endLease`), which retires a worker whose tree is not clean.
 */
import type { ExternalFn } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import {
  type DispatchContext,
  type DispatchWorker,
  dispatch,
  endLease,
  type Lease,
} from '../src/dispatch.js';
import type { Frame, FrameHeader } from '../src/frames.js';
import { PENDING_CHECK_MS, Pool } from '../src/pool.js';
import { waitFor } from './helpers.js';

class CheckedWorker implements DispatchWorker {
  readonly pid = undefined;
  alive = true;
  requests = 0;
  busyMs = 0;
  checks = 0;
  retired: string | undefined;
  /** What leftWork reports. */
  left: string | undefined;
  constructor(readonly key: string) {}
  async request(header: FrameHeader): Promise<Frame> {
    this.requests++;
    return { header: { values: [header.start] }, elapsedMs: 1 };
  }
  leftWork(): string | undefined {
    this.checks++;
    return this.left;
  }
  async retire(why: string): Promise<void> {
    this.retired = why;
    this.alive = false;
  }
  async stop(): Promise<void> {
    this.alive = false;
  }
  async kill(): Promise<void> {
    this.alive = false;
  }
}

/** A worker that says how long ago its tree was checked. */
class TimedWorker extends CheckedWorker {
  constructor(
    key: string,
    readonly since: number,
  ) {
    super(key);
  }
  sinceTreeCheckMs(): number {
    return this.since;
  }
}

/** A worker that also says whether a request ended since its last check, as WarmWorker does. */
class PendingWorker extends TimedWorker {
  pending = false;
  /** Looks at it by `idleWork` (before a request, and the pool's while parked). */
  looks = 0;
  /** What `idleWork` reports. */
  idleLeft: string | undefined;
  override async request(header: FrameHeader): Promise<Frame> {
    const frame = await super.request(header);
    this.pending = true;
    return frame;
  }
  override leftWork(): string | undefined {
    this.pending = false;
    return super.leftWork();
  }
  checkPending(): boolean {
    return this.pending;
  }
  idleWork(): string | undefined {
    this.looks++;
    this.pending = false;
    return this.idleLeft;
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const fn: ExternalFn = {
  name: 'f',
  language: 'fake',
  body: 'f',
  argTypes: ['number'],
  returnType: 'number',
  pure: false,
};

function setup(since: number | undefined, pending = false) {
  const workers: CheckedWorker[] = [];
  const pool = new Pool<DispatchWorker>(1, 30_000, async (key) => {
    const worker =
      since === undefined
        ? new CheckedWorker(key)
        : pending
          ? new PendingWorker(key, since)
          : new TimedWorker(key, since);
    workers.push(worker);
    return worker;
  });
  const ctx: DispatchContext = {
    pool,
    maxOutputBytes: 1024,
    retireAfterBusyMs: Number.POSITIVE_INFINITY,
  };
  const send = (start: number, lease?: Lease) =>
    dispatch(ctx, fn, 'k', { header: { op: 'call', start }, rows: 1, timeoutMs: 1_000, lease });
  return { pool, workers, send };
}

describe('tree checks after requests', () => {
  test('a single call on a worker that cannot say its check is pending is checked after every request', async () => {
    const { workers, send } = setup(0);
    await send(0);
    await send(1);
    expect(workers).toHaveLength(1);
    expect(workers[0]!.checks).toBe(2);
  });

  test('single calls within the window go back unchecked, and the pool looks at the parked worker soon after', async () => {
    const { workers, send } = setup(0, true);
    await send(0);
    await send(1);
    const worker = workers[0] as PendingWorker;
    expect(workers).toHaveLength(1);
    expect(worker.checks).toBe(0);
    expect(worker.pending).toBe(true);
    const looks = worker.looks; // the looks before each request
    expect(await waitFor(() => worker.looks > looks)).toBe(true);
    await sleep(PENDING_CHECK_MS + 20);
    expect(worker.looks - looks, 'one look while parked, none after it').toBe(1);
    expect(worker.pending).toBe(false);
    expect(worker.alive).toBe(true);
  });

  test('single calls whose last check is old are checked after their request', async () => {
    const { workers, send } = setup(1_000, true);
    await send(0);
    await send(1);
    expect(workers[0]!.checks).toBe(2);
    expect((workers[0] as PendingWorker).pending).toBe(false);
  });

  test('work the look at a parked worker finds kills it; the next call gets a new worker', async () => {
    const { workers, send, pool } = setup(0, true);
    await send(0);
    const worker = workers[0] as PendingWorker;
    worker.idleLeft = '1 thread(s) left running after the call';
    expect(await waitFor(() => !worker.alive)).toBe(true);
    expect(pool.counters().killed).toBe(1);
    await send(1);
    expect(workers).toHaveLength(2);
    expect(workers[1]!.requests).toBe(1);
  });

  test('a kept worker checked just now is not checked again until the lane gives it back', async () => {
    const { workers, send, pool } = setup(0);
    const lease: Lease = {};
    for (let i = 0; i < 5; i++) await send(i, lease);
    expect(workers[0]!.requests).toBe(5);
    expect(workers[0]!.checks).toBe(0);
    endLease(pool, lease);
    expect(workers[0]!.checks).toBe(1);
    expect(workers[0]!.alive).toBe(true);
  });

  test('a kept worker whose last check is old is checked after its request', async () => {
    const { workers, send, pool } = setup(1_000);
    const lease: Lease = {};
    for (let i = 0; i < 3; i++) await send(i, lease);
    expect(workers[0]!.checks).toBe(3);
    endLease(pool, lease);
    expect(workers[0]!.checks).toBe(4);
  });

  test('a worker that cannot say when it was checked is checked after every request', async () => {
    const { workers, send, pool } = setup(undefined);
    const lease: Lease = {};
    for (let i = 0; i < 3; i++) await send(i, lease);
    expect(workers[0]!.checks).toBe(3);
    endLease(pool, lease);
  });

  test('work found when the lane gives the worker back retires it; the next call gets a new worker', async () => {
    const { workers, send, pool } = setup(0);
    const lease: Lease = {};
    await send(0, lease);
    await send(1, lease);
    workers[0]!.left = '1 thread(s) left running after the call';
    endLease(pool, lease);
    expect(workers[0]!.retired).toBe('1 thread(s) left running after the call');
    await send(2);
    expect(workers).toHaveLength(2);
    expect(workers[1]!.requests).toBe(1);
  });
});
