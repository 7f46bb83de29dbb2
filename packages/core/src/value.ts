/**
 * Cell values, as the Improv engine has them. A `Value` is a plain object
 * `{ type, value }`; errors are `{ type: 'error', error }`.
 */

/** The types a function argument or result can declare. */
export const VALUE_TYPES = ['number', 'boolean', 'text', 'datetime', 'enum'] as const;
export type ValueType = (typeof VALUE_TYPES)[number];

/** The largest enum index: enums are u32 in the engine. */
export const ENUM_MAX = 4_294_967_295;

/** Error kinds of an error cell, as in the engine. */
export const ERROR_KINDS = [
  'TypeMismatch',
  'DimensionMismatch',
  'DivisionByZero',
  'MissingInput',
  'Custom',
] as const;
export type ErrorKind = (typeof ERROR_KINDS)[number];

export interface CellError {
  kind: ErrorKind;
  /** Required for `Custom`, optional otherwise. */
  message?: string;
  /** The engine's MeasureId the error came from, when known. */
  sourceMeasure?: number;
}

export interface NumberValue {
  type: 'number';
  /** Any f64: NaN, ±Infinity and -0 are kept. */
  value: number;
}
export interface BooleanValue {
  type: 'boolean';
  value: boolean;
}
export interface TextValue {
  type: 'text';
  value: string;
}
export interface DatetimeValue {
  type: 'datetime';
  /** The instant, to the millisecond. */
  value: Date;
  /**
   * Nanoseconds below the millisecond (0–999 999), kept so that an engine
   * timestamp with nanosecond precision survives a round trip. Absent means 0.
   */
  nanos?: number;
}
export interface EnumValue {
  type: 'enum';
  /** Index into the enum's members: an integer in [0, 2^32 - 1]. */
  value: number;
}
export interface ErrorValue {
  type: 'error';
  error: CellError;
}

export type Value = NumberValue | BooleanValue | TextValue | DatetimeValue | EnumValue | ErrorValue;

/**
 * The instants a datetime can hold, the same for every runner: four-digit
 * years, as the wire's ISO-8601 form and every driver's datetime type read
 * them. Checked where values enter (`Value.datetime`, the value schemas,
 * `valueFromJson`, `isValueOf`), so no runner meets year 0 or year 10000.
 */
export const DATETIME_MIN = '0001-01-01T00:00:00Z';
export const DATETIME_MAX = '9999-12-31T23:59:59.999999999Z';
const MIN_MS = Date.parse(DATETIME_MIN);
const MAX_MS = Date.parse('9999-12-31T23:59:59.999Z'); // nanos below the ms are at most .999999
const RANGE_TEXT = `datetime must be in [${DATETIME_MIN}, ${DATETIME_MAX}]`;

/** Whether an instant lies in [DATETIME_MIN, DATETIME_MAX]. */
export function isInstantInRange(date: Date): boolean {
  const ms = date.getTime();
  return ms >= MIN_MS && ms <= MAX_MS;
}

/** ISO-8601 with an explicit offset or Z; fraction up to nanoseconds. */
const ISO_INSTANT =
  /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}(?::\d{2})?)(?:\.(\d{1,9}))?(Z|[+-]\d{2}:?\d{2})$/i;

/**
 * Parses an ISO-8601 instant (Z or an offset), keeping nanoseconds. Impossible
 * fields (February 30th, hour 24, minute 60) are refused, not rolled over.
 */
export function parseInstant(text: string): { date: Date; nanos: number } | undefined {
  return parseUtcInstant(text) ?? parseAnyInstant(text);
}

/** `n` decimal digits of `text` at `at` as a number, or -1. */
function digitsAt(text: string, at: number, n: number): number {
  let value = 0;
  for (let i = at; i < at + n; i++) {
    const digit = text.charCodeAt(i) - 48;
    if (digit < 0 || digit > 9) return -1;
    value = value * 10 + digit;
  }
  return value;
}

/**
 * The wire's usual spelling, `YYYY-MM-DDTHH:MM:SS[.f{1,9}]Z`, read digit by
 * digit (a batch of datetimes reads one per row); anything else, and years
 * below 100 (which Date.UTC would move to the 1900s), go to parseAnyInstant.
 */
