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
import {
  type ChunkResult,
  errorToWire,
  formatMiB,
  type JobData,
  MAX_RESULT_BYTES,
  WIRE_VERSION,
  type WireError,
} from './wire.js';

export interface ChunkCallOptions {
  signal?: AbortSignal;
  onProgress?: (done: number) => void;
  /** Most bytes of values and errors one chunk's result may carry (default MAX_RESULT_BYTES). */
  maxResultBytes?: number;
}

/** Bytes one row's value takes in the result frame. */
function valueBytes(value: Value | undefined): number {
  if (value === undefined) return 0;
  if (value.type === 'text') {
    const text = value.value as string & { isWellFormed(): boolean };
    // The frame holds UTF-8, or UTF-16LE for a string with a lone surrogate (see columns.ts).
    return 4 + (text.isWellFormed() ? Buffer.byteLength(text) : 2 * text.length);
  }
  return 12;
}

/** Bytes one row's error takes in the result (JSON, roughly: its message and stderr, and the rest). */
function errorBytes(error: WireError): number {
  return 64 + Buffer.byteLength(error.message) + Buffer.byteLength(error.stderr ?? '');
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
  // A result travels through Redis as one JSON string: past the budget, rows are not sent but
  // failed, so that large answers end in a clear error rather than in V8's string limit, a
  // Redis refusal or an engine waiting on a transfer of gigabytes.
  const budget = options.maxResultBytes ?? MAX_RESULT_BYTES;
  let used = 0;
  let over: WireError | undefined;
  for (let i = 0; i < data.rows; i++) {
    if (over) {
      errors.push([i, over]);
      continue;
    }
    const result =
      raw.length === data.rows
        ? checkResult(fn, raw[i])
        : ExtFnError.runtime(
            fn.name,
            `the runner returned ${raw.length} results for ${data.rows} rows`,
          );
    const wire = ExtFnError.isInstance(result) ? errorToWire(result) : undefined;
    used += wire ? errorBytes(wire) : valueBytes(result as Value);
    if (used > budget) {
      over = errorToWire(
        ExtFnError.runtime(
          fn.name,
          `the results of this chunk passed ${formatMiB(budget)} at row ${i} of ${data.rows}, the most one queue job may bring back; this row and the ones after it in the chunk were not sent. Return smaller results, or lower the engine's chunkRows so that fewer rows share a job (a host that can carry more raises the worker's maxResultBytes)`,
          { limit: 'output' },
        ),
      );
      errors.push([i, over]);
      continue;
    }
    if (wire) errors.push([i, wire]);
    else values[i] = result as Value;
  }
  return {
    v: WIRE_VERSION,
    values: encodeResults(fn.returnType, values).toString('base64'),
    errors,
  };
}
