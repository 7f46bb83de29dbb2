/**
 * Pure bodies are per-row only: a descriptor that says `vectorized: true`
 * is refused with a typed error before any process starts, instead of
 * running a per-row body on whole columns.
 */
import {
  type BatchOptions,
  type CallOptions,
  type ExternalFn,
  ExtFnError,
  type Value,
} from '@improv/extfn-core';
import type { InterpreterRunner } from '@improv/extfn-interpreter';

function refusal(fn: ExternalFn): ExtFnError {
  return ExtFnError.runtime(
    fn.name,
    'the Pure runner has no vectorized functions: drop `vectorized: true` and write the body for one row',
  );
}

export function refuseVectorized(runner: InterpreterRunner): InterpreterRunner {
  const call = runner.call.bind(runner);
  const callBatch = runner.callBatch.bind(runner);
  const callColumns = runner.callColumns.bind(runner);
  return Object.assign(runner, {
    call: (fn: ExternalFn, args: readonly Value[], options: CallOptions) =>
      fn.vectorized ? Promise.reject(refusal(fn)) : call(fn, args, options),
    callBatch: (fn: ExternalFn, rows: readonly (readonly Value[])[], options: BatchOptions) =>
      fn.vectorized ? Promise.resolve(rows.map(() => refusal(fn))) : callBatch(fn, rows, options),
    callColumns: (fn: ExternalFn, columns: readonly Float64Array[], options: BatchOptions) => {
      if (!fn.vectorized) return callColumns(fn, columns, options);
      const error = refusal(fn);
      const n = columns[0]?.length ?? 0;
      return Promise.resolve({
        values: new Float64Array(n).fill(Number.NaN),
        errors: new Map(Array.from({ length: n }, (_, i) => [i, error] as const)),
      });
    },
  });
}
