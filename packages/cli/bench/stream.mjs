// `improv-extfn run` over a large CSV as a subprocess: time to the first
// output row, wall time, and resident memory sampled from /proc as the run
// goes (flat memory means the peak does not grow with the table).
// Run: node bench/stream.mjs [ROWS] [wasm|python]   (default 10,000,000 wasm)
import { spawn } from 'node:child_process';
import { createWriteStream, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROWS = Number(process.argv[2] ?? process.env.BENCH_ROWS ?? 10_000_000);
const LANGUAGE = process.argv[3] ?? 'wasm';
const bin = fileURLToPath(new URL('../dist/bin.js', import.meta.url));
const examples = fileURLToPath(new URL('../examples/', import.meta.url));

if (process.platform !== 'linux') {
  console.log('skipped: reads /proc for memory');
  process.exit(0);
}

const dir = mkdtempSync(join(tmpdir(), 'improv-extfn-cli-stream-'));
try {
  const rowsFile = join(dir, 'rows.csv');
  await new Promise((resolve, reject) => {
    const out = createWriteStream(rowsFile);
    out.on('error', reject);
    let i = 0;
    const more = () => {
      while (i < ROWS) {
        let chunk = '';
        for (const end = Math.min(ROWS, i + 10_000); i < end; i++) chunk += `${i},${i % 7}\n`;
        if (!out.write(chunk)) return out.once('drain', more);
      }
      out.end(resolve);
    };
    more();
  });
  const fnFile = LANGUAGE === 'python' ? join(dir, 'hypot.json') : join(examples, 'distance.json');
  if (LANGUAGE === 'python') {
    writeFileSync(
      fnFile,
      JSON.stringify({
        name: 'hypot',
        language: 'python',
        body: 'result = (args[0]**2 + args[1]**2) ** 0.5',
        argTypes: ['number', 'number'],
        returnType: 'number',
        pure: true,
      }),
    );
  }

  const started = performance.now();
  const child = spawn('node', [bin, 'run', fnFile, rowsFile, '--json'], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { IMPROV_EXTFN_PYTHON: '/usr/bin/python3', ...process.env },
  });
  let firstRowMs;
  let lines = 0;
  child.stdout.on('data', (chunk) => {
    firstRowMs ??= performance.now() - started;
    for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) lines++;
  });
  let stderr = '';
  child.stderr.on('data', (chunk) => {
    stderr += chunk;
  });
  const samples = [];
  const timer = setInterval(() => {
    try {
      const status = readFileSync(`/proc/${child.pid}/status`, 'utf8');
      const rss = Number(/^VmRSS:\s+(\d+)/m.exec(status)?.[1] ?? 0);
      samples.push({ rows: lines, rssMiB: rss / 1024 });
    } catch {}
  }, 250);
  const code = await new Promise((resolve) => child.on('close', resolve));
  clearInterval(timer);
  const seconds = (performance.now() - started) / 1000;

  const peak = Math.max(...samples.map((s) => s.rssMiB));
  const at = (fraction) => {
    const s = samples.find((x) => x.rows >= ROWS * fraction);
    return s ? `${s.rssMiB.toFixed(0)} MiB` : '-';
  };
  console.log(
    `${ROWS.toLocaleString('en-US')} rows, ${LANGUAGE}, node ${process.version}: exit ${code}`,
  );
  console.log(`first row out after   ${firstRowMs?.toFixed(0)} ms`);
  console.log(
    `wall time             ${seconds.toFixed(1)} s (${Math.round(ROWS / seconds).toLocaleString('en-US')} rows/s)`,
  );
  console.log(`rows written          ${lines.toLocaleString('en-US')}`);
  console.log(
    `resident memory       peak ${peak.toFixed(0)} MiB; at 10% ${at(0.1)}, 50% ${at(0.5)}, 90% ${at(0.9)}`,
  );
  console.log(`summary               ${stderr.trim()}`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
