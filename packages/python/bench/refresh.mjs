// Refresh benchmark of the Python runner, against dist/: how the pool shares
// its slots. Run: node packages/python/bench/refresh.mjs
// Side by side in one run, for maxWorkers 2 and 4, each on a new Registry:
//   cold   — one function over ROWS rows (new Registry → results: interpreter
//            found, sandbox probed, workers started);
//   one    — one function over 4 × ROWS rows;
//   four   — four functions over ROWS rows each, refreshed concurrently;
//   many   — sixteen functions over ROWS / 4 rows each, refreshed
//            concurrently: a model's refresh, a worker start per function;
//   mixed  — (only when asked for) three functions refreshed at once, one
//            over 4 × ROWS rows and two over ROWS: the large one bounds the
//            refresh, so every turn it gives the others makes it later;
//   two    — (only when asked for) two functions over 2 × ROWS rows each: as
//            many workers as `one` at 2 slots, so `four` against it shows
//            what its further starts cost;
//   warmed — (only when asked for) `four` on a new Registry after
//            `registry.warmUp()` (what an engine calls when it loads a
//            model), the warmUp timed on its own;
// then the same `one` and `four` again on the same Registry (warm: workers
// kept). For each: wall time, time to the first results (onProgress), for
// several functions how far apart they finished (`ends apart`: the last
// one's end minus the first one's; 0 for one function), and
// the interpreters started (runner.stats().started), and this process's own
// CPU time (with its spawner's: the process that starts trees for it), minor
// page faults and garbage collection during it, the workers' CPU time, and the
// whole machine's (a zygote's included, which no worker's tree counts).
// RUNS timed runs follow one untimed run of every case (this process's code
// compiled, as in an engine that has refreshed before); every other run takes
// the cases in the other order.
// Prints min/median/max over RUNS and the load average, and four / one as a
// ratio of medians and of bests (the issue's targets are best of 3).
// BENCH_CASES=cold,one,four,many picks cases (the default; also two, mixed, warmed,
// and again: `one` once more, cold, as a control of the measurement's own spread); BENCH_SLOTS=2,4 the pool sizes.
// BENCH_BASE=/path/to/other/python/dist/index.js runs the same cases on that
// build too, alternating with this one in each run, each first in every other run (a baseline side by side).
// BENCH_TREES=1 instead runs this build twice the same way: with a tree per
// worker (IMPROV_EXTFN_ZYGOTE=0) and as configured (the zygote's forks).
// BENCH_TIMELINE=1 prints, for each refresh of the first run, a timeline per
// worker: its start, ready, chunks (count, rows, first and last, idle gaps
// between chunks) and end, in ms from the refresh's start, and when this
// process's event loop was held more than 4 ms (its work, a collection, or the
// CPU given to other processes); BENCH_TIMELINE_CHUNKS=N lists N chunks a
// worker (4 by default).
// BENCH_API=columns refreshes through evalColumns (two Float64Array columns
// in, one out) instead of evalBatch's Value rows.
// BENCH_GAP_MS=N waits N ms before every case (0 by default: back to back),
// as an engine's refreshes have idle time between them: a zygote makes its
// spare workers only while nothing is under way (interpreter/src/spare-workers.ts),
// so back to back its cold cases start no spare but fork every worker.
// BENCH_NEW_BODIES=1 gives every new Registry bodies this process has not
// run before (a comment that differs): what this process learnt of a body's
// time per row (interpreter/src/timings.ts) is then of no use, and its
// batches start from one-row chunks, as a model's first refresh does.
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { PerformanceObserver, constants as perf } from 'node:perf_hooks';
import { Registry, Value } from '@improv/extfn-core';
import * as sandbox from '@improv/extfn-sandbox';

const { probeSandbox, readProcessTree } = sandbox;

import { python as current } from '../dist/index.js';

/** [label, runner factory, IMPROV_EXTFN_ZYGOTE for its cases (undefined: as the environment has it)]. */
const VARIANTS = [['', current, process.env.IMPROV_EXTFN_ZYGOTE]];
if (process.env.BENCH_BASE) {
  VARIANTS.unshift(['base ', (await import(process.env.BENCH_BASE)).python, VARIANTS[0][2]]);
  VARIANTS[1][0] = 'new  ';
} else if (process.env.BENCH_TREES === '1') {
  VARIANTS.splice(0, 1, ['trees  ', current, '0'], ['zygote ', current, undefined]);
}

