/**
 * Starts one sandboxed process tree and hands back its pipes, its exit and
 * the means to end it. This is the only place a tree is started; it puts
 * together what the other modules decide: binds, argument builders, uid
 * lease, cgroup, kill strategies and exit classification.
 */
import { type StdioOptions, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chownSync, fchownSync, readFileSync } from 'node:fs';
import type { Readable, Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { ExtFnError } from '@improv/extfn-core';
import { bwrapArgs, cgroupGateArgs, innerNprocArgs, prlimitArgs } from './args.js';
import { hostBinds, isSystemPath } from './binds.js';
import { TreeCgroup } from './cgroup.js';
import {
  type ChainShellStage,
  chainShell,
  chainShellArgs,
  innerNprocShellArgs,
  shellExpresses,
} from './chain-shell.js';
import { classifyExit, type TreeExit } from './exit.js';
import {
  FIX_CGROUP,
  FIX_DESCRIPTORS,
  FIX_INTERPRETER,
  FIX_NO_BWRAP,
  FIX_UID_LEASE,
  FIX_UTIL_LINUX,
} from './fixes.js';
import { closeDescriptorsArgs, findExecutableCached, leakingDescriptorsCached } from './host.js';
import { removeIpcOf } from './ipc.js';
import {
  BASE_ENV,
  killNamespace,
  killToken,
  killUid,
  RUN_TOKEN_VARIABLE,
  sigkill,
} from './kill.js';
import { resolveLimits, type SandboxLimits } from './limits.js';
import { watchTreeMemory } from './memory-watch.js';
import type { SandboxPolicy } from './policy.js';
import { childrenOf, processesOfUid, sampleCpu } from './proc.js';
import { seccompArch, seccompProgram } from './seccomp.js';
import {
  type ChainProcess,
  type ChainSpawn,
  type ChainStatus,
  readySpawner,
  type Spawner,
} from './spawner.js';
import { openStdoutPipe, openStdoutPipeWith, type StdoutPipe } from './stdout-pipe.js';
import { hostTools } from './tools.js';
import type { SandboxOptions } from './types.js';
import { busyUids, hostIsRoot, leaseUid, releaseUid } from './uid-pool.js';

/** What launch needs: the caller's options, the policy in force, a name for errors. */
export type LaunchOptions = Omit<SandboxOptions, 'timeoutMs' | 'policy' | 'signal'> & {
  timeoutMs?: number;
  /** The policy in force (after any fallback the probe allowed). */
  policy: SandboxPolicy;
  functionName: string;
  /**
   * A Python zygote's tree (zygote.ts): this host directory bound read-write
   * at /run/extfn-zygote, the relaxed seccomp program. Only under `restricted`.
   */
  zygoteDir?: string;
};

/** A started tree: the raw pipes plus the means to end it. */
export interface Launched {
  pid: number | undefined;
  stdin: Writable;
  stdout: Readable;
  stderr: Readable;
  exited: Promise<TreeExit>;
  kill(): Promise<void>;
  /** The limits in force, defaults filled in. */
  limits: SandboxLimits;
  /** Whether the child and its pipes keep the host's event loop alive (Node's ref/unref). */
  holdEventLoop(hold: boolean): void;
  /** The tree's own uid (root host, confined): what owns the files it opens (zygote.ts). */
  uid?: number;
}

let seccompBytes: Uint8Array | undefined;
let zygoteSeccompBytes: Uint8Array | undefined;

/** Names the child's descriptor of `sharedFile` (the number depends on the chain). */
export const SHARED_FD_VARIABLE = 'IMPROV_EXTFN_SHARED_FD';

function sandboxError(message: string, fix: string, functionName: string, cause?: unknown) {
  return ExtFnError.sandbox(message, fix, { functionName, cause });
}

/**
 * A chain and the seccomp program for its bwrap. Named, not inferred: an
 * inferred type would be declared `Uint8Array<ArrayBufferLike>`, which
 * TypeScript before 5.7 cannot read in our published declarations.
 */
export interface BuiltChain {
  chain: string[];
  seccompInput: Uint8Array | undefined;
}

/**
 * The programs that run before the interpreter, each exec'ing the next, for
 * a tree spawned by a parent that leaks the descriptors `leaks` (the host's,
 * or the spawner's: none once it closed its own). `gate`: the chain first
 * waits for a line on stdin, written once the host has moved it into its
 * cgroup (a tree the spawner starts needs none: it follows the tree there
 * before handing it over). Exported for tests.
 */
export function buildChain(
  options: LaunchOptions,
  limits: SandboxLimits,
  command: string,
  gate: boolean,
  leaks: readonly number[],
): BuiltChain {
  const { policy, functionName } = options;
  const tools = hostTools();
  const restricted = policy === 'restricted';
  const confined = policy !== 'trusted';
  const root = hostIsRoot();
  if (confined && (!tools.prlimit || !tools.setpriv)) {
    throw sandboxError(
      `${tools.prlimit ? 'setpriv' : 'prlimit'} (util-linux) is missing, so the sandbox cannot be set up`,
      FIX_UTIL_LINUX,
      functionName,
    );
  }
  // keep the seccomp descriptor (bwrap's) and the shared file, the last of the child's own
  const keep = sharedFileFd(options, restricted) ?? (restricted && seccompArch() ? 3 : 2);
  // Non-root: RLIMIT_NPROC counts every process of the host user. Restricted
  // trees get theirs inside the user namespace (innerNprocArgs); unsandboxed
  // ones may add `processes` to what the user runs now (counted by a scan of
  // all of /proc, ~5 ms: only where the count is used).
  const outerNproc = root || !restricted;
  const processes =
    root || restricted
      ? limits.processes
      : processesOfUid(process.getuid?.() ?? 0) + limits.processes;
  const closer = (): string[] => {
    if (tools.perl) return closeDescriptorsArgs(tools.perl, keep);
    if (restricted) {
      throw sandboxError(
        `this process inherited open file descriptors (${leaks.join(', ')}) that every child would see`,
        FIX_DESCRIPTORS,
        functionName,
      );
    }
    return []; // as ever: unsandboxed without perl leaves them
  };
  const chain: string[] = [];
  const shell = confined ? chainShell() : undefined;
  const stage: ChainShellStage = {
    gate,
    memoryBytes: limits.memoryBytes,
    processes: outerNproc ? processes : undefined,
    openFiles: limits.openFiles,
    fileSizeBytes: limits.fileSizeBytes,
    cpuSeconds: limits.cpuSeconds,
    keep,
    refuseHigh: true,
  };
  const oneShell = shell !== undefined && shellExpresses(stage);
  if (oneShell) {
    // one shell: the gate, every rlimit, descriptors 3–9 closed (chain-shell.ts);
    // above 9 only Perl can close them
    const closing = leaks.some((fd) => fd > 9) ? closer() : [];
    // it refuses one above 9 unless Perl follows (or, as ever, unsandboxed without Perl)
    stage.refuseHigh = closing.length === 0 && (restricted || tools.perl !== undefined);
    chain.push(...chainShellArgs(shell, stage), ...closing);
  } else {
    if (gate) chain.push(...cgroupGateArgs(tools.sh ?? '/bin/sh'));
    if (confined) chain.push(...prlimitArgs(tools.prlimit!, { ...limits, processes }, outerNproc));
  }
  if (!restricted && confined) {
    // Node's spawn already switched uid/gid and dropped supplementary groups (see
    // `uid` below); without bwrap nothing else sets no_new_privs, so setuid
    // binaries (su, mount…) would regain root: forbid that. Under bwrap, bwrap
    // sets it, and one exec less keeps the cold start short.
    chain.push(tools.setpriv!, '--no-new-privs', '--');
  }
  if (!oneShell && leaks.length > 0) chain.push(...closer());
  let seccompInput: Uint8Array | undefined;
  if (restricted) {
    const bwrap = findExecutableCached(options.bwrapPath ?? 'bwrap');
    if (!bwrap) {
      throw sandboxError('bubblewrap (bwrap) is not installed', FIX_NO_BWRAP, functionName);
    }
    const binds = hostBinds(command, options.readOnlyPaths ?? [], functionName);
    chain.push(bwrap, ...bwrapArgs(limits, binds, options.zygoteDir), '--');
    if (!root) {
      // the shell is visible inside only from /usr
      chain.push(
        ...(oneShell && isSystemPath(shell)
          ? innerNprocShellArgs(shell, limits.processes)
          : innerNprocArgs(tools.prlimit!, limits.processes)),
      );
    }
    if (seccompArch()) {
      if (options.zygoteDir !== undefined) {
        zygoteSeccompBytes ??= seccompProgram({ zygote: true });
        seccompInput = zygoteSeccompBytes;
      } else {
        seccompBytes ??= seccompProgram();
        seccompInput = seccompBytes;
      }
    }
  }
  chain.push(command, ...(options.args ?? []));
  return { chain, seccompInput };
}

/** The child's descriptor for `options.sharedFile`: the first after stdio and bwrap's seccomp one. */
function sharedFileFd(options: LaunchOptions, restricted: boolean): number | undefined {
  if (options.sharedFile === undefined) return undefined;
  return restricted && seccompArch() ? 4 : 3;
}

function leaseTreeUid(functionName: string): number {
  try {
    return leaseUid();
  } catch (cause) {
    throw sandboxError(
      `cannot lease a uid for the sandbox (${(cause as Error).message})`,
      FIX_UID_LEASE,
      functionName,
      cause,
    );
  }
}

/** Resolves when `stream` has ended (or was destroyed). */
function streamEnded(stream: Readable): Promise<void> {
  if (stream.readableEnded || stream.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    stream.once('end', resolve);
    stream.once('close', resolve);
    stream.once('error', () => resolve());
  });
}

