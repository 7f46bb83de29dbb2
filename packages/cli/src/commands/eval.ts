/** `improv-extfn eval FN.json [ARG ...]`: one call, arguments from the command line. */
import { type ExternalFn, encodeValue, type Value } from '@improv/extfn-core';
import { argumentLabel, formatCell, parseCell, signature } from '../cells.js';
import { badInput, usage } from '../cli-error.js';
import { readDescriptor } from '../descriptor-file.js';
import { examplePath } from '../examples.js';
import { EXIT_CODES_HELP, ExitCode } from '../exit-codes.js';
import { type CliIo, interruptedBy, interruptedExitCode } from '../io.js';
import { checkLibrariesFlag, parseLibraries } from '../libraries-flag.js';
import {
  ARGUMENT_UTF8_FIX,
  parseCommandLine,
  parseSize,
  parseTimeout,
  rejectNotUtf8,
  wantsJson,
} from '../options.js';
import { reportFailure } from '../report.js';
import { checkMemoryFlag, loadRunners, openRegistry } from '../session.js';

export const evalHelp = (
  cwd: string,
): string => `Usage: improv-extfn eval FN.json [ARG ...] [options]

Evaluates the function in FN.json once, on the arguments given, and prints the
result. Each ARG is read as its declared type:
  number    42, -3.5, 1e-3, NaN, Infinity, -Infinity
  boolean   true or false
  text      as written (quote it for the shell)
  datetime  ISO-8601 with Z or an offset (2025-03-31T12:00:00Z), or a date (midnight UTC)
  enum      the member's index: 0, 1, 2, ...
An argument that starts with "-" and is not a number goes after "--".
FN.json may be - to read the descriptor from standard input.

Options:
  -n, --name NAME     the function to use when FN.json holds several
      --timeout TIME  wall-clock limit for the call: 30s or 500ms (default 5s); a number
                      without a unit is milliseconds, from 1000
      --memory SIZE   memory limit of the call: 512MiB, 2GiB (default 1GiB; Wasm 16MiB)
      --libraries WHAT
                      what a Python or R body may import besides the standard library:
                      system (the interpreter's own packages; R's default), none,
                      venv:PATH (a Python virtual environment) or DIR[:DIR...]
                      (Python: the standard library only unless given)
      --runner PKG    load a third-party runner package (repeatable; see improv-extfn --help)
      --json          print {"ok":true,"result":{"type":...,"value":...}} or {"ok":false,"error":{...}}
  -h, --help          show this help

The sandbox policy comes from the environment (IMPROV_EXTFN_TRUSTED,
IMPROV_EXTFN_ALLOW_UNSANDBOXED), never from a flag.

Example:
  improv-extfn eval ${examplePath('distance.json', cwd)} 3 4
  5

${EXIT_CODES_HELP}
`;

const EXAMPLE_ARGUMENT: Record<string, string> = {
  number: '1.5',
  boolean: 'true',
  text: 'hello',
  datetime: '2025-01-01T00:00:00Z',
  enum: '0',
};

export function parseArguments(
  fn: ExternalFn,
  texts: readonly string[],
  file: string,
  notUtf8: ReadonlyMap<number, string> = new Map(),
): Value[] {
  if (texts.length !== fn.argTypes.length) {
    const example = fn.argTypes.map((t) => EXAMPLE_ARGUMENT[t]).join(' ');
    throw usage(
      `function ${fn.name} takes ${fn.argTypes.length} argument(s) (${fn.argTypes.join(', ') || 'none'}), got ${texts.length}`,
      `give one per argument, e.g. improv-extfn eval ${file} ${example}`.trimEnd(),
    );
  }
  return texts.map((text, i) => {
    const encoding = notUtf8.get(i);
    if (encoding !== undefined) {
      throw badInput(
        `function ${fn.name}, ${argumentLabel(fn, i)}: ${encoding}`,
        ARGUMENT_UTF8_FIX,
      );
    }
    const cell = parseCell(text, fn.argTypes[i]!);
    if (!cell.ok) {
      throw badInput(`function ${fn.name}, ${argumentLabel(fn, i)}: ${cell.problem}`, cell.fix);
    }
    return cell.value;
  });
}

export async function evalCommand(argv: readonly string[], io: CliIo): Promise<ExitCode> {
  const json = wantsJson(argv);
  try {
    const line = parseCommandLine(
      'eval',
      argv,
      {
        name: { type: 'string', short: 'n' },
        timeout: { type: 'string' },
        memory: { type: 'string' },
        libraries: { type: 'string' },
        runner: { type: 'string', multiple: true },
        json: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
      io.argvBytes,
    );
    const { values, positionals } = line;
    if (values.help) {
      io.stdout.write(evalHelp(io.cwd));
      return ExitCode.Ok;
    }
    const [file, ...texts] = positionals;
    if (file === undefined)
      throw usage(
        'eval needs a descriptor file',
        'improv-extfn eval FN.json [ARG ...]; see --help',
      );
    // The function's arguments are checked once the function is known, to name it.
    rejectNotUtf8('eval', line, (i) => (i === 0 ? 'the descriptor file name' : undefined));
    const timeoutMs = parseTimeout(values.timeout as string | undefined);
    const memoryBytes = parseSize(values.memory as string | undefined, '--memory');
    const libraries = parseLibraries(values.libraries as string | undefined, io.cwd);
    const runners = await loadRunners((values.runner as string[] | undefined) ?? [], io, {
      ...(memoryBytes !== undefined ? { memoryBytes } : {}),
      ...(libraries ? { libraries } : {}),
    });
    const fn = await readDescriptor(file, io, values.name as string | undefined, runners.languages);
    checkMemoryFlag(fn, runners, values.memory as string | undefined);
    checkLibrariesFlag(fn, runners);
    const args = parseArguments(
      fn,
      texts,
      file,
      new Map([...line.notUtf8].map(([i, reason]) => [i - 1, reason])),
    );
    const registry = await openRegistry(fn, io, runners, {
      ...(timeoutMs !== undefined ? { timeoutMs } : {}),
    });
    let result: Value;
    try {
      // One call: a fresh process that ends with it, so no worker is left to wind down.
      result = await registry.eval(fn.name, args, {
        mode: 'oneShot',
        ...(io.signal ? { signal: io.signal } : {}),
      });
    } finally {
      await registry.close();
    }
    if (json) {
      io.stdout.write(
        `${JSON.stringify({ ok: true, function: signature(fn), result: encodeValue(result) })}\n`,
      );
    } else {
      io.stdout.write(`${formatCell(result)}\n`);
    }
    return ExitCode.Ok;
  } catch (error) {
    if (io.signal?.aborted) return interrupted(io, json);
    return reportFailure(error, io, json);
  }
}

/** Ctrl-C or SIGTERM before the call finished: said as `run` says it, with the exit code of the signal. */
function interrupted(io: CliIo, json: boolean): ExitCode {
  const by = interruptedBy(io.signal);
  const message = `interrupted (${by}) before the call finished`;
  if (json) {
    io.stdout.write(
      `${JSON.stringify({ ok: false, error: { kind: 'Interrupted', message, interrupted: by } })}\n`,
    );
  } else io.stderr.write(`improv-extfn: ${message}\n`);
  return interruptedExitCode(io.signal);
}