const ROWS = Number(process.env.BENCH_ROWS ?? 100_000);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const SLOTS = (process.env.BENCH_SLOTS ?? '2,4').split(',').map(Number);
const PYTHON = process.env.IMPROV_EXTFN_PYTHON ?? '/usr/bin/python3';
const NAMES = Array.from({ length: 16 }, (_, k) => `f${k}`);
const CASES = new Set((process.env.BENCH_CASES ?? 'cold,one,four,many').split(','));
const TIMELINE = process.env.BENCH_TIMELINE === '1';
const NEW_BODIES = process.env.BENCH_NEW_BODIES === '1';
const GAP_MS = Number(process.env.BENCH_GAP_MS ?? 0);
/** Registries made so far: a new body's comment (BENCH_NEW_BODIES). */
let registries = 0;

const probe = await probeSandbox({ policy: 'restricted' });
const policy = probe.ok ? 'restricted' : 'trusted';

const COLUMNS = process.env.BENCH_API === 'columns';
/** n rows of (i, 0.5): Value rows for evalBatch, or two Float64Array columns (BENCH_API=columns). */
const rowsFor = (n) =>
  COLUMNS
    ? [Float64Array.from({ length: n }, (_, i) => i), new Float64Array(n).fill(0.5)]
    : Array.from({ length: n }, (_, i) => [Value.number(i), Value.number(0.5)]);
const rows = rowsFor(ROWS);
const rows4 = rowsFor(4 * ROWS);
const rows2 = CASES.has('two') ? rowsFor(2 * ROWS) : undefined;
const rows16 = CASES.has('many') ? rowsFor(ROWS / 4) : undefined;

/** A new runner and Registry with the functions `names` (f0…): what `warmUp()` starts. */
function makeRegistry(python, maxWorkers, names) {
  const runner = python({ interpreter: PYTHON, policy, maxWorkers });
  const registry = new Registry({ runners: [runner], cache: false, timeoutMs: 30_000 });
  const unseen = NEW_BODIES ? `  # registry ${++registries}` : '';
  names.forEach((name, k) => {
    registry.register({
      name,
      language: 'python',
      body: `result = args[0] + args[1] + ${k}${unseen}`,
      argTypes: ['number', 'number'],
      returnType: 'number',
      pure: true,
    });
  });
  return { runner, registry };
}

function check(results, k) {
  for (let i = 0; i < results.length; i += 997) {
    if ((COLUMNS ? results[i] : results[i].value) !== i + 0.5 + k) {
      throw new Error(`row ${i}: wrong result ${JSON.stringify(results[i])}`);
    }
  }
}

/**
 * Logs the pool's events and every request of every worker, in ms from
 * `clock.t0`, through the pool's observer and its acquire (the harness's
 * seams: nothing in the runner is timed differently).
 */
function traced(runner) {
  const clock = { t0: performance.now(), log: [], names: new Map() };
  const at = () => performance.now() - clock.t0;
  const pool = runner.pool;
  pool.observer = (event) => clock.log.push({ t: at(), ...event });
  let last = performance.now();
  clock.ticker = setInterval(() => {
    const now = performance.now();
    if (now - last > 4) clock.log.push({ t: last - clock.t0, end: now - clock.t0, type: 'stall' });
    last = now;
  }, 1);
  const acquire = pool.acquire.bind(pool);
  const seen = new WeakSet();
  pool.acquire = async (...args) => {
    const worker = await acquire(...args);
    clock.names.set(args[0], args[1].name);
    if (!seen.has(worker)) {
      seen.add(worker);
      const request = worker.request.bind(worker);
      worker.request = async (header, ...rest) => {
        const t = at();
        try {
          return await request(header, ...rest);
        } finally {
          const rows = typeof header.rows === 'number' ? header.rows : Number.NaN;
          clock.log.push({ t, end: at(), type: 'chunk', key: worker.key, pid: worker.pid, rows });
        }
      };
    }
    return worker;
  };
  return clock;
}

