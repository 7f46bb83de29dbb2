// The first refresh of a new host process, against dist/: what a script run
// once, or an engine, meets before anything of the process is warm. Every
// round starts fresh Node processes (this file again, as a child), each
// kind first in turn:
//   first   — a new process's first Registry: one function × ROWS rows
//             registered and refreshed at once (evalBatch), timed from
//             `new Registry` to the results (and, before it, the time from
//             the process's start to the runner's modules loaded); then, in the same process, a
//             second new Registry the same way (what refresh.mjs and
//             bench:peers time as "cold": what lives once per host process
//             is there by then);
//   made    — a new process's Registry made and its function registered
//             300 ms before the refresh (an engine loading its model), the
//             refresh timed;
//   warmUp  — a new process whose Registry runs `warmUp()` at once (timed),
//             then the same refresh (timed);
//   parts   — a new process timing, one after another, what the first call
//             of a process does once: the sandbox's probe (bwrap's version,
//             the chain shell's probe, a trial tree), the spawner's start,
//             and the runner's probe() (the interpreter lookup, a run);
//   one4, four — a new process's first Registry (2 slots), registered and
//             refreshed at once: one function × 4 × ROWS rows, or four
//             functions × ROWS rows each at once; printed as four / one (the
//             issue's four-function target with nothing of the process warm:
//             no zygote idles in a new process, so four boots one).
// Prints min/median/max over the rounds and the load average.
// Run: node packages/python/bench/first-call.mjs   (BENCH_RUNS=5 rounds,
// BENCH_ROWS=100000, BENCH_KINDS=first,made,warmUp,parts,one4,four)
// BENCH_BASE=/path/to/other/checkout/packages/python/dist/index.js runs the
// same on that build too (its own core and sandbox), alternating with this
// one in every round, and prints base / new for each figure.
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { loadavg } from 'node:os';
import { fileURLToPath, pathToFileURL } from 'node:url';

const PYTHON = process.env.IMPROV_EXTFN_PYTHON ?? '/usr/bin/python3';
const ROWS = Number(process.env.BENCH_ROWS ?? 100_000);
const RUNS = Number(process.env.BENCH_RUNS ?? 5);
const SELF = fileURLToPath(import.meta.url);

/** A fresh process of `kind`: its figures (ms) as JSON on stdout. */
async function child(kind) {
  // the runner's build and the core and sandbox it depends on
  const dist =
    process.env.BENCH_FIRST_CALL_DIST ??
    fileURLToPath(new URL('../dist/index.js', import.meta.url));
  const near = (name) => import(pathToFileURL(createRequire(dist).resolve(name)).href);
  const { Registry, Value } = await near('@improv/extfn-core');
  const { python } = await import(pathToFileURL(dist).href);
  // ms since this Node process started: its own start, then loading core, sandbox, interpreter and python
  const imported = performance.now();
  const rows = Array.from({ length: ROWS }, (_, i) => [Value.number(i), Value.number(0.5)]);
  const settle = () => new Promise((resolve) => setTimeout(resolve, 100));
  const make = () => {
    const registry = new Registry({ runners: [python({ interpreter: PYTHON })], cache: false });
    registry.register({
      name: 'f',
      language: 'python',
      body: 'result = args[0] + args[1]',
      argTypes: ['number', 'number'],
      returnType: 'number',
      pure: true,
    });
    return registry;
  };
  /** One refresh: total and first results, ms from `t0`. */
  const refresh = async (registry, t0) => {
    let first;
    const out = await registry.evalBatch('f', rows, {
      onProgress: (done) => {
        if (done > 0 && first === undefined) first = performance.now() - t0;
      },
    });
    if (out.length !== ROWS || out[ROWS - 1].value !== ROWS - 0.5) throw new Error('wrong results');
    return { total: performance.now() - t0, first };
  };
  await settle();
  if (kind === 'one4' || kind === 'four') {
    const names = kind === 'four' ? ['f0', 'f1', 'f2', 'f3'] : ['f0'];
    const n = kind === 'four' ? ROWS : 4 * ROWS;
    const input = Array.from({ length: n }, (_, i) => [Value.number(i), Value.number(0.5)]);
    const t0 = performance.now();
    const runner = python({ interpreter: PYTHON, maxWorkers: 2 });
    const registry = new Registry({ runners: [runner], cache: false });
    names.forEach((name, k) => {
      registry.register({
        name,
        language: 'python',
        body: `result = args[0] + args[1] + ${k}`,
        argTypes: ['number', 'number'],
        returnType: 'number',
        pure: true,
      });
    });
    const outs = await Promise.all(names.map((name) => registry.evalBatch(name, input)));
    const total = performance.now() - t0;
    outs.forEach((out, k) => {
      if (out.length !== n || out[n - 1].value !== n - 0.5 + k) throw new Error('wrong results');
    });
    await registry.close();
    const what = kind === 'four' ? `four functions × ${ROWS}` : `one function × ${4 * ROWS}`;
    return { [`first registry, ${what} rows, 2 slots: total`]: total };
  }
  if (kind === 'made') {
    // the Registry made (an engine's start), then a pause (its model loading), then the refresh
    const registry = make();
    await new Promise((resolve) => setTimeout(resolve, 300));
    const t0 = performance.now();
    const { total, first } = await refresh(registry, t0);
    await registry.close();
    return { 'made 300 ms before: total': total, 'made 300 ms before: first results': first };
  }
  if (kind === 'first') {
    const figures = { 'process start to the runner imported': imported };
    for (const label of ['first', 'second']) {
      const t0 = performance.now();
      const registry = make();
      const { total, first } = await refresh(registry, t0);
      figures[`${label} registry: total`] = total;
      figures[`${label} registry: first results`] = first;
      await registry.close();
      await settle();
    }
    return figures;
  }
  if (kind === 'warmUp') {
    let t0 = performance.now();
    const registry = make();
    await registry.warmUp();
    const warm = performance.now() - t0;
    await settle();
    t0 = performance.now();
    const { total, first } = await refresh(registry, t0);
    await registry.close();
    return {
      'warmUp()': warm,
      'refresh after warmUp: total': total,
      'refresh after warmUp: first results': first,
    };
  }
  const { probeSandbox, spawnerReady } = await near('@improv/extfn-sandbox');
  let t0 = performance.now();
  const probe = await probeSandbox({ policy: 'restricted' });
  if (!probe.ok) throw new Error(`no Restricted sandbox here: ${probe.problem}`);
  const probeMs = performance.now() - t0;
  t0 = performance.now();
  await spawnerReady();
  const spawnerMs = performance.now() - t0;
  // the runner's probe(): the lookup (and the driver's compilation it starts), and a call
  const runner = python({ interpreter: PYTHON });
  t0 = performance.now();
  const found = await runner.probe();
  const probeRunner = performance.now() - t0;
  await runner.close?.();
  if (!found.available) throw new Error(`python unavailable: ${found.detail}`);
  return {
    'sandbox probe (bwrap --version, chain shell, trial tree)': probeMs,
    'spawner ready': spawnerMs,
    'python runner probe() after them (lookup, a one-shot run)': probeRunner,
  };
}

