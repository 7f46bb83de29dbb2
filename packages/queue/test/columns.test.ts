/**
 * The binary columnar form: every value type round-trips exactly (NaN, -0,
 * NUL, lone surrogates, datetime nanoseconds, the largest enum), and a frame
 * that does not fit its declared types is refused with the reason.
 */
import { sameValue, Value as V, type Value, type ValueType } from '@improv/extfn-core';
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import {
  ColumnFormatError,
  decodeResults,
  decodeRows,
  encodeNumberColumns,
  encodeResults,
  encodeRows,
} from '../src/index.js';

const SAMPLES: Record<ValueType, Value[]> = {
  number: [0, -0, 1.5, Number.NaN, Infinity, -Infinity, 5e-324, 1.7976931348623157e308].map(
    V.number,
  ),
  boolean: [V.boolean(true), V.boolean(false)],
  text: [
    '',
    'plain',
    'nul:\u0000:end',
    'non-BMP 𝄞😀',
    'lone \ud800 surrogate',
    '\udfff',
    'Résumé\r\n',
  ].map(V.text),
  datetime: [
    V.datetime('1969-07-20T20:17:40Z'),
    V.datetime('2025-03-31T23:59:59.123456789Z'),
    V.datetime('0001-01-01T00:00:00Z'),
    V.datetime('9999-12-31T23:59:59.999999999Z'),
  ],
  enum: [0, 1, 7, 4_294_967_295].map(V.enum),
};

const expectSame = (got: Value[], want: Value[]) => {
  expect(got.length).toBe(want.length);
  got.forEach((value, i) => {
    expect(sameValue(value, want[i]!), `row ${i}: ${JSON.stringify(value)}`).toBe(true);
  });
};

describe('columns', () => {
  for (const type of Object.keys(SAMPLES) as ValueType[]) {
    test(`${type} values round-trip exactly as arguments and as results`, () => {
      const values = SAMPLES[type];
      const rows = values.map((v) => [v]);
      expectSame(
        decodeRows([type], rows.length, encodeRows([type], rows)).map((r) => r[0]!),
        values,
      );
      expectSame(decodeResults(type, values.length, encodeResults(type, values)), values);
    });
  }

  test('rows of mixed types round-trip (property)', () => {
    const types: ValueType[] = ['number', 'text', 'boolean', 'datetime', 'enum'];
    const row = fc.tuple(
      fc.double().map(V.number),
      fc.string({ unit: 'binary' }).map(V.text),
      fc.boolean().map(V.boolean),
      fc
        .tuple(
          fc.integer({ min: -62_135_596_800_000, max: 253_402_300_799_999 }),
          fc.integer({ min: 0, max: 999_999 }),
        )
        .map(([ms, nanos]) => V.datetime(new Date(ms), nanos)),
      fc.integer({ min: 0, max: 4_294_967_295 }).map(V.enum),
    );
    fc.assert(
      fc.property(fc.array(row, { maxLength: 20 }), (rows) => {
        const decoded = decodeRows(types, rows.length, encodeRows(types, rows));
        rows.forEach((r, i) => {
          r.forEach((v, k) => {
            expect(sameValue(decoded[i]![k]!, v)).toBe(true);
          });
        });
      }),
    );
  });

  test('number columns encode without Values, the same bytes as rows', () => {
    const a = Float64Array.from([1, -0, Number.NaN, 4]);
    const b = Float64Array.from([5, 6, 7, 8]);
    const rows = Array.from(a, (x, i) => [V.number(x), V.number(b[i]!)]);
    expect(encodeNumberColumns([a, b], 1, 3)).toEqual(
      encodeRows(['number', 'number'], rows.slice(1, 3)),
    );
  });

  test('a failed result row travels as the zero of its type', () => {
    const frame = encodeResults('text', [V.text('a'), undefined, V.text('c')]);
    expect(decodeResults('text', 3, frame).map((v) => (v as { value: string }).value)).toEqual([
      'a',
      '',
      'c',
    ]);
  });

  test('frames that do not fit their types are refused with the reason', () => {
    const frame = encodeRows(['number'], [[V.number(1)], [V.number(2)]]);
    expect(() => decodeRows(['number'], 3, frame)).toThrow(ColumnFormatError);
    expect(() => decodeRows(['number'], 3, frame)).toThrow(
      /needs 24 bytes at offset 0, the frame has 16/,
    );
    expect(() => decodeRows(['number'], 1, frame)).toThrow(/8 bytes after its last column/);
    expect(() => decodeRows(['boolean'], 1, Buffer.from([2]))).toThrow(/boolean row 0 is 2/);
    const text = Buffer.alloc(4);
    text.writeUInt32LE(100);
    expect(() => decodeRows(['text'], 1, text)).toThrow(/text row 0 runs past the end/);
    const date = Buffer.alloc(12);
    date.writeDoubleLE(Number.NaN);
    expect(() => decodeResults('datetime', 1, date)).toThrow(/datetime row 0 is not an instant/);
  });
});