/** One line per worker: start → ready, chunks, the idle time between them, stop → freed. */
function printTimeline(label, { log, names, t0 }, ms, gcs) {
  const workers = new Map();
  const pending = new Map(); // starts not ready yet, by function
  for (const e of log) {
    if (e.type === 'start') {
      const list = pending.get(e.key) ?? [];
      list.push(e.t);
      pending.set(e.key, list);
    } else if (e.type === 'ready') {
      workers.set(e.pid, {
        key: e.key,
        start: pending.get(e.key)?.shift(),
        ready: e.t,
        chunks: [],
      });
    } else if (e.type === 'chunk') {
      const w = workers.get(e.pid) ?? { key: e.key, chunks: [] };
      w.chunks.push(e);
      workers.set(e.pid, w);
    } else if (e.type === 'stop' || e.type === 'freed') {
      const w = workers.get(e.pid);
      if (w) w[e.type] = e.t;
    }
  }
  const f = (x) => (x === undefined ? '—' : x.toFixed(0));
  const name = (key) => names.get(key) ?? key.slice(0, 6);
  console.log(`  timeline: ${label}, ${ms.toFixed(0)} ms`);
  console.log(
    `    event loop held > 4 ms: ${log
      .filter((e) => e.type === 'stall')
      .map((e) => `${e.t.toFixed(0)}-${e.end.toFixed(0)}`)
      .join(' ')}`,
  );
  console.log(
    `    garbage collections: ${gcs
      .map(([start, duration, kind]) => `${kind}@${(start - t0).toFixed(0)}+${duration.toFixed(0)}`)
      .join(' ')}`,
  );
  for (const [pid, w] of workers) {
    const c = w.chunks;
    const rows = c.reduce((sum, x) => sum + x.rows, 0);
    let gaps = 0;
    for (let i = 1; i < c.length; i++) gaps += c[i].t - c[i - 1].end;
    const busy = c.reduce((sum, x) => sum + x.end - x.t, 0);
    console.log(
      `    ${name(w.key)} pid ${pid}: start ${f(w.start)} ready ${f(w.ready)} | ${c.length} chunks ${rows} rows ` +
        `${f(c[0]?.t)}→${f(c.at(-1)?.end)} busy ${f(busy)} gaps ${f(gaps)} | first ${c
          .slice(0, Number(process.env.BENCH_TIMELINE_CHUNKS ?? 4))
          .map((x) => `${x.rows}@${f(x.t)}-${f(x.end)}`)
          .join(' ')} | stop ${f(w.stop)} freed ${f(w.freed)}`,
    );
  }
}

/**
 * CPU ms the whole machine has spent so far (every core's user, system and
 * interrupt time from /proc/stat): what a refresh costs all its processes —
 * the host, its spawner, bwrap, interpreters, a zygote — on a quiet machine.
 */
function machineCpu() {
  const fields = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0].trim().split(/\s+/);
  const [user, nice, system, , , irq, softirq, steal] = fields.slice(1).map(Number);
  return (user + nice + system + irq + softirq + steal) * 10; // in 1/100 s
}

/**
 * This process's minor page faults so far. Every spawn forks the host, which
 * makes its whole heap copy-on-write until the child execs: each page the
 * host writes afterwards faults once (tens of µs each on a VM).
 */
function hostFaults() {
  const stat = readFileSync('/proc/self/stat', 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[7]);
}

/**
 * CPU seconds of each worker's process tree so far, by pid (the whole chain:
 * what ran before the interpreter exec'd in the same process). Less
 * sensitive to other load than wall time: host + workers CPU over the cores
 * is what a quiet machine's wall time tends to.
 */
/**
 * CPU ms of the spawner process that starts trees for this host (see
 * packages/sandbox/src/spawner.ts), counted with the host's own: it does
 * the host's spawning. 0 where there is none (a baseline built before it).
 */
function spawnerCpu() {
  const pid = sandbox.spawnerPid?.();
  if (pid === undefined) return 0;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100; // utime + stime, in 1/100 s
  } catch {
    return 0;
  }
}

function workerCpu(runner) {
  const out = new Map();
  for (const pid of runner.workerPids()) {
    const tree = readProcessTree(pid);
    if (tree) out.set(pid, tree.cpuSeconds);
  }
  return out;
}

