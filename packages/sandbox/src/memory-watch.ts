/**
 * Where a tree has no cgroup, nothing in the kernel bounds the memory of the
 * tree as a whole: RLIMIT_AS holds each process to `memoryBytes`, but a tree
 * of `processes` of them could hold that many times as much. So the host
 * looks: every WATCH_MS it sums the resident memory of the tree's
 * processes, and once the sum passes the budget a cgroup would hold the tree
 * to (`memoryBytes + tmpfsBytes`) it checks again by proportional share of
 * anonymous memory (Pss_Anon, /proc/PID/smaps_rollup: dearer, it walks the
 * page tables; a page a child still shares with its parent after a fork
 * counts once, a mapped file not at all) and, still past it, kills the tree,
 * which is then reported as a memory limit. A tree with its own /tmp and
 * /dev/shm (restricted) is also charged for the files, directories and links
 * on them (FILE_BYTES each): an empty file takes no block of a tmpfs, so its
 * size does not bound them, but each holds kernel memory no process's
 * resident memory shows. One timer looks at every tree
 * whose turn is due: a tree far from its budget less often (see
 * FILL_BYTES_PER_MS_PER_CORE). A look, not a bound: what a tree touches
 * faster than that rate comes on top until its next look. In a pid namespace (restricted) a process whose parent exits is
 * adopted by the namespace's pid 1, so it stays in the sum.
 */
