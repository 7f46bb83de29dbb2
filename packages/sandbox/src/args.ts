/**
 * The command lines the sandbox is assembled from: bubblewrap's (namespaces,
 * mounts, seccomp), and the longer chain's prlimit (rlimits) and gate (holds
 * a tree until it sits in its cgroup), used where the one shell of
 * chain-shell.ts cannot be. Pure functions of the limits and binds.
 */
import { systemBindArgs } from './binds.js';
import type { SandboxLimits } from './limits.js';
import { seccompArch } from './seccomp.js';

/**
 * The two writable places share one budget, `tmpfsBytes`: /dev/shm gets a
 * quarter (POSIX semaphores and shared memory need little), /tmp the rest.
 */
export function tmpfsSizes(tmpfsBytes: number): { tmp: number; shm: number } {
  const page = 4096;
  const shm = Math.floor(tmpfsBytes / 4 / page) * page;
  return { tmp: tmpfsBytes - shm, shm };
}

/** Where a zygote's directory (its socket, the strict filter, shared files) is bound inside. */
export const ZYGOTE_GUEST_DIR = '/run/extfn-zygote';

/**
 * `zygoteDir`: a Python zygote's tree (zygote.ts), whose host directory is
 * bound read-write at ZYGOTE_GUEST_DIR; every other tree passes none.
 */
export function bwrapArgs(
  limits: SandboxLimits,
  binds: readonly string[],
  zygoteDir?: string,
): string[] {
  const sizes = tmpfsSizes(limits.tmpfsBytes);
  const args = [
    '--unshare-all',
    '--unshare-user',
    // No nested user namespaces: the seccomp filter refuses unshare, setns,
    // clone with namespace flags and clone3; only without it does bwrap need to
    // enforce that itself, at the price of one more user namespace (~1 ms).
    ...(seccompArch() ? [] : ['--disable-userns']),
    '--die-with-parent',
    '--new-session',
    // The guest is the namespace's pid 1 (no bwrap init): bwrap's init would
    // outlive bwrap by a moment, be reparented to the host's init and, where
    // that reaps late or never (some containers, this CI), linger as a zombie.
    '--as-pid-1',
    ...systemBindArgs(),
    '--proc',
    '/proc',
    '--dev',
    '/dev',
    // no pseudo-terminals: bwrap's devpts instance lets anyone open ptmx, and
    // every instance but the host's first shares kernel.pty.max less its
    // reserve, so one body holding thousands would deny other containers
    // theirs. A nodev bind makes opening /dev/ptmx fail with EACCES.
    '--ro-bind',
    '/dev/null',
    '/dev/pts/ptmx',
    '--size',
    String(sizes.tmp),
    '--tmpfs',
    '/tmp',
    '--size',
    String(sizes.shm),
    '--tmpfs',
    '/dev/shm',
    // an empty, read-only /home: what a program that looks there expects to find
    '--dir',
    '/home',
  ];
  for (const path of binds) args.push('--ro-bind', path, path);
  if (zygoteDir !== undefined) args.push('--bind', zygoteDir, ZYGOTE_GUEST_DIR);
  // bwrap builds / and /dev on tmpfs without a size and owned by the guest's uid:
  // left writable they would let a body fill the host's memory file by file
  args.push('--remount-ro', '/dev', '--remount-ro', '/');
  args.push('--chdir', '/tmp');
  if (seccompArch()) args.push('--seccomp', '3');
  return args;
}

/**
 * prlimit's arguments. `nproc` false leaves RLIMIT_NPROC as the host has it
 * (a non-root restricted tree gets its own inside the user namespace instead).
 */
export function prlimitArgs(prlimit: string, limits: SandboxLimits, nproc: boolean): string[] {
  const args = [
    prlimit,
    `--as=${limits.memoryBytes}`,
    ...(nproc ? [`--nproc=${limits.processes}`] : []),
    `--nofile=${limits.openFiles}`,
    `--fsize=${limits.fileSizeBytes}`,
    '--core=0',
  ];
  // soft limit sends SIGXCPU (which names the cause), the hard one a second later SIGKILL
  if (limits.cpuSeconds > 0) args.push(`--cpu=${limits.cpuSeconds}:${limits.cpuSeconds + 1}`);
  args.push('--');
  return args;
}

/**
 * RLIMIT_NPROC set inside bwrap's user namespace. Since Linux 5.14 it is
 * counted per (user namespace, uid): inside, it counts this tree alone, so
 * a fork bomb stops at `processes` without eating into the host user's
 * other trees (outside, a non-root host user's count is shared by all).
 */
export function innerNprocArgs(prlimit: string, processes: number): string[] {
  return [prlimit, `--nproc=${processes}`, '--'];
}

/**
 * A tree must be in its cgroup before the body runs: the chain starts with
 * a shell that waits for one line on stdin, written once the host has moved
 * it, and then execs the rest (children inherit the cgroup).
 */
export function cgroupGateArgs(shell: string): string[] {
  return [shell, '-c', 'read -r _ || exit 125; exec "$@"', 'extfn-cgroup-gate'];
}