function parseUtcInstant(text: string): { date: Date; nanos: number } | undefined {
  const n = text.length;
  if (n < 20 || n > 30 || n === 21 || text.charCodeAt(n - 1) !== 90 /* Z */) return undefined;
  if (text[4] !== '-' || text[7] !== '-' || text[10] !== 'T' || text[13] !== ':') return undefined;
  if (text[16] !== ':' || (n > 20 && text[19] !== '.')) return undefined;
  const year = digitsAt(text, 0, 4);
  const month = digitsAt(text, 5, 2);
  const day = digitsAt(text, 8, 2);
  const hour = digitsAt(text, 11, 2);
  const minute = digitsAt(text, 14, 2);
  const second = digitsAt(text, 17, 2);
  const fractionDigits = n > 20 ? n - 21 : 0;
  const fraction = fractionDigits ? digitsAt(text, 20, fractionDigits) : 0;
  if (year < 100 || month < 1 || month > 12 || day < 1 || hour < 0 || hour > 23) return undefined;
  if (minute < 0 || minute > 59 || second < 0 || second > 59 || fraction < 0) return undefined;
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
  const days =
    month === 2
      ? leap
        ? 29
        : 28
      : month === 4 || month === 6 || month === 9 || month === 11
        ? 30
        : 31;
  if (day > days) return undefined;
  const nanosOfSecond = fraction * 10 ** (9 - fractionDigits);
  const ms = Math.floor(nanosOfSecond / 1_000_000);
  const date = new Date(Date.UTC(year, month - 1, day, hour, minute, second, ms));
  return { date, nanos: nanosOfSecond - ms * 1_000_000 };
}

function parseAnyInstant(text: string): { date: Date; nanos: number } | undefined {
  const match = ISO_INSTANT.exec(text.trim());
  if (!match) return undefined;
  const [, day, time, fraction = '', zone = 'Z'] = match;
  const [year, month, dayOfMonth] = day!.split('-').map(Number) as [number, number, number];
  const [hour, minute, second = 0] = time!.split(':').map(Number) as [number, number, number?];
  const daysInMonth = new Date(Date.UTC(year, month, 0)).getUTCDate();
  if (month < 1 || month > 12 || dayOfMonth < 1 || dayOfMonth > daysInMonth) return undefined;
  if (hour > 23 || minute > 59 || second > 59) return undefined;
  const digits = fraction.padEnd(9, '0');
  const seconds = time!.length === 5 ? `${time}:00` : time;
  const date = new Date(`${day}T${seconds}.${digits.slice(0, 3)}${zone.toUpperCase()}`);
  if (Number.isNaN(date.getTime())) return undefined;
  return { date, nanos: Number(digits.slice(3)) };
}

/** Formats an instant as `YYYY-MM-DDTHH:MM:SS[.fffffffff]Z`, trailing zeros trimmed. */
export function formatInstant(date: Date, nanos = 0): string {
  const iso = date.toISOString(); // always .sssZ
  if (nanos === 0 && iso.length === 24) {
    // Trim the milliseconds' trailing zeros without a regex (one call per row of a batch).
    if (iso.charCodeAt(22) !== 48) return iso;
    if (iso.charCodeAt(21) !== 48) return `${iso.slice(0, 22)}Z`;
    if (iso.charCodeAt(20) !== 48) return `${iso.slice(0, 21)}Z`;
    return `${iso.slice(0, 19)}Z`;
  }
  const base = iso.slice(0, -5);
  const fraction = (iso.slice(-4, -1) + String(nanos).padStart(6, '0')).replace(/0+$/, '');
  return fraction ? `${base}.${fraction}Z` : `${base}Z`;
}

function checkNanos(nanos: number): number {
  if (!Number.isInteger(nanos) || nanos < 0 || nanos > 999_999) {
    throw new RangeError(`datetime nanos must be an integer in [0, 999999], got ${nanos}`);
  }
  return nanos;
}

