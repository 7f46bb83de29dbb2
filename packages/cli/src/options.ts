/** Command-line parsing shared by the commands, on top of `node:util` parseArgs. */
import { type ParseArgsConfig, parseArgs } from 'node:util';
import { usage } from './cli-error.js';

type Options = NonNullable<ParseArgsConfig['options']>;

/** `-3.5`, `-1e3`, `-Infinity`, `-inf`: arguments, not flags. */
const NEGATIVE_NUMBER = /^-(?:\d|\.\d|inf(?:inity)?$)/i;
const PLACEHOLDER = '\u0000negative:';

/**
 * Parses a command's flags and positionals. Negative numbers among the
 * positionals stay positionals (parseArgs alone would call `-5` an unknown flag).
 */
export function parseCommandLine<O extends Options>(
  command: string,
  argv: readonly string[],
  options: O,
): { values: Record<string, string | boolean | string[] | undefined>; positionals: string[] } {
  const takesValue = new Set<string>();
  for (const [name, option] of Object.entries(options)) {
    if (option.type === 'string') {
      takesValue.add(`--${name}`);
      if (option.short) takesValue.add(`-${option.short}`);
    }
  }
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
  try {
    const { values, positionals } = parseArgs({
      args: protectedArgv,
      options,
      allowPositionals: true,
      strict: true,
    });
    return {
      values: values as Record<string, string | boolean | string[] | undefined>,
      positionals: positionals.map((p) =>
        p.startsWith(PLACEHOLDER) ? p.slice(PLACEHOLDER.length) : p,
      ),
    };
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
}

/**
 * The longest --timeout, 2^31 - 1 ms (about 24.9 days): the longest deadline
 * a Registry takes, and the longest delay a Node timer holds (core's backstop,
 * which waits for twice the deadline, arms its timer again past that).
 */
export const MAX_TIMEOUT_MS = 2_147_483_647;

const DURATION_FIX = 'write milliseconds (2000), or seconds with s (2s)';

/** `--timeout 2000`, `--timeout 2s`, `--timeout 500ms` → milliseconds, from 1 ms to about 24.9 days. */
export function parseTimeout(text: string | undefined, flag = '--timeout'): number | undefined {
  if (text === undefined) return undefined;
  const match = /^([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(ms|s)?$/i.exec(text.trim());
  const ms = match ? Number(match[1]) * (match[2]?.toLowerCase() === 's' ? 1000 : 1) : Number.NaN;
  const quoted = `${flag} ${JSON.stringify(text)}`;
  if (Number.isNaN(ms)) throw usage(`${quoted} is not a duration`, DURATION_FIX);
  if (!(ms > 0)) throw usage(`${quoted}: the time limit must be more than 0`, DURATION_FIX);
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

const SIZE_UNITS: Record<string, number> = {
  '': 1,
  b: 1,
  k: 1024,
  kb: 1024,
  kib: 1024,
  m: 1024 ** 2,
  mb: 1024 ** 2,
  mib: 1024 ** 2,
  g: 1024 ** 3,
  gb: 1024 ** 3,
  gib: 1024 ** 3,
};

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
  const unit = SIZE_UNITS[match[2]!.toLowerCase()];
  if (unit === undefined) throw usage(`${quoted}: unknown unit "${match[2]}"`, sizeFix(flag));
  const bytes = Math.floor(Number(match[1]) * unit);
  if (!(bytes >= MIN_MEMORY_BYTES)) {
    throw usage(`${quoted} is less than 1MiB, the smallest limit`, sizeFix(flag));
  }
  if (bytes > MAX_MEMORY_BYTES) {
    throw usage(`${quoted} is more than 1024GiB, the largest limit`, sizeFix(flag));
  }
  return bytes;
}
