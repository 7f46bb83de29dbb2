import { constants } from 'node:os';
import type { ResourceLimit } from '@improv/extfn-core';

const SIGNAL_NAMES = Object.fromEntries(
  Object.entries(constants.signals).map(([name, number]) => [number, name]),
) as Record<number, string>;

/** bwrap reports a command killed by signal N as exit status 128 + N. */
export function signalFromBwrapStatus(exitCode: number | null): string | null {
  if (exitCode === null || exitCode <= 128 || exitCode > 128 + 64) return null;
  return SIGNAL_NAMES[exitCode - 128] ?? null;
}

// What interpreters and libc print when a limit refuses them (checked in the tail only).
const MEMORY =
  /MemoryError|Cannot allocate memory|cannot allocate (?:vector|memory)|out of memory|std::bad_alloc|OutOfMemoryError/i;
const FILE_SIZE = /File too large|EFBIG/;
const PROCESSES =
  /Resource temporarily unavailable|\[Errno 11\]|fork: retry|[Cc]an't fork|Cannot fork|EAGAIN/;

/**
 * The limit that explains a failed exit, when it can be known: the signal the
 * kernel sends for CPU time and file size, otherwise what the interpreter
 * printed last on stderr. Undefined for a clean exit or an unexplained one.
 */
export function explainExit(
  exitCode: number | null,
  signal: string | null,
  stderrTail: string,
  cpu?: { seconds: number; elapsedMs: number },
): ResourceLimit | undefined {
  if (exitCode === 0 && signal === null) return undefined;
  if (signal === 'SIGXCPU') return 'cpu-time';
  // A namespace's pid 1 ignores SIGXCPU, so under bwrap the hard limit's SIGKILL
  // is what ends it; we did not send it (that would be a Timeout), and nothing
  // else on the host does, once at least the CPU seconds have passed.
  if (signal === 'SIGKILL' && cpu && cpu.seconds > 0 && cpu.elapsedMs >= cpu.seconds * 1000) {
    return 'cpu-time';
  }
  if (signal === 'SIGXFSZ') return 'file-size';
  const tail = stderrTail.slice(-2048);
  if (MEMORY.test(tail)) return 'memory';
  if (FILE_SIZE.test(tail)) return 'file-size';
  if (PROCESSES.test(tail)) return 'processes';
  return undefined;
}
