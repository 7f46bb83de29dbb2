/**
 * The batch driver at its seam, with a fake Redis client: what it does with
 * each state a job can be found in (completed, failed, lost, unreachable)
 * and on abort — the paths a real Redis only reaches by races.
 */
import type { ExternalFn, ExtFnError } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { type ChunkOutcome, driveChunks } from '../src/chunk-driver.js';
import { encodeResults } from '../src/columns.js';
import type { JobListener, JobSnapshot, QueueClient } from '../src/queue-client.js';
import { DESCRIPTOR_MISSING, WIRE_VERSION } from '../src/wire.js';

const fn: ExternalFn = {
  name: 'f',
  language: 'python',
  body: 'result = 1',
  argTypes: ['number'],
  returnType: 'number',
  pure: false,
};

const result = {
  v: WIRE_VERSION,
  values: encodeResults('number', [{ type: 'number', value: 7 }]).toString('base64'),
  errors: [],
};

/**
 * A client whose jobs go through the states `script(id, attempt)` gives;
 * `workers` serve its queue; each request is answered after `delayMs`.
 */
function fakeClient(
  script: (id: string, added: number) => JobSnapshot | Error,
  workers = 1,
  delayMs = 0,
) {
  const added: string[] = [];
  const cancelled: string[] = [];
  let published = 0;
  let sequence = 0;
  const listeners = new Map<string, JobListener>();
  // Like the real client's: when the fake Redis last answered.
  let answeredAt = Number.NEGATIVE_INFINITY;
  const answered = () => {
    answeredAt = performance.now();
  };
  const answer = async () => {
    if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
  };
  const client = {
    closed: false,
    get answeredAt() {
      return answeredAt;
    },
    options: { connection: { host: 'h', port: 1 }, queueName: 'q' },
    newJobId: () => `job${++sequence}`,
    listen: (id: string, l: JobListener) => listeners.set(id, l),
    unlisten: (id: string) => listeners.delete(id),
    publishDescriptor: async () => {
      await answer();
      published++;
      answered();
      return 'digest';
    },
    add: async (_language: string, jobs: { id: string }[]) => {
      await answer();
      added.push(...jobs.map((j) => j.id));
      answered();
    },
    snapshot: async (_language: string, ids: string[]) => {
      await answer();
      return ids.map((id) => {
        const outcome = script(id, added.length);
        if (outcome instanceof Error) throw outcome;
        answered();
        return outcome;
      });
    },
    cancel: async (_language: string, ids: string[]) => {
      cancelled.push(...ids);
    },
    workerCount: async () => {
      await answer();
      answered();
      return workers;
    },
  };
  return {
    client: client as unknown as QueueClient,
    added,
    cancelled,
    published: () => published,
  };
}

async function drive(
  client: QueueClient,
  extra: {
    signal?: AbortSignal;
    connectionTimeoutMs?: number;
    noWorkerMs?: number;
    onProgress?: (done: number, total: number) => void;
  } = {},
): Promise<ChunkOutcome> {
  let outcome: ChunkOutcome | undefined;
  await driveChunks(
    client,
    fn,
    [{ start: 0, count: 1, encode: () => Buffer.alloc(8) }],
    {
      timeoutMs: 1_000,
      pollMs: 5,
      connectionTimeoutMs: extra.connectionTimeoutMs ?? 1_000,
      maxResubmits: 2,
      maxQueuedChunks: 10,
      noWorkerMs: extra.noWorkerMs ?? 60_000,
      ...(extra.signal ? { signal: extra.signal } : {}),
      ...(extra.onProgress ? { onProgress: extra.onProgress } : {}),
    },
    (_chunk, o) => {
      outcome = o;
    },
  );
  return outcome!;
}

const errorOf = (outcome: ChunkOutcome): ExtFnError => {
  if (!('error' in outcome)) throw new Error('expected an error');
  return outcome.error;
};

