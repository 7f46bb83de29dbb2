// Refresh benchmark of the Python runner, against dist/: how the pool shares
// its slots. Run: node packages/python/bench/refresh.mjs
// Side by side in one run, for maxWorkers 2 and 4, each on a new Registry:
//   cold   — one function over ROWS rows (new Registry → results: interpreter
//            found, sandbox probed, workers started);
//   one    — one function over 4 × ROWS rows;
//   four   — four functions over ROWS rows each, refreshed concurrently;
// then the same `one` and `four` again on the same Registry (warm: workers
// kept). For each: wall time, time to the first results (onProgress), and
// the interpreters started (runner.stats().started).
// Prints min/median/max over RUNS and the load average.
// BENCH_CASES=cold,one,four picks cases (default all); BENCH_SLOTS=2,4 the pool sizes.
import { loadavg } from 'node:os';
import { Registry, Value } from '@improv/extfn-core';
import { probeSandbox } from '@improv/extfn-sandbox';
import { python } from '../dist/index.js';

const ROWS = Number(process.env.BENCH_ROWS ?? 100_000);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const SLOTS = (process.env.BENCH_SLOTS ?? '2,4').split(',').map(Number);
const PYTHON = process.env.IMPROV_EXTFN_PYTHON ?? '/usr/bin/python3';
const NAMES = ['f0', 'f1', 'f2', 'f3'];
const CASES = new Set((process.env.BENCH_CASES ?? 'cold,one,four').split(','));

const probe = await probeSandbox({ policy: 'restricted' });
const policy = probe.ok ? 'restricted' : 'trusted';

const rowsFor = (n) => Array.from({ length: n }, (_, i) => [Value.number(i), Value.number(0.5)]);
const rows = rowsFor(ROWS);
const rows4 = rowsFor(4 * ROWS);

function makeRegistry(maxWorkers) {
  const runner = python({ interpreter: PYTHON, policy, maxWorkers });
  const registry = new Registry({ runners: [runner], cache: false, timeoutMs: 30_000 });
  NAMES.forEach((name, k) => {
    registry.register({
      name,
      language: 'python',
      body: `result = args[0] + args[1] + ${k}`,
      argTypes: ['number', 'number'],
      returnType: 'number',
      pure: true,
    });
  });
  return { runner, registry };
}

function check(results, k) {
  for (let i = 0; i < results.length; i += 997) {
    if (results[i].value !== i + 0.5 + k) {
      throw new Error(`row ${i}: wrong result ${JSON.stringify(results[i])}`);
    }
  }
}

/** Refreshes `jobs` ([name, rows] pairs) at once; wall time, first results, starts. */
async function refresh(runner, registry, jobs) {
  const before = runner.stats().started;
  const t0 = performance.now();
  let first;
  const all = await Promise.all(
    jobs.map(([name, input]) =>
      registry.evalBatch(name, input, {
        onProgress: (done) => {
          if (done > 0 && first === undefined) first = performance.now() - t0;
        },
      }),
    ),
  );
  const ms = performance.now() - t0;
  all.forEach((results, j) => {
    check(results, NAMES.indexOf(jobs[j][0]));
  });
  return { ms, first, starts: runner.stats().started - before };
}

const samples = new Map();
const add = (label, sample) => {
  if (!samples.has(label)) samples.set(label, []);
  samples.get(label).push(sample);
};

const loadBefore = loadavg();
for (let run = 0; run < RUNS; run++) {
  for (const slots of SLOTS) {
    if (CASES.has('cold')) {
      const { runner, registry } = makeRegistry(slots);
      add(`${slots} slots: cold, 1 fn × ${ROWS}`, await refresh(runner, registry, [['f0', rows]]));
      await registry.close();
    }
    if (CASES.has('one')) {
      const { runner, registry } = makeRegistry(slots);
      add(`${slots} slots: one fn × ${4 * ROWS}`, await refresh(runner, registry, [['f0', rows4]]));
      add(
        `${slots} slots: one fn × ${4 * ROWS} (warm)`,
        await refresh(runner, registry, [['f0', rows4]]),
      );
      await registry.close();
    }
    if (CASES.has('four')) {
      const { runner, registry } = makeRegistry(slots);
      const jobs = NAMES.map((name) => [name, rows]);
      add(`${slots} slots: four fns × ${ROWS}`, await refresh(runner, registry, jobs));
      add(`${slots} slots: four fns × ${ROWS} (warm)`, await refresh(runner, registry, jobs));
      await registry.close();
    }
  }
}
const loadAfter = loadavg();

const sorted = (xs) => [...xs].sort((a, b) => a - b);
const mmm = (xs) => {
  const s = sorted(xs);
  return `${s[0].toFixed(0)}/${s[Math.floor(s.length / 2)].toFixed(0)}/${s[s.length - 1].toFixed(0)}`;
};
console.log(`policy ${policy}, ${RUNS} runs; ms as min/median/max; starts as seen per run`);
for (const [label, xs] of samples) {
  const first = xs.map((x) => x.first ?? Number.NaN);
  console.log(
    `${label.padEnd(36)} total ${mmm(xs.map((x) => x.ms)).padEnd(16)} first results ${mmm(first).padEnd(14)} starts ${xs.map((x) => x.starts).join(',')}`,
  );
}
for (const slots of CASES.has('one') && CASES.has('four') ? SLOTS : []) {
  const one = sorted(samples.get(`${slots} slots: one fn × ${4 * ROWS}`).map((x) => x.ms));
  const four = sorted(samples.get(`${slots} slots: four fns × ${ROWS}`).map((x) => x.ms));
  const mid = (s) => s[Math.floor(s.length / 2)];
  console.log(`${slots} slots: four / one (medians, cold) = ${(mid(four) / mid(one)).toFixed(2)}`);
}
const fmtLoad = (l) => l.map((x) => x.toFixed(2)).join(' ');
console.log(`load average before ${fmtLoad(loadBefore)}, after ${fmtLoad(loadAfter)}`);
