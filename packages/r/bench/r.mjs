/**
 * R runner benchmark: `result <- args[[1]] + args[[2]]` over
 * 100,000 rows, side by side in one run — one-shot spawn per call (a sample,
 * extrapolated), warm sequential eval, evalBatch — under the Restricted
 * sandbox. Run with `pnpm --filter @improv/extfn-r bench` (builds first).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { Registry, Value } from '@improv/extfn-core';
import { machineCosts } from '../../../bench/peers/machine/costs.mjs';
import { r } from '../dist/index.js';

/** This day's machine (a page's first touch, a pipe round trip): README figures carry it. */
const MACHINE = machineCosts();

const ROWS = 100_000;
const SPAWN_SAMPLE = Number(process.env.BENCH_SPAWN_SAMPLE ?? 20);
const WARM_SAMPLE = Number(process.env.BENCH_WARM_SAMPLE ?? 3_000);
const interpreter = process.env.IMPROV_EXTFN_R || '/usr/bin/Rscript';
const policy = process.env.IMPROV_EXTFN_TRUSTED === '1' ? 'trusted' : 'restricted';

const runner = r({ interpreter, policy });
const registry = new Registry({ runners: [runner], timeoutMs: 30_000, cache: false });
registry.register({
  name: 'add',
  language: 'r',
  body: 'result <- args[[1]] + args[[2]]',
  argTypes: ['number', 'number'],
  returnType: 'number',
  pure: false,
});
const rows = Array.from({ length: ROWS }, (_, i) => [Value.number(i), Value.number(i * 0.5)]);

const quantile = (sorted, q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
function summary(samples) {
  const sorted = [...samples].sort((a, b) => a - b);
  return { median: quantile(sorted, 0.5), p99: quantile(sorted, 0.99) };
}

/** Resident memory of every live worker's process tree (bwrap, R and anything under them). */
function workerRssBytes() {
  const children = new Map();
  const rss = new Map();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const status = readFileSync(`/proc/${entry}/status`, 'utf8');
      const ppid = Number(/^PPid:\s+(\d+)/m.exec(status)?.[1]);
      const kb = Number(/^VmRSS:\s+(\d+)/m.exec(status)?.[1] ?? 0);
      rss.set(Number(entry), kb * 1024);
      if (!children.has(ppid)) children.set(ppid, []);
      children.get(ppid).push(Number(entry));
    } catch {}
  }
  let total = 0;
  const visit = (pid) => {
    total += rss.get(pid) ?? 0;
    for (const child of children.get(pid) ?? []) visit(child);
  };
  for (const pid of runner.workerPids()) visit(pid);
  return total;
}

/** CPU seconds (user + system) used so far by the live workers' process trees. */
function workerCpuSeconds() {
  let ticks = 0;
  const tree = new Set(runner.workerPids());
  let grew = true;
  const stats = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      stats.push({
        pid: Number(entry),
        ppid: Number(fields[1]),
        ticks: Number(fields[11]) + Number(fields[12]),
      });
    } catch {}
  }
  while (grew) {
    grew = false;
    for (const s of stats) {
      if (tree.has(s.ppid) && !tree.has(s.pid)) {
        tree.add(s.pid);
        grew = true;
      }
    }
  }
  for (const s of stats) if (tree.has(s.pid)) ticks += s.ticks;
  return ticks / 100;
}

const fmt = (ms) =>
  ms >= 3_600_000
    ? `${(ms / 3_600_000).toFixed(1)} h`
    : ms >= 1000
      ? `${(ms / 1000).toFixed(2)} s`
      : ms >= 1
        ? `${ms.toFixed(2)} ms`
        : `${(ms * 1000).toFixed(0)} µs`;
const results = [];