/**
 * Once the direct child has exited: its stdout and stderr have ended too.
 * Every holder of the pipes is dead by now; should one have escaped anyway,
 * stop waiting after a second.
 */
async function settleStreams(streams: Array<Readable | undefined>): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, 1000);
  });
  const present = streams.filter((stream): stream is Readable => stream !== undefined);
  await Promise.race([Promise.all(present.map(streamEnded)), late]);
  clearTimeout(timer);
  for (const stream of present) stream.destroy();
}

/** Everything decided before anything starts. */
interface Prepared {
  chain: string[];
  /** The interpreter's real path (the chain is rebuilt for another parent from it). */
  command: string;
  seccompInput: Uint8Array | undefined;
  limits: SandboxLimits;
  cgroup: TreeCgroup | undefined;
  /** The tree's own uid (root host, confined). */
  uid: number | undefined;
  restricted: boolean;
  /** What marks the tree's processes where no uid or namespace can (non-root, unsandboxed). */
  token: string | undefined;
  /** The chain waits for a line on stdin, written once the tree sits in its cgroup. */
  gated: boolean;
}

/**
 * Everything decided before anything starts, for a tree whose parent leaks
 * `leaks`; throws (leaving nothing behind) when it cannot be. `spawner`: the
 * spawner starts it and moves it into its cgroup, while it boots when its
 * boot is trusted (`trustedBoot`), else behind the chain's gate, which it
 * opens once the tree is in.
 */
