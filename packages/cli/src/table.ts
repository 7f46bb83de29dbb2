/**
 * A table of rows to evaluate, read from CSV or JSON lines, and written back
 * in the same format with each row's result or error beside it.
 */
import {
  type ExternalFn,
  ExtFnError,
  type RowResult,
  type Value,
  valueToJson,
} from '@improv/extfn-core';
import { argumentLabel, type CellResult, formatCell, jsonCell, parseCell } from './cells.js';
import { usage } from './cli-error.js';
import { formatCsvRecord, parseCsv } from './csv.js';

export type TableFormat = 'csv' | 'jsonl';

export interface TableRow {
  /** 1-based line where the row starts in the input. */
  readonly line: number;
  /** The arguments, when the row could be read. */
  readonly args?: Value[];
  /** Why the row could not be read (line number, column, what to write instead). */
  readonly problem?: string;
  /** CSV: the cells as read, written back unchanged. */
  readonly cells?: string[];
  /** JSON lines: the parsed row (array or object), or the raw text when it is not JSON. */
  readonly json?: unknown;
  readonly raw?: string;
}

export interface Table {
  readonly format: TableFormat;
  readonly header?: string[];
  readonly rows: TableRow[];
  readonly newline: '\n' | '\r\n';
}

export interface TableOptions {
  /** CSV: the first record names the columns. */
  readonly header?: boolean;
  /** Which columns hold the arguments, in declared order: header names, JSON keys, or 1-based numbers. */
  readonly columns?: readonly string[];
}

/** The kind a row that could not be read is reported under. */
export const MALFORMED = 'MalformedRow';

const LOOKS_LIKE_NAME = /^[A-Za-z_][\w .-]*$/;

export function formatFromPath(path: string): TableFormat | undefined {
  const lower = path.toLowerCase();
  if (lower.endsWith('.csv')) return 'csv';
  if (lower.endsWith('.jsonl') || lower.endsWith('.ndjson')) return 'jsonl';
  return undefined;
}

function checkColumnCount(fn: ExternalFn, columns: readonly unknown[]): void {
  if (columns.length !== fn.argTypes.length) {
    throw usage(
      `--columns names ${columns.length} column(s), but ${fn.name} takes ${fn.argTypes.length} argument(s) (${fn.argTypes.join(', ')})`,
      'name one column per argument, in declared order',
    );
  }
}

