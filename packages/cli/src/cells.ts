/**
 * Text and JSON cells ↔ Values, by declared type. Strict on purpose: a cell
 * that is nearly a number ("5%", "1,000") is an error that says how to write
 * it, never a guess.
 */
import {
  DATETIME_MAX,
  DATETIME_MIN,
  decodeValue,
  ENUM_MAX,
  type ExternalFn,
  formatInstant,
  isInstantInRange,
  numberToJson,
  parseInstant,
  Value as V,
  type Value,
  type ValueType,
  valueFromJson,
} from '@improv/extfn-core';
import { lookupTable } from './lookup-table.js';

export type CellResult = { ok: true; value: Value } | { ok: false; problem: string; fix: string };

const DECIMAL = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?$/i;
const SPECIAL = lookupTable<number>({
  nan: Number.NaN,
  infinity: Number.POSITIVE_INFINITY,
  '+infinity': Number.POSITIVE_INFINITY,
  '-infinity': Number.NEGATIVE_INFINITY,
  inf: Number.POSITIVE_INFINITY,
  '+inf': Number.POSITIVE_INFINITY,
  '-inf': Number.NEGATIVE_INFINITY,
});
const DATE_ONLY = /^\d{4}-\d{2}-\d{2}$/;
/** A date or instant in ISO-8601's shape, its fields captured, whether or not they exist. */
const ISO_SHAPE =
  /^(\d{4})-(\d{2})-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2}))?(?:\.\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})?)?$/i;
const MONTHS = [
  'January',
  'February',
  'March',
  'April',
  'May',
  'June',
  'July',
  'August',
  'September',
  'October',
  'November',
  'December',
];

/** Why text in ISO-8601's shape names no moment (February 30th, month 13, hour 24), or undefined. */
function missingField(text: string): string | undefined {
  const match = ISO_SHAPE.exec(text);
  if (!match) return undefined;
  const [year, month, day, hour = 0, minute = 0, second = 0] = match
    .slice(1)
    .map((field) => (field === undefined ? undefined : Number(field)));
  if (month! < 1 || month! > 12) return `there is no month ${month}`;
  const leap = year! % 4 === 0 && (year! % 100 !== 0 || year! % 400 === 0);
  const days = month === 2 ? (leap ? 29 : 28) : [4, 6, 9, 11].includes(month!) ? 30 : 31;
  if (day! < 1 || day! > days) return `${MONTHS[month! - 1]} ${match[1]} has no day ${day}`;
  if (hour > 23) return `there is no hour ${hour} (hours go from 00 to 23)`;
  if (minute > 59) return `there is no minute ${minute} (minutes go from 00 to 59)`;
  if (second > 59) return `there is no second ${second} (seconds go from 00 to 59)`;
  return undefined;
}

export const HOW_TO_WRITE: Record<ValueType, string> = {
  number: 'write a decimal number such as 42, -3.5, 1e-3, NaN, Infinity or -Infinity',
  boolean: 'write true or false',
  text: 'any text is accepted',
  datetime:
    'write an ISO-8601 instant with Z or an offset, such as 2025-03-31T12:00:00Z, or a date such as 2025-03-31 (midnight UTC)',
  enum: `write the member's index, an integer from 0 to ${ENUM_MAX}`,
};

const quote = (text: string): string =>
  JSON.stringify(text.length > 40 ? `${text.slice(0, 40)}…` : text);

