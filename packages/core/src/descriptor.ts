/**
 * The external-function descriptor, in our camelCase form and in the Rust
 * engine's serde form (snake_case fields, capitalised type and language names).
 */
import { z } from 'zod';
import { describeThrown } from './errors.js';
import { type Json, valueTypeFromEngine, valueTypeToEngine } from './json.js';
import {
  cut,
  MAX_ARGUMENTS,
  MAX_BODY_LENGTH,
  MAX_LANGUAGE_LENGTH,
  MAX_NAME_LENGTH,
  nameSpelling,
  quoted,
} from './limits.js';
import { VALUE_TYPES, type ValueType } from './value.js';

/** Languages this project ships runners for; third-party runners add their own ids. */
export const KNOWN_LANGUAGES = ['python', 'r', 'julia', 'pure', 'wasm'] as const;

export interface ExternalFn {
  /** The name cells call it by. */
  name: string;
  /** The runner's language id, lower case: `python`, `r`, `julia`, `pure`, `wasm`, or a third party's. */
  language: string;
  /** The function body, passed to the interpreter byte for byte. */
  body: string;
  /** Declared argument types, in order; the arity is their count. */
  argTypes: ValueType[];
  returnType: ValueType;
  /** Same arguments, same result, no effects: results may be cached. Never affects protection. */
  pure: boolean;
  /**
   * The body takes whole columns (one per argument) and returns one column
   * of the same length; per-cell semantics stay those of a per-row call.
   * Our form only: the engine's serde form has no such field (always per-row).
   */
  vectorized?: boolean;
}

const valueType = z.string().transform((name, ctx) => {
  const type = valueTypeFromEngine(name);
  if (!type) {
    ctx.addIssue({
      code: 'custom',
      message: `expected one of ${VALUE_TYPES.join(', ')} (or the engine's Number, Boolean, Text, DateTime, Enum), got ${quoted(name)}`,
    });
    return z.NEVER;
  }
  return type;
});

/**
 * A length limit, checked before anything else of the field (`abort`: a
 * 1 MB name is not trimmed and scanned, 10^6 argTypes are not read one by
 * one): the message names the limit, what came and what to do.
 */
function atMost(max: number, what: string, fix: string) {
  return {
    abort: true,
    error: (issue: { input?: unknown }) => {
      const got = (issue.input as { length?: unknown } | undefined)?.length;
      return `must have at most ${max} ${what}, got ${String(got)}; ${fix}`;
    },
  };
}

const language = z
  .string()
  .max(
    MAX_LANGUAGE_LENGTH,
    atMost(MAX_LANGUAGE_LENGTH, 'characters', 'use the language id its runner declares'),
  )
  .min(1, 'must not be empty')
  .transform((s) => s.toLowerCase())
  .refine(
    (s) => /^[a-z][a-z0-9_-]*$/.test(s),
    'must be a language id such as python, r, julia, pure or wasm',
  );

const name = z
  .string()
  .max(
    MAX_NAME_LENGTH,
    atMost(MAX_NAME_LENGTH, 'characters', 'register the function under a shorter name'),
  )
  .min(1, 'must not be empty')
  .refine(
    (s) => s === '' || nameSpelling(s), // an empty one has its own issue (min)
    'must have no surrounding spaces, control characters (U+0000–U+001F, U+007F–U+009F), line or paragraph separators, or unpaired surrogates',
  );

const body = z
  .string()
  .max(
    MAX_BODY_LENGTH,
    atMost(
      MAX_BODY_LENGTH,
      'characters (64 Mi)',
      'keep data out of the body: pass it as arguments, or have the body read it',
    ),
  );

const argTypes = z
  .array(valueType)
  .max(
    MAX_ARGUMENTS,
    atMost(
      MAX_ARGUMENTS,
      'entries (a function takes at most 1000 arguments, as WebAssembly does)',
      'pass the values in fewer arguments (a text holding a list, say)',
    ),
  );

/** Our form. */
export const externalFnSchema = z.strictObject({
  name,
  language,
  body,
  argTypes,
  returnType: valueType,
  pure: z.boolean().default(false),
  vectorized: z.boolean().optional(),
});

/** The engine's serde form. Unknown fields are ignored, as serde does by default. */
export const engineExternalFnSchema = z
  .object({
    name,
    language,
    body,
    arg_types: argTypes,
    return_type: valueType,
    pure: z.boolean().default(false),
  })
  .transform(({ arg_types, return_type, ...rest }) => ({
    ...rest,
    argTypes: arg_types,
    returnType: return_type,
  }));

