/**
 * A single call (`Registry.eval` through the queue) while Redis hangs: it
 * accepts the connection but never answers (a server stopped with SIGSTOP, a
 * network that drops the packets). A batch in that state ends with `lost the
 * queue at …`; a call used to end as a bare Timeout at core's bound (twice
 * its deadline), which named no cause. Now it fails with the same error,
 * with the fix, once Redis has been silent for the call's deadline (at
 * least 2 s), before core's bound.
 */
import { once } from 'node:events';
import { createServer, type Server, type Socket } from 'node:net';
import { ExtFnError, Registry, Value } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { queue } from '../src/index.js';
import {
  DOUBLE,
  freshQueueName,
  hasRedisServer,
  noRedisServer,
  startWorkers,
  TestRedis,
  type WorkerProcess,
} from './helpers.js';

/** What `eval` settled with, and when (ms after it was called). */
async function timed(call: Promise<unknown>): Promise<{ error: unknown; ms: number }> {
  const started = performance.now();
  try {
    return { error: await call, ms: performance.now() - started };
  } catch (error) {
    return { error, ms: performance.now() - started };
  }
}

function expectLostQueue(error: unknown, where: string): void {
  expect(ExtFnError.isInstance(error), String(error)).toBe(true);
  const e = error as ExtFnError;
  // Not core's bare `timed out after N ms`: the cause, and what to do about it.
  expect(e.kind, e.message).toBe('Runtime');
  expect(e.message).toMatch(
    new RegExp(`^function double: lost the queue at ${where}: no answer for \\d+ ms \\(`),
  );
  expect(e.message).toContain(`redis-cli -u ${where} ping`);
  expect(e.fix).toContain(`redis-cli -u ${where} ping`);
}

describe('a single call while Redis hangs', () => {
  test('a Redis that accepts the connection but never answers: the call fails naming it, within its deadline', async () => {
    // A fake Redis: takes connections, reads what it is sent, answers nothing.
    const sockets = new Set<Socket>();
    const server: Server = createServer((socket) => {
      sockets.add(socket);
      socket.on('error', () => {});
      socket.on('close', () => sockets.delete(socket));
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as { port: number };
    const where = `redis://127.0.0.1:${port}`;
    // Deadline 2 s: core's bound is 4 s; each Redis round trip may take 5 s (the default),
    // longer than the whole bound, so waiting for one to time out could not say why in time.
    const registry = new Registry({
      runners: queue({ connection: where, queueName: freshQueueName(), languages: ['wasm'] }),
      cache: false,
      timeoutMs: 2_000,
    });
    try {
      registry.register(DOUBLE);
      const { error, ms } = await timed(registry.eval('double', [Value.number(21)]));
      expectLostQueue(error, where);
      expect(sockets.size).toBeGreaterThan(0); // it did connect: Redis hung, not refused
      // Redis silent for the call's deadline, and no longer than core's bound (deadline + 2 s).
      expect(ms).toBeGreaterThanOrEqual(1_900);
      expect(ms).toBeLessThan(4_000);
    } finally {
      await registry.close();
      for (const socket of sockets) socket.destroy();
      server.close();
    }
  }, 30_000);

  describe.skipIf(!hasRedisServer)(
    `Redis stopped mid-session (${hasRedisServer ? 'own redis-server, wasm worker' : noRedisServer})`,
    () => {
      test('a call that worked fails naming Redis once it hangs (SIGSTOP), and works again once it resumes', async () => {
        const redis = await TestRedis.start();
        const queueName = freshQueueName();
        let workers: WorkerProcess[] = [];
        const registry = new Registry({
          runners: queue({
            connection: redis.url,
            queueName,
            languages: ['wasm'],
            pollMs: 100,
          }),
          cache: false,
          timeoutMs: 3_000,
        });
        try {
          workers = await startWorkers(1, {
            IMPROV_EXTFN_REDIS_URL: redis.url,
            QUEUE_NAME: queueName,
            QUEUE_LANGUAGES: 'wasm',
          });
          registry.register(DOUBLE);
          expect(await registry.eval('double', [Value.number(21)])).toEqual(Value.number(42));
          redis.hang();
          const { error, ms } = await timed(registry.eval('double', [Value.number(1)]));
          expectLostQueue(error, redis.url);
          // Silent for the deadline (3 s), answered before core's bound (deadline + 3 s).
          expect(ms).toBeGreaterThanOrEqual(2_900);
          expect(ms).toBeLessThan(6_000);
          redis.resume();
          expect(await registry.eval('double', [Value.number(2)])).toEqual(Value.number(4));
        } finally {
          redis.resume();
          await registry.close();
          await Promise.all(workers.map((w) => w.stop()));
          await redis.stop();
        }
      }, 60_000);
    },
  );
});
