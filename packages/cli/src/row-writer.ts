/** One row back out, with its result or error beside it, in the table's own format. */
import { type ExternalFn, type Value, valueToJson } from '@improv/extfn-core';
import { formatCell } from './cells.js';
import { formatCsvRecord } from './csv.js';
import { neutraliseFormula } from './formula.js';
import {
  errorParts,
  errorText,
  isFailure,
  MALFORMED,
  type RowOutcome,
  type TableRow,
} from './table.js';

export interface RowWriter {
  /** What comes before the rows: a byte-order mark when the input began with one, the CSV header, or ''. */
  header(header: readonly string[] | undefined): string;
  row(row: TableRow, outcome: RowOutcome): string;
}

/**
 * CSV: the row's cells, then `result` and `error`; formulas neutralised unless
 * asked not to. The output starts with a byte-order mark when the input did
 * (`bom`): a spreadsheet program reads a CSV file without one in the system's
 * legacy encoding.
 */
export function csvRowWriter(
  fn: ExternalFn,
  options: { newline: () => string; bom: () => boolean; keepFormulas: boolean },
): RowWriter {
  const guard = options.keepFormulas ? (c: string) => c : neutraliseFormula;
  const record = (cells: readonly string[]) =>
    formatCsvRecord(cells.map(guard)) + options.newline();
  return {
    header: (header) =>
      (options.bom() ? '\uFEFF' : '') + (header ? record([...header, 'result', 'error']) : ''),
    row: (row, outcome) =>
      record([
        ...(row.cells ?? []),
        ...(isFailure(outcome) ? ['', errorText(outcome, fn)] : [formatCell(outcome as Value), '']),
      ]),
  };
}

/** Keys we add to an object row; a row that has them already is rewritten instead of extended. */
const ADDED_KEYS = ['result', 'error', 'line'];

/**
 * JSON lines: the row as it was written (its exact text: 1e400 or a 20-digit
 * integer is not re-serialised into something else), with `result` or `error`.
 */
export function jsonRowWriter(fn: ExternalFn): RowWriter {
  return {
    header: () => '',
    row: (row, outcome) => {
      const failed = isFailure(outcome);
      const beside: Record<string, unknown> = failed
        ? { error: errorParts(outcome, fn) }
        : { result: valueToJson(outcome as Value) };
      if (failed && outcome.kind === MALFORMED) beside.line = row.line;
      const tail = JSON.stringify(beside).slice(1, -1);
      const json = row.json;
      const raw = row.raw?.trim();
      if (json === undefined || raw === undefined) {
        return `${JSON.stringify({ line: row.line, input: row.raw, ...beside })}\n`;
      }
      if (Array.isArray(json)) return `{"args":${raw},${tail}}\n`;
      if (typeof json === 'object' && json !== null) {
        const keys = Object.keys(json);
        if (keys.some((k) => ADDED_KEYS.includes(k))) {
          return `${JSON.stringify({ ...json, ...beside })}\n`;
        }
        return `${raw.slice(0, -1)}${keys.length ? ',' : ''}${tail}}\n`;
      }
      return `${JSON.stringify({ line: row.line, input: json, ...beside })}\n`;
    },
  };
}