function prepare(options: LaunchOptions, leaks: readonly number[], spawner: boolean): Prepared {
  const { policy, functionName } = options;
  const limits = resolveLimits(options.limits, options.timeoutMs);
  const command = findExecutableCached(options.command);
  if (!command) {
    throw sandboxError(
      `cannot start ${options.command}: not found on the host PATH or not executable`,
      FIX_INTERPRETER,
      functionName,
    );
  }
  const confined = policy !== 'trusted';
  // the cgroup gets the tree's whole budget: one process's worth plus its tmpfs
  let cgroup: TreeCgroup | undefined;
  try {
    if (confined)
      cgroup = TreeCgroup.create(limits.memoryBytes + limits.tmpfsBytes, limits.processes);
  } catch (cause) {
    const why = (cause as Error).message;
    throw sandboxError(`cannot create the tree's cgroup (${why})`, FIX_CGROUP, functionName, cause);
  }
  try {
    // A gate unless the spawner moves a tree whose boot is trusted while it boots.
    const gated = cgroup !== undefined && !(spawner && options.trustedBoot === true);
    const built = buildChain(options, limits, command, gated, leaks);
    // leased last, so no check above has to hand it back before throwing
    const uid = hostIsRoot() && confined ? leaseTreeUid(functionName) : undefined;
    const restricted = policy === 'restricted';
    const token = !restricted && uid === undefined ? randomBytes(12).toString('hex') : undefined;
    return { ...built, command, limits, cgroup, uid, restricted, token, gated };
  } catch (error) {
    void cgroup?.remove();
    throw error;
  }
}

/** What ends a tree and what is left to clean once it has ended. */
interface TreeHandles {
  pid: number | undefined;
  restricted: boolean;
  uid: number | undefined;
  token: string | undefined;
  cgroup: TreeCgroup | undefined;
  exitEvent: Promise<void>;
  exited: () => boolean;
}

