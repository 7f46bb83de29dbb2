/**
 * `stdoutPipe`: the child's fd 1 as a real pipe (a FIFO) instead of the
 * UNIX socket Node gives a piped stdio. A process cannot reopen a socket
 * through /proc/self/fd/1 (ENXIO), but it can a FIFO, which is how R opens a
 * binary connection on its own stdout. The FIFO is made in a private 0700
 * directory and unlinked with it before the child starts: nothing in the
 * sandbox (or on the host) can reach it by a path, only through the
 * descriptors the host and the child hold.
 */
import { execFileSync } from 'node:child_process';
import {
  closeSync,
  constants,
  fchmodSync,
  fchownSync,
  mkdtempSync,
  openSync,
  rmSync,
} from 'node:fs';
import { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { findExecutable } from './host.js';

export interface StdoutPipe {
  /** The write end, to pass as the child's stdout; call `closeWriteEnd()` once it is spawned. */
  readonly writeFd: number;
  /** The read end, as a stream. */
  readonly stdout: Readable;
  /** Closes the host's copy of the write end, so the stream ends when the child's copies close. Idempotent. */
  closeWriteEnd(): void;
  /** Resolves when the stream has ended, or after `lateMs` (then destroys it). */
  ended(lateMs: number): Promise<void>;
}

let mkfifo: string | null | undefined;

/** Where the FIFO goes: mkfifo's path and a new private (0700) directory for it; undefined without either. */
interface FifoPlace {
  mkfifo: string;
  dir: string;
  path: string;
}

function fifoPlace(): FifoPlace | undefined {
  mkfifo ??= findExecutable('mkfifo', `${process.env.PATH ?? ''}:/usr/bin:/bin`) ?? null;
  if (!mkfifo) return undefined;
  try {
    const dir = mkdtempSync(join(tmpdir(), 'extfn-stdout-'));
    return { mkfifo, dir, path: join(dir, 'fifo') };
  } catch {
    return undefined;
  }
}

/**
 * A FIFO whose write end only `uid` (the tree's own uid on a root host;
 * otherwise the host's uid, which the child runs as) may reopen, through
 * /proc/self/fd/1, and only for writing (mode 0200: a body cannot read its
 * own frames back). `undefined` when the host has no `mkfifo` or cannot make
 * one: the child then gets the ordinary socket, and a driver must fall back
 * to writing through its stdout as text.
 */
export function openStdoutPipe(uid: number | undefined): StdoutPipe | undefined {
  const place = fifoPlace();
  if (!place) return undefined;
  try {
    execFileSync(place.mkfifo, ['-m', '600', place.path], { stdio: 'ignore' });
  } catch {} // no FIFO: openMade finds none, cleans up and gives undefined
  return openMade(place, uid);
}

/** As `openStdoutPipe`, with the FIFO made by `make` (the spawner: this process then does not fork). */
export async function openStdoutPipeWith(
  uid: number | undefined,
  make: (mkfifo: string, path: string) => Promise<void>,
): Promise<StdoutPipe | undefined> {
  const place = fifoPlace();
  if (!place) return undefined;
  try {
    await make(place.mkfifo, place.path);
  } catch {} // as above
  return openMade(place, uid);
}

/** Opens both ends of the FIFO, then removes its directory: it is reachable only through the descriptors. */
function openMade({ dir, path }: FifoPlace, uid: number | undefined): StdoutPipe | undefined {
  let readFd: number | undefined;
  let writeFd: number | undefined;
  try {
    // Read end first and non-blocking (an open for reading would wait for a
    // writer); then the write end opens at once. Node opens both O_CLOEXEC,
    // so no other child of this host inherits them.
    readFd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
    writeFd = openSync(path, constants.O_WRONLY);
    if (uid !== undefined) fchownSync(writeFd, uid, uid);
    fchmodSync(writeFd, 0o200);
  } catch {
    if (readFd !== undefined) closeSync(readFd);
    if (writeFd !== undefined) closeSync(writeFd);
    return undefined;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  // libuv sees a FIFO as a pipe and reads it like the pipes of process.stdin.
  const stdout = new Socket({ fd: readFd, readable: true, writable: false });
  let writeOpen = true;
  const fd = writeFd;
  const end = new Promise<void>((resolve) => {
    stdout.once('close', () => resolve());
    stdout.once('end', () => resolve());
  });
  return {
    writeFd: fd,
    stdout,
    closeWriteEnd() {
      if (!writeOpen) return;
      writeOpen = false;
      closeSync(fd);
    },
    async ended(lateMs) {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, lateMs);
      });
      await Promise.race([end, late]);
      clearTimeout(timer);
      stdout.destroy();
    },
  };
}
