// The rows both sides compute over, defined once: each input set is a SQL
// query (PostgreSQL builds an unlogged table from it before any timing) and a
// per-row JavaScript formula giving the very same values (the numbers are
// exact binary fractions, so float8 and double agree bit for bit).
import { Value } from '../../packages/core/dist/index.js';

const EPOCH_2020 = Date.UTC(2020, 0, 1);
const STEP_MS = 37 * 60_000;
const numberX = (i) => (i % 1000) / 8;
const numberY = (i) => (i % 37) / 4;

export const INPUT_SETS = {
  numbers: {
    sql: (n) =>
      `SELECT i, (i % 1000)::float8 / 8 AS x, (i % 37)::float8 / 4 AS y FROM generate_series(0, ${n - 1}) i`,
    row: (i) => [Value.number(numberX(i)), Value.number(numberY(i))],
  },
  texts: {
    sql: (n) =>
      `SELECT i, 'row' || i AS a, '-é' || (i % 100) AS b FROM generate_series(0, ${n - 1}) i`,
    row: (i) => [Value.text(`row${i}`), Value.text(`-é${i % 100}`)],
  },
  datetimes: {
    sql: (n) =>
      `SELECT i, timestamptz '2020-01-01 00:00:00+00' + i * interval '37 minutes' AS t FROM generate_series(0, ${n - 1}) i`,
    row: (i) => [Value.datetime(new Date(EPOCH_2020 + i * STEP_MS))],
  },
};

/** Rows for a PostgreSQL session's untimed warm-up query. */
export const WARMUP_ROWS = 1000;

export const tableName = (set, n) => `${set}_${n}`;

/** CREATE statements for every (set, size) the workloads use, plus each set's warm-up table. */
export function tableStatements(uses) {
  const wanted = new Set(uses.map(([set, n]) => `${set}:${n}`));
  for (const [set] of uses) wanted.add(`${set}:${WARMUP_ROWS}`);
  return [...wanted].map((key) => {
    const [set, n] = key.split(':');
    const table = tableName(set, Number(n));
    return `CREATE UNLOGGED TABLE ${table} AS ${INPUT_SETS[set].sql(Number(n))}; ANALYZE ${table}`;
  });
}

const rowCache = new Map();

/** The Value rows of a set, built once per size (a million rows is ~170 MiB, built before timing). */
export function rowsOf(set, n) {
  const key = `${set}:${n}`;
  if (!rowCache.has(key))
    rowCache.set(
      key,
      Array.from({ length: n }, (_, i) => INPUT_SETS[set].row(i)),
    );
  return rowCache.get(key);
}

/** The numbers set as one Float64Array per argument, for evalColumns. */
export function numberColumns(n) {
  const x = new Float64Array(n);
  const y = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    x[i] = numberX(i);
    y[i] = numberY(i);
  }
  return [x, y];
}