/** The kill strategy for a tree, chosen by what the host knows of it. */
async function killTree(tree: TreeHandles): Promise<void> {
  const { pid, uid, token } = tree;
  if (pid === undefined) return;
  if (tree.restricted) return killNamespace(pid, tree.exited, tree.exitEvent);
  const kill = hostTools().kill;
  const pending: Array<Promise<unknown>> = [];
  if (uid !== undefined && kill && (!tree.exited() || busyUids(uid, uid + 1).size > 0)) {
    pending.push(killUid(kill, uid));
  }
  sigkill(-pid); // the group outlives its leader while members remain
  if (!tree.exited()) sigkill(pid);
  if (token) pending.push(killToken(token, pid));
  await Promise.all(pending);
}

/** After the tree's exit: what its cgroup saw, then the cgroup, SysV leftovers and the uid released. */
async function cleanUp(tree: TreeHandles, out: TreeExit): Promise<void> {
  const { cgroup, uid } = tree;
  if (cgroup) {
    if (cgroup.oomKilled()) out.oomKilled = true;
    if (cgroup.pidsRefused()) out.pidsRefused = true;
    await cgroup.remove();
  }
  if (uid === undefined) return;
  if (!tree.restricted) {
    // without an IPC namespace, what the uid made in SysV IPC would outlive the tree
    const ipcrm = hostTools().ipcrm;
    if (ipcrm) await removeIpcOf(ipcrm, uid);
  }
  // orphans the host's init has not reaped yet keep the uid busy (zombies count
  // toward NPROC); so does a namespace still dying after its bwrap was killed
  let busy = busyUids(uid, uid + 1).size > 0;
  for (let i = 0; busy && i < 20; i++) {
    await new Promise((resolve) => setTimeout(resolve, 10));
    busy = busyUids(uid, uid + 1).size > 0;
  }
  releaseUid(uid, !busy);
}

/**
 * Spawns the chain from this process: its own process group, the clean
 * environment, the tree's uid on a root host. The way until the spawner
 * (spawner.ts) is ready, or where it cannot run.
 */
function spawnDirect(spec: ChainSpawn): ChainProcess {
  // fd 3 carries the seccomp program to bwrap (read once, then closed by bwrap);
  // the shared file comes next (sharedFileFd)
  const stdio: StdioOptions = ['pipe', spec.stdout, 'pipe'];
  if (spec.fd3) stdio.push('pipe'); // written below
  if (spec.extra !== undefined) stdio.push(spec.extra);
  const child = spawn(spec.file, spec.args, {
    stdio,
    env: spec.env, // the whole environment: nothing of the host's
    cwd: '/tmp',
    detached: true, // own process group, so the group can be killed as a whole
    // root host: the whole chain runs as the tree's own uid (setgid, setgroups([]),
    // setuid in the child before exec), which also clears every capability
    ...(spec.uid === undefined ? {} : { uid: spec.uid, gid: spec.uid }),
  });
  // EPIPE once the tree has died: its end is reported through `exit`
  child.stdin?.on('error', () => {});
  const fd3 = child.stdio[3] as Writable | null | undefined;
  if (spec.fd3 && fd3) {
    fd3.on('error', () => {}); // the child may exit without reading it
    fd3.end(spec.fd3);
  }
  // 'exit' fires when the direct child ends even while a grandchild still holds the pipes
  const exit = new Promise<ChainStatus>((resolve) => {
    child.once('exit', (code, signal) =>
      resolve({ exitCode: code ?? undefined, signal: signal ?? undefined }),
    );
    child.once('error', (error) => resolve({ failed: true, message: error.message }));
  });
  return {
    pid: child.pid,
    stdin: child.stdin as Writable,
    stdout: spec.stdout === 'pipe' ? (child.stdout as Readable) : undefined,
    stderr: child.stderr as Readable,
    exit,
    ref: () => child.ref(),
    unref: () => child.unref(),
  };
}

/** What a tree is spawned with, once prepared: the chain, its environment and descriptors. */
function chainSpawn(
  options: LaunchOptions,
  prepared: Prepared,
  stdout: 'pipe' | number,
): ChainSpawn {
  const { chain, seccompInput, uid, token } = prepared;
  const env: Record<string, string> = { ...BASE_ENV, ...options.env };
  if (token) env[RUN_TOKEN_VARIABLE] = token;
  const sharedFd = sharedFileFd(options, prepared.restricted);
  if (sharedFd !== undefined) {
    env[SHARED_FD_VARIABLE] = String(sharedFd);
    // the child reopens it through /proc/self/fd (R): it must own it, as its stdout FIFO
    if (uid !== undefined) fchownSync(options.sharedFile!, uid, uid);
  }
  // a zygote's directory: its own (0700), where it reads the filter and dials the socket
  if (options.zygoteDir !== undefined && uid !== undefined) chownSync(options.zygoteDir, uid, uid);
  return {
    file: chain[0]!,
    args: chain.slice(1),
    env,
    uid,
    stdout,
    fd3: seccompInput,
    extra: options.sharedFile,
    cgroupProcs: prepared.cgroup?.procsFiles(),
    openGate: prepared.gated,
  };
}

