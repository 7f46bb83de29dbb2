/**
 * Reads a descriptor field by field, in our form or the engine's, and says
 * what is wrong with each field: the one implementation behind
 * `parseExternalFn` and the zod schemas of `@improv/extfn-core/schemas`.
 * Written by hand rather than as zod schemas so that loading core does not
 * load zod (about a hundred ES modules: 80 ms of a new process's start on a
 * 2-core VM). Its messages are zod's where zod's were ours ("Invalid input:
 * expected string, received undefined", `Unrecognized key: "x"`): the CLI
 * and users' scripts read them.
 */
import { describeThrown } from './errors.js';
import { valueTypeFromEngine } from './json.js';
import {
  MAX_ARGUMENTS,
  MAX_BODY_LENGTH,
  MAX_LANGUAGE_LENGTH,
  MAX_NAME_LENGTH,
  nameSpelling,
  quoted,
} from './limits.js';
import { VALUE_TYPES, type ValueType } from './value.js';

/** The descriptor as core keeps it (descriptor.ts re-exports it with the rest of its API). */
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

/** One thing wrong, where: `['argTypes', 1]`; `[]` for the descriptor as a whole. */
export interface DescriptorIssue {
  path: (string | number)[];
  message: string;
}

export type DescriptorRead =
  | { ok: true; fn: ExternalFn }
  | { ok: false; issues: DescriptorIssue[] };

/** Our form's fields: any other key is an error in it (the engine's form ignores them, as serde does). */
const OUR_FIELDS = new Set([
  'name',
  'language',
  'body',
  'argTypes',
  'returnType',
  'pure',
  'vectorized',
]);

const LANGUAGE_ID = /^[a-z][a-z0-9_-]*$/;

/** What came where a type was expected, in zod's words: `null`, `array`, `NaN`, `Date`, `number`. */
function received(x: unknown): string {
  if (x === null) return 'null';
  if (Array.isArray(x)) return 'array';
  if (typeof x === 'number')
    return Number.isNaN(x) ? 'NaN' : Number.isFinite(x) ? 'number' : 'Infinity';
  if (typeof x !== 'object') return typeof x;
  const made = (Object.getPrototypeOf(x) as { constructor?: { name?: unknown } } | null)
    ?.constructor?.name;
  return typeof made === 'string' && made !== '' && made !== 'Object' ? made : 'object';
}

const wrongType = (expected: string, x: unknown) =>
  `Invalid input: expected ${expected}, received ${received(x)}`;

/** A length limit, said with the limit, what came and what to do; nothing else of the field is read. */
const tooLong = (max: number, what: string, got: number, fix: string) =>
  `must have at most ${max} ${what}, got ${got}; ${fix}`;

/**
 * Reads `input` as a descriptor in `form` (by default the one it is written
 * in: the engine's when it has `arg_types` or `return_type`); never throws
 * (a getter or Proxy trap that throws is an issue).
 */
export function readExternalFn(input: unknown, form?: 'ours' | 'engine'): DescriptorRead {
  try {
    const engine =
      form === 'engine' ||
      (form === undefined &&
        typeof input === 'object' &&
        input !== null &&
        ('arg_types' in input || 'return_type' in input));
    return read(input, engine ? 'engine' : 'ours');
  } catch (error) {
    // a getter that throws, a Proxy's trap: the descriptor as a whole cannot be read
    return {
      ok: false,
      issues: [{ path: [], message: `cannot be read: ${describeThrown(error)}` }],
    };
  }
}

