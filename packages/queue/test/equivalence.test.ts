/**
 * Results through the queue equal local evalBatch/evalColumns on mixed rows
 * (values, raising rows, a hanging row, wrong types) for Python, R and Wasm,
 * with worker hosts as real processes; and two workers share one refresh.
 */
import {
  type ExternalFn,
  ExtFnError,
  type LanguageRunner,
  Registry,
  type RowResult,
  sameValue,
  Value,
} from '@improv/extfn-core';
import { python } from '@improv/extfn-python';
import { r } from '@improv/extfn-r';
import { wasm } from '@improv/extfn-wasm';
import { Queue } from 'bullmq';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { languageQueueName, queue } from '../src/index.js';
import {
  freshQueueName,
  hasRedis,
  noRedis,
  noSandbox,
  PYTHON,
  pythonOk,
  redisForTest,
  rOk,
  startWorkers,
  type WorkerProcess,
  waitFor,
} from './helpers.js';

const MIXED: Record<string, string> = {
  python:
    'x = args[0]\nif x < 0:\n    raise ValueError("nope")\nwhile x == 13:\n    pass\nresult = 2 * x',
  r: 'x <- args[[1]]\nif (x < 0) stop("nope")\nwhile (x == 13) {}\nresult <- 2 * x',
  wasm: `wat:(module (func (export "improv_call") (param f64) (result f64)
    local.get 0 f64.const 0 f64.lt (if (then unreachable))
    (loop $spin local.get 0 f64.const 13 f64.eq br_if $spin)
    local.get 0 local.get 0 f64.add))`,
};
/** Every argument type in, a text out: the columnar form carries each type both ways. */
const DESCRIBE: Record<string, string> = {
  python:
    'b, t, d, e = args\nif t == "boom":\n    raise ValueError("boom")\nresult = f"{b}|{t}|{d.isoformat()}|{e}|{len(t)}"',
  r: 'if (args[[2]] == "boom") stop("boom")\nresult <- paste(args[[1]], args[[2]], format(args[[3]], "%Y-%m-%dT%H:%M:%S", tz = "UTC"), args[[4]], nchar(args[[2]]), sep = "|")',
};
/** The wrong return type on some rows. */
const WRONG: Record<string, string> = {
  python: 'result = "text" if args[0] > 5 else args[0]',
  r: 'result <- if (args[[1]] > 5) "text" else args[[1]]',
};

const DOUBLE_WASM = {
  language: 'wasm',
  body: 'wat:(module (func (export "improv_call") (param f64) (result f64) local.get 0 local.get 0 f64.add))',
  argTypes: ['number' as const],
  returnType: 'number' as const,
};

const languages = [...(pythonOk ? ['python'] : []), ...(rOk ? ['r'] : []), 'wasm'] as const;

function localRunner(language: string): LanguageRunner {
  if (language === 'python') return python({ interpreter: PYTHON });
  if (language === 'r') return r();
  return wasm();
}

function expectSameRows(got: RowResult[], want: RowResult[]): void {
  expect(got.length).toBe(want.length);
  for (let i = 0; i < want.length; i++) {
    const a = got[i]!;
    const b = want[i]!;
    if (ExtFnError.isInstance(b)) {
      expect(
        ExtFnError.isInstance(a),
        `row ${i}: expected ${b.message}, got ${JSON.stringify(a)}`,
      ).toBe(true);
      expect({ kind: (a as ExtFnError).kind, message: (a as ExtFnError).message }).toEqual({
        kind: b.kind,
        message: b.message,
      });
    } else {
      expect(ExtFnError.isInstance(a) ? a.message : sameValue(a, b as Value), `row ${i}`).toBe(
        true,
      );
    }
  }
}

function register(registry: Registry, fn: ExternalFn): void {
  registry.register(fn);
}

