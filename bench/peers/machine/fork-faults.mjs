// Nothing of @improv/extfn: what a fork costs the process that forks. Reads
// 4 MB from a file in /dev/shm into a Float64Array written before (as a
// shared-file result lands in an `into` column), warm, then right after a
// child_process.spawn of /bin/true, and prints the time and the minor faults.
// Run: node bench/peers/machine/fork-faults.mjs
import { spawn } from 'node:child_process';
import { closeSync, openSync, readSync, unlinkSync, writeSync } from 'node:fs';

const BYTES = 4_000_000;
const column = new Float64Array(1_000_000).fill(1);
const target = new Uint8Array(column.buffer, 0, BYTES);
const path = `/dev/shm/fork-faults-${process.pid}`;
const fd = openSync(path, 'w+');
unlinkSync(path);
writeSync(fd, target, 0, BYTES, 0);

function timedRead(label) {
  const faults = process.resourceUsage().minorPageFault;
  const t0 = performance.now();
  readSync(fd, target, 0, BYTES, 0);
  const ms = performance.now() - t0;
  const more = process.resourceUsage().minorPageFault - faults;
  console.log(`${label.padEnd(26)} ${ms.toFixed(1).padStart(6)} ms, ${more} minor faults`);
}

timedRead('first');
timedRead('warm');
for (let k = 0; k < 3; k++) {
  await new Promise((done) => spawn('/bin/true').on('exit', done));
  timedRead('after spawn(/bin/true)');
  timedRead('  and again');
}
closeSync(fd);
