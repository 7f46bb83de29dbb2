/**
 * Failures of the fleet: a worker killed with SIGKILL mid-refresh loses no
 * row; a chunk that keeps killing workers fails with a clear error after a
 * bounded number of attempts; Redis restarted mid-refresh (losing every job)
 * still ends in results; Redis gone for good ends in a clear error, not a
 * hang; abort removes queued chunks and stops the running one.
 */
import { ExtFnError, Registry, type RowResult, Value } from '@improv/extfn-core';
import { Queue } from 'bullmq';
import { describe, expect, test } from 'vitest';
import { languageQueueName, queue } from '../src/index.js';
import {
  freshQueueName,
  hasRedisServer,
  noRedisServer,
  noSandbox,
  pythonOk,
  redisForTest,
  startWorkers,
  TestRedis,
  WorkerProcess,
  waitFor,
} from './helpers.js';

const SLOW_DOUBLE = (seconds: number) =>
  `import time\ntime.sleep(${seconds})\nresult = 2 * args[0]`;

function registryFor(url: string, queueName: string, chunkRows: number, extra = {}) {
  const registry = new Registry({
    runners: queue({
      connection: url,
      queueName,
      languages: ['python'],
      chunkRows,
      pollMs: 200,
      ...extra,
    }),
    cache: false,
  });
  return registry;
}

const values = (results: RowResult[]) =>
  results.map((r) => (ExtFnError.isInstance(r) ? r.message : (r as { value: number }).value));

const ready = hasRedisServer && pythonOk;
const why = hasRedisServer ? noSandbox : noRedisServer;