describe.skipIf(!hasRedis)(
  `queue results equal local results (${hasRedis ? 'Redis' : noRedis})`,
  () => {
    let redis: Awaited<ReturnType<typeof redisForTest>>;
    let workers: WorkerProcess[] = [];
    let remote: Registry;
    let local: Registry;
    const queueName = freshQueueName();

    beforeAll(async () => {
      redis = await redisForTest();
      workers = await startWorkers(1, {
        IMPROV_EXTFN_REDIS_URL: redis.url,
        QUEUE_NAME: queueName,
        QUEUE_LANGUAGES: languages.join(','),
      });
      remote = new Registry({
        runners: queue({ connection: redis.url, queueName, languages, chunkRows: 7 }),
        timeoutMs: 10_000,
        cache: false,
      });
      local = new Registry({
        runners: languages.map(localRunner),
        timeoutMs: 10_000,
        cache: false,
      });
    }, 60_000);

    afterAll(async () => {
      await remote?.close();
      await local?.close();
      await Promise.all(workers.map((w) => w.stop()));
      await redis?.stop();
    });

    for (const language of languages) {
      test(`${language}: evalBatch and evalColumns over mixed rows (values, errors, a hanging row)`, async () => {
        const fn: ExternalFn = {
          name: `mixed_${language}`,
          language,
          body: MIXED[language]!,
          argTypes: ['number'],
          returnType: 'number',
          pure: false,
        };
        register(remote, fn);
        register(local, fn);
        const xs = [
          1,
          -1,
          13,
          2,
          Number.NaN,
          -0,
          1e300,
          3.5,
          ...Array.from({ length: 30 }, (_, i) => i - 5),
        ];
        const rows = xs.map((x) => [Value.number(x)]);
        const options = { timeoutMs: 1_500 };
        const [want, got] = await Promise.all([
          local.evalBatch(fn.name, rows, options),
          remote.evalBatch(fn.name, rows, options),
        ]);
        expect(ExtFnError.isInstance(want[2]) && want[2].kind).toBe('Timeout');
        expect(ExtFnError.isInstance(want[1]) && want[1].kind).toBe('Runtime');
        expectSameRows(got, want);

        const column = Float64Array.from(xs);
        const [wantColumns, gotColumns] = await Promise.all([
          local.evalColumns(fn.name, [column], options),
          remote.evalColumns(fn.name, [column], options),
        ]);
        expect([...gotColumns.errors.keys()].sort()).toEqual([...wantColumns.errors.keys()].sort());
        for (const [row, error] of wantColumns.errors) {
          expect(gotColumns.errors.get(row)?.message).toBe(error.message);
          expect(gotColumns.errors.get(row)?.kind).toBe(error.kind);
        }
        expect(Array.from(gotColumns.values).map(String)).toEqual(
          Array.from(wantColumns.values).map(String),
        );
      }, 90_000);

      if (DESCRIBE[language]) {
        test(`${language}: every argument type and text results cross the queue unchanged`, async () => {
          const fn: ExternalFn = {
            name: `describe_${language}`,
            language,
            body: DESCRIBE[language]!,
            argTypes: ['boolean', 'text', 'datetime', 'enum'],
            returnType: 'text',
            pure: false,
          };
          register(remote, fn);
          register(local, fn);
          const texts = ['', 'plain', 'Résumé ✓ "q" \\', 'non-BMP 𝄞😀', 'boom', 'tab\tnew\nline'];
          const rows = texts.map((t, i) => [
            Value.boolean(i % 2 === 0),
            Value.text(t),
            Value.datetime(i % 2 ? '1969-07-20T20:17:40Z' : '2025-03-31T23:59:59Z'),
            Value.enum(i === 3 ? 4_294_967_295 : i),
          ]);
          const [want, got] = await Promise.all([
            local.evalBatch(fn.name, rows),
            remote.evalBatch(fn.name, rows),
          ]);
          expect(want.filter((row) => ExtFnError.isInstance(row))).toHaveLength(1);
          expectSameRows(got, want);
        }, 60_000);

        test(`${language}: a result of the wrong type fails that row only, as locally`, async () => {
          const fn: ExternalFn = {
            name: `wrong_${language}`,
            language,
            body: WRONG[language]!,
            argTypes: ['number'],
            returnType: 'number',
            pure: false,
          };
          register(remote, fn);
          register(local, fn);
          const rows = Array.from({ length: 10 }, (_, i) => [Value.number(i)]);
          const [want, got] = await Promise.all([
            local.evalBatch(fn.name, rows),
            remote.evalBatch(fn.name, rows),
          ]);
          expect(want.filter((row) => ExtFnError.isInstance(row))).toHaveLength(4);
          expectSameRows(got, want);
        }, 60_000);
      }
    }

    test(`Python and R are skipped here only when the sandbox cannot run them${pythonOk && rOk ? '' : ` (${noSandbox})`}`, () => {
      // Wasm always runs; this names what the list above left out, if anything.
      expect(languages).toContain('wasm');
    });
  },
);

