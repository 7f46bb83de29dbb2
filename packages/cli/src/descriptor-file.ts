/**
 * Reading a descriptor file: our JSON, the engine's serde JSON, an array of
 * either, the engine's map of name → descriptor, or a whole engine model file
 * whose `external_fns` holds that map. `-` reads it from standard input.
 */
import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import {
  type ExternalFn,
  InvalidDescriptorError,
  listedNames,
  parseExternalFn,
  shownName,
} from '@improv/extfn-core';
import { badInput, usage } from './cli-error.js';
import { type CliIo, releaseStdin } from './io.js';
import { controlCharacterFix, describeJsonError, lineAndColumn } from './json-error.js';
import { duplicateKey } from './json-keys.js';
import { KNOWN_LANGUAGE_IDS } from './runners.js';
import { decodeEscaped, EscapingDecoder, reencodeFix, utf8Problem } from './utf8.js';

const DESCRIPTOR_KEYS = [
  'name',
  'language',
  'body',
  'argTypes',
  'arg_types',
  'returnType',
  'return_type',
];

const FORMAT_HINT =
  'a descriptor is {"name", "language", "body", "argTypes": [...], "returnType", "pure"} ' +
  '(or the engine form with arg_types/return_type); types are number, boolean, text, datetime, enum';

/** Why a file could not be opened, in words; ENOENT means something else to a reader than to a writer. */
export function fileErrorReason(error: unknown, enoentText: string): string {
  const code = (error as { code?: string }).code;
  if (code === 'ENOENT') return enoentText;
  if (code === 'EISDIR') return 'it is a directory';
  if (code === 'EACCES') return 'permission denied';
  return (error as Error).message;
}

/** A file's text; a byte that is not UTF-8 comes escaped (see utf8.ts), for the reader to report. */
export async function readTextFile(path: string, cwd: string, what: string): Promise<string> {
  try {
    return decodeEscaped(await readFile(resolve(cwd, path)));
  } catch (error) {
    const why = fileErrorReason(error, 'no such file');
    throw badInput(`cannot read ${what} ${path}: ${why}`, `check the path (relative to ${cwd})`);
  }
}

/** All of standard input as text (a descriptor is small). */
export async function readStdinText(io: CliIo, what: string): Promise<string> {
  if (!io.stdin) throw usage(`this environment has no standard input to read the ${what} from`);
  const input = io.stdin();
  // Ctrl-C while stdin is still open: stop reading (the command then says it was interrupted).
  const release = () => releaseStdin(input);
  if (io.signal?.aborted) release();
  io.signal?.addEventListener('abort', release, { once: true });
  const decoder = new EscapingDecoder();
  let text = '';
  try {
    for await (const chunk of input) {
      text += typeof chunk === 'string' ? chunk : decoder.decode(chunk);
    }
  } finally {
    io.signal?.removeEventListener('abort', release);
  }
  return text + decoder.end();
}

/** "expected string, received undefined" says less than "missing". */
function friendlier(message: string): string {
  const missing = /^Invalid input: expected (\w+), received undefined$/.exec(message);
  return missing ? `missing (expected ${missing[1]})` : message;
}

function parseOne(input: unknown, file: string, where: string): ExternalFn {
  try {
    return parseExternalFn(input);
  } catch (error) {
    if (!(error instanceof InvalidDescriptorError)) throw error;
    const name =
      typeof (input as { name?: unknown })?.name === 'string'
        ? ` "${shownName((input as { name: string }).name)}"`
        : '';
    const lines = error.issues
      .map((i) => `  ${i.path || '(descriptor)'}: ${friendlier(i.message)}`)
      .join('\n');
    throw badInput(`${file}${where}: invalid descriptor${name}:\n${lines}`, FORMAT_HINT);
  }
}

/** A descriptor in a file before it is checked: where it is, and the name it goes by. */
interface Candidate {
  readonly where: string;
  readonly name: string;
  readonly input: unknown;
}

const isObject = (x: unknown): x is Record<string, unknown> =>
  typeof x === 'object' && x !== null && !Array.isArray(x);

/**
 * The descriptors of a file, unchecked. Told apart by shape: an object with
 * descriptor fields is one descriptor (even when a field is missing, so the
 * error names that field), an array is a list, an object with an
 * `external_fns` object is an engine model, any other object is a map.
 */
