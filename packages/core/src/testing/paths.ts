/**
 * Every path a row can take, compared (the hostile-body corpora of the
 * Python and R runners use it; a third-party runner can too): a case's
 * rows through `eval` row by row, `evalBatch` cold (a new worker) and warm
 * (the rows reversed), `evalColumns` (typed columns) and, where the case has
 * one, its vectorized form, each row's outcome — its value as the wire
 * spells it, or its error's kind and message — listed wherever it differs
 * from `eval`'s or from what the case says it must be.
 *
 * The caller registers the case's body as `f` (and its vectorized body as
 * `v`) in two registries on runners of their own, and asserts that
 * `pathProblems` finds nothing.
 */

import type { ExternalFn } from '../descriptor.js';
import { ExtFnError } from '../errors.js';
import { valueToJson } from '../json.js';
import type { RowResult } from '../language-runner.js';
import type { Registry } from '../registry.js';
import { type Column, newColumn, readCell, writeCell } from '../typed-columns.js';
import { Value as V, type Value, type ValueType } from '../value.js';

/** What a row of a case must give, besides every path giving the same. */
export type PathExpectation =
  | Value
  /** a Runtime error whose `message` (without `function f: `) matches */
  | RegExp
  /** the same outcome as every other row marked 'same' */
  | 'same'
  /** only that every path agrees */
  | undefined;

export interface PathCase {
  /** The invariant it checks: the test's name. */
  name: string;
  /** The per-row body (registered as `f`). */
  body: string;
  argTypes?: ValueType[];
  returnType?: ValueType;
  /** Row i's arguments (default: the number i). */
  args?: (i: number) => Value[];
  expect?: (i: number) => PathExpectation;
  /** The same computation as a vectorized body (registered as `v`): every path of it must give what `f`'s eval gives. */
  vectorized?: string;
  /** Results that legitimately differ from run to run (time, pids): only that every path gives each row a value of the return type. */
  shapeOnly?: boolean;
  /** How many rows to run (PATH_ROWS by default): fewer for rows that cost a worker much CPU. */
  rows?: number;
}

/** How many rows a case runs unless it says (x = 0 … 299). */
export const PATH_ROWS = 300;

/** Row outcomes by path, in row order. */
export type PathOutcomes = Record<string, string[]>;

/** A row's outcome as one comparable line: its value as the wire spells it, or its error's kind and message without the function's name. */
export function rowOutcome(cell: RowResult | undefined): string {
  if (cell === undefined) return 'nothing';
  if (ExtFnError.isInstance(cell)) {
    return `${cell.kind}: ${cell.message.replace(/^function [fv]: /, '')}`;
  }
  return `${cell.type} ${JSON.stringify(valueToJson(cell as Value))}`;
}

function fnOf(registry: Registry, name: string): ExternalFn {
  const fn = registry.get(name);
  if (!fn) throw new Error(`no function ${name}: register the case's body as f (and v)`);
  return fn;
}

/** The rows as typed columns (a Float64Array for numbers). */
function columnsOf(fn: ExternalFn, rows: Value[][]): Column[] {
  return fn.argTypes.map((type, k) => {
    const column = newColumn(type, rows.length);
    rows.forEach((row, i) => {
      if (!writeCell(column, i, row[k]!)) throw new Error(`row ${i}: no ${type} column holds it`);
    });
    return column;
  });
}

async function viaColumns(registry: Registry, name: string, rows: Value[][]): Promise<string[]> {
  const fn = fnOf(registry, name);
  const { values, errors } = await registry.evalColumns<Column>(name, columnsOf(fn, rows));
  const result = { ...fn, argTypes: [fn.returnType] };
  return rows.map((_, i) => rowOutcome(errors.get(i) ?? readCell(result, [values], 0, i)));
}

async function viaEval(registry: Registry, name: string, rows: Value[][]): Promise<string[]> {
  const out: string[] = [];
  for (const row of rows) {
    out.push(rowOutcome(await registry.eval(name, row).catch((e: unknown) => e as ExtFnError)));
  }
  return out;
}

/**
 * Every path a row can take. `fresh` and `warm` hold the case's functions on
 * runners of their own: `fresh` runs the cold batch (a new worker, chunks
 * ramping from one row), `warm` everything else, eval first (its first row
 * on a new worker too).
 */
export async function everyPath(
  c: PathCase,
  fresh: Registry,
  warm: Registry,
): Promise<PathOutcomes> {
  const rows = Array.from({ length: c.rows ?? PATH_ROWS }, (_, i) =>
    c.args ? c.args(i) : [V.number(i)],
  );
  const paths: PathOutcomes = {};
  paths['evalBatch, cold'] = (await fresh.evalBatch('f', rows)).map(rowOutcome);
  paths.eval = await viaEval(warm, 'f', rows);
  const reversed = await warm.evalBatch('f', rows.slice().reverse());
  paths['evalBatch of the rows reversed, warm'] = reversed.map(rowOutcome).reverse();
  paths.evalColumns = await viaColumns(warm, 'f', rows);
  if (c.vectorized !== undefined) {
    paths['vectorized evalColumns'] = await viaColumns(warm, 'v', rows);
    paths['vectorized evalBatch'] = (await warm.evalBatch('v', rows)).map(rowOutcome);
    paths['vectorized eval'] = await viaEval(warm, 'v', rows);
  }
  return paths;
}

/** Every way the paths disagree with eval or with the case's expectations, at most 4 rows each. */
export function pathProblems(c: PathCase, paths: PathOutcomes): string[] {
  const found: string[] = [];
  const reference = paths.eval!;
  const returnType = c.returnType ?? 'number';
  for (const [path, got] of Object.entries(paths)) {
    const bad: string[] = [];
    got.forEach((o, i) => {
      if (c.shapeOnly) {
        if (!o.startsWith(`${returnType} `)) bad.push(`row ${i}: ${o}`);
      } else if (o !== reference[i]) {
        bad.push(`row ${i}: ${o}, but eval gave ${reference[i]}`);
      }
    });
    if (bad.length) found.push(`${path}: ${bad.length} rows, ${bad.slice(0, 4).join('; ')}`);
  }
  if (c.expect === undefined || c.shapeOnly) return found;
  let sameAs: string | undefined;
  const wrong: string[] = [];
  reference.forEach((o, i) => {
    const want = c.expect!(i);
    if (want === undefined) return;
    if (want === 'same') {
      sameAs ??= o;
      if (o !== sameAs) wrong.push(`row ${i}: ${o}, but the rows before gave ${sameAs}`);
    } else if (want instanceof RegExp) {
      if (!(o.startsWith('Runtime: ') && want.test(o.slice(9))))
        wrong.push(`row ${i}: ${o}, expected an error matching ${want}`);
    } else if (o !== rowOutcome(want)) {
      wrong.push(`row ${i}: ${o}, expected ${rowOutcome(want)}`);
    }
  });
  if (wrong.length)
    found.push(`eval against the case: ${wrong.length} rows, ${wrong.slice(0, 4).join('; ')}`);
  return found;
}