/** Starts one tree from this process (synchronous: `launchSandboxed`). */
export function launch(options: LaunchOptions): Launched {
  const prepared = prepare(options, leakingDescriptorsCached(), false);
  // stdoutPipe: fd 1 a FIFO the child can reopen (see stdout-pipe.ts); else Node's socket
  const pipe = options.stdoutPipe ? openStdoutPipe(prepared.uid) : undefined;
  let child: ChainProcess;
  try {
    child = spawnDirect(chainSpawn(options, prepared, pipe?.writeFd ?? 'pipe'));
  } finally {
    pipe?.closeWriteEnd();
  }
  return started(options, prepared, pipe, child);
}

/**
 * How long the spawner may take to hand a tree over: a spawn and a cgroup
 * move, milliseconds (a few hundred on a loaded host). One that takes longer
 * is stopped from outside (SIGSTOP) or wedged: the tree starts directly
 * instead, and so does every tree until it hands one over again, rather than
 * each start waiting for it until its own deadline. Seconds, so that a busy
 * host does not count as one (its trees would only cost this process a fork).
 */
const SPAWNER_ANSWER_MS = 3_000;
/** A launch through the spawner went past SPAWNER_ANSWER_MS, and it has not answered since. */
let spawnerStalled = false;

/**
 * Starts one tree through the spawner once it is ready (so this process
 * does not fork), else as `launch` does. Should the spawner fail to start
 * it, or not answer within SPAWNER_ANSWER_MS, the tree starts directly.
 */
export async function launchAsync(options: LaunchOptions): Promise<Launched> {
  const spawner = spawnerStalled ? undefined : readySpawner();
  if (!spawner) return launch(options);
  let givenUp = false;
  const through = launchThrough(spawner, options, () => givenUp);
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), SPAWNER_ANSWER_MS);
  });
  try {
    const tree = await Promise.race([through, late]);
    if (tree) return tree;
  } finally {
    clearTimeout(timer);
  }
  givenUp = true;
  spawnerStalled = true;
  through.then(
    (tree) => {
      spawnerStalled = false;
      void tree.kill(); // late: nobody takes it
    },
    () => {
      spawnerStalled = false; // it answered (an error), or it died and the next one starts
    },
  );
  return launch(options);
}

/** `launchAsync` through a ready spawner; once `givenUp`, a failed spawn starts no tree instead. */
async function launchThrough(
  spawner: Spawner,
  options: LaunchOptions,
  givenUp: () => boolean,
): Promise<Launched> {
  const prepared = prepare(options, spawner.leaks, true);
  let pipe: StdoutPipe | undefined;
  let child: ChainProcess;
  try {
    pipe = options.stdoutPipe
      ? await openStdoutPipeWith(prepared.uid, (mkfifo, path) => spawner.mkfifo(mkfifo, path))
      : undefined;
    const stdout = pipe?.writeFd ?? 'pipe';
    child = await spawner.spawn(chainSpawn(options, prepared, stdout)).catch((error) => {
      if (givenUp()) throw error; // launchAsync started the tree directly already
      // from this process, whose own inherited descriptors the chain must close
      const { limits, command, cgroup } = prepared;
      const gated = cgroup !== undefined; // this process moves it, behind the gate (started())
      const direct = buildChain(options, limits, command, gated, leakingDescriptorsCached());
      return spawnDirect(chainSpawn(options, { ...prepared, ...direct, gated }, stdout));
    });
  } catch (error) {
    pipe?.closeWriteEnd();
    void prepared.cgroup?.remove();
    if (prepared.uid !== undefined) releaseUid(prepared.uid, true);
    throw error;
  }
  pipe?.closeWriteEnd();
  return started(options, prepared, pipe, child);
}

