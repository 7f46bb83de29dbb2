/**
 * The public shapes of the sandbox's two ways to start a tree: the options
 * both take, what `runSandboxed` gives back, and the handle
 * `launchSandboxed` gives back.
 */
import type { ResourceLimit } from '@improv/extfn-core';
import type { SandboxExit } from './exit.js';
import type { SandboxLimits } from './limits.js';
import type { SandboxPolicy } from './policy.js';

export interface SandboxOptions {
  /** The interpreter: an absolute path, or a name looked up on the host PATH (symlinks followed). */
  command: string;
  args?: readonly string[];
  /** Added to HOME=/tmp, PATH=/usr/bin:/bin, LANG=C.UTF-8; nothing else of process.env reaches the child. */
  env?: Readonly<Record<string, string>>;
  /** Wall-clock deadline of the whole call; RLIMIT_CPU is derived from it. */
  timeoutMs: number;
  /**
   * Default `policyFor(process.env)`: the host's choice, never the model's.
   * `restricted` falls back to `unsandboxed` only where bubblewrap cannot
   * start and IMPROV_EXTFN_ALLOW_UNSANDBOXED=1 is in the host's environment (see probeSandbox).
   */
  policy?: SandboxPolicy;
  limits?: Partial<SandboxLimits>;
  signal?: AbortSignal;
  /**
   * Extra host paths bound read-only under `restricted`. The interpreter's
   * own tree is bound without asking; none of these may hold a home, /root
   * or the working directory.
   */
  readOnlyPaths?: readonly string[];
  /**
   * Make the child's stdout a real pipe (a FIFO, unreachable by any path)
   * instead of a UNIX socket, so the child can reopen `/proc/self/fd/1`
   * (R opens a binary connection on it). Falls back to the socket where the
   * host cannot make a FIFO (no `mkfifo`): the child must cope with both.
   */
  stdoutPipe?: boolean;
  /**
   * A descriptor the host opened (a file it shares with the child, see
   * shared-file.ts in @improv/extfn-interpreter): the child inherits it as
   * the descriptor named in IMPROV_EXTFN_SHARED_FD, owned by the tree's uid,
   * so the child may also reopen it through /proc/self/fd. Only warm workers
   * (`launchSandboxed`) take one. What the child can do with it is bounded by
   * RLIMIT_FSIZE (`limits.fileSizeBytes`): it cannot grow the file past the
   * larger of that and the size the host gave it.
   */
  sharedFile?: number;
  /** Default `bwrap` on the host PATH. */
  bwrapPath?: string;
  /** For error messages. */
  functionName?: string;
  /**
   * Everything the tree runs before the host first writes to its stdin is
   * trusted (an interpreter and its driver, which read the untrusted code
   * from stdin afterwards): its move into its cgroup may then overlap its
   * boot. Default false: the tree waits at a gate until it sits in its
   * cgroup, since a command's arguments (`python -c …`) may themselves be
   * untrusted code, which would otherwise run outside the cgroup until the
   * move (an RCU grace period, 10–25 ms on a loaded VM).
   */
  trustedBoot?: boolean;
}

/** What `runSandboxed` resolves with once the tree has ended. */
export interface SandboxResult extends SandboxExit {
  stdout: Buffer;
  /** The bounded tail of stderr. */
  stderr: string;
  durationMs: number;
  /** When the exit is explained by a limit: memory, cpu-time, processes, file-size. */
  limit?: ResourceLimit;
}

/** A long-lived tree (`launchSandboxed`): raw pipes, a stderr tail, kill, exit. */
export interface SandboxedTree {
  readonly pid: number | undefined;
  readonly stdin: NodeJS.WritableStream;
  readonly stdout: NodeJS.ReadableStream;
  /** The bounded tail of stderr (stderr is drained continuously so it never blocks). */
  stderrTail(): string;
  /** Total stderr bytes so far. */
  readonly stderrBytes: number;
  /** Kills the whole tree (grandchildren, setsid() ones too) and waits for it. Idempotent. */
  kill(): Promise<void>;
  /** Resolves when the tree has exited; rejects with a Sandbox error when the sandbox itself failed to start. */
  readonly exited: Promise<SandboxExit>;
  /** Lets the host's event loop end while the tree idles (the child and its pipes are unref'd). */
  unref(): void;
  /** Undoes `unref()`: the tree keeps the host's event loop alive while it works. */
  ref(): void;
}

/** @deprecated Renamed `SandboxedTree`; this alias goes in the next minor release. */
export type SandboxedProcess = SandboxedTree;
