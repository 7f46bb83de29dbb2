/**
 * A batch lane's next chunk sent behind the one running on its worker
 * (scheduler.ts, dispatch's `mayQueue`, WarmWorker.request), against the
 * fixture driver: two requests in flight on one worker; the one behind gets
 * its deadline from its own start; a failure or an abort of the one ahead
 * fails the one behind as `behind` (or `aborted`); a lane's second chunk goes
 * behind its first, which had to wait for a worker; and a batch whose worker
 * fails with a chunk queued still gives every row what `eval` gives it.
 */
import { ExtFnError, Value } from '@improv/extfn-core';
import { afterEach, describe, expect, test, vi } from 'vitest';
import { WorkerFailure } from '../src/failures.js';
import type { Frame } from '../src/frames.js';
import { type RequestOptions, WarmWorker } from '../src/warm-worker.js';
import { fixtureRegistry, hasPython } from './helpers.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  vi.restoreAllMocks();
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

/** Every request a WarmWorker is sent: whether another ran on it then, and why it failed, if it did. */
function watchRequests() {
  const seen: { behind: boolean; failure?: string }[] = [];
  const workers: WarmWorker[] = [];
  const original = WarmWorker.prototype.request;
  vi.spyOn(WarmWorker.prototype, 'request').mockImplementation(function (
    this: WarmWorker,
    ...args: Parameters<WarmWorker['request']>
  ): Promise<Frame> {
    if (!workers.includes(this)) workers.push(this);
    const entry: { behind: boolean; failure?: string } = { behind: this.inFlight() > 0 };
    seen.push(entry);
    const reply = original.apply(this, args);
    reply.catch((error: unknown) => {
      entry.failure = error instanceof WorkerFailure ? error.reason : String(error);
    });
    return reply;
  });
  return { seen, workers };
}

function make(...args: Parameters<typeof fixtureRegistry>) {
  const made = fixtureRegistry(...args);
  cleanups.push(() => made.registry.close());
  return made;
}

/** A body that sleeps its argument's seconds and returns it; a negative argument exits the interpreter. */
const SLEEPER = 'if args[0] < 0: os._exit(3)\ntime.sleep(args[0])\nresult = args[0]';

const OPTIONS: RequestOptions = {
  deadlineMs: 900,
  limits: { line: 1 << 20, payload: 0 },
  outputBytes: 1 << 20,
};

/** A warm worker of the fixture driver running SLEEPER, used directly (the pool keeps it idle meanwhile). */
async function sleeperWorker(): Promise<WarmWorker> {
  const { workers } = watchRequests();
  const { registry } = make({ sleep: [SLEEPER, ['number'], 'number'] }, { maxWorkers: 1 });
  expect(await registry.eval('sleep', [Value.number(0)])).toEqual(Value.number(0));
  expect(workers).toHaveLength(1);
  return workers[0]!;
}

const call = (worker: WarmWorker, rows: number[], options: RequestOptions = OPTIONS) =>
  worker.request({ op: 'call', rows: rows.map((x) => [x]) }, undefined, options);

const reason = (reply: Promise<Frame>) =>
  reply.then(
    () => 'answered',
    (error: unknown) => (error instanceof WorkerFailure ? error.reason : String(error)),
  );