function candidates(text: string, file: string): Candidate[] {
  let json: unknown;
  // Editors on Windows save UTF-8 with a byte-order mark; JSON.parse refuses it.
  const body = text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
  const notUtf8 = utf8Problem(body);
  if (notUtf8) throw badInput(`${file}: ${notUtf8}`, reencodeFix(file));
  try {
    json = JSON.parse(body);
  } catch (error) {
    throw badInput(
      `${file} is not valid JSON: ${describeJsonError(error, body)}`,
      controlCharacterFix(error, body) ?? FORMAT_HINT,
    );
  }
  const twice = duplicateKey(body, json);
  if (twice) {
    const { line, column } = lineAndColumn(body, twice.index);
    throw badInput(
      `${file}: line ${line}, column ${column}: the key ${JSON.stringify(twice.key)} is written twice in one object`,
      'write each key once: JSON would keep only the last value, and the other would be ignored without a word',
    );
  }
  const nameOf = (input: unknown, fallback: string): string =>
    isObject(input) && typeof input.name === 'string' ? input.name : fallback;
  let found: Candidate[];
  if (Array.isArray(json)) {
    found = json.map((input, i) => ({ where: ` [${i}]`, name: nameOf(input, `#${i}`), input }));
  } else if (isObject(json) && DESCRIPTOR_KEYS.some((k) => k in json)) {
    found = [{ where: '', name: nameOf(json, '(unnamed)'), input: json }];
  } else if (isObject(json)) {
    const engineModel = isObject(json.external_fns);
    const map = engineModel ? (json.external_fns as Record<string, unknown>) : json;
    const prefix = engineModel ? '.external_fns' : '';
    found = Object.entries(map).map(([key, input]) => {
      const where = ` ${prefix}["${key}"]`;
      // The map is keyed by function name (the engine writes it so): a key that says
      // otherwise leaves --name to guess which of the two is meant.
      const name = nameOf(input, key);
      if (name !== key) {
        throw badInput(
          `${file}${where}: the key ${JSON.stringify(key)} and the function's name ${JSON.stringify(name)} differ`,
          `make them the same: a map of functions is keyed by the function's name (rename the key to ${JSON.stringify(name)}, or the name to ${JSON.stringify(key)})`,
        );
      }
      return { where, name, input };
    });
  } else {
    throw badInput(
      `${file} holds ${json === null ? 'null' : typeof json}, not a descriptor`,
      FORMAT_HINT,
    );
  }
  if (found.length === 0) throw badInput(`${file} holds no descriptors`, FORMAT_HINT);
  rejectRepeatedNames(found, file);
  return found;
}

/** Two functions of one name: --name could pick only the first, and the engine would keep one of them. */
function rejectRepeatedNames(found: readonly Candidate[], file: string): void {
  const places = new Map<string, string[]>();
  for (const c of found) places.set(c.name, [...(places.get(c.name) ?? []), c.where.trim()]);
  for (const [name, where] of places) {
    if (where.length < 2) continue;
    throw badInput(
      `${file}: ${where.length} functions are named ${JSON.stringify(name)} (${where.join(', ')})`,
      'give each function its own name: --name picks a function by name',
    );
  }
}

function checkLanguage(fn: ExternalFn, file: string, known: readonly string[]): ExternalFn {
  if (!known.includes(fn.language)) {
    throw badInput(
      `${file}: function ${fn.name} has language "${fn.language}", which improv-extfn does not know`,
      `use one of ${known.join(', ')}, or load a runner package for it with --runner PACKAGE`,
    );
  }
  return fn;
}

/** All descriptors in a file's text, checked. */
export function parseDescriptorText(
  text: string,
  file: string,
  knownLanguages: readonly string[] = KNOWN_LANGUAGE_IDS,
): ExternalFn[] {
  return candidates(text, file).map((c) =>
    checkLanguage(parseOne(c.input, file, c.where), file, knownLanguages),
  );
}

/**
 * The one function a command works on: the file's only one, or the one
 * `--name` picks (only that one is checked, so a model file with functions
 * for other runners still works). `file` may be `-` for standard input.
 */
export async function readDescriptor(
  file: string,
  io: CliIo,
  name: string | undefined,
  knownLanguages: readonly string[] = KNOWN_LANGUAGE_IDS,
): Promise<ExternalFn> {
  const label = file === '-' ? 'standard input' : file;
  const text =
    file === '-'
      ? await readStdinText(io, 'descriptor')
      : await readTextFile(file, io.cwd, 'descriptor file');
  const found = candidates(text, label);
  const names = listedNames(
    found.map((c) => c.name),
    20,
  );
  let picked: Candidate | undefined;
  if (name !== undefined) {
    picked = found.find((c) => c.name === name);
    if (!picked)
      throw usage(
        `${label} has no function named ${shownName(name)}`,
        `use --name with one of: ${names}`,
      );
  } else if (found.length > 1) {
    throw usage(`${label} holds ${found.length} functions`, `pick one with --name: ${names}`);
  } else {
    picked = found[0]!;
  }
  return checkLanguage(parseOne(picked.input, label, picked.where), label, knownLanguages);
}
