/** Table cells ↔ values (`cells.ts`): parseCell reads each type or refuses with how to write it, jsonCell reads the wire form, formatCell writes what parseCell reads back. */
import { Value } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { formatCell, jsonCell, parseCell } from '../src/cells.js';

const ok = (value: unknown) => ({ ok: true, value });

describe('parseCell', () => {
  test('numbers, including the values JSON cannot hold', () => {
    expect(parseCell('42', 'number')).toEqual(ok(Value.number(42)));
    expect(parseCell(' -3.5 ', 'number')).toEqual(ok(Value.number(-3.5)));
    expect(parseCell('1e-3', 'number')).toEqual(ok(Value.number(0.001)));
    expect(parseCell('.5', 'number')).toEqual(ok(Value.number(0.5)));
    expect(parseCell('NaN', 'number')).toEqual(ok(Value.number(Number.NaN)));
    expect(parseCell('Infinity', 'number')).toEqual(ok(Value.number(Number.POSITIVE_INFINITY)));
    expect(parseCell('-inf', 'number')).toEqual(ok(Value.number(Number.NEGATIVE_INFINITY)));
    const negativeZero = parseCell('-0', 'number');
    expect(negativeZero).toEqual(ok(Value.number(-0)));
    expect(negativeZero.ok && Object.is((negativeZero.value as { value: number }).value, -0)).toBe(
      true,
    );
  });

  test('near-numbers are refused with how to write them', () => {
    for (const text of ['5%', '1,000', '0x10', '', ' ', '1e', '--1', 'twelve']) {
      const result = parseCell(text, 'number');
      expect(result, text).toMatchObject({
        ok: false,
        problem: expect.stringContaining('is not a number'),
      });
      expect(result.ok === false && result.fix).toContain('decimal number');
    }
  });

  test('booleans are true or false, in any case', () => {
    expect(parseCell('true', 'boolean')).toEqual(ok(Value.boolean(true)));
    expect(parseCell('FALSE', 'boolean')).toEqual(ok(Value.boolean(false)));
    expect(parseCell('yes', 'boolean')).toMatchObject({ ok: false, fix: 'write true or false' });
    expect(parseCell('1', 'boolean').ok).toBe(false);
  });

  test('text is taken as written', () => {
    expect(parseCell(' a "b"\n', 'text')).toEqual(ok(Value.text(' a "b"\n')));
  });

  test('datetimes: ISO-8601 with a zone, or a date at midnight UTC; a naive time is refused', () => {
    expect(parseCell('2025-03-31T12:00:00Z', 'datetime')).toEqual(
      ok(Value.datetime('2025-03-31T12:00:00Z')),
    );
    expect(parseCell('2025-03-31T14:00:00+02:00', 'datetime')).toEqual(
      ok(Value.datetime('2025-03-31T12:00:00Z')),
    );
    expect(parseCell('2025-03-31', 'datetime')).toEqual(ok(Value.datetime('2025-03-31T00:00:00Z')));
    expect(parseCell('2025-03-31T12:00:00.123456789Z', 'datetime')).toEqual(
      ok(Value.datetime('2025-03-31T12:00:00.123456789Z')),
    );
    expect(parseCell('2025-03-31T12:00:00', 'datetime')).toMatchObject({
      ok: false,
      problem: expect.stringContaining('has no time zone'),
    });
    expect(parseCell('31/03/2025', 'datetime')).toMatchObject({
      ok: false,
      problem: expect.stringContaining('ISO-8601'),
    });
  });

  test('a date in ISO-8601 shape that does not exist says which field, not "not ISO-8601"', () => {
    const cases: Array<[string, string]> = [
      ['2025-02-30', '"2025-02-30": February 2025 has no day 30'],
      ['2023-02-29', '"2023-02-29": February 2023 has no day 29'],
      ['1900-02-29', '"1900-02-29": February 1900 has no day 29'],
      ['2025-04-31T10:00:00Z', '"2025-04-31T10:00:00Z": April 2025 has no day 31'],
      ['2025-13-01', '"2025-13-01": there is no month 13'],
      ['2025-01-00', '"2025-01-00": January 2025 has no day 0'],
      [
        '2025-04-30T24:00:00Z',
        '"2025-04-30T24:00:00Z": there is no hour 24 (hours go from 00 to 23)',
      ],
      [
        '2025-04-30T23:60+02:00',
        '"2025-04-30T23:60+02:00": there is no minute 60 (minutes go from 00 to 59)',
      ],
      ['2025-02-30T10:00', '"2025-02-30T10:00": February 2025 has no day 30'],
    ];
    for (const [text, problem] of cases) {
      expect(parseCell(text, 'datetime'), text).toMatchObject({
        ok: false,
        problem,
        fix: expect.stringContaining('write an ISO-8601 instant'),
      });
    }
    expect(parseCell('2024-02-29', 'datetime')).toEqual(ok(Value.datetime('2024-02-29T00:00:00Z')));
    expect(parseCell('2000-02-29', 'datetime').ok).toBe(true);
    // Malformed text keeps its message.
    for (const text of ['2025-02-3x', '2025-2-3', 'tomorrow']) {
      expect(parseCell(text, 'datetime'), text).toMatchObject({
        ok: false,
        problem: `"${text}" is not an ISO-8601 instant`,
      });
    }
  });

  test('enums are indexes in [0, 2^32 - 1]', () => {
    expect(parseCell('3', 'enum')).toEqual(ok(Value.enum(3)));
    expect(parseCell('4294967295', 'enum')).toEqual(ok(Value.enum(4294967295)));
    for (const text of ['-1', '1.5', '4294967296', 'red']) {
      expect(parseCell(text, 'enum'), text).toMatchObject({
        ok: false,
        fix: expect.stringContaining('index'),
      });
    }
  });
});