function read(input: unknown, form: 'ours' | 'engine'): DescriptorRead {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    return { ok: false, issues: [{ path: [], message: wrongType('object', input) }] };
  }
  const record = input as Record<string, unknown>;
  const issues: DescriptorIssue[] = [];
  const say = (path: (string | number)[], message: string) => void issues.push({ path, message });
  const engine = form === 'engine';
  const [argTypesKey, returnTypeKey] = engine
    ? ['arg_types', 'return_type']
    : ['argTypes', 'returnType'];

  const name = text(
    record.name,
    'name',
    MAX_NAME_LENGTH,
    'register the function under a shorter name',
    say,
  );
  if (name === '') say(['name'], 'must not be empty');
  else if (name !== undefined && !nameSpelling(name)) {
    say(
      ['name'],
      'must have no surrounding spaces, control characters (U+0000–U+001F, U+007F–U+009F), line or paragraph separators, or unpaired surrogates',
    );
  }
  const written = text(
    record.language,
    'language',
    MAX_LANGUAGE_LENGTH,
    'use the language id its runner declares',
    say,
  );
  const language = written?.toLowerCase();
  if (language === '') say(['language'], 'must not be empty');
  else if (language !== undefined && !LANGUAGE_ID.test(language)) {
    say(['language'], 'must be a language id such as python, r, julia, pure or wasm');
  }
  const body = text(
    record.body,
    'body',
    MAX_BODY_LENGTH,
    'keep data out of the body: pass it as arguments, or have the body read it',
    say,
    'characters (64 Mi)',
  );
  const argTypes = typeList(record[argTypesKey], argTypesKey, say);
  const returnType = valueType(record[returnTypeKey], [returnTypeKey], say);
  const pure = flag(record.pure, 'pure', say) ?? false;
  const vectorized = engine ? undefined : flag(record.vectorized, 'vectorized', say);
  if (!engine) {
    const unknown = Object.keys(record).filter((key) => !OUR_FIELDS.has(key));
    if (unknown.length > 0) {
      const keys = unknown.map((key) => quoted(key, key.length)).join(', ');
      say([], `Unrecognized key${unknown.length > 1 ? 's' : ''}: ${keys}`);
    }
  }
  if (issues.length > 0) return { ok: false, issues };
  const fn: ExternalFn = {
    name: name!,
    language: language!,
    body: body!,
    argTypes: argTypes!,
    returnType: returnType!,
    pure,
  };
  if (vectorized !== undefined) fn.vectorized = vectorized;
  return { ok: true, fn };
}

type Say = (path: (string | number)[], message: string) => void;

/** A string field of at most `max` characters, or undefined (said why). */
function text(
  x: unknown,
  field: string,
  max: number,
  fix: string,
  say: Say,
  what = 'characters',
): string | undefined {
  if (typeof x !== 'string') return void say([field], wrongType('string', x));
  if (x.length > max) return void say([field], tooLong(max, what, x.length, fix));
  return x;
}

/** A boolean field; undefined when absent (or wrong: said why). */
function flag(x: unknown, field: string, say: Say): boolean | undefined {
  if (x === undefined || typeof x === 'boolean') return x;
  say([field], wrongType('boolean', x));
  return undefined;
}

/** Ours (`number`) or the engine's (`Number`); undefined (said why) for anything else. */
function valueType(x: unknown, path: (string | number)[], say: Say): ValueType | undefined {
  if (typeof x !== 'string') return void say(path, wrongType('string', x));
  const type = valueTypeFromEngine(x);
  if (type) return type;
  say(
    path,
    `expected one of ${VALUE_TYPES.join(', ')} (or the engine's Number, Boolean, Text, DateTime, Enum), got ${quoted(x)}`,
  );
  return undefined;
}

/** The argument types: at most MAX_ARGUMENTS, each a value type (10^6 entries are not read one by one). */
function typeList(x: unknown, field: string, say: Say): ValueType[] | undefined {
  if (!Array.isArray(x)) return void say([field], wrongType('array', x));
  if (x.length > MAX_ARGUMENTS) {
    return void say(
      [field],
      tooLong(
        MAX_ARGUMENTS,
        `entries (a function takes at most ${MAX_ARGUMENTS} arguments, as WebAssembly does)`,
        x.length,
        'pass the values in fewer arguments (a text holding a list, say)',
      ),
    );
  }
  const types: ValueType[] = [];
  for (let i = 0; i < x.length; i++) {
    const type = valueType(x[i], [field, i], say);
    if (type) types.push(type);
  }
  return types.length === x.length ? types : undefined;
}
