/**
 * Redis answering with an error reply (`-OOM …`, `-NOAUTH …`, `-READONLY …`,
 * `-WRONGTYPE …`, also from inside a BullMQ script) is no outage: Redis
 * answered. It used to be waited out as silence and reported as `lost the
 * queue at …: no answer for N ms`, with a fix about the network. Now every
 * unfinished row (and a warm-up) fails at once with what Redis said and what
 * to do (`fix`), and the runner works again once Redis accepts the requests.
 */
import { ExtFnError, Registry, type RowResult, Value } from '@improv/extfn-core';
import { Redis } from 'ioredis';
import { describe, expect, test } from 'vitest';
import { queue } from '../src/index.js';
import {
  DOUBLE,
  freshQueueName,
  hasRedis,
  hasRedisServer,
  noRedis,
  redisForTest,
  startWorkers,
  TestRedis,
  type WorkerProcess,
} from './helpers.js';

const noOwnRedis =
  'skipped: needs its own redis-server (/usr/bin/redis-server): the tests change its maxmemory, password and role';

/** A registry on `url` serving `double` (wasm); short Redis bounds so that a wait shows as `lost the queue` soon. */
function registryOn(url: string, queueName: string): Registry {
  const registry = new Registry({
    runners: queue({
      connection: url,
      queueName,
      languages: ['wasm'],
      pollMs: 100,
      connectionTimeoutMs: 3_000,
      requestTimeoutMs: 1_000,
    }),
    cache: false,
  });
  registry.register(DOUBLE);
  return registry;
}

/** Each row an ExtFnError saying Redis refused `step` with `reply`, the fix in the message and in `fix`. */
function expectRefused(errors: readonly unknown[], url: string, step: string, reply: RegExp) {
  expect(errors.length).toBeGreaterThan(0);
  for (const error of errors) {
    expect(ExtFnError.isInstance(error), String(error)).toBe(true);
    const e = error as ExtFnError;
    expect(e.kind, e.message).toBe('Runtime');
    expect(e.message).not.toMatch(/lost the queue|no answer/);
    expect(
      e.message.startsWith(`function double: Redis at ${url} refused ${step}: `),
      e.message,
    ).toBe(true);
    expect(e.message).toMatch(reply);
    expect(e.fix, e.message).toBeTruthy();
    expect(e.message.endsWith(`; ${e.fix}`)).toBe(true);
  }
}

/** `eval`, `evalBatch` and `evalColumns` of `double`: every row of each, error or value. */
async function everyPath(registry: Registry): Promise<unknown[]> {
  const rows = Array.from({ length: 300 }, (_, i) => [Value.number(i)]);
  let single: unknown;
  try {
    single = await registry.eval('double', [Value.number(1)]);
  } catch (error) {
    single = error;
  }
  const batch: RowResult[] = await registry.evalBatch('double', rows);
  const columns = await registry.evalColumns('double', [new Float64Array(300)]);
  expect(batch).toHaveLength(300);
  expect(columns.errors.size + [...columns.values].filter((v) => !Number.isNaN(v)).length).toBe(
    300,
  );
  return [single, ...batch, ...columns.errors.values()];
}

describe.skipIf(!hasRedisServer)(
  `Redis refuses the queue's requests (${hasRedisServer ? 'own redis-server, wasm worker' : noOwnRedis})`,
  () => {
    test('OOM (maxmemory reached): every row fails saying so, with the fix; the runner works again once memory is raised', async () => {
      const redis = await TestRedis.start();
      const queueName = freshQueueName();
      const admin = new Redis(redis.url);
      let workers: WorkerProcess[] = [];
      const registry = registryOn(redis.url, queueName);
      try {
        workers = await startWorkers(1, {
          IMPROV_EXTFN_REDIS_URL: redis.url,
          QUEUE_NAME: queueName,
          QUEUE_LANGUAGES: 'wasm',
        });
        expect(await registry.eval('double', [Value.number(21)])).toEqual(Value.number(42));
        await admin.config('SET', 'maxmemory-policy', 'noeviction');
        await admin.config('SET', 'maxmemory', '1');
        const errors = await everyPath(registry);
        expectRefused(errors, redis.url, 'storing the descriptor', /: OOM command not allowed/);
        expect((errors[0] as ExtFnError).fix).toContain(
          `raise maxmemory or free memory on the Redis at ${redis.url}`,
        );
        const [warm] = await registry.warmUp();
        expect(warm?.warm).toBe(false);
        expect(warm?.error?.message).toMatch(
          /Redis at .* refused the warm-up: OOM command not allowed/,
        );
        expect(warm?.error?.fix).toContain('raise maxmemory');
        await admin.config('SET', 'maxmemory', '0');
        expect(await registry.eval('double', [Value.number(2)])).toEqual(Value.number(4));
      } finally {
        await registry.close();
        await Promise.all(workers.map((w) => w.stop()));
        admin.disconnect();
        await redis.stop();
      }
    }, 90_000);

    test('NOAUTH (Redis wants a password the engine did not give): every row, and the probe, say so', async () => {
      const redis = await TestRedis.start();
      const admin = new Redis(redis.url);
      const registry = registryOn(redis.url, freshQueueName());
      try {
        await admin.config('SET', 'requirepass', 'not-given');
        expectRefused(
          await everyPath(registry),
          redis.url,
          'storing the descriptor',
          /: NOAUTH Authentication required/,
        );
        const [probe] = await registry.probe();
        expect(probe!.available).toBe(false);
        expect(probe!.detail).toMatch(/refused listing workers: NOAUTH/);
        expect(probe!.fix).toContain('IMPROV_EXTFN_REDIS_PASSWORD');
      } finally {
        await registry.close();
        admin.disconnect();
        await redis.stop();
      }
    }, 90_000);

    test('READONLY (connected to a replica): every row fails naming it, the fix points at the primary', async () => {
      const redis = await TestRedis.start();
      const admin = new Redis(redis.url);
      const registry = registryOn(redis.url, freshQueueName());
      try {
        // A replica of a primary that is not there: it refuses every write.
        await admin.replicaof('127.0.0.1', 1);
        const errors = await everyPath(registry);
        expectRefused(errors, redis.url, 'storing the descriptor', /: READONLY /);
        expect((errors[0] as ExtFnError).fix).toContain('the primary');
      } finally {
        await registry.close();
        admin.disconnect();
        await redis.stop();
      }
    }, 90_000);
  },
);

describe.skipIf(!hasRedis)(
  `a queue key holding something else (${hasRedis ? 'any Redis' : noRedis})`,
  () => {
    test('WRONGTYPE, from a command or from inside a BullMQ script, fails every row naming the reply', async () => {
      const redis = await redisForTest();
      const admin = new Redis(redis.url);
      const descriptors = freshQueueName();
      const events = freshQueueName();
      const registries = [registryOn(redis.url, descriptors), registryOn(redis.url, events)];
      try {
        await admin.set(`bull:${descriptors}:descriptors`, 'not a hash');
        await admin.set(`bull:${events}-wasm:events`, 'not a stream');
        expectRefused(
          await everyPath(registries[0]!),
          redis.url,
          'storing the descriptor',
          /: WRONGTYPE /,
        );
        // Refused inside BullMQ's add script: the same, with the step it was.
        expectRefused(await everyPath(registries[1]!), redis.url, 'adding jobs', /: WRONGTYPE /);
      } finally {
        await Promise.all(registries.map((r) => r.close()));
        await admin.del(`bull:${descriptors}:descriptors`, `bull:${events}-wasm:events`);
        admin.disconnect();
        await redis.stop();
      }
    }, 90_000);
  },
);
