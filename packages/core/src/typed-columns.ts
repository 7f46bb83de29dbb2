/**
 * Typed columns for `evalColumns`: one array per argument whose class says
 * the value type, so an engine hands a measure's coordinates over without a
 * Value object per cell. Checking columns against a descriptor, reading one
 * cell as the Value `eval` would get, and writing results back to a column.
 *
 * | type       | column                                           |
 * | ---------- | ------------------------------------------------ |
 * | `number`   | `Float64Array`                                   |
 * | `boolean`  | `Uint8Array` of 0 / 1                            |
 * | `text`     | `string[]` (an engine's strings are JS strings already) |
 * | `datetime` | `BigInt64Array` of nanoseconds since 1970 UTC (years 1677–2262, as Arrow's timestamp[ns]) |
 * | `enum`     | `Uint32Array` of member indexes                  |
 */
import { columnsNotArray } from './argument-shapes.js';
import type { ExternalFn } from './descriptor.js';
import { describeThrown, ExtFnError } from './errors.js';
import { describeValue, type Value, type ValueType } from './value.js';

/** A typed column: its class says its value type (see the table above). */
export type Column = Float64Array | Uint8Array | readonly string[] | BigInt64Array | Uint32Array;

/** The column class for each value type. */
export interface ColumnOf {
  number: Float64Array;
  boolean: Uint8Array;
  text: string[];
  datetime: BigInt64Array;
  enum: Uint32Array;
}

const CLASS_NAMES: Readonly<Record<ValueType, string>> = {
  number: 'a Float64Array',
  boolean: 'a Uint8Array of 0/1',
  text: 'an array of strings',
  datetime: 'a BigInt64Array of nanoseconds since 1970-01-01T00:00:00Z',
  enum: 'a Uint32Array',
};

/** Whether `column` has the class of columns of `type`. */
function isColumnOf(column: unknown, type: ValueType): boolean {
  switch (type) {
    case 'number':
      return column instanceof Float64Array;
    case 'boolean':
      return column instanceof Uint8Array;
    case 'text':
      return Array.isArray(column);
    case 'datetime':
      return column instanceof BigInt64Array;
    case 'enum':
      return column instanceof Uint32Array;
  }
}

function describeColumn(column: unknown): string {
  if (Array.isArray(column)) return `an array of ${column.length}`;
  if (ArrayBuffer.isView(column)) return `a ${column.constructor.name}`;
  return column === null ? 'null' : typeof column;
}

/**
 * Checks columns against the descriptor: one per argument, each of its
 * type's class, all of one length; `errors` (cells already in error) keyed by
 * row indexes inside the columns. Returns the error naming the argument.
 */
export function checkTypedColumns(
  fn: ExternalFn,
  columns: readonly unknown[],
  errors: ReadonlyMap<number, ExtFnError> | undefined,
): ExtFnError | undefined {
  if (!Array.isArray(columns)) return columnsNotArray(fn, columns);
  if (columns.length !== fn.argTypes.length) {
    return ExtFnError.arityMismatch(fn.name, fn.argTypes.length, columns.length);
  }
  const rowCount = (columns[0] as Column | undefined)?.length ?? 0;
  for (let k = 0; k < columns.length; k++) {
    const type = fn.argTypes[k]!;
    const column = columns[k];
    if (!isColumnOf(column, type)) {
      return ExtFnError.typeMismatch(
        fn.name,
        k + 1,
        type,
        `${describeColumn(column)} (a ${type} column is ${CLASS_NAMES[type]})`,
      );
    }
    if ((column as Column).length !== rowCount) {
      return ExtFnError.typeMismatch(
        fn.name,
        k + 1,
        type,
        `a column of ${(column as Column).length} rows (column 1 has ${rowCount})`,
      );
    }
  }
  if (errors !== undefined) {
    if (!(errors instanceof Map)) {
      return ExtFnError.runtime(fn.name, 'options.errors must be a Map of row index to ExtFnError');
    }
    for (const [row, error] of errors) {
      if (!Number.isInteger(row) || row < 0 || row >= rowCount || !ExtFnError.isInstance(error)) {
        return ExtFnError.runtime(
          fn.name,
          `options.errors maps row indexes in [0, ${rowCount}) to ExtFnErrors; got ${typeof row === 'string' ? JSON.stringify(row) : String(row)} → ${ExtFnError.isInstance(error) ? 'an ExtFnError' : describeColumn(error)}`,
        );
      }
    }
  }
  return undefined;
}

