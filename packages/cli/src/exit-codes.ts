/** Exit codes, documented in `--help` and the README. Scripts may rely on them. */
export const ExitCode = {
  /** Everything evaluated without error. */
  Ok: 0,
  /** `eval`: the function failed (Runtime, Timeout, …). `run`: at least one row failed or was malformed. */
  FunctionError: 1,
  /** Usage or bad input: unknown flag, unreadable or invalid descriptor, argument that does not parse. */
  BadInput: 2,
  /**
   * This machine cannot run it: runner or interpreter missing, or the sandbox
   * policy cannot be honoured (`worker`: Redis cannot be reached). `run` stops
   * at the first row that fails so.
   */
  Unavailable: 3,
  /** A bug in improv-extfn itself. */
  Internal: 4,
  /** Interrupted (Ctrl-C, SIGINT). */
  Interrupted: 130,
  /** Terminated (SIGTERM). */
  Terminated: 143,
} as const;
export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];

export const EXIT_CODES_HELP = `Exit codes:
  0    ok
  1    the function failed (eval), or at least one row failed or was malformed (run)
  2    usage or bad input: unknown flag or one given twice, a flag value out of range
       or ambiguous (--timeout 10), bad descriptor file, argument that does not parse,
       a file or argument that is not UTF-8
  3    this machine cannot run it: runner or interpreter missing, sandbox unavailable,
       Redis unreachable (worker); run stops at the first row that fails so, with the
       reason and its fix; or the output cannot be written (a full disk)
  4    internal error (a bug: please report it)
  130  interrupted (Ctrl-C); 143 terminated (SIGTERM): an -o file is left as it was`;