describe('jsonCell', () => {
  test('the wire form and tagged values', () => {
    expect(jsonCell(5, 'number')).toEqual(ok(Value.number(5)));
    expect(jsonCell('NaN', 'number')).toEqual(ok(Value.number(Number.NaN)));
    expect(jsonCell({ type: 'number', value: 'Infinity' }, 'number')).toEqual(
      ok(Value.number(Number.POSITIVE_INFINITY)),
    );
    expect(jsonCell({ Number: 2 }, 'number')).toEqual(ok(Value.number(2)));
    expect(jsonCell('2025-01-01', 'datetime')).toEqual(ok(Value.datetime('2025-01-01T00:00:00Z')));
    expect(jsonCell(true, 'boolean')).toEqual(ok(Value.boolean(true)));
    expect(jsonCell(7, 'enum')).toEqual(ok(Value.enum(7)));
  });

  test('mismatches say what was found', () => {
    expect(jsonCell('5', 'number')).toMatchObject({
      ok: false,
      problem: 'the string "5" is not a number',
    });
    expect(jsonCell(null, 'text')).toMatchObject({ ok: false, problem: 'null is not a text' });
    expect(jsonCell({ Text: 'x' }, 'number')).toMatchObject({
      ok: false,
      problem: 'a text value where number is declared',
    });
  });
});

describe('formatCell', () => {
  test('writes what parseCell reads back', () => {
    const values = [
      Value.number(5),
      Value.number(-0),
      Value.number(Number.NaN),
      Value.number(Number.NEGATIVE_INFINITY),
      Value.number(0.1 + 0.2),
      Value.boolean(false),
      Value.datetime('2025-03-31T23:59:59.123456789Z'),
      Value.enum(4),
    ];
    for (const value of values) {
      const back = parseCell(formatCell(value), value.type as 'number');
      expect(back, formatCell(value)).toEqual(ok(value));
    }
    expect(formatCell(Value.text('a,b'))).toBe('a,b');
  });
});
