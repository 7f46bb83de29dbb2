/** Values (`value.ts`): constructors and their refusals, datetimes to the nanosecond, sameValue, and the one datetime range every runner shares. */
import { describe, expect, test } from 'vitest';
import {
  DATETIME_MAX,
  DATETIME_MIN,
  ENUM_MAX,
  formatInstant,
  isError,
  isNumber,
  isValueOf,
  parseInstant,
  sameValue,
  typeOf,
  Value,
  valueFromJson,
} from '../src/index.js';
import { encodedValueSchema, engineValueSchema } from '../src/schemas.js';

describe('Value constructors', () => {
  test('build each type and keep special numbers', () => {
    expect(Value.number(Number.NaN).value).toBeNaN();
    expect(Object.is(Value.number(-0).value, -0)).toBe(true);
    expect(Value.number(-Infinity)).toEqual({ type: 'number', value: -Infinity });
    expect(Value.boolean(false)).toEqual({ type: 'boolean', value: false });
    expect(Value.text('é')).toEqual({ type: 'text', value: 'é' });
    expect(Value.enum(ENUM_MAX)).toEqual({ type: 'enum', value: 4294967295 });
  });

  test('reject bad input with a message that says what was wrong', () => {
    expect(() => Value.enum(-1)).toThrow(/integer in \[0, 4294967295\], got -1/);
    expect(() => Value.enum(ENUM_MAX + 1)).toThrow(RangeError);
    expect(() => Value.enum(1.5)).toThrow(RangeError);
    expect(() => Value.number('1' as unknown as number)).toThrow(/needs a number, got string/);
    expect(() => Value.datetime('yesterday')).toThrow(/ISO-8601/);
    expect(() => Value.datetime('2025-01-01T00:00:00')).toThrow(/Z or an offset/);
    expect(() => Value.datetime(new Date(Number.NaN))).toThrow(/invalid Date/);
    expect(() => Value.error('Custom')).toThrow(/needs a message/);
    expect(() => Value.error('Nope' as 'Custom', 'x')).toThrow(/kind must be one of/);
  });

  test('datetime keeps nanoseconds below the millisecond and normalises offsets to UTC', () => {
    const v = Value.datetime('2025-03-31T23:59:59.123456789Z');
    expect(v.value.toISOString()).toBe('2025-03-31T23:59:59.123Z');
    expect(v.nanos).toBe(456789);
    expect(formatInstant(v.value, v.nanos)).toBe('2025-03-31T23:59:59.123456789Z');
    const offset = Value.datetime('2000-02-29T12:00:00+02:00');
    expect(formatInstant(offset.value)).toBe('2000-02-29T10:00:00Z');
    expect(parseInstant('1969-07-20T20:17:40Z')?.date.getTime()).toBe(-14182940000);
    expect(parseInstant('2024-02-29T10:00Z')?.date.toISOString()).toBe('2024-02-29T10:00:00.000Z');
  });

  test('impossible dates and times are refused, never rolled over', () => {
    for (const bad of [
      '2025-02-29T00:00:00Z',
      '2025-02-30T12:00:00Z',
      '2025-04-31T00:00:00Z',
      '2025-13-01T00:00:00Z',
      '2025-00-10T00:00:00Z',
      '2025-01-01T24:00:00Z',
      '2025-01-01T23:60:00Z',
      '2025-01-01T23:59:60Z',
      '2025-01-01T00:00:00+25:00',
    ]) {
      expect(parseInstant(bad), bad).toBeUndefined();
      expect(() => Value.datetime(bad), bad).toThrow(/ISO-8601/);
    }
  });

  test('the fast reading of `…Z` instants agrees with the general one (the same text with +00:00)', () => {
    let seed = 7;
    const random = () => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const lo = Date.UTC(100, 0, 1);
    const hi = Date.UTC(9999, 11, 31, 23, 59, 59, 999);
    for (let i = 0; i < 3000; i++) {
      const date = new Date(Math.floor(lo + random() * (hi - lo)));
      const nanos = i % 3 === 0 ? 0 : Math.floor(random() * 1_000_000);
      const text = formatInstant(date, nanos);
      const fast = parseInstant(text);
      expect(fast, text).toEqual({ date, nanos });
      expect(parseInstant(`${text.slice(0, -1)}+00:00`), text).toEqual(fast);
      // Every fraction length reads the same as through the general path.
      const digits = 1 + (i % 9);
      const cut = `${text.slice(0, 19)}.${(text.slice(20, -1) || '0').padEnd(9, '0').slice(0, digits)}Z`;
      expect(parseInstant(cut), cut).toEqual(parseInstant(`${cut.slice(0, -1)}+00:00`));
    }
    expect(parseInstant('0099-12-31T23:59:59Z')?.date.toISOString()).toBe(
      '0099-12-31T23:59:59.000Z',
    );
    expect(parseInstant('2024-02-29T10:00:00.5Z')).toEqual({
      date: new Date('2024-02-29T10:00:00.500Z'),
      nanos: 0,
    });
    expect(parseInstant('2023-02-29T10:00:00Z')).toBeUndefined();
    expect(parseInstant('2023-01-01T10:00:00.Z')).toBeUndefined();
  });

  test('typeOf and the guards', () => {
    expect(typeOf(Value.number(1))).toBe('number');
    expect(typeOf(Value.error('DivisionByZero'))).toBeUndefined();
    expect(isNumber(Value.number(1))).toBe(true);
    expect(isError(Value.error('MissingInput'))).toBe(true);
    expect(isValueOf({ type: 'enum', value: 2 ** 32 })).toBe(false);
    expect(isValueOf({ type: 'number', value: '1' })).toBe(false);
    expect(isValueOf({ type: 'datetime', value: new Date(0), nanos: 1_000_000 })).toBe(false);
    expect(isValueOf(Value.text('a'), 'number')).toBe(false);
  });

  test('sameValue: NaN equals NaN, -0 differs from 0, datetimes by instant and nanos', () => {
    expect(sameValue(Value.number(Number.NaN), Value.number(Number.NaN))).toBe(true);
    expect(sameValue(Value.number(-0), Value.number(0))).toBe(false);
    expect(
      sameValue(
        Value.datetime('2020-01-01T00:00:00Z'),
        Value.datetime('2020-01-01T01:00:00+01:00'),
      ),
    ).toBe(true);
    expect(
      sameValue(
        Value.datetime('2020-01-01T00:00:00.000000001Z'),
        Value.datetime('2020-01-01T00:00:00Z'),
      ),
    ).toBe(false);
    expect(sameValue(Value.error('Custom', 'a'), Value.error('Custom', 'b'))).toBe(false);
  });
});

