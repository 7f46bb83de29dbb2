#!/usr/bin/env node
/**
 * The `improv-extfn` executable. Ctrl-C cancels running calls and closes the
 * workers before exiting; a second Ctrl-C exits at once.
 */
import { processIo } from './io.js';
import { main } from './main.js';

// `improv-extfn run … | head`: a reader that stops early is not an error.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code === 'EPIPE') process.exit(0);
  throw error;
});

const controller = new AbortController();
process.on('SIGINT', () => {
  if (controller.signal.aborted) process.exit(130);
  controller.abort(new Error('interrupted'));
});

process.exitCode = await main(process.argv.slice(2), processIo(controller.signal));

// Everything is closed by now; a runner that leaked a handle must not keep the command alive.
setTimeout(() => process.exit(), 2_000).unref();
