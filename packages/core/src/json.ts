/**
 * Marshalling: values as JSON on the wire to a runner (untagged, the declared
 * type says how to read them), as tagged records for files, and as the Rust
 * engine's serde JSON.
 */
import { ExtFnError } from './errors.js';
import {
  type CellError,
  DATETIME_MAX,
  DATETIME_MIN,
  ENUM_MAX,
  ERROR_KINDS,
  type ErrorKind,
  formatInstant,
  isInstantInRange,
  parseInstant,
  Value as V,
  type Value,
  type ValueType,
} from './value.js';

/** What JSON can carry. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** The wire form of a number: JSON numbers, with the values JSON cannot hold as strings. */
export type WireNumber = number | 'NaN' | 'Infinity' | '-Infinity' | '-0';

/**
 * A value as a runner receives it, untagged: number (non-finite and -0 as
 * strings), boolean, text, datetime as an ISO-8601 string in UTC with up to
 * nine fractional digits, enum as an integer. An error becomes
 * `{ error: { kind, message?, sourceMeasure? } }`.
 */
export function valueToJson(value: Value): Json {
  switch (value.type) {
    case 'number':
      return numberToJson(value.value);
    case 'datetime':
      return formatInstant(value.value, value.nanos);
    case 'error':
      return { error: cellErrorToJson(value.error) };
    default:
      return value.value;
  }
}

export function numberToJson(n: number): WireNumber {
  if (Number.isNaN(n)) return 'NaN';
  if (n === Number.POSITIVE_INFINITY) return 'Infinity';
  if (n === Number.NEGATIVE_INFINITY) return '-Infinity';
  if (Object.is(n, -0)) return '-0';
  return n;
}

const SPECIAL_NUMBERS: Record<string, number> = {
  NaN: Number.NaN,
  Infinity: Number.POSITIVE_INFINITY,
  '+Infinity': Number.POSITIVE_INFINITY,
  '-Infinity': Number.NEGATIVE_INFINITY,
  inf: Number.POSITIVE_INFINITY,
  '-inf': Number.NEGATIVE_INFINITY,
  nan: Number.NaN,
  '-0': -0,
};

function jsonTypeName(json: unknown): string {
  if (json === null) return 'null';
  if (Array.isArray(json)) return 'array';
  if (typeof json === 'string')
    return `string ${JSON.stringify(json.length > 40 ? `${json.slice(0, 40)}…` : json)}`;
  if (typeof json === 'number') return `number ${json}`;
  return typeof json;
}

/**
 * Reads a runner's result against the declared type. A mismatch is a Runtime
 * error naming the expected and received type.
 */
export function valueFromJson(json: unknown, expectedType: ValueType, functionName = '?'): Value {
  const mismatch = (why?: string) =>
    ExtFnError.runtime(
      functionName,
      `result expected ${expectedType}, got ${why ?? jsonTypeName(json)}`,
      { expected: expectedType, got: jsonTypeName(json) },
    );
  switch (expectedType) {
    case 'number':
      if (typeof json === 'number') return V.number(json);
      // Own keys only: "constructor" or "__proto__" from a file are not numbers.
      if (typeof json === 'string' && Object.hasOwn(SPECIAL_NUMBERS, json))
        return V.number(SPECIAL_NUMBERS[json]!);
      throw mismatch();
    case 'boolean':
      if (typeof json === 'boolean') return V.boolean(json);
      throw mismatch();
    case 'text':
      if (typeof json === 'string') return V.text(json);
      throw mismatch();
    case 'datetime': {
      if (typeof json !== 'string') throw mismatch();
      const parsed = parseInstant(json);
      if (!parsed)
        throw mismatch(`${jsonTypeName(json)} (not an ISO-8601 instant with Z or an offset)`);
      if (!isInstantInRange(parsed.date))
        throw mismatch(`${jsonTypeName(json)} (outside ${DATETIME_MIN} .. ${DATETIME_MAX})`);
      return V.datetime(parsed.date, parsed.nanos);
    }
    case 'enum':
      if (typeof json === 'number' && Number.isInteger(json) && json >= 0 && json <= ENUM_MAX) {
        return V.enum(json);
      }
      throw mismatch(
        typeof json === 'number'
          ? `${jsonTypeName(json)} (enum is an integer in [0, ${ENUM_MAX}])`
          : undefined,
      );
  }
}

function cellErrorToJson(error: CellError): Json {
  const out: { [key: string]: Json } = { kind: error.kind };
  if (error.message !== undefined) out.message = error.message;
  if (error.sourceMeasure !== undefined) out.sourceMeasure = error.sourceMeasure;
  return out;
}

/** A value as a self-describing JSON record: `{ "type": "number", "value": "NaN" }`. */
export function encodeValue(value: Value): Json {
  if (value.type === 'error') return { type: 'error', error: cellErrorToJson(value.error) };
  return { type: value.type, value: valueToJson(value) };
}

/**
 * Reads a value written by `encodeValue` or by the Rust engine (serde's
 * externally tagged form, e.g. `{ "Number": 5 }`). Throws a TypeError that
 * says what was wrong.
 */
