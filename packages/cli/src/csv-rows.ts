/**
 * CSV records → rows to evaluate. Every row written back has the table's
 * width (the header's, or else the first row's), so a short or long row can
 * never push its result into another column.
 */
import type { ExternalFn } from '@improv/extfn-core';
import { parseCell } from './cells.js';
import { usage } from './cli-error.js';
import type { CsvRecord } from './csv.js';
import {
  checkColumnCount,
  isColumnNumber,
  readArguments,
  type TableOptions,
  type TableRow,
} from './table.js';

const LOOKS_LIKE_NAME = /^[A-Za-z_][\w .-]*$/;

/** At most this much of the cells left out of a too-long row is quoted in its problem. */
const QUOTED_EXTRA = 80;

export class CsvRows {
  readonly #fn: ExternalFn;
  readonly #options: TableOptions;
  #header: string[] | undefined;
  #indexes: number[] | undefined;
  #width: number | undefined;
  #needed = 0;
  #rowsSeen = 0;

  constructor(fn: ExternalFn, options: TableOptions) {
    this.#fn = fn;
    this.#options = options;
    if (options.columns) checkColumnCount(fn, options.columns);
    if (!options.header) this.#resolveColumns(undefined);
    if (!options.header && !options.columns) this.#width = fn.argTypes.length;
  }

  /** The header's cells, once read. */
  get header(): string[] | undefined {
    return this.#header;
  }

  #resolveColumns(header: string[] | undefined): void {
    const { columns } = this.#options;
    const arity = this.#fn.argTypes.length;
    this.#indexes = columns
      ? columns.map((column) => {
          const named = header?.indexOf(column) ?? -1;
          if (named >= 0) return named;
          if (isColumnNumber(column)) return Number(column) - 1;
          throw header
            ? usage(
                `--columns: no column named "${column}" in the header (${header.join(', ')})`,
                'use header names or 1-based column numbers',
              )
            : usage(
                `--columns: "${column}" is not a column number, and the table has no header`,
                'pass --header to name columns by the first line, or use 1-based column numbers',
              );
        })
      : Array.from({ length: arity }, (_, a) => a);
    this.#needed = Math.max(0, ...this.#indexes.map((i) => i + 1));
  }

  #describe(a: number): string {
    const column = this.#indexes![a]!;
    const name = this.#header?.[column];
    return `column ${column + 1}${name ? ` (${name})` : ''}`;
  }

  /** The cells as written back: padded or cut to the table's width. */
  #fit(cells: string[]): string[] {
    const width = this.#width ?? this.#needed;
    if (cells.length === width) return cells;
    if (cells.length > width) return cells.slice(0, width);
    return [...cells, ...Array.from({ length: width - cells.length }, () => '')];
  }

  #wrongWidth(record: CsvRecord): string | undefined {
    const { line, cells } = record;
    const width = this.#width!;
    if (cells.length === width) return undefined;
    const expected = this.#header
      ? `the header has ${width}`
      : this.#options.columns
        ? `the first row has ${width}`
        : `${this.#fn.name} takes ${width} argument(s) (${this.#fn.argTypes.join(', ')})`;
    let text = `line ${line}: ${cells.length} cell(s), but ${expected}`;
    if (cells.length > width) {
      const extra = cells.slice(width).join(',');
      text += ` (left out of the output: ${extra.length > QUOTED_EXTRA ? `${extra.slice(0, QUOTED_EXTRA)}…` : extra})`;
    }
    return text;
  }

  /** The row a record holds, or undefined for the header. */
  read(record: CsvRecord): TableRow | undefined {
    if (this.#options.header && this.#header === undefined) {
      if (record.problem)
        throw usage(`line ${record.line}: the header is malformed: ${record.problem}`);
      this.#header = record.cells;
      this.#width = record.cells.length;
      this.#resolveColumns(record.cells);
      return undefined;
    }
    const first = this.#rowsSeen++ === 0;
    const { line, cells } = record;
    if (record.problem) {
      return { line, cells: this.#fit(cells), problem: `line ${line}: ${record.problem}` };
    }
    this.#width ??= cells.length;
    const wrong = this.#wrongWidth(record);
    if (wrong) return { line, cells: this.#fit(cells), problem: wrong };
    if (cells.length < this.#needed) {
      return {
        line,
        cells,
        problem: `line ${line}: ${cells.length} cell(s), but --columns needs ${this.#needed}`,
      };
    }
    const fn = this.#fn;
    const indexes = this.#indexes!;
    const result = readArguments(
      fn,
      (a) => parseCell(cells[indexes[a]!]!, fn.argTypes[a]!),
      (a) => this.#describe(a),
    );
    if ('args' in result) return { line, cells, args: result.args };
    // A header that was not declared is the likeliest cause of a bad first row.
    const hint =
      first && !this.#header && cells.every((c) => LOOKS_LIKE_NAME.test(c.trim()))
        ? ` (is line ${line} a header? pass --header)`
        : '';
    return { line, cells, problem: `line ${line}: ${result.problem}${hint}` };
  }
}