describe.skipIf(!hasPython)('a request queued behind another on a warm worker', () => {
  test('both are answered in order; the deadline of the one behind starts when it starts', async () => {
    const worker = await sleeperWorker();
    // 0.5 s each under a 900 ms deadline: the second would miss it counted from its write.
    const first = call(worker, [0.5]);
    const second = call(worker, [0.5]);
    expect(worker.inFlight()).toBe(2);
    const [a, b] = await Promise.all([first, second]);
    expect(a.header.values).toEqual([0.5]);
    expect(b.header.values).toEqual([0.5]);
    expect(b.elapsedMs).toBeLessThan(OPTIONS.deadlineMs); // from its own start too
    expect(worker.inFlight()).toBe(0);
    const two = [call(worker, [0]), call(worker, [0])];
    await expect(call(worker, [0])).rejects.toThrow(/at most one request queued/);
    await Promise.all(two);
  });

  test("the one behind keeps its driver's workMs when the host reads the one ahead late", async () => {
    const worker = await sleeperWorker();
    const first = call(worker, [0.05]);
    const second = call(worker, [0.1]);
    // the host busy while both run: it reads the first answer after the second has
    // been written too, so the second's clock (from that reading) sees almost nothing
    const until = performance.now() + 400;
    while (performance.now() < until) {
      // hold the event loop
    }
    await first;
    const frame = await second;
    expect(frame.elapsedMs!).toBeLessThan(50);
    expect(frame.workMs, "the worker's own time on it: 100 ms of sleep").toBeGreaterThanOrEqual(95);
  });

  test('the one behind times out on its own deadline; the one ahead keeps its answer', async () => {
    const worker = await sleeperWorker();
    const first = call(worker, [0.2]);
    const second = call(worker, [5]);
    expect(await first).toMatchObject({ header: { values: [0.2] } });
    expect(await reason(second)).toBe('timeout');
    expect(worker.alive).toBe(false);
  });

  test('when the one ahead fails, the one behind fails as `behind` (it never ran)', async () => {
    const worker = await sleeperWorker();
    const first = call(worker, [-1]);
    const second = call(worker, [0]);
    expect(await reason(first)).toBe('exited');
    expect(await reason(second)).toBe('behind');
  });

  test('an abort fails both as aborted', async () => {
    const worker = await sleeperWorker();
    const controller = new AbortController();
    const options = { ...OPTIONS, deadlineMs: 10_000, signal: controller.signal };
    const first = call(worker, [5], options);
    const second = call(worker, [5], options);
    setTimeout(() => controller.abort(new Error('stop')), 100);
    expect(await reason(first)).toBe('aborted');
    expect(await reason(second)).toBe('aborted');
  });
});

describe.skipIf(!hasPython)('a batch lane keeps two chunks in flight', () => {
  const n = 4_000;
  const rows = Array.from({ length: n }, (_, i) => [Value.number(i)]);

  test.each([
    [true, 'with'],
    [false, 'without (pipeline: false)'],
  ])('%s: every row equals eval, %s chunks queued behind others', async (pipeline) => {
    const { registry } = make(
      { dbl: ['result = args[0] * 2', ['number'], 'number'] },
      { maxWorkers: 1, pipeline },
    );
    await registry.evalBatch('dbl', rows); // learns its time per row
    const { seen } = watchRequests();
    const results = await registry.evalBatch('dbl', rows);
    expect(results).toEqual(rows.map(([x]) => Value.number((x as { value: number }).value * 2)));
    expect(seen.some((r) => r.behind)).toBe(pipeline);
    expect(seen.every((r) => r.failure === undefined)).toBe(true);
    // the lane's first chunk waited for its worker; the second went behind it all the same
    expect(seen.length).toBeGreaterThan(2);
    expect(seen.slice(0, 2).map((r) => r.behind)).toEqual([false, pipeline]);
  });

  test('a worker that exits with a chunk queued behind: that chunk is sent again, only the guilty rows fail', async () => {
    const body = 'if args[0] % 1000 == 999: os._exit(3)\nresult = args[0] * 2';
    const { registry } = make({ die: [body, ['number'], 'number'] }, { maxWorkers: 1 });
    await registry.evalBatch('die', rows.slice(0, 900)); // learns its time per row
    const { seen } = watchRequests();
    const results = await registry.evalBatch('die', rows);
    const single = await registry.evalBatch('die', [rows[999]!]);
    const guilty = [999, 1_999, 2_999, 3_999];
    results.forEach((result, i) => {
      if (guilty.includes(i)) {
        expect(ExtFnError.isInstance(result) && result.message).toBe(
          (single[0] as ExtFnError).message,
        );
      } else expect(result).toEqual(Value.number(i * 2));
    });
    expect(seen.some((r) => r.failure === 'behind')).toBe(true); // a chunk was queued behind one that failed
  });
});
