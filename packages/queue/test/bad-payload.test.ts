/**
 * A job whose data in Redis is not JSON (only a writer to Redis other than an
 * engine can make one) ends failed with the reason, at once, and does not
 * hold up the jobs behind it on a worker that runs one at a time; an engine
 * waiting on such a chunk gets that reason as its rows' error.
 */
import { ExtFnError, Registry, Value } from '@improv/extfn-core';
import { type Job, Queue, QueueEvents } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import {
  descriptorDigest,
  descriptorKey,
  encodeRows,
  languageQueueName,
  queue,
  WIRE_VERSION,
} from '../src/index.js';
import {
  DOUBLE,
  freshQueueName,
  hasRedis,
  noRedis,
  redisForTest,
  startWorkers,
  type WorkerProcess,
  waitFor,
} from './helpers.js';

const NOT_JSON = /improv-extfn worker refused the job: its data in Redis is not JSON/;

describe.skipIf(!hasRedis)(
  `a job whose data is not JSON ends failed (${hasRedis ? 'wasm worker, one job at a time' : noRedis})`,
  () => {
    let redis: Awaited<ReturnType<typeof redisForTest>>;
    let workers: WorkerProcess[] = [];
    let plain: Redis;
    let jobs: Queue;
    let events: QueueEvents;
    const queueName = freshQueueName();
    const connection = () => ({ host: '127.0.0.1', port: Number(new URL(redis.url).port) });

    beforeAll(async () => {
      redis = await redisForTest();
      workers = await startWorkers(1, {
        IMPROV_EXTFN_REDIS_URL: redis.url,
        QUEUE_NAME: queueName,
        QUEUE_LANGUAGES: 'wasm',
        QUEUE_CONCURRENCY: '1',
      });
      plain = new Redis(connection());
      jobs = new Queue(languageQueueName(queueName, 'wasm'), { connection: connection() });
      events = new QueueEvents(languageQueueName(queueName, 'wasm'), {
        connection: connection(),
      });
      await events.waitUntilReady();
    }, 60_000);

    afterAll(async () => {
      await jobs?.resume().catch(() => {});
      await jobs?.obliterate({ force: true }).catch(() => {});
      await events?.close();
      await jobs?.close();
      plain?.disconnect();
      await Promise.all(workers.map((w) => w.stop()));
      await redis?.stop();
    });

    const goodData = async (x: number) => {
      const digest = descriptorDigest(DOUBLE);
      await plain.hset(descriptorKey('bull', queueName), digest, JSON.stringify(DOUBLE));
      return {
        v: WIRE_VERSION,
        digest,
        rows: 1,
        args: encodeRows(['number'], [[Value.number(x)]]).toString('base64'),
        timeoutMs: 5_000,
      };
    };

    const outcome = async (job: Job) => {
      try {
        return { ok: true, result: await job.waitUntilFinished(events, 20_000) };
      } catch (error) {
        return { ok: false, reason: (error as Error).message };
      }
    };

    test('it fails at once with the reason; the job behind it still runs', async () => {
      // Paused, so that the data is replaced before any worker can take the job.
      await jobs.pause();
      const bad = await jobs.add('chunk', await goodData(1), { jobId: 'bad-1', attempts: 3 });
      await plain.hset(jobs.toKey('bad-1'), 'data', '{not json');
      const good = await jobs.add('chunk', await goodData(21), { jobId: 'good-1', attempts: 1 });
      const started = performance.now();
      await jobs.resume();
      const [badOutcome, goodOutcome] = await Promise.all([outcome(bad), outcome(good)]);
      expect(badOutcome.ok).toBe(false);
      expect(badOutcome.reason).toMatch(NOT_JSON);
      expect(badOutcome.reason).toMatch(/is something else writing to this Redis\?/);
      expect(goodOutcome).toMatchObject({ ok: true, result: { v: WIRE_VERSION, errors: [] } });
      // failed for good, not retried (3 attempts were asked for) and not left active
      expect(await jobs.getJobState('bad-1')).toBe('failed');
      expect(Number(await plain.hget(jobs.toKey('bad-1'), 'atm'))).toBe(1);
      expect(performance.now() - started).toBeLessThan(15_000);
      expect(workers[0]!.chunks('refused').map((e) => e.jobId)).toContain('bad-1');
    }, 30_000);

    test('an engine waiting on such a chunk gets the reason on its rows; the other chunks their values', async () => {
      const registry = new Registry({
        runners: queue({
          connection: redis.url,
          queueName,
          languages: ['wasm'],
          chunkRows: 2,
          pollMs: 200,
        }),
        cache: false,
      });
      try {
        registry.register(DOUBLE);
        await jobs.pause();
        const rows = Array.from({ length: 6 }, (_, i) => [Value.number(i)]);
        const refresh = registry.evalBatch('double', rows);
        let queued: Job[] = [];
        expect(
          await waitFor(() => {
            void jobs.getJobs(['paused', 'wait', 'prioritized']).then((found) => {
              queued = found;
            });
            return queued.length === 3;
          }),
        ).toBe(true);
        const first = queued.find(
          (job) => job.data.args === encodeRows(['number'], rows.slice(0, 2)).toString('base64'),
        )!;
        await plain.hset(jobs.toKey(first.id!), 'data', 'not json at all');
        await jobs.resume();
        const results = await refresh;
        for (const i of [0, 1]) {
          const row = results[i]!;
          expect(ExtFnError.isInstance(row) && row.kind).toBe('Runtime');
          expect((row as ExtFnError).message).toMatch(/the queue worker failed this chunk/);
          expect((row as ExtFnError).message).toMatch(NOT_JSON);
        }
        for (const i of [2, 3, 4, 5]) expect(results[i]).toEqual(Value.number(2 * i));
      } finally {
        await jobs.resume().catch(() => {});
        await registry.close();
      }
    }, 60_000);
  },
);