describe('chunk driver', () => {
  test('a completed job found by the poll gives its result', async () => {
    const fake = fakeClient(() => ({ state: 'completed', returnValue: result }));
    expect(await drive(fake.client)).toEqual({ result });
  });

  test('a job whose descriptor was gone is published again and resubmitted under a new id', async () => {
    const fake = fakeClient((id) =>
      id === 'job1'
        ? { state: 'failed', reason: `${DESCRIPTOR_MISSING}: digest` }
        : { state: 'completed', returnValue: result },
    );
    expect(await drive(fake.client)).toEqual({ result });
    expect(fake.added).toEqual(['job1', 'job2']);
    expect(fake.published()).toBe(2);
  });

  test('a job lost by Redis is resubmitted a bounded number of times, then fails saying so', async () => {
    const fake = fakeClient(() => ({ state: 'missing' }));
    const error = errorOf(await drive(fake.client));
    expect(error.kind).toBe('Runtime');
    expect(error.message).toMatch(
      /^function f: the queue lost this chunk 3 times \(.*restarted or flushed\)/,
    );
    expect(fake.added).toHaveLength(3);
  });

  test('a job that stalled too often fails as one the workers died on', async () => {
    const fake = fakeClient(() => ({
      state: 'failed',
      reason: 'job stalled more than allowable limit',
    }));
    expect(errorOf(await drive(fake.client)).message).toMatch(
      /worker died or stopped answering on every attempt .* not retried further/,
    );
  });

  test('a malformed result is the chunk error, not a crash', async () => {
    const fake = fakeClient(() => ({ state: 'completed', returnValue: { v: 99 } }));
    expect(errorOf(await drive(fake.client)).message).toMatch(/malformed result/);
  });

  test('Redis unreachable past connectionTimeoutMs fails the rows naming where', async () => {
    const fake = fakeClient(() => new Error('Redis did not answer reading job states within 5 ms'));
    const error = errorOf(await drive(fake.client, { connectionTimeoutMs: 50 }));
    expect(error.message).toMatch(/lost the queue at redis:\/\/h:1: no answer for \d+ ms/);
  });

  test('a request Redis never answers fails the rows when connectionTimeoutMs ends, not when (if) the request does', async () => {
    const fake = fakeClient(() => ({ state: 'pending' }));
    // Hung Redis: the request's own bound (requestTimeoutMs) is longer than the test.
    (fake.client as unknown as { snapshot: () => Promise<never> }).snapshot = () =>
      new Promise(() => {});
    const started = performance.now();
    const error = errorOf(await drive(fake.client, { connectionTimeoutMs: 100 }));
    expect(performance.now() - started).toBeGreaterThanOrEqual(99);
    expect(error.kind).toBe('Runtime');
    expect(error.message).toMatch(
      /^function f: lost the queue at redis:\/\/h:1: no answer for \d+ ms \(Redis did not answer reading job states\); make Redis at redis:\/\/h:1 answer again \(redis-cli -u redis:\/\/h:1 ping should print PONG\)/,
    );
    expect(error.fix).toMatch(/^make Redis at redis:\/\/h:1 answer again/);
  }, 5_000);

  test('a slow Redis that keeps answering is not lost, though a round takes longer than connectionTimeoutMs', async () => {
    let polls = 0;
    // Each request answered after 100 ms: a round (descriptor, add, states, workers) takes 400.
    const fake = fakeClient(
      () => (++polls < 3 ? { state: 'pending' } : { state: 'completed', returnValue: result }),
      1,
      100,
    );
    expect(await drive(fake.client, { connectionTimeoutMs: 300 })).toEqual({ result });
  });

  test('closing the runner mid-call fails the rows at once, not after the connection bound', async () => {
    const fake = fakeClient(() => new Error('the queue client is closed'));
    (fake.client as unknown as { closed: boolean }).closed = true;
    const error = errorOf(await drive(fake.client, { connectionTimeoutMs: 60_000 }));
    expect(error.message).toBe('function f: the queue runner was closed during the call');
  });

  test('no worker host on the queue for noWorkerMs: the rows fail saying so, and the job is withdrawn', async () => {
    const fake = fakeClient(() => ({ state: 'pending' }), 0);
    const error = errorOf(await drive(fake.client, { noWorkerMs: 50 }));
    expect(error.kind).toBe('Runtime');
    expect(error.message).toMatch(
      /^function f: no worker host has served queue q-python at redis:\/\/h:1 for \d+ ms, so the rows not evaluated were withdrawn; start one \(improv-extfn worker --redis redis:\/\/h:1 --runner python\)/,
    );
    expect(fake.cancelled).toEqual(['job1']);
  });

  test('while a worker host is connected, a pending job is reported as a sign of life', async () => {
    let polls = 0;
    const fake = fakeClient(() =>
      ++polls < 5 ? { state: 'pending' } : { state: 'completed', returnValue: result },
    );
    const reports: [number, number][] = [];
    const outcome = await drive(fake.client, {
      noWorkerMs: 1,
      onProgress: (done, total) => reports.push([done, total]),
    });
    expect(outcome).toEqual({ result });
    // Pending rounds report the rows done so far (none), which keeps core's silence bound away.
    expect(reports.slice(0, 3)).toEqual([
      [0, 1],
      [0, 1],
      [0, 1],
    ]);
    expect(reports.at(-1)).toEqual([1, 1]);
  });

  test('abort settles the rows as aborted and cancels the jobs', async () => {
    const fake = fakeClient(() => ({ state: 'pending' }));
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error('stop')), 30);
    const error = errorOf(await drive(fake.client, { signal: controller.signal }));
    expect(error.aborted).toBe(true);
    expect(fake.cancelled).toEqual(['job1']);
  });
});
