/**
 * Rows to the driver and results back. Arguments travel as data (JSON or f64
 * columns), never as program text. Every result is checked again here with
 * core's `valueFromJson`, so a driver bug cannot smuggle in a wrong type.
 */
import {
  type Column,
  type ExternalFn,
  ExtFnError,
  numberToJson,
  type RowResult,
  readCell,
  type Value,
  valueFromJson,
  valueToJson,
} from '@improv/extfn-core';
import type { DriverError, Frame } from './frames.js';

/** A number argument as JSON text: always with a fraction or exponent, so drivers parse it as a float. */
function numberText(n: number): string | undefined {
  if (!Number.isFinite(n) || Object.is(n, -0)) return undefined;
  const text = String(n);
  return Number.isInteger(n) && Math.abs(n) < 1e21 ? `${text}.0` : text;
}

/**
 * Rows `start…end` as the JSON text of an array of arrays, in one pass.
 * `plain` is true when every argument is a finite number written as a JSON
 * float (no "NaN"/"Infinity"/"-0" strings): a driver may then use the rows
 * as they parse.
 */
export function rowsJsonText(
  rows: readonly (readonly Value[])[],
  start = 0,
  end = rows.length,
): { text: string; plain: boolean } {
  // One short string per row, joined once: V8 flattens that far faster than
  // one long `+=` chain or JSON.stringify over freshly built arrays.
  const parts = new Array<string>(end - start);
  let plain = true;
  for (let i = start; i < end; i++) {
    const row = rows[i]!;
    let text = '[';
    for (let j = 0; j < row.length; j++) {
      const value = row[j]!;
      if (j > 0) text += ',';
      const number = value.type === 'number' ? numberText(value.value) : undefined;
      if (number !== undefined) {
        text += number;
      } else {
        plain = false;
        text += JSON.stringify(valueToJson(value));
      }
    }
    parts[i - start] = `${text}]`;
  }
  return { text: `[${parts.join(',')}]`, plain };
}

/** Rows `start…start+count` of number columns as the same JSON text `rowsJsonText` writes. */
export function columnsJsonText(
  columns: readonly Float64Array[],
  start: number,
  count: number,
): { text: string; plain: boolean } {
  const parts = new Array<string>(count);
  let plain = true;
  for (let i = 0; i < count; i++) {
    let text = '[';
    for (let j = 0; j < columns.length; j++) {
      const n = columns[j]![start + i]!;
      if (j > 0) text += ',';
      const number = numberText(n);
      if (number !== undefined) {
        text += number;
      } else {
        plain = false;
        text += JSON.stringify(valueToJson({ type: 'number', value: n }));
      }
    }
    parts[i] = `${text}]`;
  }
  return { text: `[${parts.join(',')}]`, plain };
}

/** One cell of a typed column as JSON text, as `rowsJsonText` would write its Value. */
function cellJsonText(fn: ExternalFn, columns: readonly Column[], k: number, i: number): string {
  switch (fn.argTypes[k]) {
    case 'number': {
      const n = (columns[k] as Float64Array)[i]!;
      return numberText(n) ?? JSON.stringify(numberToJson(n));
    }
    case 'boolean':
      return (columns[k] as Uint8Array)[i] ? 'true' : 'false';
    case 'text':
      return JSON.stringify((columns[k] as readonly string[])[i]); // lone surrogates as \u escapes
    case 'enum':
      return String((columns[k] as Uint32Array)[i]);
    default:
      return JSON.stringify(valueToJson(readCell(fn, columns, k, i) as Value));
  }
}

/** Rows `start…start+count` of typed columns (cells checked by core) as the JSON text of an array of arrays. */
export function typedColumnsJsonText(
  fn: ExternalFn,
  columns: readonly Column[],
  start: number,
  count: number,
): string {
  const parts = new Array<string>(count);
  for (let i = 0; i < count; i++) {
    let text = '[';
    for (let k = 0; k < columns.length; k++) {
      if (k > 0) text += ',';
      text += cellJsonText(fn, columns, k, start + i);
    }
    parts[i] = `${text}]`;
  }
  return `[${parts.join(',')}]`;
}

/** Rows `start…start+count` as little-endian f64, column-major: all of argument 0, then all of argument 1… */
export function rowsToF64(
  rows: readonly (readonly Value[])[],
  arity: number,
  start = 0,
  count = rows.length - start,
): Uint8Array {
  const columns = new Float64Array(count * arity);
  for (let i = 0; i < count; i++) {
    const row = rows[start + i]!;
    for (let j = 0; j < arity; j++) columns[j * count + i] = (row[j] as { value: number }).value;
  }
  return new Uint8Array(columns.buffer, columns.byteOffset, columns.byteLength);
}

