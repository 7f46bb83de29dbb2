/**
 * What the CLI touches of the outside world, passed in so that tests can run
 * `main` in-process with fakes (fake runner packages, a pretend terminal).
 */

export interface CliStream {
  write(chunk: string): unknown;
  /** A terminal: progress bars and `\r` redraws are only for these. */
  readonly isTTY?: boolean;
  readonly columns?: number;
}

export interface CliIo {
  readonly stdout: CliStream;
  readonly stderr: CliStream;
  /** The environment the sandbox policy and the runners read (never a flag: the host decides). */
  readonly env: NodeJS.ProcessEnv;
  /** Relative file names are resolved against this. */
  readonly cwd: string;
  /** Reads standard input when a file name is `-`. */
  readonly readStdin?: () => Promise<string>;
  /** Loads a package by name; defaults to `import()`. Tests swap in fake runner packages. */
  readonly importPackage?: (name: string) => Promise<unknown>;
  /** Aborted on Ctrl-C: running calls are cancelled and workers closed. */
  readonly signal?: AbortSignal;
  /** How long a run must last before a progress bar appears (default 1 000 ms). */
  readonly progressDelayMs?: number;
}

/** The real process, for `bin.js`. */
export function processIo(signal?: AbortSignal): CliIo {
  return {
    stdout: process.stdout,
    stderr: process.stderr,
    env: process.env,
    cwd: process.cwd(),
    readStdin: async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
      return Buffer.concat(chunks).toString('utf8');
    },
    ...(signal ? { signal } : {}),
  };
}
