/**
 * A worker host facing Redis error replies. Its start with a password Redis
 * refuses used to wait all of connectTimeoutMs (30 s by default) and call
 * Redis unreachable. After a failover turned its Redis into a read-only
 * replica, the result of a chunk it had evaluated was refused with a bare
 * `READONLY …` (which chunk, what to do: not said), and the engine, whose
 * polls only read, saw the job pending and a worker connected, and waited
 * for ever. Now each says what Redis refused and the fix, and the engine's
 * rows fail at its next poll.
 */
import { ExtFnError, type LanguageRunner, Registry, Value } from '@improv/extfn-core';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { describe, expect, test } from 'vitest';
import {
  descriptorDigest,
  encodeNumberColumns,
  queue,
  startQueueWorker,
  WIRE_VERSION,
} from '../src/index.js';
import { redisRefusal } from '../src/redis-reply.js';
import {
  DOUBLE,
  freshQueueName,
  hasRedisServer,
  noRedisServer,
  startWorkers,
  TestRedis,
  type WorkerProcess,
  waitFor,
} from './helpers.js';

function runner(): LanguageRunner {
  return {
    specificationVersion: 'v1',
    language: 'wasm',
    packageName: 'test-runner',
    capabilities: { isolated: true, warmWorkers: false, batch: false },
    async probe() {
      return { language: 'wasm', available: true, detail: 'test runner' };
    },
    async call() {
      return { type: 'number', value: 1 };
    },
  };
}

/** Returns its argument after about a second of work: time to fail Redis over mid-chunk. */
const SLOW = {
  name: 'slow',
  language: 'wasm',
  pure: false,
  argTypes: ['number'],
  returnType: 'number',
  body: 'wat:(module (func (export "improv_call") (param $x f64) (result f64) (local $i i64) (loop $l (local.set $i (i64.add (local.get $i) (i64.const 1))) (br_if $l (i64.lt_u (local.get $i) (i64.const 1000000000)))) local.get $x))',
} as const;

