/**
 * Runs a short host helper to its end (bubblewrap's --version, `kill -1` as
 * a tree's uid, ipcrm): never rejects, gives what it printed and how it
 * ended. Node's own child_process: execa took ~75 ms to import, which every
 * host process paid before its first call (a CLI `eval` is ~360 ms).
 */
import { execFile } from 'node:child_process';

export interface CommandOptions {
  /** The whole environment (default: this process's). */
  env?: Record<string, string>;
  uid?: number;
  gid?: number;
  cwd?: string;
  /** Killed (SIGKILL) past this; default none. */
  timeoutMs?: number;
}

export interface CommandResult {
  stdout: string;
  /** Undefined when it did not exit by itself (a signal, or it could not start). */
  exitCode: number | undefined;
  /** Why it did not run or finish, if so. */
  error?: Error;
}

export function runCommand(
  file: string,
  args: readonly string[],
  options: CommandOptions = {},
): Promise<CommandResult> {
  return new Promise((resolve) => {
    const child = execFile(
      file,
      args,
      {
        env: options.env,
        uid: options.uid,
        gid: options.gid,
        cwd: options.cwd,
        timeout: options.timeoutMs ?? 0,
        killSignal: 'SIGKILL',
        maxBuffer: 1024 * 1024,
        encoding: 'utf8',
      },
      (error, stdout) => {
        const code = (error as { code?: unknown } | null)?.code;
        resolve({
          stdout: String(stdout ?? ''),
          exitCode: error ? (typeof code === 'number' ? code : undefined) : 0,
          ...(error ? { error } : {}),
        });
      },
    );
    child.stdin?.end(); // it reads nothing: end of input at once
  });
}
