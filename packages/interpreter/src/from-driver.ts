/**
 * Everything the host reads back from a driver, and checks: `call` values
 * (core's `valueFromJson`), `callf64` and `callcols` result columns, cells
 * that did not fit a column, and row errors. A response that does not have
 * the shape of its request (wrong length, bytes that are no value of the
 * column, text that is not UTF-8) throws ResponseShapeError: the worker is
 * killed as for a malformed frame. What the host writes is in to-driver.ts.
 */
import { isUtf8 } from 'node:buffer';
import {
  type Column,
  type ExternalFn,
  ExtFnError,
  newColumn,
  type ResourceLimit,
  type RowResult,
  type Value,
  type ValueType,
  valueFromJson,
} from '@improv/extfn-core';
import { type DriverError, type Frame, preview } from './frames.js';
import { CELL_BYTES, padded } from './to-driver.js';

/** The fix of every "output too large": what the cap is and the ways under it (the CLI rewrites it: cli/src/hints.ts). */
export const OUTPUT_FIX =
  'a row may print and return at most maxOutputBytes (a runner option, 1 MiB unless set): print less, return a smaller result, or raise maxOutputBytes';

/**
 * A driver's answer to `load` (the body does not parse, or the driver
 * refused it) as the ExtFnError every call of the function gets: marked
 * `loadFailed`, so an engine can show it once per function.
 */
export function loadErrorToExtFnError(fn: ExternalFn, raw: DriverError): ExtFnError {
  const error = driverErrorToExtFnError(fn, raw);
  return new ExtFnError(error.kind, error.message, { ...error.fields(), loadFailed: true });
}

