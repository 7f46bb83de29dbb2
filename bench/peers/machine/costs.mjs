// Nothing of @improv/extfn: two costs of the machine that our side pays on
// every chunk and a PostgreSQL backend mostly does not, printed beside the
// figures so that runs on different days can be told apart by the machine.
//   - a pipe round trip between two processes (Python forks and ping-pongs a
//     byte, as `perf bench sched pipe` does, with little interpreter overhead);
//   - a first touch of a fresh 4 KiB page (a new result column's cost).
// Run alone: node bench/peers/machine/costs.mjs
import { spawnSync } from 'node:child_process';
import { pathToFileURL } from 'node:url';

const PING_PONG = `
import os, time
n = 20000
a_r, a_w = os.pipe(); b_r, b_w = os.pipe()
if os.fork() == 0:
    for _ in range(n):
        os.read(a_r, 1); os.write(b_w, b"x")
    os._exit(0)
for _ in range(500):
    pass
t = time.perf_counter()
for _ in range(n):
    os.write(a_w, b"x"); os.read(b_r, 1)
print((time.perf_counter() - t) / n * 1e6)
os.wait()
`;

// Not a turbo task: the Python is read straight from the environment.
const { env } = process;

/** Microseconds per pipe round trip, or undefined without a Python. */
export function pipeRoundTripUs(python = env.IMPROV_EXTFN_PYTHON ?? '/usr/bin/python3') {
  const run = spawnSync(python, ['-c', PING_PONG], { encoding: 'utf8', timeout: 60_000 });
  const us = Number(run.stdout?.trim());
  return run.status === 0 && us > 0 ? us : undefined;
}

/** Microseconds per first touch of a 4 KiB page: the best of 3 over 64 MiB. */
export function pageTouchUs() {
  const pages = 16_384;
  let best = Number.POSITIVE_INFINITY;
  for (let i = 0; i < 3; i++) {
    const t0 = performance.now();
    const fresh = new Float64Array(pages * 512);
    for (let at = 0; at < fresh.length; at += 512) fresh[at] = 1;
    best = Math.min(best, ((performance.now() - t0) * 1000) / pages);
  }
  return best;
}

/** One line: both costs, for the benchmark's header. */
export function machineCosts() {
  const pipe = pipeRoundTripUs();
  return (
    `a pipe round trip between two processes ${pipe === undefined ? 'not measured (no python3)' : `${pipe.toFixed(1)} µs`}, ` +
    `a first touch of a 4 KiB page ${pageTouchUs().toFixed(2)} µs`
  );
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) console.log(machineCosts());