/**
 * Checks `options.into` (the caller's result column, reused across calls so
 * results land in memory already touched): the return type's column class,
 * exactly as long as the argument columns.
 */
export function checkInto(
  fn: ExternalFn,
  into: unknown,
  columns: readonly Column[],
): ExtFnError | undefined {
  const type = fn.returnType;
  const rowCount = columns[0]?.length ?? 0;
  const wanted = `${CLASS_NAMES[type]} of ${rowCount} rows`;
  const fix = `pass options.into as ${wanted} (a ${type} result column as long as the argument columns), or leave it out for a new column`;
  if (!isColumnOf(into, type)) {
    return ExtFnError.runtime(
      fn.name,
      `options.into must be ${wanted}, got ${describeColumn(into)}`,
      { expected: type, got: describeColumn(into), fix },
    );
  }
  if ((into as Column).length !== rowCount) {
    return ExtFnError.runtime(
      fn.name,
      `options.into must be ${wanted}, got a column of ${(into as Column).length} rows`,
      { expected: type, got: `a column of ${(into as Column).length} rows`, fix },
    );
  }
  // Results written into an argument's memory would change the rows a retry reads again.
  const k = columns.findIndex((column) => sharesMemory(column, into as Column));
  if (k >= 0) {
    return ExtFnError.runtime(
      fn.name,
      `options.into shares memory with argument column ${k + 1}: results would overwrite arguments still to be read`,
      { fix: 'pass a result column of its own (reuse it across calls, not an argument column)' },
    );
  }
  return undefined;
}

/** Whether two typed columns overlap in memory (string arrays never do). */
function sharesMemory(a: Column, b: Column): boolean {
  if (a === b) return true;
  if (!ArrayBuffer.isView(a) || !ArrayBuffer.isView(b) || a.buffer !== b.buffer) return false;
  return a.byteOffset < b.byteOffset + b.byteLength && b.byteOffset < a.byteOffset + a.byteLength;
}

/**
 * Gives every failed row of a result column its fill (NaN, 0, '', 0 ns, 0),
 * so a reused `into` column never shows a previous call's value at a row in error.
 */
export function fillFailed(
  type: ValueType,
  values: Column,
  errors: ReadonlyMap<number, unknown>,
): void {
  if (errors.size === 0) return;
  const fill = (newColumn(type, 1) as unknown[])[0];
  for (const row of errors.keys()) (values as unknown[])[row] = fill;
}

/** Copies a result column into `into` (same type and length), unless it is `into`. */
export function copyColumn(values: Column, into: Column): Column {
  if (values === into) return into;
  if (Array.isArray(into)) {
    const texts = values as readonly string[];
    for (let i = 0; i < texts.length; i++) (into as string[])[i] = texts[i]!;
  } else {
    (into as Float64Array).set(values as Float64Array);
  }
  return into;
}

const NS_PER_MS = 1_000_000n;

/**
 * Whether every cell reads as a Value (no boolean byte above 1, no text that
 * is not a string): a runner's own typed path may then take the columns as
 * they are; otherwise core reads them row by row, each bad cell its row's error.
 */
