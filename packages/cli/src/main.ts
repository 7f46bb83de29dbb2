/** The command line: picks the command and turns everything into an exit code. */
import { readFileSync } from 'node:fs';
import { usage } from './cli-error.js';
import { DOCTOR_HELP, doctorCommand } from './commands/doctor.js';
import { EVAL_HELP, evalCommand } from './commands/eval.js';
import { RUN_HELP, runCommand } from './commands/run.js';
import { EXIT_CODES_HELP, ExitCode } from './exit-codes.js';
import type { CliIo } from './io.js';
import { wantsJson } from './options.js';
import { reportFailure } from './report.js';

export const HELP = `Usage: improv-extfn <command> [options]

Evaluates Improv external functions (Python, R, Julia, Pure, WebAssembly)
under the same sandbox an engine uses.

Commands:
  eval FN.json [ARG ...]            evaluate once, arguments from the command line
  run FN.json ROWS.csv|ROWS.jsonl   evaluate over every row of a table
  doctor                            what this machine can run, and how to fix the rest
  help [COMMAND]                    show help for a command

Options (every command): --json for machine-readable output, -h/--help.
Run "improv-extfn <command> --help" for a command's options and an example.

Examples:
  improv-extfn eval examples/model/distance.json 3 4
  improv-extfn run examples/model/distance.json examples/model/rows.csv --header --columns x_km,y_km
  improv-extfn doctor

The sandbox policy is the host's, from its environment: restricted by default;
IMPROV_EXTFN_ALLOW_UNSANDBOXED=1 or IMPROV_EXTFN_TRUSTED=1 loosen it. No flag does.

${EXIT_CODES_HELP}
`;

const COMMAND_HELP: Record<string, string> = {
  eval: EVAL_HELP,
  run: RUN_HELP,
  doctor: DOCTOR_HELP,
};

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
    version: string;
  };
  return pkg.version;
}

/**
 * Runs the command line `argv` (without `node` and the script) and resolves to
 * the exit code. Never rejects and never calls `process.exit`, so tests can
 * call it in-process.
 */
export async function main(argv: readonly string[], io: CliIo): Promise<ExitCode> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case 'eval':
        return await evalCommand(rest, io);
      case 'run':
        return await runCommand(rest, io);
      case 'doctor':
        return await doctorCommand(rest, io);
      case 'help': {
        const topic = rest[0];
        if (topic !== undefined && !(topic in COMMAND_HELP)) {
          throw usage(`no command named ${topic}`, 'the commands are eval, run and doctor');
        }
        io.stdout.write(topic === undefined ? HELP : COMMAND_HELP[topic]!);
        return ExitCode.Ok;
      }
      case undefined:
      case '-h':
      case '--help':
        io.stdout.write(HELP);
        return command === undefined ? ExitCode.BadInput : ExitCode.Ok;
      case '-v':
      case '--version':
        io.stdout.write(`${version()}\n`);
        return ExitCode.Ok;
      default:
        throw usage(
          `unknown command ${command}`,
          'the commands are eval, run and doctor; see improv-extfn --help',
        );
    }
  } catch (error) {
    return reportFailure(error, io, wantsJson(argv));
  }
}
