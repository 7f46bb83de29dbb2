// Building blocks of a workload's sides: a registry of ours with its
// functions, the warm sides (PostgreSQL sessions and our entry points), and
// the probes of what this build of ours can run.
import { ExtFnError, Registry, Value } from '../../packages/core/dist/index.js';
import { python } from '../../packages/python/dist/index.js';
import { r } from '../../packages/r/dist/index.js';
import { descriptor } from './functions.mjs';
import { numberColumns, rowsOf, tableName, WARMUP_ROWS } from './inputs.mjs';
import { oursTimed, peerWarm, sumBatch, sumColumns } from './measure.mjs';

/** A registry with one runner and the given functions; `cache: false` so every run computes. */
export function registryWith(runner, fns) {
  const registry = new Registry({ runners: [runner], cache: false });
  for (const fn of fns) registry.register(fn);
  return registry;
}

/** Untimed runs of ours before the timed ones, at least. */
const WARM_RUNS = 3;

/** The runner's live worker processes, as a comparable string. */
const workerSet = (runner) => (runner.workerPids?.() ?? []).sort((a, b) => a - b).join(',');

/**
 * The sides of a warm workload: PostgreSQL in warm sessions, one side per
 * `peers` entry (`query` maps a table name to SQL), then ours by each entry point.
 */
export async function warmSides({ pg, peers, set, rows, runner, fn, entries }) {
  const registry = registryWith(runner, [fn]);
  const sides = peers.map(({ label, short, query }) => ({
    label,
    short,
    peer: true,
    run: () => peerWarm(pg, query(tableName(set, rows)), query(tableName(set, WARMUP_ROWS))),
  }));
  try {
    for (const entry of entries) {
      const call = entry.call(registry);
      // Untimed runs, as a sheet refreshed again and again: at least WARM_RUNS, then until one
      // starts no worker (at most 2 × WARM_RUNS). The pool counts a function's recent work
      // toward a further worker, so a short refresh gets its second worker by the third run.
      for (let k = 0; k < 2 * WARM_RUNS; k++) {
        const before = workerSet(runner);
        await call();
        if (k + 1 >= WARM_RUNS && workerSet(runner) === before) break;
      }
      sides.push({ label: `ours ${entry.label}`, run: () => oursTimed(call, entry.checksum) });
    }
  } catch (error) {
    await registry.close();
    throw error;
  }
  return { sides, close: () => registry.close() };
}

export const evalBatch = (name, set, rows, read) => ({
  label: 'evalBatch',
  call: (registry) => () => registry.evalBatch(name, rowsOf(set, rows)),
  checksum: (out) => sumBatch(out, read),
});
export const evalColumns = (name, rows) => ({
  label: 'evalColumns',
  call: (registry) => {
    const columns = numberColumns(rows);
    return () => registry.evalColumns(name, columns);
  },
  checksum: sumColumns,
});

/**
 * evalColumns writing into one result column kept across runs (`options.into`),
 * as an engine refreshing the same measure does: no fresh 8 MB column per run.
 */
export const evalColumnsInto = (name, rows) => ({
  label: 'evalColumns into',
  call: (registry) => {
    const columns = numberColumns(rows);
    const into = new Float64Array(rows);
    return () => registry.evalColumns(name, columns, { into });
  },
  checksum: sumColumns,
});

/** evalColumns over typed columns (text as strings, datetime as BigInt64Array nanoseconds), built once. */
export const evalTypedColumns = (name, set, rows, read) => ({
  label: 'evalColumns (typed)',
  call: (registry) => {
    const table = rowsOf(set, rows);
    const columns = registry.get(name).argTypes.map((type, k) => {
      if (type === 'text') return table.map((row) => row[k].value);
      if (type === 'datetime') {
        return BigInt64Array.from(
          table,
          (row) => BigInt(row[k].value.getTime()) * 1_000_000n + BigInt(row[k].nanos ?? 0),
        );
      }
      return Float64Array.from(table, (row) => row[k].value);
    });
    return () => registry.evalColumns(name, columns);
  },
  checksum: ({ values, errors }) => {
    if (errors.size > 0)
      throw new Error(`${errors.size} rows failed: ${[...errors.values()][0].message}`);
    let sum = 0;
    for (const v of values) sum += read(v);
    return sum;
  },
});

/**
 * Why this build cannot run the vectorized workload in `language`, or
 * undefined when it can: the descriptor must accept `vectorized: true` and the
 * runner must hand the body whole columns (a body that returns its column's
 * length tells them apart from per-row calls). `extra` is a per-row body
 * that must also run (numpy's import).
 */
export async function vectorizedUnsupported(runner, language, extra) {
  const body =
    language === 'r'
      ? 'result <- rep(length(args[[1]]), length(args[[1]]))'
      : 'result = [float(len(args[0]))] * len(args[0])';
  const fns = [descriptor('probe', language, body, ['number'], 'number', { vectorized: true })];
  if (extra) fns.push(descriptor('extra', language, extra, ['number'], 'number'));
  let registry;
  try {
    registry = registryWith(runner, fns);
  } catch {
    return 'vectorized descriptors not supported by this build (the descriptor has no vectorized field)';
  }
  try {
    // Chunks may start small, so a column of length 1 proves nothing: ask for enough rows.
    const rows = Array.from({ length: 2000 }, (_, i) => [Value.number(i)]);
    const out = await registry.evalBatch('probe', rows);
    const failed = out.find((v) => ExtFnError.isInstance(v));
    if (failed || !out.some((v) => v.value > 1)) {
      const got = failed ? failed.message : 'the body ran per row: every column had length 1';
      return `vectorized descriptors not supported by this build (${language} probe: ${got})`;
    }
    const [check] = extra ? await registry.evalBatch('extra', rows.slice(0, 1)) : [];
    if (ExtFnError.isInstance(check))
      return `the ${language} runner cannot run this: ${check.message}`;
    return undefined;
  } finally {
    await registry.close();
  }
}

/** What ours will run: each runner's interpreter and protection, one line each. */
export async function describeOurs() {
  const registry = new Registry({ runners: [python(), r()] });
  try {
    const probes = await registry.probe();
    return probes.map((p) =>
      p.available ? `${p.detail}, ${p.protection?.split(' (')[0]}` : `${p.language}: ${p.detail}`,
    );
  } finally {
    await registry.close();
  }
}