describe.skipIf(!hasRedisServer)(
  `a worker host and Redis error replies (${hasRedisServer ? 'own redis-server' : noRedisServer})`,
  () => {
    test('a password Redis refuses (none given: NOAUTH; a wrong one: WRONGPASS) ends the start at once, saying so with the fix', async () => {
      const redis = await TestRedis.start(['--requirepass', 'secret']);
      try {
        for (const [url, reply] of [
          [redis.url, /NOAUTH Authentication required/],
          [
            redis.url.replace('redis://', 'redis://:wrong@'),
            /WRONGPASS invalid username-password pair/,
          ],
        ] as const) {
          const started = performance.now();
          const error = await startQueueWorker({
            connection: url,
            runners: [runner()],
            connectTimeoutMs: 10_000,
            onError: () => {},
          }).then(
            async (worker) => {
              await worker.close();
              return undefined;
            },
            (e: unknown) => e,
          );
          expect(performance.now() - started).toBeLessThan(5_000);
          expect(ExtFnError.isInstance(error) && error.kind, String(error)).toBe(
            'LanguageUnavailable',
          );
          const e = error as ExtFnError;
          expect(e.message).toMatch(
            new RegExp(
              `^startQueueWorker: Redis at ${redis.url} refused the worker host's connection: `,
            ),
          );
          expect(e.message).toMatch(reply);
          expect(e.message).not.toMatch(/cannot reach/);
          expect(e.fix).toMatch(/IMPROV_EXTFN_REDIS_PASSWORD/);
        }
      } finally {
        await redis.stop();
      }
    }, 60_000);

    test('READONLY after a failover mid-chunk: the engine rows fail naming it at the next poll, the host says whose result Redis refused', async () => {
      const redis = await TestRedis.start();
      const queueName = freshQueueName();
      const admin = new Redis(redis.url);
      let workers: WorkerProcess[] = [];
      const registry = new Registry({
        // Polls far apart: the host hands its result in (refused) before the engine's next poll.
        runners: queue({ connection: redis.url, queueName, languages: ['wasm'], pollMs: 5_000 }),
        timeoutMs: 10_000,
        cache: false,
      });
      registry.register(SLOW);
      try {
        workers = await startWorkers(1, {
          IMPROV_EXTFN_REDIS_URL: redis.url,
          QUEUE_NAME: queueName,
          QUEUE_LANGUAGES: 'wasm',
          QUEUE_LOG_ERRORS: '1',
        });
        const worker = workers[0]!;
        const batch = registry.evalBatch('slow', [[Value.number(7)]]);
        await waitFor(() => worker.chunks('start').length > 0);
        // The node the engine and the host talk to becomes a replica (of a primary not there).
        await admin.replicaof('127.0.0.1', 1);
        const hang = new Promise<'hang'>((resolve) => setTimeout(() => resolve('hang'), 15_000));
        const rows = await Promise.race([batch, hang]);
        expect(rows).not.toBe('hang');
        const [row] = rows as unknown[];
        expect(ExtFnError.isInstance(row), String(row)).toBe(true);
        const e = row as ExtFnError;
        expect(e.kind).toBe('Runtime');
        expect(e.message).toMatch(
          new RegExp(`^function slow: Redis at ${redis.url} refused reading job states: READONLY `),
        );
        expect(e.fix).toMatch(/the primary/);

        // The host: which chunk's result was refused, and the fix; its other refusals readable too.
        await waitFor(() => worker.chunks('failed').length > 0);
        const [failed] = worker.chunks('failed');
        expect(failed!.reason).toMatch(
          new RegExp(
            `^Redis at ${redis.url} refused handing in the result of chunk ${failed!.jobId}: READONLY You can't write against a read only replica\\.; point connection .* at the primary`,
          ),
        );
        expect(failed!.reason).not.toMatch(/user_script/);
        const errors = () => worker.events.filter((event) => event.event === 'error');
        // the worker's blocking read, cut short when the node turned replica
        await waitFor(() => errors().some((event) => /UNBLOCKED/.test(event.reason ?? '')));
        for (const event of errors().filter((event) =>
          /READONLY|UNBLOCKED/.test(event.reason ?? ''),
        )) {
          expect(event.reason).toMatch(
            new RegExp(`^Redis at ${redis.url} refused .*; point connection`),
          );
        }
        expect(worker.child.exitCode).toBeNull(); // alive, waiting for Redis to take writes
      } finally {
        await admin.replicaof('NO', 'ONE').catch(() => {});
        await registry.close();
        await Promise.all(workers.map((w) => w.stop()));
        admin.disconnect();
        await redis.stop();
      }
    }, 60_000);

    test('a transaction Redis discards (EXECABORT, as for a warm-up answer under OOM) reads as the refusal that caused it', async () => {
      const redis = await TestRedis.start();
      const admin = new Redis(redis.url);
      try {
        await admin.config('SET', 'maxmemory-policy', 'noeviction');
        await admin.config('SET', 'maxmemory', '1');
        // what a worker host does to answer a warm-up (worker.ts)
        const error = await admin
          .multi()
          .rpush('bull:q:warm:1', '{}')
          .expire('bull:q:warm:1', 60)
          .exec()
          .catch((e: unknown) => e);
        expect(String(error)).toMatch(/EXECABORT/);
        const refusal = redisRefusal(error, redis.url, 'bull:q', 'then carry on');
        expect(refusal?.code).toBe('OOM');
        expect(refusal?.said('answering a warm-up')).toMatch(
          new RegExp(`^Redis at ${redis.url} refused answering a warm-up: OOM command not allowed`),
        );
        expect(refusal?.fix).toContain('raise maxmemory');
      } finally {
        await admin.config('SET', 'maxmemory', '0').catch(() => {});
        admin.disconnect();
        await redis.stop();
      }
    });

    test('WRONGTYPE on the descriptors key someone else wrote: the chunk fails for good at once, saying what Redis refused and the fix', async () => {
      const redis = await TestRedis.start();
      const queueName = freshQueueName();
      const admin = new Redis(redis.url);
      const { hostname, port } = new URL(redis.url);
      const jobs = new Queue(`${queueName}-wasm`, {
        connection: { host: hostname, port: Number(port) },
      });
      let workers: WorkerProcess[] = [];
      try {
        workers = await startWorkers(1, {
          IMPROV_EXTFN_REDIS_URL: redis.url,
          QUEUE_NAME: queueName,
          QUEUE_LANGUAGES: 'wasm',
        });
        // Written after the engine stored the descriptor, before the host read it.
        await admin.set(`bull:${queueName}:descriptors`, 'not a hash');
        const job = await jobs.add(
          'chunk',
          {
            v: WIRE_VERSION,
            digest: descriptorDigest(DOUBLE),
            rows: 1,
            args: encodeNumberColumns([new Float64Array([1])], 0, 1).toString('base64'),
            timeoutMs: 1_000,
          },
          { attempts: 3 },
        );
        await waitFor(() => workers[0]!.chunks('failed').length > 0);
        const [failed] = workers[0]!.chunks('failed');
        expect(failed!.reason).toMatch(
          new RegExp(
            `^improv-extfn worker refused the job: Redis at ${redis.url} refused reading the descriptor: WRONGTYPE .*; a key under bull: on ${redis.url} holds something the queue did not write`,
          ),
        );
        const stored = await jobs.getJob(job.id!);
        expect(stored!.attemptsMade).toBe(1); // not retried: waiting does not end it
        expect(stored!.failedReason).toBe(failed!.reason);
      } finally {
        await jobs.close();
        await Promise.all(workers.map((w) => w.stop()));
        admin.disconnect();
        await redis.stop();
      }
    }, 60_000);
  },
);
