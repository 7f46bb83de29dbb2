/**
 * What may reach a terminal. Results and error messages are model text: raw,
 * they could carry ESC sequences that rewrite the screen, OSC 52 that sets the
 * clipboard, BEL or CR. On a terminal those characters are shown escaped;
 * files, pipes and `--json` keep the exact bytes.
 */
import type { CliIo, CliStream } from './io.js';

/**
 * C0 controls except tab and line feed, DEL, C1 controls (U+009B is a
 * one-byte CSI for some terminals) and the bidirectional overrides that
 * reorder what is shown. A CR right before a LF is a CRLF line end, kept.
 */
const UNSAFE =
  /\r(?!\n)|[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;

/**
 * Shows unsafe characters as `\u001b`-style escapes: readable, and still
 * valid inside a JSON string (so `--json` on a terminal stays parseable and
 * means the same text).
 */
export function escapeForTerminal(text: string): string {
  return text.replace(UNSAFE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** A stream that escapes what is written, with the original kept for our own control sequences. */
export interface EscapedStream extends CliStream {
  readonly unescaped: CliStream;
}

function escaped(stream: CliStream): EscapedStream {
  return {
    write: (chunk: string) => stream.write(escapeForTerminal(chunk)),
    ...(stream.isTTY !== undefined ? { isTTY: stream.isTTY } : {}),
    ...(stream.columns !== undefined ? { columns: stream.columns } : {}),
    ...(stream.once ? { once: stream.once.bind(stream) } : {}),
    ...(stream.on ? { on: stream.on.bind(stream) } : {}),
    unescaped: stream,
  };
}

/** The io with stdout and stderr escaped where they are terminals. */
export function terminalSafeIo(io: CliIo): CliIo {
  return {
    ...io,
    stdout: io.stdout.isTTY ? escaped(io.stdout) : io.stdout,
    stderr: io.stderr.isTTY ? escaped(io.stderr) : io.stderr,
  };
}

/** Where the progress bar draws: the terminal itself, past the escaping. */
export function rawStream(stream: CliStream): CliStream {
  return (stream as Partial<EscapedStream>).unescaped ?? stream;
}

/**
 * A progress bar only on an interactive terminal: not for `TERM=dumb` (no
 * cursor control) and not under CI (logs keep every redraw).
 */
export function isInteractive(io: CliIo): boolean {
  if (!io.stderr.isTTY) return false;
  if (io.env.TERM === 'dumb') return false;
  const ci = io.env.CI;
  return ci === undefined || ci === '' || ci === '0' || ci.toLowerCase() === 'false';
}
