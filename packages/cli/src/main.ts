/** The command line: picks the command and turns everything into an exit code. */
import { readFileSync } from 'node:fs';
import { usage } from './cli-error.js';
import { DOCTOR_HELP, doctorCommand } from './commands/doctor.js';
import { evalCommand, evalHelp } from './commands/eval.js';
import { runCommand, runHelp } from './commands/run.js';
import { WORKER_HELP, workerCommand } from './commands/worker.js';
import { EXAMPLES_DIR, examplePath } from './examples.js';
import { EXIT_CODES_HELP, ExitCode } from './exit-codes.js';
import type { CliIo } from './io.js';
import { lookupTable } from './lookup-table.js';
import { wantsJson } from './options.js';
import { reportFailure } from './report.js';
import { RUNNERS_ENV } from './runners.js';
import { terminalSafeIo } from './terminal.js';

/** The top-level help; example paths are the files shipped with this package, as seen from `cwd`. */
export function helpText(cwd: string): string {
  const distance = examplePath('distance.json', cwd);
  const rows = examplePath('rows.csv', cwd);
  return `Usage: improv-extfn <command> [options]

Evaluates Improv external functions (Python, R, Julia, Pure, WebAssembly, and
third-party runners) under the same sandbox an engine uses.

Commands:
  eval FN.json [ARG ...]            evaluate once, arguments from the command line
  run FN.json ROWS.csv|ROWS.jsonl   evaluate over every row of a table, streamed
  doctor                            what this machine can run, and how to fix the rest
  worker --redis URL                serve evaluation jobs from a Redis queue
  help [COMMAND]                    show help for a command

Options (every command): --json for machine-readable output, -h/--help.
  -V, --version   print the version of improv-extfn
A flag that takes a value is given once; --runner may be repeated.
Run "improv-extfn <command> --help" for a command's options and an example.

FN.json holds one descriptor, a list or a map of them, or an engine model file
(its "external_fns"); pick one with --name. - reads it from standard input.

Third-party runners: --runner PACKAGE (repeatable) or ${RUNNERS_ENV}=PKG,PKG
load a runner package by its factory: the default export, else the export
named createRunner, or PACKAGE#NAME for the export NAME (a path such as
./my-runner.js works too). The factory is called with no arguments and returns
a v1 LanguageRunner; functions in its language then run with it.

Examples (files shipped with this package, in ${EXAMPLES_DIR}):
  improv-extfn eval ${distance} 3 4
  improv-extfn run ${distance} ${rows} --header --columns x_km,y_km
  improv-extfn doctor

The sandbox policy is the host's, from its environment: restricted by default;
IMPROV_EXTFN_ALLOW_UNSANDBOXED=1 or IMPROV_EXTFN_TRUSTED=1 loosen it. No flag does.

${EXIT_CODES_HELP}
`;
}

const COMMAND_HELP = lookupTable<(cwd: string) => string>({
  eval: evalHelp,
  run: runHelp,
  doctor: () => DOCTOR_HELP,
  worker: () => WORKER_HELP,
});

/**
 * The variables that loosen the sandbox, and what stays as it is when one is
 * set to anything but 1, the one value that turns it on (fail-safe).
 */
const POLICY_VARIABLES: Record<string, { off: string; on: string }> = {
  IMPROV_EXTFN_TRUSTED: {
    off: 'the sandbox stays restricted',
    on: "to run bodies with this host's privileges (trusted models only)",
  },
  IMPROV_EXTFN_ALLOW_UNSANDBOXED: {
    off: 'restricted does not fall back to unsandboxed where bubblewrap cannot start',
    on: 'to allow that fallback',
  },
};

/** Says once, on stderr, that a sandbox variable set to another value than 1 ("yes", "true") is ignored. */
function warnIgnoredPolicyVariables(io: CliIo): void {
  for (const [name, { off, on }] of Object.entries(POLICY_VARIABLES)) {
    const value = io.env[name];
    if (value === undefined || value === '' || value === '0' || value === '1') continue;
    io.stderr.write(
      `improv-extfn: warning: ${name} is ${JSON.stringify(value)}, which is ignored: only 1 turns it on, so ${off}\n` +
        `  fix: set ${name}=1 ${on}, or unset it\n`,
    );
  }
}

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
    version: string;
  };
  return pkg.version;
}

/**
 * Runs the command line `argv` (without `node` and the script) and resolves to
 * the exit code. Never rejects and never calls `process.exit`, so tests can
 * call it in-process. Where stdout or stderr is a terminal, control
 * characters in what is written there (model text) are shown escaped.
 */
export async function main(argv: readonly string[], rawIo: CliIo): Promise<ExitCode> {
  const io = terminalSafeIo(rawIo);
  const [command, ...rest] = argv;
  if (command === 'eval' || command === 'run' || command === 'doctor' || command === 'worker') {
    warnIgnoredPolicyVariables(io);
  }
  try {
    switch (command) {
      case 'eval':
        return await evalCommand(rest, io);
      case 'run':
        return await runCommand(rest, io);
      case 'doctor':
        return await doctorCommand(rest, io);
      case 'worker':
        return await workerCommand(rest, io);
      case 'help': {
        const topic = rest.find((arg) => arg !== '--help' && arg !== '-h');
        if (topic !== undefined && !(topic in COMMAND_HELP)) {
          throw usage(`no command named ${topic}`, 'the commands are eval, run, doctor and worker');
        }
        io.stdout.write(topic === undefined ? helpText(io.cwd) : COMMAND_HELP[topic]!(io.cwd));
        return ExitCode.Ok;
      }
      case undefined:
      case '-h':
      case '--help':
        io.stdout.write(helpText(io.cwd));
        return command === undefined ? ExitCode.BadInput : ExitCode.Ok;
      case '-V':
      case '-v':
      case '--version':
        io.stdout.write(`${version()}\n`);
        return ExitCode.Ok;
      default:
        throw usage(
          `unknown command ${command}`,
          'the commands are eval, run, doctor and worker; see improv-extfn --help',
        );
    }
  } catch (error) {
    return reportFailure(error, io, wantsJson(argv));
  }
}
