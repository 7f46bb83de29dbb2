// A fresh worker's first requests, against dist/: the CPU time and minor
// page faults its own process spends on each of a sequence of evalColumns
// requests (1, 1, 64, 4096, 32 768, 32 768 rows of two number columns), read
// from /proc (schedstat, stat) before and after each, for a worker cloned
// from the zygote and for one started as a tree (IMPROV_EXTFN_ZYGOTE=0).
// What a refresh of several functions pays once per function: a worker
// cloned later than another costs its function this much more than a warm
// one. The last request is a warm worker's, for comparison. Before them, the
// start itself: the worker's own CPU and faults up to its `load` answer (a
// clone's steps and its body compiled, or a tree's interpreter boot), the
// zygote's CPU over that start (the clone), and this host process's.
// Run: node packages/python/bench/fresh-worker.mjs
// BENCH_RUNS=5 workers per side; BENCH_BASE=/path/to/other/python/dist/index.js
// measures that build too, alternating with this one.
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { Registry } from '@improv/extfn-core';
import { python as current } from '../dist/index.js';

const RUNS = Number(process.env.BENCH_RUNS ?? 5);
const PYTHON = process.env.IMPROV_EXTFN_PYTHON ?? '/usr/bin/python3';
const SIZES = [1, 1, 64, 4096, 32_768, 32_768];
const BUILDS = [['', current]];
if (process.env.BENCH_BASE) {
  BUILDS.unshift(['base ', (await import(process.env.BENCH_BASE)).python]);
  BUILDS[1][0] = 'new  ';
}

/** CPU ms (schedstat, ns) and minor faults of one process. */
function usage(pid) {
  const cpu = Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]) / 1e6;
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const faults = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[7]);
  return { cpu, faults };
}

/** The zygote's interpreter pid, as the last runner that forked from it named it. */
let lastZygote;

/** The zygote's interpreter: the first Python under its tree's pid (its workers are below it). */
function zygotePid(runner) {
  const m = /pid (\d+)/.exec(runner.stats().zygote ?? '');
  let pid = m ? Number(m[1]) : undefined;
  while (pid && !readFileSync(`/proc/${pid}/comm`, 'utf8').startsWith('python'))
    pid = firstChild(pid);
  return pid;
}

/** A process's first child, or undefined. */
function firstChild(pid) {
  try {
    const child = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/)[0];
    return child ? Number(child) : undefined;
  } catch {
    return undefined;
  }
}

/** The process of the worker's tree that runs the interpreter (its deepest). */
function interpreterPid(pid) {
  for (let child = firstChild(pid); child !== undefined; child = firstChild(pid)) pid = child;
  return pid;
}

const columns = (n) => [Float64Array.from({ length: n }, (_, i) => i), new Float64Array(n).fill(1)];

/** One new runner's one worker: [cpu ms, faults] per request of SIZES. */
async function measure(python, zygote, boot) {
  if (zygote) delete process.env.IMPROV_EXTFN_ZYGOTE;
  else process.env.IMPROV_EXTFN_ZYGOTE = '0';
  const runner = python({ interpreter: PYTHON, policy: 'restricted', maxWorkers: 2 });
  const registry = new Registry({ runners: [runner], cache: false, timeoutMs: 30_000 });
  // One function measured: a tree, or a clone of the zygote an earlier runner
  // of this process left idle. `boot`: three more warmed up at once first,
  // whose overlapping starts boot that zygote (a runner's first start alone is a tree).
  for (const name of ['a', ...(boot ? ['b', 'c', 'd'] : [])]) {
    registry.register({
      name,
      language: 'python',
      body: `result = args[0] + args[1]${name === 'a' ? '' : ` + ${JSON.stringify(name)}.count('x')`}`,
      argTypes: ['number', 'number'],
      returnType: 'number',
      pure: true,
    });
  }
  if (boot) await registry.warmUp(['b', 'c', 'd']);
  // the idle zygote an earlier runner left (this one names it once it has forked)
  const parent = zygote ? lastZygote : undefined;
  const parent0 = parent && usage(parent);
  const host0 = process.cpuUsage();
  await registry.warmUp(['a']);
  const host = process.cpuUsage(host0);
  if (zygote) lastZygote = zygotePid(runner);
  const pid = interpreterPid(runner.workerPids().at(-1));
  let before = usage(pid);
  const start = {
    worker: [before.cpu, before.faults],
    zygote: parent0 ? usage(parent).cpu - parent0.cpu : Number.NaN,
    host: (host.user + host.system) / 1000,
  };
  const out = [];
  for (const n of SIZES) {
    const { values } = await registry.evalColumns('a', columns(n));
    if (values[n - 1] !== n) throw new Error(`wrong result ${values[n - 1]} for row ${n - 1}`);
    const after = usage(pid);
    out.push([after.cpu - before.cpu, after.faults - before.faults]);
    before = after;
  }
  const { zygoteStarts } = runner.stats();
  await registry.close();
  return { out, start, forked: (zygoteStarts ?? 0) > 0 };
}

const f = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return `${s[0].toFixed(2)}/${s[s.length >> 1].toFixed(2)}/${s.at(-1).toFixed(2)}`;
};
const load = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');
const loadBefore = load();
const samples = new Map();
for (let run = -1; run < RUNS; run++) {
  for (const [label, python] of run % 2 ? [...BUILDS].reverse() : BUILDS) {
    for (const zygote of [true, false]) {
      // the untimed run's zygote side boots the zygote: its one worker is a tree
      const { out, start, forked } = await measure(python, zygote, zygote && run < 0);
      const side = `${label}${forked ? 'cloned from the zygote' : 'a tree'}`;
      if (run < 0) continue; // untimed: this process's code compiled, the zygote booted
      if (!samples.has(side)) samples.set(side, []);
      samples.get(side).push({ out, start });
    }
  }
}
console.log(
  `a fresh worker's own CPU ms and minor faults per request (min/median/max of ${RUNS} workers); load average before ${loadBefore}`,
);
for (const [side, runs] of samples) {
  console.log(`  ${side}:`);
  const starts = runs.map((r) => r.start);
  const zygoteCpu = starts.some((s) => Number.isNaN(s.zygote))
    ? ''
    : `, the zygote's CPU ${f(starts.map((s) => s.zygote))} ms`;
  console.log(
    `    its start (to its load answer): CPU ${f(starts.map((s) => s.worker[0]))} ms, faults ${f(starts.map((s) => s.worker[1])).replace(/\.00/g, '')}${zygoteCpu}, this process's CPU ${f(starts.map((s) => s.host))} ms`,
  );
  SIZES.forEach((n, k) => {
    const cpu = runs.map((r) => r.out[k][0]);
    const faults = runs.map((r) => r.out[k][1]);
    const note = k === SIZES.length - 1 ? ' (warm)' : '';
    console.log(
      `    ${String(n).padStart(6)} rows${note}: CPU ${f(cpu)} ms, faults ${f(faults).replace(/\.00/g, '')}`,
    );
  });
}
console.log(`load average after ${load()}`);
