// Turns between functions, without interpreters or CPU contention: the real
// scheduler, dispatch and pool of dist/, with fake workers whose requests
// sleep their rows' cost (timers: no CPU, so what is measured is the order in
// which functions get the slots, not this machine's noise). 2 slots, starts
// from a zygote (forks: none waits for another), a row costs ROW_MS.
//   four     — four functions of 10^5 rows (40 ms of work each) at once, cold:
//              the first worker (a tree) ready at 40 ms, the others (forks)
//              at 80 ms, as on a 2-core VM;
//   mixed    — one function of 4 × 10^5 rows and two of 10^5, warm (every
//              worker and time per row known from an earlier batch): the
//              large one bounds the refresh, every turn it gives makes it later;
//   mixcold  — the same three cold, starts as in `four`.
// Run: node packages/interpreter/bench/turns.mjs
// BENCH_BASE=/path/to/other/interpreter/dist runs the same cases on that
// build too, alternating. Prints per case and build min/median/max of the
// refresh's wall time over BENCH_RUNS runs (default 7) and how far apart the
// functions finished (last end − first end). The least each could take:
// `four` ~140 ms (one worker from 40 ms, all four from 80: 40 + 4 × 40 / 2),
// `mixed` ~160 ms (the large function's work), `mixcold` ~200 ms (40 + 160);
// each fake request also pays a timer's ~1 ms.
import { loadavg } from 'node:os';

const RUNS = Number(process.env.BENCH_RUNS ?? 7);
const ROW_MS = 0.0004;
const builds = [['', new URL('../dist/', import.meta.url).href]];
if (process.env.BENCH_BASE) {
  builds.unshift(['base ', `file://${process.env.BENCH_BASE.replace(/\/?$/, '/')}`]);
  builds[1][0] = 'new  ';
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const fn = (name) => ({
  name,
  language: 'fake',
  body: name,
  argTypes: ['number'],
  returnType: 'number',
  pure: false,
});

/** A worker answering each row with its index after count × ROW_MS; its own time as workMs. */
class FakeWorker {
  static nextPid = 1;
  pid = FakeWorker.nextPid++;
  alive = true;
  requests = 0;
  busyMs = 0;
  constructor(key) {
    this.key = key;
  }
  async request(header) {
    const t0 = performance.now();
    await sleep(header.count * ROW_MS);
    const ms = performance.now() - t0;
    this.requests++;
    this.busyMs += ms;
    return {
      header: { values: Array.from({ length: header.count }, (_, k) => header.start + k) },
      elapsedMs: ms,
      workMs: ms,
    };
  }
  leftWork() {
    return undefined;
  }
  async retire() {
    this.alive = false;
  }
  async stop() {
    this.alive = false;
  }
  async kill() {
    this.alive = false;
  }
}

/** The runner's wiring (src/runner.ts) around a build's Pool, schedule and dispatch. */
async function fakeRunner(dist, startMs) {
  const { Pool } = await import(`${dist}pool.js`);
  const { schedule } = await import(`${dist}scheduler.js`);
  const { dispatch, endLease, toExtFnError } = await import(`${dist}dispatch.js`);
  let started = 0;
  const pool = new Pool(2, 30_000, async (key) => {
    await sleep(startMs(started++));
    return new FakeWorker(key);
  });
  pool.startsFork = () => true;
  const dispatchContext = { pool, maxOutputBytes: 1 << 20, retireAfterBusyMs: Infinity };
  const ctx = {
    lanes: pool.max,
    chunkMs: 5,
    perRowMs: new Map(),
    request: (f, key, request) => dispatch(dispatchContext, f, key, request),
    endLease: (lease) => endLease(pool, lease),
    trackBacklog: (key, estimateMs, leftMs) => pool.trackBacklog(key, estimateMs, leftMs),
    wouldServe: (key, idleOnly) => pool.wouldServe(key, idleOnly),
    mayQueue: () => false,
    toError: toExtFnError,
  };
  const refresh = (name, n) => {
    const source = {
      count: n,
      encode: (start, count) => ({ header: { op: 'call', start, count } }),
      decode() {},
      fail() {},
    };
    return schedule(ctx, fn(name), name, source, { timeoutMs: 10_000 });
  };
  return { pool, refresh };
}

/** Refreshes `sizes` ({ name: rows }) at once; wall time and how far apart they ended. */
async function timed(runner, sizes, prestart) {
  const t0 = performance.now();
  const ends = await Promise.all(
    Object.entries(sizes).map(([name, n]) => {
      if (prestart) runner.pool.prestart(name, fn(name));
      return runner.refresh(name, n).then(() => performance.now());
    }),
  );
  return { ms: performance.now() - t0, apart: Math.max(...ends) - Math.min(...ends) };
}

const staggered = (k) => (k === 0 ? 40 : 80);
const CASES = {
  four: async (dist) =>
    timed(await fakeRunner(dist, staggered), { a: 1e5, b: 1e5, c: 1e5, d: 1e5 }, true),
  mixed: async (dist) => {
    const runner = await fakeRunner(dist, () => 10);
    const sizes = { a: 4e5, b: 1e5, c: 1e5 };
    await Promise.all(Object.keys(sizes).map((name) => runner.refresh(name, 1_000)));
    return timed(runner, sizes, false);
  },
  mixcold: async (dist) =>
    timed(await fakeRunner(dist, staggered), { a: 4e5, b: 1e5, c: 1e5 }, true),
};

const samples = new Map();
const before = loadavg();
for (let run = 0; run < RUNS; run++) {
  for (const [name, runCase] of Object.entries(CASES)) {
    for (const [label, dist] of run % 2 ? [...builds].reverse() : builds) {
      const key = `${label}${name}`;
      if (!samples.has(key)) samples.set(key, []);
      samples.get(key).push(await runCase(dist));
    }
  }
}
const mmm = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return `${s[0].toFixed(0)}/${s[s.length >> 1].toFixed(0)}/${s[s.length - 1].toFixed(0)}`;
};
console.log(`fake workers, 2 slots, ${RUNS} runs; ms as min/median/max`);
for (const [key, xs] of samples) {
  console.log(
    `${key.padEnd(14)} total ${mmm(xs.map((x) => x.ms)).padEnd(12)} ends apart ${mmm(xs.map((x) => x.apart))}`,
  );
}
const after = loadavg();
console.log(
  `load average before ${before.map((x) => x.toFixed(2)).join(' ')}, after ${after.map((x) => x.toFixed(2)).join(' ')}`,
);
