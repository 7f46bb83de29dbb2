/**
 * A Redis reply that passes on its own (`-BUSY` while a script runs,
 * `-LOADING` while Redis loads its data) is waited out like silence. When it
 * lasts past connectionTimeoutMs, the rows used to fail with `lost the queue
 * at …: no answer for N ms (ReplyError: BUSY …)` and a fix about `ping`,
 * though Redis had answered all along. Now they say what Redis kept answering,
 * for how long, and what to do.
 */
import { ExtFnError, Registry, Value } from '@improv/extfn-core';
import { Redis } from 'ioredis';
import { describe, expect, test } from 'vitest';
import { queue } from '../src/index.js';
import {
  DOUBLE,
  freshQueueName,
  hasRedisServer,
  startWorkers,
  TestRedis,
  type WorkerProcess,
  waitFor,
} from './helpers.js';

describe.skipIf(!hasRedisServer)(
  `Redis busy with a script for longer than connectionTimeoutMs (${hasRedisServer ? 'own redis-server, wasm worker' : 'skipped: needs its own redis-server'})`,
  () => {
    test('BUSY: the rows, the probe and a warm-up say Redis answered only BUSY, for how long, and the fix', async () => {
      const redis = await TestRedis.start();
      const queueName = freshQueueName();
      const admin = new Redis(redis.url);
      const blocker = new Redis(redis.url);
      let workers: WorkerProcess[] = [];
      const registry = new Registry({
        runners: queue({
          connection: redis.url,
          queueName,
          languages: ['wasm'],
          pollMs: 100,
          connectionTimeoutMs: 2_000,
          requestTimeoutMs: 1_000,
        }),
        cache: false,
      });
      registry.register(DOUBLE);
      try {
        workers = await startWorkers(1, {
          IMPROV_EXTFN_REDIS_URL: redis.url,
          QUEUE_NAME: queueName,
          QUEUE_LANGUAGES: 'wasm',
        });
        expect(await registry.eval('double', [Value.number(21)])).toEqual(Value.number(42));
        // A script that never ends: past busy-reply-threshold every other command gets -BUSY.
        await admin.config('SET', 'busy-reply-threshold', '50');
        blocker.eval('while true do end', 0).catch(() => {});
        let busy = false;
        const checker = new Redis(redis.url);
        checker.on('error', () => {});
        await waitFor(() => {
          void checker.get('x').then(
            () => {},
            (e: Error) => {
              busy ||= /^BUSY/.test(e.message);
            },
          );
          return busy;
        });
        checker.disconnect();

        const started = performance.now();
        const rows = Array.from({ length: 100 }, (_, i) => [Value.number(i)]);
        const batch = await registry.evalBatch('double', rows);
        const ms = performance.now() - started;
        expect(ms).toBeGreaterThanOrEqual(1_900);
        expect(ms).toBeLessThan(8_000);
        for (const error of batch) {
          expect(ExtFnError.isInstance(error), String(error)).toBe(true);
          const e = error as ExtFnError;
          expect(e.kind).toBe('Runtime');
          expect(e.message).not.toMatch(/lost the queue|no answer/);
          expect(e.message).toMatch(
            new RegExp(
              `^function double: Redis at ${redis.url} answered storing the descriptor only with BUSY for \\d+ ms: BUSY Redis is busy running a script`,
            ),
          );
          expect(e.fix).toMatch(/script kill.*raise connectionTimeoutMs/);
          expect(e.message.endsWith(`; ${e.fix}`)).toBe(true);
        }

        const [probe] = await registry.probe();
        expect(probe!.available).toBe(false);
        expect(probe!.detail).toMatch(/answered listing workers with BUSY: BUSY /);
        expect(probe!.fix).toMatch(/script kill/);

        const [warm] = await registry.warmUp();
        expect(warm?.error?.message).toMatch(/answered the warm-up with BUSY: BUSY /);
        expect(warm?.error?.fix).toMatch(/script kill/);
      } finally {
        await admin.script('KILL').catch(() => {});
        blocker.disconnect();
        admin.disconnect();
        await registry.close();
        await Promise.all(workers.map((w) => w.stop()));
        await redis.stop();
      }
    }, 60_000);
  },
);
