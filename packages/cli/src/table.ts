/**
 * A table of rows to evaluate: the row as read from CSV or JSON lines, what
 * it evaluated to, and the pieces both formats share.
 */
import { type ExternalFn, ExtFnError, type RowResult, type Value } from '@improv/extfn-core';
import { argumentLabel, type CellResult } from './cells.js';
import { type CliError, usage } from './cli-error.js';

export type TableFormat = 'csv' | 'jsonl';

export interface TableRow {
  /** 1-based line where the row starts in the input. */
  readonly line: number;
  /** The arguments, when the row could be read. */
  readonly args?: Value[];
  /** Why the row could not be read (line number, column, what to write instead). */
  readonly problem?: string;
  /** A fix for the whole table that this row points to (a forgotten --header or --columns), said once in the summary. */
  readonly fix?: string;
  /** CSV: the cells written back, exactly as many as the table is wide. */
  readonly cells?: string[];
  /** JSON lines: the parsed row, when it is JSON. */
  readonly json?: unknown;
  /** JSON lines: the line as read, echoed exactly. */
  readonly raw?: string;
}

export interface TableOptions {
  /** CSV: the first record names the columns. */
  readonly header?: boolean;
  /** Which columns hold the arguments, in declared order: header names, JSON keys, or 1-based numbers. */
  readonly columns?: readonly string[];
  /** The rows file as named on the command line (`-` for standard input), for fixes that name it. */
  readonly file?: string;
}

/** The kind a row that could not be read is reported under. */
export const MALFORMED = 'MalformedRow';

export type Malformed = { kind: typeof MALFORMED; message: string };
export type RowOutcome = RowResult | Malformed;

export function formatFromPath(path: string): TableFormat | undefined {
  const lower = path.toLowerCase();
  if (lower.endsWith('.csv')) return 'csv';
  if (lower.endsWith('.jsonl') || lower.endsWith('.ndjson')) return 'jsonl';
  return undefined;
}

export function checkColumnCount(fn: ExternalFn, columns: readonly unknown[]): void {
  if (columns.length !== fn.argTypes.length) {
    throw usage(
      `--columns names ${columns.length} column(s), but ${fn.name} takes ${fn.argTypes.length} argument(s) (${fn.argTypes.join(', ')})`,
      'name one column per argument, in declared order',
    );
  }
}

export const isColumnNumber = (column: string): boolean => /^[1-9]\d*$/.test(column);

/** `--columns 0,1`: column numbers count from 1; the fix gives the list counted so. */
export function columnZero(columns: readonly string[]): CliError | undefined {
  if (!columns.some((c) => /^0+$/.test(c))) return undefined;
  const shifted = columns.every((c) => /^\d+$/.test(c))
    ? `: --columns ${columns.map((c) => Number(c) + 1).join(',')}`
    : '';
  return usage(
    `--columns ${columns.join(',')}: column numbers start at 1, not 0`,
    `number the columns from 1 (the first column is 1)${shifted}`,
  );
}

/** Reads the arguments of one row from its cells; the first problem wins. */
export function readArguments(
  fn: ExternalFn,
  read: (index: number) => CellResult,
  describeColumn: (index: number) => string,
): { args: Value[] } | { problem: string } {
  const args: Value[] = [];
  for (let a = 0; a < fn.argTypes.length; a++) {
    const cell = read(a);
    if (!cell.ok) {
      return {
        problem: `${describeColumn(a)}, ${argumentLabel(fn, a)}: ${cell.problem}; ${cell.fix}`,
      };
    }
    args.push(cell.value);
  }
  return { args };
}

export function isFailure(outcome: RowOutcome): outcome is ExtFnError | Malformed {
  return ExtFnError.isInstance(outcome) || (outcome as { kind?: unknown }).kind === MALFORMED;
}

/** A failure as written beside its row: kind and message, without the function name we already know. */
export function errorParts(
  error: ExtFnError | { kind: string; message: string },
  fn: ExternalFn,
): { kind: string; message: string } {
  const prefix = `function ${fn.name}: `;
  const message = error.message.startsWith(prefix)
    ? error.message.slice(prefix.length)
    : error.message;
  return { kind: error.kind, message };
}

/** "Kind: message", for the CSV error column and stderr. */
export function errorText(
  error: ExtFnError | { kind: string; message: string },
  fn: ExternalFn,
): string {
  const { kind, message } = errorParts(error, fn);
  return `${kind}: ${message}`;
}
