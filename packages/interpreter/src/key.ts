import { createHash } from 'node:crypto';
import type { ExternalFn } from '@improv/extfn-core';

/**
 * A worker serves exactly one function: this key covers everything the
 * driver is given at `load` (name included, since it appears in tracebacks),
 * so two functions never share a worker even when their bodies match.
 */
export function functionKey(fn: ExternalFn): string {
  return createHash('sha256')
    .update(JSON.stringify([fn.language, fn.name, fn.body, fn.argTypes, fn.returnType]))
    .digest('base64url');
}
