/**
 * What a batch is made of, for the scheduler: a `RowSource` turns a range of
 * rows into a request and stores the response, so rows of Values
 * (`evalBatch`) and typed columns (`evalColumns`) share every scheduling
 * rule. Each source picks the frame: `callf64` for all-number functions,
 * `callcols` for drivers with `columns: true`, JSON `call` otherwise.
 */
import {
  type Column,
  type ExternalFn,
  ExtFnError,
  newColumn,
  type RowResult,
  rowResultsToColumns,
  unrepresentable,
  type Value,
  type ValueType,
  writeCell,
} from '@improv/extfn-core';
import { type Frame, type Payload, RawJson } from './frames.js';
import {
  type ColsResults,
  colsResultsInto,
  colsValuesInto,
  f64Results,
  f64ValuesLater,
  resultsFromJsonFrame,
  textResultsLater,
  textValuesLater,
} from './from-driver.js';
import {
  CELL_BYTES,
  columnsJsonText,
  columnsToF64,
  padded,
  rowsJsonText,
  rowsToCols,
  rowsToF64,
  typedColumnsJsonText,
  typedColumnsToCols,
} from './to-driver.js';

/** A request for a range of rows. */
export interface Encoded {
  header: Record<string, unknown>;
  payload?: Payload;
}

/**
 * What a batch is made of, for the scheduler: how many rows, how rows
 * `start…start+count` become one request, and where results go.
 */
export interface RowSource {
  readonly count: number;
  encode(start: number, count: number): Encoded;
  /**
   * Stores the response for rows `start…start+count`; throws ResponseShapeError
   * when it does not fit (the request then fails as malformed, see WorkerRequest.decode).
   */
  decode(frame: Frame, start: number, count: number): void;
  /** Stores one row's error. */
  fail(row: number, error: ExtFnError): void;
  /** Where a binary response for rows `start…start+count` may be read straight to. */
  payloadInto?(start: number, count: number): Uint8Array | undefined;
  /** Called once the batch is scheduled: writes results whose making was put off until then. */
  finish?(): void;
}

/** A `call` request for rows, rendered in one pass; `plain` lets a driver skip per-argument conversion. */
export function callHeader(
  rows: readonly (readonly Value[])[],
  start = 0,
  end = rows.length,
): Record<string, unknown> {
  return jsonCall(rowsJsonText(rows, start, end));
}

function jsonCall({ text, plain }: { text: string; plain: boolean }): Record<string, unknown> {
  return plain
    ? { op: 'call', plain: true, rows: new RawJson(text) }
    : { op: 'call', rows: new RawJson(text) };
}

/**
 * Rows of Values (evalBatch): f64 frames when `f64` (all-number functions),
 * else callcols frames when `cols` (each chunk gathered into columns), else
 * JSON frames. `results` may be given as a function that makes the array
 * when first needed (see SubprocessRunner.callBatch).
 */
export function valueRows(
  fn: ExternalFn,
  rows: readonly (readonly Value[])[],
  results: RowResult[] | (() => RowResult[]),
  f64: boolean,
  cols = false,
): RowSource {
  const arity = fn.argTypes.length;
  const out = typeof results === 'function' ? results : () => results;
  if (cols && !f64) return valueRowsCols(fn, rows, out);
  // number results checked as each response comes, made at `finish` (see f64ValuesLater)
  const deferred = deferredWrites();
  return {
    count: rows.length,
    encode: (start, count) =>
      f64
        ? {
            header: { op: 'callf64', rows: count },
            payload: rowsToF64(rows, arity, start, count),
          }
        : { header: callHeader(rows, start, start + count) },
    decode(frame, start, count) {
      // A driver that reads f64 but writes JSON (f64: 'in') answers with `values`.
      if (f64 && frame.payload) {
        const write = f64ValuesLater(fn, frame, count);
        deferred.hold(() => write(out(), start), frame.payload.length);
        return;
      }
      const part = resultsFromJsonFrame(fn, frame, count);
      const results = out();
      for (let k = 0; k < count; k++) results[start + k] = part[k]!;
    },
    fail(row, error) {
      deferred.after(() => {
        out()[row] = error;
      });
    },
    finish: deferred.finish,
  };
}

