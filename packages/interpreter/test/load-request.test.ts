/**
 * What the driver is told about a function at `load`, and which worker may
 * serve it: `vectorized: true` is passed through only when the descriptor
 * sets it, and it is part of the worker key.
 */
import type { ExternalFn } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { functionKey } from '../src/index.js';
import { loadHeader } from '../src/runner.js';

const fn: ExternalFn = {
  name: 'f',
  language: 'python',
  body: 'result = args[0]',
  argTypes: ['number'],
  returnType: 'number',
  pure: false,
};

describe('the load request', () => {
  test('carries the function and the output cap; `vectorized` only when set', () => {
    expect(loadHeader(fn, 1024)).toEqual({
      op: 'load',
      fn: { name: 'f', body: 'result = args[0]', argTypes: ['number'], returnType: 'number' },
      maxOutputBytes: 1024,
    });
    expect(loadHeader({ ...fn, vectorized: false }, 1024).fn as object).not.toHaveProperty(
      'vectorized',
    );
    expect(loadHeader({ ...fn, vectorized: true }, 1024).fn).toMatchObject({ vectorized: true });
  });

  test('a vectorized descriptor never shares a worker with the same function row by row', () => {
    expect(functionKey({ ...fn, vectorized: true })).not.toBe(functionKey(fn));
    expect(functionKey({ ...fn, vectorized: false })).toBe(functionKey(fn));
  });
});
