// The peer workloads (numbered as in README.md), each defined for both sides: PostgreSQL's query
// and ours through a core Registry with the python() and r() runners from the
// built packages, default sandbox policy, no cache. A workload's `setup`
// returns its sides; every side's `run` gives `{ ms, checksum }`, and
// PostgreSQL's sides are marked `peer`.
import { python } from '../../packages/python/dist/index.js';
import { r } from '../../packages/r/dist/index.js';
import { descriptor, FOUR, GROW_R, HYPOT, sumHypot, sumR } from './functions.mjs';
import { rowsOf, tableName, WARMUP_ROWS } from './inputs.mjs';
import { oursTimed, peerCold, peerConcurrent, peerWarm, sumBatch } from './measure.mjs';
import {
  evalBatch,
  evalColumns,
  evalColumnsInto,
  evalTypedColumns,
  registryWith,
  vectorizedUnsupported,
  warmSides,
} from './sides.mjs';

/** PEERS_BASE: another build's python runner (a dist/index.js path), timed beside ours in workload 6. */
const { env } = process;
const basePython = env.PEERS_BASE ? (await import(env.PEERS_BASE)).python : undefined;

const PEER_WARM =
  'PostgreSQL — inside the server (clock_timestamp() around SELECT sum(f(x, y)) FROM a prepared unlogged table), one backend, a session warmed up on 1,000 rows first';
const OURS_WARM =
  'ours — from the call to the results in hand, on a warm registry: 3 untimed runs first, more until one starts no worker (the workers a function refreshed again and again keeps)';

/** The workloads at a scale: `size(n)` is n rows scaled, at least 100. */
export function workloads(scale) {
  const size = (n) => Math.max(100, Math.round(n * scale));
  const numbers = size(1e6);
  const rows = size(1e5);
  const hypotFn = descriptor('hypot', 'python', HYPOT.ours, ['number', 'number'], 'number');
  const growFn = descriptor('grow', 'r', GROW_R.ours, ['number', 'number'], 'number');
  const list = [
    {
      title: '1. Python hypot (x ** 2 + y ** 2) ** 0.5',
      rows: numbers,
      tables: [['numbers', numbers]],
      timed: [PEER_WARM, OURS_WARM],
      setup: (pg) =>
        warmSides({
          pg,
          peers: [{ label: 'PostgreSQL (PL/Python)', query: sumHypot }],
          set: 'numbers',
          rows: numbers,
          runner: python(),
          fn: hypotFn,
          entries: [evalBatch('hypot', 'numbers', numbers), evalColumns('hypot', numbers)],
        }),
    },
    {
      title: '2. Python text (a + b).upper()',
      rows,
      tables: [['texts', rows]],
      timed: [
        PEER_WARM.replace('sum(f(x, y))', 'sum(length(f(a, b)))'),
        OURS_WARM,
        'checksum: total length of the results',
      ],
      setup: (pg) =>
        warmSides({
          pg,
          peers: [
            {
              label: 'PostgreSQL (PL/Python)',
              query: (t) => `SELECT sum(length(py_upper(a, b))) FROM ${t}`,
            },
          ],
          set: 'texts',
          rows,
          runner: python(),
          fn: descriptor(
            'upper',
            'python',
            'result = (args[0] + args[1]).upper()',
            ['text', 'text'],
            'text',
          ),
          entries: [
            evalBatch('upper', 'texts', rows, (v) => v.value.length),
            evalTypedColumns('upper', 'texts', rows, (v) => v.length),
          ],
        }),
    },
    {
      title: '3. Python datetime: the next day (t + timedelta(days=1))',
      rows,
      tables: [['datetimes', rows]],
      timed: [
        PEER_WARM.replace('sum(f(x, y))', 'sum(extract(epoch FROM f(t)))'),
        OURS_WARM,
        'PL/Python receives a timestamptz as text and returns it as text: its body parses with datetime.fromisoformat (ours receives and returns datetime objects)',
        'checksum: sum of the results in epoch seconds',
      ],
      setup: (pg) =>
        warmSides({
          pg,
          peers: [
            {
              label: 'PostgreSQL (PL/Python)',
              query: (t) => `SELECT sum(extract(epoch FROM py_next_day(t)))::float8 FROM ${t}`,
            },
          ],
          set: 'datetimes',
          rows,
          runner: python(),
          fn: descriptor(
            'next_day',
            'python',
            'import datetime\nresult = args[0] + datetime.timedelta(days=1)',
            ['datetime'],
            'datetime',
          ),
          entries: [
            evalBatch('next_day', 'datetimes', rows, (v) => v.value.getTime() / 1000),
            evalTypedColumns('next_day', 'datetimes', rows, (ns) => Number(ns / 1_000_000n) / 1000),
          ],
        }),
    },
    {
      title: '4. R x * 1.05^y',
      rows,
      tables: [['numbers', rows]],
      needs: 'plr',
      timed: [PEER_WARM, OURS_WARM],
      setup: (pg) =>
        warmSides({
          pg,
          peers: [{ label: 'PostgreSQL (PL/R)', query: sumR }],
          set: 'numbers',
          rows,
          runner: r(),
          fn: growFn,
          entries: [evalBatch('grow', 'numbers', rows), evalColumns('grow', rows)],
        }),
    },
    ...[
      ['5a. Cold refresh, Python hypot', python, hypotFn, sumHypot, undefined],
      ['5b. Cold refresh, R x * 1.05^y', r, growFn, sumR, 'plr'],
    ].map(([title, runnerFactory, fn, peerQuery, needs]) => ({
      title,
      rows,
      tables: [['numbers', rows]],
      needs,
      timed: [
        'PostgreSQL — from spawning psql to its exit: a new connection and backend, the language start-up in it, and the query (one aggregate row back)',
        'ours — a new Registry with a new runner → evalBatch → results in hand (worker start-up included; close() after the timer)',
      ],
      setup: async (pg) => ({
        sides: [
          {
            label: `PostgreSQL fresh session (${fn.language === 'r' ? 'PL/R' : 'PL/Python'})`,
            peer: true,
            run: () => peerCold(pg, peerQuery(tableName('numbers', rows))),
          },
          {
            label: 'ours new registry',
            run: async () => {
              let registry;
              const run = await oursTimed(() => {
                registry = registryWith(runnerFactory(), [fn]);
                return registry.evalBatch(fn.name, rowsOf('numbers', rows));
              }, sumBatch);
              await registry.close();
              return run;
            },
          },
        ],
        close: async () => {},
      }),
    })),
    fourFunctions(rows),
    ...vectorized(size),
  ];
  return list;
}

