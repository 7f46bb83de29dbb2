/**
 * A refresh sent to a queue no worker host serves, tried for real through a
 * Registry: core gives up on a batch that shows no sign of life for twice its
 * deadline plus grace, which used to end every row in a Timeout ("timed out
 * after 1000 ms", though nothing ran) and leave the chunks queued in Redis for
 * a worker to compute later for nobody. Now the rows fail saying that no
 * worker serves the queue and how to start one, and the chunks are withdrawn.
 */
import { ExtFnError, Registry, Value } from '@improv/extfn-core';
import { Redis } from 'ioredis';
import { describe, expect, test } from 'vitest';
import { queue } from '../src/index.js';
import { freshQueueName, hasRedis, noRedis, redisForTest } from './helpers.js';

describe.skipIf(!hasRedis)(
  `a queue with no worker host (${hasRedis ? 'own Redis' : noRedis})`,
  () => {
    test('evalBatch and evalColumns fail with the reason and the fix, not a Timeout, and leave no job queued', async () => {
      const redis = await redisForTest();
      const queueName = freshQueueName();
      const registry = new Registry({
        runners: queue({ connection: redis.url, queueName, languages: ['wasm'], pollMs: 100 }),
        timeoutMs: 1_000,
        cache: false,
      });
      const plain = new Redis(redis.url);
      try {
        registry.register({
          name: 'double',
          language: 'wasm',
          pure: false,
          body: 'wat:(module (func (export "improv_call") (param f64) (result f64) local.get 0 local.get 0 f64.add))',
          argTypes: ['number'],
          returnType: 'number',
        });
        const rows = Array.from({ length: 300 }, (_, i) => [Value.number(i)]);
        const batch = await registry.evalBatch('double', rows);
        const { errors } = await registry.evalColumns('double', [new Float64Array(300)]);
        for (const error of [...batch, ...errors.values()]) {
          expect(ExtFnError.isInstance(error)).toBe(true);
          expect(error).toMatchObject({ kind: 'Runtime' });
          expect((error as ExtFnError).message).toMatch(
            new RegExp(
              `no worker host has served queue ${queueName}-wasm at redis://127\\.0\\.0\\.1:\\d+ for \\d+ ms.*start one \\(improv-extfn worker --redis redis://127\\.0\\.0\\.1:\\d+ --runner wasm\\)`,
            ),
          );
        }
        expect(errors.size).toBe(300);
        // Nothing is left for a worker that comes later to compute for nobody.
        expect(await plain.llen(`bull:${queueName}-wasm:wait`)).toBe(0);
      } finally {
        plain.disconnect();
        await registry.close();
        await redis.stop();
      }
    });
  },
);
