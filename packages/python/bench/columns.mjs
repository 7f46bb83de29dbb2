// Benchmark of callcols (binary columns of every type) against JSON `call`
// frames, side by side in one run, against dist/. Run: pnpm bench
// Two bodies over ROWS rows: text `(args[0] + args[1]).upper()` and datetime
// `args[0] + timedelta(days=1)`, each through evalBatch (rows of Values) and
// evalColumns (typed columns), on a runner with callcols (the default) and on
// one with JSON frames only (`f64: false`). Rows/s, min/median/max of RUNS
// runs after a warm-up, and the load average while it ran (the harness:
// bench/lib/columns-vs-json.mjs at the repository's root).
import { columnsVsJson } from '../../../bench/lib/columns-vs-json.mjs';
import { python } from '../dist/index.js';

const PYTHON = process.env.IMPROV_EXTFN_PYTHON ?? '/usr/bin/python3';

await columnsVsJson({
  rows: Number(process.env.BENCH_ROWS ?? 100_000),
  runs: Number(process.env.BENCH_RUNS ?? 3),
  language: 'python',
  runner: (options) => python({ interpreter: PYTHON, ...options }),
  bodies: {
    upper: 'result = (args[0] + args[1]).upper()',
    nextDay: 'from datetime import timedelta\nresult = args[0] + timedelta(days=1)',
  },
});
