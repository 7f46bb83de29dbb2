/**
 * A lock file that one live process holds and others can tell is theirs or
 * left behind: what keeps two root hosts on one machine from leasing the same
 * block of sandbox uids (uid-pool.ts).
 *
 * Node has no flock(), so a lock is a file whose content names its owner by
 * pid and start time (a pid alone can be reused, even by a kernel thread).
 * Every step is one atomic file operation, with no window in which another
 * process could see a lock half made or remove a live one in place of a dead
 * one:
 *
 * - taking: the record is written to a file of our own, then hard-linked to
 *   the lock's name; link(2) fails if the name exists, so exactly one taker wins;
 * - reclaiming a lock whose owner is gone: the file at the name is renamed to
 *   a name of our own, and only if that is the inode we judged dead is it
 *   removed; if a live taker got there in between, its file is linked back;
 * - holding: the holder checks that the name still leads to its inode before
 *   trusting the lock (a stat), so in the one case left, two reclaimers and a
 *   taker interleaved so that a live lock was displaced, its holder stops using it.
 */
import { randomBytes } from 'node:crypto';
import {
  closeSync,
  fstatSync,
  linkSync,
  openSync,
  readFileSync,
  renameSync,
  statSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { namesOfDeadHosts, processExists, statFields } from './proc.js';

/** `pid starttime`: what names a process for as long as it lives. */
function processRecord(pid: number): string | undefined {
  try {
    return `${pid} ${statFields(pid)[19]}`;
  } catch {
    return undefined; // no such process
  }
}

let ownRecord: string | undefined;

/** Whether the owner a lock file names is still running. */
export function ownerAlive(record: string): boolean {
  const [pid, start] = record.trim().split(' ');
  const owner = Number(pid);
  if (!Number.isInteger(owner) || owner <= 0) return false;
  if (start !== undefined) return processRecord(owner) === `${owner} ${start}`;
  return processExists(owner); // an older lock (pid only)
}

/** The inode at `path` and what it says, read through one descriptor so both are of one file. */
function readLock(path: string): { ino: number; record: string } | undefined {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch {
    return undefined;
  }
  try {
    return { ino: fstatSync(fd).ino, record: readFileSync(fd, 'utf8') };
  } finally {
    closeSync(fd);
  }
}

function unlinkQuietly(path: string): void {
  try {
    unlinkSync(path);
  } catch {}
}

/**
 * Removes the files of `take` that a process killed mid-way left in `dir`
 * (`.take-PID-…`, `.stale-PID-…`) once PID runs no more.
 */
export function sweepLeftovers(dir: string): void {
  for (const name of namesOfDeadHosts(dir, /^\.(?:take|stale)-(\d+)-/))
    unlinkQuietly(join(dir, name));
}

export class BlockLock {
  private constructor(
    readonly path: string,
    private readonly ino: number,
  ) {}

  /** The lock at `name` in `dir` if this process can take it now, reclaiming a dead owner's. */
  static take(dir: string, name: string): BlockLock | undefined {
    ownRecord ??= processRecord(process.pid) ?? String(process.pid);
    const path = join(dir, name);
    const unique = `${process.pid}-${randomBytes(6).toString('hex')}`;
    const mine = join(dir, `.take-${unique}`);
    writeFileSync(mine, ownRecord, { mode: 0o600 });
    try {
      for (let attempt = 0; attempt < 3; attempt++) {
        try {
          linkSync(mine, path);
          return new BlockLock(path, statSync(mine).ino);
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
        }
        const found = readLock(path);
        if (!found) continue; // removed meanwhile: try again
        if (ownerAlive(found.record)) return undefined;
        const aside = join(dir, `.stale-${unique}`);
        try {
          renameSync(path, aside);
        } catch {
          continue; // another reclaimer moved it first
        }
        const moved = readLock(aside);
        if (moved?.ino !== found.ino || moved.record !== found.record) {
          // a live taker's lock, made after we read the dead one: give it back
          try {
            linkSync(aside, path);
          } catch {}
          unlinkQuietly(aside);
          return undefined;
        }
        unlinkQuietly(aside);
      }
      return undefined;
    } finally {
      unlinkQuietly(mine);
    }
  }

  /** Whether the lock's name still leads to the file this process made (an inode can be reused). */
  held(): boolean {
    const found = readLock(this.path);
    return found?.ino === this.ino && found.record === ownRecord;
  }

  /** Removes the lock if it is still this process's. */
  release(): void {
    if (this.held()) unlinkQuietly(this.path);
  }
}
