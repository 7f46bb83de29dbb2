// Hostile Wasm bodies, measured (against dist/): each attempt runs in a fresh
// node process so its peak resident memory (VmHWM) is its own. Run: node bench/hostile.mjs [name…]
// Prints, per attempt: the call's outcome and time, the host's peak and final RSS, the
// process CPU over the second after the call, and the host's thread count before/after.
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';

const wat = (text) => `wat:${text}`;
const entry = '(func (export "improv_call") (result f64) f64.const 1)';
const repeat = (text, n) => text.repeat(n);

/** Each attempt: a body and the deadline of its call. */
const ATTEMPTS = {
  // The audit's body: 1,000 tables of 65,536 entries (21 KB of text).
  tables: { body: wat(`(module ${repeat('(table 65536 funcref)', 1000)} ${entry})`), ms: 5_000 },
  'tables-300ms': {
    body: wat(`(module ${repeat('(table 65536 funcref)', 1000)} ${entry})`),
    ms: 300,
  },
  'start-loop-300ms': {
    body: wat(`(module (func $s (loop $l (br $l))) (start $s) ${entry})`),
    ms: 300,
  },
  // Just under the budget: 31 tables allocated while instantiating, then a start function that spins.
  'tables31-start-loop-300ms': {
    body: wat(
      `(module ${repeat('(table 65536 funcref)', 31)} (func $s (loop $l (br $l))) (start $s) ${entry})`,
    ),
    ms: 300,
  },
  'data-segments': {
    body: wat(`(module (memory 1) ${repeat('(data "x")', 90_000)} ${entry})`),
    ms: 5_000,
  },
  globals: {
    body: wat(`(module ${repeat('(global i32 (i32.const 0))', 40_000)} ${entry})`),
    ms: 5_000,
  },
  locals: {
    body: wat(
      `(module ${repeat('(func (local i64 i64 i64 i64 i64 i64 i64 i64))', 20_000)} ${entry})`,
    ),
    ms: 5_000,
  },
  // 50,000 locals and 3,000 blocks in improv_call: V8 compiles it lazily, on the first call,
  // keeping a copy of every local's state per block (15 KB of binary).
  'locals-blocks-300ms': {
    body: wat(
      `(module (func (export "improv_call") (result f64) (local${' f64'.repeat(50_000)}) ${repeat('(block (br 0))', 3_000)} f64.const 1))`,
    ),
    ms: 300,
  },
  'elem-segments': {
    body: wat(
      `(module (func $f) (table 65536 funcref) (elem (i32.const 0) func${' $f'.repeat(65_536)}) ${repeat(`(elem func${' $f'.repeat(10_000)})`, 20)} ${entry})`,
    ),
    ms: 5_000,
  },
};

const ticks = () => {
  const fields = readFileSync('/proc/self/stat', 'utf8').split(') ')[1].split(' ');
  return Number(fields[11]) + Number(fields[12]); // utime + stime, in clock ticks
};
const status = (key) =>
  Number(readFileSync('/proc/self/status', 'utf8').match(new RegExp(`${key}:\\s+(\\d+)`))[1]) /
  1024;
const threads = () => readdirSync('/proc/self/task').length;

async function child(name) {
  const { Registry } = await import('@improv/extfn-core');
  const { wasm } = await import('../dist/index.js');
  const { body, ms } = ATTEMPTS[name];
  const registry = new Registry({ runners: [wasm({ workers: 2 })], cache: false, timeoutMs: ms });
  registry.register({
    name: 'f',
    language: 'wasm',
    body,
    argTypes: [],
    returnType: 'number',
    pure: true,
  });
  // Warm: a trivial body so the threads exist before the baseline.
  registry.register({
    name: 'ok',
    language: 'wasm',
    body: wat(`(module ${entry})`),
    argTypes: [],
    returnType: 'number',
    pure: true,
  });
  await registry.eval('ok', []);
  const rssBefore = status('VmRSS');
  const threadsBefore = threads();
  const began = performance.now();
  let outcome;
  try {
    outcome = `value ${(await registry.eval('f', [])).value}`;
  } catch (error) {
    outcome = `${error.kind}: ${error.message.slice(0, 140)}`;
  }
  const callMs = performance.now() - began;
  const t0 = ticks();
  await new Promise((r) => setTimeout(r, 1_000));
  const cpuNextSecond = ticks() - t0;
  const result = {
    name,
    deadlineMs: ms,
    outcome,
    callMs: Math.round(callMs),
    rssBeforeMiB: Math.round(rssBefore),
    rssPeakMiB: Math.round(status('VmHWM')),
    rssAfter1sMiB: Math.round(status('VmRSS')),
    cpuTicksNextSecond: cpuNextSecond,
    threadsBefore,
    threadsAfter1s: threads(),
  };
  await registry.close();
  console.log(JSON.stringify(result));
}

if (process.argv[2] === '--child') {
  await child(process.argv[3]);
} else {
  const names = process.argv.slice(2).length ? process.argv.slice(2) : Object.keys(ATTEMPTS);
  console.log(
    `load average ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
  for (const name of names) {
    try {
      const out = execFileSync(
        process.execPath,
        [fileURLToPath(import.meta.url), '--child', name],
        {
          encoding: 'utf8',
          timeout: 120_000,
        },
      );
      console.log(out.trim());
    } catch (error) {
      console.log(JSON.stringify({ name, crashed: String(error.message).slice(0, 300) }));
    }
  }
}
