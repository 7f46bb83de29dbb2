// Benchmark of the queue path, against dist/. Run: pnpm bench
// Starts its own redis-server on a free loopback port and real worker
// processes (test/fixtures/worker.mjs), then measures, side by side with the
// local runner in the same run:
//   - a chunk's round trip: eval of a one-row function, sequentially, median;
//   - overhead per chunk: the round trip minus the local eval of the same call;
//   - rows per second of evalColumns and evalBatch with one and two worker
//     processes (each evaluating one chunk at a time), and locally.
// Functions: Python `result = args[0] * 2 + args[1]` (Restricted sandbox when
// available) and the same in Wasm.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Registry, Value } from '@improv/extfn-core';
import { python } from '@improv/extfn-python';
import { wasm } from '@improv/extfn-wasm';
import { queue } from '../dist/index.js';

const ROWS = Number(process.env.BENCH_ROWS ?? 100_000);
// Rows per job: the queue's default sizing unless BENCH_CHUNK_ROWS says otherwise.
const CHUNK_ROWS = process.env.BENCH_CHUNK_ROWS ? Number(process.env.BENCH_CHUNK_ROWS) : undefined;
const WORKER_CONCURRENCY = process.env.BENCH_WORKER_CONCURRENCY ?? '2';
const ROUND_TRIPS = Number(process.env.BENCH_ROUND_TRIPS ?? 200);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const PYTHON = process.env.IMPROV_EXTFN_PYTHON ?? '/usr/bin/python3';
const here = import.meta.dirname;

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const rate = (rows, ms) => `${((rows / ms) * 1000).toFixed(0).padStart(9)} rows/s`;
const ms = (x) => `${x.toFixed(2)} ms`;

async function freePort() {
  return new Promise((resolve) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

async function startRedis() {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'extfn-queue-bench-'));
  const child = spawn('redis-server', [
    '--port',
    String(port),
    '--bind',
    '127.0.0.1',
    '--save',
    '',
    '--appendonly',
    'no',
    '--dir',
    dir,
  ]);
  await new Promise((resolve) =>
    child.stdout.on('data', (d) => d.toString().includes('Ready to accept') && resolve()),
  );
  return {
    url: `redis://127.0.0.1:${port}`,
    stop: () => {
      child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function startWorker(url, queueName, languages) {
  const child = spawn(process.execPath, [join(here, '..', 'test', 'fixtures', 'worker.mjs')], {
    cwd: join(here, '..'),
    env: {
      ...process.env,
      IMPROV_EXTFN_PYTHON: PYTHON,
      IMPROV_EXTFN_REDIS_URL: url,
      QUEUE_NAME: queueName,
      QUEUE_LANGUAGES: languages,
      QUEUE_CONCURRENCY: WORKER_CONCURRENCY,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const ready = new Promise((resolve) =>
    child.stdout.on('data', (d) => d.toString().includes('"ready"') && resolve()),
  );
  return { ready, stop: () => child.kill('SIGTERM') };
}

const FNS = {
  python: { language: 'python', body: 'result = args[0] * 2 + args[1]' },
  wasm: {
    language: 'wasm',
    body: 'wat:(module (func (export "improv_call") (param f64 f64) (result f64) local.get 0 f64.const 2 f64.mul local.get 1 f64.add))',
  },
};

function register(registry, name) {
  registry.register({ name, ...FNS[name], argTypes: ['number', 'number'], returnType: 'number' });
}

async function measure(registry, name) {
  const a = Float64Array.from({ length: ROWS }, (_, i) => i);
  const b = Float64Array.from({ length: ROWS }, (_, i) => i / 2);
  const rows = Array.from(a, (x, i) => [Value.number(x), Value.number(b[i])]);
  // Warm up every worker process (and its interpreters) with a full pass first.
  await registry.evalColumns(name, [a, b]);
  await registry.evalBatch(name, rows);
  // Best of RUNS: the machine is shared, and the best run is the least disturbed one.
  let columnsMs = Number.POSITIVE_INFINITY;
  let batchMs = Number.POSITIVE_INFINITY;
  for (let run = 0; run < RUNS; run++) {
    let t = performance.now();
    const columns = await registry.evalColumns(name, [a, b]);
    columnsMs = Math.min(columnsMs, performance.now() - t);
    if (columns.errors.size) throw new Error(`${name}: ${[...columns.errors.values()][0].message}`);
    t = performance.now();
    await registry.evalBatch(name, rows);
    batchMs = Math.min(batchMs, performance.now() - t);
  }
  const trips = [];
  for (let i = 0; i < ROUND_TRIPS; i++) {
    const start = performance.now();
    await registry.eval(name, [Value.number(i), Value.number(1)]);
    trips.push(performance.now() - start);
  }
  return { columnsMs, batchMs, tripMs: median(trips) };
}

const redis = await startRedis();
const results = {};
try {
  for (const name of Object.keys(FNS)) {
    const local = new Registry({
      runners: [name === 'python' ? python({ interpreter: PYTHON }) : wasm()],
      cache: false,
    });
    register(local, name);
    results[name] = { local: await measure(local, name) };
    await local.close();
    for (const count of [1, 2]) {
      const queueName = `bench-${name}-${count}`;
      const workers = Array.from({ length: count }, () => startWorker(redis.url, queueName, name));
      await Promise.all(workers.map((w) => w.ready));
      const remote = new Registry({
        runners: queue({
          connection: redis.url,
          queueName,
          languages: [name],
          chunkRows: CHUNK_ROWS,
        }),
        cache: false,
      });
      register(remote, name);
      results[name][`${count} worker${count > 1 ? 's' : ''}`] = await measure(remote, name);
      await remote.close();
      for (const w of workers) w.stop();
    }
  }
} finally {
  redis.stop();
}

console.log(
  `queue vs local: ${ROWS} rows, ${CHUNK_ROWS ?? 'default (about 32 chunks per batch)'} rows per chunk, ${WORKER_CONCURRENCY} chunks at once per worker process, ${ROUND_TRIPS} one-row round trips (median), best of ${RUNS} runs`,
);
for (const [name, paths] of Object.entries(results)) {
  console.log(`\n${name}`);
  for (const [path, r] of Object.entries(paths)) {
    console.log(
      `  ${path.padEnd(10)} evalColumns ${rate(ROWS, r.columnsMs)}   evalBatch ${rate(ROWS, r.batchMs)}   one-row round trip ${ms(r.tripMs)}`,
    );
  }
  const overhead = paths['1 worker'].tripMs - paths.local.tripMs;
  console.log(
    `  overhead per chunk (round trip through Redis minus the local call): ${ms(overhead)}`,
  );
}
process.exit(0);