describe.skipIf(!hasRedis || !pythonOk)(
  `two worker processes share a refresh (${hasRedis ? (pythonOk ? 'python' : noSandbox) : noRedis})`,
  () => {
    test('both workers take chunks and every row comes back right', async () => {
      const redis = await redisForTest();
      const queueName = freshQueueName();
      const workers = await startWorkers(2, {
        IMPROV_EXTFN_REDIS_URL: redis.url,
        QUEUE_NAME: queueName,
        QUEUE_CONCURRENCY: '1',
      });
      const registry = new Registry({
        runners: queue({ connection: redis.url, queueName, languages: ['python'], chunkRows: 5 }),
        cache: false,
      });
      try {
        registry.register({
          name: 'slow_square',
          language: 'python',
          body: 'import time\ntime.sleep(0.02)\nresult = args[0] * args[0]',
          argTypes: ['number'],
          returnType: 'number',
        });
        const rows = Array.from({ length: 120 }, (_, i) => [Value.number(i)]);
        const results = await registry.evalBatch('slow_square', rows);
        expect(results.map((r) => (r as { value: number }).value)).toEqual(
          rows.map((_, i) => i * i),
        );
        // A worker logs a chunk done on its stdout just before it hands the result to Redis,
        // but this process may read the result from Redis before the line from the pipe.
        const logged = () =>
          workers.map((w) => w.chunks('done').reduce((n, e) => n + (e.rows ?? 0), 0));
        await waitFor(() => logged()[0]! + logged()[1]! >= 120);
        const perWorker = logged();
        expect(perWorker[0]).toBeGreaterThan(0);
        expect(perWorker[1]).toBeGreaterThan(0);
        expect(perWorker[0]! + perWorker[1]!).toBe(120);
      } finally {
        await registry.close();
        await Promise.all(workers.map((w) => w.stop()));
        await redis.stop();
      }
    }, 90_000);
  },
);

describe.skipIf(!hasRedis)(
  `a huge refresh is held to a window in Redis (${hasRedis ? 'wasm' : noRedis})`,
  () => {
    test('at most maxQueuedChunks chunks of a batch are in Redis at once, and every row comes back', async () => {
      const redis = await redisForTest();
      const queueName = freshQueueName();
      const workers = await startWorkers(1, {
        IMPROV_EXTFN_REDIS_URL: redis.url,
        QUEUE_NAME: queueName,
        QUEUE_LANGUAGES: 'wasm',
        QUEUE_CONCURRENCY: '1',
      });
      const registry = new Registry({
        runners: queue({
          connection: redis.url,
          queueName,
          languages: ['wasm'],
          chunkRows: 3,
          maxQueuedChunks: 2,
        }),
      });
      const inspect = new Queue(languageQueueName(queueName, 'wasm'), {
        connection: { host: '127.0.0.1', port: Number(new URL(redis.url).port) },
      });
      try {
        registry.register({ ...DOUBLE_WASM, name: 'double' });
        let most = 0;
        let sampling = true;
        const sampler = (async () => {
          while (sampling) {
            const counts = await inspect.getJobCounts(
              'waiting',
              'active',
              'prioritized',
              'delayed',
            );
            most = Math.max(
              most,
              Object.values(counts).reduce((a, b) => a + b, 0),
            );
            await new Promise((resolve) => setTimeout(resolve, 2));
          }
        })();
        const rows = Array.from({ length: 90 }, (_, i) => [Value.number(i)]);
        const results = await registry.evalBatch('double', rows);
        sampling = false;
        await sampler;
        expect(results.map((r) => (r as { value: number }).value)).toEqual(
          rows.map((_, i) => 2 * i),
        );
        expect(most).toBeGreaterThan(0);
        expect(most).toBeLessThanOrEqual(2);
        await waitFor(() => workers[0]!.chunks('done').length >= 30); // the log may trail Redis
        expect(workers[0]!.chunks('done')).toHaveLength(30);
      } finally {
        await inspect.close();
        await registry.close();
        await Promise.all(workers.map((w) => w.stop()));
        await redis.stop();
      }
    }, 60_000);
  },
);
