/**
 * The pool through its seam (`Launch`) with fake workers — no interpreter:
 * the bound, FIFO waiting, reuse by function, eviction of another
 * function's idle worker, idle shutdown, one-shot slots, failures, close,
 * a function's second worker only for a backlog that pays for the start,
 * and turns between functions by the work they have left.
 */
import type { ExternalFn } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { WorkerFailure } from '../src/failures.js';
import {
  EVICT_IDLE_MS,
  EXTRA_LIVE,
  Pool,
  type PooledWorker,
  SHARE_MARGIN_MS,
  SHARE_SLACK,
  START_PAYOFF,
  TURN_MS,
} from '../src/pool.js';
import { waitFor } from './helpers.js';

class FakeWorker implements PooledWorker {
  static nextPid = 1;
  readonly pid = FakeWorker.nextPid++;
  alive = true;
  stopped = false;
  constructor(readonly key: string) {}
  async stop(): Promise<void> {
    this.stopped = true;
    this.alive = false;
  }
  async kill(): Promise<void> {
    this.alive = false;
  }
}

const fn = (name: string): ExternalFn => ({
  name,
  language: 'fake',
  body: '',
  argTypes: [],
  returnType: 'number',
  pure: false,
});

function fakePool(max: number, idleMs = 60_000, maxLive?: number) {
  const started: FakeWorker[] = [];
  let live = 0;
  let peak = 0;
  const pool = new Pool<FakeWorker>(
    max,
    idleMs,
    async (key) => {
      const worker = new FakeWorker(key);
      started.push(worker);
      return worker;
    },
    maxLive,
  );
  const track = async (key: string) => {
    const worker = await pool.acquire(key, fn(key));
    live++;
    peak = Math.max(peak, live);
    return {
      worker,
      release(reusable = true) {
        live--;
        pool.release(worker, reusable);
      },
    };
  };
  return { pool, started, track, peak: () => peak };
}

