/**
 * A file a warm worker shares with the host for binary payloads (docs/protocol.md,
 * "Shared file"): the host writes a request's payload into it and reads the
 * result from it, instead of both going through the pipes in 64 KiB pieces.
 * It lives in /dev/shm (memory), is unlinked as soon as it is open — only the
 * host's and the worker's descriptors reach it — and keeps its pages across
 * requests, so a large chunk touches no fresh page on either side.
 *
 * Layout of a request: the result region first (offset 0, `room` bytes),
 * then the payload (8-aligned after it). A request queued behind the one
 * running on the worker (a batch lane's next chunk) goes past that one's
 * region instead (`avoid`), so the host writes its payload while the other
 * runs; the next one fits at 0 again. A driver that writes its result with
 * write() (R) stays below RLIMIT_FSIZE, which no result region passes; the
 * payload is only read, and a driver that maps the file (Python) is not
 * bound by RLIMIT_FSIZE at all. The file only grows while the worker runs a
 * request: what it has mapped stays where it was.
 *
 * The worker can write to it, cut it or grow it. It cannot grow it past the
 * larger of its size and RLIMIT_FSIZE (the sandbox's `fileSizeBytes`), and
 * the host never sizes it past SHARED_FILE_MAX, so what it pins is bounded;
 * the host checks the size after every response (`intact`) and reads only
 * the byte range the response names inside the room it reserved. A worker
 * can thereby only spoil its own chunk's results, which its body computes
 * anyway.
 */

