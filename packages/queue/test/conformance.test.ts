/**
 * The conformance kit against the queue runner, with a real worker process
 * behind it (Python under the Restricted sandbox, and Wasm): the kit's
 * per-row semantics hold through Redis and BullMQ.
 */
import { Value } from '@improv/extfn-core';
import { runnerConformanceSuite } from '@improv/extfn-core/testing';
import { afterAll, beforeAll, test } from 'vitest';
import { queue } from '../src/index.js';
import {
  freshQueueName,
  hasRedis,
  noRedis,
  noSandbox,
  pythonOk,
  redisForTest,
  startWorkers,
  type WorkerProcess,
} from './helpers.js';

const queueName = freshQueueName();
let url = '';
let stopRedis = async () => {};
let workers: WorkerProcess[] = [];
const languages = pythonOk ? 'python,wasm' : 'wasm';

beforeAll(async () => {
  if (!hasRedis) return;
  const redis = await redisForTest();
  url = redis.url;
  stopRedis = redis.stop;
  workers = await startWorkers(1, {
    IMPROV_EXTFN_REDIS_URL: url,
    QUEUE_NAME: queueName,
    QUEUE_LANGUAGES: languages,
  });
}, 60_000);

afterAll(async () => {
  await Promise.all(workers.map((w) => w.stop()));
  await stopRedis();
});

const through = (language: string) => () =>
  queue({ connection: url, queueName, languages: [language], pollMs: 200 })[0]!;

runnerConformanceSuite(test.skipIf(!hasRedis || !pythonOk), through('python'), {
  bodies: {
    identity: 'result = args[0]',
    add: 'result = args[0] + args[1]',
    raise: 'raise ValueError("nope")',
    noLoad: 'result = (',
    wrongReturn: 'result = "not a number"',
    loop: 'while True:\n    pass',
    largeResult: 'result = "x" * 200000',
    flood: 'for i in range(60000):\n    print("z" * 99)\nresult = 0',
    mixedBatch:
      'x = args[0]\nif x < 0:\n    raise ValueError("nope")\nwhile x == 13:\n    pass\nresult = 2 * x',
    remember:
      'global memory\ntry:\n    result = memory\nexcept NameError:\n    result = -1\nmemory = args[0]',
    random: 'import random\nresult = random.random()',
  },
  datetimeDigits: 9,
  verbatim: [
    {
      name: 'backslashes and triple quotes',
      body: String.raw`result = "C:\\dir\\file" + """ "b" '''"""`,
      returnType: 'text',
      expected: Value.text(`C:\\dir\\file "b" '''`),
    },
    {
      name: 'CRLF and tabs',
      body: 'if True:\r\n\tx = "\t"\r\nresult = x',
      returnType: 'text',
      expected: Value.text('\t'),
    },
  ],
  prefix: hasRedis
    ? pythonOk
      ? 'queue → python worker conformance:'
      : `queue → python worker conformance (skipped: ${noSandbox}):`
    : `queue → python worker conformance (${noRedis}):`,
});

runnerConformanceSuite(test.skipIf(!hasRedis), through('wasm'), {
  types: ['number'],
  bodies: {
    identity: 'wat:(module (func (export "improv_call") (param f64) (result f64) local.get 0))',
    add: 'wat:(module (func (export "improv_call") (param f64 f64) (result f64) local.get 0 local.get 1 f64.add))',
    raise: `wat:(module
  (memory (export "memory") 1)
  (data (i32.const 16) "nope\\00")
  (global (export "improv_error") (mut i32) (i32.const 0))
  (func (export "improv_call") (result f64) i32.const 16 global.set 0 unreachable))`,
    wrongReturn: 'wat:(module (func (export "improv_call") (result i32) i32.const 1))',
    noLoad: 'wat:(module (func',
    loop: 'wat:(module (func (export "improv_call") (result f64) (loop $l (br $l)) f64.const 0))',
    // Fails with "nope" on a negative argument, loops forever on 13, else doubles.
    mixedBatch: `wat:(module
  (memory (export "memory") 1)
  (data (i32.const 16) "nope\\00")
  (global (export "improv_error") (mut i32) (i32.const 0))
  (func (export "improv_call") (param f64) (result f64)
    local.get 0 f64.const 0 f64.lt (if (then i32.const 16 global.set 0 unreachable))
    (loop $spin local.get 0 f64.const 13 f64.eq br_if $spin)
    local.get 0 local.get 0 f64.add))`,
  },
  verbatim: [
    {
      name: 'CRLF and non-ASCII comments in WAT',
      body: 'wat:(module ;; résumé 𝄞\r\n\t(func (export "improv_call") (result f64) f64.const 42.5))',
      returnType: 'number',
      expected: Value.number(42.5),
    },
  ],
  prefix: hasRedis
    ? 'queue → wasm worker conformance:'
    : `queue → wasm worker conformance (${noRedis}):`,
});
