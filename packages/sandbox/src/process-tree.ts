/**
 * Reads a sandboxed process tree from /proc: the process started for a
 * sandbox (bwrap, or the interpreter itself without namespaces) and every
 * descendant, with thread counts and CPU time. Warm-worker owners use it to
 * see whether a body left work running after its call (threads, children,
 * setsid() ones included: inside the pid namespace an orphan is re-parented
 * to the namespace's pid 1, which is still in the tree).
 */
import { readdirSync, readFileSync } from 'node:fs';

/** One process of a tree, as /proc/PID/stat shows it. */
export interface TreeProcess {
  readonly pid: number;
  readonly parentPid: number;
  /** proc(5) state letter: R running, S sleeping, Z zombie… */
  readonly state: string;
  readonly threads: number;
  /** User + system CPU seconds of all its threads (USER_HZ = 100 on every Linux ABI Node runs on). */
  readonly cpuSeconds: number;
  /** Clock ticks after boot when it started: with the pid, names a process even if pids are reused. */
  readonly startTicks: number;
}

/** A tree at one moment. */
export interface ProcessTree {
  /** The root first, then descendants breadth first. */
  readonly processes: readonly TreeProcess[];
  /** Threads of every process together. */
  readonly threads: number;
  /** CPU seconds of the live processes together. */
  readonly cpuSeconds: number;
}

/** Fields of /proc/PID/stat after the command name (which may hold spaces and parentheses). */
function statFields(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined; // gone meanwhile
  }
}

function readProcess(pid: number): TreeProcess | undefined {
  const fields = statFields(pid);
  if (!fields) return undefined;
  // index 0 is proc(5)'s field 3 (state); utime 14, stime 15, num_threads 20, starttime 22
  return {
    pid,
    parentPid: Number(fields[1]),
    state: fields[0] ?? '?',
    threads: Number(fields[17]) || 0,
    cpuSeconds: (Number(fields[11]) + Number(fields[12])) / 100 || 0,
    startTicks: Number(fields[19]) || 0,
  };
}

/**
 * Children of a process: each thread lists the children it forked in
 * /proc/PID/task/TID/children (Linux 3.5+, CONFIG_PROC_CHILDREN); without
 * that file, one scan of /proc by parent pid.
 */
function childrenOf(pid: number): number[] | undefined {
  let tasks: string[];
  try {
    tasks = readdirSync(`/proc/${pid}/task`);
  } catch {
    return [];
  }
  const out: number[] = [];
  for (const task of tasks) {
    let text: string;
    try {
      text = readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT' && task === String(pid)) {
        return undefined; // no children files on this kernel
      }
      continue; // the thread ended meanwhile
    }
    for (const child of text.split(' ')) if (child.trim()) out.push(Number(child));
  }
  return out;
}

function childrenByScan(): Map<number, number[]> {
  const byParent = new Map<number, number[]>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const fields = statFields(Number(name));
    if (!fields) continue;
    const parent = Number(fields[1]);
    const list = byParent.get(parent) ?? [];
    list.push(Number(name));
    byParent.set(parent, list);
  }
  return byParent;
}

/**
 * The tree under `rootPid` (the pid a sandbox launch reports), or undefined
 * when that process is gone. Linux only; elsewhere always undefined.
 */
export function readProcessTree(rootPid: number): ProcessTree | undefined {
  const root = readProcess(rootPid);
  if (!root) return undefined;
  const processes: TreeProcess[] = [root];
  let scan: Map<number, number[]> | undefined;
  const seen = new Set([rootPid]);
  for (let i = 0; i < processes.length; i++) {
    const pid = processes[i]!.pid;
    let children = scan ? scan.get(pid) : childrenOf(pid);
    if (children === undefined) {
      scan = childrenByScan();
      children = scan.get(pid);
    }
    for (const child of children ?? []) {
      if (seen.has(child)) continue;
      seen.add(child);
      const found = readProcess(child);
      if (found) processes.push(found);
    }
  }
  let threads = 0;
  let cpuSeconds = 0;
  for (const p of processes) {
    threads += p.threads;
    cpuSeconds += p.cpuSeconds;
  }
  return { processes, threads, cpuSeconds };
}
