/**
 * The fix texts of Sandbox errors, in one place. A fix says what the operator
 * can do to get the protection back; it never advises a weaker policy
 * (IMPROV_EXTFN_ALLOW_UNSANDBOXED, IMPROV_EXTFN_TRUSTED): those are the
 * operator's own decision, documented in the README, not a remedy.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const FIX_NO_BWRAP =
  'install bubblewrap 0.8 or later (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)';

export const FIX_OLD_BWRAP =
  'upgrade bubblewrap to 0.8 or later (it has --disable-userns); Debian 12 and Ubuntu 24.04 ship one';

export const FIX_NAMESPACES =
  'allow unprivileged user namespaces: sysctl -w user.max_user_namespaces=15000, and on older ' +
  'Debian kernels sysctl -w kernel.unprivileged_userns_clone=1; in a container, allow ' +
  'unshare/clone with CLONE_NEWUSER in its seccomp profile (or run the host as root there)';

export const FIX_UTIL_LINUX = 'install util-linux (it provides prlimit and setpriv)';

export const FIX_PLATFORM = 'run on Linux with bubblewrap and util-linux installed';

export const FIX_INTERPRETER =
  'install the interpreter where an unprivileged user can read it (under /usr or /opt) and pass its real path';

export const FIX_INTERPRETER_TREE =
  'install the interpreter in a prefix of its own (e.g. /opt/python-3.12, ~/.pyenv/versions/3.12.1, ' +
  'a conda environment) and pass its real path: a directory holding a home, /root or the ' +
  'working directory is never bound into the sandbox';

export const FIX_READ_ONLY_PATH =
  'pass a narrower directory: one that holds no home directory, /root or the working directory';

export const FIX_DESCRIPTORS =
  'start the host with only stdin, stdout and stderr open, or install perl so they can be closed';

/** The host's hard limits are below those the sandbox sets (only root may raise a hard limit). */
export const FIX_HARD_LIMIT =
  'raise the host process’s hard limits to at least the sandbox’s (ulimit -H; LimitNOFILE=, ' +
  'LimitCPU=, LimitFSIZE=, LimitAS= in a systemd unit), or pass the runner lower limits';

export const FIX_CGROUP =
  'check that the cgroup hierarchy is writable by this process and not out of cgroups; `improv-extfn doctor` shows where trees go';

export const FIX_UID_LEASE = 'make /run writable for root, or run the host as an unprivileged user';

/**
 * RLIMIT_NPROC counts every process of a real uid: on a non-root host without
 * a cgroup the sandbox shares it with the host user, so a busy tree (or the
 * user's own processes) can exhaust it.
 */
export const FIX_PROCESS_LIMIT =
  'the host user’s process limit (RLIMIT_NPROC, shared by all its processes) was reached: run ' +
  'fewer calls at once or raise it (ulimit -u, LimitNPROC= in a systemd unit); run the host as ' +
  'root or in a delegated cgroup v2 subtree so each tree gets a process limit of its own';

/** Where the AppArmor profile for bubblewrap ships (packages/sandbox/apparmor/bwrap). */
export const APPARMOR_PROFILE = fileURLToPath(new URL('../apparmor/bwrap', import.meta.url));

/** The sysctl through which Ubuntu 23.10+ restricts unprivileged user namespaces. */
export const APPARMOR_USERNS_SYSCTL = '/proc/sys/kernel/apparmor_restrict_unprivileged_userns';

/**
 * The narrow fix for Ubuntu's AppArmor restriction: let bubblewrap alone
 * create user namespaces, rather than lifting the restriction host-wide.
 */
export function fixAppArmor(bwrap = '/usr/bin/bwrap'): string {
  const edit =
    bwrap === '/usr/bin/bwrap'
      ? ''
      : ` (the profile names /usr/bin/bwrap: replace it with ${bwrap} first)`;
  return (
    'allow bubblewrap, and only it, to create user namespaces with the AppArmor profile shipped ' +
    `in @improv/extfn-sandbox${edit}: sudo install -m 0644 ${APPARMOR_PROFILE} ` +
    '/etc/apparmor.d/improv-extfn-bwrap && sudo apparmor_parser -r /etc/apparmor.d/improv-extfn-bwrap'
  );
}

/** The sysctl's value here ('1' = restricted), undefined where the kernel has none. */
export function readAppArmorSysctl(): string | undefined {
  try {
    return readFileSync(APPARMOR_USERNS_SYSCTL, 'utf8').trim();
  } catch {
    return undefined;
  }
}

/** How bubblewrap reports the AppArmor restriction (Ubuntu 23.10+, bubblewrap 0.8–0.11). */
const APPARMOR_MESSAGE = /setting up uid map: Permission denied/;

/** Whether a failure is Ubuntu's AppArmor user-namespace restriction. */
export function isAppArmorUsernsBlock(message: string, sysctl?: string): boolean {
  if (APPARMOR_MESSAGE.test(message)) return true;
  // the sysctl set, and bwrap refused while creating the namespace's uid map or the namespace
  return sysctl?.trim() === '1' && /uid map|Creating new namespace failed/.test(message);
}

/** The fix for a sandbox that failed before the interpreter ran, from bwrap's or exec's message. */
export function fixForSetupFailure(
  message: string,
  sysctl = readAppArmorSysctl(),
  bwrap?: string,
): string {
  if (isAppArmorUsernsBlock(message, sysctl)) return fixAppArmor(bwrap);
  // the chain's own shell (chain-shell.ts) or prlimit, before bwrap
  if (/^extfn-chain: inherited descriptor/.test(message)) return FIX_DESCRIPTORS;
  if (/ulimit: error setting limit|prlimit: failed to set/.test(message)) return FIX_HARD_LIMIT;
  if (/Resource temporarily unavailable|EAGAIN/.test(message)) return FIX_PROCESS_LIMIT;
  if (
    /namespace|uid map|setns|unshare|Operation not permitted|No space left on device/.test(message)
  )
    return FIX_NAMESPACES;
  if (/source path|Permission denied|execute|No such file/i.test(message)) return FIX_INTERPRETER;
  return FIX_NAMESPACES;
}
