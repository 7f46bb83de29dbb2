// `pnpm bench:peers`: each peer workload (README.md) on a throwaway PostgreSQL 15
// cluster (PL/Python, PL/R) and on ours, in the same run, with the ratios and
// the load average. Environment: PEERS_SCALE (row counts × this, default 1),
// PEERS_RUNS (default 3), PEERS_ONLY (workload numbers, e.g. "1,5a").
import { spawnSync } from 'node:child_process';
import { availableParallelism, cpus } from 'node:os';
import { ClusterUnavailable, startCluster } from './cluster.mjs';
import { functionStatements } from './functions.mjs';
import { tableStatements } from './inputs.mjs';
import { machineCosts } from './machine/costs.mjs';
import { measureSides, TIMER_SQL } from './measure.mjs';
import { loadAverage, printSkip, printWorkload } from './report.mjs';
import { describeOurs } from './sides.mjs';
import { workloads } from './workloads.mjs';

// Not a turbo task: its settings are read straight from the environment.
const { env } = process;

const scale = Number(env.PEERS_SCALE ?? 1);
const runs = Number(env.PEERS_RUNS ?? 3);
const only = env.PEERS_ONLY?.split(',').map((s) => s.trim());
if (!(scale > 0) || !Number.isInteger(runs) || runs < 1) {
  console.error('PEERS_SCALE must be a positive number and PEERS_RUNS a positive integer');
  process.exit(2);
}

// A pyenv shim on PATH leads to an interpreter the sandbox uid cannot read.
if (!env.IMPROV_EXTFN_PYTHON) {
  const found = spawnSync('sh', ['-c', 'command -v python3'], { encoding: 'utf8' }).stdout.trim();
  if (found.includes('/.pyenv/')) env.IMPROV_EXTFN_PYTHON = '/usr/bin/python3';
}

// "5" selects 5a and 5b.
const numberOf = (w) => w.title.slice(0, w.title.indexOf('.'));
const chosen = workloads(scale).filter(
  (w) => !only || only.some((id) => id === numberOf(w) || id === numberOf(w).replace(/[a-z]$/, '')),
);
if (chosen.length === 0) {
  console.error(`PEERS_ONLY=${env.PEERS_ONLY} selects no workload (they are 1 to 7b)`);
  process.exit(2);
}
console.log(
  `peers benchmark: ${availableParallelism()} cores (${cpus()[0]?.model.trim()}), node ${process.version}, ` +
    `scale ${scale}, ${runs} runs per side, load average ${loadAverage()}`,
);
// What our side pays per chunk and a backend mostly does not: it varies by day on a VM.
console.log(`machine: ${machineCosts()}`);

let cluster;
const cleanUp = () => cluster?.stop();
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.once(signal, () => {
    console.error(`\n${signal}: stopping the PostgreSQL cluster`);
    cleanUp();
    process.exit(130);
  });
}
process.once('exit', cleanUp);

try {
  const t0 = performance.now();
  try {
    cluster = startCluster();
  } catch (error) {
    if (!(error instanceof ClusterUnavailable)) throw error;
    console.log(`skipped: ${error.message}`);
    process.exit(0);
  }
  const pg = cluster;
  try {
    await pg.psql(['CREATE EXTENSION plpython3u']);
  } catch (error) {
    console.log(
      `skipped: PL/Python is not available (apt-get install postgresql-plpython3-15): ${error.message}`,
    );
    process.exit(0);
  }
  const plr = await pg.psql(['CREATE EXTENSION plr']).then(
    () => true,
    () => false,
  );
  await pg.psql([
    TIMER_SQL,
    ...tableStatements(chosen.flatMap((w) => w.tables)),
    ...functionStatements({ plr }),
  ]);
  const [version, ...languages] = await pg.psql([
    'SELECT version()',
    'SELECT peers_py_version()',
    ...(plr ? ['SELECT peers_r_version()'] : []),
  ]);
  console.log(
    `${version.split(',')[0]}: throwaway cluster in ${pg.dir} as ${pg.user}, unix socket only, ` +
      `ready with its tables in ${((performance.now() - t0) / 1000).toFixed(1)} s; ` +
      `PL/Python on Python ${languages[0]}${plr ? `, PL/R on ${languages[1]}` : ', no PL/R'}`,
  );
  console.log(`ours (default sandbox policy, cache off): ${(await describeOurs()).join('; ')}`);
  console.log('ratios are speed, PostgreSQL time / ours: above 1 ours is faster');

  for (const workload of chosen) {
    if (workload.needs === 'plr' && !plr) {
      printSkip(workload.title, 'PL/R is not available (apt-get install postgresql-15-plr)');
      continue;
    }
    const loadBefore = loadAverage();
    let prepared;
    try {
      const unsupported = await workload.probe?.();
      if (unsupported) {
        printSkip(workload.title, unsupported);
        continue;
      }
      prepared = await workload.setup(pg);
      const { times, reference } = await measureSides(prepared.sides, runs);
      printWorkload({
        ...workload,
        sides: prepared.sides.map((side, s) => ({ ...side, times: times[s] })),
        notes: [...(prepared.notes?.() ?? []), `checksum agreed on every run: ${reference}`],
        loadBefore,
      });
    } catch (error) {
      process.exitCode = 1;
      console.log(`\n${workload.title}\n   FAILED: ${error.message ?? error}`);
    } finally {
      await prepared?.close();
    }
  }
} catch (error) {
  process.exitCode = 1;
  console.error(`peers benchmark failed: ${error.message}`);
} finally {
  cleanUp();
}