describe.skipIf(!ready)(
  `worker and Redis failures (${ready ? 'python, own redis-server' : why})`,
  () => {
    test('a worker killed with SIGKILL mid-refresh loses no row: its chunk is retried on the other', async () => {
      const redis = await redisForTest();
      const queueName = freshQueueName();
      const env = {
        IMPROV_EXTFN_REDIS_URL: redis.url,
        QUEUE_NAME: queueName,
        QUEUE_CONCURRENCY: '1',
      };
      const workers = await startWorkers(2, env);
      const registry = registryFor(redis.url, queueName, 4);
      try {
        registry.register({
          name: 'slow',
          language: 'python',
          body: SLOW_DOUBLE(0.05),
          argTypes: ['number'],
          returnType: 'number',
        });
        const rows = Array.from({ length: 60 }, (_, i) => [Value.number(i)]);
        const refresh = registry.evalBatch('slow', rows);
        const [victim, survivor] = workers as [WorkerProcess, WorkerProcess];
        // Kill the victim while it holds a chunk it has not finished.
        expect(
          await waitFor(
            () =>
              victim.chunks('start').length >= 2 &&
              victim.chunks('start').length > victim.chunks('done').length,
          ),
        ).toBe(true);
        const started = victim.chunks('start').map((e) => e.jobId);
        victim.child.kill('SIGKILL');
        // 'exit' can come before the last lines in its stdout pipe are read: a chunk it
        // finished would then look lost. 'close' comes after them.
        await victim.outputRead;
        const finished = new Set(victim.chunks('done').map((e) => e.jobId));
        const lost = started.filter((id) => !finished.has(id));
        expect(lost.length).toBeGreaterThan(0);

        const results = await refresh;
        expect(values(results)).toEqual(rows.map((_, i) => 2 * i));
        // the survivor's log of its last chunks may trail their results in Redis
        const retried = () => new Set(survivor.chunks('done').map((e) => e.jobId));
        await waitFor(() => lost.every((id) => retried().has(id)));
        const survivorDone = retried();
        for (const id of lost) expect(survivorDone.has(id), `chunk ${id} was retried`).toBe(true);
      } finally {
        await registry.close();
        await Promise.all(workers.map((w) => w.stop()));
        await redis.stop();
      }
    }, 90_000);

    test('a chunk that keeps killing workers fails with a clear error after a bounded number of attempts', async () => {
      const redis = await redisForTest();
      const queueName = freshQueueName();
      const env = {
        IMPROV_EXTFN_REDIS_URL: redis.url,
        QUEUE_NAME: queueName,
        QUEUE_CONCURRENCY: '1',
        QUEUE_POISON: '666',
        QUEUE_MAX_STALLED: '1',
        QUEUE_HOLD: '1',
      };
      const registry = registryFor(redis.url, queueName, 5);
      // A fleet of two hosts; each one the poisoned chunk kills is replaced by a spare booted
      // in advance and held before it connects. The engine withdraws the rows once no host has
      // been connected for the call deadline (5 s here; see no-worker.test.ts). That window used
      // to hold a replacement's whole start, begun only when its predecessor died: Node and its
      // modules, about 0.6 s of CPU, which at a load of 20 on two cores took longer than 5 s.
      // Every cold start now happens before the batch is sent; a death costs only a spare's
      // connection (tens of ms), and the other host stays connected meanwhile. If the chunk were
      // retried without bound, the hosts would run out (at most MAX_HOSTS), the rows would fail
      // with "no worker host", and the assertions below would fail.
      const MAX_HOSTS = 8;
      const hosts: WorkerProcess[] = [];
      const spares: WorkerProcess[] = [];
      /** How long each replacement took to connect after a host died (for a failure's message). */
      const joins: number[] = [];
      let settled = false;
      const boot = () => {
        if (hosts.length >= MAX_HOSTS) return;
        const host = new WorkerProcess(env);
        hosts.push(host);
        spares.push(host);
      };
      const serving: Promise<void>[] = [];
      const serve = (host: WorkerProcess) => {
        const replaced = (async () => {
          await host.exited;
          const died = performance.now();
          const next = spares.shift();
          if (settled || !next) return;
          boot(); // the next spare, booting while the hosts serve
          await next.booted;
          next.release();
          await next.ready;
          joins.push(Math.round(performance.now() - died));
          serve(next);
        })();
        serving.push(replaced.catch(() => {})); // a spare stopped at the end never gets ready
      };
      try {
        for (let i = 0; i < 4; i++) boot();
        await Promise.all(hosts.map((host) => host.booted));
        const first = spares.splice(0, 2);
        for (const host of first) host.release();
        await Promise.all(first.map((host) => host.ready));
        for (const host of first) serve(host);
        registry.register({
          name: 'double',
          language: 'python',
          body: 'result = 2 * args[0]',
          argTypes: ['number'],
          returnType: 'number',
        });
        const inputs = [1, 2, 3, 666, 5, 6, 7, 8, 9, 10];
        const results = await registry.evalBatch(
          'double',
          inputs.map((x) => [Value.number(x)]),
        );
        settled = true;
        const context = `replacements connected ${JSON.stringify(joins)} ms after a death`;
        for (const i of [5, 6, 7, 8, 9]) {
          expect(results[i], context).toEqual(Value.number(2 * inputs[i]!));
        }
        for (const i of [0, 1, 2, 3, 4]) {
          const row = results[i]!;
          expect(ExtFnError.isInstance(row) && row.kind, context).toBe('Runtime');
          expect((row as ExtFnError).message, context).toMatch(
            /worker died or stopped answering on every attempt/,
          );
          expect((row as ExtFnError).message).toMatch(/not retried further/);
        }
        const deaths = hosts.filter((w) => w.child.signalCode === 'SIGKILL').length;
        // maxStalledCount 1: the chunk runs twice, then fails; never retried forever.
        expect(deaths).toBeGreaterThanOrEqual(2);
        expect(deaths).toBeLessThanOrEqual(3);
      } finally {
        settled = true;
        await registry.close();
        await Promise.all(hosts.map((w) => w.stop()));
        await Promise.all(serving);
        await redis.stop();
      }
    }, 120_000);

    test('Redis restarted mid-refresh (every job lost): the refresh still completes with every row right', async () => {
      const redis = await TestRedis.start();
      const queueName = freshQueueName();
      const workers = await startWorkers(1, {
        IMPROV_EXTFN_REDIS_URL: redis.url,
        QUEUE_NAME: queueName,
        QUEUE_CONCURRENCY: '2',
      });
      const registry = registryFor(redis.url, queueName, 4, { connectionTimeoutMs: 20_000 });
      try {
        registry.register({
          name: 'slow',
          language: 'python',
          body: SLOW_DOUBLE(0.05),
          argTypes: ['number'],
          returnType: 'number',
        });
        const rows = Array.from({ length: 48 }, (_, i) => [Value.number(i)]);
        const refresh = registry.evalBatch('slow', rows);
        expect(await waitFor(() => workers[0]!.chunks('done').length >= 2)).toBe(true);
        await redis.down();
        await new Promise((r) => setTimeout(r, 500));
        await redis.up();
        const results = await refresh;
        expect(values(results)).toEqual(rows.map((_, i) => 2 * i));
      } finally {
        await registry.close();
        await Promise.all(workers.map((w) => w.stop()));
        await redis.stop();
      }
    }, 120_000);

    test('Redis gone for good mid-refresh: unfinished rows fail with a clear error, no hang', async () => {
      const redis = await TestRedis.start();
      const queueName = freshQueueName();
      const workers = await startWorkers(1, {
        IMPROV_EXTFN_REDIS_URL: redis.url,
        QUEUE_NAME: queueName,
        QUEUE_CONCURRENCY: '1',
      });
      const registry = registryFor(redis.url, queueName, 4, {
        connectionTimeoutMs: 2_000,
        requestTimeoutMs: 1_000,
      });
      try {
        registry.register({
          name: 'slow',
          language: 'python',
          body: SLOW_DOUBLE(0.05),
          argTypes: ['number'],
          returnType: 'number',
        });
        const rows = Array.from({ length: 80 }, (_, i) => [Value.number(i)]);
        const refresh = registry.evalBatch('slow', rows);
        expect(await waitFor(() => workers[0]!.chunks('done').length >= 1)).toBe(true);
        await redis.down();
        const results = await refresh;
        const failed = results.filter((r) => ExtFnError.isInstance(r)) as ExtFnError[];
        expect(failed.length).toBeGreaterThan(0);
        for (const error of failed) {
          expect(error.kind).toBe('Runtime');
          expect(error.message).toContain(`lost the queue at redis://127.0.0.1:${redis.port}`);
        }
        results.forEach((r, i) => {
          if (!ExtFnError.isInstance(r)) expect(r).toEqual(Value.number(2 * i));
        });
      } finally {
        await registry.close();
        await Promise.all(workers.map((w) => w.stop()));
        await redis.stop();
      }
    }, 90_000);

    test('Redis hung mid-refresh past the call deadline: the rows fail naming Redis when its bound ends, not a bare Timeout', async () => {
      const redis = await TestRedis.start();
      const queueName = freshQueueName();
      const workers = await startWorkers(1, {
        IMPROV_EXTFN_REDIS_URL: redis.url,
        QUEUE_NAME: queueName,
        QUEUE_CONCURRENCY: '1',
      });
      // Core cuts a batch that reports nothing for its deadline plus grace (1 s + 2 s here);
      // the queue's own bound on a Redis that does not answer is longer.
      const registry = new Registry({
        runners: queue({
          connection: redis.url,
          queueName,
          languages: ['python'],
          chunkRows: 4,
          pollMs: 200,
          connectionTimeoutMs: 4_000,
          requestTimeoutMs: 1_000,
        }),
        cache: false,
        timeoutMs: 1_000,
      });
      try {
        registry.register({
          name: 'slow',
          language: 'python',
          body: SLOW_DOUBLE(0.05),
          argTypes: ['number'],
          returnType: 'number',
        });
        const rows = Array.from({ length: 80 }, (_, i) => [Value.number(i)]);
        const refresh = registry.evalBatch('slow', rows);
        expect(await waitFor(() => workers[0]!.chunks('done').length >= 1)).toBe(true);
        redis.hang();
        const started = performance.now();
        const results = await refresh;
        const failed = results.filter((r) => ExtFnError.isInstance(r)) as ExtFnError[];
        expect(failed.length).toBeGreaterThan(0);
        for (const error of failed) {
          expect(error.kind).toBe('Runtime');
          expect(error.message).toContain(
            `lost the queue at redis://127.0.0.1:${redis.port}: no answer`,
          );
        }
        // bounded: the outage bound, plus a round trip's, plus a poll
        expect(performance.now() - started).toBeLessThan(4_000 + 1_000 + 3_000);
      } finally {
        redis.resume();
        await registry.close();
        await Promise.all(workers.map((w) => w.stop()));
        await redis.stop();
      }
    }, 90_000);

    test('abort removes the queued chunks and stops the running one; finished rows keep their values', async () => {
      const redis = await redisForTest();
      const queueName = freshQueueName();
      const workers = await startWorkers(1, {
        IMPROV_EXTFN_REDIS_URL: redis.url,
        QUEUE_NAME: queueName,
        QUEUE_CONCURRENCY: '1',
      });
      const registry = registryFor(redis.url, queueName, 2);
      const inspect = new Queue(languageQueueName(queueName, 'python'), {
        connection: { host: '127.0.0.1', port: Number(new URL(redis.url).port) },
      });
      try {
        registry.register({
          name: 'slow',
          language: 'python',
          body: SLOW_DOUBLE(0.2),
          argTypes: ['number'],
          returnType: 'number',
        });
        const rows = Array.from({ length: 40 }, (_, i) => [Value.number(i)]);
        const controller = new AbortController();
        let done = 0;
        const refresh = registry.evalBatch('slow', rows, {
          signal: controller.signal,
          onProgress: (n) => {
            done = n;
          },
        });
        // Chunks of 2 rows, one at a time: a running chunk counts at most 1 row in progress,
        // so 4 rows done means 2 chunks whose results the engine holds.
        expect(
          await waitFor(
            () =>
              done >= 4 && workers[0]!.chunks('start').length > workers[0]!.chunks('done').length,
          ),
        ).toBe(true);
        controller.abort(new Error('user cancelled'));
        const results = await refresh;
        const aborted = results.filter((r) => ExtFnError.isInstance(r) && r.aborted);
        expect(aborted.length).toBeGreaterThan(0);
        results.forEach((r, i) => {
          if (!ExtFnError.isInstance(r)) expect(r).toEqual(Value.number(2 * i));
        });
        expect(results.filter((r) => !ExtFnError.isInstance(r)).length).toBeGreaterThanOrEqual(4);
        // The running chunk is told to stop; nothing is left queued or running.
        expect(await waitFor(() => workers[0]!.chunks('cancelled').length >= 1)).toBe(true);
        expect(
          await waitFor(() => false, 500).then(async () => {
            const counts = await inspect.getJobCounts(
              'waiting',
              'active',
              'prioritized',
              'delayed',
            );
            return Object.values(counts).every((n) => n === 0);
          }),
        ).toBe(true);
        const taken = workers[0]!.chunks('start').length;
        await new Promise((r) => setTimeout(r, 1_000));
        expect(workers[0]!.chunks('start').length).toBe(taken);
        expect(taken).toBeLessThan(20);
      } finally {
        await inspect.close();
        await registry.close();
        await Promise.all(workers.map((w) => w.stop()));
        await redis.stop();
      }
    }, 90_000);
  },
);
