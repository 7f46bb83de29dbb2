/**
 * The errors for a call whose arguments are not in the shape the method
 * takes: `eval`'s arguments (and each row of `evalBatch`) not an array of
 * Values, `evalBatch`'s rows not an array, `evalColumns`' columns not an
 * array. Each is an ArityMismatch naming the function, what was given and a
 * call of the right shape for this function's argument types.
 */
import type { ExternalFn } from './descriptor.js';
import { describeThrown, ExtFnError } from './errors.js';
import { describeValue, isValueOf, type ValueType } from './value.js';

/** A Value of each type, as source text, for the examples. */
const SAMPLE_VALUES: Readonly<Record<ValueType, string>> = {
  number: 'Value.number(3)',
  boolean: 'Value.boolean(true)',
  text: "Value.text('a')",
  datetime: "Value.datetime('2024-01-01T00:00:00Z')",
  enum: 'Value.enum(0)',
};

/** A one-row column of each type, as source text, for the examples. */
const SAMPLE_COLUMNS: Readonly<Record<ValueType, string>> = {
  number: 'new Float64Array([3])',
  boolean: 'new Uint8Array([1])',
  text: "['a']",
  datetime: 'new BigInt64Array([0n])',
  enum: 'new Uint32Array([0])',
};

function quoted(name: string): string {
  return `'${name.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
}

/** Most arguments a message spells out: a function may take 1 000 (MAX_ARGUMENTS). */
const ARGUMENTS_SHOWN = 10;

/** `f(type)` of the first ARGUMENTS_SHOWN argument types, then `… N in all`. */
function perType(fn: ExternalFn, f: (type: ValueType) => string): string {
  const n = fn.argTypes.length;
  const shown = fn.argTypes.slice(0, ARGUMENTS_SHOWN).map(f).join(', ');
  return n > ARGUMENTS_SHOWN ? `${shown}, … ${n} in all` : shown;
}

/** The argument types, `number, text`, the first few of a long list then `… N in all`. */
export function argumentTypes(fn: ExternalFn): string {
  return perType(fn, (type) => type);
}

/** One row of arguments for `fn`, as source text: `[Value.number(3), Value.text('a')]`. */
function sampleRow(fn: ExternalFn): string {
  return `[${perType(fn, (type) => SAMPLE_VALUES[type])}]`;
}

function perArgument(fn: ExternalFn): string {
  const n = fn.argTypes.length;
  return `one per argument (${n === 0 ? 'none' : argumentTypes(fn)})`;
}

/** What a caller passed, in a few words: `a single Value (number 3)`, `a string ("x")`, `undefined`. */
export function describeGiven(given: unknown): string {
  if (given === undefined || given === null) return String(given);
  if (isValueOf(given)) return `a single Value (${describeValue(given)}), not an array`;
  if (ArrayBuffer.isView(given)) return `a ${given.constructor.name}`;
  switch (typeof given) {
    case 'string':
      return `a string (${JSON.stringify(given.length > 40 ? `${given.slice(0, 40)}…` : given)})`;
    case 'number':
    case 'boolean':
    case 'bigint':
      return `a ${typeof given} (${String(given)})`;
    case 'function':
      return 'a function';
    case 'symbol':
      return 'a symbol';
  }
  let shown: string | undefined;
  try {
    shown = JSON.stringify(given);
  } catch {
    shown = undefined;
  }
  return shown === undefined ? 'an object' : `an object (${shown.slice(0, 60)})`;
}

function shapeError(fn: ExternalFn, message: string, given: unknown, fix: string): ExtFnError {
  const got = describeGiven(given);
  return new ExtFnError('ArityMismatch', `function ${fn.name}: ${message}, got ${got}; ${fix}`, {
    functionName: fn.name,
    expected: fn.argTypes.length,
    got,
    fix,
  });
}

/** `eval`'s arguments (or a row of `evalBatch`) are not an array. */
export function argumentsNotArray(fn: ExternalFn, given: unknown): ExtFnError {
  const row = sampleRow(fn);
  return shapeError(
    fn,
    `the arguments must be an array of Values, ${perArgument(fn)}`,
    given,
    `pass them in an array, e.g. eval(${quoted(fn.name)}, ${row}); each row of evalBatch is such an array, e.g. evalBatch(${quoted(fn.name)}, [${row}, …])`,
  );
}

/** `eval`'s arguments (or a row of `evalBatch`) cannot be read: a revoked Proxy, a getter that throws. */
export function argumentsUnreadable(fn: ExternalFn, error: unknown): ExtFnError {
  const row = sampleRow(fn);
  const got = `arguments that cannot be read (${describeThrown(error)})`;
  const fix = `pass a plain array of Values, e.g. eval(${quoted(fn.name)}, ${row})`;
  return new ExtFnError(
    'ArityMismatch',
    `function ${fn.name}: the arguments must be an array of Values, ${perArgument(fn)}, got ${got}; ${fix}`,
    { functionName: fn.name, expected: fn.argTypes.length, got, fix, cause: error },
  );
}

/** `evalBatch`'s rows are not an array. */
export function rowsNotArray(fn: ExternalFn, given: unknown): ExtFnError {
  return shapeError(
    fn,
    `evalBatch's rows must be an array of rows, each an array of Values, ${perArgument(fn)}`,
    given,
    `pass e.g. evalBatch(${quoted(fn.name)}, [${sampleRow(fn)}, …])`,
  );
}

/** `evalColumns`' columns are not an array. */
export function columnsNotArray(fn: ExternalFn, given: unknown): ExtFnError {
  const columns = perType(fn, (type) => SAMPLE_COLUMNS[type]);
  return shapeError(
    fn,
    `evalColumns' columns must be an array of columns, ${perArgument(fn)}`,
    given,
    `pass them in an array, e.g. evalColumns(${quoted(fn.name)}, [${columns}])`,
  );
}
