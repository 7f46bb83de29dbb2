/**
 * Which resource limit explains a failed exit, from what the host saw (CPU
 * time, signals) and, as a diagnostic only, the guest's last words.
 */
import { constants } from 'node:os';
import type { ResourceLimit } from '@improv/extfn-core';

const SIGNAL_NAMES = Object.fromEntries(
  Object.entries(constants.signals).map(([name, number]) => [number, name]),
) as Record<number, string>;

/**
 * The signals that can end a pid namespace's init, which the guest is under
 * bwrap (`--as-pid-1`): SIGKILL from outside the namespace (us, the kernel's
 * RLIMIT_CPU hard limit, the OOM killer) and the faults the kernel forces
 * (a real segfault; glibc's abort() ends as SIGSEGV there). Every other
 * signal is ignored by init, even SIGXCPU and SIGXFSZ from the kernel, so a
 * status of 128 + N for any other N is a plain `exit(128 + N)`.
 */
const INIT_KILLERS = new Set([
  'SIGKILL',
  'SIGSEGV',
  'SIGBUS',
  'SIGILL',
  'SIGFPE',
  'SIGTRAP',
  'SIGSYS',
]);

/**
 * bwrap reports a command killed by signal N as exit status 128 + N; only the
 * signals that can kill the namespace's init are read that way, so a guest
 * cannot pass `exit(152)` off as death by SIGXCPU.
 */
export function signalFromBwrapStatus(exitCode: number | null): string | null {
  if (exitCode === null || exitCode <= 128 || exitCode > 128 + 64) return null;
  const name = SIGNAL_NAMES[exitCode - 128];
  return name !== undefined && INIT_KILLERS.has(name) ? name : null;
}

// What interpreters and libc print when a limit refuses them.
const MEMORY =
  /MemoryError|Cannot allocate memory|cannot allocate (?:vector|memory)|out of memory|std::bad_alloc|OutOfMemoryError/i;
const FILE_SIZE = /File too large|EFBIG/;
const PROCESSES =
  /Resource temporarily unavailable|\[Errno 11\]|fork: retry|[Cc]an't fork|Cannot fork|EAGAIN|can't start new thread/;

/** How many of the last non-empty stderr lines count as the guest's last words. */
const LAST_WORDS_LINES = 3;

/** The last few non-empty lines of stderr: where an interpreter prints the error that ended it. */
function lastWords(stderrTail: string): string {
  const lines = stderrTail.slice(-4096).split('\n');
  const kept: string[] = [];
  for (let i = lines.length - 1; i >= 0 && kept.length < LAST_WORDS_LINES; i--) {
    if (lines[i]!.trim() !== '') kept.unshift(lines[i]!);
  }
  return kept.join('\n');
}

/** CPU evidence: the RLIMIT_CPU soft limit and the guest's own CPU time as last sampled from /proc. */
export interface CpuEvidence {
  seconds: number;
  usedSeconds: number | undefined;
}

/** How far below the soft limit a sample may lie (sampling period plus clock-tick rounding). */
const CPU_SAMPLE_SLACK_SECONDS = 0.3;

/**
 * The limit that explains a failed exit, when it can be known. Undefined for a
 * clean exit or an unexplained one. What is trusted, and why:
 *
 * - `cpu-time` only when the guest died of SIGXCPU or a SIGKILL we did not send
 *   *and* the host itself saw it spend the CPU seconds (`cpu.usedSeconds`, read
 *   from /proc while it ran). A guest that signals itself, or exits with status
 *   137 after idling, burns no CPU and gets no label.
 * - `file-size` from SIGXFSZ: the kernel's signal (outside bwrap, whose init
 *   ignores it), though a guest could send it to itself.
 * - `memory`, `file-size`, `processes` from stderr: only the guest's last words
 *   (its last three non-empty lines) are read, so earlier logging or an earlier
 *   request's output does not label a later, unrelated failure. The guest
 *   writes those lines, so a hostile body can choose the label of its *own*
 *   failure; it can never turn a clean exit into a failure, or a failure into
 *   anything but Runtime. Treat these three as a diagnostic, not as evidence.
 *
 * The caller passes no label through for `trusted`: it sets no rlimits.
 */
export function explainExit(
  exitCode: number | null,
  signal: string | null,
  stderrTail: string,
  cpu?: CpuEvidence,
): ResourceLimit | undefined {
  if (exitCode === 0 && signal === null) return undefined;
  if (signal === 'SIGXCPU' || signal === 'SIGKILL') {
    // A namespace's pid 1 ignores SIGXCPU, so under bwrap the hard limit's SIGKILL
    // (a second later) is what ends it; either way only spent CPU proves the limit.
    const spent =
      cpu !== undefined &&
      cpu.seconds > 0 &&
      cpu.usedSeconds !== undefined &&
      cpu.usedSeconds >= cpu.seconds - CPU_SAMPLE_SLACK_SECONDS;
    if (spent) return 'cpu-time';
  }
  if (signal === 'SIGXFSZ') return 'file-size';
  const words = lastWords(stderrTail);
  if (MEMORY.test(words)) return 'memory';
  if (FILE_SIZE.test(words)) return 'file-size';
  if (PROCESSES.test(words)) return 'processes';
  return undefined;
}
