/**
 * A worker's evaluation of one chunk with its local runner, giving exactly
 * the per-row results a local Registry would: the runner's batch or columnar
 * path, each row checked against the declared return type, a failure of the
 * whole call becoming every row's error.
 */
import {
  batchByCalls,
  checkResult,
  type ExternalFn,
  ExtFnError,
  isAllNumbers,
  type LanguageRunner,
  type RowResult,
  toExtFnError,
  type Value,
} from '@improv/extfn-core';
import { ColumnFormatError, decodeRows, encodeResults } from './columns.js';
import { type ChunkResult, errorToWire, type JobData, WIRE_VERSION } from './wire.js';

export interface ChunkCallOptions {
  signal?: AbortSignal;
  onProgress?: (done: number) => void;
}

/** Number columns straight out of the frame, for runners with a columnar path. */
function numberColumns(frame: Buffer, arity: number, rows: number): Float64Array[] {
  if (frame.length !== 8 * arity * rows) {
    throw new ColumnFormatError(
      `${arity} number columns of ${rows} rows need ${8 * arity * rows} bytes, got ${frame.length}`,
    );
  }
  const copy = new Float64Array(arity * rows);
  Buffer.from(copy.buffer).set(frame);
  return Array.from({ length: arity }, (_, k) => copy.subarray(k * rows, (k + 1) * rows));
}

async function evaluateRows(
  runner: LanguageRunner,
  fn: ExternalFn,
  data: JobData,
  frame: Buffer,
  options: ChunkCallOptions,
): Promise<RowResult[]> {
  const batchOptions = {
    timeoutMs: data.timeoutMs,
    ...(data.mode ? { mode: data.mode } : {}),
    ...(options.signal ? { signal: options.signal } : {}),
    ...(options.onProgress ? { onProgress: (done: number) => options.onProgress!(done) } : {}),
  };
  // A function of no arguments has no column to tell the row count: it takes the row path.
  if (isAllNumbers(fn) && fn.argTypes.length > 0 && runner.callColumns) {
    const columns = numberColumns(frame, fn.argTypes.length, data.rows);
    try {
      const { values, errors } = await runner.callColumns(fn, columns, batchOptions);
      const results: RowResult[] = Array.from(values, (value) => ({ type: 'number', value }));
      for (const [row, error] of errors) results[row] = toExtFnError(error, fn.name);
      return results;
    } catch (error) {
      return new Array(data.rows).fill(toExtFnError(error, fn.name));
    }
  }
  const rows = decodeRows(fn.argTypes, data.rows, frame);
  try {
    if (runner.callBatch) return await runner.callBatch(fn, rows, batchOptions);
    return await batchByCalls(fn, rows, batchOptions, (args) =>
      runner.call(fn, args, batchOptions),
    );
  } catch (error) {
    return new Array(data.rows).fill(toExtFnError(error, fn.name));
  }
}

/** Evaluates a validated job's chunk. Throws ColumnFormatError for a frame that does not fit the descriptor. */
export async function evaluateChunk(
  runner: LanguageRunner,
  fn: ExternalFn,
  data: JobData,
  options: ChunkCallOptions = {},
): Promise<ChunkResult> {
  const frame = Buffer.from(data.args, 'base64');
  const raw = await evaluateRows(runner, fn, data, frame, options);
  const values: (Value | undefined)[] = new Array(data.rows);
  const errors: ChunkResult['errors'] = [];
  for (let i = 0; i < data.rows; i++) {
    const result =
      raw.length === data.rows
        ? checkResult(fn, raw[i])
        : ExtFnError.runtime(
            fn.name,
            `the runner returned ${raw.length} results for ${data.rows} rows`,
          );
    if (ExtFnError.isInstance(result)) errors.push([i, errorToWire(result)]);
    else values[i] = result;
  }
  return {
    v: WIRE_VERSION,
    values: encodeResults(fn.returnType, values).toString('base64'),
    errors,
  };
}