/** Reads one cell of text as the declared type. */
export function parseCell(text: string, type: ValueType): CellResult {
  const fail = (problem: string): CellResult => ({ ok: false, problem, fix: HOW_TO_WRITE[type] });
  switch (type) {
    case 'text':
      return { ok: true, value: V.text(text) };
    case 'number': {
      const t = text.trim();
      const special = SPECIAL[t.toLowerCase()];
      if (special !== undefined) return { ok: true, value: V.number(special) };
      if (!DECIMAL.test(t)) return fail(`${quote(text)} is not a number`);
      const number = Number(t);
      // 1e999 would read as Infinity: a value the cell did not write (as in JSON lines).
      if (!Number.isFinite(number)) {
        return {
          ok: false,
          problem: `${quote(text)} is beyond the range of a 64-bit float (it would read as ${number > 0 ? 'Infinity' : '-Infinity'})`,
          fix: `${HOW_TO_WRITE.number}; write Infinity or -Infinity for an infinite value`,
        };
      }
      return { ok: true, value: V.number(number) };
    }
    case 'boolean': {
      const t = text.trim().toLowerCase();
      if (t === 'true') return { ok: true, value: V.boolean(true) };
      if (t === 'false') return { ok: true, value: V.boolean(false) };
      return fail(`${quote(text)} is not a boolean`);
    }
    case 'datetime': {
      const t = text.trim();
      const parsed = parseInstant(DATE_ONLY.test(t) ? `${t}T00:00:00Z` : t);
      if (!parsed) {
        const missing = missingField(t);
        const naive = /^\d{4}-\d{2}-\d{2}T[\d:.]+$/.test(t);
        return fail(
          missing
            ? `${quote(text)}: ${missing}`
            : naive
              ? `${quote(text)} has no time zone (add Z for UTC, or an offset such as +02:00)`
              : `${quote(text)} is not an ISO-8601 instant`,
        );
      }
      // Year 0 or 10000 (0001-01-01T00:00:00+01:00 is in year 0): no runner can hold it.
      if (!isInstantInRange(parsed.date)) {
        return fail(
          `${quote(text)} is outside the datetimes a function can take, ${DATETIME_MIN} to ${DATETIME_MAX}`,
        );
      }
      return { ok: true, value: V.datetime(parsed.date, parsed.nanos) };
    }
    case 'enum': {
      const t = text.trim();
      if (!/^\d+$/.test(t) || Number(t) > ENUM_MAX)
        return fail(`${quote(text)} is not an enum index`);
      return { ok: true, value: V.enum(Number(t)) };
    }
  }
}

function describeJson(json: unknown): string {
  if (json === null) return 'null';
  if (Array.isArray(json)) return 'an array';
  if (typeof json === 'string') return `the string ${quote(json)}`;
  if (typeof json === 'number') return `the number ${json}`;
  return `${typeof json === 'object' ? 'an object' : `the ${typeof json}`}`;
}

/**
 * Reads one JSON cell as the declared type: the wire form (`5`, `"NaN"`,
 * `"2025-03-31T00:00:00Z"`, `true`, `3`), or a tagged value
 * (`{"type":"number","value":5}`, the engine's `{"Number":5}`).
 */
export function jsonCell(json: unknown, type: ValueType): CellResult {
  if (typeof json === 'object' && json !== null && !Array.isArray(json)) {
    try {
      const value = decodeValue(json);
      if (value.type !== type) {
        return {
          ok: false,
          problem: `a ${value.type} value where ${type} is declared`,
          fix: HOW_TO_WRITE[type],
        };
      }
      return { ok: true, value };
    } catch (error) {
      return { ok: false, problem: (error as Error).message, fix: HOW_TO_WRITE[type] };
    }
  }
  if (type === 'datetime' && typeof json === 'string') return parseCell(json, 'datetime');
  try {
    return { ok: true, value: valueFromJson(json, type) };
  } catch {
    return {
      ok: false,
      problem: `${describeJson(json)} is not a ${type}`,
      fix: HOW_TO_WRITE[type],
    };
  }
}

/** A value as one cell of text: what `parseCell` reads back. */
export function formatCell(value: Value): string {
  switch (value.type) {
    case 'number': {
      const wire = numberToJson(value.value);
      return typeof wire === 'number' ? String(wire) : wire;
    }
    case 'datetime':
      return formatInstant(value.value, value.nanos);
    case 'error':
      return `#${value.error.kind}${value.error.message ? `: ${value.error.message}` : ''}`;
    default:
      return String(value.value);
  }
}

/** "argument 2 (number)", for messages. */
export const argumentLabel = (fn: ExternalFn, index: number): string =>
  `argument ${index + 1} (${fn.argTypes[index]})`;

/** "hypot(number, number) -> number", for messages and help. */
export const signature = (fn: ExternalFn): string =>
  `${fn.name}(${fn.argTypes.join(', ')}) -> ${fn.returnType}`;
