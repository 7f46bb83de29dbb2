/** The command line's own failures (usage, bad input, a runner that will not load), each with its fix and exit code. */
import { ExitCode } from './exit-codes.js';

/**
 * Kinds of failure that are the command line's, not the function's: a bad
 * flag or command line (Usage), a file or argument that cannot be read
 * (BadInput), a runner that cannot be loaded (LanguageUnavailable), a Redis
 * the worker cannot reach (Unreachable), output that cannot be written
 * (WriteFailed: a full disk, an I/O error).
 */
export type CliErrorKind =
  | 'Usage'
  | 'BadInput'
  | 'LanguageUnavailable'
  | 'Unreachable'
  | 'WriteFailed';

/**
 * A failure before any function runs: a bad flag, an unreadable file, an
 * argument that does not parse. Always says what to do about it.
 */
export class CliError extends Error {
  readonly kind: CliErrorKind;
  readonly fix: string | undefined;
  readonly exitCode: ExitCode;

  constructor(kind: CliErrorKind, message: string, fix?: string, exitCode?: ExitCode) {
    super(message);
    this.name = 'CliError';
    this.kind = kind;
    this.fix = fix;
    this.exitCode =
      exitCode ??
      (kind === 'LanguageUnavailable' || kind === 'Unreachable' || kind === 'WriteFailed'
        ? ExitCode.Unavailable
        : ExitCode.BadInput);
  }

  toJSON(): Record<string, unknown> {
    return { kind: this.kind, message: this.message, ...(this.fix ? { fix: this.fix } : {}) };
  }
}

export const usage = (message: string, fix?: string): CliError =>
  new CliError('Usage', message, fix);
export const badInput = (message: string, fix?: string): CliError =>
  new CliError('BadInput', message, fix);

const WRITE_REASONS: Record<string, string> = {
  ENOSPC: 'no space left on the device',
  EDQUOT: 'the disk quota is used up',
  EFBIG: 'the file is larger than this system allows',
  EIO: 'an input/output error',
  EROFS: 'the file system is read-only',
  EACCES: 'permission denied',
  EPERM: 'permission denied',
};

/** Output that could not be written: what went wrong (the errno named), and where to write instead. */
export function writeFailed(where: string, error: unknown, fix: string): CliError {
  const code = (error as { code?: unknown })?.code;
  const reason =
    typeof code === 'string'
      ? `${WRITE_REASONS[code] ?? (error as Error).message} (${code})`
      : String((error as Error)?.message ?? error);
  return new CliError('WriteFailed', `cannot write ${where}: ${reason}`, fix);
}