const GC_KINDS = {
  [perf.NODE_PERFORMANCE_GC_MINOR]: 'minor',
  [perf.NODE_PERFORMANCE_GC_MAJOR]: 'major',
  [perf.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
  [perf.NODE_PERFORMANCE_GC_WEAKCB]: 'weak',
};
/** This process's garbage collections (start, duration in ms, kind), as the observer delivers them. */
const collections = [];
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    collections.push([e.startTime, e.duration, GC_KINDS[e.detail?.kind] ?? 'gc']);
  }
}).observe({ entryTypes: ['gc'] });
/** The garbage collections that began from `t0` for `ms` (once the observer has delivered them). */
async function collectionsIn(t0, ms) {
  await new Promise((resolve) => setTimeout(resolve, 0)); // the observer's entries delivered
  return collections.filter(([start]) => start >= t0 && start < t0 + ms);
}

/** Refreshes `jobs` ([name, rows] pairs) at once; wall time, first results, starts. */
async function refresh(runner, registry, jobs, label, clock) {
  const before = runner.stats().started;
  const sparesBefore = runner.stats().spareStarts ?? 0;
  const workers0 = workerCpu(runner);
  const faults0 = hostFaults();
  const cpu0 = process.cpuUsage();
  const spawner0 = spawnerCpu();
  const machine0 = machineCpu();
  const t0 = performance.now();
  if (clock) {
    clock.t0 = t0;
    clock.log.length = 0;
  }
  let first;
  const ends = [];
  const all = await Promise.all(
    jobs.map(([name, input]) => {
      const options = {
        onProgress: (done) => {
          if (done > 0 && first === undefined) first = performance.now() - t0;
        },
      };
      const ended = (results) => {
        ends.push(performance.now());
        return results;
      };
      if (!COLUMNS) return registry.evalBatch(name, input, options).then(ended);
      return registry.evalColumns(name, input, options).then(({ values, errors }) => {
        if (errors.size > 0) throw new Error(`${name}: ${[...errors.values()][0].message}`);
        return ended(values);
      });
    }),
  );
  const ms = performance.now() - t0;
  const machine = machineCpu() - machine0;
  all.forEach((results, j) => {
    check(results, NAMES.indexOf(jobs[j][0]));
  });
  const gcs = await collectionsIn(t0, ms);
  if (clock) printTimeline(label, clock, ms, gcs);
  const cpu = process.cpuUsage(cpu0);
  let workersCpu = 0;
  for (const [pid, seconds] of workerCpu(runner)) workersCpu += seconds - (workers0.get(pid) ?? 0);
  return {
    ms,
    first,
    apart: Math.max(...ends) - Math.min(...ends),
    starts: runner.stats().started - before,
    spares: (runner.stats().spareStarts ?? 0) - sparesBefore,
    faults: hostFaults() - faults0,
    hostCpu: (cpu.user + cpu.system) / 1000 + spawnerCpu() - spawner0,
    workersCpu: workersCpu * 1000,
    machineCpu: machine,
    gc: gcs.reduce((sum, [, duration]) => sum + duration, 0),
  };
}

const samples = new Map();
/** Whether what runs now is timed (not a warm-up run). */
let timing = true;
const add = (label, sample) => {
  if (!timing) return;
  if (!samples.has(label)) samples.set(label, []);
  samples.get(label).push(sample);
};

/** Runs one case on a new Registry: each of `rounds` ([label, jobs]) in turn, the first cold. */
async function runCase(python, slots, rounds, run, warmUp = false) {
  const used = new Set(rounds.flatMap(([, jobs]) => jobs.map(([name]) => name)));
  const { runner, registry } = makeRegistry(
    python,
    slots,
    NAMES.filter((name) => name === 'f0' || used.has(name)),
  );
  const clock = TIMELINE && run === 0 ? traced(runner) : undefined;
  if (warmUp) {
    // what an engine does when it loads the model: timed on its own, before the refresh
    const t0 = performance.now();
    const warmed = await registry.warmUp();
    if (!warmed.every((w) => w.warm)) throw new Error(`warmUp: ${JSON.stringify(warmed)}`);
    add(`${rounds[0][0]}: the warmUp before`, {
      ms: performance.now() - t0,
      first: Number.NaN,
      starts: runner.stats().started,
      faults: 0,
      hostCpu: 0,
      workersCpu: 0,
      machineCpu: Number.NaN,
      gc: Number.NaN,
    });
  }
  for (const [label, jobs] of rounds) {
    add(label, await refresh(runner, registry, jobs, label, clock));
  }
  if (clock) clearInterval(clock.ticker);
  await registry.close();
}

