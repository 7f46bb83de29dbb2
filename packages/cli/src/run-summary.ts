/** What `run` tells the person at the end: the first failures, counts by kind, wall time, and how to raise a limit that was hit. */
import type { ExternalFn } from '@improv/extfn-core';
import { cliFix, cliWording } from './hints.js';
import { errorText, isFailure, MALFORMED, type RowOutcome, type TableRow } from './table.js';

export interface Summary {
  rows: number;
  ok: number;
  failed: number;
  errors: Record<string, number>;
  /** Wall time of the whole command, reading and start-up included. */
  seconds: number;
  rowsPerSecond: number;
  output: string | null;
  /** The fixes stderr ends with (a limit to raise, a library to allow, a file to re-encode), when there are any. */
  fixes?: string[];
}

/** Problems listed on stderr before the summary; the output has them all. */
const LISTED_PROBLEMS = 10;

/** Counts outcomes as they are written, keeping the first few problems and the limits hit. */
export class Tally {
  readonly #fn: ExternalFn;
  rows = 0;
  failed = 0;
  readonly errors: Record<string, number> = {};
  readonly problems: string[] = [];
  readonly fixes = new Set<string>();

  constructor(fn: ExternalFn) {
    this.#fn = fn;
  }

  add(row: TableRow, outcome: RowOutcome): void {
    this.rows++;
    if (!isFailure(outcome)) return;
    if (row.fix) this.fixes.add(row.fix);
    this.failed++;
    this.errors[outcome.kind] = (this.errors[outcome.kind] ?? 0) + 1;
    if (this.problems.length < LISTED_PROBLEMS) {
      const text = errorText(outcome, this.#fn);
      this.problems.push(outcome.kind === MALFORMED ? text : `line ${row.line}: ${text}`);
    }
    const fix = cliFix(outcome);
    if (fix) this.fixes.add(fix);
  }

  summary(seconds: number, output: string | null): Summary {
    return {
      rows: this.rows,
      ok: this.rows - this.failed,
      failed: this.failed,
      errors: this.errors,
      seconds: Number(seconds.toFixed(3)),
      rowsPerSecond: seconds > 0 ? Math.round(this.rows / seconds) : 0,
      output,
      ...(this.fixes.size ? { fixes: [...this.fixes] } : {}),
    };
  }
}

export function formatSummary(summary: Summary, tally: Tally): string {
  const n = (x: number) => x.toLocaleString('en-US');
  const kinds = Object.entries(summary.errors)
    .map(([kind, count]) => `${kind} ${n(count)}`)
    .join(', ');
  let text = '';
  // The first line only (the output has the rest), without the CR of a CR LF.
  for (const problem of tally.problems) text += `  ${cliWording(problem.split(/\r?\n/)[0]!)}\n`;
  if (summary.failed > tally.problems.length) {
    text += `  … and ${n(summary.failed - tally.problems.length)} more (see the output)\n`;
  }
  text +=
    `improv-extfn: ${n(summary.rows)} row(s): ${n(summary.ok)} ok, ${n(summary.failed)} failed` +
    (kinds ? ` (${kinds})` : '') +
    ` in ${summary.seconds.toFixed(2)} s, ${n(summary.rowsPerSecond)} rows/s` +
    (summary.output ? `; written to ${summary.output}` : '') +
    '\n';
  for (const fix of tally.fixes) text += `  fix: ${fix}\n`;
  return text;
}