/** Most issues a message lists (all are in `issues`): 10^3 bad argTypes make one short message. */
const ISSUES_SHOWN = 20;

/**
 * Longest issue message kept in `issues` (a message shows at most 300 of
 * each): an unknown key of 1 MB, or 10^6 of them, make no 1 MB issue.
 */
const ISSUE_MESSAGE_MAX = 1_000;

/** A descriptor that failed to parse; `issues` name each field and what was wrong. */
export class InvalidDescriptorError extends TypeError {
  readonly issues: { path: string; message: string }[];
  constructor(label: string, issues: { path: string; message: string }[]) {
    const shown = issues.slice(0, ISSUES_SHOWN).map((i) => {
      const message = i.message.length > 300 ? `${i.message.slice(0, 300)}…` : i.message;
      return `  ${i.path || '(descriptor)'}: ${message}`;
    });
    if (issues.length > ISSUES_SHOWN) {
      shown.push(`  … and ${issues.length - ISSUES_SHOWN} more (see .issues)`);
    }
    super(`invalid external function descriptor${label}:\n${shown.join('\n')}`);
    this.name = 'InvalidDescriptorError';
    this.issues = issues;
  }
}

function formatPath(path: readonly PropertyKey[]): string {
  return path.reduce<string>(
    (out, key) =>
      typeof key === 'number' ? `${out}[${key}]` : out ? `${out}.${String(key)}` : String(key),
    '',
  );
}

/**
 * Reads a descriptor in our form or the engine's (told apart by
 * `arg_types`/`return_type`). Throws InvalidDescriptorError naming every bad field.
 */
export function parseExternalFn(input: unknown): ExternalFn {
  const record =
    typeof input === 'object' && input !== null ? (input as Record<string, unknown>) : undefined;
  let result: ReturnType<typeof externalFnSchema.safeParse>;
  try {
    const isEngine = record !== undefined && ('arg_types' in record || 'return_type' in record);
    result = (isEngine ? engineExternalFnSchema : externalFnSchema).safeParse(input);
  } catch (error) {
    // a getter that throws, a Proxy's trap: the descriptor as a whole cannot be read
    throw new InvalidDescriptorError(labelOf(record), [
      { path: '', message: `cannot be read: ${describeThrown(error)}` },
    ]);
  }
  if (result.success) return result.data;
  throw new InvalidDescriptorError(
    labelOf(record),
    result.error.issues.map((issue) => ({
      path: formatPath(issue.path),
      message: cut(issue.message, ISSUE_MESSAGE_MAX),
    })),
  );
}

/** ` "name"` for the message, when the descriptor has a readable string name (cut to 100, with its length). */
function labelOf(record: Record<string, unknown> | undefined): string {
  try {
    const name = record?.name;
    if (typeof name !== 'string') return '';
    return ` ${quoted(name, 100)}`;
  } catch {
    return '';
  }
}

/**
 * Reads a file's worth of descriptors: one descriptor, an array of them, or
 * the engine's map of name → descriptor.
 */
export function parseExternalFns(input: unknown): ExternalFn[] {
  if (Array.isArray(input)) return input.map(parseExternalFn);
  const looksLikeOne = (x: object) =>
    ['name', 'language', 'body', 'argTypes', 'arg_types', 'returnType', 'return_type'].some(
      (k) => k in x,
    );
  if (typeof input === 'object' && input !== null && !looksLikeOne(input)) {
    return Object.values(input).map(parseExternalFn);
  }
  return [parseExternalFn(input)];
}

/** The engine's serde form of a descriptor. */
export function externalFnToEngineJson(fn: ExternalFn): Json {
  const engineLanguage: Record<string, string> = {
    python: 'Python',
    r: 'R',
    julia: 'Julia',
    pure: 'Pure',
    wasm: 'Wasm',
  };
  return {
    name: fn.name,
    language: engineLanguage[fn.language] ?? fn.language,
    body: fn.body,
    arg_types: fn.argTypes.map(valueTypeToEngine),
    return_type: valueTypeToEngine(fn.returnType),
    pure: fn.pure,
  };
}

export const arity = (fn: ExternalFn): number => fn.argTypes.length;
