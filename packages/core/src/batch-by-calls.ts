/** A batch run as single calls, a few lanes at once: the path of runners without a native batch. */
import { availableParallelism } from 'node:os';
import type { ExternalFn } from './descriptor.js';
import { ExtFnError, toExtFnError } from './errors.js';
import type { BatchOptions, RowResult } from './language-runner.js';
import type { Value } from './value.js';

/**
 * A batch as individual calls, `lanes` at a time (default: one per core):
 * each row gets its Value or its ExtFnError, rows after an abort get an
 * aborted error, and progress is reported as rows finish. For runners
 * without a native batch path, and for core's own fallback.
 */
export async function batchByCalls(
  fn: ExternalFn,
  rows: readonly (readonly Value[])[],
  options: BatchOptions,
  call: (args: readonly Value[]) => Promise<Value>,
  lanes = availableParallelism(),
): Promise<RowResult[]> {
  const results: RowResult[] = new Array(rows.length);
  let next = 0;
  let done = 0;
  let aborted: ExtFnError | undefined; // one for every row not started (10^6 rows: one error)
  const lane = async () => {
    while (next < rows.length) {
      const i = next++;
      if (options.signal?.aborted) {
        results[i] = aborted ??= ExtFnError.aborted(fn.name, options.signal.reason);
      } else {
        try {
          results[i] = await call(rows[i]!);
        } catch (error) {
          results[i] = toExtFnError(error, fn.name);
        }
      }
      options.onProgress?.(++done, rows.length);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(rows.length, lanes)) }, lane));
  return results;
}
