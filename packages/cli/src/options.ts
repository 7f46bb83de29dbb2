/** Command-line parsing shared by the commands, on top of `node:util` parseArgs. */
import { isUtf8 } from 'node:buffer';
import { type ParseArgsConfig, parseArgs } from 'node:util';
import { badInput, usage } from './cli-error.js';
import { lookupTable } from './lookup-table.js';
import { decodeEscaped } from './utf8.js';

type Options = NonNullable<ParseArgsConfig['options']>;

/** `-3.5`, `-1e3`, `-Infinity`, `-inf`: arguments, not flags. */
const NEGATIVE_NUMBER = /^-(?:\d|\.\d|inf(?:inity)?$)/i;
const PLACEHOLDER = '\u0000negative:';

export interface CommandLine {
  values: Record<string, string | boolean | string[] | undefined>;
  positionals: string[];
  /**
   * Positionals (by index) whose bytes are not UTF-8, each with what is wrong
   * (`"caf\xE9": the byte 0xE9 is not UTF-8`): for the command to report,
   * naming what the argument is (see rejectNotUtf8).
   */
  notUtf8: Map<number, string>;
}

/** The fix for an argument that is not UTF-8. */
export const ARGUMENT_UTF8_FIX =
  'pass arguments as UTF-8: the terminal, locale or program that ran improv-extfn sent another encoding; use a UTF-8 locale (LANG=C.UTF-8), or convert the text with iconv -f WINDOWS-1252 -t UTF-8 (name the encoding it is in)';

/** An argument's bytes as text for a message, the bytes that are not UTF-8 shown as \xE9. */
function showBytes(bytes: Uint8Array): string {
  const text = decodeEscaped(bytes).replace(
    /[\uDC80-\uDCFF]/g,
    (c) => `\\x${(c.charCodeAt(0) - 0xdc00).toString(16).toUpperCase()}`,
  );
  return `"${text.length > 60 ? `${text.slice(0, 60)}…` : text}"`;
}

/** What is wrong with an argument that is not UTF-8: `"caf\xE9": the byte 0xE9 is not UTF-8`. */
function notUtf8Reason(bytes: Uint8Array): string {
  const text = decodeEscaped(bytes);
  const bad = [...new Set(text.match(/[\uDC80-\uDCFF]/g) ?? [])]
    .slice(0, 3)
    .map((c) => `0x${(c.charCodeAt(0) - 0xdc00).toString(16).toUpperCase()}`);
  return `${showBytes(bytes)} is not UTF-8 (the byte${bad.length > 1 ? 's' : ''} ${bad.join(', ')})`;
}

/**
 * Throws for the first positional that is not UTF-8; `describe` names what it
 * is (`the rows file name`), or gives undefined to leave it for later.
 */
export function rejectNotUtf8(
  command: string,
  line: CommandLine,
  describe: (index: number) => string | undefined,
): void {
  for (const [index, reason] of [...line.notUtf8].sort((a, b) => a[0] - b[0])) {
    const what = describe(index);
    if (what !== undefined) throw badInput(`${command}: ${what}: ${reason}`, ARGUMENT_UTF8_FIX);
  }
}

/**
 * Checks the arguments' bytes (`raw`: the bytes of main's argv, or undefined
 * where the system does not tell them): a flag's value that is not UTF-8
 * throws naming the flag; a positional is returned for the command to name.
 */
function checkUtf8(
  command: string,
  argv: readonly string[],
  raw: readonly Uint8Array[] | undefined,
  takesValue: ReadonlySet<string>,
): Map<number, string> {
  const notUtf8 = new Map<number, string>();
  if (!raw || raw.length < argv.length) return notUtf8;
  const bytes = raw.slice(raw.length - argv.length);
  let afterDoubleDash = false;
  let positional = 0;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const previous = i > 0 && !afterDoubleDash ? argv[i - 1]! : undefined;
    const isValue = previous !== undefined && takesValue.has(previous);
    const isPositional =
      !isValue && (afterDoubleDash || !arg.startsWith('-') || NEGATIVE_NUMBER.test(arg));
    if (!isValue && !afterDoubleDash && arg === '--') {
      afterDoubleDash = true;
      continue;
    }
    if (isPositional) positional++;
    if (isUtf8(bytes[i]!)) continue;
    const reason = notUtf8Reason(bytes[i]!);
    if (isPositional) notUtf8.set(positional - 1, reason);
    else if (isValue)
      throw badInput(`${command}: the value of ${previous}: ${reason}`, ARGUMENT_UTF8_FIX);
    else {
      const flag = arg.includes('=') ? arg.slice(0, arg.indexOf('=')) : arg;
      throw badInput(
        isUtf8(Buffer.from(flag))
          ? `${command}: the value of ${flag}: ${reason}`
          : `${command}: the flag ${reason}`,
        ARGUMENT_UTF8_FIX,
      );
    }
  }
  return notUtf8;
}

