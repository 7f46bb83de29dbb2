/**
 * What a worker accepts from a job, tried for real against a worker process
 * with a control each time: a job cannot choose a sandbox policy, name a
 * file or a command, swap its descriptor for another, or send a function of
 * a language to another language's queue; the host's policy applies.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type ExternalFn, ExtFnError, Registry } from '@improv/extfn-core';
import { python } from '@improv/extfn-python';
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
  noSandbox,
  PYTHON,
  pythonOk,
  redisForTest,
  startWorkers,
  type WorkerProcess,
} from './helpers.js';

describe.skipIf(!hasRedis)(
  `a worker validates every job (${hasRedis ? 'wasm worker' : noRedis})`,
  () => {
    let redis: Awaited<ReturnType<typeof redisForTest>>;
    let workers: WorkerProcess[] = [];
    let plain: Redis;
    let jobs: Queue;
    let events: QueueEvents;
    const queueName = freshQueueName();
    let sequence = 0;

    beforeAll(async () => {
      redis = await redisForTest();
      workers = await startWorkers(1, {
        IMPROV_EXTFN_REDIS_URL: redis.url,
        QUEUE_NAME: queueName,
        QUEUE_LANGUAGES: 'wasm',
      });
      const connection = { host: '127.0.0.1', port: Number(new URL(redis.url).port) };
      plain = new Redis(connection);
      jobs = new Queue(languageQueueName(queueName, 'wasm'), { connection });
      events = new QueueEvents(languageQueueName(queueName, 'wasm'), { connection });
      await events.waitUntilReady();
    }, 60_000);

    afterAll(async () => {
      await events?.close();
      await jobs?.close();
      plain?.disconnect();
      await Promise.all(workers.map((w) => w.stop()));
      await redis?.stop();
    });

    async function publish(fn: ExternalFn, digest = descriptorDigest(fn)): Promise<string> {
      await plain.hset(descriptorKey('bull', queueName), digest, JSON.stringify(fn));
      return digest;
    }

    /** Adds a raw job and resolves to its outcome: the worker's result, or its failure reason. */
    async function run(
      data: Record<string, unknown>,
    ): Promise<{ ok: boolean; reason?: string; result?: unknown }> {
      const job: Job = await jobs.add('chunk', data, { jobId: `raw-${++sequence}`, attempts: 1 });
      try {
        return { ok: true, result: await job.waitUntilFinished(events, 20_000) };
      } catch (error) {
        return { ok: false, reason: (error as Error).message };
      }
    }

    const goodJob = async (fn = DOUBLE) => ({
      v: WIRE_VERSION,
      digest: await publish(fn),
      rows: 2,
      args: encodeRows(
        ['number'],
        [[{ type: 'number', value: 1 }], [{ type: 'number', value: 2 }]],
      ).toString('base64'),
      timeoutMs: 5_000,
    });

    test('control: a well-formed job is evaluated', async () => {
      const outcome = await run(await goodJob());
      expect(outcome.ok).toBe(true);
      expect(outcome.result).toMatchObject({ v: WIRE_VERSION, errors: [] });
    });

    test('a job that asks for a sandbox policy is refused, not obeyed', async () => {
      const outcome = await run({ ...(await goodJob()), policy: 'trusted' });
      expect(outcome.ok).toBe(false);
      expect(outcome.reason).toMatch(/refused the job: invalid job data/);
      expect(outcome.reason).toMatch(/policy/);
    });

    test('a job that names an interpreter or a file is refused', async () => {
      for (const extra of [
        { interpreter: '/bin/sh' },
        { driver: '/tmp/evil.py' },
        { env: { IMPROV_EXTFN_TRUSTED: '1' } },
      ]) {
        const outcome = await run({ ...(await goodJob()), ...extra });
        expect(outcome.ok, JSON.stringify(extra)).toBe(false);
        expect(outcome.reason).toMatch(/refused the job: invalid job data/);
      }
    });

    test('a descriptor stored under another digest is refused', async () => {
      // A digest no worker has cached yet, with another body stored behind it.
      const claimed = { ...DOUBLE, name: 'claimed' };
      const swapped = { ...claimed, body: DOUBLE.body.replace('f64.add', 'f64.mul') };
      const job = {
        ...(await goodJob()),
        digest: await publish(swapped, descriptorDigest(claimed)),
      };
      const outcome = await run(job);
      expect(outcome.ok).toBe(false);
      expect(outcome.reason).toMatch(/does not match its digest/);
    });

    test('the body travels once per digest: jobs carry only the digest, and workers cache the descriptor', async () => {
      const fn = { ...DOUBLE, name: 'cached' };
      const registry = new Registry({
        runners: queue({ connection: redis.url, queueName, languages: ['wasm'], chunkRows: 2 }),
      });
      try {
        registry.register(fn);
        const rows = [1, 2, 3, 4, 5].map((x) => [{ type: 'number' as const, value: x }]);
        await registry.evalBatch('cached', rows);
        const completed = await jobs.getJobs(['completed']);
        const mine = completed.filter((job) => job.data.digest === descriptorDigest(fn));
        expect(mine).toHaveLength(3);
        for (const job of mine)
          expect(Object.keys(job.data).sort()).toEqual([
            'args',
            'digest',
            'rows',
            'timeoutMs',
            'v',
          ]);
        // The stored descriptor is gone; a worker that already has it still serves the digest.
        await plain.hdel(descriptorKey('bull', queueName), descriptorDigest(fn));
        const outcome = await run({ ...(await goodJob()), digest: descriptorDigest(fn) });
        expect(outcome.ok).toBe(true);
      } finally {
        await registry.close();
      }
    });

    test('a function of another language sent to this queue is refused', async () => {
      const outcome = await run(
        await goodJob({ ...DOUBLE, language: 'python', body: 'result = 1' }),
      );
      expect(outcome.ok).toBe(false);
      expect(outcome.reason).toMatch(/asks for language python on the wasm queue/);
    });

    test('a frame that does not fit the declared types is refused with the reason', async () => {
      const outcome = await run({ ...(await goodJob()), rows: 3 });
      expect(outcome.ok).toBe(false);
      expect(outcome.reason).toMatch(/number columns of 3 rows need 24 bytes, got 16/);
    });
  },
);

