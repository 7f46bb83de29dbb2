import { randomBytes } from 'node:crypto';
import { lstatSync, readdirSync, readFileSync, readlinkSync, realpathSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import type { Readable, Writable } from 'node:stream';
import { ExtFnError, type ResourceLimit } from '@improv/extfn-core';
import { execa } from 'execa';
import { signalFromBwrapStatus } from './explain.js';
import {
  closeDescriptorsArgs,
  findExecutable,
  interpreterPrefix,
  leakingDescriptorsCached,
  SYSTEM_DIRECTORIES,
} from './host.js';
import type { SandboxLimits } from './limits.js';
import type { SandboxPolicy } from './policy.js';
import { seccompArch, seccompProgram } from './seccomp.js';
import { hostTools } from './tools.js';
import { busyUids, hostIsRoot, leaseUid, releaseUid } from './uid-pool.js';

/** How a sandboxed process tree ended. */
export interface SandboxExit {
  exitCode: number | null;
  signal: string | null;
  limit?: ResourceLimit;
}

export interface LaunchOptions {
  command: string;
  args: readonly string[];
  env: Readonly<Record<string, string>> | undefined;
  policy: SandboxPolicy;
  limits: SandboxLimits;
  readOnlyPaths: readonly string[];
  bwrap: string | undefined;
  functionName: string;
}

/** The base environment: nothing of the host's, whatever it holds. */
export const BASE_ENV = Object.freeze({ HOME: '/tmp', PATH: '/usr/bin:/bin', LANG: 'C.UTF-8' });
/** Marks every process of one tree where no uid or pid namespace can (trusted, non-root hosts). */
const RUN_TOKEN_VARIABLE = 'IMPROV_EXTFN_SANDBOX_RUN';

const FIX_INTERPRETER =
  'install the interpreter where an unprivileged user can read it (under /usr or /opt) and pass its real path';

let seccompBytes: Uint8Array | undefined;

let topLevel: string[] | undefined;

function topLevelBinds(): string[] {
  if (topLevel) return topLevel;
  const out: string[] = [];
  for (const dir of SYSTEM_DIRECTORIES) out.push('--ro-bind', dir, dir);
  // /bin, /lib… are symlinks into /usr on merged-/usr systems, real directories elsewhere
  for (const top of ['/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32']) {
    try {
      const stat = lstatSync(top);
      if (stat.isSymbolicLink()) out.push('--symlink', readlinkSync(top), top);
      else if (stat.isDirectory()) out.push('--ro-bind', top, top);
    } catch {}
  }
  topLevel = out;
  return out;
}

function bwrapArgs(options: LaunchOptions, extraBinds: readonly string[]): string[] {
  const size = String(options.limits.tmpfsBytes);
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
    ...topLevelBinds(),
    '--proc',
    '/proc',
    '--dev',
    '/dev',
    '--size',
    size,
    '--tmpfs',
    '/tmp',
    '--size',
    size,
    '--tmpfs',
    '/dev/shm',
  ];
  for (const path of extraBinds) args.push('--ro-bind', path, path);
  // bwrap builds / and /dev on tmpfs without a size and owned by the guest's uid:
  // left writable they would let a body fill the host's memory file by file
  args.push('--remount-ro', '/dev', '--remount-ro', '/');
  args.push('--chdir', '/tmp');
  if (seccompArch()) args.push('--seccomp', '3');
  return args;
}

function prlimitArgs(prlimit: string, limits: SandboxLimits): string[] {
  const args = [
    prlimit,
    `--as=${limits.memoryBytes}`,
    `--nproc=${limits.processes}`,
    `--nofile=${limits.openFiles}`,
    `--fsize=${limits.fileSizeBytes}`,
    '--core=0',
  ];
  // soft limit sends SIGXCPU (which names the cause), the hard one a second later SIGKILL
  if (limits.cpuSeconds > 0) args.push(`--cpu=${limits.cpuSeconds}:${limits.cpuSeconds + 1}`);
  args.push('--');
  return args;
}

/** A started tree: the raw child plus the means to end it. */
export interface Launched {
  pid: number | undefined;
  stdin: Writable;
  stdout: Readable;
  stderr: Readable;
  exited: Promise<LaunchExit>;
  kill(): Promise<void>;
}

/** The exit as launch sees it: the chain's own failure, and the guest's CPU time as last sampled. */
export type LaunchExit = SandboxExit & { setupError?: string; cpuUsedSeconds?: number };