/**
 * Parses a command's flags and positionals. Negative numbers among the
 * positionals stay positionals (parseArgs alone would call `-5` an unknown flag).
 * A flag that takes a value may be given once, unless it is `multiple`
 * (`--runner`): `--timeout 5 --timeout 10` is a usage error, never the last
 * one silently. `raw` is the bytes of main's argv (CliIo.argvBytes): a flag's
 * value that is not UTF-8 is an error here; positionals are in `notUtf8`.
 */
export function parseCommandLine<O extends Options>(
  command: string,
  argv: readonly string[],
  options: O,
  raw?: readonly Uint8Array[],
): CommandLine {
  const takesValue = new Set<string>();
  for (const [name, option] of Object.entries(options)) {
    if (option.type === 'string') {
      takesValue.add(`--${name}`);
      if (option.short) takesValue.add(`-${option.short}`);
    }
  }
  const notUtf8 = checkUtf8(command, argv, raw, takesValue);
  const protectedArgv: string[] = [];
  let afterDoubleDash = false;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') afterDoubleDash = true;
    const flag = i > 0 && !afterDoubleDash ? argv[i - 1]! : undefined;
    if (flag !== undefined && takesValue.has(flag)) {
      // `--timeout -1`: the flag's value (parseArgs alone would call it ambiguous),
      // checked by the flag's own parser, which says what is wrong with it.
      if (NEGATIVE_NUMBER.test(arg)) {
        protectedArgv[protectedArgv.length - 1] = flag.startsWith('--')
          ? `${flag}=${arg}`
          : `${flag}${arg}`;
      } else protectedArgv.push(arg);
      continue;
    }
    protectedArgv.push(!afterDoubleDash && NEGATIVE_NUMBER.test(arg) ? PLACEHOLDER + arg : arg);
  }
  let parsed: {
    values: Record<string, unknown>;
    positionals: string[];
    tokens: { kind: string; name?: string; rawName?: string; value?: string | undefined }[];
  };
  try {
    parsed = parseArgs({
      args: protectedArgv,
      options,
      allowPositionals: true,
      strict: true,
      tokens: true,
    });
  } catch (error) {
    const ambiguous = /^Option '([^']+)' argument is ambiguous/.exec((error as Error).message);
    if (ambiguous) {
      // `--name -x`: a value that starts with "-" reads as a flag of its own.
      const flag = ambiguous[1]!;
      const value = argv[argv.indexOf(flag) + 1] ?? '-…';
      const long = flag.startsWith('--')
        ? flag
        : `--${Object.keys(options).find((k) => options[k]?.short === flag.slice(1)) ?? flag}`;
      throw usage(
        `${command}: ${flag} needs a value, and ${JSON.stringify(value)} after it reads as a flag`,
        `write ${long}=${value} if that is the value; see improv-extfn ${command} --help`,
      );
    }
    const message = (error as Error).message.replace(/\.?\s*To specify a positional.*$/s, '');
    const unknown = (error as { code?: string }).code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION';
    throw usage(
      `${command}: ${message}`,
      unknown
        ? `see improv-extfn ${command} --help; an argument that starts with "-" goes after "--"`
        : `see improv-extfn ${command} --help`,
    );
  }
  // A flag that takes one value, given more than once: which one was meant is not ours to guess.
  const given = new Map<string, string[]>();
  for (const token of parsed.tokens) {
    if (token.kind !== 'option' || token.value === undefined || token.name === undefined) continue;
    if (options[token.name]?.multiple) continue;
    const seen = given.get(token.name) ?? [];
    seen.push(`${token.rawName} ${JSON.stringify(token.value)}`);
    given.set(token.name, seen);
  }
  for (const [name, seen] of given) {
    if (seen.length < 2) continue;
    const repeatable = Object.keys(options).filter((k) => options[k]?.multiple);
    throw usage(
      `${command}: --${name} is given ${seen.length === 2 ? 'twice' : `${seen.length} times`} (${seen.join(', ')}); it takes one value`,
      `give --${name} once${repeatable.length ? ` (${repeatable.map((k) => `--${k}`).join(', ')} may be repeated)` : ''}; see improv-extfn ${command} --help`,
    );
  }
  return {
    values: parsed.values as Record<string, string | boolean | string[] | undefined>,
    positionals: parsed.positionals.map((p) =>
      p.startsWith(PLACEHOLDER) ? p.slice(PLACEHOLDER.length) : p,
    ),
    notUtf8,
  };
}

/**
 * The longest --timeout, 2^31 - 1 ms (about 24.9 days): the longest deadline
 * a Registry takes, and the longest delay a Node timer holds (core's backstop,
 * which waits for twice the deadline, arms its timer again past that).
 */
export const MAX_TIMEOUT_MS = 2_147_483_647;

const DURATION_FIX =
  'write seconds with s (2s) or milliseconds with ms (500ms); a number without a unit is milliseconds, from 1000 (2000)';

/**
 * A number without a unit below this is refused: `--timeout 10` is far more
 * likely meant as 10 s than 10 ms, and which was meant is not ours to guess.
 */
const SMALLEST_BARE_MS = 1000;

/**
 * `--timeout 2s`, `--timeout 500ms`, `--timeout 2000` → milliseconds, from 1 ms
 * to about 24.9 days. A number without a unit is milliseconds and must be at
 * least 1000: below that it is a usage error asking for the unit.
 */
