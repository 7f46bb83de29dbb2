// Benchmark of the wasm runner (issues 6 and 7), against dist/. Run: pnpm bench
// Every figure is measured in this run; ratios compare to plain JavaScript over the same Value rows.
import { availableParallelism, loadavg } from 'node:os';
import { Worker } from 'node:worker_threads';
import { checkArguments, checkResult, Registry, Value } from '@improv/extfn-core';
import { machineCosts } from '../../../bench/peers/machine/costs.mjs';
import { packColumns } from '../dist/batch.js';
import { compileBody } from '../dist/compile.js';
import { wasm } from '../dist/index.js';

/** This day's machine (a page's first touch, a pipe round trip): README figures carry it. */
const MACHINE = machineCosts();

const ROWS = Number(process.env.BENCH_ROWS ?? 1_000_000);
const loadAtStart = loadavg();
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const BODY =
  'wat:(module (func (export "improv_call") (param f64) (result f64) local.get 0 local.get 0 f64.add))';
const fn = {
  name: 'double',
  language: 'wasm',
  body: BODY,
  argTypes: ['number'],
  returnType: 'number',
  pure: true,
};

const COMPILE_OPTIONS = {
  memoryPages: 256,
  tableElements: 65_536,
  reuseInstances: false,
  maxBodyBytes: 1_048_576,
  budgetBytes: 64 * 1_048_576,
};

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const quantile = (xs, q) =>
  [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * q))];
/**
 * Median, best and worst wall time of `runs` runs of `f` (after one warm-up), in ms.
 * The machine may be shared: the best run shows the code's own cost, the median what to
 * expect, the worst how much the load costs; the load average is printed beside them.
 */
async function time(f, runs = RUNS) {
  await f();
  const times = [];
  for (let i = 0; i < runs; i++) {
    const t = performance.now();
    await f();
    times.push(performance.now() - t);
  }
  return [median(times), Math.min(...times), Math.max(...times)];
}
const rate = (rows, ms) => (rows / ms) * 1000;
const fmtRate = (r) =>
  r >= 1e6
    ? `${(r / 1e6).toFixed(1)} M/s`
    : r >= 1e3
      ? `${(r / 1e3).toFixed(0)} k/s`
      : `${r.toFixed(0)} /s`;
const fmtMs = (ms) =>
  ms < 1
    ? `${(ms * 1000).toFixed(1)} µs`
    : ms < 10_000
      ? `${ms.toFixed(1)} ms`
      : ms < 3_600_000
        ? `${(ms / 1000).toFixed(0)} s`
        : `${(ms / 3_600_000).toFixed(1)} h`;

// Resident memory of the workers: the process before and after the pool starts (threads share the process).
const rssBefore = process.memoryUsage().rss;
const runner = wasm();
const registry = new Registry({ runners: [runner], cache: false });
registry.register(fn);
await registry.evalBatch(
  'double',
  Array.from({ length: 4_096 }, (_, i) => [Value.number(i)]),
);
const rssWorkers = process.memoryUsage().rss;
const workerCount = runner.stats().workersAlive;
const compileWorkerCount = runner.stats().compileWorkersAlive;

const rows = Array.from({ length: ROWS }, (_, i) => [Value.number(i)]);

// Baseline: the same function as plain JavaScript, over the same Value rows, giving Values.
const [jsMs, jsBest, jsWorst] = await time(() => {
  const out = new Array(ROWS);
  for (let i = 0; i < ROWS; i++) {
    const x = rows[i][0].value;
    out[i] = { type: 'number', value: x + x };
  }
  return out;
});

const [batchMs, batchBest, batchWorst] = await time(() => registry.evalBatch('double', rows));
const check = await registry.evalBatch('double', rows);
if (check[ROWS - 1].value !== 2 * (ROWS - 1)) throw new Error('wrong result');
const [runnerMs, runnerBest, runnerWorst] = await time(() =>
  runner.callBatch(registry.get('double'), rows, { timeoutMs: 5_000 }),
);
const column = Float64Array.from(rows, (r) => r[0].value);
const [columnsMs, columnsBest, columnsWorst] = await time(() =>
  runner.callColumns(registry.get('double'), [column], { timeoutMs: 5_000 }),
);
const [evalColumnsMs, evalColumnsBest, evalColumnsWorst] = await time(() =>
  registry.evalColumns('double', [column]),
);
// Core's own cost: the same evalBatch with a runner that answers instantly with precomputed Values.
const precomputed = check.slice();
const instant = {
  specificationVersion: 'v1',
  language: 'instant',
  packageName: 'none',
  capabilities: { isolated: false, warmWorkers: false, batch: true },
  probe: async () => ({ language: 'instant', available: true, detail: '' }),
  call: async () => precomputed[0],
  callBatch: async (_fn, batch) => precomputed.slice(0, batch.length),
};
const coreOnly = new Registry({ runners: [instant], cache: false });
coreOnly.register({ ...fn, language: 'instant' });
const [coreMs, coreBest, coreWorst] = await time(() => coreOnly.evalBatch('double', rows));

