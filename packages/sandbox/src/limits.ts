/** The resource limits of one sandboxed tree: defaults, and how a partial set is completed. */
export interface SandboxLimits {
  /**
   * RLIMIT_AS: address space of each process, default 1 GiB. Where a cgroup
   * is available, the whole tree's memory (all processes, tmpfs, shared
   * memory) is also held to `memoryBytes + tmpfsBytes`, without swap.
   */
  memoryBytes: number;
  /**
   * RLIMIT_CPU soft limit (SIGXCPU; SIGKILL one second later). 0 = derived from
   * the timeout: ceil(timeoutMs / 1000) + 1, or unlimited without a timeout.
   */
  cpuSeconds: number;
  /**
   * Processes (threads included) of one tree: RLIMIT_NPROC of its own uid on
   * a root host, inside its user namespace otherwise (Linux 5.14+), and the
   * cgroup's pids.max where there is one.
   */
  processes: number;
  /** RLIMIT_NOFILE: open file descriptors per process. */
  openFiles: number;
  /** RLIMIT_FSIZE: largest file a process may write. */
  fileSizeBytes: number;
  /** One budget for the fresh tmpfs on /tmp (three quarters) and /dev/shm (a quarter) under `restricted`. */
  tmpfsBytes: number;
  /** stdout cap of `runSandboxed`; past it the call fails with Runtime "output too large". */
  stdoutBytes: number;
  /** Total stderr cap of `runSandboxed`; past it the call fails the same way. */
  stderrBytes: number;
  /** How much of the end of stderr is kept for error messages. */
  stderrTailBytes: number;
}

const MiB = 1024 * 1024;

export const DEFAULT_LIMITS: Readonly<SandboxLimits> = Object.freeze({
  memoryBytes: 1024 * MiB,
  cpuSeconds: 0,
  processes: 64,
  openFiles: 64,
  fileSizeBytes: 16 * MiB,
  tmpfsBytes: 64 * MiB,
  stdoutBytes: 1 * MiB,
  stderrBytes: 1 * MiB,
  stderrTailBytes: 16 * 1024,
});

/** Defaults filled in, CPU seconds derived from the deadline; throws on nonsense. */
export function resolveLimits(
  partial: Partial<SandboxLimits> | undefined,
  timeoutMs: number | undefined,
): SandboxLimits {
  const limits: SandboxLimits = { ...DEFAULT_LIMITS, ...partial };
  for (const [key, value] of Object.entries(limits)) {
    if (!Number.isSafeInteger(value) || value < 0) {
      throw new RangeError(`sandbox limit ${key} must be a non-negative integer, got ${value}`);
    }
  }
  if (limits.cpuSeconds === 0 && timeoutMs !== undefined && Number.isFinite(timeoutMs)) {
    limits.cpuSeconds = Math.ceil(timeoutMs / 1000) + 1;
  }
  return limits;
}
