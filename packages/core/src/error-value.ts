/** The error cell a failed call leaves in a table: an ExtFnError as an error Value. */
import { ExtFnError } from './errors.js';
import { type ErrorValue, Value } from './value.js';

/**
 * The error cell for a failed call: TypeMismatch stays TypeMismatch, every
 * other failure becomes Custom with the error's message. Anything thrown that
 * is not an ExtFnError becomes Custom too.
 */
export function errorValue(error: unknown, sourceMeasure?: number): ErrorValue {
  if (ExtFnError.isInstance(error) && error.kind === 'TypeMismatch') {
    return Value.error('TypeMismatch', error.message, sourceMeasure);
  }
  const message = error instanceof Error ? error.message : String(error);
  return Value.error('Custom', message, sourceMeasure);
}
