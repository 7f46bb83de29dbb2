/**
 * JSON lines → rows to evaluate. A row is an array of arguments, or an
 * object whose keys --columns names. The first row settles which: a row of
 * the other shape later on is that row's error, never the whole run's.
 */
import type { ExternalFn } from '@improv/extfn-core';
import { type CellResult, HOW_TO_WRITE, jsonCell } from './cells.js';
import { usage } from './cli-error.js';
import { describeJsonError } from './json-error.js';
import { duplicateKey } from './json-keys.js';
import type { Line } from './lines.js';
import {
  checkColumnCount,
  columnZero,
  isColumnNumber,
  readArguments,
  type TableOptions,
  type TableRow,
} from './table.js';
import { describeBadCharacter, firstBadCharacter, reencodeFix } from './utf8.js';

const isObject = (x: unknown): x is Record<string, unknown> =>
  typeof x === 'object' && x !== null && !Array.isArray(x);

/** JSON.parse reads 1e400 as Infinity: a value the row did not write, so it is refused. */
function argumentCell(json: unknown, type: ExternalFn['argTypes'][number]): CellResult {
  if (typeof json === 'number' && !Number.isFinite(json)) {
    return {
      ok: false,
      problem: 'the number is beyond the range of a 64-bit float (it would read as Infinity)',
      fix: `${HOW_TO_WRITE.number}; write "Infinity" or "-Infinity" for an infinite value`,
    };
  }
  return jsonCell(json, type);
}

export class JsonLinesRows {
  readonly #fn: ExternalFn;
  readonly #columns: readonly string[] | undefined;
  readonly #file: string;
  #rowsSeen = 0;

  constructor(fn: ExternalFn, options: TableOptions) {
    this.#fn = fn;
    this.#columns = options.columns;
    this.#file = options.file ?? 'the rows file';
    if (options.columns) checkColumnCount(fn, options.columns);
  }

  /** The row a line holds, or undefined for a blank line. */
  read(input: Line): TableRow | undefined {
    const { line } = input;
    if ('tooLong' in input) {
      return {
        line,
        raw: `${input.start}…`,
        problem: `line ${line}: the line is longer than 8 MiB`,
      };
    }
    const raw = input.text;
    if (raw.trim() === '') return undefined;
    const first = this.#rowsSeen++ === 0;
    const bad = firstBadCharacter(raw);
    if (bad !== -1) return this.#notUtf8(line, raw, bad);
    let json: unknown;
    try {
      json = JSON.parse(raw);
    } catch (error) {
      const where = describeJsonError(error, raw).replace(/^line 1, /, '');
      return { line, raw, problem: `line ${line}: not valid JSON (${where})` };
    }
    const twice = duplicateKey(raw, json);
    if (twice) {
      return {
        line,
        json,
        raw,
        problem: `line ${line}, column ${twice.index + 1}: the key ${JSON.stringify(twice.key)} is written twice in one object (JSON would keep only the last value); write each key once`,
      };
    }
    const fn = this.#fn;
    const arity = fn.argTypes.length;
    const columns = this.#columns;
    if (Array.isArray(json)) {
      const zero = first && columns ? columnZero(columns) : undefined;
      if (zero) throw zero;
      if (columns && !columns.every(isColumnNumber)) {
        const message = `line ${line}: the row is a JSON array, but --columns names keys (${columns.join(', ')})`;
        if (first)
          throw usage(
            message,
            'use 1-based numbers such as --columns 2,1, or write rows as objects',
          );
        return { line, json, raw, problem: `${message}; write this row as an object` };
      }
      const indexes = columns
        ? columns.map((c) => Number(c) - 1)
        : Array.from({ length: arity }, (_, a) => a);
      if (!columns && json.length !== arity) {
        return {
          line,
          json,
          raw,
          problem: `line ${line}: ${json.length} value(s), but ${fn.name} takes ${arity} argument(s) (${fn.argTypes.join(', ')})`,
        };
      }
      const missing = indexes.find((i) => i >= json.length);
      if (missing !== undefined) {
        return {
          line,
          json,
          raw,
          problem: `line ${line}: ${json.length} value(s), but --columns needs ${missing + 1}`,
        };
      }
      const result = readArguments(
        fn,
        (a) => argumentCell(json[indexes[a]!], fn.argTypes[a]!),
        (a) => `value ${indexes[a]! + 1}`,
      );
      return 'args' in result
        ? { line, json, raw, args: result.args }
        : { line, json, raw, problem: `line ${line}: ${result.problem}` };
    }
    if (isObject(json)) {
      if (!columns) {
        const message = `line ${line}: the row is a JSON object, so improv-extfn needs to know which keys hold the arguments`;
        const fix = `pass --columns KEY,KEY,… naming ${arity} key(s) in declared order (${fn.argTypes.join(', ')})`;
        if (first) throw usage(message, fix);
        return { line, json, raw, problem: `${message}: ${fix}` };
      }
      const absent = columns.find((c) => !Object.hasOwn(json, c)); // not a key "constructor" it lacks
      if (absent !== undefined) {
        return { line, json, raw, problem: `line ${line}: no key "${absent}"` };
      }
      const result = readArguments(
        fn,
        (a) => argumentCell(json[columns[a]!], fn.argTypes[a]!),
        (a) => `key "${columns[a]}"`,
      );
      return 'args' in result
        ? { line, json, raw, args: result.args }
        : { line, json, raw, problem: `line ${line}: ${result.problem}` };
    }
    return {
      line,
      json,
      raw,
      problem: `line ${line}: a row must be a JSON array of arguments or an object, got ${json === null ? 'null' : typeof json}`,
    };
  }

  /**
   * A line with a byte that is not UTF-8: the column, and the key or value it
   * is in when the line is JSON all the same. Echoed as `input` (its bad
   * bytes as \udcXX escapes), never run with them replaced.
   */
  #notUtf8(line: number, raw: string, index: number): TableRow {
    let field = '';
    try {
      const json: unknown = JSON.parse(raw);
      const hasBad = (value: unknown): boolean =>
        typeof value === 'string'
          ? firstBadCharacter(value) !== -1
          : typeof value === 'object' && value !== null
            ? Object.entries(value).some(([k, v]) => firstBadCharacter(k) !== -1 || hasBad(v))
            : false;
      if (Array.isArray(json)) {
        const at = json.findIndex(hasBad);
        if (at !== -1) field = ` (value ${at + 1})`;
      } else if (isObject(json)) {
        const key = Object.keys(json).find((k) => hasBad(k) || hasBad(json[k]));
        if (key !== undefined) field = ` (key ${JSON.stringify(key)})`;
      }
    } catch {
      // not JSON either: the column says where
    }
    return {
      line,
      raw,
      problem: `line ${line}, column ${index + 1}${field}: ${describeBadCharacter(raw, index)}; the file must be UTF-8`,
      fix: reencodeFix(this.#file),
    };
  }
}