/**
 * Most payload bytes of text results held for `finish`: past them the held
 * results are made at once, so a huge batch does not hold all its payloads
 * and then all its strings too.
 */
const LATER_BYTES = 32 * 1024 * 1024;

/** Result writes put off until `finish`, in the order they came (a row's failure after them too). */
function deferredWrites() {
  const later: (() => void)[] = [];
  let bytes = 0;
  const finish = () => {
    for (const write of later.splice(0)) write();
    bytes = 0;
  };
  return {
    finish,
    /** Holds `write`, for a response payload of `size` bytes. */
    hold(write: () => void, size: number): void {
      later.push(write);
      bytes += size;
      if (bytes > LATER_BYTES) finish();
    },
    /** Runs `write` now, or after the writes held (a failure must land over its chunk's result). */
    after(write: () => void): void {
      if (later.length > 0) later.push(write);
      else write();
    },
  };
}

/**
 * A callcols answer given as JSON `values`, as for `call`: a driver that
 * cannot write binary (R without a pipe for stdout) answers so.
 */
function jsonAnswer(frame: Frame): boolean {
  return !frame.payload && Array.isArray(frame.header.values);
}

/**
 * Rows of Values over callcols: a chunk's rows become columns, its result
 * column becomes Values. Text results are checked as each response comes
 * and made at `finish` (see textValuesLater): a batch's short texts cost the
 * host mostly the moving of its results by scavenges during the batch.
 */
function valueRowsCols(
  fn: ExternalFn,
  rows: readonly (readonly Value[])[],
  results: () => RowResult[],
): RowSource {
  const deferred = deferredWrites();
  return {
    count: rows.length,
    encode: (start, count) => rowsToCols(fn, rows, start, count),
    decode(frame, start, count) {
      if (jsonAnswer(frame)) {
        const part = resultsFromJsonFrame(fn, frame, count);
        const out = results();
        for (let k = 0; k < count; k++) out[start + k] = part[k]!;
        return;
      }
      if (fn.returnType === 'text') {
        const write = textValuesLater(fn, frame, count);
        deferred.hold(() => write(results(), start), frame.payload!.length);
      } else colsValuesInto(fn, frame, count, results(), start);
    },
    fail(row, error) {
      deferred.after(() => {
        results()[row] = error;
      });
    },
    finish: deferred.finish,
  };
}

/**
 * Typed columns of other types (evalColumns): callcols frames made of the
 * column slices when `cols`, else JSON `call` frames written straight from
 * the columns; results written into `values` (a column of the return type)
 * and failed rows into `errors`.
 */
export function typedColumnRows(
  fn: ExternalFn,
  columns: readonly Column[],
  values: Column | (() => Column),
  errors: Map<number, ExtFnError>,
  cols = false,
): RowSource {
  if (cols) return typedColumnRowsCols(fn, columns, values, errors);
  if (typeof values === 'function') values = values();
  return {
    count: values.length,
    encode: (start, count) => ({
      header: { op: 'call', rows: new RawJson(typedColumnsJsonText(fn, columns, start, count)) },
    }),
    decode(frame, start, count) {
      const out = resultsFromJsonFrame(fn, frame, count);
      for (let k = 0; k < count; k++) {
        const result = out[k]!;
        if (ExtFnError.isInstance(result)) errors.set(start + k, result);
        else if (!writeCell(values, start + k, result)) {
          errors.set(start + k, unrepresentable(fn, result));
        }
      }
    },
    fail(row, error) {
      errors.set(row, error);
    },
  };
}

/**
 * Number columns (evalColumns): f64 frames built from column slices and read
 * straight into `values`, or JSON frames written from the columns when the
 * driver has no f64 path. Failed rows are NaN in `values`, with their error in `errors`.
 */
