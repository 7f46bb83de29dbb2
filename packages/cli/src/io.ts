/**
 * What the CLI touches of the outside world, passed in so that tests can run
 * `main` in-process with fakes (fake runner packages, a pretend terminal).
 */
import { readFileSync } from 'node:fs';

export interface CliStream {
  /** Returns false when the stream wants the writer to wait for `drain` (Node's backpressure). */
  write(chunk: string): unknown;
  /** A terminal: progress bars and `\r` redraws are only for these; model text is escaped on them. */
  readonly isTTY?: boolean;
  readonly columns?: number;
  /** Node's `once`/`on`, for `drain` and `error` (EPIPE: the reader went away). */
  once?(event: string, listener: (...args: unknown[]) => void): unknown;
  on?(event: string, listener: (...args: unknown[]) => void): unknown;
  off?(event: string, listener: (...args: unknown[]) => void): unknown;
}

export interface CliIo {
  readonly stdout: CliStream;
  readonly stderr: CliStream;
  /** The environment the sandbox policy and the runners read (never a flag: the host decides). */
  readonly env: NodeJS.ProcessEnv;
  /** Relative file names are resolved against this. */
  readonly cwd: string;
  /** Standard input, read as it comes, when a file name is `-`. */
  readonly stdin?: () => AsyncIterable<string | Uint8Array>;
  /** Loads a package by name; defaults to `import()`. Tests swap in fake runner packages. */
  readonly importPackage?: (name: string) => Promise<unknown>;
  /** Aborted on Ctrl-C or SIGTERM (the reason says which): running calls are cancelled and workers closed. */
  readonly signal?: AbortSignal;
  /** How long a run must last before a progress bar appears (default 1 000 ms). */
  readonly progressDelayMs?: number;
  /**
   * The bytes of `argv` as the system gave them, one per argument, when known.
   * Node turns bytes that are not UTF-8 into U+FFFD; with these, such an
   * argument is an error that names it instead of text silently changed.
   */
  readonly argvBytes?: readonly Uint8Array[];
}

/**
 * Lets go of standard input (process.stdin: destroys it): a pipe or terminal
 * that stays open would otherwise hold the process after Ctrl-C, and a read
 * still waiting on it ends.
 */
export function releaseStdin(input: AsyncIterable<unknown>): void {
  (input as { destroy?: () => void }).destroy?.();
}

/** The reason `bin.js` aborts with on a signal, so the exit code can name it. */
export class Interrupted extends Error {
  readonly signalName: 'SIGINT' | 'SIGTERM';
  constructor(signalName: 'SIGINT' | 'SIGTERM') {
    super(`interrupted by ${signalName}`);
    this.name = 'Interrupted';
    this.signalName = signalName;
  }
}

/**
 * The bytes of the process's arguments after the script (Linux:
 * /proc/self/cmdline), looked up only when one of them holds U+FFFD, which is
 * what Node makes of bytes that are not UTF-8; undefined when the system does
 * not say or the arguments there are not the ones Node has.
 */
export function commandLineBytes(
  args: readonly string[] = process.argv.slice(2),
): Uint8Array[] | undefined {
  if (!args.some((arg) => arg.includes('\uFFFD'))) return undefined;
  let raw: Buffer;
  try {
    raw = readFileSync('/proc/self/cmdline');
  } catch {
    return undefined;
  }
  const parts: Buffer[] = [];
  for (let from = 0; from < raw.length; ) {
    let nul = raw.indexOf(0, from);
    if (nul === -1) nul = raw.length;
    parts.push(raw.subarray(from, nul));
    from = nul + 1;
  }
  if (parts.length < args.length) return undefined;
  const tail = parts.slice(parts.length - args.length);
  return tail.every((bytes, i) => bytes.toString('utf8') === args[i]) ? tail : undefined;
}

/** The real process, for `bin.js`. */
export function processIo(signal?: AbortSignal): CliIo {
  const argvBytes = commandLineBytes();
  return {
    stdout: process.stdout,
    stderr: process.stderr,
    env: process.env,
    cwd: process.cwd(),
    stdin: () => process.stdin,
    ...(signal ? { signal } : {}),
    ...(argvBytes ? { argvBytes } : {}),
  };
}

/** The signal a command was interrupted by: SIGTERM when `bin.js` said so, else SIGINT. */
export function interruptedBy(signal: AbortSignal | undefined): 'SIGINT' | 'SIGTERM' {
  const reason = signal?.reason;
  return reason instanceof Interrupted ? reason.signalName : 'SIGINT';
}

/** 143 for SIGTERM, else 130: what a shell reports for a command ended by that signal. */
export function interruptedExitCode(signal: AbortSignal | undefined): 130 | 143 {
  return interruptedBy(signal) === 'SIGTERM' ? 143 : 130;
}
