/**
 * The external-function descriptor, in our camelCase form and in the Rust
 * engine's serde form (snake_case fields, capitalised type and language names).
 */
import { type ExternalFn, readExternalFn } from './descriptor-reader.js';
import { type Json, valueTypeToEngine } from './json.js';
import { cut, quoted } from './limits.js';

export type { ExternalFn } from './descriptor-reader.js';

/** Languages this project ships runners for; third-party runners add their own ids. */
export const KNOWN_LANGUAGES = ['python', 'r', 'julia', 'pure', 'wasm'] as const;

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
  const read = readExternalFn(input);
  if (read.ok) return read.fn;
  const record =
    typeof input === 'object' && input !== null ? (input as Record<string, unknown>) : undefined;
  throw new InvalidDescriptorError(
    labelOf(record),
    read.issues.map((issue) => ({
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
    language:
      (Object.hasOwn(engineLanguage, fn.language) && engineLanguage[fn.language]) || fn.language,
    body: fn.body,
    arg_types: fn.argTypes.map(valueTypeToEngine),
    return_type: valueTypeToEngine(fn.returnType),
    pure: fn.pure,
  };
}

export const arity = (fn: ExternalFn): number => fn.argTypes.length;
