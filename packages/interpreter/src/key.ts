/**
 * The identity of a function for the pool: which warm worker may serve it.
 */
import { createHash } from 'node:crypto';
import type { ExternalFn } from '@improv/extfn-core';

interface Memo {
  key: string;
  language: string;
  name: string;
  body: string;
  returnType: string;
  argTypes: string[];
  vectorized: boolean;
}

const memos = new WeakMap<ExternalFn, Memo>();

function unchanged(fn: ExternalFn, memo: Memo): boolean {
  if (
    fn.body !== memo.body ||
    fn.name !== memo.name ||
    fn.language !== memo.language ||
    fn.returnType !== memo.returnType ||
    (fn.vectorized === true) !== memo.vectorized ||
    fn.argTypes.length !== memo.argTypes.length
  ) {
    return false;
  }
  return fn.argTypes.every((t, i) => t === memo.argTypes[i]);
}

/**
 * A worker serves exactly one function: this key covers everything the
 * driver is given at `load` (name included, since it appears in tracebacks),
 * so two functions never share a worker even when their bodies match.
 * Memoised per descriptor object, checked field by field so a descriptor
 * changed in place gets a new key.
 */
export function functionKey(fn: ExternalFn): string {
  const memo = memos.get(fn);
  if (memo && unchanged(fn, memo)) return memo.key;
  const key = createHash('sha256')
    .update(
      JSON.stringify([
        fn.language,
        fn.name,
        fn.body,
        fn.argTypes,
        fn.returnType,
        fn.vectorized === true,
      ]),
    )
    .digest('base64url');
  memos.set(fn, {
    key,
    language: fn.language,
    name: fn.name,
    body: fn.body,
    returnType: fn.returnType,
    argTypes: [...fn.argTypes],
    vectorized: fn.vectorized === true,
  });
  return key;
}
