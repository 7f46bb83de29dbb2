/** A uid of its own for every tree a root host starts, leased so host processes never share one. */
import {
  closeSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  statSync,
  unlinkSync,
  writeSync,
} from 'node:fs';

/**
 * When the host runs as root, every sandboxed process tree gets a uid of its
 * own from 0x70000000 (1879048192) up: a range systemd documents as unused,
 * far from subordinate-uid ranges (/etc/subuid hands out 100000 + 65536·n),
 * whose rootless containers a kill(-1) must never reach. Three things
 * follow: RLIMIT_NPROC (counted per real uid, ignored for uid 0) bounds one
 * tree without starving the others; the whole tree, setsid() children
 * included, can be ended atomically with kill(-1) sent as that uid; and
 * trees cannot signal or ptrace each other.
 *
 * Uids are leased in blocks of 64 through lock files in a root-only directory,
 * so two host processes on one machine never share a uid. A uid that still
 * owns a process after its tree ended (an orphan the host's init has
 * not reaped yet: zombies count toward RLIMIT_NPROC) is set aside until it owns none.
 */

const BASE_UID = 0x7000_0000;
const BLOCK_SIZE = 64;
const BLOCK_COUNT = 1024;
const LOCK_DIR = '/run/improv-extfn-sandbox';

const free: number[] = [];
/** Uids whose tree left processes (zombies included); retried before a new block is leased. */
const tainted = new Set<number>();
const blocks: string[] = [];
let exitHook = false;

export function hostIsRoot(): boolean {
  return typeof process.getuid === 'function' && process.getuid() === 0;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Uids in [from, to) that own at least one process, zombies included. */
export function busyUids(from: number, to: number): Set<number> {
  const busy = new Set<number>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const { uid } = statSync(`/proc/${name}`);
      if (uid >= from && uid < to) busy.add(uid);
    } catch {
      // the process exited while we looked
    }
  }
  return busy;
}

function tryLock(path: string): boolean {
  try {
    const fd = openSync(path, 'wx', 0o600);
    writeSync(fd, String(process.pid));
    closeSync(fd);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
  }
  let owner = Number.NaN;
  try {
    owner = Number(readFileSync(path, 'utf8'));
  } catch {}
  if (Number.isInteger(owner) && owner > 0 && alive(owner)) return false;
  try {
    unlinkSync(path); // left behind by a host process that died
  } catch {}
  return tryLock(path);
}

function leaseBlock(): void {
  mkdirSync(LOCK_DIR, { recursive: true, mode: 0o700 });
  const start = process.pid % BLOCK_COUNT;
  for (let i = 0; i < BLOCK_COUNT; i++) {
    const block = (start + i) % BLOCK_COUNT;
    const path = `${LOCK_DIR}/block-${block}`;
    if (!tryLock(path)) continue;
    blocks.push(path);
    if (!exitHook) {
      exitHook = true;
      process.once('exit', () => {
        for (const lock of blocks) {
          try {
            unlinkSync(lock);
          } catch {}
        }
      });
    }
    const first = BASE_UID + block * BLOCK_SIZE;
    const busy = busyUids(first, first + BLOCK_SIZE);
    for (let uid = first; uid < first + BLOCK_SIZE; uid++) if (!busy.has(uid)) free.push(uid);
    if (free.length > 0) return;
  }
  throw new Error(`no free sandbox uid block in ${LOCK_DIR}`);
}

/** A uid no other live process tree uses. Only for a root host. */
export function leaseUid(): number {
  if (free.length === 0 && tainted.size > 0) {
    const uids = [...tainted];
    const busy = busyUids(Math.min(...uids), Math.max(...uids) + 1);
    for (const uid of uids) {
      if (busy.has(uid)) continue;
      tainted.delete(uid);
      free.push(uid);
    }
  }
  if (free.length === 0) leaseBlock();
  return free.shift()!;
}

/** Give the uid back once its tree is gone; `clean` false = something of it survives. */
export function releaseUid(uid: number, clean: boolean): void {
  if (clean) free.push(uid);
  else tainted.add(uid);
}