const loadBefore = loadavg();
// One untimed run of everything first: this host process's code is compiled
// by then, as in an engine that has run before (the first refresh of a fresh
// Node process is slower, whatever it refreshes).
for (let run = -1; run < RUNS; run++) {
  timing = run >= 0;
  for (const slots of SLOTS) {
    // With BENCH_BASE, each build first in every other run: the second of a pair tends to be faster here.
    for (const [v, python, zygote] of run % 2 ? [...VARIANTS].reverse() : VARIANTS) {
      // read at every worker start (zygoteEnabled)
      if (zygote === undefined) delete process.env.IMPROV_EXTFN_ZYGOTE;
      else process.env.IMPROV_EXTFN_ZYGOTE = zygote;
      const one = [['f0', rows4]];
      const four = NAMES.slice(0, 4).map((name) => [name, rows]);
      const cases = [];
      if (CASES.has('cold')) {
        cases.push(() =>
          runCase(
            python,
            slots,
            [[`${v}${slots} slots: cold, 1 fn × ${ROWS}`, [['f0', rows]]]],
            run,
          ),
        );
      }
      if (CASES.has('one')) {
        cases.push(() =>
          runCase(
            python,
            slots,
            [
              [`${v}${slots} slots: one fn × ${4 * ROWS}`, one],
              [`${v}${slots} slots: one fn × ${4 * ROWS} (warm)`, one],
            ],
            run,
          ),
        );
      }
      if (CASES.has('again')) {
        // `one` once more on a new Registry: again / one is what the measurement
        // itself moves by, the same work on both sides
        cases.push(() =>
          runCase(python, slots, [[`${v}${slots} slots: one fn × ${4 * ROWS} again`, one]], run),
        );
      }
      if (CASES.has('two')) {
        const two = [
          ['f0', rows2],
          ['f1', rows2],
        ];
        cases.push(() =>
          runCase(python, slots, [[`${v}${slots} slots: two fns × ${2 * ROWS}`, two]], run),
        );
      }
      if (CASES.has('four')) {
        cases.push(() =>
          runCase(
            python,
            slots,
            [
              [`${v}${slots} slots: four fns × ${ROWS}`, four],
              [`${v}${slots} slots: four fns × ${ROWS} (warm)`, four],
            ],
            run,
          ),
        );
      }
      if (CASES.has('mixed')) {
        const mixed = [
          ['f0', rows4],
          ['f1', rows],
          ['f2', rows],
        ];
        const label = `${v}${slots} slots: mixed, 1 fn × ${4 * ROWS} + 2 × ${ROWS}`;
        cases.push(() =>
          runCase(
            python,
            slots,
            [
              [label, mixed],
              [`${label} (warm)`, mixed],
            ],
            run,
          ),
        );
      }
      if (CASES.has('many')) {
        cases.push(() =>
          runCase(
            python,
            slots,
            [[`${v}${slots} slots: 16 fns × ${ROWS / 4}`, NAMES.map((name) => [name, rows16])]],
            run,
          ),
        );
      }
      if (CASES.has('warmed')) {
        cases.push(() =>
          runCase(
            python,
            slots,
            [[`${v}${slots} slots: four fns × ${ROWS} after warmUp`, four]],
            run,
            true,
          ),
        );
      }
      // the cases in the other order every other run: none always runs first
      for (const runIt of run % 2 ? cases.reverse() : cases) {
        if (GAP_MS > 0) await new Promise((resolve) => setTimeout(resolve, GAP_MS));
        await runIt();
      }
    }
  }
}
const loadAfter = loadavg();

