// Cold start of `python3 -I -S -c pass`: plain spawn vs the sandbox policies,
// interleaved in one run so machine noise hits every column alike.
// Usage: pnpm --filter @improv/extfn-sandbox bench   (RUNS=60 by default)
import { cpus, loadavg } from 'node:os';
import { execa } from 'execa';
import { leakingDescriptors } from '../dist/host.js';
import { probeSandbox, runSandboxed } from '../dist/index.js';

const PYTHON = '/usr/bin/python3';
const ARGS = ['-I', '-S', '-c', 'pass'];
const RUNS = Number(process.env.RUNS ?? 60);
const env = { HOME: '/tmp', PATH: '/usr/bin:/bin', LANG: 'C.UTF-8' };

const modes = {
  'plain spawn (execa)': async () => {
    const result = await execa(PYTHON, ARGS, { extendEnv: false, env, reject: false });
    if (result.exitCode !== 0) throw new Error(result.stderr);
  },
};
for (const policy of ['restricted', 'unsandboxed', 'trusted']) {
  const probe = await probeSandbox({ policy });
  if (!probe.ok) {
    console.log(`skipping ${policy}: ${probe.problem}`);
    continue;
  }
  modes[policy] = async () => {
    const result = await runSandboxed({ command: PYTHON, args: ARGS, timeoutMs: 10_000, policy });
    if (result.exitCode !== 0) throw new Error(result.stderr);
  };
}

const samples = Object.fromEntries(Object.keys(modes).map((name) => [name, []]));
for (let round = -3; round < RUNS; round++) {
  for (const [name, run] of Object.entries(modes)) {
    const began = performance.now();
    await run();
    if (round >= 0) samples[name].push(performance.now() - began);
  }
}

const quantile = (values, q) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
};
const base = quantile(samples['plain spawn (execa)'], 0.5);
const rows = Object.entries(samples).map(([name, values]) => {
  const median = quantile(values, 0.5);
  return {
    mode: name,
    'min ms': quantile(values, 0).toFixed(2),
    'median ms': median.toFixed(2),
    'p90 ms': quantile(values, 0.9).toFixed(2),
    'vs plain': `${(median / base).toFixed(2)}x`,
    'added ms': (median - base).toFixed(2),
    'added / start': ((median - base) / base).toFixed(2),
  };
});
console.log(`python3 -I -S -c pass, ${RUNS} runs each, interleaved (node ${process.version})`);
console.log(
  `descriptors closed by the perl stage: ${leakingDescriptors().join(', ') || 'none (stage skipped)'}`,
);
console.table(rows);
console.log('budget: the sandbox may add at most 0.50 of a plain start ("added / start")');
console.log(
  `load average: ${loadavg()[0].toFixed(2)} on ${cpus().length} cores (noise grows with it)`,
);