/** The started tree wired up: the cgroup gate, CPU sampling, stderr head, exit and kill. */
function started(
  options: LaunchOptions,
  prepared: Prepared,
  pipe: StdoutPipe | undefined,
  child: ChainProcess,
): Launched {
  const { policy } = options;
  const { restricted, limits, cgroup, uid, token } = prepared;
  const stdout = pipe?.stdout ?? (child.stdout as Readable);
  const { pid, stdin } = child;
  let gateError: string | undefined;
  // with `moved`, the spawner did it (spawner-process.ts): the host's loop never waits on cgroup.procs
  if (cgroup && pid !== undefined && !child.moved) {
    try {
      cgroup.add(pid);
      stdin.write('\n'); // opens the gate: written before anything the caller writes
    } catch (error) {
      gateError = `cannot move the tree into its cgroup: ${(error as Error).message}`;
      sigkill(pid); // never let it run outside its cgroup
    }
  }

  let exitedFlag = false;
  // the guest: bwrap's one child (the namespace's pid 1), else the child itself after its execs
  let guestPid: number | undefined;
  const guest = () => {
    if (pid === undefined || exitedFlag) return undefined;
    if (!restricted) return pid;
    guestPid ??= childrenOf(pid)[0];
    return guestPid;
  };
  const confined = policy !== 'trusted';
  const cpu = confined && limits.cpuSeconds > 0 ? sampleCpu(guest, limits.cpuSeconds) : undefined;

  const exitEvent = child.exit.then(() => {});
  const tree: TreeHandles = {
    pid,
    restricted,
    uid,
    token,
    cgroup,
    exitEvent,
    exited: () => exitedFlag,
  };
  // Without a cgroup, the host sums the tree's memory itself (memory-watch.ts). Not a
  // zygote's: the workers it clones are its children, each watched on its own.
  const memory =
    confined && !cgroup && pid !== undefined && options.zygoteDir === undefined
      ? watchTreeMemory(
          guest, // the pid namespace's pid 1 (restricted): every process of the body is below it
          limits.memoryBytes + limits.tmpfsBytes,
          () => void killTree(tree),
          restricted, // its own /tmp and /dev/shm, whose files count
        )
      : undefined;

  let stderrHead = '';
  const { stderr } = child;
  stderr.on('data', (chunk: Buffer) => {
    if (stderrHead.length < 512) stderrHead += chunk.toString('utf8', 0, 512);
  });

  const exited = (async () => {
    const status = await child.exit;
    exitedFlag = true;
    cpu?.stop();
    memory?.stop();
    // the direct child is gone; make sure nothing it started survives it
    if (!restricted) await killTree(tree);
    await settleStreams([child.stdout, stderr]);
    await pipe?.ended(1000);
    const out = classifyExit(status, restricted, stderrHead);
    if (gateError) out.setupError = gateError;
    if (cpu?.used !== undefined) out.cpuUsedSeconds = cpu.used;
    if (memory?.over) out.oomKilled = true;
    await cleanUp(tree, out);
    return out;
  })();

  return {
    pid,
    stdin,
    stdout,
    stderr,
    exited,
    limits,
    ...(uid === undefined ? {} : { uid }),
    holdEventLoop(hold) {
      for (const stream of [stdin, stdout, stderr]) {
        const handle = stream as unknown as { ref?(): void; unref?(): void } | null;
        if (hold) handle?.ref?.();
        else handle?.unref?.();
      }
      if (hold) child.ref();
      else child.unref();
    },
    async kill() {
      await killTree(tree);
      // Its exit comes through the spawner, which a stop from outside (SIGSTOP) keeps
      // from reporting it: past a grace, a leader that is gone or a zombie is dead
      // enough for a kill (its clean-up runs once the exit is reported).
      const reported = new AbortController();
      await Promise.race([
        exited.finally(() => reported.abort()),
        leaderDead(pid, reported.signal),
      ]);
    },
  };
}

/** How long a kill waits for the exit report before it looks at the leader itself. */
const KILL_GRACE_MS = 1000;

/**
 * Resolves once `pid` has no entry in /proc or is a zombie, looked at from
 * KILL_GRACE_MS on; never once `reported` aborts (the exit settled the kill,
 * and the pid may be another process's by then): its timer ends with it.
 */
async function leaderDead(pid: number | undefined, reported: AbortSignal): Promise<void> {
  const never = new Promise<void>(() => {});
  if (pid === undefined) return never; // never started: its exit settles the kill
  try {
    await sleep(KILL_GRACE_MS, undefined, { signal: reported });
    for (;;) {
      let state: string | undefined;
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
      } catch {
        return; // reaped
      }
      if (state === 'Z' || state === 'X') return;
      await sleep(50, undefined, { signal: reported });
    }
  } catch {
    return never; // reported meanwhile
  }
}
