/**
 * A file a warm worker shares with the host for binary payloads (docs/protocol.md,
 * "Shared file"): the host writes a request's payload into it and reads the
 * result from it, instead of both going through the pipes in 64 KiB pieces.
 * It lives in /dev/shm (memory), is unlinked as soon as it is open — only the
 * host's and the worker's descriptors reach it — and keeps its pages across
 * requests, so a large chunk touches no fresh page on either side.
 *
 * The worker can write to it, truncate it or grow it. It cannot grow it past
 * RLIMIT_FSIZE (the sandbox's `fileSizeBytes`), which is also the most the
 * host ever sizes it to, so what it pins is bounded; the host checks the size
 * after every response (`intact`) and reads only the byte range the response
 * names inside the region it reserved. A worker can thereby only spoil its
 * own chunk's results, which its body computes anyway.
 */

import { randomBytes } from 'node:crypto';
import {
  closeSync,
  fstatSync,
  ftruncateSync,
  openSync,
  readSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';
import type { Payload } from './frames.js';

/** Where shared files are made: IMPROV_EXTFN_SHM_DIR ('' turns them off), else /dev/shm. */
export function sharedDirectory(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const dir = env.IMPROV_EXTFN_SHM_DIR ?? '/dev/shm';
  return dir === '' ? undefined : dir;
}

/** Sizes grow in steps of this, so a batch's chunks of slightly different sizes reuse one size. */
const STEP = 1 << 20;

/** `n` rounded up to a multiple of 8: the result region starts 8-aligned. */
const aligned = (n: number) => (n + 7) & ~7;

/** Where a request's payload and its result go in the file. */
export interface SharedRegion {
  /** Payload bytes at offset 0. */
  bytes: number;
  /** Offset of the result region. */
  out: number;
  /** Bytes reserved for the result. */
  room: number;
}

export class SharedFile {
  readonly fd: number;
  /** The size the host set; any other size after a response means the worker changed it. */
  #size = 0;
  readonly #max: number;

  private constructor(fd: number, max: number) {
    this.fd = fd;
    this.#max = max;
  }

  /**
   * A fresh, empty, unlinked file in `dir`, or undefined where none can be
   * made (no such directory, not writable): the worker then uses the pipes.
   * `max` is the most it may ever be sized to (the worker's RLIMIT_FSIZE).
   */
  static create(dir: string | undefined, max: number): SharedFile | undefined {
    if (!dir || !(max > 0)) return undefined;
    const path = join(dir, `extfn-${process.pid}-${randomBytes(8).toString('hex')}`);
    let fd: number;
    try {
      fd = openSync(path, 'wx+', 0o600); // O_EXCL: never someone else's file
    } catch {
      return undefined;
    }
    try {
      unlinkSync(path);
    } catch {
      closeSync(fd);
      return undefined;
    }
    return new SharedFile(fd, max);
  }

  /**
   * Reserves room for a payload of `bytes` and a result of `room` bytes,
   * growing the file when needed; undefined when they do not fit its bound.
   */
  reserve(bytes: number, room: number): SharedRegion | undefined {
    const out = aligned(bytes);
    const need = out + room;
    if (need > this.#max) return undefined;
    if (need > this.#size) {
      const size = Math.min(this.#max, Math.ceil(need / STEP) * STEP);
      try {
        ftruncateSync(this.fd, size);
      } catch {
        return undefined;
      }
      this.#size = size;
    }
    return { bytes, out, room };
  }

  /** Writes the payload's parts one after another from offset 0. */
  writePayload(payload: Payload): void {
    let at = 0;
    for (const part of payload instanceof Uint8Array ? [payload] : payload) {
      let done = 0;
      while (done < part.byteLength) {
        done += writeSync(this.fd, part, done, part.byteLength - done, at + done);
      }
      at += part.byteLength;
    }
  }

  /** Whether the file still has the size the host gave it (a worker that changed it is killed). */
  intact(): boolean {
    try {
      return fstatSync(this.fd).size === this.#size;
    } catch {
      return false;
    }
  }

  /**
   * Reads `bytes` result bytes at `at` into `target` (or a fresh buffer);
   * undefined on a short read (the file shrank meanwhile).
   */
  read(at: number, bytes: number, target: Uint8Array | undefined): Buffer | undefined {
    const out =
      target?.byteLength === bytes
        ? Buffer.from(target.buffer, target.byteOffset, bytes)
        : Buffer.allocUnsafe(bytes);
    let done = 0;
    while (done < bytes) {
      const k = readSync(this.fd, out, done, bytes - done, at + done);
      if (k <= 0) return undefined;
      done += k;
    }
    return out;
  }

  close(): void {
    try {
      closeSync(this.fd);
    } catch {}
  }
}