describe.skipIf(!hasRedis || !pythonOk)(
  `the worker host's sandbox policy applies (${hasRedis ? (pythonOk ? 'python' : noSandbox) : noRedis})`,
  () => {
    test('a body reading a host file fails through the queue (Restricted), and reads it under a trusted local runner (control)', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'extfn-queue-secret-'));
      const secret = join(dir, 'secret.txt');
      writeFileSync(secret, 'host secret');
      const redis = await redisForTest();
      const queueName = freshQueueName();
      // The worker's environment says nothing about policy: Restricted, whatever the engine's says.
      const workers = await startWorkers(1, {
        IMPROV_EXTFN_REDIS_URL: redis.url,
        QUEUE_NAME: queueName,
      });
      const fn = {
        name: 'peek',
        language: 'python',
        body: `result = open(${JSON.stringify(secret)}).read()`,
        argTypes: [],
        returnType: 'text',
      } as const;
      const remote = new Registry({
        runners: queue({ connection: redis.url, queueName, languages: ['python'] }),
      });
      const control = new Registry({
        runners: [python({ interpreter: PYTHON, policy: 'trusted' })],
      });
      try {
        remote.register(fn);
        control.register(fn);
        expect(await control.eval('peek', [])).toEqual({ type: 'text', value: 'host secret' });
        const error = await remote.eval('peek', []).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(ExtFnError.isInstance(error) && error.kind).toBe('Runtime');
        expect((error as ExtFnError).message).toMatch(/No such file|FileNotFoundError|Permission/);
      } finally {
        await remote.close();
        await control.close();
        await Promise.all(workers.map((w) => w.stop()));
        await redis.stop();
        rmSync(dir, { recursive: true, force: true });
      }
    }, 60_000);
  },
);