import { readFileSync, statfsSync, statSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { readProcessTree } from './process-tree.js';

/** How often the watched trees are looked at: each when its next look is due. */
export const WATCH_MS = 100;

/**
 * The fastest a tree is taken to fill memory, in bytes per millisecond per
 * core (2 GiB/s: page faults that zero fresh pages). A tree far from its
 * budget is looked at again only when it could have reached it at that
 * rate, between WATCH_MS and MAX_WATCH_MS: an idle worker's tree, at a few
 * dozen MiB of a 1 GiB budget, every quarter second on 2 cores.
 */
const FILL_BYTES_PER_MS_PER_CORE = (2 * 2 ** 30) / 1000;
const MAX_WATCH_MS = 1_000;

export interface MemoryWatch {
  stop(): void;
  /** Whether the tree passed its budget and was killed for it. */
  readonly over: boolean;
}

/**
 * What the kernel holds for each file, directory or link on a tmpfs (an inode
 * and a dentry, ~1 KiB: what tmpfs itself reserves per inode, BOGO_INODE_SIZE),
 * which neither the tmpfs size nor any rlimit counts. Where a cgroup holds the
 * tree, the kernel charges it there; without one the host counts it here.
 */
export const FILE_BYTES = 1024;

/** Where a restricted tree (or a zygote's worker) has a tmpfs of its own. */
const OWN_TMPFS = ['/tmp', '/dev/shm'];

interface Watched {
  root: () => number | undefined;
  /** Whether `root` has a /tmp and /dev/shm of its own, whose files count (restricted). */
  files: boolean;
  budgetBytes: number;
  kill: () => void;
  over: boolean;
  /** When its next look is due (performance.now()). */
  dueAt: number;
}

/** Every tree watched in this process, and one timer for all of them while there are any. */
const watched = new Set<Watched>();
let ticker: NodeJS.Timeout | undefined;

function lookAtDue(): void {
  const now = performance.now();
  const fill = FILL_BYTES_PER_MS_PER_CORE * availableParallelism();
  for (const tree of watched) {
    if (tree.dueAt > now) continue;
    const pid = tree.root();
    if (pid === undefined) continue; // not started yet, or ended (its stop() comes)
    const files = tree.files ? filesBytes(pid) : 0;
    const held = treeBytes(pid) + files;
    if (held > tree.budgetBytes && treeBytes(pid, true) + files > tree.budgetBytes) {
      tree.over = true;
      watched.delete(tree);
      tree.kill();
      continue;
    }
    const untilFull = Math.max(0, tree.budgetBytes - held) / fill;
    tree.dueAt = now + Math.min(MAX_WATCH_MS, Math.max(WATCH_MS, untilFull));
  }
  if (watched.size === 0) {
    clearInterval(ticker);
    ticker = undefined;
  }
}

/**
 * Watches the tree under `root()` (undefined until it has started and once
 * it has ended) and calls `kill` once when its processes hold more than
 * `budgetBytes` in all. `ownTmpfs`: `root` sits in a mount namespace with a
 * /tmp and /dev/shm of its own (restricted), whose files count too
 * (`filesBytes`); never for a tree that sees the host's.
 */
export function watchTreeMemory(
  root: () => number | undefined,
  budgetBytes: number,
  kill: () => void,
  ownTmpfs = false,
): MemoryWatch {
  const tree: Watched = { root, files: ownTmpfs, budgetBytes, kill, over: false, dueAt: 0 };
  watched.add(tree);
  if (!ticker) {
    ticker = setInterval(lookAtDue, WATCH_MS);
    ticker.unref(); // the trees' own work keeps the process alive, not this timer
  }
  return {
    stop: () => watched.delete(tree),
    get over() {
      return tree.over;
    },
  };
}

/**
 * What `root` and every process below it hold, in bytes: resident memory
 * (proc(5)'s rss, read with the tree itself: process-tree.ts); with
 * `shared`, each process's Pss_Anon instead (a page shared by n processes
 * counts 1/n in each, and the interpreter's mapped files not at all), where
 * the kernel gives it (Linux 5.10+; else its resident memory). The first
 * errs high (file pages count), so it only says when to ask the second.
 */
export function treeBytes(root: number, shared = false): number {
  let bytes = 0;
  for (const process of readProcessTree(root)?.processes ?? []) {
    bytes += processBytes(process.pid, process.residentPages * pageSize(), shared);
  }
  return bytes;
}

/**
 * What one process of a tree holds: `resident` bytes, or with `shared` its
 * Pss_Anon where the kernel gives it. A process gone since the tree was
 * listed holds nothing: its resident memory then counted the pages it
 * shared with its parent in full, and three children exiting at once
 * between the listing and the look made a tree within budget look 3× over it.
 */
export function processBytes(pid: number, resident: number, shared: boolean): number {
  if (!shared) return resident;
  const pss = proportionalAnonymousBytesOf(pid);
  return pss === 'gone' ? 0 : (pss ?? resident);
}

/** statfs(2)'s f_type of a tmpfs. */
const TMPFS_MAGIC = 0x01021994;

/** The devices of this process's /tmp and /dev/shm (the host's): found once. */
let hostDevices: Set<number> | undefined;
function hostTmpDevices(): Set<number> {
  if (hostDevices === undefined) {
    hostDevices = new Set();
    for (const dir of OWN_TMPFS) {
      try {
        hostDevices.add(statSync(dir).dev);
      } catch {
        // no such directory here: nothing of the host's to mistake for the tree's
      }
    }
  }
  return hostDevices;
}

/**
 * FILE_BYTES for every inode in use on the /tmp and /dev/shm that `root`
 * sees (through /proc/PID/root, in its mount namespace): files, directories
 * and links, each of which pins kernel memory. 0 where they cannot be read,
 * and for a directory that is not yet a tmpfs of the tree's own: until bwrap
 * has mounted the tree's (it clones into a copy of the host's mounts first),
 * the path is the host's /tmp, whose file system's inodes (half a million on
 * a root file system is common) would have counted as the tree's and killed
 * a small budget's worker while it started.
 */
export function filesBytes(root: number): number {
  let inodes = 0;
  const host = hostTmpDevices();
  for (const dir of OWN_TMPFS) {
    const path = `/proc/${root}/root${dir}`;
    try {
      if (host.has(statSync(path).dev)) continue;
      const fs = statfsSync(path);
      if (fs.type === TMPFS_MAGIC) inodes += Math.max(0, fs.files - fs.ffree);
    } catch {
      // gone meanwhile, or not ours to look at
    }
  }
  return inodes * FILE_BYTES;
}

/** The size of a page, which proc(5)'s rss counts in: found once. */
let pageBytes: number | undefined;
function pageSize(): number {
  if (pageBytes === undefined) {
    // this process's resident memory both ways, in pages and in kB: the nearest power of two
    const pages = Number(readFileSync('/proc/self/statm', 'utf8').split(' ')[1]);
    const kib = Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1]);
    const guess = (kib * 1024) / pages;
    pageBytes = 2 ** Math.round(Math.log2(Number.isFinite(guess) && guess > 0 ? guess : 4096));
  }
  return pageBytes;
}

/**
 * Pss_Anon of one process; 'gone' when the process has exited (or is a
 * zombie, whose smaps_rollup is empty); undefined where the kernel or
 * access does not give it.
 */
function proportionalAnonymousBytesOf(pid: number): number | 'gone' | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    return code === 'ENOENT' || code === 'ESRCH' ? 'gone' : undefined;
  }
  if (text === '') return 'gone';
  const kib = /^Pss_Anon:\s+(\d+) kB/m.exec(text)?.[1];
  return kib === undefined ? undefined : Number(kib) * 1024;
}
