// Later worker starts of a long-lived runner, against dist/: the first call
// of a new function (a worker start, its `load` and the call) in a runner
// that has refreshed before, with the zygote (IMPROV_EXTFN_ZYGOTE unset) and
// with a tree per worker (IMPROV_EXTFN_ZYGOTE=0), rounds interleaved (each
// side first in every other round).
// Run: node packages/python/bench/later-starts.mjs
// BENCH_GAP_MS=N waits N ms before each new function's call (0 by default),
// as a user adds formulas: a zygote makes its spare workers only while
// nothing runs (interpreter/src/spare-workers.ts), so with no gap every
// start forks.
// Prints, per side, min/median/max over rounds of each round's median, the
// host CPU per start, the zygote starts per round, and the load average.
import { loadavg } from 'node:os';
import { Registry, Value } from '@improv/extfn-core';
import { python } from '../dist/index.js';

const N = Number(process.env.BENCH_STARTS ?? 10);
const ROUNDS = Number(process.env.BENCH_RUNS ?? 3);
const PYTHON = process.env.IMPROV_EXTFN_PYTHON ?? '/usr/bin/python3';
const GAP_MS = Number(process.env.BENCH_GAP_MS ?? 0);

async function round(zygote) {
  // read at each start (zygoteEnabled), so one process can measure both sides
  if (zygote) delete process.env.IMPROV_EXTFN_ZYGOTE;
  else process.env.IMPROV_EXTFN_ZYGOTE = '0';
  const runner = python({
    interpreter: PYTHON,
    policy: 'restricted',
    maxWorkers: 2,
    maxLiveWorkers: N + 4,
  });
  const registry = new Registry({ runners: [runner], cache: false, timeoutMs: 30_000 });
  for (let k = 0; k < N + 3; k++) {
    registry.register({
      name: `f${k}`,
      language: 'python',
      body: `result = args[0] + ${k}`,
      argTypes: ['number'],
      returnType: 'number',
      pure: true,
    });
  }
  // the runner's first starts, one at a time: two trees, then the third boots the zygote (zygote-starts.ts)
  for (let k = 0; k < 3; k++) await registry.eval(`f${k}`, [Value.number(1)]);
  if (zygote) {
    for (let i = 0; i < 500 && !runner.stats().zygote?.startsWith('ready'); i++) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
  const times = [];
  const cpu0 = process.cpuUsage();
  for (let k = 3; k < N + 3; k++) {
    if (GAP_MS > 0) await new Promise((resolve) => setTimeout(resolve, GAP_MS));
    const t0 = performance.now();
    const value = await registry.eval(`f${k}`, [Value.number(1)]);
    if (value.value !== 1 + k) throw new Error(`f${k}: wrong result ${JSON.stringify(value)}`);
    times.push(performance.now() - t0);
  }
  const cpu = process.cpuUsage(cpu0);
  const { zygoteStarts, spareStarts } = runner.stats();
  await registry.close();
  times.sort((a, b) => a - b);
  return {
    median: times[N >> 1],
    hostCpu: (cpu.user + cpu.system) / 1000 / N,
    zygoteStarts,
    spareStarts,
  };
}

const sides = { zygote: [], trees: [] };
const before = loadavg();
for (let r = 0; r < ROUNDS; r++) {
  // Each side first in every other round: on this VM the second of a pair tends to be faster.
  for (const zygote of r % 2 ? [true, false] : [false, true]) {
    (zygote ? sides.zygote : sides.trees).push(await round(zygote));
  }
}
const spread = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s
    .map((x) => x.toFixed(1))
    .filter((_, i) => i === 0 || i === s.length >> 1 || i === s.length - 1)
    .join('/');
};
const load = (l) => l.map((x) => x.toFixed(2)).join(' ');
console.log(
  `later starts: the first call of a new function in a warm runner; ${N} per round, ${ROUNDS} rounds interleaved${GAP_MS > 0 ? `, ${GAP_MS} ms idle before each` : ''}; ms as min/median/max of the rounds' medians`,
);
for (const [name, rows] of Object.entries(sides)) {
  console.log(
    `  ${name.padEnd(7)} ${spread(rows.map((x) => x.median))} ms; host CPU per start ${spread(rows.map((x) => x.hostCpu))} ms; zygote starts ${rows.map((x) => x.zygoteStarts ?? 0).join(',')} (of them spares ${rows.map((x) => x.spareStarts ?? 0).join(',')})`,
  );
}
const z = sides.zygote.map((x) => x.median).sort((a, b) => a - b)[ROUNDS >> 1];
const t = sides.trees.map((x) => x.median).sort((a, b) => a - b)[ROUNDS >> 1];
console.log(`  trees / zygote (medians) = ${(t / z).toFixed(2)}`);
console.log(`  load average before ${load(before)}, after ${load(loadavg())}`);
