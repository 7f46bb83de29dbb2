// Queued chunks (the runner's `pipeline` option), against dist/: two warm
// runners of 2 workers each, one with `pipeline: true` (a lane's next chunk
// written behind the running one) and one with `pipeline: false`, batches
// alternating between them in one process so both see the same load (each
// side first in every other pair). Two workloads:
//   text    — 10^5 rows of `(a + b).upper()` through evalBatch (JSON-free
//             text columns on the pipes; host-bound);
//   numbers — 10^6 rows of `math.hypot(x, y)` through evalColumns with
//             `into` (callf64 through the shared file: the chunk behind gets
//             a region of its own).
// Run: node packages/python/bench/pipeline.mjs
// Prints, per workload and side, min/median/max over BENCH_RUNS rounds of
// each round's median batch time (BENCH_BATCHES batches a round), the host's
// CPU per batch, and the load average. BENCH_WORKERS sets maxWorkers
// (default 2), BENCH_CASES picks workloads (default text,numbers).
import { loadavg } from 'node:os';
import { Registry, Value } from '@improv/extfn-core';
import { python } from '../dist/index.js';

const ROUNDS = Number(process.env.BENCH_RUNS ?? 3);
const BATCHES = Number(process.env.BENCH_BATCHES ?? 20);
const PYTHON = process.env.IMPROV_EXTFN_PYTHON ?? '/usr/bin/python3';
const WORKERS = Number(process.env.BENCH_WORKERS ?? 2);
const CASES = (process.env.BENCH_CASES ?? 'text,numbers').split(',');

const TEXT_ROWS = Number(process.env.BENCH_ROWS ?? 100_000);
const textRows = Array.from({ length: TEXT_ROWS }, (_, i) => [
  Value.text(`row${i}`),
  Value.text(`-é${i % 100}`),
]);
const NUMBER_ROWS = 10 * TEXT_ROWS;
const xs = Float64Array.from({ length: NUMBER_ROWS }, (_, i) => i % 1000);
const ys = Float64Array.from({ length: NUMBER_ROWS }, (_, i) => (i % 7) + 0.5);

/** Each workload: its function, and one batch of it on a registry (checked). */
const WORKLOADS = {
  text: {
    title: `text evalBatch, ${TEXT_ROWS} rows`,
    fn: ['result = (args[0] + args[1]).upper()', ['text', 'text'], 'text'],
    async batch(registry) {
      const results = await registry.evalBatch('f', textRows);
      for (let i = 0; i < TEXT_ROWS; i += 9973) {
        if (results[i].value !== `ROW${i}-É${i % 100}`) {
          throw new Error(`row ${i}: ${JSON.stringify(results[i])}`);
        }
      }
    },
  },
  numbers: {
    title: `number evalColumns (shared file, into), ${NUMBER_ROWS} rows`,
    fn: ['import math\nresult = math.hypot(args[0], args[1])', ['number', 'number'], 'number'],
    async batch(registry, into) {
      const { values, errors } = await registry.evalColumns('f', [xs, ys], { into });
      if (errors.size > 0) throw new Error(`${errors.size} rows failed`);
      for (let i = 0; i < NUMBER_ROWS; i += 99_991) {
        // within an ulp or two: JavaScript's Math.hypot is not Python's, correctly rounded
        const h = Math.hypot(xs[i], ys[i]);
        if (!(Math.abs(values[i] - h) <= 1e-12 * h)) throw new Error(`row ${i}: ${values[i]}`);
      }
    },
  },
};

function side(pipeline, [body, argTypes, returnType]) {
  const runner = python({ interpreter: PYTHON, maxWorkers: WORKERS, pipeline });
  const registry = new Registry({ runners: [runner], cache: false, timeoutMs: 30_000 });
  registry.register({ name: 'f', language: 'python', body, argTypes, returnType });
  return {
    label: pipeline ? 'pipeline: true ' : 'pipeline: false',
    registry,
    into: new Float64Array(NUMBER_ROWS),
    wall: [],
    cpu: [],
  };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const f = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return `${s[0].toFixed(1)} / ${median(s).toFixed(1)} / ${s.at(-1).toFixed(1)}`;
};
const load = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');

for (const name of CASES) {
  const workload = WORKLOADS[name];
  if (!workload) throw new Error(`no workload ${name}: text or numbers`);
  const sides = [side(true, workload.fn), side(false, workload.fn)];
  const load0 = load();
  // Warm: workers started, each lane's time per row known.
  for (const s of sides) for (let i = 0; i < 4; i++) await workload.batch(s.registry, s.into);
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
        await workload.batch(s.registry, s.into);
        round[k].wall.push(performance.now() - t0);
        const cpu = process.cpuUsage(cpu0);
        round[k].cpu.push((cpu.user + cpu.system) / 1000);
      }
    }
    sides.forEach((s, k) => {
      s.wall.push(median(round[k].wall));
      s.cpu.push(median(round[k].cpu));
    });
  }
  console.log(
    `${workload.title}, ${WORKERS} worker(s); ${ROUNDS} rounds of ${BATCHES} batches a side, alternating; ms as min / median / max of the rounds' medians`,
  );
  for (const s of sides) {
    console.log(`  ${s.label}: batch ${f(s.wall)} ms, host CPU ${f(s.cpu)} ms`);
  }
  console.log(
    `  pipeline true / false (medians): ${(median(sides[0].wall) / median(sides[1].wall)).toFixed(2)}`,
  );
  console.log(`  load average before ${load0}, after ${load()}`);
  for (const s of sides) await s.registry.close();
}
