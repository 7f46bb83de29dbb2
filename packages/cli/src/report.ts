/** How failures reach the person (stderr) or the script (`--json` on stdout), and their exit codes. */
import { ExtFnError, type ExtFnErrorKind } from '@improv/extfn-core';
import { CliError } from './cli-error.js';
import { ExitCode } from './exit-codes.js';
import { cliFix, cliWording } from './hints.js';
import type { CliIo } from './io.js';

export function exitCodeForKind(kind: ExtFnErrorKind | string): ExitCode {
  switch (kind) {
    case 'LanguageUnavailable':
    case 'Sandbox':
      return ExitCode.Unavailable;
    case 'ArityMismatch':
    case 'TypeMismatch':
    case 'NotFound':
      return ExitCode.BadInput;
    default:
      return ExitCode.FunctionError;
  }
}

function indent(text: string, prefix = '  | '): string {
  return text
    .replace(/\s+$/, '')
    .split(/\r?\n/)
    .map((l) => prefix + l)
    .join('\n');
}

/**
 * A message's lines after its first, indented like the body's own output: a
 * row's error is model text, and a line break in it must not start a line at
 * column 0, where ours (`improv-extfn: …`) start.
 */
function indentContinuations(text: string): string {
  return text.replace(/\r?\n/g, '\n  | ');
}

/** Writes a failure and returns the exit code it means. */
export function reportFailure(error: unknown, io: CliIo, json: boolean): ExitCode {
  if (error instanceof CliError) {
    if (json) io.stdout.write(`${JSON.stringify({ ok: false, error: error.toJSON() })}\n`);
    else
      io.stderr.write(
        `improv-extfn: ${error.message}\n${error.fix ? `  fix: ${error.fix}\n` : ''}`,
      );
    return error.exitCode;
  }
  if (ExtFnError.isInstance(error)) {
    if (json) {
      // The same wording as on stderr (flags, not API options); the other fields as they are.
      const fields = error.toJSON() as Record<string, unknown>;
      fields.message = cliWording(error.message);
      // Every fix stderr gives (the error's own, then the flag that raises a limit or allows a library), in one field.
      const fixes = [error.fix === undefined ? undefined : cliWording(error.fix), cliFix(error)];
      const fix = fixes.filter((f): f is string => Boolean(f)).join('; ');
      if (fix) fields.fix = fix;
      else delete fields.fix;
      io.stdout.write(`${JSON.stringify({ ok: false, error: fields })}\n`);
    } else {
      let text = `improv-extfn: ${error.kind}: ${indentContinuations(cliWording(error.message))}\n`;
      if (error.stderr?.trim()) text += `${indent(error.stderr)}\n`;
      if (error.fix && !error.message.includes(error.fix))
        text += `  fix: ${indentContinuations(cliWording(error.fix))}\n`;
      const raise = cliFix(error);
      if (raise) text += `  fix: ${raise}\n`;
      io.stderr.write(text);
    }
    return exitCodeForKind(error.kind);
  }
  const message = error instanceof Error ? (error.stack ?? error.message) : String(error);
  if (json) {
    io.stdout.write(
      `${JSON.stringify({ ok: false, error: { kind: 'Internal', message: String(error) } })}\n`,
    );
  } else {
    io.stderr.write(`improv-extfn: internal error (please report it):\n${message}\n`);
  }
  return ExitCode.Internal;
}
