/**
 * Trees are started by a helper process, not by the host. Node starts a
 * child with fork(): every page of the host is then write-protected for
 * copy-on-write, and the host's next write to each page faults — the young
 * generation, the result columns, every page a refresh writes, ~12–40 µs a
 * page on a VM. A worker started mid-refresh charged the host 40–90 ms of
 * CPU that way (3–5 thousand faults), and a host holding a large model pays
 * the page-table copy on top. The spawner (spawner-process.ts) is forked
 * once, small; it spawns each tree and hands its pipes back over the IPC
 * channel, so the host itself never forks again.
 *
 * The sandbox's probe starts it (probe.ts: before a process's first tree),
 * else the first launch. Until it is ready, wherever it cannot run, and
 * while it does not answer (stopped from outside), trees start the direct
 * way (launch.ts). IMPROV_EXTFN_SPAWNER=0 turns it off.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { existsSync } from 'node:fs';
import type { Socket } from 'node:net';
import type { Readable, Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { leakingDescriptorsCached } from './host.js';

/** How the direct child of a tree ended, or why it never started. */
export interface ChainStatus {
  exitCode?: number;
  signal?: string;
  /** It never started (`message` says why). */
  failed?: boolean;
  message?: string;
}

/** The direct child of a tree, however it was started. */
export interface ChainProcess {
  pid: number | undefined;
  stdin: Writable;
  /** Undefined when stdout is the host's FIFO. */
  stdout: Readable | undefined;
  stderr: Readable;
  /** Its end (the 'exit' event: grandchildren may still hold the pipes). */
  exit: Promise<ChainStatus>;
  ref(): void;
  unref(): void;
  /** The spawner moved it, and all it started, into its cgroup (`cgroupProcs`). */
  moved?: boolean;
}

/** What a tree is started with. */
export interface ChainSpawn {
  file: string;
  args: string[];
  env: Record<string, string>;
  uid: number | undefined;
  /** 'pipe', or a host descriptor for fd 1 (a FIFO's write end). */
  stdout: 'pipe' | number;
  /** Bytes for a pipe on fd 3 (bwrap's seccomp program). */
  fd3: Uint8Array | undefined;
  /** A host descriptor for the next fd (the shared file). */
  extra: number | undefined;
  /**
   * The tree's cgroup.procs files: the spawner moves it there while it boots
   * and hands it over once it is in, or kills it and fails the spawn (without
   * a spawner, launch.ts moves it behind the chain's gate).
   */
  cgroupProcs?: readonly string[];
  /** The chain waits at its gate: the spawner writes its line once the tree is in its cgroup. */
  openGate?: boolean;
}

interface Pending {
  resolve(child: ChainProcess): void;
  reject(error: Error): void;
  pid?: number;
  stdin?: Socket;
  stdout?: Socket;
  moved?: boolean;
  wantStdout: boolean;
  /** Set once handed over: the tree's exit goes here. */
  ended?: (status: ChainStatus) => void;
}

type Message = {
  id?: number;
  ready?: boolean;
  /** With `ready`: descriptors the spawner still has without close-on-exec (it closes what it inherited). */
  leaks?: number[];
  pid?: number;
  stream?: 'stdout' | 'stderr';
  exit?: { code: number | null; signal: string | null };
  error?: string;
  /** With `pid`: the spawner moved the tree into its cgroup. */
  moved?: boolean;
};

/** The built program next to this module (run from source, as the tests do: the build's); undefined if neither is there (a bundle). */
function program(): string | undefined {
  for (const path of ['./spawner-process.js', '../dist/spawner-process.js']) {
    const file = fileURLToPath(new URL(path, import.meta.url));
    if (existsSync(file)) return file;
  }
  return undefined;
}

export class Spawner {
  readonly #child: ChildProcess;
  #ready = false;
  #gone = false;
  #leaks: number[] | undefined;
  #nextId = 1;
  readonly #pending = new Map<number, Pending>();
  readonly #fifos = new Map<number, { resolve(): void; reject(error: Error): void }>();
  /** Requests waiting for an answer plus trees holding the event loop: the channel is ref'd while any. */
  #holds = 0;

