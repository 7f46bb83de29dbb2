// What the command adds on top of the batch path: 100,000 rows of the Wasm
// distance example, through Registry.evalBatch directly (the baseline), through
// `main(['run', …])` in-process (CSV read + cells parsed + output written), and
// through the real bin as a subprocess (plus Node start-up). Run: pnpm bench
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Registry, Value } from '@improv/extfn-core';
import { main, parseCsv } from '../dist/index.js';

const ROWS = Number(process.env.BENCH_ROWS ?? 100_000);
const REPEAT = 3;
const bin = fileURLToPath(new URL('../dist/bin.js', import.meta.url));
const fnFile = fileURLToPath(new URL('../../../examples/model/distance.json', import.meta.url));
const fn = JSON.parse(readFileSync(fnFile, 'utf8'));

let wasm;
try {
  wasm = (await import('@improv/extfn-wasm')).wasm;
  const probe = await wasm().probe();
  if (!probe.available) throw new Error(probe.detail);
} catch (error) {
  console.log(`skipped: the wasm runner is not available (${error.message})`);
  process.exit(0);
}

const dir = mkdtempSync(join(tmpdir(), 'improv-extfn-cli-bench-'));
try {
  const csv = Array.from({ length: ROWS }, (_, i) => `${i},${i % 7}`).join('\n');
  const rowsFile = join(dir, 'rows.csv');
  writeFileSync(rowsFile, csv);
  const values = Array.from({ length: ROWS }, (_, i) => [Value.number(i), Value.number(i % 7)]);
  const sink = { write() {} };
  const io = { stdout: sink, stderr: sink, env: process.env, cwd: dir };

  // The baseline is the batch path exactly as `run` uses it (pure-result cache on).
  const batch = async (options) => {
    const registry = new Registry({ runners: [wasm()], functions: [fn], ...options });
    try {
      const out = await registry.evalBatch(fn.name, values);
      if (out.length !== ROWS) throw new Error('wrong count');
    } finally {
      await registry.close();
    }
  };
  const cases = [
    {
      name: 'Registry.evalBatch (baseline)',
      run: () => batch({}),
    },
    {
      name: 'evalBatch, pure cache off',
      run: () => batch({ cache: false }),
    },
    {
      name: 'parseCsv only',
      run: async () => {
        if (parseCsv(csv).records.length !== ROWS) throw new Error('wrong count');
      },
    },
    {
      name: "main(['run', …]) in-process",
      run: async () => {
        const code = await main(['run', fnFile, rowsFile, '-o', join(dir, 'out.csv')], io);
        if (code !== 0) throw new Error(`exit ${code}`);
      },
    },
    {
      name: 'improv-extfn run (subprocess)',
      run: async () => {
        execFileSync('node', [bin, 'run', fnFile, rowsFile, '-o', join(dir, 'out.csv')], {
          stdio: 'ignore',
        });
      },
    },
  ];

  const results = [];
  for (const c of cases) {
    await c.run(); // warm-up
    let best = Number.POSITIVE_INFINITY;
    for (let i = 0; i < REPEAT; i++) {
      const start = performance.now();
      await c.run();
      best = Math.min(best, performance.now() - start);
    }
    results.push({ name: c.name, ms: best });
  }
  const base = results[0].ms;
  const pad = (s, n) => String(s).padEnd(n);
  const num = (s, n) => String(s).padStart(n);
  console.log(`${ROWS.toLocaleString('en-US')} rows, best of ${REPEAT}, node ${process.version}\n`);
  console.log(`${pad('case', 32)}${num('ms', 10)}${num('rows/s', 14)}${num('× baseline', 12)}`);
  for (const r of results) {
    console.log(
      `${pad(r.name, 32)}${num(r.ms.toFixed(1), 10)}${num(Math.round((ROWS / r.ms) * 1000).toLocaleString('en-US'), 14)}${num((r.ms / base).toFixed(2), 12)}`,
    );
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
