// The four-function target, as a distribution: four Python functions
// refreshed cold (new Registry, 2 slots) in at most 1.2× one function over
// the same rows, best of 3. One invocation of refresh.mjs gives one such
// ratio, and on a 2-core VM it moves by ±15% from one invocation to the
// next, so this runs refresh.mjs N times (each a fresh Node process, as a
// user would) for each API and prints every ratio, how many are at or under
// 1.2, and their median, with the load average before and after, then each
// invocation's cold times (which side moved when a ratio is off).
// Run: node packages/python/bench/four-one.mjs
// BENCH_INVOCATIONS=10 (per API), BENCH_APIS=batch,columns (evalBatch's Value
// rows; evalColumns' Float64Array columns), BENCH_RUNS=3 runs per invocation,
// BENCH_GAP_MS=N ms of idle time before every case (refresh.mjs; 0 by default).
// BENCH_CONTROLS=again,two also counts, in the same invocations, the same
// ratio for controls: `again` is one function once more against itself (what
// the measurement moves by with the same work on both sides), `two` is two
// functions × 2·10^5 rows (as many workers as one, each function bound to its
// own) against one.
import { execFileSync } from 'node:child_process';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';

const REFRESH = fileURLToPath(new URL('./refresh.mjs', import.meta.url));
const INVOCATIONS = Number(process.env.BENCH_INVOCATIONS ?? 10);
const APIS = (process.env.BENCH_APIS ?? 'batch,columns').split(',');
const TARGET = 1.2;
const CONTROLS = (process.env.BENCH_CONTROLS ?? '').split(',').filter(Boolean);
for (const control of CONTROLS) {
  if (control !== 'again' && control !== 'two') {
    throw new Error(`BENCH_CONTROLS: unknown control ${JSON.stringify(control)} (again, two)`);
  }
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const load = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');

/**
 * One invocation's cold four / one: [ratio of medians, ratio of bests, one's
 * times, four's times, each control's ratio of bests].
 */
function invoke(api) {
  const out = execFileSync(process.execPath, [REFRESH], {
    env: {
      ...process.env,
      BENCH_CASES: ['one', 'four', ...CONTROLS].join(','),
      BENCH_SLOTS: '2',
      BENCH_RUNS: process.env.BENCH_RUNS ?? '3',
      BENCH_API: api,
      BENCH_TIMELINE: '0',
      BENCH_BASE: '',
      BENCH_TREES: '0',
      BENCH_GAP_MS: process.env.BENCH_GAP_MS ?? '0',
    },
    encoding: 'utf8',
  });
  const m = /four \/ one \(cold\) = ([\d.]+) medians, ([\d.]+) best/.exec(out);
  if (!m) throw new Error(`no four / one line in refresh.mjs's output:\n${out}`);
  // min/median/max in ms of each case's cold runs: which side moved, when a ratio is off
  const times = (label) => new RegExp(`${label} +total (\\S+)`).exec(out)?.[1] ?? '?';
  const controls = CONTROLS.map((control) => {
    const c = new RegExp(`${control} / one \\(cold\\) = [\\d.]+ medians, ([\\d.]+) best`).exec(out);
    if (!c) throw new Error(`no ${control} / one line in refresh.mjs's output:\n${out}`);
    return Number(c[1]);
  });
  return [Number(m[1]), Number(m[2]), times('one fn × \\d+'), times('four fns × \\d+'), controls];
}

console.log(
  `four / one, cold, 2 slots: ${INVOCATIONS} invocations of refresh.mjs per API, ${process.env.BENCH_GAP_MS ?? 0} ms idle before each case; load average before ${load()}`,
);
for (const api of APIS) {
  const medians = [];
  const bests = [];
  const timings = [];
  const controls = CONTROLS.map(() => []);
  for (let i = 0; i < INVOCATIONS; i++) {
    const [m, b, one, four, c] = invoke(api);
    medians.push(m);
    bests.push(b);
    timings.push(`one ${one}, four ${four}`);
    for (const [k, ratio] of c.entries()) controls[k].push(ratio);
  }
  const within = (xs) => xs.filter((x) => x <= TARGET).length;
  const show = (xs) => xs.map((x) => x.toFixed(2)).join(', ');
  const name = api === 'columns' ? 'evalColumns' : 'evalBatch';
  console.log(`${name}:`);
  console.log(
    `  best of 3 against best of 3: ${show(bests)} — at or under ${TARGET} in ${within(bests)} of ${bests.length}, median ${median(bests).toFixed(2)}`,
  );
  console.log(
    `  median against median:       ${show(medians)} — at or under ${TARGET} in ${within(medians)} of ${medians.length}, median ${median(medians).toFixed(2)}`,
  );
  CONTROLS.forEach((control, k) => {
    const xs = controls[k];
    const what = control === 'again' ? 'one again / one' : 'two / one';
    console.log(
      `  ${what.padEnd(15)} best of 3:   ${show(xs)} — at or under ${TARGET} in ${within(xs)} of ${xs.length}, median ${median(xs).toFixed(2)}`,
    );
  });
  console.log(`  ms (min/median/max of each invocation's runs): ${timings.join('; ')}`);
}
console.log(`load average after ${load()}`);
