// Vectorized vs per-row R, side by side in one run, against dist/:
// `x * 1.05^y` over ROWS rows through evalColumns (Float64Array columns in
// and out), per-row (the body runs once per row) and vectorized (once per
// chunk on whole vectors), and vectorized into one result column kept across
// runs (`options.into`, as an engine refreshing a measure); `into, pipes` is
// the same through a registry whose workers have no shared file
// (IMPROV_EXTFN_SHM_DIR='', docs/protocol.md "Shared file"). Prints min /
// median / max of RUNS runs and the load average.
// Run: pnpm --filter @improv/extfn-r bench
import { loadavg } from 'node:os';
import { Registry } from '@improv/extfn-core';
import { probeSandbox } from '@improv/extfn-sandbox';
import { r } from '../dist/index.js';

const ROWS = Number(process.env.BENCH_ROWS ?? 1_000_000);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const RSCRIPT = process.env.IMPROV_EXTFN_R ?? '/usr/bin/Rscript';

const policy = (await probeSandbox({ policy: 'restricted' })).ok ? 'restricted' : 'trusted';
const makeRegistry = () =>
  new Registry({
    runners: [r({ interpreter: RSCRIPT, policy })],
    cache: false,
    timeoutMs: 60_000,
  });
// One registry per function measured, as an engine refreshing that measure
// alone: the per-row function's warm workers do not hold the slots the
// vectorized one would start its second lane in.
const rowsRegistry = makeRegistry();
const registry = makeRegistry();
const piped = makeRegistry();
const signature = { language: 'r', argTypes: ['number', 'number'], returnType: 'number' };
const BODY = 'x <- args[[1]]\ny <- args[[2]]\nresult <- x * 1.05^y';
rowsRegistry.register({ name: 'rows', body: BODY, ...signature });
registry.register({ name: 'vector', body: BODY, vectorized: true, ...signature });
piped.register({ name: 'vector', body: BODY, vectorized: true, ...signature });

const x = Float64Array.from({ length: ROWS }, (_, i) => i * 0.25);
const y = Float64Array.from({ length: ROWS }, (_, i) => i % 40);

const fmt = (v) =>
  v >= 1e6 ? `${(v / 1e6).toFixed(2)} M rows/s` : `${(v / 1e3).toFixed(0)} k rows/s`;
const load = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');

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
  rates.sort((a, b) => a - b);
  return { min: rates[0], median: rates[Math.floor(RUNS / 2)], max: rates[RUNS - 1] };
}

console.log(
  `R ${RSCRIPT}, sandbox ${policy}, x * 1.05^y over evalColumns (f64 columns in and out), ${RUNS} runs, load ${load()}`,
);
const perRowRows = Math.min(ROWS, 100_000);
const perRow = await measure('rows', perRowRows, undefined, rowsRegistry);
const vector = await measure('vector', ROWS);
const vectorInto = await measure('vector', ROWS, new Float64Array(ROWS));
// Workers read IMPROV_EXTFN_SHM_DIR when they start: all of `piped`'s start in here.
process.env.IMPROV_EXTFN_SHM_DIR = '';
const pipedInto = await measure('vector', ROWS, new Float64Array(ROWS), piped);
delete process.env.IMPROV_EXTFN_SHM_DIR;
for (const [label, m, rows] of [
  ['per-row', perRow, perRowRows],
  ['vectorized', vector, ROWS],
  ['vector into', vectorInto, ROWS],
  ['into, pipes', pipedInto, ROWS],
]) {
  console.log(
    `  ${label.padEnd(12)} ${String(rows).padStart(9)} rows  min ${fmt(m.min)}  median ${fmt(m.median)}  max ${fmt(m.max)}`,
  );
}
console.log(
  `  vectorized / per-row (median): ${(vector.median / perRow.median).toFixed(1)}x, into ${(vectorInto.median / perRow.median).toFixed(1)}x; load after ${load()}`,
);
await rowsRegistry.close();
await registry.close();
await piped.close();