  constructor(file: string) {
    this.#child = fork(file, [], {
      // small and with fewer threads: each fork copies its page tables, and
      // each page it writes afterwards faults once (a young generation of
      // 1 MiB keeps reusing the same pages)
      execArgv: ['--max-old-space-size=64', '--max-semi-space-size=1', '--single-threaded'],
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
      serialization: 'json',
    });
    this.#child.on('message', (message: Message, handle?: Socket) =>
      this.#onMessage(message, handle),
    );
    this.#child.once('exit', () => this.#onExit());
    this.#child.once('error', () => this.#onExit());
    this.#unrefChannel();
    this.#child.unref();
  }

  get ready(): boolean {
    return this.#ready && !this.#gone;
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  /** What every tree it spawns inherits besides its stdio (none, once it closed its own). */
  get leaks(): readonly number[] {
    return this.#leaks ?? leakingDescriptorsCached();
  }

  spawn(request: ChainSpawn): Promise<ChainProcess> {
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject, wantStdout: request.stdout === 'pipe' });
      this.#hold(1);
      this.#child.send({
        op: 'spawn',
        id,
        file: request.file,
        args: request.args,
        env: request.env,
        uid: request.uid,
        stdout: request.stdout,
        fd3: request.fd3 ? Buffer.from(request.fd3).toString('base64') : undefined,
        extra: request.extra,
        cgroupProcs: request.cgroupProcs,
        openGate: request.openGate,
      });
    });
  }

  mkfifo(mkfifo: string, path: string): Promise<void> {
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#fifos.set(id, { resolve, reject });
      this.#hold(1);
      this.#child.send({ op: 'mkfifo', id, mkfifo, path });
    });
  }

  #hold(delta: number): void {
    this.#holds += delta;
    if (this.#gone) return;
    const channel = this.#child.channel as { ref?(): void } | undefined;
    if (this.#holds > 0) channel?.ref?.();
    else this.#unrefChannel();
  }

  #unrefChannel(): void {
    (this.#child.channel as { unref?(): void } | undefined)?.unref?.();
  }

  #onMessage(message: Message, handle: Socket | undefined): void {
    if (message.ready) {
      this.#leaks = message.leaks;
      this.#ready = true;
      return;
    }
    const id = message.id ?? 0;
    const fifo = this.#fifos.get(id);
    if (fifo) {
      this.#fifos.delete(id);
      this.#hold(-1);
      if (message.error) fifo.reject(new Error(message.error));
      else fifo.resolve();
      return;
    }
    const tree = this.#pending.get(id);
    if (!tree) {
      handle?.destroy();
      return;
    }
    if (message.error !== undefined) {
      this.#pending.delete(id);
      if (tree.ended) tree.ended({ failed: true, message: message.error });
      else {
        this.#hold(-1);
        tree.reject(new Error(message.error));
      }
      return;
    }
    if (message.exit) {
      this.#pending.delete(id);
      tree.ended?.({
        exitCode: message.exit.code ?? undefined,
        signal: message.exit.signal ?? undefined,
      });
      return;
    }
    if (message.pid !== undefined) {
      tree.pid = message.pid;
      tree.stdin = handle;
      if (message.moved) tree.moved = true;
    } else if (message.stream === 'stdout') tree.stdout = handle;
    else if (message.stream === 'stderr' && handle) this.#handOver(id, tree, handle);
  }

  /** All pipes are here: the tree goes to its caller, with its exit to come. */
  #handOver(id: number, tree: Pending, stderr: Socket): void {
    if (!tree.stdin || tree.pid === undefined || (tree.wantStdout && !tree.stdout)) {
      this.#pending.delete(id);
      this.#hold(-1);
      tree.reject(new Error('the spawner handed over an incomplete set of pipes'));
      return;
    }
    const exit = new Promise<ChainStatus>((resolve) => {
      tree.ended = resolve;
    });
    let holding = true; // a new tree holds the event loop, as a spawned child does
    /** Ended: a hold taken now would never be let go (a worker killed after its tree died). */
    let over = false;
    const streams = [tree.stdin, tree.stdout, stderr];
    tree.resolve({
      pid: tree.pid,
      stdin: tree.stdin,
      stdout: tree.stdout,
      stderr,
      exit,
      ...(tree.moved ? { moved: true } : {}),
      ref: () => {
        for (const stream of streams) stream?.ref();
        if (!holding && !over) this.#hold(1);
        holding = !over;
      },
      unref: () => {
        for (const stream of streams) stream?.unref();
        if (holding) this.#hold(-1);
        holding = false;
      },
    });
    void exit.then(() => {
      over = true;
      if (holding) this.#hold(-1);
      holding = false;
    });
  }

  /** The spawner is gone: what it started can no longer report its end. */
  #onExit(): void {
    if (this.#gone) return;
    this.#gone = true;
    // one that never got ready will not: trees start directly from now on
    if (!this.#ready) broken = true;
    if (current === this) current = undefined;
    const why = 'the spawner process ended';
    for (const tree of this.#pending.values()) {
      // bwrap's --die-with-parent is a SIGKILL; launch.ts kills any other tree once it sees this
      if (tree.ended) tree.ended({ signal: 'SIGKILL' });
      else tree.reject(new Error(why));
    }
    this.#pending.clear();
    for (const fifo of this.#fifos.values()) fifo.reject(new Error(why));
    this.#fifos.clear();
  }
}

let current: Spawner | undefined;
let broken = false;

/** Whether trees may go through a spawner here (IMPROV_EXTFN_SPAWNER=0 turns it off). */
function spawnerWanted(): boolean {
  return process.env.IMPROV_EXTFN_SPAWNER !== '0' && !broken;
}

/**
 * The spawner when it is ready to take a tree; otherwise undefined, and it
 * is started (once) for the trees to come.
 */
export function readySpawner(): Spawner | undefined {
  if (!spawnerWanted()) return undefined;
  if (!current) {
    const file = program();
    try {
      if (!file) throw new Error('no spawner program');
      current = new Spawner(file);
    } catch {
      broken = true;
      return undefined;
    }
  }
  return current.ready ? current : undefined;
}

/** For tests and benchmarks: resolves once a spawner is ready (true), or cannot be (false). */
export async function spawnerReady(timeoutMs = 5000): Promise<boolean> {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    if (readySpawner()) return true;
    if (!spawnerWanted()) return false;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  return false;
}

/** The spawner's pid, if one runs (tests check a tree's parent). */
export function spawnerPid(): number | undefined {
  return current?.pid;
}