/** Constructors that check their input. */
export const Value = {
  number(value: number): NumberValue {
    if (typeof value !== 'number')
      throw new TypeError(`Value.number needs a number, got ${typeof value}`);
    return { type: 'number', value };
  },
  boolean(value: boolean): BooleanValue {
    if (typeof value !== 'boolean')
      throw new TypeError(`Value.boolean needs a boolean, got ${typeof value}`);
    return { type: 'boolean', value };
  },
  text(value: string): TextValue {
    if (typeof value !== 'string')
      throw new TypeError(`Value.text needs a string, got ${typeof value}`);
    return { type: 'text', value };
  },
  /** A Date, or an ISO-8601 string with Z or an offset (nanoseconds kept). */
  datetime(value: Date | string, nanos = 0): DatetimeValue {
    let date: Date;
    if (typeof value === 'string') {
      const parsed = parseInstant(value);
      if (!parsed) {
        throw new RangeError(
          `Value.datetime needs an ISO-8601 instant with Z or an offset, got ${JSON.stringify(value)}`,
        );
      }
      date = parsed.date;
      nanos = nanos || parsed.nanos;
    } else if (value instanceof Date) {
      date = new Date(value.getTime());
    } else {
      throw new TypeError(`Value.datetime needs a Date or an ISO-8601 string, got ${typeof value}`);
    }
    if (Number.isNaN(date.getTime())) throw new RangeError('Value.datetime got an invalid Date');
    if (!isInstantInRange(date)) {
      throw new RangeError(`Value.datetime: ${RANGE_TEXT}, got ${date.toISOString()}`);
    }
    checkNanos(nanos);
    return nanos ? { type: 'datetime', value: date, nanos } : { type: 'datetime', value: date };
  },
  enum(value: number): EnumValue {
    if (!Number.isInteger(value) || value < 0 || value > ENUM_MAX) {
      throw new RangeError(`Value.enum needs an integer in [0, ${ENUM_MAX}], got ${value}`);
    }
    return { type: 'enum', value };
  },
  error(kind: ErrorKind, message?: string, sourceMeasure?: number): ErrorValue {
    if (!ERROR_KINDS.includes(kind)) {
      throw new RangeError(
        `Value.error kind must be one of ${ERROR_KINDS.join(', ')}, got ${kind}`,
      );
    }
    if (kind === 'Custom' && typeof message !== 'string') {
      throw new TypeError('Value.error: a Custom error needs a message');
    }
    const error: CellError = { kind };
    if (message !== undefined) error.message = message;
    if (sourceMeasure !== undefined) error.sourceMeasure = sourceMeasure;
    return { type: 'error', error };
  },
} as const;

/** The declared type of a value; undefined for an error, which has none. */
export function typeOf(value: Value): ValueType | undefined {
  return value.type === 'error' ? undefined : value.type;
}

export function isValueType(x: unknown): x is ValueType {
  return typeof x === 'string' && (VALUE_TYPES as readonly string[]).includes(x);
}

export const isNumber = (v: Value): v is NumberValue => v.type === 'number';
export const isBoolean = (v: Value): v is BooleanValue => v.type === 'boolean';
export const isText = (v: Value): v is TextValue => v.type === 'text';
export const isDatetime = (v: Value): v is DatetimeValue => v.type === 'datetime';
export const isEnum = (v: Value): v is EnumValue => v.type === 'enum';
export const isError = (v: Value): v is ErrorValue => v.type === 'error';

/**
 * Whether `x` is a well-formed Value of `type` (or any well-formed Value when
 * type is omitted). Used to check what runners return.
 */
export function isValueOf(x: unknown, type?: ValueType): x is Value {
  if (typeof x !== 'object' || x === null) return false;
  const v = x as { type?: unknown; value?: unknown; nanos?: unknown; error?: unknown };
  if (type !== undefined && v.type !== type) return false;
  switch (v.type) {
    case 'number':
      return typeof v.value === 'number';
    case 'boolean':
      return typeof v.value === 'boolean';
    case 'text':
      return typeof v.value === 'string';
    case 'datetime':
      return (
        v.value instanceof Date &&
        isInstantInRange(v.value) &&
        (v.nanos === undefined ||
          (Number.isInteger(v.nanos) && (v.nanos as number) >= 0 && (v.nanos as number) <= 999_999))
      );
    case 'enum':
      return (
        Number.isInteger(v.value) && (v.value as number) >= 0 && (v.value as number) <= ENUM_MAX
      );
    case 'error':
      return type === undefined && typeof v.error === 'object' && v.error !== null;
    default:
      return false;
  }
}

const PRIMITIVE_OF: Partial<Record<ValueType, string>> = {
  number: 'number',
  boolean: 'boolean',
  text: 'string',
};

