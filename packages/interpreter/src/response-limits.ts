/**
 * How many bytes a response may take, computed from the request it answers:
 * the largest legitimate frame for the declared return type and row count,
 * plus a margin. The frame reader enforces it as bytes arrive, so what the
 * host holds per worker stays a small constant whatever the driver sends.
 */
import type { ValueType } from '@improv/extfn-core';

export interface ResponseLimits {
  /** Most bytes of the header line. */
  line: number;
  /** Most bytes of a binary payload. */
  payload: number;
}

/** JSON bytes of one result, separator included, at its longest spelling ("-2.2250738585072014e-308", an ISO instant with nanoseconds…). */
const RESULT_BYTES: Readonly<Record<Exclude<ValueType, 'text'>, number>> = {
  number: 32,
  boolean: 8,
  enum: 16,
  datetime: 48,
};
/** Average bytes per row for row errors in a chunk (type, message, a short traceback). */
const ERROR_BYTES_PER_ROW = 512;
/** What a single row's frame may add to its value: a traceback, the error's fields, escaping. */
const SINGLE_ROW_MARGIN = 1024 * 1024;
/** Header fields, ids and slack. */
const FRAME_MARGIN = 64 * 1024;
/**
 * No chunk's response may pass this. A legitimate chunk that needs more
 * (very long texts or tracebacks on many rows) fails as "output" and its
 * rows are re-run one by one, where each row has the whole per-row allowance.
 */
export const CHUNK_RESPONSE_CAP = 64 * 1024 * 1024;

/**
 * One row may send anything up to the per-row cap (a text, or an error with
 * the output it printed) plus its traceback and the frame around it.
 */
function singleRowLine(maxOutputBytes: number): number {
  return maxOutputBytes + SINGLE_ROW_MARGIN;
}

/** Limits for a `load` or other request without rows. */
export function controlLimits(maxOutputBytes: number): ResponseLimits {
  return { line: singleRowLine(maxOutputBytes), payload: 0 };
}

/** How a response carries its results: JSON `values`, an f64 payload (`callf64`), or a result column (`callcols`). */
export type ResponseForm = 'json' | 'f64' | 'cols';

/** The request op's response form. */
export function responseForm(op: unknown): ResponseForm {
  return op === 'callf64' ? 'f64' : op === 'callcols' ? 'cols' : 'json';
}

/** Bytes of one fixed-width cell in a callcols result column. */
const CELL_BYTES: Readonly<Record<Exclude<ValueType, 'text'>, number>> = {
  number: 8,
  boolean: 1,
  enum: 4,
  datetime: 8,
};

/**
 * Limits for the response to a call of `rows` rows returning `returnType`.
 * `f64`: an f64 payload of exactly `8 × rows`. `cols`: a result column —
 * exactly its size for fixed-width types; for text, `rows` u32 lengths and at
 * most `maxOutputBytes + 16` UTF-8 bytes a row (never past the chunk cap),
 * and the header holds errors and cells that did not fit the column, bounded
 * as JSON values are.
 */
export function responseLimits(
  returnType: ValueType,
  rows: number,
  maxOutputBytes: number,
  form: ResponseForm,
): ResponseLimits {
  const single = singleRowLine(maxOutputBytes);
  const payload = payloadLimit(returnType, rows, maxOutputBytes, form);
  if (rows <= 1) return { line: single, payload };
  const result =
    form === 'f64'
      ? 0
      : returnType === 'text'
        ? maxOutputBytes + 16
        : (RESULT_BYTES[returnType] ?? 64);
  const chunk = Math.min(CHUNK_RESPONSE_CAP, FRAME_MARGIN + rows * (result + ERROR_BYTES_PER_ROW));
  return { line: Math.max(single, chunk), payload };
}

function payloadLimit(
  returnType: ValueType,
  rows: number,
  maxOutputBytes: number,
  form: ResponseForm,
): number {
  if (form === 'f64') return rows * 8;
  if (form === 'json') return 0;
  if (returnType !== 'text') return (rows * CELL_BYTES[returnType] + 7) & ~7;
  const texts = rows * (4 + maxOutputBytes + 16) + 8;
  return rows <= 1 ? texts : Math.min(texts, Math.max(CHUNK_RESPONSE_CAP, 4 + maxOutputBytes + 24));
}