function sandboxError(message: string, fix: string, functionName: string, cause?: unknown) {
  return ExtFnError.sandbox(message, fix, { functionName, cause });
}

/** Every process whose environment carries `token`, killed until none is left. */
async function sweepToken(token: string, firstPid: number): Promise<void> {
  const needle = `${RUN_TOKEN_VARIABLE}=${token}\0`;
  // descendants got pids after the tree's first one, unless the counter wrapped
  let lastPid = Number.POSITIVE_INFINITY;
  try {
    lastPid = Number(readFileSync('/proc/sys/kernel/ns_last_pid', 'utf8'));
  } catch {}
  const from = lastPid >= firstPid ? firstPid : 0;
  for (let pass = 0; pass < 50; pass++) {
    let found = 0;
    for (const name of readdirSync('/proc')) {
      const pid = Number(name);
      if (!(pid >= from) || pid === process.pid) continue;
      try {
        if (!readFileSync(`/proc/${name}/environ`, 'latin1').includes(needle)) continue;
        process.kill(pid, 'SIGKILL');
        found++;
      } catch {}
    }
    if (found === 0) return;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

function signal(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {}
}

/**
 * The fields of /proc/PID/stat after the command name, which may itself hold
 * spaces and parentheses; index 0 is proc(5)'s field 3 (state), 1 the ppid.
 */
function statFields(pid: number | string): string[] {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
}

/** Direct children of a process (Linux 3.5+ with CONFIG_PROC_CHILDREN; else a /proc scan). */
function childrenOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8')
      .split(' ')
      .filter(Boolean)
      .map(Number);
  } catch {}
  const out: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (Number(statFields(name)[1]) === pid) out.push(Number(name));
    } catch {}
  }
  return out;
}

/**
 * CPU time (user + system, all threads) of a live process in seconds, from
 * /proc/PID/stat; USER_HZ is 100 on every Linux ABI Node runs on.
 */
export function cpuSecondsOf(pid: number): number | undefined {
  try {
    const fields = statFields(pid);
    const ticks = Number(fields[11]) + Number(fields[12]);
    return Number.isFinite(ticks) ? ticks / 100 : undefined;
  } catch {
    return undefined;
  }
}

/** How often the guest's CPU time is sampled once RLIMIT_CPU could bind. */
const CPU_SAMPLE_MS = 100;

/**
 * Samples the guest's CPU time, so a death by SIGXCPU/SIGKILL is called a CPU
 * limit only when the host saw the CPU spent (a guest can signal itself or exit
 * with 137). CPU time cannot outrun wall time times the cores, so the next
 * sample waits until the limit could first bind: for most calls there is none,
 * and an idle warm worker is looked at rarely; near the limit, every 100 ms.
 */
function sampleCpu(guest: () => number | undefined, cpuSeconds: number) {
  const cores = availableParallelism();
  let used: number | undefined;
  let timer: NodeJS.Timeout | undefined;
  const schedule = () => {
    const remainingMs = (cpuSeconds - (used ?? 0)) * 1000;
    timer = setTimeout(tick, Math.max(CPU_SAMPLE_MS, remainingMs / cores - 2 * CPU_SAMPLE_MS));
    timer.unref();
  };
  const tick = () => {
    const pid = guest();
    const seconds = pid === undefined ? undefined : cpuSecondsOf(pid);
    if (seconds !== undefined) used = seconds;
    schedule();
  };
  schedule();
  return {
    stop: () => clearTimeout(timer),
    get used() {
      return used;
    },
  };
}

type ExecaChild = ReturnType<typeof execa>;

/**
 * execa's result once stdout/stderr have ended. Every holder of the pipes is
 * dead by now; should one have escaped anyway, stop waiting after a second.
 */
async function settleStreams(child: ExecaChild) {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, 1000);
  });
  const result = await Promise.race([child, late.then(() => undefined)]);
  clearTimeout(timer);
  if (result) return result;
  child.stdout?.destroy();
  child.stderr?.destroy();
  return await child;
}