// Where the time goes: each stage alone.
const [checkMs, checkBest, checkWorst] = await time(() => {
  for (let i = 0; i < ROWS; i++) checkArguments(fn, rows[i]);
});
const resultValues = check;
const [checkResultMs, checkResultBest, checkResultWorst] = await time(() => {
  for (let i = 0; i < ROWS; i++) checkResult(fn, resultValues[i]);
});
const [packMs, packBest, packWorst] = await time(() => packColumns(rows, 1));
const [valuesMs, valuesBest, valuesWorst] = await time(() => {
  const out = new Float64Array(ROWS).fill(1);
  const results = new Array(ROWS);
  for (let i = 0; i < ROWS; i++) results[i] = { type: 'number', value: out[i] };
  return results;
});
// The worker loop alone: the driver over a prepared buffer, one thread, no Values.
const compiled = (await compileBody(BODY, COMPILE_OPTIONS)).value;
const progress = new Int32Array(new SharedArrayBuffer(4));
const worker = new Worker(new URL('../drivers/wasm-worker.mjs', import.meta.url), {
  workerData: { progress },
});
await new Promise((resolve) => worker.once('message', resolve));
const buffer = packColumns(rows, 1);
let id = 0;
const loop = (module) =>
  new Promise((resolve) => {
    worker.once('message', resolve);
    worker.postMessage({
      op: 'batch',
      id: ++id,
      key: 'k',
      module,
      stateful: false,
      fresh: false,
      arity: 1,
      rows: ROWS,
      start: 0,
      end: ROWS,
      buffer,
    });
  });
await loop(compiled.module);
const loopTimes = [];
for (let i = 0; i < RUNS; i++) loopTimes.push((await loop()).loopMs);
const loopMs = median(loopTimes);
const loopBest = Math.min(...loopTimes);
const loopWorst = Math.max(...loopTimes);
await worker.terminate();

// Warm sequential eval latency, and a 100 000-row batch.
const latencies = [];
for (let i = 0; i < 5_000; i++) {
  const t = performance.now();
  await registry.eval('double', [Value.number(i)]);
  latencies.push(performance.now() - t);
}
const small = rows.slice(0, 100_000);
const [smallMs, smallBest, smallWorst] = await time(() => registry.evalBatch('double', small));

// A one-shot worker per call (the wasm analogue of spawn-per-call), sampled.
const oneShot = [];
for (let i = 0; i < 20; i++) {
  const t = performance.now();
  await registry.eval('double', [Value.number(i)], { mode: 'oneShot' });
  oneShot.push(performance.now() - t);
}
const oneShotMs = median(oneShot);
const oneShotBest = Math.min(...oneShot);
const oneShotWorst = Math.max(...oneShot);

// New bodies: the runner compiles on a compile worker; the baseline is compileBody on the main thread,
// which is how it ran before. Each sample is a distinct body, so each is a real compile.
/** Wall time of f, and the longest gap between 1 ms ticks of the main thread meanwhile. */
async function stall(f) {
  let last = performance.now();
  let worst = 0;
  const ticker = setInterval(() => {
    const now = performance.now();
    worst = Math.max(worst, now - last);
    last = now;
  }, 1);
  const started = performance.now();
  await f();
  const ms = performance.now() - started;
  clearInterval(ticker);
  return [ms, Math.max(worst, performance.now() - last)];
}
const smallBody = (salt) =>
  `wat:(module (func (export "improv_call") (param f64) (result f64) local.get 0 local.get 0 f64.add f64.const ${salt} f64.add))`;
/** About 1 MB of WAT that is slow to assemble (float constants), just under the default cap. */
const bigBody = (salt) =>
  `wat:(module (func (export "improv_call") (param f64) (result f64) f64.const ${salt} drop ${'(drop (f64.const 1.2345678901234567e300)) '.repeat(24_000)}local.get 0))`;
const compileRows = [];
for (const [label, make, samples] of [
  ['new small body', smallBody, 10],
  ['new 1 MB body', bigBody, 3],
]) {
  const worker = [];
  const main = [];
  for (let i = 0; i < samples; i++) {
    const name = `new_${compileRows.length}_${i}`;
    registry.register({ ...fn, name, body: make(i + 0.5) });
    worker.push(await stall(() => registry.eval(name, [Value.number(1)])));
    main.push(await stall(() => compileBody(make(i + 1000.5), COMPILE_OPTIONS)));
  }
  compileRows.push([
    `${label}: compileBody on the main thread (before)`,
    median(main.map((m) => m[0])),
    Math.max(...main.map((m) => m[1])),
  ]);
  compileRows.push([
    `${label}: first eval, compiled on a compile worker`,
    median(worker.map((m) => m[0])),
    Math.max(...worker.map((m) => m[1])),
  ]);
}

