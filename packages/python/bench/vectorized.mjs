// Vectorized vs per-row Python, side by side in one run, against dist/:
// `hypot(x, y)` over ROWS rows through evalColumns (Float64Array columns in
// and out), per-row (`math.hypot`, one interpreter call per row) and
// vectorized (`np.hypot` on whole numpy columns, one call per chunk). Prints
// min / median / max of RUNS runs and the load average; `x + y` shows what
// the frames alone cost; `into` writes into one result column kept across
// runs (`options.into`, as an engine refreshing a measure); `into, pipes` is
// the same through a registry whose workers have no shared file
// (IMPROV_EXTFN_SHM_DIR='', docs/protocol.md "Shared file"). Run: pnpm bench
import { loadavg } from 'node:os';
import { Registry } from '@improv/extfn-core';
import { probeSandbox } from '@improv/extfn-sandbox';
import { python } from '../dist/index.js';

const ROWS = Number(process.env.BENCH_ROWS ?? 4_000_000);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const PYTHON = process.env.IMPROV_EXTFN_PYTHON ?? '/usr/bin/python3';

const policy = (await probeSandbox({ policy: 'restricted' })).ok ? 'restricted' : 'trusted';
const makeRegistry = () =>
  new Registry({
    runners: [python({ interpreter: PYTHON, policy, packages: 'system' })],
    cache: false,
    timeoutMs: 60_000,
  });
// One registry per function measured, as an engine refreshing that measure
// alone: the per-row function's warm workers do not hold the slots the
// vectorized one would start its second lane in.
const rowsRegistry = makeRegistry();
const registry = makeRegistry();
const piped = makeRegistry();
const signature = { language: 'python', argTypes: ['number', 'number'], returnType: 'number' };
rowsRegistry.register({
  name: 'rows',
  body: 'import math\nresult = math.hypot(args[0], args[1])',
  ...signature,
});
registry.register({
  name: 'vector',
  body: 'import numpy as np\nresult = np.hypot(args[0], args[1])',
  vectorized: true,
  ...signature,
});

piped.register({
  name: 'vector',
  body: 'import numpy as np\nresult = np.hypot(args[0], args[1])',
  vectorized: true,
  ...signature,
});
registry.register({
  name: 'plus',
  body: 'result = args[0] + args[1]',
  vectorized: true,
  ...signature,
});

const x = Float64Array.from({ length: ROWS }, (_, i) => i * 0.25);
const y = Float64Array.from({ length: ROWS }, (_, i) => (i % 1000) - 500);

const fmt = (r) =>
  r >= 1e6 ? `${(r / 1e6).toFixed(1)} M rows/s` : `${(r / 1e3).toFixed(0)} k rows/s`;
const sorted = (xs) => [...xs].sort((a, b) => a - b);

async function measure(name, rows, into, on = registry) {
  const cx = x.subarray(0, rows);
  const cy = y.subarray(0, rows);
  const options = into ? { into: into.subarray(0, rows) } : {};
  // Warm up at full size, as an engine refreshing a measure is: the workers'
  // heaps have grown to the chunk size and the time per row is known. Two
  // calls: the first starts one worker, the second its second lane's.
  for (let warm = 0; warm < 2; warm++) await on.evalColumns(name, [cx, cy], options);
  const rates = [];
  for (let run = 0; run < RUNS; run++) {
    const start = performance.now();
    const { errors } = await on.evalColumns(name, [cx, cy], options);
    const ms = performance.now() - start;
    if (errors.size) throw new Error(`${name}: ${errors.values().next().value.message}`);
    rates.push(rows / (ms / 1000));
  }
  const [min, median, max] = [
    sorted(rates)[0],
    sorted(rates)[Math.floor(RUNS / 2)],
    sorted(rates)[RUNS - 1],
  ];
  return { min, median, max };
}

console.log(
  `python ${PYTHON}, sandbox ${policy}, hypot over evalColumns, ${RUNS} runs, load ${loadavg()
    .map((l) => l.toFixed(2))
    .join(' ')}`,
);
const perRowRows = Math.min(ROWS, 400_000);
const perRow = await measure('rows', perRowRows, undefined, rowsRegistry);
const vector = await measure('vector', ROWS);
const vectorInto = await measure('vector', ROWS, new Float64Array(ROWS));
// Workers read IMPROV_EXTFN_SHM_DIR when they start: all of `piped`'s start in here.
process.env.IMPROV_EXTFN_SHM_DIR = '';
const pipedInto = await measure('vector', ROWS, new Float64Array(ROWS), piped);
delete process.env.IMPROV_EXTFN_SHM_DIR;
// What bounds np.hypot: x + y is the same frames with almost no numpy work.
const plus = await measure('plus', ROWS);
for (const [label, r, rows] of [
  ['per-row math.hypot', perRow, perRowRows],
  ['vectorized np.hypot', vector, ROWS],
  ['np.hypot into', vectorInto, ROWS],
  ['np.hypot into, pipes', pipedInto, ROWS],
  ['vectorized x + y', plus, ROWS],
]) {
  console.log(
    `  ${label.padEnd(22)} ${String(rows).padStart(9)} rows  min ${fmt(r.min)}  median ${fmt(r.median)}  max ${fmt(r.max)}`,
  );
}
console.log(
  `  vectorized / per-row (median): ${(vector.median / perRow.median).toFixed(1)}x; load after ${loadavg()
    .map((l) => l.toFixed(2))
    .join(' ')}`,
);
await rowsRegistry.close();
await registry.close();
await piped.close();
