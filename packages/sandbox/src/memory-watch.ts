/**
 * Where a tree has no cgroup, nothing in the kernel bounds the memory of the
 * tree as a whole: RLIMIT_AS holds each process to `memoryBytes`, but a tree
 * of `processes` of them could hold that many times as much. So the host
 * looks: every WATCH_MS it sums the anonymous memory (RssAnon) of the tree's
 * processes, and once the sum passes the budget a cgroup would hold the tree
 * to (`memoryBytes + tmpfsBytes`) it kills the tree, which is then reported
 * as a memory limit. A page a child still shares with its parent after a
 * fork counts in full in each RssAnon, so a sum past the budget is checked
 * again by proportional share (Pss_Anon, /proc/PID/smaps_rollup: dearer, it
 * walks the page tables) before the tree is killed. A look, not a bound:
 * what the tree touches within one interval comes on top (a few GB/s per
 * core). In a pid namespace (restricted) a process whose parent exits is
 * adopted by the namespace's pid 1, so it stays in the sum.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { childrenOf } from './proc.js';

/** How often a tree's memory is summed. */
export const WATCH_MS = 100;

/** Most processes one sum visits (a tree's `processes` limit is far below). */
const MOST_PROCESSES = 4096;

export interface MemoryWatch {
  stop(): void;
  /** Whether the tree passed its budget and was killed for it. */
  readonly over: boolean;
}

/**
 * Watches the tree under `root()` (undefined once it has ended) and calls
 * `kill` once when its processes hold more than `budgetBytes` in all.
 */
export function watchTreeMemory(
  root: () => number | undefined,
  budgetBytes: number,
  kill: () => void,
): MemoryWatch {
  let over = false;
  const timer = setInterval(() => {
    const pid = root();
    if (pid === undefined || over) return;
    if (anonymousBytesOfTree(pid) > budgetBytes && anonymousBytesOfTree(pid, true) > budgetBytes) {
      over = true;
      clearInterval(timer);
      kill();
    }
  }, WATCH_MS);
  timer.unref();
  return {
    stop: () => clearInterval(timer),
    get over() {
      return over;
    },
  };
}

/**
 * RssAnon of `root` and every process below it, in bytes; with `shared`,
 * Pss_Anon (a page shared by n processes counts 1/n in each), where the
 * kernel gives it (Linux 5.10+; else RssAnon).
 */
export function anonymousBytesOfTree(root: number, shared = false): number {
  let bytes = 0;
  const seen = new Set<number>();
  const stack = [root];
  while (stack.length > 0 && seen.size < MOST_PROCESSES) {
    const pid = stack.pop()!;
    if (seen.has(pid)) continue;
    seen.add(pid);
    bytes += (shared ? proportionalAnonymousBytesOf(pid) : undefined) ?? anonymousBytesOf(pid);
    for (const child of childrenOfProcess(pid)) stack.push(child);
  }
  return bytes;
}

/** RssAnon of one process (0 once it is gone or a zombie). */
function anonymousBytesOf(pid: number): number {
  try {
    const kib = /^RssAnon:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return Number(kib ?? 0) * 1024;
  } catch {
    return 0;
  }
}

/** Pss_Anon of one process; undefined where the kernel or access does not give it. */
function proportionalAnonymousBytesOf(pid: number): number | undefined {
  try {
    const kib = /^Pss_Anon:\s+(\d+) kB/m.exec(
      readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'),
    )?.[1];
    return kib === undefined ? undefined : Number(kib) * 1024;
  } catch {
    return undefined;
  }
}

/**
 * Children of every thread of a process: a body can fork from a thread of its
 * own, and /proc/PID/task/TID/children lists only that thread's.
 */
function childrenOfProcess(pid: number): number[] {
  let tasks: string[];
  try {
    tasks = readdirSync(`/proc/${pid}/task`);
  } catch {
    return [];
  }
  const out: number[] = [];
  for (const tid of tasks) {
    try {
      for (const child of readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').split(' ')) {
        if (child) out.push(Number(child));
      }
    } catch (error) {
      // no CONFIG_PROC_CHILDREN: a scan of /proc by parent pid, which names the process
      if ((error as NodeJS.ErrnoException).code === 'ENOENT' && tid === String(pid)) {
        return childrenOf(pid);
      }
    }
  }
  return out;
}