await registry.close();
// Last, because it leaves a large heap: core's pure-result cache, cold (every row a miss, then stored).
// 200 000 rows: the cache fills (100 000 entries by default), then evicts one entry per row.
const CACHED_ROWS = 200_000;
const cached = new Registry({ runners: [wasm()] }); // default: pure-result cache on
cached.register(fn);
const cachedStart = performance.now();
await cached.evalBatch('double', rows.slice(0, CACHED_ROWS));
const cachedMs = performance.now() - cachedStart;
const cachedBest = cachedMs;
const cachedWorst = cachedMs;
await cached.close();

const table = [
  ['plain JavaScript loop over Value rows (baseline)', jsMs, jsBest, jsWorst, ROWS],
  ['registry.evalBatch, cache off', batchMs, batchBest, batchWorst, ROWS],
  [
    'registry.evalBatch, cache on, cold, 200 000 rows',
    cachedMs,
    cachedBest,
    cachedWorst,
    CACHED_ROWS,
  ],
  ['runner.callBatch (no registry)', runnerMs, runnerBest, runnerWorst, ROWS],
  [
    'registry.evalColumns (Float64Array in and out)',
    evalColumnsMs,
    evalColumnsBest,
    evalColumnsWorst,
    ROWS,
  ],
  ['runner.callColumns (Float64Array in and out)', columnsMs, columnsBest, columnsWorst, ROWS],
  ['  stage: core evalBatch with an instant runner', coreMs, coreBest, coreWorst, ROWS],
  ['  stage: core checkArguments per row', checkMs, checkBest, checkWorst, ROWS],
  ['  stage: core checkResult per row', checkResultMs, checkResultBest, checkResultWorst, ROWS],
  ['  stage: pack Value rows into f64 columns', packMs, packBest, packWorst, ROWS],
  ['  stage: worker loop calling the export (1 thread)', loopMs, loopBest, loopWorst, ROWS],
  ['  stage: make result Value objects', valuesMs, valuesBest, valuesWorst, ROWS],
  ['registry.evalBatch, 100 000 rows', smallMs, smallBest, smallWorst, small.length],
  [
    'one-shot worker per call (sampled, extrapolated)',
    oneShotMs * ROWS,
    oneShotBest * ROWS,
    oneShotWorst * ROWS,
    ROWS,
  ],
];
console.log(
  `\n@improv/extfn-wasm — ${ROWS.toLocaleString('en')} calls of x + x, ${availableParallelism()} cores, Node ${process.versions.node}, ${RUNS} runs each; load average ${loadAtStart.map((l) => l.toFixed(2)).join(' ')} at the start, ${loadavg()
    .map((l) => l.toFixed(2))
    .join(' ')} at the end`,
);
console.log(`machine, before the runs: ${MACHINE}\n`);
console.log(
  `${'path'.padEnd(52)}${'median'.padStart(10)}${'time ÷ JS'.padStart(11)}${'rows/s min'.padStart(12)}${'median'.padStart(11)}${'max'.padStart(11)}`,
);
for (const [name, ms, best, worst, n] of table) {
  const r = rate(n, ms);
  console.log(
    `${name.padEnd(52)}${fmtMs(ms).padStart(10)}${(rate(ROWS, jsMs) / r).toFixed(2).padStart(11)}${fmtRate(rate(n, worst)).padStart(12)}${fmtRate(r).padStart(11)}${fmtRate(rate(n, best)).padStart(11)}`,
  );
}
console.log(
  `\nwarm sequential eval: median ${fmtMs(median(latencies))}, p99 ${fmtMs(quantile(latencies, 0.99))} (5 000 calls); one-shot worker per call: median ${fmtMs(oneShotMs)}`,
);
console.log(
  `warm eval vs one-shot: ${(oneShotMs / median(latencies)).toFixed(0)}× faster; evalBatch vs one-shot: ${((oneShotMs * ROWS) / batchMs).toFixed(0)}× faster`,
);
console.log(
  `resident memory of ${workerCount} warm workers and ${compileWorkerCount} compile worker (wabt loaded): +${((rssWorkers - rssBefore) / 2 ** 20).toFixed(0)} MiB (${(rssBefore / 2 ** 20).toFixed(0)} → ${(rssWorkers / 2 ** 20).toFixed(0)} MiB; threads share the process)`,
);
console.log(
  `\n${'compiling a new body'.padEnd(60)}${'median'.padStart(10)}${'longest main-thread stall'.padStart(28)}`,
);
for (const [name, ms, worst] of compileRows) {
  console.log(`${name.padEnd(60)}${fmtMs(ms).padStart(10)}${fmtMs(worst).padStart(28)}`);
}
