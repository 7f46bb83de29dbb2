// Benchmark of the Python runner, against dist/. Run: pnpm bench
// `result = args[0] + args[1]` over ROWS rows, through a core Registry, side by
// side in one run: one-shot spawn per call (a sample, extrapolated), warm
// sequential eval, evalBatch over JSON frames and over binary f64 columns, and
// evalColumns (Float64Array columns in and out, no Value per cell) over both.
// Ratios are against spawn-per-call measured in this run.
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { Registry, Value } from '@improv/extfn-core';
import { encodeFrame, FrameReader } from '@improv/extfn-interpreter';
import { probeSandbox } from '@improv/extfn-sandbox';
import { machineCosts } from '../../../bench/peers/machine/costs.mjs';
import { DRIVER_SOURCE, PYTHON_ARGS, python } from '../dist/index.js';

/** This day's machine (a page's first touch, a pipe round trip): README figures carry it. */
const MACHINE = machineCosts();

const ROWS = Number(process.env.BENCH_ROWS ?? 100_000);
const ONE_SHOT_SAMPLE = Number(process.env.BENCH_ONE_SHOT ?? 20);
const WARM_CALLS = Number(process.env.BENCH_WARM ?? 20_000);
const RUNS = Number(process.env.BENCH_RUNS ?? 5);
const PYTHON = process.env.IMPROV_EXTFN_PYTHON ?? '/usr/bin/python3';
const BODY = 'result = args[0] + args[1]';

const probe = await probeSandbox({ policy: 'restricted' });
const policy = probe.ok ? 'restricted' : 'trusted';

const sorted = (xs) => [...xs].sort((a, b) => a - b);
const median = (xs) => sorted(xs)[Math.floor(xs.length / 2)];
const p99 = (xs) => sorted(xs)[Math.min(xs.length - 1, Math.floor(xs.length * 0.99))];
const fmtRate = (r) =>
  r >= 1e6
    ? `${(r / 1e6).toFixed(2)} M/s`
    : r >= 1e3
      ? `${(r / 1e3).toFixed(1)} k/s`
      : `${r.toFixed(1)} /s`;
const fmtMs = (ms) =>
  ms === undefined ? '—' : ms < 1 ? `${(ms * 1000).toFixed(1)} µs` : `${ms.toFixed(1)} ms`;
const fmtTotal = (ms) =>
  ms >= 60_000
    ? `${(ms / 60_000).toFixed(1)} min`
    : ms >= 1000
      ? `${(ms / 1000).toFixed(2)} s`
      : `${ms.toFixed(1)} ms`;

