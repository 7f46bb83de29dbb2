// The harness behind packages/python/bench/columns.mjs and
// packages/r/bench/columns.mjs: callcols (binary columns of every type)
// against JSON `call` frames, side by side in one run. Two bodies over ROWS
// rows, `upper` (text, text → text) and `nextDay` (datetime → datetime), each
// through evalBatch (rows of Values), evalColumns (typed columns) and
// evalColumns with one error cell in (row 0: the other rows still go as
// typed columns, compacted), on a
// runner with callcols (the default) and on one with JSON frames only
// (`f64: false`). Prints rows/s, min/median/max of RUNS runs after a warm-up,
// and the load average while it ran.
import { availableParallelism, loadavg } from 'node:os';
import { ExtFnError, Registry, Value } from '../../packages/core/dist/index.js';
import { probeSandbox } from '../../packages/sandbox/dist/index.js';

/** Rows and columns of the two bodies' arguments. */
function inputs(ROWS) {
  const words = Array.from({ length: ROWS }, (_, i) => `row ${i} café`);
  const suffix = Array.from({ length: ROWS }, (_, i) => `-${i % 97}`);
  const start = Date.UTC(2020, 0, 1);
  const instants = BigInt64Array.from(
    { length: ROWS },
    (_, i) => BigInt(start + i * 60_000) * 1_000_000n + BigInt(i % 1000) * 1000n,
  );
  return {
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
}

const sorted = (xs) => [...xs].sort((a, b) => a - b);
const fmt = (r) => (r >= 1e6 ? `${(r / 1e6).toFixed(2)} M/s` : `${(r / 1e3).toFixed(0)} k/s`);

/**
 * Runs the benchmark over `rows` rows, `runs` times. `language` names the
 * runner's language, `runner(options)` makes one (options: `policy`, and
 * `f64: false` for JSON frames), `bodies` gives the `upper` and `nextDay`
 * bodies in that language.
 */
export async function columnsVsJson({ language, runner, bodies, rows: ROWS, runs: RUNS }) {
  const probe = await probeSandbox({ policy: 'restricted' });
  const policy = probe.ok ? 'restricted' : 'trusted';
  const fns = {
    upper: [bodies.upper, ['text', 'text'], 'text'],
    nextDay: [bodies.nextDay, ['datetime'], 'datetime'],
  };
  const input = inputs(ROWS);
  const makeRegistry = (options) => {
    const registry = new Registry({
      runners: [runner({ policy, ...options })],
      cache: false,
      timeoutMs: 30_000,
    });
    for (const [name, [body, argTypes, returnType]] of Object.entries(fns)) {
      registry.register({ name, language, body, argTypes, returnType, pure: false });
    }
    return registry;
  };
  const paths = { callcols: makeRegistry({}), json: makeRegistry({ f64: false }) };
  const loads = [];
  const results = [];
  try {
    for (const name of Object.keys(fns)) {
      for (const api of ['evalBatch', 'evalColumns', 'evalColumns, 1 error cell in']) {
        const rates = { callcols: [], json: [] };
        const run = async (path) => {
          const registry = paths[path];
          const { rows, columns } = input[name];
          const t0 = performance.now();
          const errorCell = api === 'evalBatch' || api === 'evalColumns' ? 0 : 1;
          const out =
            api === 'evalBatch'
              ? await registry.evalBatch(name, rows)
              : await registry.evalColumns(name, columns, {
                  errors: new Map(errorCell ? [[0, ExtFnError.runtime(name, 'upstream')]] : []),
                });
          const ms = performance.now() - t0;
          const failed = api === 'evalBatch' ? out.filter((r) => r.kind).length : out.errors.size;
          if (failed !== errorCell)
            throw new Error(`${path} ${name} ${api}: ${failed} rows failed`);
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
    `callcols vs JSON frames (${language}), ${ROWS} rows, ${RUNS} runs each, policy ${policy}, ${availableParallelism()} cores, load average ${sorted(loads)[0].toFixed(2)}–${sorted(loads).at(-1).toFixed(2)} while it ran`,
  );
  console.table(results);
}