/** A driver's row error as the ExtFnError that `eval` gives for it. */
export function driverErrorToExtFnError(fn: ExternalFn, raw: DriverError): ExtFnError {
  const error = readDriverError(raw);
  if (error.limit === 'output') {
    return ExtFnError.runtime(fn.name, 'output too large', {
      limit: 'output',
      fix: OUTPUT_FIX,
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

/** The limits an error may name (core's ResourceLimit). */
const LIMITS: ReadonlySet<unknown> = new Set<ResourceLimit>([
  'memory',
  'cpu-time',
  'processes',
  'file-size',
  'output',
  'wall-clock',
]);

/**
 * A row error as the driver sent it, with only the fields the host uses and
 * each of its type: a body can make its driver send anything there, and
 * neither a field of another type (a traceback that is an object, a limit
 * no one knows) nor the reading of it (String() of an array nested 10^5
 * deep overflows the stack) may reach the caller's ExtFnError.
 */
function readDriverError(raw: unknown): DriverError {
  if (typeof raw === 'object' && raw !== null && typeof (raw as DriverError).type === 'string') {
    const e = raw as Record<string, unknown>;
    const out: DriverError = { type: e.type as string, message: asText(e.message) };
    if (typeof e.traceback === 'string') out.traceback = e.traceback;
    if (LIMITS.has(e.limit)) out.limit = e.limit as ResourceLimit;
    if (e.got !== undefined) out.got = typeof e.got === 'string' ? e.got : preview(e.got);
    return out;
  }
  return {
    type: 'ProtocolError',
    message: `malformed row error ${preview(raw)}`,
  };
}

/** A field meant to be text: itself, '' when absent, else its start as JSON (`preview`). */
function asText(value: unknown): string {
  if (typeof value === 'string') return value;
  return value === undefined || value === null ? '' : preview(value);
}

/** Thrown when a response does not have the shape of the request it answers. */
export class ResponseShapeError extends Error {}

/** Reads a `call` response into one RowResult per row. */
export function resultsFromJsonFrame(fn: ExternalFn, frame: Frame, count: number): RowResult[] {
  const values = frame.header.values;
  if (!Array.isArray(values) || values.length !== count) {
    throw new ResponseShapeError(`expected ${count} values, got ${preview(frame.header)}`);
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
    throw new ResponseShapeError(`expected ${count} f64 results, got ${preview(frame.header)}`);
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

/**
 * A `callf64` response as one RowResult per row, checked now and written by
 * the function returned into `out` from index `at` (a batch's results: no
 * array per chunk to allocate and copy). A batch writes them when it is
 * scheduled (`RowSource.finish`): made during the batch, every scavenge
 * would move all the results made so far (they live on), tens of
 * milliseconds each in a 10^5-row refresh. Throws when the response has the
 * wrong shape.
 */
export function f64ValuesLater(
  fn: ExternalFn,
  frame: Frame,
  count: number,
): (out: RowResult[], at: number) => void {
  const { numbers, errors } = f64Results(fn, frame, count);
  return (out, at) => {
    for (let i = 0; i < count; i++) out[at + i] = { type: 'number', value: numbers[i]! };
    for (const [i, error] of errors) out[at + i] = error;
  };
}

// ---- callcols ---------------------------------------------------------------------

/** A callcols response read into a result column: the failed rows and the rows given as JSON cells. */
export interface ColsResults {
  errors: [row: number, error: ExtFnError][];
  /** Results that did not fit the column (checked with valueFromJson), or their check's error. */
  cells: [row: number, result: Value | ExtFnError][];
}

function shapeError(count: number, frame: Frame, why: string): ResponseShapeError {
  return new ResponseShapeError(
    `malformed callcols response for ${count} rows (${why}): ${preview(frame.header)}`,
  );
}

/** Row indexes → values of an optional header object, only keys that are rows of the request. */
function rowEntries(raw: unknown, count: number): [number, unknown][] {
  if (typeof raw !== 'object' || raw === null) return [];
  const out: [number, unknown][] = [];
  for (const key of Object.keys(raw)) {
    const i = Number(key);
    if (Number.isInteger(i) && i >= 0 && i < count)
      out.push([i, (raw as Record<string, unknown>)[key]]);
  }
  return out;
}

/**
 * Most UTF-8 bytes decoded into one string by `readTexts`: even as two-byte
 * characters that string stays below V8's large-object size (128 KiB), so it
 * is made in the young generation; a larger one gets fresh pages of its own,
 * which on a VM costs several times the decoding.
 */
const DECODE_BYTES = 32 * 1024;

/** A text result column checked by `checkTexts`: its byte lengths and its UTF-8 bytes. */
interface CheckedTexts {
  lengths: Uint32Array;
  bytes: Buffer;
}

/**
 * Checks a text result column (`count` u32 byte lengths, then UTF-8 bytes,
 * then zero padding). Every string must be UTF-8 on its own: the whole byte
 * run is validated once and every string must start on a character
 * boundary, so decoding it (`decodeTexts`) never makes up a U+FFFD.
 */
function checkTexts(payload: Buffer, count: number, fail: (why: string) => Error): CheckedTexts {
  if (payload.length < count * 4) throw fail('shorter than its lengths');
  let lengths: Uint32Array;
  if (payload.byteOffset % 4 === 0) {
    lengths = new Uint32Array(payload.buffer, payload.byteOffset, count);
  } else {
    lengths = new Uint32Array(count);
    new Uint8Array(lengths.buffer).set(payload.subarray(0, count * 4));
  }
  let total = 0;
  for (let i = 0; i < count; i++) total += lengths[i]!;
  const base = count * 4;
  // Compared first in plain arithmetic: lengths a body made up can add up past
  // 2^32, where `padded` (32-bit) wraps to the size of a short payload, and
  // decoding them then ran for billions of iterations.
  if (base + total > payload.length || payload.length !== padded(base + total)) {
    throw fail(`${payload.length} payload bytes for ${total} text bytes`);
  }
  const bytes = payload.subarray(base, base + total);
  if (!isUtf8(bytes)) throw fail('text that is not UTF-8');
  let offset = 0;
  for (let i = 0; i < count; i++) {
    // 0b10xxxxxx is a continuation byte: a string starting there would split a character.
    if (lengths[i]! > 0 && (bytes[offset]! & 0xc0) === 0x80) {
      throw fail('text split inside a character');
    }
    offset += lengths[i]!;
  }
  return { lengths, bytes };
}

/**
 * Decodes a checked text column into `into` at `start`: the strings, or
 * with `asValues` text Values of them (evalBatch: no column in between).
 * The run is decoded a group of whole strings at a time (DECODE_BYTES):
 * each group is valid UTF-8 of its own, since every string starts on a
 * character. Its strings are then slices of it.
 */
function decodeTexts(
  { lengths, bytes }: CheckedTexts,
  into: unknown[],
  start: number,
  asValues: boolean,
): void {
  const count = lengths.length;
  let offset = 0; // bytes of the strings before row `i`
  let i = 0;
  while (i < count) {
    let end = offset + lengths[i]!;
    let last = i + 1;
    while (last < count && end + lengths[last]! - offset <= DECODE_BYTES) end += lengths[last++]!;
    const whole = bytes.toString('utf8', offset, end);
    let at = 0;
    if (whole.length === end - offset) {
      // ASCII only: a byte is a unit.
      for (; i < last; i++) {
        const length = lengths[i]!;
        const text = whole.slice(at, at + length);
        into[start + i] = asValues ? { type: 'text', value: text } : text;
        at += length;
      }
      offset = end;
      continue;
    }
    for (; i < last; i++) {
      const stop = offset + lengths[i]!;
      let units = 0;
      for (let j = offset; j < stop; j++) {
        const b = bytes[j]!;
        if ((b & 0xc0) !== 0x80) units += b >= 0xf0 ? 2 : 1; // four bytes: a surrogate pair
      }
      const text = whole.slice(at, at + units);
      into[start + i] = asValues ? { type: 'text', value: text } : text;
      at += units;
      offset = stop;
    }
  }
}

/** Reads a text result column (see checkTexts) into `into` at `start`, as strings or text Values. */
function readTexts(
  payload: Buffer,
  count: number,
  into: unknown[],
  start: number,
  fail: (why: string) => Error,
  asValues: boolean,
): void {
  decodeTexts(checkTexts(payload, count, fail), into, start, asValues);
}

/**
 * Reads a `callcols` response for `count` rows into `values` (a column of
 * the return type) at `start`. Rows in error or given as cells keep whatever
 * the column held there. Booleans must be 0 or 1 and texts UTF-8; cells are
 * checked with `valueFromJson` like any JSON result.
 */
export function colsResultsInto(
  fn: ExternalFn,
  frame: Frame,
  count: number,
  values: Column,
  start: number,
): ColsResults {
  const fail = (why: string) => shapeError(count, frame, why);
  const payload = frame.payload;
  if (frame.header.rows !== count || !payload) throw fail('no result column');
  const type: ValueType = fn.returnType;
  if (type === 'text') {
    readTexts(payload, count, values as string[], start, fail, false);
  } else {
    const width = CELL_BYTES[type];
    if (payload.length !== padded(count * width)) {
      throw fail(`${payload.length} payload bytes, expected ${padded(count * width)}`);
    }
    const column = values as Float64Array | Uint8Array | Uint32Array | BigInt64Array;
    const target = new Uint8Array(column.buffer, column.byteOffset + start * width, count * width);
    // Already in place when the frame reader wrote it there (payloadInto).
    if (target.buffer !== payload.buffer || target.byteOffset !== payload.byteOffset) {
      target.set(payload.subarray(0, count * width));
    }
    if (type === 'boolean' && target.some((byte) => byte > 1)) throw fail('a boolean byte above 1');
  }
  return rowExtras(fn, frame, count);
}

/**
 * A `callcols` response for `count` rows as Values (evalBatch) written into
 * `out` from `at`, then each cell's and failed row's result over its row's.
 * A text column goes straight to Values; other types through a column.
 */
export function colsValuesInto(
  fn: ExternalFn,
  frame: Frame,
  count: number,
  out: RowResult[],
  at: number,
): void {
  let extras: ColsResults;
  if (fn.returnType === 'text') {
    const fail = (why: string) => shapeError(count, frame, why);
    if (frame.header.rows !== count || !frame.payload) throw fail('no result column');
    readTexts(frame.payload, count, out, at, fail, true);
    extras = rowExtras(fn, frame, count);
  } else {
    const column = newColumn(fn.returnType, count);
    extras = colsResultsInto(fn, frame, count, column, 0);
    columnValuesInto(fn.returnType, column, count, out, at);
  }
  for (const [k, cell] of extras.cells) out[at + k] = cell;
  for (const [k, error] of extras.errors) out[at + k] = error;
}

/**
 * A text `callcols` response for `count` rows, checked now (it throws
 * ResponseShapeError as `colsResultsInto` does) and decoded later, when the
 * returned function is called: into `into` from `at`, as strings or as text
 * Values; it gives the rows' errors and cells. A batch makes its text results
 * once it is scheduled, so a scavenge during the batch finds none of them to
 * move, and results dropped soon after die young. The payload is the frame
 * reader's own buffer, never written again.
 */
export function textResultsLater(
  fn: ExternalFn,
  frame: Frame,
  count: number,
): (into: unknown[], at: number, asValues: boolean) => ColsResults {
  const fail = (why: string) => shapeError(count, frame, why);
  if (frame.header.rows !== count || !frame.payload) throw fail('no result column');
  const texts = checkTexts(frame.payload, count, fail);
  const extras = rowExtras(fn, frame, count);
  return (into, at, asValues) => {
    decodeTexts(texts, into, at, asValues);
    return extras;
  };
}

/** `textResultsLater` for evalBatch: text Values, then each cell's and failed row's result over its row's. */
export function textValuesLater(
  fn: ExternalFn,
  frame: Frame,
  count: number,
): (out: RowResult[], at: number) => void {
  const write = textResultsLater(fn, frame, count);
  return (out, at) => {
    const extras = write(out, at, true);
    for (const [k, cell] of extras.cells) out[at + k] = cell;
    for (const [k, error] of extras.errors) out[at + k] = error;
  };
}

/** A callcols response's failed rows and cells (checked with valueFromJson). */
function rowExtras(fn: ExternalFn, frame: Frame, count: number): ColsResults {
  const type = fn.returnType;
  const errors: [number, ExtFnError][] = rowEntries(frame.header.errors, count).map(([i, raw]) => [
    i,
    driverErrorToExtFnError(fn, readDriverError(raw)),
  ]);
  const cells: [number, Value | ExtFnError][] = rowEntries(frame.header.cells, count).map(
    ([i, json]) => {
      try {
        return [i, valueFromJson(json, type, fn.name)];
      } catch (e) {
        return [i, ExtFnError.isInstance(e) ? e : ExtFnError.runtime(fn.name, String(e))];
      }
    },
  );
  return { errors, cells };
}

/** A result column's row `i` as the Value `eval` gives (datetimes as a Date plus sub-millisecond nanos). */
export function columnValue(type: ValueType, column: Column, i: number): Value {
  switch (type) {
    case 'number':
      return { type, value: (column as Float64Array)[i]! };
    case 'boolean':
      return { type, value: (column as Uint8Array)[i] === 1 };
    case 'text':
      return { type, value: (column as string[])[i]! };
    case 'enum':
      return { type, value: (column as Uint32Array)[i]! };
    case 'datetime':
      return datetimeValue(datetimeWords(column as BigInt64Array), i);
  }
}

/**
 * Rows `0…count` of a result column as Values written into `out` from
 * index `at` (evalBatch's results, no array in between; one view for a
 * datetime column, not one per cell).
 */
export function columnValuesInto(
  type: ValueType,
  column: Column,
  count: number,
  out: unknown[],
  at: number,
): void {
  if (type === 'datetime') {
    const words = datetimeWords(column as BigInt64Array);
    for (let i = 0; i < count; i++) out[at + i] = datetimeValue(words, i);
  } else if (type === 'text') {
    const texts = column as string[];
    for (let i = 0; i < count; i++) out[at + i] = { type, value: texts[i]! };
  } else {
    for (let i = 0; i < count; i++) out[at + i] = columnValue(type, column, i);
  }
}

/** A datetime column's 32-bit words (low word first: little-endian). */
function datetimeWords(column: BigInt64Array): Int32Array {
  return new Int32Array(column.buffer, column.byteOffset, column.length * 2);
}

function datetimeValue(words: Int32Array, i: number): Value {
  const [ms, nanos] = readNanos(words, i);
  const date = new Date(ms);
  return nanos ? { type: 'datetime', value: date, nanos } : { type: 'datetime', value: date };
}

/**
 * Row `i` of a datetime column's words (i64 nanoseconds since 1970) as
 * milliseconds and sub-millisecond nanos (0–999 999), in exact double
 * arithmetic rather than a BigInt per cell.
 */
export function readNanos(words: Int32Array, i: number): [ms: number, nanos: number] {
  const hi = words[2 * i + 1]!;
  const lo = words[2 * i]! >>> 0;
  // ns = hi·2³² + lo, with hi = a·10⁶ + b: every partial sum stays below 2⁵³.
  const a = Math.floor(hi / 1_000_000);
  const r = (hi - a * 1_000_000) * 4_294_967_296 + lo;
  const q = Math.floor(r / 1_000_000);
  return [a * 4_294_967_296 + q, r - q * 1_000_000];
}
