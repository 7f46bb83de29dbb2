/**
 * The batch scheduler through its seam (`schedule(ctx)`) with a fake
 * dispatcher — no interpreter: chunking, every row settled once, hang
 * isolation (a failed chunk re-run row by row), start failures settled once,
 * abort, progress, the lane bound, and what the pool is told of the work left.
 */
import { type ExternalFn, ExtFnError } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import type { DispatchWorker, Lease, WorkerRequest } from '../src/dispatch.js';
import { toExtFnError } from '../src/dispatch.js';
import { WorkerFailure } from '../src/failures.js';
import type { Frame } from '../src/frames.js';
import type { RowSource } from '../src/row-sources.js';
import { type SchedulerContext, schedule } from '../src/scheduler.js';

const fn: ExternalFn = {
  name: 'f',
  language: 'fake',
  body: '',
  argTypes: ['number'],
  returnType: 'number',
  pure: false,
};

/** Rows 0…n-1; a row's result is its index times two. */
function source(n: number) {
  const results: (number | ExtFnError | undefined)[] = new Array(n);
  const settledTwice: number[] = [];
  const rows: RowSource = {
    count: n,
    encode: (start, count) => ({ header: { op: 'call', start, count } }),
    decode(frame, start, count) {
      for (let k = 0; k < count; k++) {
        if (results[start + k] !== undefined) settledTwice.push(start + k);
        results[start + k] = (frame.header.values as number[])[k]!;
      }
    },
    fail(row, error) {
      if (results[row] !== undefined) settledTwice.push(row);
      results[row] = error;
    },
  };
  return { rows, results, settledTwice };
}

/**
 * A fake dispatcher: answers `values` for the request's rows, unless
 * `failFor` throws for them. Counts requests and the most in flight at once.
 */
function fakeContext(
  failFor: (start: number, count: number) => WorkerFailure | undefined = () => undefined,
  lanes = 2,
) {
  const requests: [start: number, count: number][] = [];
  let inFlight = 0;
  let mostInFlight = 0;
  let leasesEnded = 0;
  const ctx: SchedulerContext = {
    lanes,
    chunkMs: 5,
    perRowMs: new Map(),
    async request(_fn, _key, request: WorkerRequest): Promise<Frame> {
      const { start, count } = request.header as { start: number; count: number };
      requests.push([start, count]);
      inFlight++;
      mostInFlight = Math.max(mostInFlight, inFlight);
      try {
        await new Promise((resolve) => setTimeout(resolve, 1));
        const failure = failFor(start, count);
        if (failure) throw failure;
        const frame: Frame = {
          header: { values: Array.from({ length: count }, (_, k) => (start + k) * 2) },
          elapsedMs: 0.01 * count,
        };
        request.decode?.(frame);
        return frame;
      } finally {
        inFlight--;
      }
    },
    endLease(_lease: Lease) {
      leasesEnded++;
    },
    toError: toExtFnError,
  };
  return {
    ctx,
    requests,
    mostInFlight: () => mostInFlight,
    leasesEnded: () => leasesEnded,
  };
}

/** A `failFor` that aborts `controller` at the first request from row `row` on, and fails every request as aborted from then. */
function abortFrom(controller: AbortController, row: number) {
  return (start: number) => {
    if (start >= row) controller.abort();
    return controller.signal.aborted
      ? new WorkerFailure('aborted', 'aborted', undefined, undefined, 'stop')
      : undefined;
  };
}

