/**
 * Scheduling across functions, through the pool's seam with fake workers (no
 * interpreter): the real scheduler, dispatch and pool, with starts counted
 * for refreshes of several functions at once. A worker keeps serving its
 * function while that function has queued work, so concurrent refreshes
 * share the pool without restarting workers chunk by chunk; a function gets
 * a second worker only for work that pays for the start (this batch's, or
 * its recent batches' when it is refreshed again and again); a cold refresh
 * starts one interpreter before its first results; functions that share too
 * few slots take turns on them, by the work they have left, so they progress
 * and finish together.
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
import { EVICT_IDLE_MS, Pool, TURN_MS } from '../src/pool.js';
import type { RowSource } from '../src/row-sources.js';
import { type SchedulerContext, schedule } from '../src/scheduler.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A worker that answers each row with its index, taking `perRowMs` per row (at least a timer tick per request). */
class FakeWorker implements DispatchWorker {
  static nextPid = 1;
  static deaths = 0;
  /** Answers as a chunk queued behind another and read late: the host saw a tenth of its work. */
  static readLate = false;
  readonly pid = FakeWorker.nextPid++;
  alive = true;
  requests = 0;
  busyMs = 0;
  constructor(
    readonly key: string,
    readonly perRowMs: number,
    readonly events?: string[],
  ) {}
  async request(header: FrameHeader): Promise<Frame> {
    if (!this.alive) throw new WorkerFailure('exited', 'the interpreter exited with code 1');
    const { start, count } = header as { start: number; count: number };
    const ms = count * this.perRowMs;
    this.events?.push(`request ${this.key}`);
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
      ...(FakeWorker.readLate ? { elapsedMs: ms / 10, workMs: ms } : { elapsedMs: ms }),
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

/**
 * The runner's wiring (runner.ts), with fake workers behind the pool's
 * Launch seam: a start takes `startMs`, a row `perRowMs`.
 */
function fakeRunner(
  maxWorkers: number,
  perRowMs = 0.01,
  startMs: number | ((nth: number) => number) = 2,
) {
  const starts: string[] = [];
  const pool = new Pool<DispatchWorker>(maxWorkers, 30_000, async (key) => {
    starts.push(key);
    await sleep(typeof startMs === 'number' ? startMs : startMs(starts.length - 1)); // an interpreter start
    return new FakeWorker(key, perRowMs, events);
  });
  // Requests that had to queue for a worker.
  const queued = { count: 0 };
  const acquire = pool.acquire.bind(pool);
  pool.acquire = (...args) => {
    const worker = acquire(...args);
    if (pool.counters().queued > 0) queued.count++;
    return worker;
  };
  // In order: the pool's starts and ends, each request's first and last event, each give-back.
  const events: string[] = [];
  pool.observer = (event) => events.push(`${event.type} ${event.key}`);
  // Give-backs after which a busy slot stayed free while a caller still waited.
  const idleSlots: string[] = [];
  const release = pool.release.bind(pool);
  pool.release = (worker, reusable) => {
    events.push(`release ${worker.key}`);
    release(worker, reusable);
    const { busy, queued: waiting } = pool.counters();
    if (waiting > 0 && busy < pool.max)
      idleSlots.push(`${worker.key}: ${busy} busy, ${waiting} waiting`);
  };
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
    trackBacklog: (key, estimateMs, leftMs) => pool.trackBacklog(key, estimateMs, leftMs),
    wouldServe: (key) => pool.wouldServe(key),
    toError: toExtFnError,
  };
  return { pool, ctx, starts, queued, events, idleSlots };
}

/**
 * Rows 0…n-1 of one function; `crashAt` makes the worker die on the chunk
 * starting there; `onResults` is called with each chunk's row count.
 */
function refresh(
  ctx: SchedulerContext,
  name: string,
  n: number,
  crashAt?: number,
  onResults?: (count: number) => void,
) {
  const results: (number | ExtFnError)[] = new Array(n);
  const source: RowSource = {
    count: n,
    encode: (start, count) => ({
      header: { op: 'call', start, count, ...(crashAt === start ? { crash: start } : {}) },
    }),
    decode(frame: Frame, start, count) {
      for (let k = 0; k < count; k++) results[start + k] = (frame.header.values as number[])[k]!;
      onResults?.(count);
    },
    fail(row, error) {
      results[row] = error;
    },
  };
  return schedule(ctx, fn(name), name, source, { timeoutMs: 5_000 }).then(() => results);
}

/** A refresh the way the runner runs one: its function's first worker prestarted (`prepare`), then the batch. */
function preparedRefresh(
  pool: Pool<DispatchWorker>,
  ctx: SchedulerContext,
  name: string,
  n: number,
) {
  pool.prestart(name, fn(name));
  return refresh(ctx, name, n);
}

describe('scheduling across functions (fake workers)', () => {
  test('one function: one start per slot', async () => {
    const { ctx, starts } = fakeRunner(2);
    const results = await refresh(ctx, 'a', 20_000);
    expect(results.every((r, i) => r === i)).toBe(true);
    expect(starts).toEqual(['a', 'a']);
  });

  for (const slots of [2, 4]) {
    test(`four functions refreshed at once on ${slots} slots, three times over: every row right, one start per function`, async () => {
      // A start takes 50 ms, a refresh 100 ms of work (0.01 ms a row): a second worker
      // for a function never pays, so every start beyond one per function is waste.
      const { ctx, starts, pool, queued } = fakeRunner(slots, 0.01, 50);
      const names = ['a', 'b', 'c', 'd'];
      for (let round = 0; round < 3; round++) {
        const before = starts.length;
        const all = await Promise.all(names.map((name) => refresh(ctx, name, 10_000)));
        for (const results of all) expect(results.every((r, i) => r === i)).toBe(true);
        const these = starts.slice(before).sort();
        if (round === 0) expect(these).toEqual(names);
        // idle workers take no busy slot: on 2 slots too, every function keeps its worker
        else expect(these, `round ${round}: every worker kept`).toEqual([]);
        // with a slot per function, no lane ever queued: none waits for its own function's worker
        if (slots === 4) expect(queued.count).toBe(0);
      }
      expect(pool.counters().peak).toBeLessThanOrEqual(slots);
      expect(pool.counters().live).toBe(4);
    });
  }

  test('four prepared functions on 2 slots: four starts, two at a time, the last two while the first two work, and no busy slot free while a function waits', async () => {
    // A start takes 50 ms, a refresh 100 ms of work: the starts of the functions that
    // wait for a slot overlap the work of the others instead of following it.
    const { pool, ctx, starts, events, idleSlots } = fakeRunner(2, 0.01, 50);
    const names = ['a', 'b', 'c', 'd'];
    for (let round = 0; round < 2; round++) {
      events.length = 0;
      const all = await Promise.all(names.map((name) => preparedRefresh(pool, ctx, name, 10_000)));
      for (const results of all) expect(results.every((r, i) => r === i)).toBe(true);
      expect(idleSlots, `round ${round}`).toEqual([]);
      if (round === 0) {
        expect(events.filter((e) => e.startsWith('start'))).toEqual(
          names.map((name) => `start ${name}`),
        );
        // at most one start per slot at once: c and d boot once a and b are ready
        let inFlight = 0;
        let most = 0;
        for (const e of events) {
          if (e.startsWith('start')) most = Math.max(most, ++inFlight);
          if (e.startsWith('ready')) inFlight--;
        }
        expect(most, events.join(', ')).toBe(2);
      }
      // c and d wait for a slot (a's or b's), but not for a start: theirs began before any give-back
      const firstRelease = events.findIndex((e) => e.startsWith('release'));
      for (const name of ['c', 'd']) {
        expect(events.indexOf(`request ${name}`)).toBeGreaterThan(firstRelease);
        if (round === 0) expect(events.indexOf(`start ${name}`)).toBeLessThan(firstRelease);
      }
      if (round > 0) expect(events.filter((e) => e.startsWith('start'))).toEqual([]);
    }
    expect(starts.sort()).toEqual(names);
    expect(pool.counters().peak).toBe(2);
  });

  test('a start that waited for its turn begins after the worker that ended the wait got its first request', async () => {
    // A real start forks the host (synchronous, tens of ms with a large heap): begun
    // before the ready worker's first request is written, it would hold that worker idle.
    const { pool, ctx, events } = fakeRunner(2, 0.01, 50);
    const names = ['a', 'b', 'c', 'd'];
    await Promise.all(names.map((name) => preparedRefresh(pool, ctx, name, 2_000)));
    for (const waited of ['c', 'd']) {
      const start = events.indexOf(`start ${waited}`);
      const opener = events.slice(0, start).findLast((e) => e.startsWith('ready'))!;
      const readyKey = opener.split(' ')[1]!;
      const firstRequest = events.indexOf(`request ${readyKey}`);
      expect(firstRequest, events.join(', ')).toBeGreaterThan(events.indexOf(opener));
      expect(firstRequest, events.join(', ')).toBeLessThan(start);
    }
  });

  test('a lane of a function with two busy workers gives its slot to a function with none, whose worker then stays warm beside them', async () => {
    const { pool, ctx, starts, idleSlots } = fakeRunner(2, 0.05, 10);
    let longDone = false;
    const long = refresh(ctx, 'a', 20_000).then((results) => {
      longDone = true;
      return results;
    });
    await sleep(300); // 1 s of work: a has both busy slots by now
    expect(pool.busyOf('a')).toBe(2);
    for (let call = 0; call < 2; call++) {
      expect(await refresh(ctx, 'b', 1)).toEqual([0]);
      expect(longDone, `call ${call} served during a's refresh`).toBe(false);
    }
    // b's worker idles beside a's two, taking no busy slot: the second call started nothing
    expect(starts.filter((k) => k === 'b')).toHaveLength(1);
    expect((await long).every((r, i) => r === i)).toBe(true);
    expect(idleSlots).toEqual([]);
    expect(pool.counters().peak).toBe(2);
  });

  test('at maxLive, a function with a worker gets another only in room among max processes', async () => {
    const { pool, ctx, starts } = fakeRunner(2, 0.05, 10);
    // four functions' idle workers fill the room beyond the busy bound
    await Promise.all(['b', 'c', 'd', 'e'].map((name) => refresh(ctx, name, 1)));
    expect(pool.counters().live).toBe(4);
    const results = await refresh(ctx, 'a', 20_000); // 1 s of work: a second worker pays
    expect(results.every((r, i) => r === i)).toBe(true);
    // a's first worker started at once; its second only in room of an idle one evicted after EVICT_IDLE_MS
    expect(starts.filter((k) => k === 'a').length).toBeLessThanOrEqual(2);
    expect(pool.counters().live).toBeLessThanOrEqual(pool.maxLive);
  });

  test('a cold refresh starts one interpreter before its first results, then more for work that pays', async () => {
    const { ctx, starts } = fakeRunner(4, 0.05, 20);
    let startsAtFirstResults: number | undefined;
    const results = await refresh(ctx, 'a', 20_000, undefined, () => {
      startsAtFirstResults ??= starts.length;
    });
    expect(results.every((r, i) => r === i)).toBe(true);
    expect(startsAtFirstResults).toBe(1);
    // 1 s of work against 20 ms starts: every slot is worth a worker
    expect(starts).toEqual(['a', 'a', 'a', 'a']);
  });

  test('a function refreshed again and again gets a second worker from its recent work, then keeps it', async () => {
    // A start takes 50 ms, a refresh 100 ms of work: one refresh alone never pays for a
    // second worker (START_PAYOFF starts per worker), but refresh after refresh does.
    const { ctx, starts } = fakeRunner(2, 0.01, 50);
    const perRound: string[][] = [];
    for (let round = 0; round < 4; round++) {
      const before = starts.length;
      const results = await refresh(ctx, 'a', 10_000);
      expect(results.every((r, i) => r === i)).toBe(true);
      perRound.push(starts.slice(before));
    }
    expect(perRound[0], 'the first refresh: one worker').toEqual(['a']);
    expect([...perRound[1]!, ...perRound[2]!], 'then one more, from the work done lately').toEqual([
      'a',
    ]);
    expect(perRound[3], 'and it is kept').toEqual([]);
  });

  test("a function's recent work counts a chunk the host read late at the worker's own time", async () => {
    const { ctx, pool } = fakeRunner(1);
    FakeWorker.readLate = true;
    try {
      expect((await refresh(ctx, 'a', 3_000)).every((r, i) => r === i)).toBe(true);
    } finally {
      FakeWorker.readLate = false;
    }
    // 3 000 rows at 0.01 ms: 30 ms of work, of which the host saw 3
    expect(pool.recentWorkMs('a')).toBeGreaterThan(25);
  });

  test('a small batch starts one worker, however many slots', async () => {
    const { ctx, starts } = fakeRunner(4, 0.01, 20);
    const results = await refresh(ctx, 'a', 500);
    expect(results.every((r, i) => r === i)).toBe(true);
    expect(starts).toEqual(['a']);
  });

  test("a long refresh takes over other functions' workers idle for a while when its work pays for the starts", async () => {
    const { ctx, starts, pool } = fakeRunner(4, 0.05, 10);
    await Promise.all(['b', 'c', 'd', 'e'].map((name) => refresh(ctx, name, 20)));
    expect(pool.counters().live).toBe(4); // four idle workers, none of them `a`'s
    await sleep(EVICT_IDLE_MS);
    const results = await refresh(ctx, 'a', 20_000);
    expect(results.every((r, i) => r === i)).toBe(true);
    expect(starts.filter((k) => k === 'a').length).toBe(4);
    expect(pool.counters().peak).toBeLessThanOrEqual(4);
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

  test('two warm functions on one slot take turns: both progress, they finish together, nothing restarts', async () => {
    // 400 ms of work each (0.02 ms a row): without turns b would wait for all of a's
    const { pool, ctx, starts, events, idleSlots } = fakeRunner(1, 0.02, 10);
    await Promise.all(['a', 'b'].map((name) => pool.warm(name, fn(name))));
    events.length = 0;
    const ended: Record<string, number> = {};
    const began = performance.now();
    const all = await Promise.all(
      ['a', 'b'].map((name) =>
        refresh(ctx, name, 20_000).then((results) => {
          ended[name] = performance.now() - began;
          return results;
        }),
      ),
    );
    for (const results of all) expect(results.every((r, i) => r === i)).toBe(true);
    expect(starts.sort()).toEqual(['a', 'b']);
    const requests = events.filter((e) => e.startsWith('request'));
    // b's first request came while a still had requests to make, and the turns alternated
    expect(requests.indexOf('request b')).toBeLessThan(requests.lastIndexOf('request a'));
    let turns = 0;
    for (let i = 1; i < requests.length; i++) if (requests[i] !== requests[i - 1]) turns++;
    expect(turns, requests.join(', ')).toBeGreaterThanOrEqual(3);
    // each finished within a few turns of the other, not a whole refresh (400 ms) later
    expect(Math.abs(ended.a! - ended.b!)).toBeLessThan(6 * TURN_MS);
    expect(idleSlots).toEqual([]);
    expect(pool.counters().peak).toBe(1);
  });

  test('four cold functions whose workers are ready at different times finish together: the first ready gives way to those with more left', async () => {
    // As with a zygote: the first worker (a tree) is ready at 40 ms, the forks at 80 ms;
    // 80 ms of work each (0.0008 ms a row), so `a` alone is at most half done when the
    // forks are ready, however late a loaded machine fires the timers. Worked off in the
    // order their workers came, `a` would be done before the others had begun, and one
    // of them would end alone.
    const { pool, ctx, events } = fakeRunner(2, 0.0008, (nth) => (nth === 0 ? 40 : 80));
    pool.startsFork = () => true;
    const names = ['a', 'b', 'c', 'd'];
    const done: Record<string, number> = { a: 0, b: 0, c: 0, d: 0 };
    /** Rows done by each function when each function's batch ended. */
    const atEnd: Record<string, Record<string, number>> = {};
    const all = await Promise.all(
      names.map((name) => {
        pool.prestart(name, fn(name));
        return refresh(ctx, name, 100_000, undefined, (count) => {
          done[name]! += count;
          if (done[name] === 100_000) atEnd[name] = { ...done };
        });
      }),
    );
    for (const results of all) expect(results.every((r, i) => r === i)).toBe(true);
    expect(events.filter((e) => e.startsWith('start')).length).toBe(4);
    // when the first function finished, every other one was more than half done
    const first = names.find(
      (name) => Object.values(atEnd[name]!).filter((n) => n === 100_000).length === 1,
    )!;
    for (const name of names) {
      expect(
        atEnd[first]![name],
        `${name} when ${first} finished: ${JSON.stringify(atEnd[first])}`,
      ).toBeGreaterThan(50_000);
    }
  });

  test('warm functions of different sizes on two slots: the one with the most work left never gives its slot to one with less', async () => {
    // a: 200 ms of work, b and c: 50 ms each (0.001 ms a row), every figure known from
    // an earlier batch. a bounds the refresh: each turn it took the others would make it later.
    const { ctx, events, starts } = fakeRunner(2, 0.001, 10);
    const sizes: Record<string, number> = { a: 200_000, b: 50_000, c: 50_000 };
    await Promise.all(Object.keys(sizes).map((name) => refresh(ctx, name, 1_000)));
    events.length = 0;
    const all = await Promise.all(Object.entries(sizes).map(([name, n]) => refresh(ctx, name, n)));
    for (const results of all) expect(results.every((r, i) => r === i)).toBe(true);
    expect(starts.sort()).toEqual(['a', 'b', 'c']);
    const first = events.indexOf('request a');
    const last = events.lastIndexOf('request a');
    const between = events.slice(first, last);
    expect(
      between.filter((e) => e === 'release a'),
      between.join(', '),
    ).toEqual([]);
    // b and c took turns on the other slot
    expect(between.filter((e) => e === 'request c').length).toBeGreaterThan(0);
  });

  test('a call of a function with a warm worker waits a turn, not a whole refresh, with every slot held', async () => {
    const { pool, ctx } = fakeRunner(1, 0.05, 10);
    await pool.warm('b', fn('b'));
    let longDone = false;
    const long = refresh(ctx, 'a', 20_000).then((results) => {
      longDone = true;
      return results;
    });
    await sleep(100); // 1 s of work on the only slot
    expect(pool.busyOf('a')).toBe(1);
    const asked = performance.now();
    expect(await refresh(ctx, 'b', 1)).toEqual([0]);
    expect(performance.now() - asked).toBeLessThan(500);
    expect(longDone).toBe(false);
    expect((await long).every((r, i) => r === i)).toBe(true);
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