/** Resident memory of every process under the given host pids (the sandbox wrappers and the interpreters). */
function treeRss(roots) {
  const parent = new Map();
  const info = new Map();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const rss = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${entry}/status`, 'utf8'));
      parent.set(Number(entry), ppid);
      info.set(Number(entry), { comm, rssKb: rss ? Number(rss[1]) : 0 });
    } catch {}
  }
  const inTree = (pid) => {
    for (let p = pid; p > 1; p = parent.get(p) ?? 0) if (roots.includes(p)) return true;
    return false;
  };
  const out = [];
  for (const [pid, i] of info) if (inTree(pid)) out.push({ pid, ...i });
  return out;
}

const rowsFor = (n) => Array.from({ length: n }, (_, i) => [Value.number(i), Value.number(0.5)]);
const rows = rowsFor(ROWS);
const columns = [
  Float64Array.from({ length: ROWS }, (_, i) => i),
  new Float64Array(ROWS).fill(0.5),
];
const makeRegistry = (options = {}) => {
  const runner = python({ interpreter: PYTHON, policy, ...options });
  const registry = new Registry({ runners: [runner], cache: false, timeoutMs: 10_000 });
  registry.register({
    name: 'add',
    language: 'python',
    body: BODY,
    argTypes: ['number', 'number'],
    returnType: 'number',
    pure: true,
  });
  return { runner, registry };
};
const verify = (results) => {
  for (let i = 0; i < results.length; i += 997) {
    if (results[i].value !== i + 0.5)
      throw new Error(`row ${i}: wrong result ${JSON.stringify(results[i])}`);
  }
};
const verifyColumns = ({ values, errors }) => {
  if (errors.size > 0) throw new Error(`${errors.size} rows failed: ${[...errors.values()][0]}`);
  for (let i = 0; i < ROWS; i += 997) {
    if (values[i] !== i + 0.5) throw new Error(`row ${i}: wrong result ${values[i]}`);
  }
};
const table = [];

// 1. One-shot: a fresh sandboxed interpreter per call.
{
  const { registry } = makeRegistry();
  const times = [];
  for (let i = 0; i < ONE_SHOT_SAMPLE + 1; i++) {
    const t = performance.now();
    const v = await registry.eval('add', rows[i], { mode: 'oneShot' });
    if (i > 0) times.push(performance.now() - t);
    if (v.value !== i + 0.5) throw new Error('wrong one-shot result');
  }
  await registry.close();
  table.push({
    path: `one-shot spawn per call (${ONE_SHOT_SAMPLE} sampled)`,
    median: median(times),
    p99: p99(times),
    perRow: median(times),
    total: median(times) * ROWS,
  });
}
const spawnRate = 1000 / table[0].perRow;

// 2. Warm sequential eval.
let rss = [];
{
  const { registry, runner } = makeRegistry({ maxWorkers: 1 });
  for (let i = 0; i < 500; i++) await registry.eval('add', rows[i]); // warm-up
  const times = new Array(WARM_CALLS);
  const start = performance.now();
  for (let i = 0; i < WARM_CALLS; i++) {
    const t = performance.now();
    await registry.eval('add', rows[i % ROWS]);
    times[i] = performance.now() - t;
  }
  const elapsed = performance.now() - start;
  table.push({
    path: `warm sequential eval (${WARM_CALLS} calls)`,
    median: median(times),
    p99: p99(times),
    perRow: elapsed / WARM_CALLS,
    total: (elapsed / WARM_CALLS) * ROWS,
  });
  rss.push(...treeRss(runner.workerPids()));
  await registry.close();
}

// 3 and 4. evalBatch over JSON frames, then binary f64 columns; each also
// straight through runner.callBatch, to show what core's per-row checks cost,
// and evalColumns, which builds no Value at all.
const workers = availableParallelism();
for (const [label, options] of [
  ['JSON frames', { f64: false }],
  ['binary f64 columns', {}],
]) {
  const { registry, runner } = makeRegistry(options);
  verify(await registry.evalBatch('add', rows)); // warm-up: workers started, chunk size learnt
  const fn = registry.get('add');
  for (const [how, run, check] of [
    ['evalBatch', () => registry.evalBatch('add', rows), verify],
    ['runner.callBatch', () => runner.callBatch(fn, rows, { timeoutMs: 10_000 }), verify],
    ['evalColumns', () => registry.evalColumns('add', columns), verifyColumns],
  ]) {
    const times = [];
    for (let i = 0; i < RUNS; i++) {
      const t = performance.now();
      check(await run());
      times.push(performance.now() - t);
    }
    const ms = median(times);
    table.push({ path: `${how}, ${label} (${workers} workers)`, perRow: ms / ROWS, total: ms });
  }
  if (options.f64 === undefined) rss = treeRss(runner.workerPids());
  await registry.close();
}

// What bounds the batch figures: the driver alone, one process, no sandbox and no JS marshalling.
async function driverOnly(op) {
  const child = spawn(PYTHON, PYTHON_ARGS, {
    env: { PYTHONHASHSEED: '0' },
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const reader = new FrameReader(1 << 30);
  const frames = [];
  let wake;
  child.stdout.on('data', (d) => {
    frames.push(...reader.push(d));
    wake?.();
  });
  const next = async () => {
    while (frames.length === 0) await new Promise((r) => (wake = r));
    return frames.shift();
  };
  const source = Buffer.from(DRIVER_SOURCE);
  child.stdin.write(`${source.length}\n`);
  child.stdin.write(source);
  await next();
  child.stdin.write(
    encodeFrame({
      op: 'load',
      id: 1,
      fn: { name: 'add', body: BODY, argTypes: ['number', 'number'], returnType: 'number' },
    }),
  );
  await next();
  const times = [];
  if (op === 'one') {
    // one-row calls in sequence: what a warm `eval` costs without the sandbox, core and pool
    const one = encodeFrame({ op: 'call', id: 3, rows: [[1, 0.5]] });
    for (let k = 0; k < 500 + WARM_CALLS; k++) {
      const t = performance.now();
      child.stdin.write(one);
      await next();
      if (k >= 500) times.push(performance.now() - t);
    }
    child.kill();
    return times;
  }
  const n = ROWS;
  const json = encodeFrame({ op: 'call', id: 2, rows: rows.map((r) => [r[0].value, r[1].value]) });
  const columns = new Float64Array(2 * n);
  for (let i = 0; i < n; i++) {
    columns[i] = i;
    columns[n + i] = 0.5;
  }
  for (let k = 0; k < RUNS + 1; k++) {
    const t = performance.now();
    child.stdin.write(
      op === 'call'
        ? json
        : encodeFrame({ op: 'callf64', id: 2, rows: n }, new Uint8Array(columns.buffer)),
    );
    await next();
    if (k > 0) times.push(performance.now() - t);
  }
  child.kill();
  return median(times);
}
const driverOne = await driverOnly('one');
const driverOneMean = driverOne.reduce((a, b) => a + b, 0) / driverOne.length;
table.splice(2, 0, {
  path: `driver alone, one-row calls in sequence (${WARM_CALLS}; bound of the warm eval)`,
  median: median(driverOne),
  p99: p99(driverOne),
  perRow: driverOneMean,
  total: driverOneMean * ROWS,
});
const driverJson = await driverOnly('call');
const driverF64 = await driverOnly('callf64');
table.push({
  path: 'driver alone, one process, JSON (bound)',
  perRow: driverJson / ROWS,
  total: driverJson,
});
table.push({
  path: 'driver alone, one process, f64 (bound)',
  perRow: driverF64 / ROWS,
  total: driverF64,
});

console.log(
  `\nPython runner, ${BODY}, ${ROWS.toLocaleString('en')} rows — ${PYTHON}, policy ${policy}, ${workers} cores`,
);
console.log(`machine, before the runs: ${MACHINE}\n`);
const head = [
  'path',
  'median/call',
  'p99/call',
  'per row',
  'rows/s',
  `time for ${ROWS / 1000}k`,
  'vs spawn',
];
const body = table.map((r) => [
  r.path,
  fmtMs(r.median),
  fmtMs(r.p99),
  fmtMs(r.perRow),
  fmtRate(1000 / r.perRow),
  fmtTotal(r.total),
  `${(1000 / r.perRow / spawnRate).toFixed(0)}×`,
]);
const widths = head.map((h, i) => Math.max(h.length, ...body.map((r) => r[i].length)));
const line = (cells) =>
  cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
console.log(line(head));
console.log(widths.map((w) => '-'.repeat(w)).join('  '));
for (const r of body) console.log(line(r));
console.log('\nworker memory (resident, from /proc):');
for (const p of rss)
  console.log(`  pid ${p.pid} ${p.comm.padEnd(12)} ${(p.rssKb / 1024).toFixed(1)} MiB`);
console.log(
  '\ntargets: warm call < 100 µs median; evalBatch ≥ 2 M rows/s (JSON), ≥ 10 M rows/s (f64 columns, all-number functions)',
);
console.log(
  `bounds: "driver alone" is one CPython process doing only decode, one call per row and encode
(no sandbox, no Values, no core checks); ${workers} workers can at best multiply it by ${workers}, but on
${workers} cores the JS thread (Values, row text or f64 packing, GC) shares the same cores. The gap
between evalBatch and runner.callBatch is core's per-row work (argument checks, result checks);
evalColumns has none of it (no Value per cell), so over f64 frames it is bound by the driver: one
Python call per row in each worker, sharing ${workers} cores with node and whatever else runs.
Warm sequential latency is two process wake-ups per call; it varies with whether the scheduler
keeps node and python on one core. "driver alone, one-row calls" is the same driver answering
one-row JSON calls from a bare pipe: the wake-ups and the driver's own work, with no sandbox,
no Registry, no pool and no check of the worker's process tree; the warm eval's excess over it
is ours.`,
);
