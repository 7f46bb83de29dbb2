/** ExtFnError (`errors.ts`, `error-value.ts`): a factory per kind, structured fields, isInstance across package copies, toExtFnError, error cells. */
import { describe, expect, test } from 'vitest';
import { EXT_FN_ERROR_KINDS, ExtFnError, errorValue, toExtFnError } from '../src/index.js';

describe('ExtFnError', () => {
  const all: ExtFnError[] = [
    ExtFnError.notFound('nope', ['add', 'mul']),
    ExtFnError.arityMismatch('add', 2, 1),
    ExtFnError.typeMismatch('add', 2, 'number', 'text "x"'),
    ExtFnError.languageUnavailable('f', 'r', ['python', 'wasm']),
    ExtFnError.runtime('f', 'ValueError: nope', { stderr: 'Traceback…' }),
    ExtFnError.timeout('f', 2000),
    ExtFnError.sandbox('bubblewrap (bwrap) was not found', 'install bubblewrap', {
      functionName: 'f',
    }),
  ];

  test('every kind has a factory, and messages read as the issue asks', () => {
    expect(all.map((e) => e.kind)).toEqual([...EXT_FN_ERROR_KINDS]);
    expect(all.map((e) => e.message)).toEqual([
      'function nope is not registered (registered: add, mul)',
      'function add: expected 2 argument(s), got 1',
      'function add: argument 2 expected number, got text "x"',
      'function f: no runner for language "r" is installed; install @improv/extfn-r and pass its runner to the Registry (installed: python, wasm)',
      'function f: ValueError: nope',
      'function f: timed out after 2000 ms',
      'function f: bubblewrap (bwrap) was not found; install bubblewrap',
    ]);
  });

  test('structured fields', () => {
    expect(all[1]).toMatchObject({ functionName: 'add', expected: 2, got: 1 });
    expect(all[2]).toMatchObject({ functionName: 'add', position: 2, expected: 'number' });
    expect(all[3]).toMatchObject({ language: 'r', available: ['python', 'wasm'] });
    expect(all[4]!.stderr).toBe('Traceback…');
    expect(all[5]).toMatchObject({ ms: 2000, limit: 'wall-clock' });
    expect(all[6]!.fix).toBe('install bubblewrap');
    expect(all[5]!.toJSON()).toEqual({
      kind: 'Timeout',
      message: 'function f: timed out after 2000 ms',
      functionName: 'f',
      ms: 2000,
      limit: 'wall-clock',
    });
  });

  test('loadFailed: in toJSON and fields(), kept when re-addressed to another function', () => {
    const error = ExtFnError.runtime('f', 'SyntaxError: unexpected EOF', { loadFailed: true });
    expect(error.loadFailed).toBe(true);
    expect(error.toJSON()).toEqual({
      kind: 'Runtime',
      message: 'function f: SyntaxError: unexpected EOF',
      loadFailed: true,
      functionName: 'f',
    });
    const moved = error.withFunctionName('g');
    expect(moved.message).toBe('function g: SyntaxError: unexpected EOF');
    expect(moved.loadFailed).toBe(true);
    // set only when true: a row's error has no such key
    expect(Object.keys(all[4]!)).not.toContain('loadFailed');
  });

  test('isInstance works across copies of the package (Symbol.for marker)', () => {
    const foreign = Object.assign(new Error('x'), {
      [Symbol.for('@improv/extfn.error')]: true,
      kind: 'Runtime',
    });
    expect(ExtFnError.isInstance(foreign)).toBe(true);
    expect(ExtFnError.isInstance(new Error('x'))).toBe(false);
    expect(ExtFnError.isInstance(null)).toBe(false);
  });

  test('toExtFnError wraps anything as Runtime, keeping the cause', () => {
    const cause = new TypeError('boom');
    const wrapped = toExtFnError(cause, 'f');
    expect(wrapped.kind).toBe('Runtime');
    expect(wrapped.message).toBe('function f: runner failed: TypeError: boom');
    expect(wrapped.cause).toBe(cause);
    expect(toExtFnError('a string', 'f').message).toMatch(/a string/);
    expect(toExtFnError(all[5], 'f')).toBe(all[5]);
    expect(toExtFnError(ExtFnError.timeout('other', 1), 'f').message).toBe(
      'function f: timed out after 1 ms',
    );
  });

  test('errorValue turns every kind into an error cell', () => {
    for (const error of all) {
      const cell = errorValue(error, 7);
      expect(cell.type).toBe('error');
      expect(cell.error.kind).toBe(error.kind === 'TypeMismatch' ? 'TypeMismatch' : 'Custom');
      expect(cell.error.message).toBe(error.message);
      expect(cell.error.sourceMeasure).toBe(7);
    }
    expect(errorValue(new Error('plain')).error).toEqual({ kind: 'Custom', message: 'plain' });
  });
});
