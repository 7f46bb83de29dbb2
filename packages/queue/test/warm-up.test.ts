/**
 * `Registry.warmUp` through the queue: the engine asks every worker host on
 * its queue (pub/sub), each warms the function with its own runner and
 * answers; the entry is warm once a host has it ready, carries the calls'
 * error when the body cannot load, and gives a reason when no host listens
 * or serves the language. A malformed request is ignored, the host serves on.
 */
import { ExtFnError, Registry, Value } from '@improv/extfn-core';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { queue, WIRE_VERSION, warmChannel } from '../src/index.js';
import {
  descendantNames,
  freshQueueName,
  hasRedis,
  noRedis,
  noSandbox,
  pythonOk,
  redisForTest,
  startWorkers,
  type WorkerProcess,
  waitFor,
} from './helpers.js';

const ready = hasRedis && pythonOk && process.platform === 'linux';
const why = hasRedis ? noSandbox : noRedis;

const ADD_ONE = {
  name: 'addOne',
  language: 'python',
  body: 'result = args[0] + 1',
  argTypes: ['number'],
  returnType: 'number',
} as const;

describe.skipIf(!ready)(`warm-up across worker hosts (${ready ? 'python' : why})`, () => {
  let redis: Awaited<ReturnType<typeof redisForTest>>;
  let queueName: string;
  let workers: WorkerProcess[];
  const registries: Registry[] = [];
  const registry = (languages: string[], name = queueName) => {
    const made = new Registry({
      runners: queue({ connection: redis.url, queueName: name, languages, pollMs: 200 }),
      cache: false,
    });
    registries.push(made);
    return made;
  };

  beforeAll(async () => {
    redis = await redisForTest();
    queueName = freshQueueName();
    workers = await startWorkers(2, {
      IMPROV_EXTFN_REDIS_URL: redis.url,
      QUEUE_NAME: queueName,
      QUEUE_LANGUAGES: 'python',
    });
  });
  afterAll(async () => {
    await Promise.all(registries.map((r) => r.close()));
    await Promise.all((workers ?? []).map((w) => w.stop()));
    await redis?.stop();
  });

  const pythonsUnder = (worker: WorkerProcess) =>
    descendantNames(worker.pid).filter((name) => name.startsWith('python'));

  test('every host warms the function before any row: an interpreter runs on each', async () => {
    for (const worker of workers) expect(pythonsUnder(worker)).toEqual([]);
    const engine = registry(['python']);
    engine.register(ADD_ONE);
    expect(await engine.warmUp()).toEqual([{ name: 'addOne', warm: true }]);
    for (const worker of workers) {
      expect(await waitFor(() => worker.events.some((e) => e.event === 'warm'))).toBe(true);
      expect(worker.events.filter((e) => e.event === 'warm')).toMatchObject([
        { name: 'addOne', outcome: 'warm' },
      ]);
      expect(worker.chunks('start')).toEqual([]);
      expect(pythonsUnder(worker).length).toBeGreaterThan(0);
    }
    const results = await engine.evalBatch('addOne', [[Value.number(1)], [Value.number(41)]]);
    expect(results).toEqual([Value.number(2), Value.number(42)]);
  });

  test('a body that cannot load: the entry carries the error its calls get', async () => {
    const engine = registry(['python']);
    engine.register({ ...ADD_ONE, name: 'broken', body: 'result = (' });
    const [entry] = await engine.warmUp(['broken']);
    expect(entry!.warm).toBe(false);
    const call = await engine.eval('broken', [Value.number(1)]).catch((error) => error);
    expect(ExtFnError.isInstance(call)).toBe(true);
    expect(entry!.error?.kind).toBe(call.kind);
    expect(entry!.error?.message).toBe(call.message);
    expect(entry!.error?.functionName).toBe('broken');
  });

  test('no host serving the language, or none listening: a reason, not an error', async () => {
    const other = registry(['r']);
    other.register({ ...ADD_ONE, name: 'inR', language: 'r', body: 'args[[1]] + 1' });
    expect(await other.warmUp()).toEqual([
      { name: 'inR', warm: false, reason: `no worker host on queue ${queueName} serves r` },
    ]);
    const empty = freshQueueName();
    const nobody = registry(['python'], empty);
    nobody.register(ADD_ONE);
    expect(await nobody.warmUp()).toEqual([
      { name: 'addOne', warm: false, reason: `no worker host listens on queue ${empty}` },
    ]);
  });

  test('malformed warm-up requests are ignored; the hosts answer the next one and serve rows', async () => {
    const publisher = new Redis(redis.url);
    try {
      const channel = warmChannel('bull', queueName);
      const digest = 'A'.repeat(43);
      for (const message of [
        'not json',
        JSON.stringify({ v: WIRE_VERSION, digest, id: 'x', timeoutMs: 1000, policy: 'trusted' }),
        JSON.stringify({ v: WIRE_VERSION, digest: '../etc', id: 'x', timeoutMs: 1000 }),
        JSON.stringify({ v: WIRE_VERSION, digest, id: 'a:b', timeoutMs: 1000 }),
        JSON.stringify({ v: 99, digest, id: 'x', timeoutMs: 1000 }),
      ]) {
        expect(await publisher.publish(channel, message)).toBe(workers.length);
      }
      // a well-formed request for a digest nobody stored: each host answers why
      const before = workers.map((w) => w.events.length);
      await publisher.publish(
        channel,
        JSON.stringify({ v: WIRE_VERSION, digest, id: 'missing', timeoutMs: 1000 }),
      );
      for (const [k, worker] of workers.entries()) {
        expect(
          await waitFor(() => worker.events.slice(before[k]).some((e) => e.event === 'warm')),
        ).toBe(true);
        expect(worker.events.slice(before[k]).filter((e) => e.event === 'warm')).toMatchObject([
          { outcome: 'reason', reason: expect.stringContaining('descriptor not found') },
        ]);
      }
    } finally {
      publisher.disconnect();
    }
    const engine = registry(['python']);
    engine.register({ ...ADD_ONE, name: 'again' });
    expect(await engine.warmUp()).toEqual([{ name: 'again', warm: true }]);
    expect(await engine.eval('again', [Value.number(2)])).toEqual(Value.number(3));
    for (const worker of workers) expect(worker.child.exitCode).toBeNull();
  });
});