export function decodeValue(json: unknown): Value {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    throw new TypeError(`a value must be an object, got ${jsonTypeName(json)}`);
  }
  const record = json as Record<string, unknown>;
  if ('type' in record) {
    const type = record.type;
    if (type === 'error') return V.error(...readCellError(record.error));
    if (
      typeof type !== 'string' ||
      !['number', 'boolean', 'text', 'datetime', 'enum'].includes(type)
    ) {
      throw new TypeError(`value.type must be a value type or "error", got ${jsonTypeName(type)}`);
    }
    try {
      return valueFromJson(record.value, type as ValueType, 'decodeValue');
    } catch (error) {
      throw new TypeError(
        `value.value: ${(error as Error).message.replace(/^function decodeValue: /, '')}`,
      );
    }
  }
  return valueFromEngineJson(record);
}

// ---- the engine's serde JSON ----------------------------------------------

const ENGINE_TYPES: Record<string, ValueType> = {
  Number: 'number',
  Boolean: 'boolean',
  Text: 'text',
  DateTime: 'datetime',
  Enum: 'enum',
};
const TO_ENGINE_TYPE: Record<ValueType, string> = {
  number: 'Number',
  boolean: 'Boolean',
  text: 'Text',
  datetime: 'DateTime',
  enum: 'Enum',
};

/** `"Number"` → `'number'`; also accepts our own lower-case names. */
export function valueTypeFromEngine(name: unknown): ValueType | undefined {
  if (typeof name !== 'string') return undefined;
  if (Object.hasOwn(ENGINE_TYPES, name)) return ENGINE_TYPES[name]; // not "constructor", "__proto__", …
  return Object.values(ENGINE_TYPES).includes(name as ValueType) ? (name as ValueType) : undefined;
}
export function valueTypeToEngine(type: ValueType): string {
  return TO_ENGINE_TYPE[type];
}

function readCellError(json: unknown): [ErrorKind, string | undefined, number | undefined] {
  if (typeof json !== 'object' || json === null) {
    throw new TypeError(`an error value needs an object, got ${jsonTypeName(json)}`);
  }
  const e = json as Record<string, unknown>;
  let kind: unknown = e.kind;
  let message = typeof e.message === 'string' ? e.message : undefined;
  if (typeof kind === 'object' && kind !== null && 'Custom' in kind) {
    message = String((kind as { Custom: unknown }).Custom);
    kind = 'Custom';
  }
  if (typeof kind !== 'string' || !(ERROR_KINDS as readonly string[]).includes(kind)) {
    throw new TypeError(
      `error.kind must be one of ${ERROR_KINDS.join(', ')}, got ${JSON.stringify(kind)}`,
    );
  }
  const source = e.sourceMeasure ?? e.source_measure;
  if (
    source !== undefined &&
    source !== null &&
    (typeof source !== 'number' || !Number.isInteger(source))
  ) {
    throw new TypeError(
      `error.source_measure must be an integer or null, got ${jsonTypeName(source)}`,
    );
  }
  return [kind as ErrorKind, message, (source ?? undefined) as number | undefined];
}

/** Reads the engine's `{ "Number": 5.0 }`, `{ "Error": { "kind": …, "source_measure": … } }`, … */
export function valueFromEngineJson(json: unknown): Value {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    throw new TypeError(
      `an engine value must be an object like {"Number": 5}, got ${jsonTypeName(json)}`,
    );
  }
  const keys = Object.keys(json);
  if (keys.length !== 1) {
    throw new TypeError(
      `an engine value must have exactly one key (Number, Boolean, Text, DateTime, Enum, Error), got ${keys.length}`,
    );
  }
  const tag = keys[0]!;
  const payload = (json as Record<string, unknown>)[tag];
  if (tag === 'Error') return V.error(...readCellError(payload));
  const type = Object.hasOwn(ENGINE_TYPES, tag) ? ENGINE_TYPES[tag] : undefined;
  if (!type) {
    throw new TypeError(
      `unknown engine value tag ${JSON.stringify(tag)} (expected Number, Boolean, Text, DateTime, Enum or Error)`,
    );
  }
  try {
    return valueFromJson(payload, type, 'engine');
  } catch (error) {
    throw new TypeError(`${tag}: ${(error as Error).message.replace(/^function engine: /, '')}`);
  }
}

/**
 * Writes the engine's serde form. serde_json cannot hold NaN or ±Infinity:
 * those are written as our wire strings ("NaN", …), which `valueFromEngineJson`
 * reads back but the Rust engine would refuse — say so where it matters.
 */
export function valueToEngineJson(value: Value): Json {
  switch (value.type) {
    case 'error': {
      const { kind, message, sourceMeasure } = value.error;
      return {
        Error: {
          kind: kind === 'Custom' ? { Custom: message ?? '' } : kind,
          source_measure: sourceMeasure ?? null,
        },
      };
    }
    case 'number':
      // -0 stays a number here (serde writes -0.0); only non-finite values need strings.
      return { Number: Number.isFinite(value.value) ? value.value : numberToJson(value.value) };
    default:
      return { [TO_ENGINE_TYPE[value.type]]: valueToJson(value) };
  }
}
