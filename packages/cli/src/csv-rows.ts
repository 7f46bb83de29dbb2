/**
 * CSV records → rows to evaluate. Every row written back has the table's
 * width (the header's, or else the first row's), so a short or long row can
 * never push its result into another column.
 */
import type { ExternalFn } from '@improv/extfn-core';
import { parseCell } from './cells.js';
import { badInput, usage } from './cli-error.js';
import type { CsvRecord } from './csv.js';
import {
  checkColumnCount,
  columnZero,
  isColumnNumber,
  readArguments,
  type TableOptions,
  type TableRow,
} from './table.js';
import { describeBadCharacter, firstBadCharacter, reencodeFix } from './utf8.js';

/** The first cell holding a byte that is not UTF-8 (see utf8.ts): its 1-based column, and the byte. */
function notUtf8(cells: readonly string[]): { column: number; what: string } | undefined {
  for (let c = 0; c < cells.length; c++) {
    const index = firstBadCharacter(cells[c]!);
    if (index !== -1) return { column: c + 1, what: describeBadCharacter(cells[c]!, index) };
  }
  return undefined;
}

const LOOKS_LIKE_NAME = /^[A-Za-z_][\w .-]*$/;

/**
 * A line read as one cell that holds semicolons or tabs: a file separated by
 * those (a spreadsheet's export in some locales), which CSV reads as one cell.
 */
function separatorHint(
  cells: readonly string[],
  file: string,
): { short: string; fix: string } | undefined {
  if (cells.length !== 1) return undefined;
  const by = cells[0]!.includes(';') ? 'semicolons' : cells[0]!.includes('\t') ? 'tabs' : undefined;
  if (!by) return undefined;
  return {
    short: `only commas separate cells, and this line has ${by}`,
    fix: `only commas separate CSV cells, and ${file} looks separated by ${by}: convert it to commas (save it from the spreadsheet as CSV with a comma delimiter), or write the rows as JSON lines`,
  };
}

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
  readonly #fileName: string;

  constructor(fn: ExternalFn, options: TableOptions) {
    this.#fn = fn;
    this.#options = options;
    this.#fileName =
      options.file === undefined || options.file === '-' ? 'standard input' : options.file;
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
    const zero = columns && columnZero(columns);
    this.#indexes = columns
      ? columns.map((column) => {
          const named = header?.indexOf(column) ?? -1;
          if (named >= 0) return named;
          if (zero) throw zero;
          // Known before any row is read: a number past the header would fail every row.
          if (isColumnNumber(column) && header && Number(column) > header.length) {
            const separated = separatorHint(header, this.#fileName);
            throw usage(
              `--columns: column ${column} is beyond the header, which has ${header.length} column(s) (${header.join(', ')})`,
              separated?.fix ?? `use header names or column numbers from 1 to ${header.length}`,
            );
          }
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
    const bad = notUtf8(record.cells);
    if (this.#options.header && this.#header === undefined) {
      if (bad) {
        throw badInput(
          `${this.#fileName}: line ${record.line} (the header), column ${bad.column}: ${bad.what}`,
          reencodeFix(this.#fileName),
        );
      }
      if (record.problem)
        throw usage(`line ${record.line}: the header is malformed: ${record.problem}`);
      this.#header = record.cells;
      this.#width = record.cells.length;
      this.#resolveColumns(record.cells);
      return undefined;
    }
    const first = this.#rowsSeen++ === 0;
    const { line, cells } = record;
    if (bad) {
      this.#width ??= cells.length;
      const name = this.#header?.[bad.column - 1];
      return {
        line,
        cells: this.#fit(cells),
        problem: `line ${line}, column ${bad.column}${name ? ` (${name})` : ''}: ${bad.what}; the file must be UTF-8`,
        fix: reencodeFix(this.#fileName),
      };
    }
    if (record.problem) {
      return { line, cells: this.#fit(cells), problem: `line ${line}: ${record.problem}` };
    }
    this.#width ??= cells.length;
    const separated = separatorHint(cells, this.#fileName);
    const wrong = this.#wrongWidth(record);
    if (wrong) {
      const hint = separated ?? (first ? this.#layoutHint(line, cells) : undefined);
      return {
        line,
        cells: this.#fit(cells),
        problem: hint ? `${wrong} (${hint.short})` : wrong,
        ...(hint ? { fix: hint.fix } : {}),
      };
    }
    if (cells.length < this.#needed) {
      // Without --columns the arguments are the first cells: name the function, not a flag not given.
      const needs = this.#options.columns
        ? `--columns needs ${this.#needed}`
        : `${this.#fn.name} takes ${this.#needed} argument(s) (${this.#fn.argTypes.join(', ')})`;
      return {
        line,
        cells,
        problem: `line ${line}: ${cells.length} cell(s), but ${needs}${separated ? ` (${separated.short})` : ''}`,
        ...(separated ? { fix: separated.fix } : {}),
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
    const hint = separated ?? (first ? this.#layoutHint(line, cells) : undefined);
    return {
      line,
      cells,
      problem: `line ${line}: ${result.problem}${hint ? ` (${hint.short})` : ''}`,
      ...(hint ? { fix: hint.fix } : {}),
    };
  }

  /** Whether a cell is a value of one of the argument types (a header's names are not). */
  #isValue(cell: string): boolean {
    return [...new Set(this.#fn.argTypes)].some((type) => parseCell(cell, type).ok);
  }

  /**
   * When the first row cannot be read, the likeliest reason: a header that was
   * not declared (cells that are names, not values of the argument types), or
   * a table wider than the arguments that needs --columns.
   */
  #layoutHint(line: number, cells: readonly string[]): { short: string; fix: string } | undefined {
    const fn = this.#fn;
    const arity = fn.argTypes.length;
    const { header, columns } = this.#options;
    const list = (names: readonly string[]) =>
      (names.length > 10 ? [...names.slice(0, 10), '…'] : names).join(', ');
    const listed = list(cells);
    if (header) {
      // --header without --columns: the arguments are the first columns.
      if (columns || this.#header === undefined || this.#header.length === arity) return undefined;
      return {
        short: `the header has ${this.#header.length} columns: name ${fn.name}'s ${arity} with --columns`,
        fix: `name the ${arity} argument column(s) of ${fn.name} in declared order with --columns (the header has ${list(this.#header)}); without it the first ${arity} are used`,
      };
    }
    const headerLike =
      cells.length > 0 &&
      cells.every((c) => LOOKS_LIKE_NAME.test(c.trim())) &&
      cells.some((c) => !this.#isValue(c));
    const wide = !columns && cells.length > arity;
    if (headerLike && wide) {
      return {
        short: `is line ${line} a header? pass --header, and --columns with ${fn.name}'s ${arity} argument column(s)`,
        fix: `line ${line} looks like a header (${listed}): pass --header, and --columns with the names of ${fn.name}'s ${arity} argument column(s) in declared order`,
      };
    }
    if (headerLike) {
      return {
        short: `is line ${line} a header? pass --header`,
        fix: `line ${line} looks like a header (${listed}): pass --header${columns ? '' : ', and --columns to pick the argument columns by name'}`,
      };
    }
    if (wide) {
      return {
        short: `pick ${fn.name}'s ${arity} argument column(s) with --columns`,
        fix: `the rows have ${cells.length} cells and ${fn.name} takes ${arity} argument(s): pick the argument columns with --columns, by 1-based number (--columns ${Array.from({ length: arity }, (_, i) => i + 1).join(',')}), or by name with --header when line ${line} names them`,
      };
    }
    return undefined;
  }
}