if (process.env.BENCH_FIRST_CALL_CHILD) {
  const figures = await child(process.env.BENCH_FIRST_CALL_CHILD);
  process.stdout.write(JSON.stringify(figures));
  process.exit(0);
}

const load = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');
const before = load();
const KINDS = (process.env.BENCH_KINDS ?? 'first,made,warmUp,parts,one4,four').split(',');
/** [label prefix, dist]: this build, and the base before it when asked for. */
const BUILDS = process.env.BENCH_BASE
  ? [
      ['base ', process.env.BENCH_BASE],
      ['new  ', undefined],
    ]
  : [['', undefined]];
/** label → samples (ms) */
const samples = new Map();
for (let run = 0; run < RUNS; run++) {
  for (let k = 0; k < KINDS.length; k++) {
    const kind = KINDS[(k + run) % KINDS.length]; // each kind first in turn
    const builds = run % 2 ? [...BUILDS].reverse() : BUILDS; // each build first in turn
    for (const [prefix, dist] of builds) {
      const out = execFileSync(process.execPath, [SELF], {
        env: {
          ...process.env,
          BENCH_FIRST_CALL_CHILD: kind,
          ...(dist ? { BENCH_FIRST_CALL_DIST: dist } : {}),
        },
        encoding: 'utf8',
      });
      for (const [label, ms] of Object.entries(JSON.parse(out))) {
        const key = `${prefix}${label}`;
        if (!samples.has(key)) samples.set(key, []);
        samples.get(key).push(ms);
      }
    }
  }
}
const f = (x) => x.toFixed(0);
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
console.log(
  `the first call of a new host process: one Python function × ${ROWS} rows (evalBatch), ` +
    `${RUNS} rounds of fresh processes; ms as min/median/max`,
);
const pairs = BUILDS.length === 2; // base and new: each figure's two lines together
const ordered = pairs
  ? [...samples].sort(([a], [b]) => a.slice(5).localeCompare(b.slice(5)))
  : [...samples];
for (const [label, xs] of ordered) {
  const s = [...xs].sort((a, b) => a - b);
  console.log(`  ${label.padEnd(66)} ${f(s[0])}/${f(median(s))}/${f(s[s.length - 1])}`);
}
for (const [prefix] of BUILDS) {
  const one = samples.get(
    `${prefix}first registry, one function × ${4 * ROWS} rows, 2 slots: total`,
  );
  const four = samples.get(
    `${prefix}first registry, four functions × ${ROWS} rows, 2 slots: total`,
  );
  if (one && four)
    console.log(
      `  ${prefix}four / one in a new process: ${(median(four) / median(one)).toFixed(2)} medians, ` +
        `${(Math.min(...four) / Math.min(...one)).toFixed(2)} best`,
    );
}
if (pairs) {
  for (const [label, xs] of samples) {
    if (!label.startsWith('new  ')) continue;
    const base = samples.get(`base ${label.slice(5)}`);
    if (base)
      console.log(
        `  base / new, medians: ${label.slice(5).padEnd(52)} ${(median(base) / median(xs)).toFixed(2)}`,
      );
  }
}
console.log(`load average before ${before}, after ${load()}`);