describe('pool with fake workers', () => {
  test('reuses an idle worker of the same function; starts one per function otherwise', async () => {
    const { pool, started } = fakePool(4);
    const a = await pool.acquire('a', fn('a'));
    pool.release(a, true);
    expect(await pool.acquire('a', fn('a'))).toBe(a);
    const b = await pool.acquire('b', fn('b'));
    expect(b).not.toBe(a);
    expect(started.map((w) => w.key)).toEqual(['a', 'b']);
  });

  test('never more workers than the bound; waiters are served first come, first served', async () => {
    const { pool, track, peak } = fakePool(2);
    const first = await track('a');
    const second = await track('a');
    const order: number[] = [];
    const waiting = [0, 1, 2].map((i) =>
      track('a').then((held) => {
        order.push(i);
        held.release();
      }),
    );
    expect(pool.counters().queued).toBe(3);
    first.release();
    second.release();
    await Promise.all(waiting);
    expect(order).toEqual([0, 1, 2]);
    expect(peak()).toBe(2);
    expect(pool.counters().peak).toBe(2);
  });

  test('an idle worker takes no busy slot: another function starts beside it, up to maxLive', async () => {
    const { pool, started } = fakePool(1, 60_000, 3);
    expect(pool.maxLive).toBe(3);
    for (const key of ['a', 'b', 'c']) pool.release(await pool.acquire(key, fn(key)), true);
    expect(pool.counters()).toMatchObject({ live: 3, peak: 1 });
    expect(started.every((w) => !w.stopped)).toBe(true);
    // the fourth function needs a start: at maxLive, an idle worker is evicted for it
    const d = await pool.acquire('d', fn('d'));
    expect(d.key).toBe('d');
    expect(started.filter((w) => w.stopped).map((w) => w.key)).toEqual(['a']);
    expect(new Pool(2, 1, async () => new FakeWorker('x')).maxLive).toBe(2 + EXTRA_LIVE);
  });

  test('a waiter for another function evicts an idle worker at maxLive; the evicted one is stopped politely', async () => {
    const { pool, started } = fakePool(1, 60_000, 1);
    const a = await pool.acquire('a', fn('a'));
    const waiting = pool.acquire('b', fn('b'));
    pool.release(a, true);
    const b = await waiting;
    expect(b.key).toBe('b');
    expect(started[0]!.stopped).toBe(true);
    expect(pool.counters().peak).toBe(1);
  });

  test('a worker given back as not reusable is ended and counted as killed when it had failed', async () => {
    const { pool } = fakePool(2);
    const a = await pool.acquire('a', fn('a'));
    a.alive = false; // failed during a request
    pool.release(a, false);
    expect(pool.counters()).toMatchObject({ killed: 1, live: 0 });
    const next = await pool.acquire('a', fn('a'));
    expect(next).not.toBe(a);
  });

  test('an idle worker ends after idleMs', async () => {
    const { pool, started } = fakePool(2, 20);
    pool.release(await pool.acquire('a', fn('a')), true);
    expect(await waitFor(() => started[0]!.stopped)).toBe(true);
    expect(await waitFor(() => pool.counters().live === 0)).toBe(true);
  });

  test('a worker taken and parked again gets its whole idleMs from the last park', async () => {
    const { pool, started } = fakePool(2, 300);
    const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
    pool.release(await pool.acquire('a', fn('a')), true);
    await sleep(150);
    const worker = await pool.acquire('a', fn('a'));
    await sleep(10);
    pool.release(worker, true); // parked again at ~160 ms: its first timer (due at 300) must not end it
    await sleep(150);
    expect(started[0]!.stopped, 'idle for ~150 ms of its 300').toBe(false);
    expect(await waitFor(() => started[0]!.stopped)).toBe(true);
    expect(started).toHaveLength(1);
  });

  test('a one-shot slot counts against the same bound', async () => {
    const { pool } = fakePool(1);
    const release = await pool.acquireSlot();
    let served = false;
    const waiting = pool.acquire('a', fn('a')).then((w) => {
      served = true;
      return w;
    });
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(served).toBe(false);
    release();
    await waiting;
    expect(served).toBe(true);
  });

  test('a launch that fails frees its slot and rejects only its caller', async () => {
    let fail = true;
    const pool = new Pool<FakeWorker>(1, 60_000, async (key) => {
      if (fail) {
        fail = false;
        throw new WorkerFailure('startup', 'no interpreter');
      }
      return new FakeWorker(key);
    });
    await expect(pool.acquire('a', fn('a'))).rejects.toThrow(/no interpreter/);
    expect((await pool.acquire('a', fn('a'))).key).toBe('a');
  });

  test('a wait is bounded and abortable', async () => {
    const { pool } = fakePool(1);
    await pool.acquire('a', fn('a'));
    await expect(pool.acquire('a', fn('a'), undefined, 20)).rejects.toMatchObject({
      reason: 'timeout',
    });
    const controller = new AbortController();
    const waiting = pool.acquire('a', fn('a'), controller.signal);
    controller.abort();
    await expect(waiting).rejects.toMatchObject({ reason: 'aborted' });
    expect(pool.counters().queued).toBe(0);
  });

  test('a wait longer than a timer can hold (a deadline near 2^31 ms plus the margin) waits, not fails at once', async () => {
    const { pool } = fakePool(1);
    const held = await pool.acquire('a', fn('a'));
    const waiting = pool.acquire('a', fn('a'), undefined, 2 ** 31 - 1 + 2_000);
    let settled = false;
    void waiting.then(
      () => {
        settled = true;
      },
      () => {
        settled = true;
      },
    );
    // Node fires a timer past 2^31 − 1 ms after 1 ms: the wait would have failed by now
    await new Promise((resolve) => setTimeout(resolve, 30));
    expect(settled).toBe(false);
    pool.release(held, true);
    expect((await waiting).key).toBe('a');
  });

  test('close() fails waiters and stops every worker', async () => {
    const { pool, started } = fakePool(1);
    const held = await pool.acquire('a', fn('a'));
    const waiting = pool.acquire('a', fn('a'));
    await pool.close();
    await expect(waiting).rejects.toMatchObject({ reason: 'closed' });
    expect(held.alive).toBe(false);
    expect(started.every((w) => !w.alive)).toBe(true);
    await expect(pool.acquire('a', fn('a'))).rejects.toMatchObject({ reason: 'closed' });
  });
  test('a function with a worker gets a second only for a backlog worth START_PAYOFF starts', async () => {
    const { pool, started } = fakePool(4);
    let backlogMs = 0;
    const untrack = pool.trackBacklog('a', () => backlogMs);
    const first = await pool.acquire('a', fn('a'));
    // too little work left: the caller waits for `a`'s worker, though three slots are free
    let second: FakeWorker | undefined;
    const waiting = pool.acquire('a', fn('a')).then((w) => {
      second = w;
      return w;
    });
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(second).toBeUndefined();
    expect(pool.shouldYield('a')).toBe(true); // the holder hands its worker over
    pool.release(first, true);
    expect(await waiting).toBe(first);
    // enough work left for a start to pay: a second worker
    backlogMs = 10 * START_PAYOFF * pool.startMs();
    const third = await pool.acquire('a', fn('a'));
    expect(third).not.toBe(first);
    expect(started.map((w) => w.key)).toEqual(['a', 'a']);
    untrack();
    // no batch tracks `a` any more: single calls start workers as before
    expect(await pool.acquire('a', fn('a'))).not.toBe(first);
  });

  test('a function refreshed again and again gets a second worker from its recent work, into a free room only', async () => {
    const { pool, started } = fakePool(2, 60_000, 4);
    let backlogMs = 0;
    const untrack = pool.trackBacklog('a', () => backlogMs);
    const first = await pool.acquire('a', fn('a'));
    const payoff = START_PAYOFF * pool.startMs(); // as measured by that start
    // each batch alone leaves too little for a start to pay: 0.4 starts' worth
    backlogMs = 0.4 * payoff;
    expect(pool.wouldServe('a')).toBe(false);
    pool.noteWork('a', 0.5 * payoff); // one earlier batch: still not enough
    expect(pool.wouldServe('a')).toBe(false);
    pool.noteWork('a', 0.5 * payoff); // two: backlog and recent work come to 1.4 starts per worker
    expect(pool.recentWorkMs('a')).toBeGreaterThan(0.99 * payoff);
    expect(pool.wouldServe('a')).toBe(true);
    // nothing left to hand out: no start, whatever the history
    backlogMs = 0;
    expect(pool.wouldServe('a')).toBe(false);
    backlogMs = 0.4 * payoff;
    const second = await pool.acquire('a', fn('a'));
    expect(second).not.toBe(first);
    expect(started.map((w) => w.key)).toEqual(['a', 'a']);
    pool.release(first, true);
    pool.release(second, true);
    untrack();
  });

  test('recent work never evicts: with the room among max taken by idle workers of other functions, no start', async () => {
    const { pool, started } = fakePool(2, 60_000, 4);
    for (const key of ['b', 'c']) pool.release(await pool.acquire(key, fn(key)), true); // idle, warm
    let backlogMs = 0;
    const untrack = pool.trackBacklog('a', () => backlogMs);
    const first = await pool.acquire('a', fn('a')); // a first worker always has room (beyond max)
    const payoff = START_PAYOFF * pool.startMs();
    backlogMs = 0.4 * payoff;
    pool.noteWork('a', 100 * payoff);
    // b and c idle long enough to be evicted for a backlog that pays by itself (see below)
    await new Promise((resolve) => setTimeout(resolve, EVICT_IDLE_MS + 50));
    expect(pool.wouldServe('a')).toBe(false);
    backlogMs = 100 * payoff; // this batch's own rest pays: that may evict
    expect(pool.wouldServe('a')).toBe(true);
    expect(started.map((w) => w.key)).toEqual(['b', 'c', 'a']);
    pool.release(first, true);
    untrack();
  });

  test('recent work fades over idleMs', async () => {
    const { pool } = fakePool(2, 40);
    pool.noteWork('a', 1000);
    expect(pool.recentWorkMs('a')).toBeGreaterThan(900);
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(pool.recentWorkMs('a')).toBeLessThan(1000 * Math.exp(-4));
  });

  test("a function with a worker evicts only another function's worker idle for EVICT_IDLE_MS", async () => {
    const { pool, started } = fakePool(2, 60_000, 2);
    pool.trackBacklog('a', () => Number.POSITIVE_INFINITY);
    const a = await pool.acquire('a', fn('a'));
    pool.release(await pool.acquire('b', fn('b')), true); // `b` just finished
    const t0 = performance.now();
    const second = await pool.acquire('a', fn('a'));
    expect(performance.now() - t0).toBeGreaterThanOrEqual(EVICT_IDLE_MS - 5);
    expect(second).not.toBe(a);
    expect(started.map((w) => [w.key, w.stopped])).toEqual([
      ['a', false],
      ['b', true],
      ['a', false],
    ]);
    // a function without a worker evicts at once
    pool.release(second, true);
    const t1 = performance.now();
    expect((await pool.acquire('c', fn('c'))).key).toBe('c');
    expect(performance.now() - t1).toBeLessThan(EVICT_IDLE_MS);
  });

  test('a turn goes to the function with the most work left, given by the busy function with the least', async () => {
    const { pool } = fakePool(2);
    pool.release(await pool.acquire('c', fn('c')), true); // c: warm, idle
    const a = await pool.acquire('a', fn('a'));
    const b = await pool.acquire('b', fn('b'));
    const left: Record<string, number | undefined> = { a: 10, b: 100, c: 100 };
    for (const key of ['a', 'b', 'c'])
      pool.trackBacklog(
        key,
        () => 0,
        () => left[key],
      );
    let served: FakeWorker | undefined;
    const waiting = pool.acquire('c', fn('c')).then((w) => {
      served = w;
      return w;
    });
    // c has far more left than a: a gives its slot at the next chunk, without waiting a turn;
    // b, with as much left as c, keeps its own
    expect(pool.shouldYield('a')).toBe(true);
    expect(pool.shouldYield('b')).toBe(false);
    // a batch not measured yet counts as a turn's worth of work: more than a has left,
    // less than what would make a function with 100 ms left give way before a turn
    left.c = undefined;
    expect(pool.shouldYield('a')).toBe(true);
    left.a = 100;
    expect(pool.shouldYield('a')).toBe(false);
    left.a = 10;
    // c with little more than a left: no handover yet …
    left.c = (SHARE_SLACK * left.a! + SHARE_MARGIN_MS) * 0.9;
    expect(pool.shouldYield('a')).toBe(false);
    // … until c has waited a turn; still only from a, the busy function with the least left
    await new Promise((resolve) => setTimeout(resolve, TURN_MS + 5));
    expect(pool.shouldYield('a')).toBe(true);
    expect(pool.shouldYield('b')).toBe(false);
    pool.release(a, true);
    expect((await waiting).key).toBe('c');
    expect(served).toBeDefined();
    pool.release(served!, true);
    pool.release(b, true);
  });

  test('a freed slot goes first to the waiting function with the most work left, then the oldest', async () => {
    const { pool } = fakePool(1);
    for (const key of ['b', 'c', 'd']) pool.release(await pool.acquire(key, fn(key)), true); // warm, idle
    const a = await pool.acquire('a', fn('a'));
    const left: Record<string, number> = { b: 10, c: 100, d: 10 };
    for (const key of ['b', 'c', 'd'])
      pool.trackBacklog(
        key,
        () => 0,
        () => left[key]!,
      );
    const order: string[] = [];
    const waiters = ['b', 'c', 'd'].map((key) =>
      pool.acquire(key, fn(key)).then((w) => {
        order.push(key);
        pool.release(w, true);
      }),
    );
    pool.release(a, true);
    await Promise.all(waiters);
    expect(order).toEqual(['c', 'b', 'd']);
  });

  test('a caller whose worker has only just booted has not waited a turn yet, however long ago it came', async () => {
    const pool = new Pool<FakeWorker>(1, 60_000, async (key) => {
      if (key === 'c') await new Promise((resolve) => setTimeout(resolve, 2 * TURN_MS));
      return new FakeWorker(key);
    });
    const a = await pool.acquire('a', fn('a'));
    for (const key of ['a', 'c'])
      pool.trackBacklog(
        key,
        () => 0,
        () => 100,
      );
    pool.prestart('c', fn('c')); // boots beside a's work, taking no busy slot
    const waiting = pool.acquire('c', fn('c'));
    await waitFor(() => pool.counters().live === 2); // c's worker ready, parked
    // c came 2 × TURN_MS ago, but its worker is ready only now, with as much work left as a
    expect(pool.shouldYield('a')).toBe(false);
    await new Promise((resolve) => setTimeout(resolve, TURN_MS + 5));
    expect(pool.shouldYield('a')).toBe(true);
    pool.release(a, true);
    pool.release(await waiting, true);
  });
});
