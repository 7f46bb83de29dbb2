/**
 * What the CLI touches of the outside world, passed in so that tests can run
 * `main` in-process with fakes (fake runner packages, a pretend terminal).
 */

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

/** The real process, for `bin.js`. */
export function processIo(signal?: AbortSignal): CliIo {
  return {
    stdout: process.stdout,
    stderr: process.stderr,
    env: process.env,
    cwd: process.cwd(),
    stdin: () => process.stdin,
    ...(signal ? { signal } : {}),
  };
}

/** 143 for SIGTERM, else 130: what a shell reports for a command ended by that signal. */
export function interruptedExitCode(signal: AbortSignal | undefined): 130 | 143 {
  const reason = signal?.reason;
  return reason instanceof Interrupted && reason.signalName === 'SIGTERM' ? 143 : 130;
}
