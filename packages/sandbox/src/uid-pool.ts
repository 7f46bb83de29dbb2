/** A uid of its own for every tree a root host starts, leased so host processes never share one. */
import { mkdirSync, readdirSync, statSync } from 'node:fs';
import { BlockLock } from './block-lock.js';

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
 * Uids are leased in blocks of 64 through claim files in a root-only directory
 * (block-lock.ts), so two host processes on one machine never share a uid;
 * a block whose claim this process finds gone is given up before any further
 * uid of it is handed out. A uid that still
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
/** This process's blocks by their first uid. */
const blocks = new Map<number, BlockLock>();
let exitHook = false;

export function hostIsRoot(): boolean {
  return typeof process.getuid === 'function' && process.getuid() === 0;
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

function blockOf(uid: number): number {
  return uid - ((uid - BASE_UID) % BLOCK_SIZE);
}

function leaseBlock(): void {
  mkdirSync(LOCK_DIR, { recursive: true, mode: 0o700 });
  const start = process.pid % BLOCK_COUNT;
  for (let i = 0; i < BLOCK_COUNT; i++) {
    const block = (start + i) % BLOCK_COUNT;
    const first = BASE_UID + block * BLOCK_SIZE;
    if (blocks.has(first)) continue;
    const lock = BlockLock.take(LOCK_DIR, `block-${block}`);
    if (!lock) continue;
    blocks.set(first, lock);
    if (!exitHook) {
      exitHook = true;
      process.once('exit', () => {
        for (const held of blocks.values()) held.release();
      });
    }
    const busy = busyUids(first, first + BLOCK_SIZE);
    for (let uid = first; uid < first + BLOCK_SIZE; uid++) if (!busy.has(uid)) free.push(uid);
    if (free.length > 0) return;
  }
  throw new Error(`no free sandbox uid block in ${LOCK_DIR}`);
}

/** Forgets a block whose lock is no longer this process's, and every free uid of it. */
function giveUp(first: number): void {
  blocks.delete(first);
  for (let i = free.length - 1; i >= 0; i--) if (blockOf(free[i]!) === first) free.splice(i, 1);
  for (const uid of tainted) if (blockOf(uid) === first) tainted.delete(uid);
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
  for (;;) {
    if (free.length === 0) leaseBlock();
    const uid = free.shift()!;
    const first = blockOf(uid);
    if (blocks.get(first)?.held()) return uid;
    giveUp(first);
  }
}

/** Give the uid back once its tree is gone; `clean` false = something of it survives. */
export function releaseUid(uid: number, clean: boolean): void {
  if (!blocks.has(blockOf(uid))) return; // its block was given up
  if (clean) free.push(uid);
  else tainted.add(uid);
}
