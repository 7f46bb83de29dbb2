/**
 * `workerCount` on a Redis that cannot say how many workers there are: one
 * with no CLIENT LIST (renamed or disabled, as on some managed services).
 * BullMQ then lists one made-up worker, so probe() said `1 worker(s)
 * serving` with none running, and a batch no worker took reported that
 * worker's wait as progress every poll: core's bound never cut it, and it
 * waited for ever. Now the count is unknown (undefined): probe() says so,
 * and such a batch ends at core's bound with a Timeout.
 */
import { ExtFnError, Registry, Value } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { queue } from '../src/index.js';
import { QueueClient, RedisUnreachableError } from '../src/queue-client.js';
import {
  DOUBLE,
  freshQueueName,
  hasRedisServer,
  startWorkers,
  TestRedis,
  type WorkerProcess,
} from './helpers.js';

const noOwnRedis = 'skipped: needs its own redis-server (/usr/bin/redis-server)';

function clientOn(url: string, requestTimeoutMs = 1_000): QueueClient {
  const { hostname, port } = new URL(url);
  return new QueueClient({
    connection: { host: hostname, port: Number(port) },
    queueName: freshQueueName(),
    prefix: 'bull',
    requestTimeoutMs,
    keepCompletedSeconds: 60,
  });
}

describe.skipIf(!hasRedisServer)(
  `how many workers serve a queue (${hasRedisServer ? 'own redis-server' : noOwnRedis})`,
  () => {
    test('Redis with no CLIENT LIST: workerCount is undefined, probe says the workers cannot be counted, a batch no worker takes ends at core bound', async () => {
      const redis = await TestRedis.start(['--rename-command', 'CLIENT', '']);
      const queueName = freshQueueName();
      const client = clientOn(redis.url);
      let workers: WorkerProcess[] = [];
      const registry = new Registry({
        runners: queue({ connection: redis.url, queueName, languages: ['wasm'], pollMs: 100 }),
        timeoutMs: 500,
        cache: false,
      });
      registry.register(DOUBLE);
      try {
        expect(await client.workerCount('wasm')).toBeUndefined();
        const [probe] = await registry.probe();
        expect(probe!.available).toBe(true);
        expect(probe!.detail).toMatch(
          /cannot be counted: Redis at redis:\/\/127\.0\.0\.1:\d+ does not list its clients/,
        );

        // No worker: core's bound (twice the deadline plus grace) ends it, not a wait for ever.
        const rows = Array.from({ length: 10 }, (_, i) => [Value.number(i)]);
        const hang = new Promise<'hang'>((resolve) => setTimeout(() => resolve('hang'), 15_000));
        const batch = await Promise.race([registry.evalBatch('double', rows), hang]);
        expect(batch).not.toBe('hang');
        for (const row of batch as unknown[]) {
          expect(ExtFnError.isInstance(row), String(row)).toBe(true);
          expect((row as ExtFnError).kind).toBe('Timeout');
        }

        // A worker host on such a Redis still serves.
        workers = await startWorkers(1, {
          IMPROV_EXTFN_REDIS_URL: redis.url,
          QUEUE_NAME: queueName,
          QUEUE_LANGUAGES: 'wasm',
        });
        expect(await registry.eval('double', [Value.number(21)])).toEqual(Value.number(42));
      } finally {
        await client.close();
        await registry.close();
        await Promise.all(workers.map((w) => w.stop()));
        await redis.stop();
      }
    }, 60_000);

    test('workerCount counts the workers, and rejects with the reason when Redis does not answer', async () => {
      const redis = await TestRedis.start();
      const queueName = freshQueueName();
      const { hostname, port } = new URL(redis.url);
      const client = new QueueClient({
        connection: { host: hostname, port: Number(port) },
        queueName,
        prefix: 'bull',
        requestTimeoutMs: 500,
        keepCompletedSeconds: 60,
      });
      let workers: WorkerProcess[] = [];
      try {
        expect(await client.workerCount('wasm')).toBe(0);
        workers = await startWorkers(1, {
          IMPROV_EXTFN_REDIS_URL: redis.url,
          QUEUE_NAME: queueName,
          QUEUE_LANGUAGES: 'wasm',
        });
        expect(await client.workerCount('wasm')).toBe(1);
        redis.hang();
        await expect(client.workerCount('wasm')).rejects.toBeInstanceOf(RedisUnreachableError);
      } finally {
        redis.resume();
        await client.close();
        await Promise.all(workers.map((w) => w.stop()));
        await redis.stop();
      }
    }, 60_000);
  },
);