/** 6: four different Python functions over the same rows, all at once. */
function fourFunctions(rows) {
  const table = (n) => tableName('numbers', n);
  const oneQuery = (t) =>
    `SELECT ${FOUR.map(({ name }) => `sum(${name}(x, y))`).join(' + ')} FROM ${t}`;
  const late = [];
  return {
    title:
      '6. Four Python functions refreshed together (hypot, x * 1.05 ** y, abs(x - y), x / (1 + y))',
    rows: 4 * rows,
    tables: [['numbers', rows]],
    timed: [
      'PostgreSQL, one backend — the four functions in one query over the table (sequential in one process), timed inside the server',
      'PostgreSQL, four backends — four warm sessions, one function each, released together; first start to last finish in the server clock',
      "ours — four evalBatch calls at once on one warm registry (one python() runner, default workers: one per core working at once; the four functions' workers all stay warm, maxLiveWorkers)",
      ...(basePython
        ? [`ours before — the same on the build at PEERS_BASE (${env.PEERS_BASE})`]
        : []),
    ],
    setup: async (pg) => {
      const inputs = rowsOf('numbers', rows);
      const checksum = (all) => all.reduce((sum, out) => sum + sumBatch(out), 0);
      /** A warm registry of the four functions on `make()`'s runner, and its timed side. */
      const warmFour = async (make, label, short) => {
        const runner = make();
        const registry = registryWith(
          runner,
          FOUR.map(({ name, ours }) =>
            descriptor(name, 'python', ours, ['number', 'number'], 'number'),
          ),
        );
        const call = () => Promise.all(FOUR.map(({ name }) => registry.evalBatch(name, inputs)));
        try {
          await call();
        } catch (error) {
          await registry.close();
          throw error;
        }
        const startsOf = [];
        const side = {
          label,
          ...(short ? { short } : {}),
          run: async () => {
            const before = runner.stats().started;
            const run = await oursTimed(call, checksum);
            startsOf.push(runner.stats().started - before);
            return run;
          },
        };
        return { runner, registry, side, startsOf, warmupStarts: runner.stats().started };
      };
      const ours = await warmFour(python, 'ours 4 × evalBatch');
      const before = basePython
        ? await warmFour(basePython, 'ours before 4 × evalBatch').catch(async (error) => {
            await ours.registry.close();
            throw error;
          })
        : undefined;
      const { registry, warmupStarts } = ours;
      const starts = ours.startsOf;
      return {
        sides: [
          {
            label: 'PostgreSQL one backend',
            short: 'PG 1 backend',
            peer: true,
            run: () => peerWarm(pg, oneQuery(table(rows)), oneQuery(table(WARMUP_ROWS))),
          },
          {
            label: 'PostgreSQL four backends',
            short: 'PG 4 backends',
            peer: true,
            run: async () => {
              const run = await peerConcurrent(
                pg,
                FOUR.map(({ name }) => ({
                  query: `SELECT sum(${name}(x, y)) FROM ${table(rows)}`,
                  warmup: `SELECT sum(${name}(x, y)) FROM ${table(WARMUP_ROWS)}`,
                })),
              );
              late.push(run.lateMs);
              return run;
            },
          },
          ours.side,
          ...(before ? [before.side] : []),
        ],
        notes: () => [
          `ours: worker processes started: ${warmupStarts} in the untimed first run, then ${starts.join(', ')} in the timed runs`,
          ...(before
            ? [
                `ours before: worker processes started: ${before.warmupStarts} in the untimed first run, then ${before.startsOf.join(', ')} in the timed runs`,
              ]
            : []),
          `PostgreSQL four backends: the last session started its query ${late.map((ms) => ms.toFixed(0)).join(', ')} ms after the common start time`,
        ],
        close: () => Promise.all([registry.close(), before?.registry.close()]),
      };
    },
  };
}