// 1. One-shot: a fresh sandboxed Rscript per call. Sampled, then extrapolated.
{
  const samples = [];
  for (let i = 0; i < SPAWN_SAMPLE; i++) {
    const t = performance.now();
    await registry.eval('add', rows[i], { mode: 'oneShot' });
    samples.push(performance.now() - t);
  }
  const s = summary(samples);
  const mean = samples.reduce((a, b) => a + b, 0) / samples.length;
  results.push({
    mode: `spawn per call (${SPAWN_SAMPLE} sampled, ×${ROWS / SPAWN_SAMPLE} extrapolated)`,
    totalMs: mean * ROWS,
    ...s,
  });
}

// 2. Warm sequential eval: one call at a time on a warm worker.
let rssAfterWarm = 0;
{
  await registry.eval('add', rows[0]); // start the worker
  const samples = [];
  const started = performance.now();
  for (let i = 0; i < WARM_SAMPLE; i++) {
    const t = performance.now();
    await registry.eval('add', rows[i]);
    samples.push(performance.now() - t);
  }
  const elapsed = performance.now() - started;
  rssAfterWarm = workerRssBytes();
  results.push({
    mode: `warm sequential eval (${WARM_SAMPLE} sampled, extrapolated)`,
    totalMs: (elapsed / WARM_SAMPLE) * ROWS,
    ...summary(samples),
  });
}

// 3. evalBatch: all rows, chunked over warm workers on every core.
let rssBatch = 0;
let batchCpu = { r: 0, node: 0 };
{
  await registry.evalBatch('add', rows.slice(0, 2_000)); // workers up
  const cpuBefore = workerCpuSeconds();
  const nodeBefore = process.cpuUsage();
  const t = performance.now();
  const out = await registry.evalBatch('add', rows);
  const totalMs = performance.now() - t;
  const node = process.cpuUsage(nodeBefore);
  batchCpu = { r: workerCpuSeconds() - cpuBefore, node: (node.user + node.system) / 1e6 };
  rssBatch = workerRssBytes();
  const bad = out.findIndex((v, i) => v.type !== 'number' || v.value !== i * 1.5);
  if (bad >= 0) throw new Error(`evalBatch row ${bad} is wrong: ${JSON.stringify(out[bad])}`);
  results.push({
    mode: 'evalBatch (binary f64 columns)',
    totalMs,
    median: totalMs / ROWS,
    p99: Number.NaN,
  });
}

await registry.close();

const baseline = results[0].totalMs;
const head = ['mode', 'total (100k rows)', 'per call median', 'p99', 'rows/s', 'vs spawn'];
const table = results.map((x) => [
  x.mode,
  fmt(x.totalMs),
  fmt(x.median),
  Number.isNaN(x.p99) ? '—' : fmt(x.p99),
  Math.round((ROWS / x.totalMs) * 1000).toLocaleString('en-US'),
  `${(baseline / x.totalMs).toFixed(1)}×`,
]);
const widths = head.map((h, k) => Math.max(h.length, ...table.map((row) => row[k].length)));
const line = (cells) => cells.map((c, k) => c.padEnd(widths[k])).join('  ');
console.log(`R runner, ${policy} sandbox, ${availableParallelism()} cores, ${interpreter}`);
console.log(`machine, before the runs: ${MACHINE}`);
console.log(line(head));
for (const row of table) console.log(line(row));
console.log(
  `worker resident memory: ${(rssAfterWarm / 2 ** 20).toFixed(1)} MiB (1 warm worker), ${(rssBatch / 2 ** 20).toFixed(1)} MiB (after the batch, ${runner.stats().peak} workers at peak)`,
);
console.log(
  `evalBatch CPU: R workers ${batchCpu.r.toFixed(2)} s (${((batchCpu.r / ROWS) * 1e6).toFixed(1)} µs/row: ` +
    `${Math.round(ROWS / batchCpu.r).toLocaleString('en-US')} rows/s per busy core), node ${batchCpu.node.toFixed(2)} s; ` +
    `load average ${loadavg()
      .map((x) => x.toFixed(1))
      .join(' ')}`,
);
console.log(
  'target: R evalBatch ≥ 100,000 rows/s — bound by R evaluating the body once per row (bench/vectorized.mjs: whole-column bodies)',
);