describe('scheduler with a fake dispatcher', () => {
  test('rows go in growing chunks over at most `lanes` requests at once; each row settles once', async () => {
    const { rows, results, settledTwice } = source(5_000);
    const { ctx, requests, mostInFlight, leasesEnded } = fakeContext();
    const progress: number[] = [];
    await schedule(ctx, fn, 'k', rows, {
      timeoutMs: 1_000,
      onProgress: (done) => progress.push(done),
    });
    expect(results).toEqual(Array.from({ length: 5_000 }, (_, i) => i * 2));
    expect(settledTwice).toEqual([]);
    expect(requests.length).toBeLessThan(100);
    expect(Math.max(...requests.map(([, count]) => count))).toBeGreaterThan(100);
    expect(mostInFlight()).toBeLessThanOrEqual(2);
    expect(progress.at(-1)).toBe(5_000);
    expect(leasesEnded()).toBeGreaterThan(0);
    expect(ctx.perRowMs.has('k')).toBe(true); // the next batch starts at the learnt size
  });

  test('the batch tells the pool its work left for turns: not measured until a chunk took half the target, then rows left × the least work per row', async () => {
    const { rows } = source(20_000);
    const { ctx } = fakeContext(undefined, 1);
    let leftMs: (() => number | undefined) | undefined;
    ctx.trackBacklog = (_key, _estimateMs, left) => {
      leftMs = left;
      return () => {};
    };
    // each chunk costs 0.5 ms whatever its size, and 0.001 ms a row: small chunks'
    // figures per row are far too high
    const cost = (count: number) => 0.5 + 0.001 * count;
    const sent: { left: number | undefined; next: number; count: number }[] = [];
    const request = ctx.request.bind(ctx);
    ctx.request = async (f, key, r) => {
      // what the pool sees once this chunk is handed out: the rows after it are left
      const start = (r.header as { start: number }).start;
      sent.push({ left: leftMs!(), next: start + r.rows, count: r.rows });
      const frame = await request(f, key, r);
      return { ...frame, elapsedMs: cost(r.rows) };
    };
    await schedule(ctx, fn, 'k', rows, { timeoutMs: 1_000 });
    expect(sent.length).toBeGreaterThan(4);
    let known = false;
    let least = Number.POSITIVE_INFINITY;
    for (let k = 0; k < sent.length; k++) {
      const { left, next } = sent[k]!;
      if (k === 0) expect(left).toBeUndefined();
      else expect(left, `chunk ${k}`).toBe(known ? (20_000 - next) * least : undefined);
      // what the answer to this chunk teaches (the first is a fresh worker's: not counted)
      if (k > 0) {
        least = Math.min(least, cost(sent[k]!.count) / sent[k]!.count);
        known ||= cost(sent[k]!.count) >= ctx.chunkMs / 2;
      }
    }
    expect(known).toBe(true);
    expect(sent.findIndex((x) => x.left !== undefined)).toBeGreaterThan(1);
  });

  test('a chunk the host timed short (queued behind another, its answer read late) does not shrink the work left that starts are judged by', async () => {
    const { rows } = source(20_000);
    const { ctx } = fakeContext(undefined, 1);
    let estimateMs: (() => number) | undefined;
    ctx.trackBacklog = (_key, estimate) => {
      estimateMs = estimate;
      return () => {};
    };
    const seen: { backlog: number; next: number }[] = [];
    const request = ctx.request.bind(ctx);
    let k = 0;
    ctx.request = async (f, key, r) => {
      const start = (r.header as { start: number }).start;
      seen.push({ backlog: estimateMs!(), next: start + r.rows });
      const frame = await request(f, key, r);
      // from the fourth chunk on, the host's clock saw almost nothing of it; the worker
      // says what it really took (0.01 ms a row, as the fake's own times)
      return k++ >= 3 ? { ...frame, elapsedMs: 0.001, workMs: 0.01 * r.rows } : frame;
    };
    await schedule(ctx, fn, 'k', rows, { timeoutMs: 1_000 });
    expect(seen.length).toBeGreaterThan(5);
    for (const { backlog, next } of seen.slice(5)) {
      expect(backlog).toBeCloseTo((20_000 - next) * 0.01, 6);
    }
  });

  test("a cold batch's slow first request (a fresh worker) does not keep its next chunks at one row", async () => {
    const { rows, results } = source(5_000);
    const { ctx, requests } = fakeContext();
    const request = ctx.request;
    let first = true;
    ctx.request = async (f, key, req) => {
      const frame = await request(f, key, req);
      if (first) frame.elapsedMs = 50; // 50 ms for one row: the body compiled, pages faulted in
      first = false;
      return frame;
    };
    await schedule(ctx, fn, 'k', rows, { timeoutMs: 1_000 });
    expect(results).toEqual(Array.from({ length: 5_000 }, (_, i) => i * 2));
    // the second chunk (one row, 0.01 ms) replaces the first's figure: the third grows at once
    expect(requests.slice(0, 3).map(([, count]) => count)).toEqual([1, 1, 8]);
  });

  test.each([
    ['idle workers: every lane at once, not after its first chunk', true, false, 2],
    ['workers to start: one lane until its first results', false, false, 1],
    ['workers to fork from a zygote: every lane at once', false, true, 2],
  ])("a warm batch (an earlier batch's time per row) with %s", async (_, idle, forks, atFirst) => {
    const { rows, results } = source(5_000);
    const { ctx } = fakeContext();
    ctx.startsFork = () => forks;
    const asked: boolean[] = [];
    ctx.wouldServe = (_key, idleOnly) => {
      asked.push(idleOnly === true);
      return idle || idleOnly !== true; // a start is always possible here; idle workers only if `idle`
    };
    let inFlight = 0;
    let inFlightAtFirstAnswer: number | undefined;
    const request = ctx.request;
    ctx.request = async (f, key, req) => {
      inFlight++;
      try {
        const frame = await request(f, key, req);
        inFlightAtFirstAnswer ??= inFlight;
        return frame;
      } finally {
        inFlight--;
      }
    };
    ctx.perRowMs.set('k', 0.002); // chunks of 2 500 rows: two of them
    await schedule(ctx, fn, 'k', rows, { timeoutMs: 1_000 });
    expect(results).toEqual(Array.from({ length: 5_000 }, (_, i) => i * 2));
    expect(inFlightAtFirstAnswer).toBe(atFirst);
    // the first look is for idle workers only, unless a start forks: then any worker the pool would serve
    expect(asked[0]).toBe(!forks);
  });

  test('one chunk held up by the host (100× its cost) does not shrink the next chunk to a few hundred rows', async () => {
    const { rows, results } = source(20_000);
    const { ctx, requests } = fakeContext(undefined, 1);
    const request = ctx.request;
    ctx.request = async (f, key, req) => {
      const frame = await request(f, key, req);
      frame.elapsedMs = 0.002 * req.rows * (requests.length === 2 ? 100 : 1); // the second chunk stalls
      return frame;
    };
    ctx.perRowMs.set('k', 0.002); // 5 ms chunks: 2 500 rows
    await schedule(ctx, fn, 'k', rows, { timeoutMs: 1_000 });
    expect(results).toEqual(Array.from({ length: 20_000 }, (_, i) => i * 2));
    const sizes = requests.map(([, count]) => count);
    expect(sizes.slice(0, 2)).toEqual([2_500, 2_500]);
    // Counted in full the stall would make the next chunk 238 rows; at most 4× the figure, 1 000.
    expect(sizes[2]).toBe(1_000);
    expect(sizes[3]).toBeGreaterThan(1_000); // and it recovers from there
  });

  test("chunks are sized by the worker's own time (workMs) when it gives one, not by the host's delay", async () => {
    // Every answer reaches the host 5 ms late (its event loop busy with other
    // functions' chunks); the worker's own time is 0.2 µs a row.
    const sizes = async (withWorkMs: boolean) => {
      const { rows, results } = source(500);
      const { ctx, requests } = fakeContext(undefined, 1);
      const request = ctx.request;
      ctx.request = async (f, key, req) => {
        const frame = await request(f, key, req);
        frame.elapsedMs = 5 + 0.0002 * req.rows;
        if (withWorkMs) frame.workMs = 0.0002 * req.rows;
        return frame;
      };
      await schedule(ctx, fn, 'k', rows, { timeoutMs: 1_000 });
      expect(results).toEqual(Array.from({ length: 500 }, (_, i) => i * 2));
      return requests.map(([, count]) => count);
    };
    // grows eightfold a chunk: 1, 8, 64, then the rest
    expect(await sizes(true)).toEqual([1, 8, 64, 427]);
    // timed by the host alone, 5 ms for a row looks like the work: chunks stay tiny
    const hostTimed = await sizes(false);
    expect(hostTimed.length).toBeGreaterThan(100);
    expect(Math.max(...hostTimed)).toBeLessThan(20);
  });

  test('a chunk that times out is re-run row by row: only the hanging row gets Timeout', async () => {
    const { rows, results } = source(200);
    const { ctx, requests } = fakeContext((start, count) =>
      start <= 77 && 77 < start + count
        ? new WorkerFailure('timeout', 'did not answer', undefined, 'wall-clock')
        : undefined,
    );
    await schedule(ctx, fn, 'k', rows, { timeoutMs: 1_000 });
    const failed = results.flatMap((r, i) => (ExtFnError.isInstance(r) ? [i] : []));
    expect(failed).toEqual([77]);
    expect((results[77] as ExtFnError).kind).toBe('Timeout');
    expect(results[76]).toBe(152);
    expect(requests.filter(([start, count]) => start === 77 && count === 1)).toHaveLength(1);
  });

  test('a vectorized function gets chunks past MAX_CHUNK; a huge failed chunk is re-run as pieces before single rows', async () => {
    const vectorized: ExternalFn = { ...fn, vectorized: true };
    const big = 100_000;
    const { rows, results, settledTwice } = source(big);
    // Only a request of more than 40 000 rows fails (say its worker ran out of memory).
    const { ctx, requests } = fakeContext((_start, count) =>
      count > 40_000 ? new WorkerFailure('exited', 'killed') : undefined,
    );
    ctx.perRowMs.set('k', 1e-3); // learnt by an earlier batch: 50 000 rows in 50 ms
    await schedule(ctx, vectorized, 'k', rows, { timeoutMs: 1_000 });
    expect(results).toEqual(Array.from({ length: big }, (_, i) => i * 2));
    expect(settledTwice).toEqual([]);
    expect(requests[0]![1]).toBe(big / 2); // one chunk per lane, far past 32 768 rows
    const retried = requests.filter(([, count]) => count <= 40_000);
    expect(Math.max(...retried.map(([, count]) => count))).toBe(32_768);
    expect(retried.some(([, count]) => count === 1)).toBe(false);

    // A per-row function stays within MAX_CHUNK however cheap its rows are.
    const perRow = fakeContext();
    perRow.ctx.perRowMs.set('k', 1e-5);
    await schedule(perRow.ctx, fn, 'k', source(big).rows, { timeoutMs: 1_000 });
    expect(Math.max(...perRow.requests.map(([, count]) => count))).toBe(32_768);
  });

  test("a lane opening while another runs half a vectorized batch takes the other half (rows in flight count as the other lane's)", async () => {
    const vectorized: ExternalFn = { ...fn, vectorized: true };
    const n = 1_000_000;
    const { rows, results } = source(n);
    const { ctx, requests } = fakeContext();
    ctx.perRowMs.set('k', 2e-4); // chunks of 10^6 rows would take 200 ms: a quarter is 250 000
    await schedule(ctx, vectorized, 'k', rows, { timeoutMs: 1_000 });
    expect(results[n - 1]).toBe((n - 1) * 2);
    expect(requests).toEqual([
      [0, 500_000],
      [500_000, 500_000],
    ]);
  });

  test('"output" and "malformed" failures isolate rows the same way', async () => {
    for (const reason of ['output', 'malformed', 'exited'] as const) {
      const { rows, results } = source(50);
      const { ctx } = fakeContext((start, count) =>
        start <= 10 && 10 < start + count ? new WorkerFailure(reason, reason) : undefined,
      );
      await schedule(ctx, fn, 'k', rows, { timeoutMs: 1_000 });
      const failed = results.flatMap((r, i) => (ExtFnError.isInstance(r) ? [i] : []));
      expect(failed, reason).toEqual([10]);
    }
  });

  test('workers that cannot start fail every row once with the same error, without row-by-row retries', async () => {
    const { rows, results } = source(1_000);
    const { ctx, requests } = fakeContext(
      () => new WorkerFailure('startup', 'the interpreter exited with code 4 while starting'),
    );
    await schedule(ctx, fn, 'k', rows, { timeoutMs: 1_000 });
    expect(results.every((r) => ExtFnError.isInstance(r) && /while starting/.test(r.message))).toBe(
      true,
    );
    expect(requests.length).toBeLessThanOrEqual(2);
  });

  test('an abort settles the remaining rows as aborted; finished rows keep their values', async () => {
    const { rows, results } = source(2_000);
    const controller = new AbortController();
    const { ctx } = fakeContext(abortFrom(controller, 500));
    const progress: number[] = [];
    await schedule(ctx, fn, 'k', rows, {
      timeoutMs: 1_000,
      signal: controller.signal,
      onProgress: (done) => progress.push(done),
    });
    expect(results.slice(0, 10)).toEqual([0, 2, 4, 6, 8, 10, 12, 14, 16, 18]);
    expect(results.at(-1)).toBeInstanceOf(Error);
    expect((results.at(-1) as ExtFnError).aborted).toBe(true);
    expect(results.every((r) => r !== undefined)).toBe(true);
    expect(progress.at(-1)).toBe(2_000);
  });

  /**
   * A fake worker per lease that takes a request queued behind the one it
   * runs (as WarmWorker does): the one behind runs after it, and fails as
   * `behind` when it fails. A lease's first request gets its worker after
   * `acquireMs` (at once by default), as dispatch does: it sets
   * `lease.worker`, then calls `onSent` once the request is written. `mayQueue`
   * says yes while one runs on the lease's worker. `sentBehind` lists, for
   * every request, whether another of its lease was running when it was sent.
   */
  function queueing(ctx: SchedulerContext, acquireMs?: number) {
    const running = new Map<Lease, Promise<Frame>>();
    const request = ctx.request;
    let queued = 0;
    let behind = 0;
    const sentBehind: boolean[] = [];
    /** Requests of a lease written and not answered yet. */
    const written = new Map<Lease, number>();
    ctx.mayQueue = (_key, lease) => lease.worker !== undefined && running.has(lease);
    ctx.request = (f, key, req) => {
      const lease = req.lease!;
      const ahead = req.behind ? running.get(lease) : undefined;
      if (req.behind) queued++;
      const write = () => {
        sentBehind.push((written.get(lease) ?? 0) > 0);
        written.set(lease, (written.get(lease) ?? 0) + 1);
        lease.worker ??= { alive: true } as DispatchWorker;
        lease.onSent?.();
      };
      const acquired = lease.worker === undefined && acquireMs !== undefined;
      if (!acquired) write();
      const run = (async () => {
        if (acquired) {
          await new Promise((resolve) => setTimeout(resolve, acquireMs));
          write();
        }
        if (ahead) {
          try {
            await ahead;
          } catch {
            behind++;
            throw new WorkerFailure('behind', 'the request ahead of it failed');
          }
        }
        return request(f, key, req);
      })();
      running.set(lease, run);
      const forget = () => {
        if (running.get(lease) === run) running.delete(lease);
        written.set(lease, written.get(lease)! - 1);
      };
      run.then(forget, forget);
      return run;
    };
    return { queued: () => queued, behind: () => behind, sentBehind };
  }

  test("a lane's first chunk, which waits for its worker, has the next queued behind it once it is written", async () => {
    const { rows, results } = source(5_000);
    const { ctx } = fakeContext(undefined, 1);
    const { sentBehind } = queueing(ctx, 5);
    ctx.perRowMs.set('k', 0.01); // chunks of 500 rows
    await schedule(ctx, fn, 'k', rows, { timeoutMs: 1_000 });
    expect(results).toEqual(Array.from({ length: 5_000 }, (_, i) => i * 2));
    // the second chunk went behind the first, not after it: the worker never waited for the host
    expect(sentBehind.slice(0, 2)).toEqual([false, true]);
  });

  test('a lane queues its next chunk behind the running one; one behind a chunk that fails is sent again whole', async () => {
    const { rows, results, settledTwice } = source(5_000);
    const { ctx, requests } = fakeContext(
      (start, count) =>
        start <= 3_000 && 3_000 < start + count
          ? new WorkerFailure('timeout', 'did not answer', undefined, 'wall-clock')
          : undefined,
      1,
    );
    const { queued, behind } = queueing(ctx);
    ctx.perRowMs.set('k', 0.01); // chunks of 500 rows (the fake answers 0.01 ms a row)
    await schedule(ctx, fn, 'k', rows, { timeoutMs: 1_000 });
    expect(queued()).toBeGreaterThan(0);
    const failed = results.flatMap((r, i) => (ExtFnError.isInstance(r) ? [i] : []));
    expect(failed).toEqual([3_000]);
    expect((results[3_000] as ExtFnError).kind).toBe('Timeout');
    expect(results.filter((r, i) => i !== 3_000 && r !== i * 2)).toEqual([]);
    expect(settledTwice).toEqual([]);
    // The chunk queued behind [3000, 500] never ran: sent again as it was, not row by row.
    expect(behind()).toBe(1);
    expect(requests.filter(([start, count]) => start === 3_500 && count === 500)).toHaveLength(1);
    expect(requests.filter(([start, count]) => start === 3_500 && count === 1)).toHaveLength(0);
  });

  test('without mayQueue a lane never sends a chunk behind another', async () => {
    const { rows, results } = source(5_000);
    const { ctx, mostInFlight } = fakeContext(undefined, 1);
    ctx.perRowMs.set('k', 0.01);
    await schedule(ctx, fn, 'k', rows, { timeoutMs: 1_000 });
    expect(results).toEqual(Array.from({ length: 5_000 }, (_, i) => i * 2));
    expect(mostInFlight()).toBe(1);
  });

  test.each([
    ['one request at a time', false],
    ['its next chunk queued behind', true],
  ])(
    'a lane that runs alone (%s) takes full chunks to the end, its last rows with the chunk before them',
    async (_, queue) => {
      // 10^5 rows at 0.1 µs a row: chunks of 32 768 (MAX_CHUNK) leave 1 696 rows.
      const counts = async (anotherLane: boolean) => {
        const { rows, results } = source(100_000);
        const { ctx, requests } = fakeContext(undefined, 2);
        if (queue) queueing(ctx);
        const request = ctx.request;
        ctx.request = async (f, key, req) => {
          const frame = await request(f, key, req);
          frame.workMs = 1e-4 * req.rows;
          return frame;
        };
        ctx.wouldServe = () => anotherLane; // false: no idle worker, no start that pays
        ctx.perRowMs.set('k', 1e-4);
        await schedule(ctx, fn, 'k', rows, { timeoutMs: 1_000 });
        expect(results).toEqual(Array.from({ length: 100_000 }, (_, i) => i * 2));
        return requests.map(([, count]) => count);
      };
      // not halved for a second lane that never opens, no request of its own for the last 1 696
      expect(await counts(false)).toEqual([32_768, 32_768, 34_464]);
      // with a second lane the last rows are shared between the two, no chunk past MAX_CHUNK
      const shared = await counts(true);
      expect(shared.reduce((a, b) => a + b)).toBe(100_000);
      expect(Math.max(...shared)).toBe(32_768);
      expect(shared.length).toBeGreaterThan(3);
    },
  );

  test('an abort with a chunk queued settles every row once: done rows keep their values', async () => {
    const { rows, results, settledTwice } = source(5_000);
    const controller = new AbortController();
    const { ctx } = fakeContext(abortFrom(controller, 2_000), 1);
    const { queued } = queueing(ctx);
    ctx.perRowMs.set('k', 0.01);
    await schedule(ctx, fn, 'k', rows, { timeoutMs: 1_000, signal: controller.signal });
    expect(queued()).toBeGreaterThan(0);
    expect(results.slice(0, 2_000)).toEqual(Array.from({ length: 2_000 }, (_, i) => i * 2));
    expect(results.slice(2_000).every((r) => ExtFnError.isInstance(r) && r.aborted)).toBe(true);
    expect(settledTwice).toEqual([]);
  });
});
