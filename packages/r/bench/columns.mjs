// Benchmark of callcols (binary columns of every type) against JSON `call`
// frames for R, side by side in one run, against dist/. Run: node bench/columns.mjs
// Two R bodies over ROWS rows: text `toupper(paste0(args[[1]], args[[2]]))` and
// datetime `args[[1]] + 86400`, each through evalBatch (rows of Values) and
// evalColumns (typed columns), on a runner with callcols (the default) and on
// one with JSON frames only (`f64: false`). Rows/s, min/median/max of RUNS
// runs after a warm-up, and the load average while it ran.
import { availableParallelism, loadavg } from 'node:os';
import { Registry, Value } from '@improv/extfn-core';
import { probeSandbox } from '@improv/extfn-sandbox';
import { r } from '../dist/index.js';

const ROWS = Number(process.env.BENCH_ROWS ?? 100_000);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const RSCRIPT = process.env.IMPROV_EXTFN_R || '/usr/bin/Rscript';

const probe = await probeSandbox({ policy: 'restricted' });
const policy = probe.ok ? 'restricted' : 'trusted';

const FNS = {
  upper: ['result <- toupper(paste0(args[[1]], args[[2]]))', ['text', 'text'], 'text'],
  nextDay: ['result <- args[[1]] + 86400', ['datetime'], 'datetime'],
};

const words = Array.from({ length: ROWS }, (_, i) => `row ${i} café`);
const suffix = Array.from({ length: ROWS }, (_, i) => `-${i % 97}`);
const start = Date.UTC(2020, 0, 1);
const instants = BigInt64Array.from(
  { length: ROWS },
  (_, i) => BigInt(start + i * 60_000) * 1_000_000n + BigInt(i % 1000) * 1000n,
);
const INPUTS = {
  upper: {
    rows: words.map((w, i) => [Value.text(w), Value.text(suffix[i])]),
    columns: [words, suffix],
  },
  nextDay: {
    rows: Array.from({ length: ROWS }, (_, i) => {
      const ns = instants[i];
      return [Value.datetime(new Date(Number(ns / 1_000_000n)), Number(ns % 1_000_000n))];
    }),
    columns: [instants],
  },
};

function makeRegistry(options) {
  const registry = new Registry({
    runners: [r({ interpreter: RSCRIPT, policy, ...options })],
    cache: false,
    timeoutMs: 30_000,
  });
  for (const [name, [body, argTypes, returnType]] of Object.entries(FNS)) {
    registry.register({ name, language: 'r', body, argTypes, returnType, pure: false });
  }
  return registry;
}

const sorted = (xs) => [...xs].sort((a, b) => a - b);
const fmt = (r) => (r >= 1e6 ? `${(r / 1e6).toFixed(2)} M/s` : `${(r / 1e3).toFixed(0)} k/s`);

const paths = { callcols: makeRegistry({}), json: makeRegistry({ f64: false }) };
const loads = [];
const results = [];
try {
  for (const name of Object.keys(FNS)) {
    for (const api of ['evalBatch', 'evalColumns']) {
      const rates = { callcols: [], json: [] };
      const run = async (path) => {
        const registry = paths[path];
        const { rows, columns } = INPUTS[name];
        const t0 = performance.now();
        const out =
          api === 'evalBatch'
            ? await registry.evalBatch(name, rows)
            : await registry.evalColumns(name, columns);
        const ms = performance.now() - t0;
        const failed = api === 'evalBatch' ? out.filter((r) => r.kind).length : out.errors.size;
        if (failed) throw new Error(`${path} ${name} ${api}: ${failed} rows failed`);
        return (ROWS / ms) * 1000;
      };
      for (const path of ['callcols', 'json']) await run(path); // warm-up: workers, chunk size
      for (let k = 0; k < RUNS; k++) {
        // alternate which path goes first, so neither always runs on a cooler machine
        for (const path of k % 2 ? ['json', 'callcols'] : ['callcols', 'json']) {
          rates[path].push(await run(path));
          loads.push(loadavg()[0]);
        }
      }
      const cols = sorted(rates.callcols);
      const json = sorted(rates.json);
      const mid = Math.floor(RUNS / 2);
      results.push({
        body: name,
        api,
        'callcols min/median/max': cols.map(fmt).join(' / '),
        'json min/median/max': json.map(fmt).join(' / '),
        'median ratio': `${(cols[mid] / json[mid]).toFixed(2)}×`,
      });
    }
  }
} finally {
  await Promise.all(Object.values(paths).map((r) => r.close()));
}
console.log(
  `callcols vs JSON frames, ${ROWS} rows, ${RUNS} runs each, policy ${policy}, ${availableParallelism()} cores, load average ${sorted(loads)[0].toFixed(2)}–${sorted(loads).at(-1).toFixed(2)} while it ran`,
);
console.table(results);
