/**
 * Reads a sandboxed process tree from /proc: the process started for a
 * sandbox (bwrap, or the interpreter itself without namespaces) and every
 * descendant, with thread counts and CPU time. Warm-worker owners use it to
 * see whether a body left work running after its call (threads, children,
 * setsid() ones included: inside the pid namespace an orphan is re-parented
 * to the namespace's pid 1, which is still in the tree).
 *
 * A warm worker's tree is read after every request, so `ProcessTreeReader`
 * keeps its /proc files open and re-reads them at offset 0: one pread per
 * file instead of open + read + close (about 5x less host CPU). A /proc fd
 * names the process itself, not its number, so a reused pid is never misread.
 */
import { closeSync, openSync, readdirSync, readSync } from 'node:fs';

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
  /** Resident pages (proc(5)'s rss): anonymous, file and shared memory together. */
  readonly residentPages: number;
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

/** Reads small /proc files through fds it keeps open until `release`. */
class ProcFiles {
  readonly #open = new Map<string, number>();
  #used = new Set<string>();
  #buffer = Buffer.alloc(4096);

  /** The file's text, or undefined when it cannot be read (the process or thread is gone). */
  read(path: string): string | undefined {
    let fd = this.#open.get(path);
    if (fd === undefined) {
      try {
        fd = openSync(path, 'r');
      } catch {
        return undefined;
      }
      this.#open.set(path, fd);
    }
    this.#used.add(path);
    try {
      for (;;) {
        const n = readSync(fd, this.#buffer, 0, this.#buffer.length, 0);
        if (n < this.#buffer.length) return this.#buffer.toString('latin1', 0, n);
        this.#buffer = Buffer.alloc(this.#buffer.length * 2); // a long children list
      }
    } catch {
      this.#drop(path, fd);
      return undefined;
    }
  }

  /** Closes the files the last pass did not read (processes and threads that left). */
  sweep(): void {
    for (const [path, fd] of this.#open) if (!this.#used.has(path)) this.#drop(path, fd);
    this.#used = new Set();
  }

  release(): void {
    for (const [path, fd] of this.#open) this.#drop(path, fd);
  }

  #drop(path: string, fd: number): void {
    this.#open.delete(path);
    try {
      closeSync(fd);
    } catch {
      // already closed
    }
  }
}

/** Fields of /proc/PID/stat after the command name (which may hold spaces and parentheses). */
function statFields(files: ProcFiles, pid: number): string[] | undefined {
  const stat = files.read(`/proc/${pid}/stat`);
  return stat === undefined ? undefined : stat.slice(stat.lastIndexOf(')') + 2).split(' ');
}

function readProcess(files: ProcFiles, pid: number): TreeProcess | undefined {
  const fields = statFields(files, pid);
  if (!fields) return undefined;
  // index 0 is proc(5)'s field 3 (state); utime 14, stime 15, num_threads 20, starttime 22, rss 24
  return {
    pid,
    parentPid: Number(fields[1]),
    state: fields[0] ?? '?',
    threads: Number(fields[17]) || 0,
    cpuSeconds: (Number(fields[11]) + Number(fields[12])) / 100 || 0,
    startTicks: Number(fields[19]) || 0,
    residentPages: Number(fields[21]) || 0,
  };
}

/**
 * Children of a process: each thread lists the children it forked in
 * /proc/PID/task/TID/children (Linux 3.5+, CONFIG_PROC_CHILDREN); without
 * that file, one scan of /proc by parent pid.
 */
function childrenOf(files: ProcFiles, process: TreeProcess): number[] | undefined {
  const { pid } = process;
  let tasks: string[];
  if (process.threads === 1) {
    tasks = [String(pid)]; // the process is its only thread: no directory read
  } else {
    try {
      tasks = readdirSync(`/proc/${pid}/task`);
    } catch {
      return [];
    }
  }
  const out: number[] = [];
  for (const task of tasks) {
    const text = files.read(`/proc/${pid}/task/${task}/children`);
    if (text === undefined) {
      if (task === String(pid) && !hasChildrenFiles(pid)) return undefined; // no children files on this kernel
      continue; // the thread ended meanwhile
    }
    for (const child of text.split(' ')) if (child.trim()) out.push(Number(child));
  }
  return out;
}

function hasChildrenFiles(pid: number): boolean {
  try {
    closeSync(openSync(`/proc/${pid}/task/${pid}/children`, 'r'));
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code !== 'ENOENT';
  }
}

/** Every process on the host by parent; its files are closed at once (they are not the tree's). */
function childrenByScan(): Map<number, number[]> {
  const files = new ProcFiles();
  const byParent = new Map<number, number[]>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const fields = statFields(files, Number(name));
    files.release();
    if (!fields) continue;
    const parent = Number(fields[1]);
    const list = byParent.get(parent) ?? [];
    list.push(Number(name));
    byParent.set(parent, list);
  }
  return byParent;
}

function readTree(files: ProcFiles, rootPid: number): ProcessTree | undefined {
  const root = readProcess(files, rootPid);
  if (!root) return undefined;
  const processes: TreeProcess[] = [root];
  let scan: Map<number, number[]> | undefined;
  const seen = new Set([rootPid]);
  for (let i = 0; i < processes.length; i++) {
    const process = processes[i]!;
    let children = scan ? scan.get(process.pid) : childrenOf(files, process);
    if (children === undefined) {
      scan = childrenByScan();
      children = scan.get(process.pid);
    }
    for (const child of children ?? []) {
      if (seen.has(child)) continue;
      seen.add(child);
      const found = readProcess(files, child);
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

/**
 * The tree under `rootPid` (the pid a sandbox launch reports), or undefined
 * when that process is gone. Linux only; elsewhere always undefined.
 */
export function readProcessTree(rootPid: number): ProcessTree | undefined {
  const files = new ProcFiles();
  try {
    return readTree(files, rootPid);
  } finally {
    files.release();
  }
}

/**
 * Reads one tree again and again with its /proc files kept open. `close()`
 * releases them; a reader that is not closed holds a few fds until then.
 */
export class ProcessTreeReader {
  readonly #rootPid: number;
  readonly #files = new ProcFiles();

  constructor(rootPid: number) {
    this.#rootPid = rootPid;
  }

  /** The tree now, or undefined when its root is gone. */
  read(): ProcessTree | undefined {
    try {
      return readTree(this.#files, this.#rootPid);
    } finally {
      this.#files.sweep();
    }
  }

  close(): void {
    this.#files.release();
  }
}
