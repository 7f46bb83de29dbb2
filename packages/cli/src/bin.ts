#!/usr/bin/env node
/**
 * The `improv-extfn` executable. Ctrl-C or SIGTERM cancels running calls,
 * removes an unfinished output file and closes the workers before exiting;
 * a second one exits at once (the unfinished file is still removed).
 */
import { writeFailed } from './cli-error.js';
import { ExitCode } from './exit-codes.js';
import { Interrupted, processIo } from './io.js';

// First, before the rest of the command loads: until a listener is set, Node's
// own handler ends the process on the spot.
const controller = new AbortController();
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (controller.signal.aborted) process.exit(signal === 'SIGINT' ? 130 : 143);
    controller.abort(new Interrupted(signal));
  });
}

// `improv-extfn run … | head`: the run sees EPIPE on its own listener and stops;
// a reader that stops early is not an error, so no other command crashes on it.
// Any other failure to write (`> /dev/full`, an I/O error) is said once, never
// as a stack trace, and the exit code says so (`run` reports it itself).
let finished = false;
let stdoutError: NodeJS.ErrnoException | undefined;
const sayStdoutFailed = (error: NodeJS.ErrnoException) => {
  const { message, fix } = writeFailed(
    'standard output',
    error,
    'free some space, or write elsewhere',
  );
  process.stderr.write(`improv-extfn: ${message}\n  fix: ${fix}\n`);
  process.exitCode = ExitCode.Unavailable;
};
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code === 'EPIPE' || stdoutError) return;
  stdoutError = error;
  if (finished) sayStdoutFailed(error);
});

const { main } = await import('./main.js');
const code = await main(process.argv.slice(2), processIo(controller.signal));
finished = true;
process.exitCode = code;
if (stdoutError && code !== ExitCode.Unavailable) sayStdoutFailed(stdoutError);

// Everything is closed by now; a runner that leaked a handle must not keep the command alive.
setTimeout(() => process.exit(), 2_000).unref();