/**
 * The same payload straight from number columns: views of the column slices,
 * written one after another, so no row is copied on the host.
 */
export function columnsToF64(
  columns: readonly Float64Array[],
  start: number,
  count: number,
): Uint8Array[] {
  return columns.map(
    (column) => new Uint8Array(column.buffer, column.byteOffset + start * 8, count * 8),
  );
}

/** A driver's row error as the ExtFnError that `eval` gives for it. */
export function driverErrorToExtFnError(fn: ExternalFn, error: DriverError): ExtFnError {
  if (error.limit === 'output') {
    return ExtFnError.runtime(fn.name, 'output too large', {
      limit: 'output',
      ...(error.traceback ? { stderr: error.traceback } : {}),
    });
  }
  if (error.type === 'ResultTypeError') {
    return ExtFnError.runtime(fn.name, error.message, {
      expected: fn.returnType,
      ...(error.got !== undefined ? { got: error.got } : {}),
    });
  }
  const message = error.message ? `${error.type}: ${error.message}` : error.type;
  return ExtFnError.runtime(fn.name, message, {
    ...(error.traceback ? { stderr: error.traceback } : {}),
    ...(error.limit ? { limit: error.limit } : {}),
  });
}

function readDriverError(raw: unknown): DriverError {
  if (typeof raw === 'object' && raw !== null && typeof (raw as DriverError).type === 'string') {
    const e = raw as DriverError;
    return { ...e, message: typeof e.message === 'string' ? e.message : String(e.message ?? '') };
  }
  return {
    type: 'ProtocolError',
    message: `malformed row error ${JSON.stringify(raw)?.slice(0, 200)}`,
  };
}

/** Thrown when a response does not have the shape of the request it answers. */
export class ResponseShapeError extends Error {}

/** Reads a `call` response into one RowResult per row. */
export function resultsFromJsonFrame(fn: ExternalFn, frame: Frame, count: number): RowResult[] {
  const values = frame.header.values;
  if (!Array.isArray(values) || values.length !== count) {
    throw new ResponseShapeError(
      `expected ${count} values, got ${JSON.stringify(frame.header).slice(0, 200)}`,
    );
  }
  const errors = (frame.header.errors ?? {}) as Record<string, unknown>;
  const out: RowResult[] = new Array(count);
  for (let i = 0; i < count; i++) {
    const error = errors[i];
    if (error !== undefined) {
      out[i] = driverErrorToExtFnError(fn, readDriverError(error));
      continue;
    }
    try {
      out[i] = valueFromJson(values[i], fn.returnType, fn.name);
    } catch (e) {
      out[i] = ExtFnError.isInstance(e) ? e : ExtFnError.runtime(fn.name, String(e));
    }
  }
  return out;
}

/**
 * Reads a `callf64` response: `count` f64 results (a view of the payload,
 * copied only when misaligned) and the rows' errors by index in the request.
 */
export function f64Results(
  fn: ExternalFn,
  frame: Frame,
  count: number,
): { numbers: Float64Array; errors: [number, ExtFnError][] } {
  const payload = frame.payload;
  if (frame.header.rows !== count || !payload || payload.length !== count * 8) {
    throw new ResponseShapeError(
      `expected ${count} f64 results, got ${JSON.stringify(frame.header).slice(0, 200)}`,
    );
  }
  const aligned = payload.byteOffset % 8 === 0 ? payload : Buffer.from(payload);
  const numbers = new Float64Array(aligned.buffer, aligned.byteOffset, count);
  const raw = (frame.header.errors ?? {}) as Record<string, unknown>;
  const errors: [number, ExtFnError][] = [];
  for (const key of Object.keys(raw)) {
    const i = Number(key);
    if (Number.isInteger(i) && i >= 0 && i < count) {
      errors.push([i, driverErrorToExtFnError(fn, readDriverError(raw[key]))]);
    }
  }
  return { numbers, errors };
}

/** A `callf64` response as one RowResult per row. */
export function resultsFromF64Frame(fn: ExternalFn, frame: Frame, count: number): RowResult[] {
  const { numbers, errors } = f64Results(fn, frame, count);
  const out: RowResult[] = new Array(count);
  for (let i = 0; i < count; i++) out[i] = { type: 'number', value: numbers[i]! };
  for (const [i, error] of errors) out[i] = error;
  return out;
}
