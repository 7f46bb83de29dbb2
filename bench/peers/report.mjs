// Printing for the peers benchmark: min/median/max of each side's runs, rows
// per second, the speed ratio ours/PostgreSQL, and the load average around
// each workload, so a figure is never read without the state of the machine.
import { loadavg } from 'node:os';

/** min, median and max of a list of milliseconds. */
export function summarize(times) {
  const sorted = [...times].sort((a, b) => a - b);
  return { min: sorted[0], median: sorted[Math.floor(sorted.length / 2)], max: sorted.at(-1) };
}

export const loadAverage = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');

const fmtMs = (ms) => (ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(1)} ms`);
const fmtRate = (perSecond) =>
  perSecond >= 1e6 ? `${(perSecond / 1e6).toFixed(2)} M/s` : `${(perSecond / 1e3).toFixed(0)} k/s`;

/**
 * Ours against PostgreSQL as a speed ratio (PostgreSQL's time / ours, which is
 * ours rows/s / PostgreSQL's): above 1 ours is faster. Median against median,
 * and best against best.
 */
function ratio(ours, peer) {
  const median = peer.median / ours.median;
  const best = peer.min / ours.min;
  const word = median >= 1 ? 'faster' : 'slower';
  return `${median.toFixed(2)}× (best ${best.toFixed(2)}×) ${word}`;
}

/**
 * One workload's table. `sides` are `{ label, times, peer }`: PostgreSQL's
 * sides have `peer: true`; each of ours is compared with every peer side.
 */
export function printWorkload({ title, rows, timed, sides, notes = [], loadBefore }) {
  const peers = sides.filter((side) => side.peer);
  const head = ['side', 'min', 'median', 'max', 'rows/s (median)'];
  for (const peer of peers) head.push(`ours/${peer.short ?? 'PostgreSQL'}`);
  const table = sides.map((side) => {
    const s = summarize(side.times);
    const cells = [
      side.label,
      fmtMs(s.min),
      fmtMs(s.median),
      fmtMs(s.max),
      fmtRate((rows / s.median) * 1000),
    ];
    for (const peer of peers) cells.push(side.peer ? '' : ratio(s, summarize(peer.times)));
    return cells;
  });
  const widths = head.map((h, k) => Math.max(h.length, ...table.map((cells) => cells[k].length)));
  const line = (cells) =>
    `   ${cells.map((c, k) => (k === 0 ? c.padEnd(widths[k]) : c.padStart(widths[k]))).join('  ')}`;
  console.log(`\n${title}, ${rows.toLocaleString('en-US')} rows`);
  for (const what of timed) console.log(`   timed: ${what}`);
  console.log(line(head));
  for (const cells of table) console.log(line(cells));
  for (const note of notes) console.log(`   ${note}`);
  console.log(`   load average (1, 5, 15 min): ${loadBefore} at start → ${loadAverage()} at end`);
}

export function printSkip(title, reason) {
  console.log(`\n${title}\n   skipped: ${reason}`);
}
