// Node memory of a 10^6-row columnar refresh beyond its input columns
// (issue 12's target: under 150 MiB), against dist/. For each workload the
// input columns are built first, the worker warmed up, the peak RSS reset
// (`5` to /proc/self/clear_refs) and then read back (VmHWM) after one
// evalColumns over every row: peak RSS during the refresh minus RSS before
// it. The result column itself is part of what is counted (8 MiB for 10^6
// numbers). Prints min / median / max of RUNS runs and the load average.
// Run: pnpm bench (or node bench/memory.mjs after a build).
import { readFileSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { Registry } from '@improv/extfn-core';
import { probeSandbox } from '@improv/extfn-sandbox';
import { python } from '../dist/index.js';

const ROWS = Number(process.env.BENCH_ROWS ?? 1_000_000);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const PYTHON = process.env.IMPROV_EXTFN_PYTHON ?? '/usr/bin/python3';
const MiB = 1024 * 1024;

function status(field) {
  const line = readFileSync('/proc/self/status', 'utf8')
    .split('\n')
    .find((l) => l.startsWith(`${field}:`));
  return Number(line.split(/\s+/)[1]) * 1024;
}

const policy = (await probeSandbox({ policy: 'restricted' })).ok ? 'restricted' : 'trusted';
const registry = new Registry({
  runners: [python({ interpreter: PYTHON, policy })],
  cache: false,
  timeoutMs: 60_000,
});
registry.register({
  name: 'hypot',
  language: 'python',
  body: 'result = (args[0] ** 2 + args[1] ** 2) ** 0.5',
  argTypes: ['number', 'number'],
  returnType: 'number',
});
registry.register({
  name: 'upper',
  language: 'python',
  body: 'result = (args[0] + args[1]).upper()',
  argTypes: ['text', 'text'],
  returnType: 'text',
});

const workloads = [
  {
    name: 'number hypot(x, y)',
    fn: 'hypot',
    columns: () => [
      Float64Array.from({ length: ROWS }, (_, i) => i * 0.25),
      Float64Array.from({ length: ROWS }, (_, i) => (i % 1000) - 500),
    ],
  },
  {
    name: 'text (a + b).upper()',
    fn: 'upper',
    columns: () => [
      Array.from({ length: ROWS }, (_, i) => `cell-${i}`),
      Array.from({ length: ROWS }, (_, i) => `x${i % 97}`),
    ],
  },
];

const sorted = (xs) => [...xs].sort((a, b) => a - b);
const load = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
console.log(
  `python ${PYTHON}, sandbox ${policy}, ${ROWS} rows through evalColumns, ${RUNS} runs, load ${load()}`,
);
for (const workload of workloads) {
  const columns = workload.columns();
  await registry.evalColumns(
    workload.fn,
    columns.map((c) => c.slice(0, 1000)),
  ); // warm up
  const deltas = [];
  for (let run = 0; run < RUNS; run++) {
    globalThis.gc?.();
    const before = status('VmRSS');
    writeFileSync('/proc/self/clear_refs', '5'); // reset the peak (VmHWM) to the current RSS
    const { errors } = await registry.evalColumns(workload.fn, columns);
    if (errors.size) throw new Error(`${workload.name}: ${errors.values().next().value.message}`);
    deltas.push((status('VmHWM') - before) / MiB);
  }
  const s = sorted(deltas);
  console.log(
    `  ${workload.name.padEnd(22)} peak RSS beyond inputs: min ${s[0].toFixed(0)} MiB  median ${s[Math.floor(RUNS / 2)].toFixed(0)} MiB  max ${s[RUNS - 1].toFixed(0)} MiB`,
  );
}
console.log(`  load after ${load()}`);
await registry.close();