export function parseTimeout(text: string | undefined, flag = '--timeout'): number | undefined {
  if (text === undefined) return undefined;
  const match = /^([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(ms|s)?$/i.exec(text.trim());
  const ms = match ? Number(match[1]) * (match[2]?.toLowerCase() === 's' ? 1000 : 1) : Number.NaN;
  const quoted = `${flag} ${JSON.stringify(text)}`;
  if (Number.isNaN(ms)) throw usage(`${quoted} is not a duration`, DURATION_FIX);
  if (!(ms > 0)) throw usage(`${quoted}: the time limit must be more than 0`, DURATION_FIX);
  if (match![2] === undefined && ms < SMALLEST_BARE_MS) {
    const number = match![1]!;
    throw usage(
      `${quoted} has no unit, so it would be ${number} ms; did you mean ${number}s?`,
      `write ${flag} ${number}s for seconds, or ${flag} ${number}ms to mean milliseconds (a number without a unit must be at least ${SMALLEST_BARE_MS})`,
    );
  }
  const rounded = Math.round(ms);
  if (rounded < 1) throw usage(`${quoted} is under 1 ms, the shortest limit`, DURATION_FIX);
  if (rounded > MAX_TIMEOUT_MS) {
    throw usage(
      `${quoted} is more than the longest limit, ${MAX_TIMEOUT_MS} ms (about 24.9 days)`,
      `write at most ${flag} ${Math.floor(MAX_TIMEOUT_MS / 1000)}s, e.g. ${flag} 30s`,
    );
  }
  return rounded;
}

/** `--columns a,b,c` → ["a", "b", "c"]. */
export function parseColumns(text: string | undefined): string[] | undefined {
  if (text === undefined) return undefined;
  const columns = text.split(',').map((c) => c.trim());
  if (columns.some((c) => c === '')) {
    throw usage(
      `--columns ${JSON.stringify(text)} has an empty name`,
      'write names or numbers separated by commas: --columns rate,years',
    );
  }
  return columns;
}

/** Whether `--json` was asked for, known even when the rest fails to parse (a `--json` after `--` is an argument). */
export function wantsJson(argv: readonly string[]): boolean {
  const end = argv.indexOf('--');
  return (end === -1 ? argv : argv.slice(0, end)).includes('--json');
}

const SIZE_UNITS = lookupTable<number>({
  '': 1,
  b: 1,
  k: 1024,
  kib: 1024,
  m: 1024 ** 2,
  mib: 1024 ** 2,
  g: 1024 ** 3,
  gib: 1024 ** 3,
});
/** KB, MB, GB, by power: 1MB is 10^6 bytes to some programs, 2^20 to others; which is meant is not ours to guess. */
const AMBIGUOUS_UNITS = lookupTable<number>({ kb: 1, mb: 2, gb: 3 });

/** The smallest and largest memory limit --memory takes (Wasm functions: at most WASM_MAX_MEMORY_BYTES). */
export const MIN_MEMORY_BYTES = 1024 ** 2;
export const MAX_MEMORY_BYTES = 1024 * 1024 ** 3;
/** A WebAssembly memory is 32-bit: 65 536 pages of 64 KiB. */
export const WASM_MAX_MEMORY_BYTES = 4 * 1024 ** 3;

const sizeFix = (flag: string): string =>
  `write a number with a unit, B, K/KiB, M/MiB or G/GiB (1K = 1024 bytes), from 1MiB to 1024GiB: ${flag} 512MiB, ${flag} 2GiB`;

/** `--memory 512MiB`, `2GiB`, `1g`, or bytes → bytes (binary units: a memory limit is counted in pages). */
export function parseSize(text: string | undefined, flag: string): number | undefined {
  if (text === undefined) return undefined;
  const quoted = `${flag} ${JSON.stringify(text)}`;
  const match = /^([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*([a-z]*)$/i.exec(text.trim());
  if (!match) throw usage(`${quoted} is not a size`, sizeFix(flag));
  const unitText = match[2]!;
  const power = AMBIGUOUS_UNITS[unitText.toLowerCase()];
  if (power !== undefined) {
    const letter = unitText[0]!.toUpperCase();
    throw usage(
      `${quoted}: "${unitText}" is 10^${3 * power} bytes to some programs and 2^${10 * power} to others`,
      `sizes here are binary: write ${flag} ${match[1]}${letter}iB (or ${match[1]}${letter}), where 1${letter}iB = ${1024 ** power} bytes`,
    );
  }
  const unit = SIZE_UNITS[unitText.toLowerCase()];
  if (unit === undefined) throw usage(`${quoted}: unknown unit "${unitText}"`, sizeFix(flag));
  const bytes = Math.floor(Number(match[1]) * unit);
  if (!(bytes >= MIN_MEMORY_BYTES)) {
    throw usage(`${quoted} is less than 1MiB, the smallest limit`, sizeFix(flag));
  }
  if (bytes > MAX_MEMORY_BYTES) {
    throw usage(`${quoted} is more than 1024GiB, the largest limit`, sizeFix(flag));
  }
  return bytes;
}