export function columnRows(
  fn: ExternalFn,
  columns: readonly Float64Array[],
  values: Float64Array,
  errors: Map<number, ExtFnError>,
  f64: boolean,
): RowSource {
  const fail = (row: number, error: ExtFnError) => {
    values[row] = Number.NaN;
    errors.set(row, error);
  };
  return {
    count: values.length,
    encode: (start, count) =>
      f64
        ? { header: { op: 'callf64', rows: count }, payload: columnsToF64(columns, start, count) }
        : { header: jsonCall(columnsJsonText(columns, start, count)) },
    payloadInto: f64
      ? (start, count) => new Uint8Array(values.buffer, values.byteOffset + start * 8, count * 8)
      : undefined,
    decode(frame, start, count) {
      if (f64 && frame.payload) {
        const { numbers, errors: failed } = f64Results(fn, frame, count);
        // Already in place when the frame reader wrote it there (payloadInto).
        if (
          numbers.buffer !== values.buffer ||
          numbers.byteOffset !== values.byteOffset + start * 8
        ) {
          values.set(numbers, start);
        }
        for (const [k, error] of failed) fail(start + k, error);
        return;
      }
      const part = rowResultsToColumns(fn, resultsFromJsonFrame(fn, frame, count));
      values.set(part.values, start);
      for (const [k, error] of part.errors) fail(start + k, error);
    },
    fail,
  };
}

/**
 * Typed columns over callcols: column slices out, the result column read
 * straight into `values` — or into the column `values()` gives when first
 * needed (the runner makes a text column once the first requests are out).
 */
function typedColumnRowsCols(
  fn: ExternalFn,
  columns: readonly Column[],
  given: Column | (() => Column),
  errors: Map<number, ExtFnError>,
): RowSource {
  const column = typeof given === 'function' ? given : () => given;
  // A failed row holds the column's fill (NaN, 0, '', 0 ns), whatever the driver wrote there.
  const fill = newColumn(fn.returnType, 1);
  const fail = (row: number, error: ExtFnError) => {
    copyCell(fill, 0, column(), row);
    errors.set(row, error);
  };
  /** A chunk's cells and failed rows, over what its result column holds. */
  const extras = (start: number, out: ColsResults) => {
    const values = column();
    for (const [k, cell] of out.cells) {
      if (ExtFnError.isInstance(cell)) fail(start + k, cell);
      // A datetime the column cannot hold (outside 1677–2262), as on the JSON path.
      else if (!writeCell(values, start + k, cell)) fail(start + k, unrepresentable(fn, cell));
    }
    for (const [k, error] of out.errors) fail(start + k, error);
  };
  const deferred = deferredWrites();
  return {
    count: typeof given === 'function' ? (columns[0]?.length ?? 0) : given.length,
    encode: (start, count) => typedColumnsToCols(fn, columns, start, count),
    // A fixed-width result column without padding (8-byte cells, or whole words) is read in place.
    payloadInto:
      fn.returnType === 'text'
        ? undefined
        : (start, count) => {
            const width = CELL_BYTES[fn.returnType as Exclude<ValueType, 'text'>];
            const typed = column() as Float64Array | Uint8Array | Uint32Array | BigInt64Array;
            const bytes = count * width;
            return bytes === padded(bytes)
              ? new Uint8Array(typed.buffer, typed.byteOffset + start * width, bytes)
              : undefined;
          },
    decode(frame, start, count) {
      if (jsonAnswer(frame)) {
        const values = column();
        resultsFromJsonFrame(fn, frame, count).forEach((result, k) => {
          if (ExtFnError.isInstance(result)) fail(start + k, result);
          else if (!writeCell(values, start + k, result))
            fail(start + k, unrepresentable(fn, result));
        });
        return;
      }
      if (fn.returnType === 'text') {
        // Checked now, made at `finish` (see textResultsLater).
        const write = textResultsLater(fn, frame, count);
        deferred.hold(
          () => extras(start, write(column() as string[], start, false)),
          frame.payload!.length,
        );
        return;
      }
      extras(start, colsResultsInto(fn, frame, count, column(), start));
    },
    fail(row, error) {
      deferred.after(() => fail(row, error));
    },
    finish: deferred.finish,
  };
}

/** Copies row `from` of `source` to row `to` of `target` (columns of one type). */
function copyCell(source: Column, from: number, target: Column, to: number): void {
  (target as unknown[])[to] = (source as unknown[])[from];
}
