/**
 * A lock that at most one live process holds: what keeps two root hosts on
 * one machine from leasing the same block of sandbox uids (uid-pool.ts).
 *
 * Node has no flock(). A lock file at a shared name that others take over
 * once its owner is dead cannot be made safe with file operations alone: two
 * reclaimers and a taker can interleave so that a live owner's file is
 * displaced (CI caught that happening). So here no process ever removes or
 * replaces a file a live process made:
 *
 * - a claim is a file of the claimant's own, `NAME.PID.START` (pid and start
 *   time name a process for as long as it lives; a pid alone can be reused);
 * - having made it, the claimant lists the directory and withdraws if any
 *   other live process claims NAME. Of two claimants, the one whose file came
 *   second lists after both exist and sees the other, so two never both keep
 *   a claim (both may withdraw; the caller then tries another name);
 * - a dead process's files are removed by whoever lists them: no live process
 *   can ever make those names again.
 *
 * A file named just NAME is a lock of an earlier version (content `PID` or
 * `PID START`): it counts as a claim while its owner lives. (Hosts of an
 * earlier version do not see claims; do not mix versions on one machine.)
 */
import { closeSync, openSync, readdirSync, readFileSync, statSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { processExists, statFields } from './proc.js';

/** Whether the process `pid` runs and, given `start`, is the one that started then. */
function alive(pid: number, start?: string): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  let stat: string[];
  try {
    stat = statFields(pid);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return false;
    return processExists(pid); // /proc hidden from us (hidepid): ask the kernel
  }
  return start === undefined || stat[19] === start;
}

/** Whether the owner a lock file of an earlier version names (`PID` or `PID START`) still runs. */
function ownerAlive(record: string): boolean {
  const [pid, start] = record.trim().split(' ');
  return alive(Number(pid), start);
}

let ownName: string | undefined;
/** `PID.START` of this process. */
function self(): string {
  ownName ??= `${process.pid}.${statFields(process.pid)[19]}`;
  return ownName;
}

const CLAIM = /^(.+)\.(\d+)\.(\d+)$/;
/** Files of an earlier version's take cut short by a kill: `.take-PID-…`, `.stale-PID-…`. */
const LEFTOVER = /^\.(?:take|stale)-(\d+)-/;

function unlinkQuietly(path: string): void {
  try {
    unlinkSync(path);
  } catch {}
}

/**
 * Whether a live process other than this one claims `name` in `dir`; removes
 * the files of dead processes found on the way.
 */
function claimedByOther(dir: string, name: string): boolean {
  const mine = `${name}.${self()}`;
  let claimed = false;
  for (const entry of readdirSync(dir)) {
    if (entry === mine) continue;
    const claim = CLAIM.exec(entry);
    if (claim) {
      if (alive(Number(claim[2]), claim[3])) claimed ||= claim[1] === name;
      else unlinkQuietly(join(dir, entry));
      continue;
    }
    const leftover = LEFTOVER.exec(entry);
    if (leftover) {
      if (!alive(Number(leftover[1]))) unlinkQuietly(join(dir, entry));
      continue;
    }
    let record = ''; // an earlier version's lock
    try {
      record = readFileSync(join(dir, entry), 'utf8');
    } catch {
      continue; // removed meanwhile
    }
    if (!ownerAlive(record)) unlinkQuietly(join(dir, entry));
    else if (entry === name) claimed = true;
  }
  return claimed;
}

export class BlockLock {
  private constructor(readonly path: string) {}

  /** The lock `name` in `dir` if no other live process holds or is taking it now. */
  static take(dir: string, name: string): BlockLock | undefined {
    const path = join(dir, `${name}.${self()}`);
    try {
      closeSync(openSync(path, 'wx', 0o600));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'EEXIST') return undefined; // ours already
      throw error;
    }
    let claimed = true;
    try {
      claimed = claimedByOther(dir, name);
    } finally {
      if (claimed) unlinkQuietly(path); // withdrawn, or the directory could not be read
    }
    return claimed ? undefined : new BlockLock(path);
  }

  /** Whether this process's claim is still there (someone could have emptied the directory). */
  held(): boolean {
    try {
      statSync(this.path);
      return true;
    } catch {
      return false;
    }
  }

  release(): void {
    unlinkQuietly(this.path);
  }
}
