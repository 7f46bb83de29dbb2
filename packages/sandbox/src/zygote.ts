/**
 * The host side of a sandboxed zygote (docs/architecture.md, "Zygote"): one
 * long-lived restricted tree whose interpreter has its driver loaded and
 * clones a worker per request, each into namespaces of its own under the
 * strict seccomp program, instead of a new bwrap + interpreter tree per
 * worker. The zygote is started through the usual launch path (binds,
 * rlimits, cgroup, uid), with the relaxed filter and its own directory bound
 * read-write at /run/extfn-zygote. Control: JSON lines on its stdin/stdout
 * (the contract is in docs/protocol.md, "Zygote (Python)"). Node cannot pass
 * descriptors, so a worker dials back the socket the host listens on in that
 * directory: one connection for stdin+stdout, one for stderr, each opened by
 * a token line. A fork hands back a `SandboxedTree` like a tree's.
 */
import { randomBytes } from 'node:crypto';
import {
  accessSync,
  chmodSync,
  constants as fsConstants,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { constants, tmpdir } from 'node:os';
import { join } from 'node:path';
import { ExtFnError } from '@improv/extfn-core';
import { ZYGOTE_GUEST_DIR } from './args.js';
import { hostBinds } from './binds.js';
import { TreeCgroup } from './cgroup.js';
import { classifyExit, type TreeExit } from './exit.js';
import { FIX_CGROUP } from './fixes.js';
import { type Launched, launchAsync } from './launch.js';
import { resolveLimits, type SandboxLimits } from './limits.js';
import { watchTreeMemory } from './memory-watch.js';
import { childrenOf, namesOfDeadHosts, sampleCpu } from './proc.js';
import { treeOf } from './sandboxed.js';
import { seccompProgram } from './seccomp.js';
import type { SandboxedTree, SandboxOptions } from './types.js';
import { hostIsRoot } from './uid-pool.js';

/** The host switch: `IMPROV_EXTFN_ZYGOTE=0` keeps every worker on its own tree. */
export function zygoteEnabled(env: NodeJS.ProcessEnv = process.env): boolean {
  return env.IMPROV_EXTFN_ZYGOTE !== '0';
}

/** What each worker of a zygote mounts anew, a tmpfs of its own (zygote.py, step 2). */
const MOUNTED_PER_WORKER = ['/tmp', '/dev/shm'];

/**
 * Why the workers of a zygote for this interpreter and these read-only paths
 * would not see what a tree sees, or undefined: a bound directory under
 * /tmp or /dev/shm (a library directory, a virtual environment, the
 * interpreter's own tree) would be covered by the worker's own tmpfs there.
 */
export function zygoteCannotServe(
  command: string,
  readOnlyPaths: readonly string[],
): string | undefined {
  let binds: string[];
  try {
    binds = hostBinds(command, readOnlyPaths);
  } catch {
    return undefined; // not bindable at all: the start reports it, whichever way it goes
  }
  for (const path of binds) {
    const top = MOUNTED_PER_WORKER.find((dir) => path === dir || path.startsWith(`${dir}/`));
    if (top) return `${path} is bound under ${top}, which each of its workers mounts anew`;
  }
  return undefined;
}

/** The zygote's setting: the workers' sandbox (binds, limits), and its program. */
export interface ZygoteOptions
  extends Pick<SandboxOptions, 'command' | 'args' | 'env' | 'readOnlyPaths' | 'bwrapPath'> {
  /**
   * What its stdin gets first: the bootstrap's `N\n` and program (driver +
   * zygote, precompiled). A promise is awaited only after the tree is
   * spawned: the interpreter boots while the program is made.
   */
  program: string | Promise<string>;
  /** The workers' limits; the zygote itself gets no CPU limit and room for all their processes. */
  limits?: Partial<SandboxLimits>;
  /** Most workers alive at once (sizes the zygote's process limit). */
  maxWorkers: number;
  /** Named in errors until a worker names its own function. */
  functionName: string;
  /** How long the zygote may take to print its ready line, and a worker to dial back. */
  startupMs: number;
}

export interface ZygoteForkOptions {
  functionName: string;
  limits?: Partial<SandboxLimits>;
  /** A file in `zygote.dir` the worker opens as its shared file (fd 3). */
  shared?: string;
  env?: Readonly<Record<string, string>>;
  startupMs: number;
  /** A spare: it does a first chunk's allocations before its ready frame. */
  warm?: boolean;
}

/** A child's end as the zygote reports it (its reaping: code, or signal number). */
interface ChildExit {
  code?: number;
  signal?: number;
}

interface PendingFork {
  id: number;
  pid?: number;
  /** Called with the pid in the zygote's namespace as soon as the zygote answers it. */
  onPid?(pid: number): void;
  stdio?: Socket;
  stderr?: Socket;
  /** Bytes after the token line of the stdio connection (the driver's first output). */
  settle(): void;
  fail(error: Error): void;
  exit(how: ChildExit): void;
  /** The zygote answered this fork (its pid, an error, or the child's exit). */
  answered?: boolean;
}

const SIGNAL_NAMES = Object.fromEntries(
  Object.entries(constants.signals).map(([name, number]) => [number, name]),
) as Record<number, string>;

const FIX_ZYGOTE =
  'this host runs each worker in a tree of its own from now on; set IMPROV_EXTFN_ZYGOTE=0 to never use a zygote';

/**
 * How long the zygote may take to answer a fork line (the worker's pid, or
 * why not): a clone, a millisecond or so even on a loaded host. One that
 * takes longer is stopped from outside (SIGSTOP) or wedged, so the fork gives
 * up then (`unanswered`: the caller replaces the zygote), not at the
 * worker's whole start-up deadline (15 s by default). Seconds, not
 * milliseconds: a host too busy to schedule the zygote for a moment must not
 * count as one.
 */
const ANSWER_MS = 3_000;

/** Directories of zygotes alive: removed at this process's exit should one not be closed. */
const liveDirs = new Set<string>();
let exitHook = false;

function track(dir: string): void {
  liveDirs.add(dir);
  if (exitHook) return;
  exitHook = true;
  process.once('exit', () => {
    for (const live of liveDirs) rmSync(live, { recursive: true, force: true });
  });
}

function untrack(dir: string): void {
  liveDirs.delete(dir);
  rmSync(dir, { recursive: true, force: true });
}

/** Whether this process swept the zygote directories of dead hosts (once, at its first zygote). */
let swept = false;

/**
 * Removes the directories of zygotes whose host died
 * without its exit hook (SIGTERM, SIGKILL, a killed test worker), named
 * `extfn-zygote-<host pid>-…` with no such pid. Such a zygote died with its
 * host (bubblewrap's --die-with-parent).
 */
export function sweepDeadHosts(parent: string): void {
  for (const name of namesOfDeadHosts(parent, /^extfn-zygote-(\d+)-/)) {
    try {
      rmSync(join(parent, name), { recursive: true, force: true });
    } catch {} // another user's: not ours to remove
  }
}

/** Where zygote directories are made: memory (/dev/shm) where it exists, as shared files are. */
function zygoteParent(): string {
  try {
    accessSync('/dev/shm', fsConstants.W_OK);
    return '/dev/shm';
  } catch {
    return tmpdir();
  }
}

/**
 * One zygote. `Zygote.start` resolves once it is ready; `fork` starts a
 * worker; a zygote that exits fails every start in flight with a typed
 * Sandbox error (and kills its workers: they live in namespaces below it).
 */
export class Zygote {
  /** The host directory bound at /run/extfn-zygote: shared files go here. */
  readonly dir: string;
  /** Workers forked, for stats. */
  forks = 0;
  /** A worker exited 70 before it was ready: its sandbox cannot be set up on this host. */
  unfit = false;
  /**
   * A fork got no answer at all (no pid, no error line) within its deadline:
   * the zygote is stopped from outside or wedged, and every later fork would
   * wait as long. (A fork it answered with a failure leaves it in service.)
   */
  unanswered = false;
  #tree: Launched;
  #server: Server;
  #pending = new Map<number, PendingFork>();
  #byToken = new Map<string, PendingFork>();
  #nextId = 0;
  #dead: string | undefined;
  readonly exited: Promise<void>;
  #stderrTail = '';
  /**
   * Forked workers that hold the event loop (a request in flight): their
   * exits come over the zygote's own channel, so it is held while any is,
   * or a host awaiting a worker that died would exit before hearing it.
   */
  #holds = 0;

  private constructor(dir: string, tree: Launched, server: Server) {
    this.dir = dir;
    this.#tree = tree;
    this.#server = server;
    tree.stderr.on('data', (chunk: Buffer) => {
      this.#stderrTail = (this.#stderrTail + chunk.toString('utf8')).slice(-2048);
    });
    this.exited = tree.exited.then(
      (exit) => this.#died(`exited (${exit.signal ?? `code ${exit.exitCode}`})`),
      (error: unknown) => this.#died(`failed: ${String(error)}`),
    );
  }

  /** Whether it still takes forks. */
  get alive(): boolean {
    return this.#dead === undefined;
  }

  /** The uid its tree runs as on a root host (shared files must be its own). */
  get uid(): number | undefined {
    return this.#tree.uid;
  }

  /** The zygote tree's host pid (bwrap's). */
  get pid(): number | undefined {
    return this.#tree.pid;
  }

  /**
   * Boots a zygote. Its tree is spawned before the first await (as a
   * worker's tree is: the caller's synchronous work, e.g. checking a batch's
   * rows, runs while it boots), then its program is written and its ready
   * line awaited.
   */
  static async start(options: ZygoteOptions): Promise<Zygote> {
    const { functionName } = options;
    const parent = zygoteParent();
    if (!swept) {
      swept = true;
      sweepDeadHosts(parent);
    }
    const dir = mkdtempSync(join(parent, `extfn-zygote-${process.pid}-`));
    track(dir);
    chmodSync(dir, 0o700);
    writeFileSync(join(dir, 'strict.bpf'), seccompProgram(), { mode: 0o644 });
    const server = createServer({ allowHalfOpen: false });
    // bound and listening when listen() returns (a unix socket); 'listening' and errors come later
    const listening = new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(join(dir, 's'), () => resolve());
    });
    server.unref();
    const workerLimits = resolveLimits(options.limits, undefined);
    const launching = launchAsync({
      command: options.command,
      args: options.args,
      env: { ...options.env, IMPROV_EXTFN_ZYGOTE_DIR: ZYGOTE_GUEST_DIR },
      readOnlyPaths: options.readOnlyPaths,
      bwrapPath: options.bwrapPath,
      policy: 'restricted',
      functionName,
      trustedBoot: true, // its driver; bodies reach its forks only once they sit in their cgroups
      zygoteDir: dir,
      // RLIMIT_NPROC above the zygote counts all its workers' processes (each
      // worker sets its own inside its user namespace); no CPU limit: it lives long
      limits: {
        ...workerLimits,
        processes: workerLimits.processes * Math.max(1, options.maxWorkers) + 8,
        cpuSeconds: 0,
      },
    });
    let tree: Launched;
    let program: string;
    try {
      await listening;
      // the directory is the zygote's (0700): the socket need not be guarded twice
      chmodSync(join(dir, 's'), 0o777);
      tree = await launching;
    } catch (error) {
      server.close();
      untrack(dir);
      void launching.then((t) => t.kill()).catch(() => {});
      throw error;
    }
    const zygote = new Zygote(dir, tree, server);
    server.on('connection', (socket) => zygote.#accept(socket));
    tree.stdin.on('error', () => {});
    try {
      program = await options.program;
    } catch (error) {
      await zygote.close();
      throw error;
    }
    const source = Buffer.from(program, 'utf8');
    tree.stdin.write(Buffer.concat([Buffer.from(`${source.length}\n`), source]));
    try {
      // The tree holds the event loop until the zygote is ready: whoever awaits
      // this start (or a close() waiting on it) must not see the host exit
      // under it. A ready zygote idles between forks, unref'd.
      await zygote.#readLines(options.startupMs);
      tree.holdEventLoop(false);
    } catch (error) {
      await zygote.close();
      throw ExtFnError.sandbox(
        `the Python zygote did not start (${(error as Error).message})`,
        FIX_ZYGOTE,
        { functionName, cause: error },
      );
    }
    return zygote;
  }

  /** Resolves at the ready line; then dispatches the control lines. */
  #readLines(startupMs: number): Promise<void> {
    return new Promise((resolve, reject) => {
      let buffer = '';
      let ready = false;
      const timer = setTimeout(
        () => reject(new Error(`no ready line in ${startupMs} ms`)),
        startupMs,
      );
      timer.unref();
      this.exited.then(() => {
        clearTimeout(timer);
        reject(new Error(`${this.#dead}: ${this.#stderrTail.trim().slice(-500)}`));
      });
      this.#tree.stdout.on('data', (chunk: Buffer) => {
        buffer += chunk.toString('utf8');
        for (let nl = buffer.indexOf('\n'); nl >= 0; nl = buffer.indexOf('\n')) {
          const line = buffer.slice(0, nl);
          buffer = buffer.slice(nl + 1);
          let message: Record<string, unknown>;
          try {
            message = JSON.parse(line);
          } catch {
            continue; // not ours: nothing but the zygote writes here
          }
          if (!ready && message.zygote === 'ready') {
            ready = true;
            clearTimeout(timer);
            resolve();
          } else this.#control(message);
        }
      });
    });
  }

  #control(message: Record<string, unknown>): void {
    const pending = this.#pending.get(Number(message.id));
    if (!pending) return;
    pending.answered = true;
    if (typeof message.pid === 'number') {
      pending.pid = message.pid;
      pending.onPid?.(message.pid);
      pending.settle();
    } else if (typeof message.error === 'string') {
      pending.fail(new Error(`the zygote could not clone: ${message.error}`));
    } else if (message.exit && typeof message.exit === 'object') {
      this.#pending.delete(pending.id);
      pending.exit(message.exit as ChildExit);
    }
  }

  /** A worker dialing back: its token line says which fork and which stream. */
  #accept(socket: Socket): void {
    let head = Buffer.alloc(0);
    socket.on('error', () => {});
    const timer = setTimeout(() => socket.destroy(), 10_000);
    timer.unref();
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      const nl = head.indexOf(10);
      if (nl < 0) {
        if (head.length > 128) socket.destroy();
        return;
      }
      socket.off('data', onData);
      clearTimeout(timer);
      const [token, stream] = head.subarray(0, nl).toString('latin1').split(' ');
      const pending = this.#byToken.get(token ?? '');
      const rest = head.subarray(nl + 1);
      if (!pending || (stream !== 'stdio' && stream !== 'stderr') || pending[stream]) {
        socket.destroy(); // nobody asked for it
        return;
      }
      socket.pause();
      if (rest.length > 0) socket.unshift(rest);
      pending[stream] = socket;
      pending.settle();
    };
    socket.on('data', onData);
  }

  #died(why: string): void {
    this.#dead ??= why;
    for (const pending of this.#pending.values()) {
      pending.fail(new Error(`the zygote ${why}`));
      // its workers died with it (nested namespaces): the kernel killed them
      pending.exit({ signal: constants.signals.SIGKILL });
    }
    this.#pending.clear();
    this.#byToken.clear();
    this.#server.close();
    untrack(this.dir);
  }

  /**
   * Starts one worker; resolves once it dialed back and sits in its cgroup
   * (root host), before anything is written to it. Rejects with a Sandbox
   * error naming the function when the zygote is gone or the worker does not
   * show up (`unfit` then says whether it never can here).
   */
  async fork(options: ZygoteForkOptions): Promise<SandboxedTree> {
    const { functionName } = options;
    const fail = (message: string, cause?: unknown) =>
      ExtFnError.sandbox(message, FIX_ZYGOTE, { functionName, cause });
    if (this.#dead) throw fail(`the Python zygote ${this.#dead}`);
    const limits = resolveLimits(options.limits, undefined);
    const id = ++this.#nextId;
    const token = randomBytes(16).toString('hex');
    let settle!: () => void;
    let failStart!: (error: Error) => void;
    const connected = new Promise<void>((resolve, reject) => {
      settle = resolve;
      failStart = reject;
    });
    let exitWith!: (how: ChildExit) => void;
    const childExit = new Promise<ChildExit>((resolve) => {
      exitWith = resolve;
    });
    const pending: PendingFork = {
      id,
      settle: () => {
        if (pending.pid !== undefined && pending.stdio && pending.stderr) settle();
      },
      fail: (error) => failStart(error),
      exit: (how) => {
        failStart(new Error(`the worker ended before it dialed back (${describe(how)})`));
        exitWith(how);
      },
    };
    this.#pending.set(id, pending);
    this.#byToken.set(token, pending);
    const request = {
      op: 'fork',
      id,
      token,
      limits: {
        memoryBytes: limits.memoryBytes,
        cpuSeconds: limits.cpuSeconds,
        openFiles: limits.openFiles,
        fileSizeBytes: limits.fileSizeBytes,
        processes: limits.processes,
        tmpfsBytes: limits.tmpfsBytes,
      },
      shared: options.shared ?? null,
      env: options.env ?? {},
      ...(options.warm ? { warm: true } : {}),
    };
    this.#tree.stdin.write(`${JSON.stringify(request)}\n`);
    let timer: NodeJS.Timeout | undefined;
    let answerTimer: NodeJS.Timeout | undefined;
    let cgroup: TreeCgroup | undefined;
    let hostPid: number | undefined;
    let born: number | undefined;
    try {
      // made while the zygote clones (a cgroup v1 mkdir can take milliseconds), joined below
      let cgroupError: unknown;
      if (hostIsRoot()) {
        try {
          cgroup = TreeCgroup.create(limits.memoryBytes + limits.tmpfsBytes, limits.processes);
        } catch (error) {
          cgroupError = error;
        }
      }
      // The worker joins its cgroup as soon as the zygote has answered its pid:
      // a cgroup v1 join waits for an RCU grace period (often 10-30 ms), which
      // then passes while the worker takes its steps and dials back. No body
      // code runs before both are done: nothing is written to it until then.
      let joined: Promise<void> | undefined;
      pending.onPid = (guestPid) => {
        joined = (async () => {
          hostPid = this.#hostPid(guestPid);
          if (hostPid === undefined) throw new Error(`cannot find worker ${guestPid} in /proc`);
          born = startTicks(hostPid);
          if (cgroupError === undefined && !cgroup) return;
          try {
            if (cgroupError !== undefined) throw cgroupError;
            await cgroup?.addAsync(hostPid);
          } catch (error) {
            throw ExtFnError.sandbox(
              `cannot move the worker into its cgroup (${(error as Error).message})`,
              FIX_CGROUP,
              { functionName, cause: error },
            );
          }
        })();
        joined.catch(() => {}); // awaited below, once the worker has dialed back
      };
      await Promise.race([
        connected.then(() => joined),
        new Promise((_, reject) => {
          timer = setTimeout(
            () => reject(new Error(`the worker did not dial back in ${options.startupMs} ms`)),
            options.startupMs,
          );
        }),
        new Promise((_, reject) => {
          answerTimer = setTimeout(
            // past the input already there: a host loop that was busy for seconds runs its
            // timers before it reads, and an answer waiting in the pipe is not a stall
            () =>
              setImmediate(() => {
                if (!pending.answered) {
                  reject(new Error(`the zygote did not answer the fork in ${ANSWER_MS} ms`));
                }
              }),
            ANSWER_MS,
          );
        }),
      ]);
    } catch (error) {
      pending.onPid = undefined; // a pid answered after this: no join for a start given up
      const unanswered = !pending.answered && !this.#dead;
      if (unanswered) this.unanswered = true;
      if (hostPid !== undefined) killPid(hostPid, born);
      pending.stdio?.destroy();
      pending.stderr?.destroy();
      this.#byToken.delete(token);
      void cgroup?.remove();
      // its exit line still comes (or the zygote died): the caller's probe reads it; a
      // zygote that did not answer the fork reports no exit either
      const how = unanswered
        ? undefined
        : await Promise.race([childExit, delay(500).then(() => undefined)]);
      // exit 70: a step of the child's sandbox failed (docs/protocol.md): not here, ever
      if (how?.code === 70) this.unfit = true;
      if (ExtFnError.isInstance(error)) throw error;
      const tail = how ? `; ${describe(how)}` : '';
      throw fail(
        `a worker of the Python zygote did not start (${(error as Error).message}${tail})`,
        error,
      );
    } finally {
      clearTimeout(timer);
      clearTimeout(answerTimer);
      this.#byToken.delete(token);
    }
    this.forks++;
    return treeOf(
      this.#worker(
        hostPid!, // found before `joined` resolved
        born,
        pending.stdio!,
        pending.stderr!,
        childExit,
        exitWith,
        limits,
        cgroup,
      ),
      { command: 'python3', policy: 'restricted', functionName },
      'restricted',
      functionName,
    );
  }

  /** Counts a worker's hold; the channel is told only when the first comes or the last goes (a request takes and lets go of one). */
  #hold(delta: number): void {
    const held = this.#holds > 0;
    this.#holds += delta;
    if (held !== this.#holds > 0 && !this.#dead) this.#tree.holdEventLoop(!held);
  }

  /** The zygote's own pid on the host (bwrap's child), looked up once. */
  #pid: number | undefined;

  /** The host pid of the zygote's child whose pid in the zygote's namespace is `guestPid`. */
  #hostPid(guestPid: number): number | undefined {
    const bwrap = this.#tree.pid;
    if (bwrap === undefined) return undefined;
    this.#pid ??= childrenOf(bwrap)[0];
    const zygote = this.#pid;
    if (zygote === undefined) return undefined;
    // newest first: the kernel lists a process's children oldest first, and the one
    // asked for has just been cloned (one status read, not one per live worker)
    for (const child of childrenOf(zygote).reverse()) {
      try {
        const status = readFileSync(`/proc/${child}/status`, 'utf8');
        const nspid = /^NSpid:\s+(.*)$/m.exec(status)?.[1]?.trim().split(/\s+/).map(Number);
        // host, bwrap's namespace (the zygote's), the worker's own
        if (nspid?.[0] === child && nspid[1] === guestPid) return child;
      } catch {}
    }
    return undefined;
  }

  /** A worker shaped as `launch` shapes a tree. */
  #worker(
    pid: number,
    born: number | undefined,
    stdio: Socket,
    stderr: Socket,
    childExit: Promise<ChildExit>,
    settleExit: (how: ChildExit) => void,
    limits: SandboxLimits,
    cgroup: TreeCgroup | undefined,
  ): Launched {
    let ended = false;
    const cpu =
      limits.cpuSeconds > 0
        ? sampleCpu(() => (ended ? undefined : pid), limits.cpuSeconds)
        : undefined;
    // without a cgroup, the host sums the worker's memory itself (memory-watch.ts)
    const memory = cgroup
      ? undefined
      : watchTreeMemory(
          () => (ended ? undefined : pid),
          limits.memoryBytes + limits.tmpfsBytes,
          () => killPid(pid, born),
          true, // the worker's own /tmp and /dev/shm (zygote.py, step 2), whose files count
        );
    let stderrHead = '';
    stderr.on('data', (chunk: Buffer) => {
      if (stderrHead.length < 512) stderrHead += chunk.toString('utf8', 0, 512);
    });
    stdio.resume();
    stderr.resume();
    // A new worker holds the event loop, as a spawned child does, until told otherwise.
    let holding = true;
    this.#hold(1);
    const letGo = () => {
      if (holding) this.#hold(-1);
      holding = false;
    };
    const takeHold = () => {
      if (holding || ended) return;
      holding = true;
      this.#hold(1);
    };
    const exited = (async (): Promise<TreeExit> => {
      const how = await childExit;
      ended = true;
      letGo();
      cpu?.stop();
      memory?.stop();
      await Promise.race([
        Promise.all([closed(stdio), closed(stderr)]),
        delay(1000), // a grandchild holding the sockets dies with the namespace
      ]);
      stdio.destroy();
      stderr.destroy();
      const signal = how.signal === undefined ? undefined : SIGNAL_NAMES[how.signal];
      const out = classifyExit(
        signal ? { signal } : { exitCode: how.code ?? undefined },
        true,
        stderrHead,
      );
      if (cpu?.used !== undefined) out.cpuUsedSeconds = cpu.used;
      if (memory?.over) out.oomKilled = true;
      if (cgroup) {
        if (cgroup.oomKilled()) out.oomKilled = true;
        if (cgroup.pidsRefused()) out.pidsRefused = true;
        await cgroup.remove();
      }
      return out;
    })();
    return {
      pid,
      stdin: stdio,
      stdout: stdio,
      stderr,
      exited,
      limits,
      holdEventLoop(hold) {
        for (const socket of [stdio, stderr]) {
          if (hold) socket.ref();
          else socket.unref();
        }
        if (hold) takeHold();
        else letGo();
      },
      async kill() {
        if (!ended) killPid(pid, born); // its pid namespace dies with it
        // the zygote reports the exit when it reaps it; should it not (wedged), the
        // pid is gone all the same once SIGKILL has landed
        await Promise.race([exited, delay(2000)]);
        if (!ended) settleExit({ signal: constants.signals.SIGKILL });
        await exited;
      },
    };
  }

  /** Ends the zygote and every worker it started. */
  async close(): Promise<void> {
    if (!this.#dead) {
      this.#tree.stdin.end();
      await this.#tree.kill();
    }
    await this.exited;
  }
}

function describe(how: ChildExit): string {
  return how.signal !== undefined
    ? `killed by ${SIGNAL_NAMES[how.signal] ?? how.signal}`
    : `exit code ${how.code}`;
}

/** When `pid` started (proc(5) stat field 22), or undefined once it is gone. */
function startTicks(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]);
  } catch {
    return undefined;
  }
}

/**
 * SIGKILL for a worker the zygote, not this process, reaps: once reaped its
 * pid may be another process's, so it is killed only while the process
 * holding it is the one that started at `born`.
 */
function killPid(pid: number, born: number | undefined): void {
  if (born === undefined || startTicks(pid) !== born) return;
  try {
    process.kill(pid, 'SIGKILL');
  } catch {}
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}

function closed(socket: Socket): Promise<void> {
  if (socket.destroyed || socket.readableEnded) return Promise.resolve();
  return new Promise((resolve) => {
    socket.once('close', () => resolve());
    socket.once('end', () => resolve());
  });
}
