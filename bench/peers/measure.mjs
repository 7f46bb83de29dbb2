// How each side is timed. PostgreSQL: inside the server, clock_timestamp()
// around the query in a PL/pgSQL function (so neither psql nor the client
// transfer is counted; the query returns one aggregate), except for the cold
// case, timed from spawning psql to its exit. Ours: from the call to the
// results in hand. Every run returns a checksum so both sides are seen to
// compute the same thing.
import { ExtFnError } from '../../packages/core/dist/index.js';

/** Created once in the cluster: runs `q` (one aggregate) and returns the server-side span. */
export const TIMER_SQL = `CREATE FUNCTION peers_time(q text, OUT started float8, OUT finished float8, OUT checksum float8)
LANGUAGE plpgsql AS $f$
BEGIN
  started := extract(epoch FROM clock_timestamp());
  EXECUTE q INTO checksum;
  finished := extract(epoch FROM clock_timestamp());
END $f$`;

/** Seconds between launching concurrent sessions and their common start. */
const BARRIER_S = 2;

const timedQuery = (query) => `SELECT started, finished, checksum FROM peers_time($q$${query}$q$)`;

function parseSpan(line) {
  const [started, finished, checksum] = line.split('|').map(Number);
  return { started, finished, checksum, ms: (finished - started) * 1000 };
}

/** One warm run: a new session warms up (PL start-up, function compiled) on a small table, then the timed query. */
export async function peerWarm(pg, query, warmup) {
  const lines = await pg.psql([timedQuery(warmup), timedQuery(query)]);
  return parseSpan(lines.at(-1));
}

/** One cold run: a new psql, a new backend, its language start-up and the query, timed by the client. */
export async function peerCold(pg, query) {
  const { ms, lines } = await pg.timedPsql([query]);
  return { ms, checksum: Number(lines[0]) };
}

/**
 * Several warm sessions at once, one query each. They wait for a common start
 * time after their warm-up; the span is first start to last finish, in the
 * server's clock. `late` is how far the last one started after the barrier.
 */
export async function peerConcurrent(pg, items) {
  const at = Date.now() / 1000 + BARRIER_S;
  const spans = await Promise.all(
    items.map(async ({ query, warmup }) => {
      const lines = await pg.psql([
        timedQuery(warmup),
        `SELECT pg_sleep(greatest(0, ${at} - extract(epoch FROM clock_timestamp())))`,
        timedQuery(query),
      ]);
      return parseSpan(lines.at(-1));
    }),
  );
  const started = Math.min(...spans.map((s) => s.started));
  const finished = Math.max(...spans.map((s) => s.finished));
  return {
    ms: (finished - started) * 1000,
    checksum: spans.reduce((sum, s) => sum + s.checksum, 0),
    lateMs: (Math.max(...spans.map((s) => s.started)) - at) * 1000,
  };
}

/** One run of ours: `call` resolves to results, `checksum` reads them (untimed). */
export async function oursTimed(call, checksum) {
  const t0 = performance.now();
  const out = await call();
  const ms = performance.now() - t0;
  return { ms, checksum: checksum(out) };
}

/** Sum over evalBatch results of `read(value)`; a failed row fails the benchmark. */
export function sumBatch(results, read = (v) => v.value) {
  let sum = 0;
  for (let i = 0; i < results.length; i++) {
    const v = results[i];
    if (ExtFnError.isInstance(v)) throw new Error(`row ${i} failed: ${v.message}`);
    sum += read(v);
  }
  return sum;
}

/** Sum over evalColumns results; a failed row fails the benchmark. */
export function sumColumns({ values, errors }) {
  if (errors.size > 0) {
    const [row, error] = errors.entries().next().value;
    throw new Error(`${errors.size} rows failed, first row ${row}: ${error.message}`);
  }
  let sum = 0;
  for (let i = 0; i < values.length; i++) sum += values[i];
  return sum;
}

/** Both sides sum the same results; summation order may differ, so allow rounding. */
const sameChecksum = (a, b) => Math.abs(a - b) <= 1e-9 * Math.max(1, Math.abs(a), Math.abs(b));

/**
 * Runs every side `runs` times, the sides taking turns run by run so that a
 * change in load falls on all of them. Fails if any run's checksum differs.
 */
export async function measureSides(sides, runs) {
  const times = sides.map(() => []);
  let reference;
  for (let k = 0; k < runs; k++) {
    for (const [s, side] of sides.entries()) {
      const { ms, checksum } = await side.run();
      reference ??= checksum;
      if (!sameChecksum(reference, checksum)) {
        throw new Error(`${side.label} computed checksum ${checksum}, expected ${reference}`);
      }
      times[s].push(ms);
    }
  }
  return { times, reference };
}
