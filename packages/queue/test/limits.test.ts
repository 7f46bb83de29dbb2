/**
 * Sizes a job cannot carry, tried for real through Redis with an in-process
 * worker host whose runner answers what the test asks: results past the
 * worker's budget come back as the rows that fit plus a clear error for the
 * rest (they used to end in V8's string limit, or in the engine giving every
 * row a Timeout while hundreds of megabytes crossed Redis); arguments past
 * what a job may carry are refused by the engine before they travel, with
 * the fix (they used to cross Redis, to be refused by the worker in zod's words).
 */
import {
  type ExternalFn,
  ExtFnError,
  type LanguageRunner,
  Registry,
  type Value,
} from '@improv/extfn-core';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { evaluateChunk } from '../src/evaluate-chunk.js';
import {
  type ChunkEvent,
  descriptorDigest,
  encodeRows,
  type QueueWorker,
  queue,
  startQueueWorker,
  WIRE_VERSION,
} from '../src/index.js';
import { freshQueueName, hasRedis, noRedis, redisForTest } from './helpers.js';

const MIB = 1_048_576;

/** A runner for language `echo`: `sized` answers a text of args[0] bytes, `length` the length of its text argument. */
function echoRunner(): LanguageRunner {
  const answer = (fn: ExternalFn, row: readonly Value[]): Value =>
    fn.name === 'length'
      ? { type: 'number', value: (row[0] as { value: string }).value.length }
      : { type: 'text', value: 'x'.repeat((row[0] as { value: number }).value) };
  return {
    specificationVersion: 'v1',
    language: 'echo',
    packageName: 'echo (test)',
    capabilities: { isolated: true, warmWorkers: false, batch: true },
    probe: async () => ({ language: 'echo', available: true, detail: 'test runner' }),
    call: async (fn, args) => answer(fn, args),
    callBatch: async (fn, rows) => rows.map((row) => answer(fn, row)),
  };
}

const SIZED: ExternalFn = {
  name: 'sized',
  language: 'echo',
  body: 'x',
  argTypes: ['number'],
  returnType: 'text',
  pure: false,
};
const LENGTH: ExternalFn = { ...SIZED, name: 'length', argTypes: ['text'], returnType: 'number' };

describe('a chunk result budget on the worker (no Redis)', () => {
  test('by default 64 MiB: 8 rows of 9 MiB give 7 values and an output error for the last', async () => {
    const rows = 8;
    const data = {
      v: WIRE_VERSION,
      digest: descriptorDigest(SIZED),
      rows,
      args: encodeRows(
        ['number'],
        Array.from({ length: rows }, () => [{ type: 'number', value: 9 * MIB }]),
      ).toString('base64'),
      timeoutMs: 5_000,
    } as const;
    const result = await evaluateChunk(echoRunner(), SIZED, data);
    expect(result.errors.map(([row]) => row)).toEqual([7]);
    const [, error] = result.errors[0]!;
    expect(error).toMatchObject({ kind: 'Runtime', limit: 'output' });
    expect(error.message).toMatch(/passed 64 MiB at row 7 of 8/);
    expect(error.message).toMatch(/chunkRows/);
    expect(Buffer.from(result.values, 'base64').length).toBeLessThanOrEqual(64 * MIB);
  });
});

describe.skipIf(!hasRedis)(
  `sizes through the queue (${hasRedis ? 'own worker host' : noRedis})`,
  () => {
    let redis: Awaited<ReturnType<typeof redisForTest>>;
    let worker: QueueWorker;
    const events: ChunkEvent[] = [];
    const queueName = freshQueueName();

    beforeAll(async () => {
      redis = await redisForTest();
      worker = await startQueueWorker({
        connection: redis.url,
        queueName,
        runners: [echoRunner()],
        concurrency: 1,
        maxResultBytes: MIB,
        onChunk: (event) => events.push(event),
        onError: () => {},
      });
    }, 60_000);

    afterAll(async () => {
      await worker?.close(1_000);
      await redis?.stop();
    });

    const registryWith = (chunkRows: number) => {
      const registry = new Registry({
        runners: queue({
          connection: redis.url,
          queueName,
          languages: ['echo'],
          chunkRows,
          pollMs: 200,
        }),
        timeoutMs: 10_000,
        cache: false,
      });
      registry.register(SIZED);
      registry.register(LENGTH);
      return registry;
    };

    test('results past the worker’s maxResultBytes: the rows that fit keep their values, the rest say why', async () => {
      const registry = registryWith(64);
      try {
        const rows = Array.from({ length: 64 }, () => [
          { type: 'number', value: 100_000 } as Value,
        ]);
        const results = await registry.evalBatch('sized', rows);
        const fitting = results.findIndex((r) => ExtFnError.isInstance(r));
        // 1 MiB holds 10 rows of 100,000 bytes (and their length headers), not 11.
        expect(fitting).toBe(10);
        for (const value of results.slice(0, fitting)) {
          expect((value as { value: string }).value).toHaveLength(100_000);
        }
        for (const error of results.slice(fitting)) {
          expect(error).toMatchObject({ kind: 'Runtime', limit: 'output' });
          expect((error as ExtFnError).message).toMatch(
            /results of this chunk passed 1 MiB at row 10 of 64.*chunkRows.*maxResultBytes/,
          );
        }
        // The engine keeps working: a refresh that fits comes back whole.
        const small = await registry.evalBatch('sized', rows.slice(0, 5));
        expect(small.every((r) => !ExtFnError.isInstance(r))).toBe(true);
      } finally {
        await registry.close();
      }
    });

    test('arguments past what one job may carry are refused before they travel, naming chunkRows', async () => {
      events.length = 0;
      const big = { type: 'text', value: 'y'.repeat(33 * MIB) } as Value;
      const two = registryWith(2);
      try {
        const results = await two.evalBatch('length', [[big], [big]]);
        for (const error of results) {
          expect(ExtFnError.isInstance(error)).toBe(true);
          expect((error as ExtFnError).message).toMatch(
            /the arguments of rows 0 to 1 take 66\.0 MiB as one job, above the 64 MiB one queue job may carry; lower chunkRows/,
          );
        }
        // No worker ever saw it (it used to refuse the job after it had crossed Redis).
        expect(events).toEqual([]);
      } finally {
        await two.close();
      }
      // The fix it names works: one row per job fits.
      const one = registryWith(1);
      try {
        const results = await one.evalBatch('length', [[big], [big]]);
        expect(results).toEqual([
          { type: 'number', value: 33 * MIB },
          { type: 'number', value: 33 * MIB },
        ]);
      } finally {
        await one.close();
      }
    });
  },
);