/** 7: vectorized bodies (a whole column per call), where the descriptor supports them. */
function vectorized(size) {
  // 10^6 rows for R too: at 10^5 a vectorized call is a few ms, mostly fixed
  // per-call cost; PL/R per row over 10^6 rows is about 3.5 s a run.
  const rRows = size(1e6);
  const npRows = size(1e6);
  const overArrays = (fn, t) =>
    `SELECT sum(v) FROM unnest((SELECT ${fn}(array_agg(x ORDER BY i), array_agg(y ORDER BY i)) FROM ${t})) v`;
  const timed = [
    `${PEER_WARM}; per row: the per-row function of workload 1 or 4`,
    'PostgreSQL over arrays — the function called once: SELECT sum(v) FROM unnest((SELECT f(array_agg(x ORDER BY i), array_agg(y ORDER BY i)) FROM table)), timed the same way',
    OURS_WARM,
  ];
  const vector = { vectorized: true };
  // numpy is outside the standard library: the host allows the system's site packages.
  const NUMPY = { packages: 'system' };
  const NUMPY_BODY = 'import numpy as np\nresult = np.hypot(args[0], args[1])';
  return [
    {
      title: '7a. R vectorized x * 1.05^y',
      rows: rRows,
      tables: [['numbers', rRows]],
      needs: 'plr',
      probe: () => vectorizedUnsupported(r(), 'r'),
      timed,
      setup: (pg) =>
        warmSides({
          pg,
          peers: [
            { label: 'PostgreSQL PL/R per row', short: 'PG per row', query: sumR },
            {
              label: 'PostgreSQL PL/R over arrays',
              short: 'PG arrays',
              query: (t) => overArrays('r_grow_vec', t),
            },
          ],
          set: 'numbers',
          rows: rRows,
          runner: r(),
          fn: descriptor('grow_vec', 'r', GROW_R.ours, ['number', 'number'], 'number', vector),
          entries: [
            evalBatch('grow_vec', 'numbers', rRows),
            evalColumns('grow_vec', rRows),
            evalColumnsInto('grow_vec', rRows),
          ],
        }),
    },
    {
      title: '7b. Python vectorized numpy np.hypot(x, y)',
      rows: npRows,
      tables: [['numbers', npRows]],
      probe: () => vectorizedUnsupported(python(NUMPY), 'python', 'import numpy\nresult = 1.0'),
      timed,
      setup: (pg) =>
        warmSides({
          pg,
          peers: [
            { label: 'PostgreSQL PL/Python per row', short: 'PG per row', query: sumHypot },
            {
              label: 'PostgreSQL PL/Python numpy over arrays',
              short: 'PG arrays',
              query: (t) => overArrays('py_np_hypot', t),
            },
          ],
          set: 'numbers',
          rows: npRows,
          runner: python(NUMPY),
          fn: descriptor('np_hypot', 'python', NUMPY_BODY, ['number', 'number'], 'number', vector),
          entries: [
            evalBatch('np_hypot', 'numbers', npRows),
            evalColumns('np_hypot', npRows),
            evalColumnsInto('np_hypot', npRows),
          ],
        }),
    },
  ];
}
