/**
 * The spawner: a small Node process that starts trees for the host (see
 * spawner.ts for why). It is the program of `child_process.fork`, never
 * imported. One message per request on the IPC channel:
 *
 * - `{op:'spawn', id, file, args, env, uid?, stdout, fd3?, extra?, cgroupProcs?, openGate?}`:
 *   spawns `file` in its own process group. `stdout` is `'pipe'` or the number of a
 *   host descriptor (the FIFO of stdout-pipe.ts); `extra` a host descriptor
 *   for the child's next fd (the shared file). Host descriptors are reopened
 *   through /proc/<host pid>/fd: the host cannot send plain descriptors over
 *   Node's channel. `fd3` (base64) is written to a pipe on the child's fd 3
 *   (bwrap's seccomp program). `cgroupProcs`: the tree's cgroup.procs files;
 *   the child and every process it starts are moved there while it boots
 *   (`moveTree`), and only then handed over, with `moved: true`; a tree that
 *   cannot be moved is killed and answered with `{id, error}` (the host then
 *   starts the tree itself, as for any spawner failure). `openGate`: the
 *   chain waits at its gate (its boot is not trusted: see SandboxOptions'
 *   `trustedBoot`), so its line is written once the tree is in. Answers
 *   `{id, pid}` with the child's stdin,
 *   `{id, stream}` with its stdout (when piped) and stderr, then `{id, exit}`
 *   when it ends; or `{id, error}` when it could not start.
 * - `{op:'mkfifo', id, path}`: makes a FIFO (Node has no mkfifo); `{id}` or `{id, error}`.
 *
 * At start it closes the descriptors it inherited without close-on-exec (the
 * host's leaks: it needs none), so its trees inherit nothing but their stdio;
 * `{ready, leaks}` names any it could not close.
 *
 * It ends with its channel: its trees' bwrap dies with it (--die-with-parent),
 * and the host, the only one that holds their pipes, is gone.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { closeSync, constants, openSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import type { Socket } from 'node:net';
import { leakingDescriptors } from './host.js';
import { readProcessTree } from './process-tree.js';

interface SpawnRequest {
  op: 'spawn';
  id: number;
  file: string;
  args: string[];
  env: Record<string, string>;
  uid?: number;
  stdout: 'pipe' | number;
  fd3?: string;
  extra?: number;
  cgroupProcs?: string[];
  openGate?: boolean;
}

interface FifoRequest {
  op: 'mkfifo';
  id: number;
  mkfifo: string;
  path: string;
}

const hostPid = process.ppid;

function send(message: object, handle?: Socket): Promise<void> {
  return new Promise((resolve) => {
    if (!process.connected) return resolve();
    process.send?.(message, handle, {}, () => resolve());
  });
}

/** A host descriptor as one of our own (the same open file, a new description). */
function reopen(fd: number, flags: number): number {
  return openSync(`/proc/${hostPid}/fd/${fd}`, flags);
}

/** Node starts reading a child's pipes at once; before they go to the host, nothing may be read here. */
function stopReading(stream: unknown): void {
  const handle = (stream as { _handle?: { readStop?(): number } } | null)?._handle;
  handle?.readStop?.();
}

/** Rounds of `moveTree` before a tree counts as never settling (a boot forks once: bwrap). */
const MOVE_ROUNDS = 8;

/**
 * Moves a tree into its cgroup. A write to cgroup.procs sleeps until an RCU
 * grace period ends (10-25 ms a tree on a loaded VM, as long as bwrap and the
 * interpreter take to get ready). A tree whose boot is trusted (`trustedBoot`:
 * an interpreter whose driver reads the body from stdin, which the host writes
 * only once the tree is handed over) is moved while it boots, so the two
 * overlap; any other waits at its chain's gate until it is in, since its
 * arguments may be untrusted code. A process forked before its parent moved
 * stays behind, so the tree is walked again after every round, until a walk
 * finds nothing not moved yet. Here, not in the host: its loop would stall
 * every worker's frames for the grace period. What a trusted boot allocated
 * before its move stays charged where it was.
 */
async function moveTree(root: number, files: string[]): Promise<void> {
  const moved = new Set<number>();
  let todo = [root];
  for (let round = 0; todo.length > 0; round++) {
    if (round === MOVE_ROUNDS) throw new Error(`it kept starting processes (${moved.size} moved)`);
    for (const pid of todo) {
      for (const file of files) {
        try {
          await writeFile(file, String(pid));
        } catch (error) {
          // gone meanwhile: nothing left to run outside
          if ((error as NodeJS.ErrnoException).code !== 'ESRCH') throw error;
        }
      }
      moved.add(pid);
    }
    todo = treePids(root).filter((pid) => !moved.has(pid));
  }
}

/** The pids of the tree under `root` now (every thread's children: process-tree.ts), root first. */
function treePids(root: number): number[] {
  return readProcessTree(root)?.processes.map((p) => p.pid) ?? [];
}

