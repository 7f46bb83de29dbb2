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

/**
 * Limits for the response to a call of `rows` rows returning `returnType`;
 * `binary` for `callf64` (results as an f64 payload, errors in the header).
 */
export function responseLimits(
  returnType: ValueType,
  rows: number,
  maxOutputBytes: number,
  binary: boolean,
): ResponseLimits {
  const single = singleRowLine(maxOutputBytes);
  const payload = binary ? rows * 8 : 0;
  if (rows <= 1) return { line: single, payload };
  const result = binary
    ? 0
    : returnType === 'text'
      ? maxOutputBytes + 16
      : (RESULT_BYTES[returnType] ?? 64);
  const chunk = Math.min(CHUNK_RESPONSE_CAP, FRAME_MARGIN + rows * (result + ERROR_BYTES_PER_ROW));
  return { line: Math.max(single, chunk), payload };
}
