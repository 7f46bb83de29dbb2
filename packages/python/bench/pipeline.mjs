// Queued chunks (the runner's `pipeline` option) on a host-bound function,
// against dist/: 10^5 rows of text `(a + b).upper()` through evalBatch, on
// two warm runners of 2 workers each, one with `pipeline: true` (a lane's
// next chunk written behind the running one) and one with `pipeline: false`,
// batches alternating between them in one process so both see the same load
// (each side first in every other pair).
// Run: node packages/python/bench/pipeline.mjs
// Prints, per side, min/median/max over BENCH_RUNS rounds of each round's
// median batch time (BENCH_BATCHES batches a round), the host's CPU per
// batch, and the load average. BENCH_WORKERS sets maxWorkers (default 2).
import { loadavg } from 'node:os';
import { Registry, Value } from '@improv/extfn-core';
import { python } from '../dist/index.js';

const ROWS = Number(process.env.BENCH_ROWS ?? 100_000);
const ROUNDS = Number(process.env.BENCH_RUNS ?? 3);
const BATCHES = Number(process.env.BENCH_BATCHES ?? 20);
const PYTHON = process.env.IMPROV_EXTFN_PYTHON ?? '/usr/bin/python3';
const WORKERS = Number(process.env.BENCH_WORKERS ?? 2);

const rows = Array.from({ length: ROWS }, (_, i) => [
  Value.text(`row${i}`),
  Value.text(`-é${i % 100}`),
]);
const expected = (i) => `ROW${i}-É${i % 100}`;

function side(pipeline) {
  const runner = python({ interpreter: PYTHON, maxWorkers: WORKERS, pipeline });
  const registry = new Registry({ runners: [runner], cache: false, timeoutMs: 30_000 });
  registry.register({
    name: 'upper',
    language: 'python',
    body: 'result = (args[0] + args[1]).upper()',
    argTypes: ['text', 'text'],
    returnType: 'text',
  });
  return { label: pipeline ? 'pipeline: true ' : 'pipeline: false', registry, wall: [], cpu: [] };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const f = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return `${s[0].toFixed(1)} / ${median(s).toFixed(1)} / ${s.at(-1).toFixed(1)}`;
};

const sides = [side(true), side(false)];
const load0 = loadavg();
// Warm: workers started, each lane's time per row known.
for (const s of sides) for (let i = 0; i < 4; i++) await s.registry.evalBatch('upper', rows);
for (let r = 0; r < ROUNDS; r++) {
  const round = sides.map(() => ({ wall: [], cpu: [] }));
  for (let b = 0; b < BATCHES; b++) {
    // Each side goes first in every other pair: whichever runs second in a pair tends to
    // be faster here (the garbage the other left), so a fixed order would favour one.
    const order = b % 2 ? [1, 0] : [0, 1];
    for (const k of order) {
      const s = sides[k];
      const cpu0 = process.cpuUsage();
      const t0 = performance.now();
      const results = await s.registry.evalBatch('upper', rows);
      round[k].wall.push(performance.now() - t0);
      const cpu = process.cpuUsage(cpu0);
      round[k].cpu.push((cpu.user + cpu.system) / 1000);
      for (let i = 0; i < ROWS; i += 9973) {
        if (results[i].value !== expected(i)) {
          throw new Error(`row ${i}: ${JSON.stringify(results[i])}`);
        }
      }
    }
  }
  sides.forEach((s, k) => {
    s.wall.push(median(round[k].wall));
    s.cpu.push(median(round[k].cpu));
  });
}
console.log(
  `text evalBatch, ${ROWS} rows, ${WORKERS} worker(s); ${ROUNDS} rounds of ${BATCHES} batches a side, alternating; ms as min / median / max of the rounds' medians`,
);
for (const s of sides) {
  console.log(`  ${s.label}: batch ${f(s.wall)} ms, host CPU ${f(s.cpu)} ms`);
}
console.log(
  `  pipeline true / false (medians): ${(median(sides[0].wall) / median(sides[1].wall)).toFixed(2)}`,
);
console.log(
  `load average before ${load0.map((x) => x.toFixed(2)).join(' ')}, after ${loadavg()
    .map((x) => x.toFixed(2))
    .join(' ')}`,
);
for (const s of sides) await s.registry.close();