describe('the datetime range, one for every runner', () => {
  const range = /datetime must be in \[0001-01-01T00:00:00Z, 9999-12-31T23:59:59\.999999999Z\]/;

  test('the ends are accepted, nanoseconds included', () => {
    expect(formatInstant(Value.datetime(DATETIME_MIN).value)).toBe('0001-01-01T00:00:00Z');
    const last = Value.datetime(DATETIME_MAX);
    expect(formatInstant(last.value, last.nanos)).toBe(DATETIME_MAX);
  });

  test('year 0 and year 10000 are refused with the range in the message', () => {
    expect(() => Value.datetime('0000-12-31T23:59:59Z')).toThrow(range);
    expect(() => Value.datetime(new Date('+010000-01-01T00:00:00Z'))).toThrow(range);
    // an offset that carries the instant past the end, in UTC
    expect(() => Value.datetime('9999-12-31T23:00:00-05:00')).toThrow(range);
    // a plain object that skipped the constructor is not a valid datetime either
    expect(isValueOf({ type: 'datetime', value: new Date('+010000-01-01T00:00:00Z') })).toBe(false);
    expect(isValueOf({ type: 'datetime', value: new Date('9999-12-31T00:00:00Z') })).toBe(true);
  });

  test('a runner result outside the range is a Runtime error naming the range', () => {
    expect(() => valueFromJson('0000-01-01T00:00:00Z', 'datetime', 'f')).toThrow(
      /function f: result expected datetime, got string "0000-01-01T00:00:00Z" \(outside 0001-01-01T00:00:00Z \.\. 9999-12-31T23:59:59\.999999999Z\)/,
    );
    expect(valueFromJson('9999-12-31T23:59:59.999999999Z', 'datetime').type).toBe('datetime');
  });

  test('the value schemas refuse it with the range in the issue', () => {
    const out = encodedValueSchema.safeParse({ type: 'datetime', value: '0000-06-01T00:00:00Z' });
    expect(out.success).toBe(false);
    expect(out.error!.issues[0]!.message).toMatch(/must be in \[0001-01-01T00:00:00Z, /);
    expect(engineValueSchema.safeParse({ DateTime: '9999-12-31T23:59:59Z' }).success).toBe(true);
    expect(engineValueSchema.safeParse({ DateTime: '9999-12-31T20:00:00-05:00' }).success).toBe(
      false,
    );
  });
});