/** Reads the arguments of one row from its cells; the first problem wins. */
function readArguments(
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

export function readCsvTable(text: string, fn: ExternalFn, options: TableOptions): Table {
  const { records, newline } = parseCsv(text);
  let header: string[] | undefined;
  let body = records;
  if (options.header) {
    const first = records[0];
    if (first?.problem)
      throw usage(`line ${first.line}: the header is malformed: ${first.problem}`);
    header = first?.cells ?? [];
    body = records.slice(1);
  }
  const arity = fn.argTypes.length;
  let indexes: number[];
  if (options.columns) {
    checkColumnCount(fn, options.columns);
    indexes = options.columns.map((column) => {
      const named = header?.indexOf(column) ?? -1;
      if (named >= 0) return named;
      if (/^[1-9]\d*$/.test(column)) return Number(column) - 1;
      throw header
        ? usage(
            `--columns: no column named "${column}" in the header (${header.join(', ')})`,
            'use header names or 1-based column numbers',
          )
        : usage(
            `--columns: "${column}" is not a column number, and the table has no header`,
            'pass --header to name columns by the first line, or use 1-based column numbers',
          );
    });
  } else {
    indexes = Array.from({ length: arity }, (_, a) => a);
  }
  const needed = Math.max(0, ...indexes.map((i) => i + 1));
  const describe = (i: number): string => {
    const column = indexes[i]!;
    const name = header?.[column];
    return `column ${column + 1}${name ? ` (${name})` : ''}`;
  };

  const rows: TableRow[] = body.map((record, r) => {
    const { line, cells } = record;
    if (record.problem) return { line, cells, problem: `line ${line}: ${record.problem}` };
    if (header && cells.length !== header.length) {
      return {
        line,
        cells,
        problem: `line ${line}: ${cells.length} cell(s), but the header has ${header.length}`,
      };
    }
    if (!header && !options.columns && cells.length !== arity) {
      return {
        line,
        cells,
        problem: `line ${line}: ${cells.length} cell(s), but ${fn.name} takes ${arity} argument(s) (${fn.argTypes.join(', ')})`,
      };
    }
    if (cells.length < needed) {
      return {
        line,
        cells,
        problem: `line ${line}: ${cells.length} cell(s), but --columns needs ${needed}`,
      };
    }
    const result = readArguments(
      fn,
      (a) => parseCell(cells[indexes[a]!]!, fn.argTypes[a]!),
      describe,
    );
    if ('args' in result) return { line, cells, args: result.args };
    // A header that was not declared is the likeliest cause of a bad first row.
    const hint =
      r === 0 && !header && cells.every((c) => LOOKS_LIKE_NAME.test(c.trim()))
        ? ` (is line ${line} a header? pass --header)`
        : '';
    return { line, cells, problem: `line ${line}: ${result.problem}${hint}` };
  });
  return header ? { format: 'csv', header, rows, newline } : { format: 'csv', rows, newline };
}

export function readJsonLinesTable(text: string, fn: ExternalFn, options: TableOptions): Table {
  const arity = fn.argTypes.length;
  if (options.columns) checkColumnCount(fn, options.columns);
  const rows: TableRow[] = [];
  const lines = text.split('\n');
  for (let l = 0; l < lines.length; l++) {
    const raw = lines[l]!.replace(/\r$/, '');
    const line = l + 1;
    if (raw.trim() === '') continue;
    let json: unknown;
    try {
      json = JSON.parse(raw);
    } catch (error) {
      rows.push({
        line,
        raw,
        problem: `line ${line}: not valid JSON (${(error as Error).message})`,
      });
      continue;
    }
    if (Array.isArray(json)) {
      const indexes = options.columns
        ? options.columns.map((c) => (/^[1-9]\d*$/.test(c) ? Number(c) - 1 : Number.NaN))
        : Array.from({ length: arity }, (_, a) => a);
      if (indexes.some(Number.isNaN)) {
        throw usage(
          `line ${line}: the row is a JSON array, so --columns must be 1-based numbers`,
          'use numbers such as --columns 2,1, or write rows as objects',
        );
      }
      if (!options.columns && json.length !== arity) {
        rows.push({
          line,
          json,
          problem: `line ${line}: ${json.length} value(s), but ${fn.name} takes ${arity} argument(s) (${fn.argTypes.join(', ')})`,
        });
        continue;
      }
      const missing = indexes.find((i) => i >= json.length);
      if (missing !== undefined) {
        rows.push({
          line,
          json,
          problem: `line ${line}: ${json.length} value(s), but --columns needs ${missing + 1}`,
        });
        continue;
      }
      const result = readArguments(
        fn,
        (a) => jsonCell(json[indexes[a]!], fn.argTypes[a]!),
        (a) => `value ${indexes[a]! + 1}`,
      );
      rows.push(
        'args' in result
          ? { line, json, args: result.args }
          : { line, json, problem: `line ${line}: ${result.problem}` },
      );
      continue;
    }
    if (typeof json === 'object' && json !== null) {
      const columns = options.columns;
      if (!columns) {
        throw usage(
          `line ${line}: the row is a JSON object, so improv-extfn needs to know which keys hold the arguments`,
          `pass --columns KEY,KEY,… naming ${arity} key(s) in declared order (${fn.argTypes.join(', ')})`,
        );
      }
      const record = json as Record<string, unknown>;
      const absent = columns.find((c) => !(c in record));
      if (absent !== undefined) {
        rows.push({ line, json, problem: `line ${line}: no key "${absent}"` });
        continue;
      }
      const result = readArguments(
        fn,
        (a) => jsonCell(record[columns[a]!], fn.argTypes[a]!),
        (a) => `key "${columns[a]}"`,
      );
      rows.push(
        'args' in result
          ? { line, json, args: result.args }
          : { line, json, problem: `line ${line}: ${result.problem}` },
      );
      continue;
    }
    rows.push({
      line,
      json,
      problem: `line ${line}: a row must be a JSON array of arguments or an object, got ${json === null ? 'null' : typeof json}`,
    });
  }
  return { format: 'jsonl', rows, newline: '\n' };
}

/** What is written beside a row that failed: "Kind: message", without the function name we already know. */
export function errorText(
  error: ExtFnError | { kind: string; message: string },
  fn: ExternalFn,
): string {
  const prefix = `function ${fn.name}: `;
  const message = error.message.startsWith(prefix)
    ? error.message.slice(prefix.length)
    : error.message;
  return `${error.kind}: ${message}`;
}

export type RowOutcome = RowResult | { kind: typeof MALFORMED; message: string };

export function isFailure(
  outcome: RowOutcome,
): outcome is ExtFnError | { kind: typeof MALFORMED; message: string } {
  return ExtFnError.isInstance(outcome) || (outcome as { kind?: unknown }).kind === MALFORMED;
}

function errorJson(
  outcome: ExtFnError | { kind: string; message: string },
  fn: ExternalFn,
): { kind: string; message: string } {
  const prefix = `function ${fn.name}: `;
  const message = outcome.message.startsWith(prefix)
    ? outcome.message.slice(prefix.length)
    : outcome.message;
  return { kind: outcome.kind, message };
}

/** The output text: each row with its result or error, in the input's format. */
export function writeTable(table: Table, outcomes: readonly RowOutcome[], fn: ExternalFn): string {
  const out: string[] = [];
  if (table.format === 'csv') {
    if (table.header) out.push(formatCsvRecord([...table.header, 'result', 'error']));
    table.rows.forEach((row, i) => {
      const outcome = outcomes[i]!;
      const tail = isFailure(outcome)
        ? ['', errorText(outcome, fn)]
        : [formatCell(outcome as Value), ''];
      out.push(formatCsvRecord([...(row.cells ?? []), ...tail]));
    });
  } else {
    table.rows.forEach((row, i) => {
      const outcome = outcomes[i]!;
      const beside = isFailure(outcome)
        ? { error: errorJson(outcome, fn) }
        : { result: valueToJson(outcome as Value) };
      let record: Record<string, unknown>;
      if (row.json === undefined) record = { line: row.line, input: row.raw, ...beside };
      else if (Array.isArray(row.json)) record = { args: row.json, ...beside };
      else if (typeof row.json === 'object' && row.json !== null)
        record = { ...(row.json as object), ...beside };
      else record = { line: row.line, input: row.json, ...beside };
      if (isFailure(outcome) && outcome.kind === MALFORMED) record.line = row.line;
      out.push(JSON.stringify(record));
    });
  }
  return out.length ? out.join(table.newline) + table.newline : '';
}