export function launch(options: LaunchOptions): Launched {
  const { policy, limits, functionName } = options;
  const tools = hostTools();
  const command = findExecutable(options.command);
  if (!command) {
    throw sandboxError(
      `cannot start ${options.command}: not found on the host PATH or not executable`,
      FIX_INTERPRETER,
      functionName,
    );
  }
  const root = hostIsRoot();
  const chain: string[] = [];
  if (policy !== 'trusted') {
    if (!tools.prlimit) {
      throw sandboxError(
        'prlimit (util-linux) is missing, so resource limits cannot be set',
        'install util-linux, or set IMPROV_EXTFN_TRUSTED=1 to run without limits',
        functionName,
      );
    }
    if (!tools.setpriv) {
      throw sandboxError(
        'setpriv (util-linux) is missing, so privileges cannot be dropped',
        'install util-linux, or set IMPROV_EXTFN_TRUSTED=1 to run with the host’s privileges',
        functionName,
      );
    }
    chain.push(...prlimitArgs(tools.prlimit, limits));
  }
  const restricted = policy === 'restricted';
  if (!restricted && policy !== 'trusted' && tools.setpriv) {
    // Node's spawn already switched uid/gid and dropped supplementary groups (see
    // `uid` below); without bwrap nothing else sets no_new_privs, so setuid
    // binaries (su, mount…) would regain root: forbid that. Under bwrap, bwrap
    // sets it, and one exec less keeps the cold start short.
    chain.push(tools.setpriv, '--no-new-privs', '--');
  }
  const leaking = leakingDescriptorsCached();
  if (leaking.length > 0) {
    if (tools.perl)
      chain.push(...closeDescriptorsArgs(tools.perl, restricted && seccompArch() ? 3 : 2));
    else if (restricted) {
      throw sandboxError(
        `this process inherited open file descriptors (${leaking.join(', ')}) that every child would see`,
        'start the host with only stdin, stdout and stderr open, or install perl so they can be closed',
        functionName,
      );
    }
  }
  let seccompInput: Uint8Array | undefined;
  if (restricted) {
    if (!options.bwrap) {
      throw sandboxError('bubblewrap (bwrap) is not installed', FIX_NO_BWRAP, functionName);
    }
    const binds = new Set<string>();
    const prefix = interpreterPrefix(command);
    if (prefix) binds.add(prefix);
    for (const path of options.readOnlyPaths) {
      try {
        binds.add(realpathSync(path));
      } catch (cause) {
        throw sandboxError(`cannot bind ${path}`, 'pass an existing path', functionName, cause);
      }
    }
    chain.push(options.bwrap, ...bwrapArgs(options, [...binds]), '--');
    if (seccompArch()) {
      seccompBytes ??= seccompProgram();
      seccompInput = seccompBytes;
    }
  }
  chain.push(command, ...options.args);

  // leased last, so no check above has to hand it back before throwing
  let uid: number | undefined;
  if (root && policy !== 'trusted') {
    try {
      uid = leaseUid();
    } catch (cause) {
      throw sandboxError(
        `cannot lease a uid for the sandbox (${(cause as Error).message})`,
        'make /run writable for root, or run the host as an unprivileged user',
        functionName,
        cause,
      );
    }
  }
  const token = !restricted && uid === undefined ? randomBytes(12).toString('hex') : undefined;
  const env: Record<string, string> = { ...BASE_ENV, ...options.env };
  if (token) env[RUN_TOKEN_VARIABLE] = token;

  const child = execa(chain[0]!, chain.slice(1), {
    // fd 3 carries the seccomp program to bwrap (read once, then closed by bwrap)
    stdio: seccompInput ? ['pipe', 'pipe', 'pipe', seccompInput] : ['pipe', 'pipe', 'pipe'],
    env,
    extendEnv: false,
    cwd: '/tmp',
    detached: true, // own process group, so the group can be killed as a whole
    buffer: false,
    reject: false,
    encoding: 'buffer',
    stripFinalNewline: false,
    // root host: the whole chain runs as the tree's own uid (setgid, setgroups([]),
    // setuid in the child before exec), which also clears every capability
    ...(uid === undefined ? {} : { uid, gid: uid }),
  });
  const pid = child.pid;

  let exitedFlag = false;
  // the guest: bwrap's one child (the namespace's pid 1), else the child itself after its execs
  let guestPid: number | undefined;
  const guest = () => {
    if (pid === undefined || exitedFlag) return undefined;
    if (!restricted) return pid;
    guestPid ??= childrenOf(pid)[0];
    return guestPid;
  };
  const cpu =
    policy !== 'trusted' && limits.cpuSeconds > 0 ? sampleCpu(guest, limits.cpuSeconds) : undefined;
  const killTree = async (): Promise<void> => {
    if (pid === undefined) return;
    const pending: Array<Promise<unknown>> = [];
    if (restricted) {
      // Kill bwrap's child, the pid namespace's pid 1: the kernel then kills every
      // process inside, and bwrap itself exits and is reaped by us. Killing bwrap
      // first would orphan that child, and a host init that reaps late or never (some
      // containers) would keep it as a zombie charged to the uid.
      const inits = exitedFlag ? [] : childrenOf(pid);
      for (const init of inits) signal(init);
      if (inits.length === 0 && !exitedFlag) signal(pid);
      else if (!exitedFlag) {
        const fallback = setTimeout(() => {
          if (!exitedFlag) signal(pid);
        }, 250);
        pending.push(exitEvent.finally(() => clearTimeout(fallback)));
      }
      return void (await Promise.all(pending));
    }
    if (uid !== undefined && tools.kill && (!exitedFlag || busyUids(uid, uid + 1).size > 0)) {
      // kill(-1) as the tree's own uid: every process of it, setsid() ones too, atomically
      pending.push(
        execa(tools.kill, ['-KILL', '-1'], {
          uid,
          gid: uid,
          reject: false,
          extendEnv: false,
          env: BASE_ENV,
          cwd: '/',
          stdin: 'ignore',
        }),
      );
    }
    signal(-pid); // the group outlives its leader while members remain
    if (!exitedFlag) signal(pid);
    if (token) pending.push(sweepToken(token, pid));
    await Promise.all(pending);
  };

  let setupHead = '';
  const stderrStream = child.stderr as Readable;
  stderrStream.on('data', (chunk: Buffer) => {
    if (setupHead.length < 512) setupHead += chunk.toString('utf8', 0, 512);
  });

  // 'exit' fires when the direct child ends even while a grandchild still holds
  // the pipes; execa's own promise would wait for those holders.
  const exitEvent = new Promise<void>((resolve) => {
    child.once('exit', () => resolve());
    child.once('error', () => resolve());
  });
  const exited = (async () => {
    await Promise.race([exitEvent, child]);
    exitedFlag = true;
    cpu?.stop();
    // the direct child is gone; make sure nothing it started survives it
    if (!restricted) await killTree();
    const result = await settleStreams(child);
    let clean = true;
    if (uid !== undefined && !restricted) {
      // orphans the host's init has not reaped yet keep the uid busy (zombies count toward NPROC)
      let busy = busyUids(uid, uid + 1).size > 0;
      for (let i = 0; busy && i < 20; i++) {
        await new Promise((resolve) => setTimeout(resolve, 10));
        busy = busyUids(uid, uid + 1).size > 0;
      }
      clean = !busy;
    }
    if (uid !== undefined) releaseUid(uid, clean);
    let exitCode = typeof result.exitCode === 'number' ? result.exitCode : null;
    let signalName: string | null = result.signal ?? null;
    if (restricted && signalName === null) {
      // bwrap reports a guest killed by signal N as status 128 + N: report it the
      // way an unsandboxed child's death is reported (no exit code, a signal)
      signalName = signalFromBwrapStatus(exitCode);
      if (signalName !== null) exitCode = null;
    }
    const out: LaunchExit = { exitCode, signal: signalName };
    if (cpu?.used !== undefined) out.cpuUsedSeconds = cpu.used;
    const spawnFailure = result.failed && exitCode === null && signalName === null;
    if (spawnFailure || /^(bwrap|setpriv|prlimit|exec \/):? /.test(setupHead)) {
      // the chain failed before the interpreter ran (a status of 1 from bwrap, 126/127 from exec)
      if (spawnFailure || exitCode === 1 || exitCode === 126 || exitCode === 127) {
        out.setupError = spawnFailure
          ? String(result.message)
          : setupHead.split('\n')[0] || 'unknown';
      }
    }
    return out;
  })();

  return {
    pid,
    stdin: child.stdin as Writable,
    stdout: child.stdout as Readable,
    stderr: stderrStream,
    exited,
    async kill() {
      await killTree();
      await exited;
    },
  };
}

export const FIX_NO_BWRAP =
  'install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap), ' +
  'or set IMPROV_EXTFN_ALLOW_UNSANDBOXED=1 to accept rlimits, a uid drop and a deadline without namespaces';

export const FIX_NAMESPACES =
  'enable unprivileged user namespaces (sysctl user.max_user_namespaces=15000 and, on Debian/Ubuntu, ' +
  'kernel.unprivileged_userns_clone=1 / kernel.apparmor_restrict_unprivileged_userns=0; in a container ' +
  'allow them in its seccomp profile), or set IMPROV_EXTFN_ALLOW_UNSANDBOXED=1 to run without namespaces';

export { FIX_INTERPRETER };
