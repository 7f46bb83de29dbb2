// Benchmark of callcols (binary columns of every type) against JSON `call`
// frames for R, side by side in one run, against dist/. Run: node bench/columns.mjs
// Two R bodies over ROWS rows: text `toupper(paste0(args[[1]], args[[2]]))` and
// datetime `args[[1]] + 86400`, each through evalBatch (rows of Values) and
// evalColumns (typed columns), on a runner with callcols (the default) and on
// one with JSON frames only (`f64: false`). Rows/s, min/median/max of RUNS
// runs after a warm-up, and the load average while it ran (the harness:
// bench/lib/columns-vs-json.mjs at the repository's root).
import { columnsVsJson } from '../../../bench/lib/columns-vs-json.mjs';
import { r } from '../dist/index.js';

const RSCRIPT = process.env.IMPROV_EXTFN_R || '/usr/bin/Rscript';

await columnsVsJson({
  rows: Number(process.env.BENCH_ROWS ?? 100_000),
  runs: Number(process.env.BENCH_RUNS ?? 3),
  language: 'r',
  runner: (options) => r({ interpreter: RSCRIPT, ...options }),
  bodies: {
    upper: 'result <- toupper(paste0(args[[1]], args[[2]]))',
    nextDay: 'result <- args[[1]] + 86400',
  },
});
