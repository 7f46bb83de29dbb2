/**
 * Reading a descriptor file: our JSON, the engine's serde JSON, an array of
 * either, or the engine's map of name → descriptor.
 */
import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { type ExternalFn, InvalidDescriptorError, parseExternalFn } from '@improv/extfn-core';
import { badInput, usage } from './cli-error.js';
import { KNOWN_LANGUAGE_IDS } from './runners.js';

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

export async function readTextFile(path: string, cwd: string, what: string): Promise<string> {
  try {
    return await readFile(resolve(cwd, path), 'utf8');
  } catch (error) {
    const why = fileErrorReason(error, 'no such file');
    throw badInput(`cannot read ${what} ${path}: ${why}`, `check the path (relative to ${cwd})`);
  }
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
        ? ` "${(input as { name: string }).name}"`
        : '';
    const lines = error.issues
      .map((i) => `  ${i.path || '(descriptor)'}: ${friendlier(i.message)}`)
      .join('\n');
    throw badInput(`${file}${where}: invalid descriptor${name}:\n${lines}`, FORMAT_HINT);
  }
}

/**
 * All descriptors in a file. Told apart by shape: an object with descriptor
 * fields is one descriptor (even when a field is missing, so the error names
 * that field), an array is a list, any other object is the engine's map.
 */
export function parseDescriptorText(text: string, file: string): ExternalFn[] {
  let json: unknown;
  try {
    // Editors on Windows save UTF-8 with a byte-order mark; JSON.parse refuses it.
    json = JSON.parse(text.charCodeAt(0) === 0xfeff ? text.slice(1) : text);
  } catch (error) {
    throw badInput(`${file} is not valid JSON: ${(error as Error).message}`, FORMAT_HINT);
  }
  let fns: ExternalFn[];
  if (Array.isArray(json)) {
    fns = json.map((item, i) => parseOne(item, file, ` [${i}]`));
  } else if (typeof json === 'object' && json !== null && DESCRIPTOR_KEYS.some((k) => k in json)) {
    fns = [parseOne(json, file, '')];
  } else if (typeof json === 'object' && json !== null) {
    fns = Object.entries(json).map(([key, item]) => parseOne(item, file, ` ["${key}"]`));
  } else {
    throw badInput(
      `${file} holds ${json === null ? 'null' : typeof json}, not a descriptor`,
      FORMAT_HINT,
    );
  }
  if (fns.length === 0) throw badInput(`${file} holds no descriptors`, FORMAT_HINT);
  for (const fn of fns) {
    if (!KNOWN_LANGUAGE_IDS.includes(fn.language)) {
      throw badInput(
        `${file}: function ${fn.name} has language "${fn.language}", which improv-extfn does not know`,
        `use one of ${KNOWN_LANGUAGE_IDS.join(', ')}`,
      );
    }
  }
  return fns;
}

/** The one function a command works on: the file's only one, or the one `--name` picks. */
export async function readDescriptor(
  file: string,
  cwd: string,
  name?: string,
): Promise<ExternalFn> {
  const fns = parseDescriptorText(await readTextFile(file, cwd, 'descriptor file'), file);
  if (name !== undefined) {
    const fn = fns.find((f) => f.name === name);
    if (!fn) {
      throw usage(
        `${file} has no function named ${name}`,
        `use --name with one of: ${fns.map((f) => f.name).join(', ')}`,
      );
    }
    return fn;
  }
  if (fns.length > 1) {
    throw usage(
      `${file} holds ${fns.length} functions`,
      `pick one with --name: ${fns.map((f) => f.name).join(', ')}`,
    );
  }
  return fns[0]!;
}
