/**
 * Answers a hostile body can make its driver send, read by the host
 * (from-driver.ts), found with packages/python/test/protocol-fuzz.test.ts
 * (whose seeded and directed cases run them through real Python workers),
 * shown here on frames built by hand.
 *
 * - A text result column whose lengths add up past 2^32: the size check
 *   padded the total in 32-bit arithmetic, which wrapped to the size of a
 *   payload of a few bytes, so the column passed, and decoding it then ran
 *   for billions of iterations on the host's event loop. It is malformed.
 * - A row error whose fields are not of their types: a message nested
 *   200 000 deep overflowed the stack when made a string (the whole batch
 *   then failed with "runner failed: RangeError"); a traceback, limit or
 *   `got` of another type reached the caller's ExtFnError as it was.
 */
import { type ExternalFn, ExtFnError, type RowResult, type ValueType } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import type { Frame } from '../src/frames.js';
import {
  colsValuesInto,
  ResponseShapeError,
  resultsFromJsonFrame,
  textResultsLater,
} from '../src/from-driver.js';

const fn = (returnType: ValueType): ExternalFn =>
  ({
    name: 'f',
    language: 'x',
    body: '',
    argTypes: ['text'],
    returnType,
    pure: false,
  }) as ExternalFn;

/** A text column of `rows` rows whose first length is `first` and the others 0, then `text`, `size` bytes in all. */
function lyingTexts(rows: number, first: number, text: string, size: number): Frame {
  const payload = Buffer.alloc(size);
  payload.writeUInt32LE(first, 0);
  payload.write(text, 4 * rows, 'latin1');
  return { header: { id: 2, rows, bytes: size }, payload };
}

describe('a text result column whose lengths add up past 2^32', () => {
  // 4 + (2^32 - 1) = 2^32 + 3, padded in 32 bits: 8 bytes; 8 + (2^32 - 1) likewise.
  const cases = [
    { rows: 1, first: 0xffffffff, text: 'abcd', size: 8 },
    { rows: 2, first: 0xffffffff, text: '', size: 8 },
  ];

  test.each(cases)('is malformed, not decoded ($rows row(s), first length $first)', (c) => {
    const frame = lyingTexts(c.rows, c.first, c.text, c.size);
    expect(() => textResultsLater(fn('text'), frame, c.rows)).toThrow(ResponseShapeError);
    const out: RowResult[] = new Array(c.rows);
    expect(() => colsValuesInto(fn('text'), frame, c.rows, out, 0)).toThrow(ResponseShapeError);
  });

  test('a column whose lengths do add up is still read', () => {
    const frame = lyingTexts(1, 4, 'abcd', 8);
    const into: string[] = [];
    textResultsLater(fn('text'), frame, 1)(into, 0, false);
    expect(into).toEqual(['abcd']);
  });
});

describe('a row error whose fields are not of their types', () => {
  let deep: unknown = [];
  for (let i = 0; i < 200_000; i++) deep = [deep];

  test('gives a Runtime ExtFnError with a message, and only fields of their types', () => {
    const frame: Frame = {
      header: {
        id: 2,
        values: [null, null, null],
        errors: {
          0: { type: 'ValueError', message: deep, traceback: { a: 1 }, limit: 'disk' },
          1: { type: 'ResultTypeError', message: 'wrong', got: [1, 2], limit: 7 },
          2: { type: 'MemoryError', message: 5, traceback: 'tb', limit: 'memory' },
        },
      },
    };
    const [first, second, third] = resultsFromJsonFrame(fn('number'), frame, 3) as ExtFnError[];
    for (const error of [first, second, third]) {
      expect(ExtFnError.isInstance(error)).toBe(true);
      expect(error!.kind).toBe('Runtime');
    }
    expect(first!.message).toMatch(/^function f: ValueError: ./);
    expect(first!.message.length).toBeLessThan(300);
    expect(first!.stderr).toBeUndefined();
    expect(first!.limit).toBeUndefined();
    expect(second).toMatchObject({
      message: 'function f: wrong',
      got: '[1,2]',
      expected: 'number',
    });
    expect(second!.limit).toBeUndefined();
    expect(third).toMatchObject({
      message: 'function f: MemoryError: 5',
      stderr: 'tb',
      limit: 'memory',
    });
  });
});