const sorted = (xs) => [...xs].sort((a, b) => a - b);
const mmm = (xs) => {
  const s = sorted(xs);
  return `${s[0].toFixed(0)}/${s[Math.floor(s.length / 2)].toFixed(0)}/${s[s.length - 1].toFixed(0)}`;
};
console.log(
  `policy ${policy}, ${RUNS} runs after an untimed one, cases in turn first${NEW_BODIES ? ', bodies new to every Registry' : ''}${GAP_MS > 0 ? `, ${GAP_MS} ms idle before each case` : ''}; ms as min/median/max; starts as seen per run`,
);
for (const [label, xs] of samples) {
  const first = xs.map((x) => x.first ?? Number.NaN);
  console.log(
    `${label.padEnd(42)} total ${mmm(xs.map((x) => x.ms)).padEnd(16)} first results ${mmm(first).padEnd(14)} ends apart ${mmm(xs.map((x) => x.apart ?? Number.NaN)).padEnd(11)} starts ${xs.map((x) => (x.spares ? `${x.starts} (${x.spares} spare)` : x.starts)).join(',')}` +
      `  CPU ms host ${mmm(xs.map((x) => x.hostCpu))} workers ${mmm(xs.map((x) => x.workersCpu))} machine ${mmm(xs.map((x) => x.machineCpu))}, host faults ${mmm(xs.map((x) => x.faults))}, host GC ms ${mmm(xs.map((x) => x.gc))}`,
  );
}
const mid = (xs) => sorted(xs)[Math.floor(xs.length / 2)];
const cpuOf = (xs) => xs.map((x) => x.hostCpu + x.workersCpu);
for (const slots of CASES.has('one') && CASES.has('four') ? SLOTS : []) {
  for (const [v] of VARIANTS) {
    for (const warm of ['', ' (warm)']) {
      const one4 = samples.get(`${v}${slots} slots: one fn × ${4 * ROWS}${warm}`);
      const four4 = samples.get(`${v}${slots} slots: four fns × ${ROWS}${warm}`);
      const one = one4.map((x) => x.ms);
      const four = four4.map((x) => x.ms);
      const state = warm ? 'warm' : 'cold';
      console.log(
        `${v}${slots} slots: four / one (${state}) = ${(mid(four) / mid(one)).toFixed(2)} medians, ` +
          `${(Math.min(...four) / Math.min(...one)).toFixed(2)} best` +
          `; host + workers CPU ${(mid(cpuOf(four4)) / mid(cpuOf(one4))).toFixed(2)}, machine CPU ` +
          `${(mid(four4.map((x) => x.machineCpu)) / mid(one4.map((x) => x.machineCpu))).toFixed(2)} (medians)`,
      );
    }
  }
}
// Controls for four / one: the same one function again (the measurement's own
// spread), and two functions (as many workers as one, each function bound to
// its own) against one.
for (const slots of CASES.has('one') ? SLOTS : []) {
  for (const [v] of VARIANTS) {
    const one = samples.get(`${v}${slots} slots: one fn × ${4 * ROWS}`).map((x) => x.ms);
    for (const [name, label] of [
      ['again', `one fn × ${4 * ROWS} again`],
      ['two', `two fns × ${2 * ROWS}`],
    ]) {
      const other = samples.get(`${v}${slots} slots: ${label}`)?.map((x) => x.ms);
      if (!other) continue;
      console.log(
        `${v}${slots} slots: ${name} / one (cold) = ${(mid(other) / mid(one)).toFixed(2)} medians, ` +
          `${(Math.min(...other) / Math.min(...one)).toFixed(2)} best`,
      );
    }
  }
}
for (const slots of CASES.has('warmed') && CASES.has('one') ? SLOTS : []) {
  for (const [v] of VARIANTS) {
    const one = samples.get(`${v}${slots} slots: one fn × ${4 * ROWS}`).map((x) => x.ms);
    const four = samples
      .get(`${v}${slots} slots: four fns × ${ROWS} after warmUp`)
      .map((x) => x.ms);
    console.log(
      `${v}${slots} slots: four after warmUp / one cold = ${(mid(four) / mid(one)).toFixed(2)} medians, ` +
        `${(Math.min(...four) / Math.min(...one)).toFixed(2)} best`,
    );
  }
}
for (const slots of CASES.has('two') && CASES.has('four') ? SLOTS : []) {
  for (const [v] of VARIANTS) {
    const two = samples.get(`${v}${slots} slots: two fns × ${2 * ROWS}`).map((x) => x.ms);
    const four = samples.get(`${v}${slots} slots: four fns × ${ROWS}`).map((x) => x.ms);
    console.log(
      `${v}${slots} slots: four / two (cold) = ${(mid(four) / mid(two)).toFixed(2)} medians, ` +
        `${(Math.min(...four) / Math.min(...two)).toFixed(2)} best`,
    );
  }
}
const fmtLoad = (l) => l.map((x) => x.toFixed(2)).join(' ');
console.log(`load average before ${fmtLoad(loadBefore)}, after ${fmtLoad(loadAfter)}`);
