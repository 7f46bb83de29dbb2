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
    const isValue = i > 0 && takesValue.has(argv[i - 1]!);
    protectedArgv.push(
      !afterDoubleDash && !isValue && NEGATIVE_NUMBER.test(arg) ? PLACEHOLDER + arg : arg,
    );
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

/** `--timeout 2000`, `--timeout 2s`, `--timeout 500ms` → milliseconds. */
export function parseTimeout(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const match = /^(\d+(?:\.\d+)?)(ms|s)?$/.exec(text.trim());
  const ms = match ? Number(match[1]) * (match[2] === 's' ? 1000 : 1) : Number.NaN;
  if (!(ms >= 1) || !Number.isFinite(ms)) {
    throw usage(
      `--timeout ${JSON.stringify(text)} is not a duration`,
      'write milliseconds (2000), or seconds with s (2s)',
    );
  }
  return Math.round(ms);
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

/** `--memory 512MiB`, `2GiB`, `1g`, or bytes → bytes (binary units: a memory limit is counted in pages). */
export function parseSize(text: string | undefined, flag: string): number | undefined {
  if (text === undefined) return undefined;
  const match = /^(\d+(?:\.\d+)?)\s*([a-z]*)$/i.exec(text.trim());
  const unit = match ? SIZE_UNITS[match[2]!.toLowerCase()] : undefined;
  const bytes = match && unit !== undefined ? Math.floor(Number(match[1]) * unit) : Number.NaN;
  if (!(bytes >= 1024 * 1024) || !Number.isSafeInteger(bytes)) {
    throw usage(
      `${flag} ${JSON.stringify(text)} is not a size of at least 1MiB`,
      `write a size with a unit: ${flag} 512MiB, ${flag} 2GiB`,
    );
  }
  return bytes;
}