/**
 * A cheap check for the types whose value is a JS primitive (number, boolean,
 * text); false means "look closer with isValueOf", not "invalid".
 */
export function isPlainValueOf(x: unknown, type: ValueType): x is Value {
  const primitive = PRIMITIVE_OF[type];
  return (
    primitive !== undefined &&
    typeof x === 'object' &&
    x !== null &&
    (x as { type?: unknown }).type === type &&
    typeof (x as { value?: unknown }).value === primitive
  );
}

/**
 * Equality as a cell sees it: NaN equals NaN, -0 differs from 0, datetimes
 * compare by instant and nanos.
 */
export function sameValue(a: Value, b: Value): boolean {
  if (a.type !== b.type) return false;
  switch (a.type) {
    case 'datetime': {
      const other = b as DatetimeValue;
      return a.value.getTime() === other.value.getTime() && (a.nanos ?? 0) === (other.nanos ?? 0);
    }
    case 'error': {
      const e = (b as ErrorValue).error;
      return (
        a.error.kind === e.kind &&
        a.error.message === e.message &&
        a.error.sourceMeasure === e.sourceMeasure
      );
    }
    default:
      return Object.is(a.value, (b as typeof a).value);
  }
}

/** A short human description of a value, for error messages. */
export function describeValue(value: Value): string {
  switch (value.type) {
    case 'text':
      return `text ${JSON.stringify(value.value.length > 40 ? `${value.value.slice(0, 40)}…` : value.value)}`;
    case 'datetime':
      return `datetime ${formatInstant(value.value, value.nanos)}`;
    case 'error':
      return `error ${value.error.kind}`;
    default:
      return `${value.type} ${String(value.value)}`;
  }
}

/** A few characters of any JS value, never throwing (for describing malformed input). */
function glimpse(x: unknown): string {
  switch (typeof x) {
    case 'string':
      return JSON.stringify(x.length > 20 ? `${x.slice(0, 20)}…` : x);
    case 'bigint':
      return `${x}n`;
    case 'symbol':
      return 'a symbol';
    case 'function':
      return 'a function';
    case 'object':
      if (x === null) return 'null';
      if (x instanceof Date) return Number.isNaN(x.getTime()) ? 'Invalid Date' : x.toISOString();
      return Array.isArray(x) ? '[…]' : '{…}';
    default:
      return String(x);
  }
}

/**
 * What is wrong with something given where a Value of `type` was expected,
 * in a few words and never throwing (getters that throw, revoked Proxies,
 * BigInts, cycles, megabytes of text): `text "2"`, `an invalid Date`,
 * `datetime +010000-01-01T00:00:00.000Z (outside …)`, `enum 4294967296
 * (an integer in [0, 4294967295])`, `a malformed value ({type: "number", value: 1n})`.
 */
export function describeMismatch(x: unknown, type: ValueType): string {
  try {
    if (isValueOf(x)) return describeValue(x);
    if (typeof x !== 'object' || x === null) return `${glimpse(x)}, not a Value`;
    const v = x as { type?: unknown; value?: unknown; nanos?: unknown };
    if (v.type === type) {
      const value = v.value;
      if (type === 'datetime') {
        if (!(value instanceof Date))
          return `a datetime whose value is ${glimpse(value)}, not a Date`;
        if (Number.isNaN(value.getTime())) return 'an invalid Date';
        if (!isInstantInRange(value)) return `datetime ${value.toISOString()} (${RANGE_TEXT})`;
        return `datetime nanos ${glimpse(v.nanos)} (an integer in [0, 999999] below the millisecond)`;
      }
      if (type === 'enum' && typeof value === 'number') {
        return `enum ${value} (an integer in [0, ${ENUM_MAX}])`;
      }
      return `a ${type} whose value is ${glimpse(value)}`;
    }
    const keys = Object.keys(x);
    const shown = keys
      .slice(0, 4)
      .map((key) => `${key}: ${glimpse((x as Record<string, unknown>)[key])}`);
    if (keys.length > 4) shown.push('…');
    return `a malformed value ({${shown.join(', ')}})`;
  } catch (error) {
    const why = error instanceof Error ? `${error.name}: ${error.message}` : 'it threw';
    return `a value that cannot be read (${why.length > 200 ? `${why.slice(0, 200)}…` : why})`;
  }
}