import { randomBytes } from 'node:crypto';
import {
  closeSync,
  fchownSync,
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

/** Sizes are whole multiples of this. */
const STEP = 1 << 20;
/** The unit tmpfs allocates memory in. */
const PAGE = 4096;
const ZEROS = new Uint8Array(64 * PAGE);

/**
 * Most bytes a shared file is ever sized to: what one chunk's response may
 * hold anyway (CHUNK_RESPONSE_CAP). A request that needs more goes on the pipes.
 */
export const SHARED_FILE_MAX = 64 * 1024 * 1024;

/** `n` rounded up to a multiple of 8: the payload starts 8-aligned. */
const aligned = (n: number) => (n + 7) & ~7;

/** Where a region's last byte ends (its result room or its payload, whichever is further). */
const regionEnd = (r: SharedRegion) => Math.max(r.out + r.room, r.at + r.bytes);

/** Where a request's result and payload go in the file. */
export interface SharedRegion {
  /** Offset of the result region: 0, or past the region of the request running ahead (`avoid`). */
  out: number;
  /** Bytes reserved for the result. */
  room: number;
  /** Offset of the payload: after the result room, 8-aligned. */
  at: number;
  /** Payload bytes. */
  bytes: number;
}

export class SharedFile {
  readonly fd: number;
  /** The size the host set; any other size after a response means the worker changed it. */
  #size = 0;
  /** Most result bytes: what the worker may write with write() (its RLIMIT_FSIZE). */
  readonly #maxRoom: number;
  readonly #max: number;
  /**
   * Pages that hold memory because the host wrote them (a result room's
   * zeros, a payload): a worker that maps the file and writes its result
   * there cannot meet a full file system (SIGBUS), so only a room's pages
   * not written yet are filled, once. A growth allocates nothing: a
   * function's few-row requests pin a few pages of /dev/shm, not 1 MiB.
   */
  #written: Uint8Array;

  /** Its name while it has one (`keepName`): a zygote's worker opens it by name. */
  path: string | undefined;

  private constructor(fd: number, maxRoom: number, max: number) {
    this.fd = fd;
    this.#maxRoom = maxRoom;
    this.#max = max;
    this.#written = new Uint8Array(Math.ceil(max / PAGE));
  }

  /**
   * A fresh, empty, unlinked file in `dir`, or undefined where none can be
   * made (no such directory, not writable): the worker then uses the pipes.
   * `maxRoom` is the most result bytes a request may reserve (the worker's
   * RLIMIT_FSIZE), `max` the most the file may ever be sized to.
   * `keepName`: left linked until `unlink()` (a zygote's worker opens it by
   * name, as `owner` on a root host).
   */
  static create(
    dir: string | undefined,
    maxRoom: number,
    max = SHARED_FILE_MAX,
    named?: { keepName: true; owner: number | undefined },
  ): SharedFile | undefined {
    if (!dir || !(maxRoom > 0) || !(max > 0)) return undefined;
    const path = join(dir, `extfn-${process.pid}-${randomBytes(8).toString('hex')}`);
    let fd: number;
    try {
      fd = openSync(path, 'wx+', 0o600); // O_EXCL: never someone else's file
    } catch {
      return undefined;
    }
    try {
      if (named?.owner !== undefined) fchownSync(fd, named.owner, named.owner);
      if (!named) unlinkSync(path);
    } catch {
      closeSync(fd);
      try {
        unlinkSync(path);
      } catch {}
      return undefined;
    }
    const file = new SharedFile(fd, maxRoom, max);
    if (named) file.path = path;
    return file;
  }

  /** Takes its name away (`keepName`): only the open descriptors reach it from then on. */
  unlink(): void {
    if (this.path === undefined) return;
    try {
      unlinkSync(this.path);
    } catch {}
    this.path = undefined;
  }

  /**
   * Reserves room for a result of `room` bytes and a payload of `bytes`,
   * growing the file when needed, and makes sure the room's pages hold
   * memory; undefined when they do not fit its bounds or the file system
   * (a container's 64 MiB /dev/shm: the request then goes on the pipes).
   * `avoid`: the region of the request the worker runs now, which this one
   * must not touch (it is queued behind it): at 0 if it fits before that
   * region, else past it.
   */
  reserve(bytes: number, room: number, avoid?: SharedRegion): SharedRegion | undefined {
    let out = 0;
    if (avoid && aligned(room) + bytes > avoid.out) out = aligned(regionEnd(avoid));
    const at = aligned(out + room);
    const need = at + bytes;
    if (out + room > this.#maxRoom || need > this.#max) return undefined;
    const before = this.#size;
    if (need > before) {
      // At least doubled: chunks of a batch grow and vary in size, and Python maps
      // the file again at every growth.
      const size = Math.min(this.#max, Math.max(Math.ceil(need / STEP) * STEP, 2 * before));
      try {
        ftruncateSync(this.fd, size);
      } catch {
        return undefined;
      }
      this.#size = size;
    }
    if (!this.#fill(out, out + room)) {
      if (this.#size !== before) this.#shrink(before);
      return undefined;
    }
    return { out, room, at, bytes };
  }

  /**
   * Sizes the file to at least `bytes` and fills it with zeros, so that its
   * pages hold memory before any request: a spare worker's (spare-workers.ts),
   * which maps and touches them while the host is idle. False (and nothing
   * kept) when the file system refuses.
   */
  prefill(bytes: number): boolean {
    const size = Math.min(this.#max, Math.ceil(bytes / STEP) * STEP);
    if (size <= this.#size) return this.#fill(0, this.#size);
    const before = this.#size;
    try {
      ftruncateSync(this.fd, size);
    } catch {
      return false;
    }
    this.#size = size;
    if (this.#fill(0, size)) return true;
    this.#shrink(before);
    return false;
  }

  /**
   * Back to `size` after a growth that could not be filled: the pages past
   * it are gone, so none of them counts as written (a later growth fills them).
   */
  #shrink(size: number): void {
    try {
      ftruncateSync(this.fd, size);
      this.#size = size;
      this.#written.fill(0, Math.ceil(size / PAGE));
    } catch {}
  }

  /**
   * Writes zeros over the bytes from `start` to `end` that lie in pages not
   * written yet: the pages then hold memory (ENOSPC here, where the host
   * falls back to the pipes, rather than SIGBUS in a worker). Only inside
   * the range: the pages it shares with a neighbour keep the neighbour's bytes.
   */
  #fill(start: number, end: number): boolean {
    if (end <= start) return true;
    const last = Math.ceil(end / PAGE);
    for (let page = Math.floor(start / PAGE); page < last; ) {
      if (this.#written[page]) {
        page++;
        continue;
      }
      let run = page;
      while (run < last && !this.#written[run] && run - page < ZEROS.length / PAGE) run++;
      const from = Math.max(start, page * PAGE);
      const to = Math.min(end, run * PAGE);
      try {
        if (writeSync(this.fd, ZEROS, 0, to - from, from) !== to - from) return false;
      } catch {
        return false;
      }
      this.#written.fill(1, page, run);
      page = run;
    }
    return true;
  }

  /**
   * Writes the payload's parts one after another from `at`; false when the
   * file system refuses (full): the request then goes on the pipes.
   */
  writePayload(payload: Payload, start: number): boolean {
    let at = start;
    try {
      for (const part of payload instanceof Uint8Array ? [payload] : payload) {
        let done = 0;
        while (done < part.byteLength) {
          done += writeSync(this.fd, part, done, part.byteLength - done, at + done);
        }
        at += part.byteLength;
      }
    } catch {
      return false;
    }
    // its pages hold memory now: a later result room over them needs no zeros
    if (at > start) this.#written.fill(1, Math.floor(start / PAGE), Math.ceil(at / PAGE));
    return true;
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
    this.unlink();
    try {
      closeSync(this.fd);
    } catch {}
  }
}
