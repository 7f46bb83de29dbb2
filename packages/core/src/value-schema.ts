/**
 * zod schemas for values in JSON: our self-describing record form
 * (`{ "type": "number", "value": "NaN" }`) and the engine's serde form
 * (`{ "Number": 5 }`). Both parse to a `Value`; use them where a value comes
 * from a file or a request and you want zod's error paths.
 */
import { z } from 'zod';
import { decodeValue, valueFromEngineJson } from './json.js';
import {
  DATETIME_MAX,
  DATETIME_MIN,
  ENUM_MAX,
  ERROR_KINDS,
  isInstantInRange,
  parseInstant,
  type Value,
} from './value.js';

// z.literal, not z.enum: an enum's declared type has a `[-Infinity]` key, which
// TypeScript refuses in a published .d.ts (TS1170) for consumers without skipLibCheck.
const wireNumber = z.union([z.number(), z.literal(['NaN', 'Infinity', '-Infinity', '-0'])]);
const instant = z
  .string()
  .refine((s) => parseInstant(s) !== undefined, 'must be an ISO-8601 instant with Z or an offset')
  .refine((s) => {
    const parsed = parseInstant(s);
    return parsed === undefined || isInstantInRange(parsed.date);
  }, `must be in [${DATETIME_MIN}, ${DATETIME_MAX}]`);
const enumIndex = z.number().int().min(0).max(ENUM_MAX);
const measure = z.number().int().nullish();

const cellError = z.strictObject({
  kind: z.enum(ERROR_KINDS),
  message: z.string().optional(),
  sourceMeasure: measure,
});

/** `{ type, value }` records as `encodeValue` writes them. */
export const encodedValueSchema: z.ZodType<Value> = z
  .discriminatedUnion('type', [
    z.strictObject({ type: z.literal('number'), value: wireNumber }),
    z.strictObject({ type: z.literal('boolean'), value: z.boolean() }),
    z.strictObject({ type: z.literal('text'), value: z.string() }),
    z.strictObject({ type: z.literal('datetime'), value: instant }),
    z.strictObject({ type: z.literal('enum'), value: enumIndex }),
    z.strictObject({ type: z.literal('error'), error: cellError }),
  ])
  .transform((json): Value => decodeValue(json));

const engineErrorKind = z.union([
  z.enum(ERROR_KINDS.filter((k) => k !== 'Custom') as [string, ...string[]]),
  z.strictObject({ Custom: z.string() }),
]);

/** The engine's externally tagged values, e.g. `{ "DateTime": "2025-03-31T23:59:59.123456789Z" }`. */
export const engineValueSchema: z.ZodType<Value> = z
  .union([
    z.strictObject({ Number: wireNumber }),
    z.strictObject({ Boolean: z.boolean() }),
    z.strictObject({ Text: z.string() }),
    z.strictObject({ DateTime: instant }),
    z.strictObject({ Enum: enumIndex }),
    z.strictObject({ Error: z.object({ kind: engineErrorKind, source_measure: measure }) }),
  ])
  .transform((json): Value => valueFromEngineJson(json));

/** Either form. */
export const valueSchema: z.ZodType<Value> = z.union([encodedValueSchema, engineValueSchema]);
