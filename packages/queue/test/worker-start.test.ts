/**
 * A worker host's start and stop are bounded: a Redis that cannot be reached
 * ends the start after connectTimeoutMs with a clear error, an abort ends it
 * at once, nothing is left connected either way, and close() does not wait
 * for a Redis that went away.
 */
import { ExtFnError, type LanguageRunner } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { startQueueWorker } from '../src/index.js';
import { hasRedisServer, noRedisServer, TestRedis, waitFor } from './helpers.js';

const UNREACHABLE = 'redis://127.0.0.1:1';

function runner(): LanguageRunner & { closed: number } {
  return {
    specificationVersion: 'v1',
    language: 'wasm',
    packageName: 'test-runner',
    capabilities: { isolated: true, warmWorkers: false, batch: false },
    closed: 0,
    async probe() {
      return { language: 'wasm', available: true, detail: 'test runner' };
    },
    async call() {
      return { type: 'number', value: 1 };
    },
    async close() {
      this.closed++;
    },
  };
}

describe('start-up', () => {
  test('a Redis that cannot be reached: LanguageUnavailable after connectTimeoutMs, naming it and the last error', async () => {
    const errors: Error[] = [];
    const started = performance.now();
    let error: unknown;
    try {
      await startQueueWorker({
        connection: UNREACHABLE,
        runners: [runner()],
        connectTimeoutMs: 500,
        onError: (e) => errors.push(e),
      });
    } catch (e) {
      error = e;
    }
    const ms = performance.now() - started;
    expect(ms).toBeGreaterThanOrEqual(490);
    expect(ms).toBeLessThan(3_500);
    expect(ExtFnError.isInstance(error) && error.kind).toBe('LanguageUnavailable');
    expect((error as ExtFnError).message).toMatch(
      /^startQueueWorker: cannot reach Redis at redis:\/\/127\.0\.0\.1:1 within 500 ms \(connect ECONNREFUSED 127\.0\.0\.1:1\)$/,
    );
    expect((error as ExtFnError).fix).toMatch(/start Redis there/);
    // Nothing keeps retrying once the start has failed.
    await new Promise((r) => setTimeout(r, 300));
    const count = errors.length;
    await new Promise((r) => setTimeout(r, 1_500));
    expect(errors.length).toBe(count);
  });

  test('an abort ends the start at once with the signal reason', async () => {
    const controller = new AbortController();
    const reason = new Error('stopped by the host');
    setTimeout(() => controller.abort(reason), 200);
    const started = performance.now();
    await expect(
      startQueueWorker({
        connection: UNREACHABLE,
        runners: [runner()],
        signal: controller.signal,
        onError: () => {},
      }),
    ).rejects.toBe(reason);
    expect(performance.now() - started).toBeLessThan(1_500);
    await expect(
      startQueueWorker({ connection: UNREACHABLE, runners: [runner()], signal: controller.signal }),
    ).rejects.toBe(reason);
  });

  test('connectTimeoutMs must be a positive number', async () => {
    await expect(
      startQueueWorker({ connection: UNREACHABLE, runners: [runner()], connectTimeoutMs: 0 }),
    ).rejects.toThrow(/connectTimeoutMs must be a positive number/);
  });
});

describe.skipIf(!hasRedisServer)(
  `close (${hasRedisServer ? 'own redis-server' : noRedisServer})`,
  () => {
    test('close() does not wait for a Redis that went away', async () => {
      const redis = await TestRedis.start();
      try {
        const errors: Error[] = [];
        const served = runner();
        const worker = await startQueueWorker({
          connection: redis.url,
          runners: [served],
          onError: (e) => errors.push(e),
        });
        await redis.down();
        await waitFor(() => errors.length > 0, 10_000);
        const started = performance.now();
        await worker.close();
        expect(performance.now() - started).toBeLessThan(3_000);
        expect(served.closed).toBe(1);
      } finally {
        await redis.stop();
      }
    });
  },
);