export function cellsHold(fn: ExternalFn, columns: readonly Column[]): boolean {
  try {
    for (let k = 0; k < columns.length; k++) {
      const type = fn.argTypes[k];
      if (type === 'boolean') {
        const bytes = columns[k] as Uint8Array;
        for (let i = 0; i < bytes.length; i++) if (bytes[i]! > 1) return false;
      } else if (type === 'text') {
        const texts = columns[k] as readonly string[];
        for (let i = 0; i < texts.length; i++) if (typeof texts[i] !== 'string') return false;
      }
    }
    return true;
  } catch {
    return false; // a cell that cannot be read (a Proxy's getter threw): readCell says which
  }
}

/** Row `i` of column `k` (already checked) as the Value `eval` would get, or that row's error. */
export function readCell(
  fn: ExternalFn,
  columns: readonly Column[],
  k: number,
  i: number,
): Value | ExtFnError {
  const type = fn.argTypes[k]!;
  const column = columns[k]!;
  switch (type) {
    case 'number':
      return { type, value: (column as Float64Array)[i]! };
    case 'boolean': {
      const byte = (column as Uint8Array)[i]!;
      if (byte > 1)
        return ExtFnError.typeMismatch(fn.name, k + 1, type, `the byte ${byte} (0 or 1)`);
      return { type, value: byte === 1 };
    }
    case 'text': {
      let text: unknown;
      try {
        text = (column as readonly string[])[i];
      } catch (error) {
        const why = `a cell that cannot be read (${describeThrown(error)}) in a text column`;
        return ExtFnError.typeMismatch(fn.name, k + 1, type, why);
      }
      if (typeof text !== 'string') {
        return ExtFnError.typeMismatch(
          fn.name,
          k + 1,
          type,
          `${describeColumn(text)} in a text column`,
        );
      }
      return { type, value: text };
    }
    case 'datetime': {
      const ns = (column as BigInt64Array)[i]!;
      let ms = ns / NS_PER_MS;
      let nanos = ns % NS_PER_MS;
      if (nanos < 0n) {
        ms -= 1n;
        nanos += NS_PER_MS;
      }
      // Every i64 of nanoseconds (years 1677–2262) is inside the datetime range.
      const date = new Date(Number(ms));
      return nanos ? { type, value: date, nanos: Number(nanos) } : { type, value: date };
    }
    case 'enum':
      return { type, value: (column as Uint32Array)[i]! };
  }
}

/** A result column of `n` rows for `type`; failed rows keep the fill (NaN, 0, '', 0 ns, 0). */
export function newColumn(type: ValueType, n: number): Column {
  switch (type) {
    case 'number':
      return new Float64Array(n).fill(Number.NaN);
    case 'boolean':
      return new Uint8Array(n);
    case 'text':
      return new Array<string>(n).fill('');
    case 'datetime':
      return new BigInt64Array(n);
    case 'enum':
      return new Uint32Array(n);
  }
}

/** The error of a result row that the result column cannot hold (see writeCell). */
export function unrepresentable(fn: ExternalFn, value: Value): ExtFnError {
  return ExtFnError.runtime(
    fn.name,
    `result ${describeValue(value)} is outside what a nanosecond column holds (years 1677–2262) — use evalBatch`,
  );
}

const I64_MIN = -(2n ** 63n);
const I64_MAX = 2n ** 63n - 1n;

/**
 * Writes a result Value (already checked against the return type) at row
 * `i`; false when the column cannot hold it (a datetime outside 1677–2262).
 */
export function writeCell(column: Column, i: number, value: Value): boolean {
  switch (value.type) {
    case 'number':
      (column as Float64Array)[i] = value.value;
      return true;
    case 'boolean':
      (column as Uint8Array)[i] = value.value ? 1 : 0;
      return true;
    case 'text':
      (column as string[])[i] = value.value;
      return true;
    case 'datetime': {
      const ns = BigInt(value.value.getTime()) * NS_PER_MS + BigInt(value.nanos ?? 0);
      if (ns < I64_MIN || ns > I64_MAX) return false;
      (column as BigInt64Array)[i] = ns;
      return true;
    }
    case 'enum':
      (column as Uint32Array)[i] = value.value;
      return true;
    case 'error':
      return false;
  }
}