/**
 * Moves the tree into its cgroup and opens its gate (`openGate`), or kills
 * it: the reason, if it was killed.
 */
async function follow(
  child: ChildProcess,
  files: string[],
  openGate: boolean,
): Promise<string | undefined> {
  const root = child.pid!;
  try {
    await moveTree(root, files);
    if (openGate) await writeLine(child);
    return undefined;
  } catch (error) {
    // never let it run outside its cgroup: its group, and whatever left the group (bwrap's
    // --new-session child dies with bwrap too)
    for (const pid of [-root, ...treePids(root)]) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {}
    }
    return (error as Error).message;
  }
}

/** The gate's line on the child's stdin, written before the host gets the pipe. */
function writeLine(child: ChildProcess): Promise<void> {
  return new Promise((resolve, reject) => {
    const stdin = child.stdin;
    if (!stdin || stdin.destroyed) return reject(new Error('its stdin is closed'));
    stdin.write('\n', (error) => (error ? reject(error) : resolve()));
  });
}

/** Hands the child's pipes to the host; false when it was killed instead (an error answer). */
async function handOver(
  id: number,
  child: ChildProcess,
  files: string[] | undefined,
  openGate: boolean,
): Promise<boolean> {
  if (files) {
    const why = await follow(child, files, openGate);
    // Node has closed the stdin of a child that exited: there is nothing to hand
    // over, and the host starts the tree itself, where its end and stderr are seen
    const ended = child.exitCode !== null || child.signalCode !== null || child.stdin?.destroyed;
    if (why !== undefined || ended) {
      for (const stream of [child.stdin, child.stdout, child.stderr]) stream?.destroy();
      const how = child.signalCode ?? `code ${child.exitCode ?? 'unknown'}`;
      await send({
        id,
        error:
          why !== undefined
            ? `cannot move the tree into its cgroup: ${why}`
            : `the tree ended (${how}) before it was moved into its cgroup`,
      });
      return false;
    }
  }
  await send(
    { id, pid: child.pid, ...(files ? { moved: true } : {}) },
    child.stdin as unknown as Socket,
  );
  if (child.stdout) await send({ id, stream: 'stdout' }, child.stdout as unknown as Socket);
  await send({ id, stream: 'stderr' }, child.stderr as unknown as Socket);
  return true;
}

function startTree(request: SpawnRequest): void {
  const { id } = request;
  const own: number[] = [];
  let child: ChildProcess;
  try {
    const stdio: Array<'pipe' | number> = ['pipe', 'pipe', 'pipe'];
    if (request.stdout !== 'pipe') {
      stdio[1] = reopen(request.stdout, constants.O_WRONLY);
      own.push(stdio[1]);
    }
    if (request.fd3 !== undefined) stdio.push('pipe');
    if (request.extra !== undefined) {
      const fd = reopen(request.extra, constants.O_RDWR);
      own.push(fd);
      stdio.push(fd);
    }
    child = spawn(request.file, request.args, {
      stdio,
      env: request.env,
      cwd: '/tmp',
      detached: true, // own process group, so the host can kill the group as a whole
      ...(request.uid === undefined ? {} : { uid: request.uid, gid: request.uid }),
    });
  } catch (error) {
    void send({ id, error: (error as Error).message });
    return;
  } finally {
    for (const fd of own) closeSync(fd);
  }
  stopReading(child.stdout);
  stopReading(child.stderr);
  let failed = false;
  child.once('error', (error) => {
    failed = true;
    void send({ id, error: error.message });
  });
  if (child.pid === undefined) return; // 'error' follows
  if (request.fd3 !== undefined) {
    const fd3 = child.stdio[3] as NodeJS.WritableStream;
    fd3.on('error', () => {}); // the child may exit without reading it
    fd3.end(Buffer.from(request.fd3, 'base64'));
  }
  const handed = handOver(id, child, request.cgroupProcs, request.openGate === true);
  child.once('exit', (code, signal) => {
    if (failed) return;
    void handed.then(async (handedOver) => {
      if (handedOver) await send({ id, exit: { code, signal } });
    });
  });
}

function makeFifo(request: FifoRequest): void {
  try {
    execFileSync(request.mkfifo, ['-m', '600', request.path], { stdio: 'ignore' });
    void send({ id: request.id });
  } catch (error) {
    void send({ id: request.id, error: (error as Error).message });
  }
}

process.on('message', (message: SpawnRequest | FifoRequest) => {
  if (message.op === 'spawn') startTree(message);
  else if (message.op === 'mkfifo') makeFifo(message);
});
process.on('disconnect', () => process.exit(0));
for (const fd of leakingDescriptors()) {
  try {
    closeSync(fd);
  } catch {}
}
void send({ ready: true, leaks: leakingDescriptors() });
